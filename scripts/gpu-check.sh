#!/usr/bin/env bash
# The one-call GPU check (issue 10), run from the repository root on a GPU
# machine with build/ carried from a build machine (the GPU machine has no
# autotools): ./scripts/build.sh build here first, then
#   run: command "./scripts/gpu-check.sh", carry ["build"]
# Every stage has its own timeout, so one hang cannot take the device time;
# the logs go to $OUT (default /tmp/gpu-check).  Stages:
#   0. facts: GPU, driver, glibc;
#   1. the capability probe of ../shared/gpu/ipc_probe.c when carried as
#      build/ipc_probe (VMM fds over a Unix socket, legacy IPC, stream
#      memory operations across processes, copy bandwidth);
#   2. tests/test_device on the CUDA backend (MOECCL_DEVICE=cuda): VMM
#      allocation, export as a file descriptor to another process, in-order
#      streams, flag waits and writes, host functions, the refusal of device
#      buffers by calls;
#   3. tests/mp_device on the CUDA backend, 2, 4 and 8 ranks on the one GPU
#      (forked before any CUDA call): all-to-all(v) and send/recv on
#      moecclMemAllocDevice buffers through the same-node device path (VMM
#      descriptors over Unix sockets, the copy engine), calls on a CUDA
#      stream (host function + stream flag wait), the refusals;
#   4. the NCCL drop-in's own test (host memory) on that machine's loader.
# nccl-tests on the drop-in and a2a_perf --baseline nccl are added here as
# they land.
set -u
OUT=${OUT:-/tmp/gpu-check}
mkdir -p "$OUT"
B=build
export LD_LIBRARY_PATH="$PWD/$B/.libs:$PWD/$B/shim/.libs:${LD_LIBRARY_PATH:-}"
# a test's binary: libtool keeps the real one in .libs when it links shared
bin() { if [ -x "$B/tests/.libs/$1" ]; then echo "$B/tests/.libs/$1"; else echo "$B/tests/$1"; fi; }
stage() { # stage NAME SECONDS COMMAND...
  local name=$1 limit=$2
  shift 2
  echo "== $name (limit ${limit}s)"
  timeout -k 5 "$limit" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  tail -n 40 "$OUT/$name.log"
  echo "== $name: rc=$rc"
  echo "$name $rc" >>"$OUT/summary.txt"
}
: >"$OUT/summary.txt"
stage facts 30 bash -c 'nvidia-smi --query-gpu=name,driver_version,memory.total,compute_mode \
  --format=csv; ldd --version | head -1; ls -l /dev/nvidia* | head; uname -a'
if [ -x "$B/ipc_probe" ]; then stage probe 90 "$B/ipc_probe"; fi
stage device 120 env MOECCL_DEVICE=cuda MOECCL_DEBUG=INFO MOECCL_DEBUG_SUBSYS=INIT \
  "$(bin test_device)"
stage mp_device 180 env MOECCL_DEVICE=cuda MP_VARIANTS=0 "$(bin mp_device)" 2 4 8
stage shim 60 "$(bin test_nccl_shim)"
echo "== summary (stage rc; 0 passed, 77 skipped)"
cat "$OUT/summary.txt"
