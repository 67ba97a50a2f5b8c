#!/bin/sh
# mh_cleanup.sh - deletes what a killed multi-host test (tests/mh_*) left:
# namespaces mh<pid>-h<k>, links mhbr<pid> and mhv<pid>h<k>, of processes that
# no longer run.  The tests do this themselves at start; this is for a
# machine where none will run again.  Needs root.  -n: only list.
set -u
dry=0
[ "${1:-}" = "-n" ] && dry=1
alive() { [ -d "/proc/$1" ] && case "$(cat /proc/$1/comm 2>/dev/null)" in mh_*|lt-mh_*) true ;; *) false ;; esac; }
run() { echo "$*"; [ $dry -eq 1 ] || "$@"; }
for ns in $(ip netns list 2>/dev/null | awk '{print $1}'); do
  pid=$(echo "$ns" | sed -n 's/^mh\([0-9][0-9]*\)-h[0-9][0-9]*$/\1/p')
  [ -n "$pid" ] && ! alive "$pid" && run ip netns del "$ns"
done
for dev in $(ls /sys/class/net); do
  pid=$(echo "$dev" | sed -n -e 's/^mhbr\([0-9][0-9]*\)$/\1/p' -e 's/^mhv\([0-9][0-9]*\)h[0-9][0-9]*$/\1/p')
  [ -n "$pid" ] && ! alive "$pid" && [ -e "/sys/class/net/$dev" ] && run ip link del "$dev"
done
exit 0
