#!/usr/bin/env bash
# Builds what the GPU check needs with the C compiler alone -- no autotools,
# no MPI, no network libraries: a GPU machine may have only the CUDA
# toolkit, its host compiler and Python.  Shared memory and the same-node
# GPU path only (the network transports need libfabric or UCX, which the
# autotools build finds).  CUDA's backend is built when cuda.h is found
# ($CUDA_HOME, default /usr/local/cuda); it loads libcuda.so.1 at run time.
# The device kernels (src/kernels/kernels.cu) are compiled by
# $CUDA_HOME/bin/nvcc, where it is, into the fatbin libmoeccl embeds (as
# src/local.mk does); without nvcc the library has none (nofatbin.c).
#
#   scripts/plain-build.sh [OUTDIR]     (default build-plain)
#
# OUTDIR/lib: libmoeccl.so.0 and the NCCL drop-in libnccl.so.2;
# OUTDIR/bin: test_device, test_dev_kernels, mp_device, test_nccl_shim,
# a2a_dev_perf.
# Objects are rebuilt only when a source is newer.  PLAIN_CFLAGS adds flags
# (CFLAGS is left alone: a sanitizer build exports it to its tests).
set -eu
cd "$(dirname "$0")/.."
out=${1:-build-plain}
CC=${CC:-cc}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
jobs=$(nproc 2>/dev/null || echo 2)
mkdir -p "$out/obj" "$out/lib" "$out/bin"

# config.h: what configure would say on Linux, without the network modules
{
  echo '#define _GNU_SOURCE 1'
  echo '#define HAVE_MEMFD_CREATE 1'
  echo '#define HAVE_PROCESS_VM_READV 1'
  echo '#define PACKAGE_VERSION "0.1.0"'
  echo '#define PACKAGE_STRING "moeccl 0.1.0"'
} >"$out/config.h.new"
cuda_flags=
if [ -f "$CUDA_HOME/include/cuda.h" ]; then
  echo '#define MOECCL_HAVE_CUDA 1' >>"$out/config.h.new"
  cuda_flags="-I$CUDA_HOME/include"
fi
cmp -s "$out/config.h.new" "$out/config.h" || mv "$out/config.h.new" "$out/config.h"
rm -f "$out/config.h.new"

CFLAGS="-std=gnu11 -O2 -g -pthread -fPIC -Wall -Wextra -Wno-unused-parameter \
  -Wno-missing-field-initializers ${PLAIN_CFLAGS:-}"
core_flags="$CFLAGS -Iinclude -Isrc -include $out/config.h -fvisibility=hidden $cuda_flags"

# every library source but the network modules (libfabric, UCX) and, without
# cuda.h, the CUDA backend
srcs=()
for f in src/*.c src/*/*.c src/*/*/*.c; do
  [ -e "$f" ] || continue # a pattern that matched nothing
  case $f in
    src/transport/ofi/* | src/transport/ucx/* | src/transport/net_*.c) continue ;;
    src/device/cuda.c) [ -n "$cuda_flags" ] || continue ;;
    src/kernels/nofatbin.c) [ -x "$CUDA_HOME/bin/nvcc" ] && continue ;;
  esac
  srcs+=("$f")
done
# the device kernels' fatbin as a C array (src/local.mk's rule)
if [ -x "$CUDA_HOME/bin/nvcc" ]; then
  fb=$out/obj/kernels.fatbin
  if [ ! -f "$fb" ] || [ ! -f "$out/fatbin.c" ] || [ src/kernels/kernels.cu -nt "$fb" ] || [ src/kernels/devmath.h -nt "$fb" ] ||
    [ src/kernels/floatfmt.h -nt "$fb" ]; then
    "$CUDA_HOME/bin/nvcc" -fatbin -gencode arch=compute_80,code=sm_80 \
      -gencode arch=compute_90,code=[sm_90,compute_90] -Isrc -o "$fb" src/kernels/kernels.cu
    {
      echo '#include "kernels/devkern.h"'
      echo '__attribute__((aligned(64))) const unsigned char moeccl_kernels_fatbin[] = {'
      od -An -v -tx1 "$fb" | sed 's/ *\([0-9a-f][0-9a-f]\)/0x\1,/g'
      echo '};'
      echo 'const size_t moeccl_kernels_fatbin_bytes = sizeof moeccl_kernels_fatbin;'
    } >"$out/fatbin.c"
  fi
  srcs+=("$out/fatbin.c")
fi

compile() { # compile SRC OBJ FLAGS...
  local src=$1 obj=$2
  shift 2
  if [ ! -f "$obj" ] || [ "$src" -nt "$obj" ] || [ "$out/config.h" -nt "$obj" ]; then
    $CC "$@" -c "$src" -o "$obj"
  fi
}
objs=()
pids=()
for f in "${srcs[@]}"; do
  o="$out/obj/$(echo "${f%.c}" | tr / _).o"
  objs+=("$o")
  compile "$f" "$o" $core_flags &
  pids+=($!)
  if [ ${#pids[@]} -ge "$jobs" ]; then
    wait "${pids[0]}"
    pids=("${pids[@]:1}")
  fi
done
fail=0
for p in "${pids[@]}"; do wait "$p" || fail=1; done
# a failed compile in the throttled waits above stops the script (set -e)
[ $fail -eq 0 ] || { echo "plain-build: a compile failed" >&2; exit 1; }

rm -f "$out/lib/libmoeccl_core.a"
ar rcs "$out/lib/libmoeccl_core.a" "${objs[@]}"
libs="-ldl -lm -lpthread -lrt"
$CC -shared -o "$out/lib/libmoeccl.so.0" -Wl,-soname,libmoeccl.so.0 -Wl,--no-undefined \
  "${objs[@]}" $libs
ln -sf libmoeccl.so.0 "$out/lib/libmoeccl.so"
$CC $CFLAGS -Iinclude -fvisibility=hidden -shared -o "$out/lib/libnccl.so.2" \
  -Wl,-soname,libnccl.so.2 -Wl,--no-undefined -Wl,-rpath,'$ORIGIN' shim/nccl_shim.c \
  -L"$out/lib" -lmoeccl $libs

# programs that reach the device seam link the objects themselves
tflags="$CFLAGS -Iinclude -Isrc -Itests"
$CC $tflags -o "$out/bin/test_device" tests/test_device.c "$out/lib/libmoeccl_core.a" $libs
$CC $tflags -o "$out/bin/test_dev_kernels" tests/test_dev_kernels.c "$out/lib/libmoeccl_core.a" $libs
$CC $tflags -o "$out/bin/mp_device" tests/mp_device.c tests/mp_harness.c \
  "$out/lib/libmoeccl_core.a" $libs
$CC $tflags -o "$out/bin/a2a_dev_perf" perf/dev_perf.c perf/dev_ranks.c perf/perf_parse.c \
  "$out/lib/libmoeccl_core.a" $libs
$CC $CFLAGS -Iinclude -Ishim -Itests -o "$out/bin/test_nccl_shim" tests/test_nccl_shim.c \
  -L"$out/lib" -lnccl -Wl,-rpath,'$ORIGIN/../lib' $libs
echo "plain-build: $out/lib and $out/bin ready (CUDA backend: $([ -n "$cuda_flags" ] && echo yes || echo no)," \
  "kernels' fatbin: $([ -x "$CUDA_HOME/bin/nvcc" ] && echo yes || echo no))"
