#!/usr/bin/env bash
# The one-call GPU check (issue 10), run from the repository root of a clean
# clone on a machine with one GPU and nothing but the CUDA driver, toolkit,
# a C compiler and Python: no autotools, no MPI, no network.
#
#   on a build machine:  scripts/gpu-prep.sh [NCCL_TESTS_SRC]   (gpu-carry/)
#   on the GPU machine:  scripts/gpu-check.sh                   (carry gpu-carry)
#
# gpu-carry/ brings what the GPU machine cannot fetch: Open MPI's PyPI wheel
# (nccl-tests needs MPI to put several processes on one GPU) and nccl-tests'
# binaries, built unchanged.  Without it the nccl-tests stages are skipped
# (status 77) and say why; everything else still runs.  moeccl itself is
# built here with the C compiler alone (scripts/plain-build.sh), unless
# BUILD=DIR names an autotools build directory to use instead.
#
# Stages, each with its own timeout, all within GPU_CHECK_BUDGET seconds
# (default 400; a stage gets what is left, and is skipped with status 124
# when nothing is):
#   facts        GPU, driver, glibc
#   build        scripts/plain-build.sh into PLAIN_DIR (default build-plain;
#                the CUDA backend loads libcuda.so.1 with dlopen)
#   probe        gpu-carry/ipc_probe, the capability probe, when carried
#   device       tests/test_device on the CUDA backend
#   mp_device    tests/mp_device on 2, 4 and 8 ranks of the one GPU
#   shim         the NCCL drop-in's own test (host memory)
#   dev_perf_N   a2a_dev_perf on N = 2, 4, 8 ranks, 1 MiB to DEV_PERF_MAX (256M): moeccl, NCCL (where it
#                runs several ranks on one GPU) and the device copy roofline
#   nt_*         nccl-tests alltoall_perf (2, 4, 8 ranks), sendrecv_perf and
#                all_reduce_perf (4 ranks) on moeccl's libnccl.so.2
#   summary      scripts/gpu-summary.py: $OUT/summary.json with every
#                stage's status, the rows, and the targets of issue 10's
#                section 7 checked
# Logs and JSON go to $OUT (default /tmp/gpu-check).  GPU_CHECK_DEVICE=emu
# runs the same stages on the host emulation (a dry run of this script on a
# machine without a GPU; the nccl-tests stages then skip).
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu-check}
DEV=${GPU_CHECK_DEVICE:-cuda}
BUDGET=${GPU_CHECK_BUDGET:-400}
CARRY=${GPU_CARRY:-$PWD/gpu-carry}
mkdir -p "$OUT"
: >"$OUT/summary.txt"
start=$(date +%s)

stage() { # stage NAME SECONDS COMMAND...: runs it with the smaller of its limit and the budget left
  local name=$1 limit=$2
  shift 2
  local left=$((BUDGET - ($(date +%s) - start)))
  [ "$left" -lt "$limit" ] && limit=$left
  if [ "$limit" -lt 5 ]; then
    echo "== $name: skipped, the budget of ${BUDGET}s is spent"
    echo "$name 124 0" >>"$OUT/summary.txt"
    return 124
  fi
  echo "== $name (limit ${limit}s)"
  local t0 rc
  t0=$(date +%s)
  timeout -k 5 "$limit" "$@" >"$OUT/$name.log" 2>&1
  rc=$?
  tail -n 25 "$OUT/$name.log"
  echo "== $name: rc=$rc in $(($(date +%s) - t0))s"
  echo "$name $rc $(($(date +%s) - t0))" >>"$OUT/summary.txt"
  return $rc
}
skip() { # skip NAME WHY
  echo "== $1: skipped: $2"
  echo "$2" >"$OUT/$1.log"
  echo "$1 77 0" >>"$OUT/summary.txt"
}

stage facts 20 bash -c 'nvidia-smi --query-gpu=name,driver_version,memory.total,compute_mode \
  --format=csv; nvidia-smi topo -m; ldd --version | head -1; uname -a; nproc; \
  ls /usr/local/cuda/lib64/libnccl.so* 2>/dev/null; cc --version | head -1'

