#!/bin/sh
# tests/test_torch_dropin.py under `make check`: torch.distributed on gloo
# with CPU tensors (2 ranks; the checks themselves, on any machine with
# torch), then the NCCL backend with this build's libnccl.so.2 preloaded on
# 2 and 4 ranks of GPU 0 (skipped, with the reason, where torch has no CUDA
# or sees no GPU).  The Python is $PYTHON, else the first of python3 and
# /usr/bin/python3 that imports torch; without torch the test skips (77).
# MP_DEADLINE_SCALE stretches each rank's 120 s deadline.
srcdir=${srcdir:-.}
script=$srcdir/tests/test_torch_dropin.py
scale=${MP_DEADLINE_SCALE:-1}
py_find_only=1 . "$srcdir/tests/py_env.sh"
find_python torch ${PYTHON:-} python3 /usr/bin/python3
if [ -z "$py" ]; then
  echo "SKIP: no Python here imports torch (set PYTHON, or install python3-torch)"
  exit 77
fi
# the drop-in links libmoeccl.so.0, which the build keeps in .libs
lib=${MOECCL_NCCL_LIB:-$PWD/shim/.libs/libnccl.so.2}
LD_LIBRARY_PATH=$PWD/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export LD_LIBRARY_PATH

"$py" "$script" --gloo --ranks 2 --deadline $((120 * scale))
gloo=$?
"$py" "$script" --lib "$lib" --ranks 2,4 --deadline $((120 * scale))
nccl=$?
echo "test_torch_dropin: gloo exit $gloo, nccl (drop-in) exit $nccl"
for rc in $gloo $nccl; do
  case $rc in
    0 | 77) ;;
    *) exit 1 ;;
  esac
done
[ $gloo -eq 77 ] && [ $nccl -eq 77 ] && exit 77
exit 0
