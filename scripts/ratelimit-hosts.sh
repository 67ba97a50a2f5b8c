#!/usr/bin/env bash
# Rate-limited test hosts on one machine: H network namespaces on a bridge
# of their own (as the multi-host tests make them, tests/mh_harness.c), each
# host's link shaped by tc's tbf in both directions (this kernel has tbf,
# no netem: no added delay), and Open MPI jobs started across them.
#
#   scripts/ratelimit-hosts.sh up H RATE [BURST]  e.g. up 4 5gbit; BURST is
#                                             tbf's bucket (default 1mb)
#   scripts/ratelimit-hosts.sh run L CMD...   L ranks per host, mpirun across the H hosts
#   scripts/ratelimit-hosts.sh down
#
# Hosts are namespaces rl-h0..rl-hH-1 at 10.214.0.10+k on bridge rlbr0
# (10.214.0.1 in the root namespace, where mpirun runs).  `run` starts one
# Open MPI daemon per host through an rsh agent that enters the namespace
# (no ssh), sets MOECCL_HOSTID to the host's name (namespaces share the
# machine's host name, so moeccl would see one node otherwise) and keeps
# moeccl's and Open MPI's sockets on the shaped links.  Needs root,
# iproute2 and tc.  The namespaces share the machine's cores: shaping makes
# the links between hosts slow, not the hosts apart.
set -euo pipefail

BR=rlbr0
SUBNET=10.214.0
NSFILE=/run/moeccl-ratelimit.hosts

die() { echo "ratelimit-hosts: $*" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || die "needs root (ip netns, tc)"

down() {
  if [ -f "$NSFILE" ]; then
    while read -r ns; do
      ip netns del "$ns" 2>/dev/null || true
      rm -rf "/tmp/rl-$ns" "/dev/shm/rl-$ns"
    done < "$NSFILE"
    rm -f "$NSFILE"
  fi
  ip link del "$BR" 2>/dev/null || true
}

# tbf on dev (in namespace ns, or the root one when ns is empty).
shape() {
  local ns=$1 dev=$2 rate=$3 burst=$4
  # burst: at least rate / HZ; 1 MiB suits 1-10 Gbit/s.  A call that moves
  # less than it per host after an idle gap goes at the bridge's speed: at
  # 250 Mbit/s 1 MiB is 32 ms of the link, so small sizes measure the bucket.
  ip ${ns:+-n "$ns"} link set "$dev" txqueuelen 10000
  tc ${ns:+-n "$ns"} qdisc replace dev "$dev" root tbf rate "$rate" burst "$burst" latency 100ms
}

up() {
  local hosts=$1 rate=$2 burst=${3:-1mb}
  [[ $hosts =~ ^[0-9]+$ ]] && [ "$hosts" -ge 2 ] && [ "$hosts" -le 16 ] || die "hosts: 2 to 16"
  [[ $rate =~ ^[0-9]+(\.[0-9]+)?[kmg]?bit$ ]] || die "rate like 5gbit"
  [[ $burst =~ ^[0-9]+[km]?b$ ]] || die "burst like 128kb or 1mb"
  down
  ip link add "$BR" type bridge 2>/dev/null || die "cannot create bridge $BR"
  ip addr add "$SUBNET.1/24" dev "$BR"
  ip link set "$BR" up
  : > "$NSFILE"
  for ((k = 0; k < hosts; k++)); do
    local ns=rl-h$k veth=rlv$k
    ip netns add "$ns"
    echo "$ns" >> "$NSFILE"
    ip link add "$veth" type veth peer name eth0 netns "$ns"
    ip link set "$veth" master "$BR"
    ip link set "$veth" up
    ip -n "$ns" addr add "$SUBNET.$((10 + k))/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
    shape "$ns" eth0 "$rate" "$burst"  # host -> bridge
    shape "" "$veth" "$rate" "$burst"  # bridge -> host
  done
  # Reachable: a connection to a closed port is refused at once (no ping
  # here); a timeout (124) means the packet went nowhere.
  for ((k = 1; k < hosts; k++)); do
    local rc=0
    timeout 3 ip netns exec rl-h0 bash -c "echo > /dev/tcp/$SUBNET.$((10 + k))/9" 2> /dev/null ||
      rc=$?
    [ "$rc" -ne 124 ] || die "rl-h0 cannot reach rl-h$k"
  done
  echo "$hosts hosts rl-h0..rl-h$((hosts - 1)) at $SUBNET.10.., links shaped to $rate each way (burst $burst)"
}

run() {
  local per=$1
  shift
  [ -f "$NSFILE" ] || die "no hosts: run 'up' first"
  [[ $per =~ ^[0-9]+$ ]] && [ "$per" -ge 1 ] || die "ranks per host: a positive number"
  local agent hosts="" n=0
  agent=$(mktemp /tmp/rl-agent.XXXXXX)
  # Open MPI calls the agent as "agent [options] HOST COMMAND...": enter
  # HOST's namespace and run the daemon's command line there.
  cat > "$agent" <<'EOF'
#!/bin/bash
while [ "${1#-}" != "$1" ]; do shift; done
host=$1; shift
# The hosts share the machine's host name: Open MPI's session directory and
# shared-memory segments are named after it, so each host gets its own.
mkdir -p "/tmp/rl-$host" "/dev/shm/rl-$host"
exec ip netns exec "$host" env MOECCL_HOSTID="$host" OMPI_MCA_orte_tmpdir_base="/tmp/rl-$host" \
  OMPI_MCA_btl_vader_backing_directory="/dev/shm/rl-$host" /bin/sh -c "$*"
EOF
  chmod +x "$agent"
  while read -r ns; do hosts+="${hosts:+,}$ns:$per"; n=$((n + per)); done < "$NSFILE"
  local rc=0
  mpirun --allow-run-as-root --oversubscribe -np "$n" -H "$hosts" \
    --mca plm_rsh_agent "$agent" --mca plm_rsh_no_tree_spawn 1 \
    --mca oob_tcp_if_include "$SUBNET.0/24" --mca btl_tcp_if_include "$SUBNET.0/24" \
    --mca btl self,vader,tcp \
    -x MOECCL_SOCKET_IFNAME=eth0 -x PATH ${LD_LIBRARY_PATH:+-x LD_LIBRARY_PATH} \
    "$@" || rc=$?
  rm -f "$agent"
  return $rc
}

case "${1:-}" in
  up) [ $# -eq 3 ] || [ $# -eq 4 ] || die "usage: up HOSTS RATE [BURST]"; shift; up "$@" ;;
  down) down ;;
  run) [ $# -ge 3 ] || die "usage: run RANKS_PER_HOST CMD..."; shift; run "$@" ;;
  *) die "usage: $0 up HOSTS RATE [BURST] | run RANKS_PER_HOST CMD... | down" ;;
esac
