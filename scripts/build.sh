#!/usr/bin/env bash
# Builds moeccl out of tree: scripts/build.sh DIR [CONFIGURE-ARGS...]
#   scripts/build.sh build --enable-werror
#   scripts/build.sh build-asan CFLAGS='-O1 -g -fsanitize=address' LDFLAGS=-fsanitize=address
# Generates ./configure when it is missing or older than its inputs, configures
# DIR (again from scratch when the arguments differ from DIR's last ones, or
# DIR was configured by hand since, so that no object built with other flags
# survives) and runs make -j.  Keep nothing of value in DIR: it may be removed.
set -euo pipefail

[ $# -ge 1 ] || { echo "usage: $0 DIR [CONFIGURE-ARGS...]" >&2; exit 2; }
dir=$1
shift
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD

# An input of autoreconf newer than ./configure (outside the build folders).
newer_input() {
  find . \( -path './build*' -o -path ./.git \) -prune -o \
    \( -name configure.ac -o -name Makefile.am -o -name local.mk \) -newer configure -print |
    head -n 1
}
if [ ! -x configure ] || [ -n "$(newer_input)" ]; then
  ./autogen.sh
fi

# DIR/.configure-args: the arguments this script gave, then the ones
# config.status says DIR was configured with.  The second line catches a
# `../configure` run by hand in DIR since (the README's steps), which the
# first alone would miss.
stamp="$dir/.configure-args"
args=$(printf '%q ' "$@")
stamp_now() { printf '%s\n%s\n' "$args" "$("$dir/config.status" --config 2>/dev/null)"; }
if [ ! -f "$dir/Makefile" ] || [ ! -x "$dir/config.status" ] ||
  [ "$(cat "$stamp" 2>/dev/null)" != "$(stamp_now)" ]; then
  [ ! -d "$dir" ] || echo "build.sh: $dir was configured otherwise; configuring it afresh"
  rm -rf "$dir"
  mkdir -p "$dir"
  # configure's full output goes to DIR/configure.out; its warnings and
  # closing summary are what matter here.
  if ! (cd "$dir" && "$root/configure" "$@" >configure.out 2>&1); then
    tail -n 30 "$dir/configure.out"
    echo "build.sh: configure failed in $dir (see $dir/config.log)" >&2
    exit 1
  fi
  grep -i 'warning' "$dir/configure.out" || true
  sed -n '/^moeccl .* configured$/,$p' "$dir/configure.out"
  stamp_now >"$stamp"
fi

make --no-print-directory -C "$dir" -j"$(nproc)"
