#!/usr/bin/env bash
# Installs the Debian/Ubuntu packages that build, test and benchmark moeccl.
# Idempotent: when every package is installed already it touches nothing
# (no apt-get update, no network).  Runs apt-get as root, or through sudo.
set -euo pipefail

packages=(
  build-essential autoconf automake libtool pkg-config
  libhwloc-dev hwloc
  libfabric-dev
  libucx-dev
  libopenmpi-dev openmpi-bin
  libcmocka-dev
  libopenblas-dev
  valgrind
  # the fuzz harnesses (scripts/fuzz.sh): Debian 12's clang brings libFuzzer
  # and the sanitizers' runtimes through its recommended libclang-rt-14-dev
  clang
  iproute2
  python3-matplotlib python3-numpy
  # tests/test_torch_dropin.py (its gloo mode runs here; the NCCL mode needs a GPU)
  python3-torch
  # pip install ./python (the moeccl package; setuptools builds it offline)
  python3-pip python3-setuptools python3-wheel
)

if ! command -v dpkg-query >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
  echo "install-deps: not a Debian-based system; install these yourself: ${packages[*]}" >&2
  exit 0
fi

missing=()
for pkg in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null || true)
  [ "$status" = installed ] || missing+=("$pkg")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
  as_root=()
elif command -v sudo >/dev/null 2>&1; then
  as_root=(sudo)
else
  echo "install-deps: missing ${missing[*]}, and neither root nor sudo to install them" >&2
  exit 1
fi

echo "install-deps: installing ${missing[*]}"
"${as_root[@]}" apt-get update -q
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
  apt-get install -y -q "${missing[@]}"