# moeccl: an autotools build carried in BUILD=DIR, else the plain build
if [ -n "${BUILD:-}" ]; then
  lib=$BUILD/.libs shimlib=$BUILD/shim/.libs
  bin() { if [ -x "$BUILD/tests/.libs/$1" ]; then echo "$BUILD/tests/.libs/$1"; else echo "$BUILD/tests/$1"; fi; }
  perf=$BUILD/perf/a2a_dev_perf
else
  plain=${PLAIN_DIR:-$PWD/build-plain}
  stage build 120 ./scripts/plain-build.sh "$plain"
  lib=$plain/lib shimlib=$plain/lib
  bin() { echo "$plain/bin/$1"; }
  perf=$plain/bin/a2a_dev_perf
fi
export LD_LIBRARY_PATH="$lib:$shimlib:${LD_LIBRARY_PATH:-}"
export MOECCL_DEVICE=$DEV

if [ -x "$CARRY/ipc_probe" ] && [ "$DEV" = cuda ]; then stage probe 60 "$CARRY/ipc_probe"; fi
stage device 60 env MOECCL_DEBUG=INFO MOECCL_DEBUG_SUBSYS=INIT "$(bin test_device)"
stage mp_device 150 env MP_VARIANTS=0 "$(bin mp_device)" 2 4 8
stage shim 40 env MOECCL_DEVICE=none "$(bin test_nccl_shim)" # host memory: ncclMemAlloc's is touched by the host
# sizes: bytes each rank sends (the emulation's copies run on the host's cores)
max=256M
[ "$DEV" = cuda ] || max=16M
for n in 2 4 8; do
  stage dev_perf_$n 90 "$perf" -n $n -b 1M -e ${DEV_PERF_MAX:-$max} -f 4 -i 20 -w 3 -r 5 \
    --json "$OUT/dev_perf_$n.json"
done

# nccl-tests, unchanged, on the drop-in: one process per rank, all on GPU 0
mpi=$CARRY/openmpi nt=$CARRY/nccl-tests
why=
[ "$DEV" = cuda ] || why="the device is $DEV: nccl-tests needs a GPU"
[ -z "$why" ] && [ ! -x "$mpi/bin/mpirun" ] && why="no $mpi/bin/mpirun (scripts/gpu-prep.sh makes it)"
[ -z "$why" ] && [ ! -x "$nt/alltoall_perf" ] && why="no $nt/alltoall_perf (scripts/gpu-prep.sh builds it)"
nccl_test() { # nccl_test NAME RANKS PROGRAM ARGS...
  local name=$1 n=$2 prog=$3
  shift 3
  if [ -n "$why" ]; then
    skip "$name" "$why"
    return
  fi
  stage "$name" 60 env OPAL_PREFIX="$mpi" "$mpi/bin/mpirun" --allow-run-as-root --oversubscribe \
    --bind-to none -np "$n" -x NCCL_TESTS_DEVICE=0 -x MOECCL_DEVICE -x MOECCL_DEBUG=VERSION \
    -x LD_LIBRARY_PATH="$lib:$shimlib:$mpi/lib:${LD_LIBRARY_PATH:-}" \
    "$nt/$prog" -g 1 -c 1 -w 5 -n 20 "$@"
}
for n in 2 4 8; do nccl_test nt_alltoall_$n $n alltoall_perf -b 1M -e 256M -f 4; done
nccl_test nt_sendrecv_4 4 sendrecv_perf -b 1M -e 64M -f 4
nccl_test nt_all_reduce_4 4 all_reduce_perf -b 1M -e 64M -f 4

stage summary 20 python3 scripts/gpu-summary.py "$OUT" "$DEV"
echo "== stages (name, status: 0 passed, 77 skipped, 124 out of time; seconds)"
cat "$OUT/summary.txt"
echo "== $(($(date +%s) - start))s in all; $OUT/summary.json"
