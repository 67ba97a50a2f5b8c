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
# (default 330, so that with the summary and the archive the whole check
# takes at most 6 minutes; a stage gets what is left, and is skipped with
# status 124 when nothing is).  The correctness stages run once, without MPS:
#   facts        GPU, driver, glibc, MPS, torch
#   build        scripts/plain-build.sh into PLAIN_DIR (default build-plain;
#                the CUDA backend loads libcuda.so.1 with dlopen)
#   probe        gpu-carry/ipc_probe, the capability probe, when carried
#   device       tests/test_device on the CUDA backend
#   kernels      tests/test_dev_kernels: the device kernels (the embedded
#                fatbin, loaded with cuModuleLoadData) against the host
#                kernels, every datatype and operation and the MoE row
#                programs; prints the kernels launched and the bytes staged
#                in host memory (0 when the kernels ran)
#   moe_backend  moe/'s CUDA backend (cuBLAS and moe/kernels.cu) op by op
#                against its host backend, within 1e-5 of each output's
#                largest value (gpu-carry/moe_backend.xz, made by gpu-prep.sh)
#   mp_device    tests/mp_device on 2, 4 and 8 ranks of the one GPU (the
#                reductions lowered onto the stream included: part lowred)
#   moe_device   tests/test_moe_device.sh with MOE_DEVICE_TEST_GPU=1:
#                moe_train --device cuda's first step against --device
#                host's on 1-8 ranks (the autotools build carried in BUILD=)
#   shim         the NCCL drop-in's own test (host memory)
#   torch_N      tests/test_torch_dropin.py: PyTorch's torch.distributed,
#                NCCL backend, moeccl's libnccl.so.2 preloaded, N = 2, 4
#                ranks on GPU 0, every result checked, DDP for 5 steps
#                ($PYTHON, default python3, must have torch with CUDA)
#   baseline     unpacks NCCL >= 2.30 (gpu-carry/nccl/libnccl.so.2.xz,
#                made by gpu-prep.sh) into a temporary folder
# Then the MPS daemon starts, with its own pipe and log folders under a
# temporary folder (CUDA_MPS_PIPE_DIRECTORY, CUDA_MPS_LOG_DIRECTORY, exported
# to every rank), for the stages that time or that put many ranks through
# nccl-tests; it is stopped at the end, on failure and interruption too, and
# OUT/mps.txt says whether it ran (summary.json: "mps"):
#   nt_C_N       nccl-tests C = alltoall, sendrecv, all_gather, broadcast
#                (each row out of place and in place, every value checked:
#                -c 1) on N = 2, 4, 8 ranks, on moeccl's libnccl.so.2: exit 0,
#                #wrong 0
#   dev_costs    a2a_dev_perf --costs on 2 ranks: the device's HBM, link, copy
#                and launch costs measured, written as OUT/dev_costs.tune,
#                which the stages after it get as MOECCL_TUNE_FILE
#   dev_perf_N   a2a_dev_perf on N = 2, 4, 8 ranks, 1 MiB to DEV_PERF_MAX (256M):
#                moeccl, NCCL (the baseline with --nccl-lib, where it runs
#                several ranks on one GPU) and the device copy roofline
#   moe_overlap_N scripts/moe_overlap.py: moe_train --device cuda on N = 2, 4,
#                8 ranks (EP N, H 1024, F 2048, 4096 tokens per rank),
#                unchunked against 2 and 4 chunks: communication hidden, speedup
#                (the autotools build carried in BUILD=)
#   moe_dev_perf_N  moe_perf --device cuda on N = 2, 4, 8 ranks: the MoE
#                layout + dispatch + combine against a device permute, NCCL's
#                grouped send/recv (the baseline above) and a device
#                unpermute, K = 2 and 6, 4096 tokens per rank, hidden 4096,
#                bfloat16, both results checked; moe_perf links MPI, so it
#                comes from an autotools build (BUILD=, or MOE_PERF=PATH),
#                run with the carried Open MPI's libraries on the path
#   (openmpi and nccl-tests come packed in gpu-carry/tools.tar.xz, unpacked
#   into a temporary folder first)
#   nccl_C_N     the same nccl-tests binaries on the baseline NCCL
#                (NCCL_MULTI_RANK_GPU_ENABLE=1), for the busbw side by side
#   summary      scripts/gpu-summary.py: $OUT/summary.json with every
#                stage's status, the rows, MPS, and the targets checked
# Logs and JSON go to $OUT (default /tmp/gpu-check), and all of them into
# one archive, $OUT/gpu-check-logs.tar.xz (a device call returns at most 8
# files).  GPU_CHECK_DEVICE=emu runs the same stages on the host emulation
# (a dry run of this script on a machine without a GPU; the stages that need
# a GPU, the PyTorch, nccl-tests and baseline ones and MPS, then skip and
# say why).  Knobs: NT_RANKS (default "2 4 8"), NT_SIZES (default
# "-b 1M -e 64M -f 4"), GPU_CHECK_MPS=0 (no MPS), PYTHON.
set -u
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-/tmp/gpu-check}
DEV=${GPU_CHECK_DEVICE:-cuda}
BUDGET=${GPU_CHECK_BUDGET:-330}
CARRY=${GPU_CARRY:-$PWD/gpu-carry}
PYTHON=${PYTHON:-python3}
mkdir -p "$OUT"
: >"$OUT/summary.txt"
start=$(date +%s)
tmp=$(mktemp -d /tmp/gpu-check.XXXXXX)
mps_on=0

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

