#!/bin/sh
# examples/ as a user runs them: this build installed into a scratch
# DESTDIR, the C examples built there with examples/Makefile (the README's
# pkg-config line plus an RPATH) and run on 2 and 4 ranks without
# LD_LIBRARY_PATH; nccl_port.c renamed back to nccl compiles against
# NCCL's own nccl.h where one is found; the package installed with
# `pip install --target` (no network, no build isolation) and the Python
# examples run from that install on 2 and 4 ranks.  Every run has a
# deadline.  Skips (77) without numpy and torch.
. "${srcdir:-.}/tests/py_env.sh"
if [ -n "$sanitized" ]; then
  echo "SKIP: a sanitized build; the examples are built and run against a plain build's install"
  exit 77
fi
top=$(cd "$srcdir" && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/moeccl-examples.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
st=0

echo "== make install DESTDIR=$tmp/root"
make install DESTDIR="$tmp/root" >"$tmp/install.log" 2>&1 || {
  tail -20 "$tmp/install.log"
  exit 1
}
prefix=$(pkg-config --variable=prefix ./moeccl.pc)
root=$tmp/root$prefix
PKG_CONFIG_PATH=$(dirname "$(find "$root" -name moeccl.pc | head -n 1)")
export PKG_CONFIG_PATH
pc="pkg-config --define-variable=prefix=$root"
echo "pkg-config: $($pc --cflags --libs moeccl)"

mkdir "$tmp/ex"
cp "$top"/examples/*.c "$top"/examples/*.h "$top"/examples/*.py "$top"/examples/Makefile "$tmp/ex/"
run "make -C examples" 300 make -C "$tmp/ex" PKG_CONFIG="$pc" CFLAGS="-O2 -Wall -Wextra -Werror" || exit 1
unset LD_LIBRARY_PATH
for n in 2 4; do
  for prog in alltoallv_moe nccl_port moe_roundtrip; do
    run "$prog $n" 120 "$tmp/ex/$prog" $n || st=1
  done
done

nccl_h=
for d in /usr/local/cuda/include /usr/local/include /usr/include; do
  [ -f "$d/nccl.h" ] && { nccl_h=$d; break; }
done
if [ -n "$nccl_h" ]; then
  sed 's/moeccl/nccl/g; s/MOECCL/NCCL/g' "$tmp/ex/nccl_port.c" >"$tmp/nccl_orig.c"
  run "nccl_port.c renamed to nccl, against $nccl_h/nccl.h" 60 \
    cc -fsyntax-only -Wall -Werror -I"$nccl_h" "$tmp/nccl_orig.c" || st=1
else
  echo "== no nccl.h here: the NCCL side of nccl_port.c not compiled"
fi

cp -r "$top/python" "$tmp/pysrc"
rm -rf "$tmp/pysrc/build" "$tmp/pysrc"/*.egg-info
run "pip install --target" 300 "$py" -m pip install -q --no-build-isolation --no-deps --no-index \
  --target "$tmp/site" "$tmp/pysrc" || exit 1
# the installed package, not the source tree; the library by the loader's path
PYTHONPATH=$tmp/site
LD_LIBRARY_PATH=$root/lib
unset MOECCL_LIBRARY
export PYTHONPATH LD_LIBRARY_PATH
cd "$tmp/ex" || exit 1
run "the installed package loads $root/lib" 60 "$py" -c "import moeccl, sys
p = moeccl.library_path(); print(moeccl.__file__, p)
sys.exit(not (moeccl.__file__.startswith('$tmp/site') and p.startswith('$root/lib')))" || st=1
for n in 2 4; do
  run "moe_roundtrip.py $n" 240 "$py" -m moeccl.run -n $n --deadline $((200 * scale)) \
    moe_roundtrip.py || st=1
  run "train_moe.py $n" 300 "$py" -m moeccl.run -n $n --deadline $((250 * scale)) \
    train_moe.py --steps 20 || st=1
done
exit $st