# The MPS daemon: its own folders, so that it meets no other daemon and
# leaves nothing behind; the ranks find it through the two variables.
mps_start() {
  local why=
  [ "$DEV" = cuda ] || why="the device is $DEV"
  [ -z "$why" ] && [ "${GPU_CHECK_MPS:-1}" = 0 ] && why="GPU_CHECK_MPS=0"
  [ -z "$why" ] && ! command -v nvidia-cuda-mps-control >/dev/null 2>&1 &&
    why="no nvidia-cuda-mps-control on PATH"
  if [ -z "$why" ]; then
    export CUDA_MPS_PIPE_DIRECTORY=$tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=$tmp/mps-log
    mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
    if timeout 20 nvidia-cuda-mps-control -d >"$OUT/mps-start.log" 2>&1; then
      mps_on=1
    else
      why="nvidia-cuda-mps-control -d failed: $(tail -n 3 "$OUT/mps-start.log" | tr '\n' ' ')"
      unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
    fi
  fi
  if [ $mps_on = 1 ]; then
    echo "ran pipe=$CUDA_MPS_PIPE_DIRECTORY log=$CUDA_MPS_LOG_DIRECTORY" >"$OUT/mps.txt"
    echo "== mps: the daemon runs ($CUDA_MPS_PIPE_DIRECTORY)"
  else
    echo "not-run $why" >"$OUT/mps.txt"
    echo "== mps: not started: $why"
  fi
}
mps_stop() {
  [ $mps_on = 1 ] || return 0
  mps_on=0
  echo quit | timeout 20 nvidia-cuda-mps-control >>"$OUT/mps-stop.log" 2>&1 ||
    echo "== mps: quit did not answer within 20s (see $OUT/mps-stop.log)"
  cp -r "$CUDA_MPS_LOG_DIRECTORY" "$OUT/mps-log" 2>/dev/null
  echo "stopped" >>"$OUT/mps.txt"
}
cleanup() {
  mps_stop
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'echo "== interrupted"; exit 130' INT TERM

stage facts 20 bash -c 'nvidia-smi --query-gpu=name,driver_version,memory.total,compute_mode \
  --format=csv; nvidia-smi topo -m; ldd --version | head -1; uname -a; nproc; \
  ls /usr/local/cuda/lib64/libnccl.so* 2>/dev/null; cc --version | head -1; \
  command -v nvidia-cuda-mps-control || echo "no nvidia-cuda-mps-control"; \
  '"$PYTHON"' -c "import torch; print(\"torch\", torch.__version__, \"cuda\", torch.version.cuda, \
  \"nccl\", torch.cuda.nccl.version() if torch.version.cuda else None)" || echo "no torch for '"$PYTHON"'"'

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
base_ld=${LD_LIBRARY_PATH:-}
export LD_LIBRARY_PATH="$lib:$shimlib${base_ld:+:$base_ld}"
export MOECCL_DEVICE=$DEV

# ---- correctness, once, without MPS
if [ -x "$CARRY/ipc_probe" ] && [ "$DEV" = cuda ]; then stage probe 60 "$CARRY/ipc_probe"; fi
stage device 60 env MOECCL_DEBUG=INFO MOECCL_DEBUG_SUBSYS=INIT "$(bin test_device)"
stage kernels 30 env MOECCL_DEBUG=INFO MOECCL_DEBUG_SUBSYS=INIT "$(bin test_dev_kernels)"
if [ -f "$CARRY/moe_backend.xz" ]; then
  xz -dc "$CARRY/moe_backend.xz" >"$tmp/test_moe_backend" && chmod +x "$tmp/test_moe_backend"
  # on a GPU its GPU half must run; on the emulation only the stand-in does
  stage moe_backend 30 env MOE_BACKEND_REQUIRE_GPU=$([ "$DEV" = cuda ] && echo 1 || echo 0) \
    "$tmp/test_moe_backend"
else
  skip moe_backend "no gpu-carry/moe_backend.xz (scripts/gpu-prep.sh makes it)"
fi
stage mp_device 150 env MP_VARIANTS=0 "$(bin mp_device)" 2 4 8
# moe_train --device cuda against --device host, first-step dumps on 1-8
# ranks of the GPU (the autotools build has moe/; the plain one does not)
if [ "$DEV" != cuda ]; then
  skip moe_device "the device is $DEV: tests/test_moe_device.sh runs the stand-in in the suite"
elif [ -z "${BUILD:-}" ] || [ ! -x "$BUILD/moe/moe_train" ]; then
  skip moe_device "no autotools build carried in BUILD= (moe/ is not in the plain build)"
else
  stage moe_device 240 bash -c 'cd "$1" && MOE_DEVICE_TEST_GPU=1 srcdir="$2" sh "$2/tests/test_moe_device.sh"' _ \
    "$BUILD" "$PWD"
fi
stage shim 40 env MOECCL_DEVICE=none "$(bin test_nccl_shim)" # host memory: ncclMemAlloc's is touched by the host
for n in 2 4; do
  if [ "$DEV" != cuda ]; then
    skip torch_$n "the device is $DEV: the PyTorch stage needs a GPU (tests/test_torch_dropin.py --gloo runs its checks on CPU)"
  else
    stage torch_$n $((45 + 30 * n)) env MOECCL_DEBUG=VERSION "$PYTHON" tests/test_torch_dropin.py \
      --lib "$shimlib/libnccl.so.2" --ranks $n --deadline $((30 + 30 * n))
  fi
done

# ---- the baseline: NCCL >= 2.30, carried pruned and compressed
nccl=
if [ "$DEV" != cuda ]; then
  skip baseline "the device is $DEV: NCCL needs a GPU"
elif [ ! -f "$CARRY/nccl/libnccl.so.2.xz" ]; then
  skip baseline "no $CARRY/nccl/libnccl.so.2.xz (scripts/gpu-prep.sh makes it)"
else
  mkdir -p "$tmp/nccl"
  stage baseline 40 bash -c 'xz -dc "$1" >"$2/libnccl.so.2" && cat "$3" 2>/dev/null; ls -l "$2"' _ \
    "$CARRY/nccl/libnccl.so.2.xz" "$tmp/nccl" "$CARRY/nccl/SOURCE" && nccl=$tmp/nccl/libnccl.so.2
fi

# ---- performance and nccl-tests, under MPS
mps_start
mpi=$CARRY/openmpi nt=$CARRY/nccl-tests
if [ "$DEV" = cuda ] && [ -f "$CARRY/tools.tar.xz" ]; then # gpu-prep.sh packs them
  mkdir -p "$tmp/carry"
  timeout 60 tar -xJf "$CARRY/tools.tar.xz" -C "$tmp/carry" >"$OUT/carry.log" 2>&1 &&
    mpi=$tmp/carry/openmpi nt=$tmp/carry/nccl-tests
fi
why=
[ "$DEV" = cuda ] || why="the device is $DEV: nccl-tests needs a GPU"
[ -z "$why" ] && [ ! -x "$mpi/bin/mpirun" ] && why="no $mpi/bin/mpirun (scripts/gpu-prep.sh makes it)"
NT_PROGS="alltoall sendrecv all_gather broadcast"
for c in $NT_PROGS; do
  [ -z "$why" ] && [ ! -x "$nt/${c}_perf" ] && why="no $nt/${c}_perf (scripts/gpu-prep.sh builds it)"
done
mps_vars=
[ $mps_on = 1 ] && mps_vars="-x CUDA_MPS_PIPE_DIRECTORY -x CUDA_MPS_LOG_DIRECTORY"
nccl_test() { # nccl_test NAME RANKS LIBDIR PROGRAM [ENV=VALUE...]: one process per rank, all on GPU 0
  local name=$1 n=$2 libdir=$3 prog=$4
  shift 4
  local xs=() e
  for e in "$@"; do xs+=(-x "$e"); done
  # shellcheck disable=SC2086 # mps_vars is a list of options
  stage "$name" 40 env OPAL_PREFIX="$mpi" "$mpi/bin/mpirun" --allow-run-as-root --oversubscribe \
    --bind-to none -np "$n" -x NCCL_TESTS_DEVICE=0 -x MOECCL_DEVICE -x MOECCL_DEBUG=VERSION $mps_vars \
    "${xs[@]}" -x LD_LIBRARY_PATH="$libdir:$mpi/lib${base_ld:+:$base_ld}" \
    "$nt/${prog}_perf" -g 1 -c 1 -w 2 -n 10 ${NT_SIZES:--b 1M -e 64M -f 4}
}
# the drop-in first on the path (nccl-tests has no RPATH); libmoeccl beside it
for c in $NT_PROGS; do
  for n in ${NT_RANKS:-2 4 8}; do
    if [ -n "$why" ]; then skip nt_${c}_$n "$why"; else nccl_test nt_${c}_$n $n "$shimlib:$lib" $c; fi
  done
done

# sizes: bytes each rank sends (the emulation's copies run on the host's cores)
max=256M
[ "$DEV" = cuda ] || max=16M
# the device costs (HBM, link, copy and launch latency) measured on 2 ranks,
# as a tune file the stages after this one price device calls with
# (MOECCL_TUNE_FILE, unless one was given)
stage dev_costs 40 "$perf" -n 2 -b ${DEV_PERF_MAX:-$max} -e ${DEV_PERF_MAX:-$max} -o alltoall \
  -i 10 -w 2 -r 3 --baseline none --costs "$OUT/dev_costs.tune"
if [ -z "${MOECCL_TUNE_FILE:-}" ] && [ -s "$OUT/dev_costs.tune" ]; then
  export MOECCL_TUNE_FILE=$OUT/dev_costs.tune
fi
for n in 2 4 8; do
  stage dev_perf_$n 60 "$perf" -n $n -b 1M -e ${DEV_PERF_MAX:-$max} -f 4 -i 20 -w 3 -r 5 \
    ${nccl:+--nccl-lib "$nccl"} --json "$OUT/dev_perf_$n.json"
done

# moe_train --device cuda, unchunked against 2 and 4 chunks (the EP exchanges
# of one chunk under the experts of another), N ranks of the GPU: the share
# of the communication hidden and the speedup (scripts/moe_overlap.py)
for n in 2 4 8; do
  if [ "$DEV" != cuda ]; then
    skip moe_overlap_$n "the device is $DEV: moe_train --device cuda needs a GPU"
  elif [ -z "${BUILD:-}" ] || [ ! -x "$BUILD/moe/moe_train" ]; then
    skip moe_overlap_$n "no autotools build carried in BUILD= (moe/ is not in the plain build)"
  else
    stage moe_overlap_$n 45 python3 scripts/moe_overlap.py --reps 2 --chunks 2,4 \
      --json "$OUT/moe_overlap_$n.json" -- "$BUILD/moe/moe_train" -n $n --ep $n --device cuda \
      --layers 2 --experts 16 --topk 2 --hidden 1024 --ffn 2048 --tokens $((4096 * n)) --steps 6
  fi
done

# moe_perf --device cuda: not in the plain build (moe_perf links MPI)
moe=${MOE_PERF:-${BUILD:+$BUILD/perf/moe_perf}} moe_why= moe_ld="$LD_LIBRARY_PATH:$mpi/lib"
if [ -z "$moe" ] || [ ! -x "$moe" ]; then
  moe_why="no moe_perf: it links MPI, so it comes from an autotools build (BUILD= or MOE_PERF=)"
elif LD_LIBRARY_PATH=$moe_ld ldd "$moe" 2>&1 | grep -q 'not found'; then
  moe_why="moe_perf's libraries: $(LD_LIBRARY_PATH=$moe_ld ldd "$moe" 2>&1 | grep 'not found' | tr -s '\n\t' '  ')"
fi
moe_shape="-t 4096 -H 4096"
[ "$DEV" = cuda ] || moe_shape="-t 256 -H 256"
for n in 2 4 8; do
  if [ -n "$moe_why" ]; then skip moe_dev_perf_$n "$moe_why"; else
    stage moe_dev_perf_$n 60 env LD_LIBRARY_PATH="$moe_ld" "$moe" --device cuda -n $n $moe_shape \
      -d bfloat16 -k 2,6 -i 3 -w 1 -r 3 ${nccl:+--nccl-lib "$nccl"} --json "$OUT/moe_dev_perf_$n.json"
  fi
done

[ -z "$why" ] && [ -z "$nccl" ] && why="no baseline NCCL (see baseline.log)"
for c in $NT_PROGS; do
  for n in ${NT_RANKS:-2 4 8}; do
    if [ -n "$why" ]; then skip nccl_${c}_$n "$why"; else
      nccl_test nccl_${c}_$n $n "$(dirname "$nccl")" $c NCCL_MULTI_RANK_GPU_ENABLE=1; fi
  done
done
mps_stop

# outside the budget: at most 20 s for the summary and a few for the archive;
# the verdict is summary.json's (this script exits 0 once it got that far)
t0=$(date +%s)
timeout -k 5 20 python3 scripts/gpu-summary.py "$OUT" "$DEV" >"$OUT/summary.log" 2>&1
echo "summary $? $(($(date +%s) - t0))" >>"$OUT/summary.txt"
cat "$OUT/summary.log"
echo "== stages (name, status: 0 passed, 77 skipped, 124 out of time; seconds)"
cat "$OUT/summary.txt"
# the logs, JSON and MPS's own log; not a build folder that OUT may hold
(cd "$OUT" && find . -maxdepth 1 -type f \( -name '*.log' -o -name '*.json' -o -name '*.txt' -o -name '*.tune' \) -printf '%P\n' |
  { cat; [ -d mps-log ] && echo mps-log; } | tar -cJf gpu-check-logs.tar.xz -T -)
echo "== $(($(date +%s) - start))s in all; $OUT/summary.json, logs in $OUT/gpu-check-logs.tar.xz"
