#!/bin/sh
# moe_train --load --dump against scripts/moe_ref.py, a NumPy (float64)
# implementation of the model written from its text: for each shape,
# moe_ref.py writes the weights and a batch as .npy, moe_train runs the first
# forward and backward and dumps the output, the loss and every gradient, and
# moe_ref.py compares: per tensor max|dump - ref| <= 1e-4 * max|ref|, the loss
# within 1e-5 relative.  Also: the reference's own finite-difference check,
# and .npy files moe_train must refuse.  Skips (77) without python3 + numpy.
srcdir=${srcdir:-.}
ref="$srcdir/scripts/moe_ref.py"
train=./moe/moe_train
# The first of $PYTHON, python3 on PATH and the system's python3 with numpy.
py=
for p in ${PYTHON:+"$PYTHON"} python3 /usr/bin/python3; do
  if "$p" -c 'import numpy' 2>/dev/null; then py=$p; break; fi
done
[ -n "$py" ] || { echo "SKIP: no python3 with numpy (set PYTHON)"; exit 77; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/test_moe_ref.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0

# case NAME L E K H F N AUX SEED
case_() {
  name=$1 l=$2 e=$3 k=$4 h=$5 f=$6 n=$7 aux=$8 seed=$9
  d="$tmp/$name"
  "$py" "$ref" gen "$d/in" --layers "$l" --experts "$e" --hidden "$h" --ffn "$f" \
    --tokens "$n" --seed "$seed" || { echo "FAIL: $name: gen"; fail=1; return; }
  if ! $train --load "$d/in" --dump "$d/out" --topk "$k" --aux "$aux" --steps 1 \
      >"$d/train.out" 2>&1; then
    echo "FAIL: $name: moe_train: $(tail -n 3 "$d/train.out")"
    fail=1
    return
  fi
  printf '%-34s ' "$name:"
  "$py" "$ref" check "$d/in" "$d/out" --topk "$k" --aux "$aux" || fail=1
}

case_ "L2 E4 K2 H8 F16 N12 aux.01" 2 4 2 8 16 12 0.01 1
case_ "L3 E8 K3 H32 F48 N64 aux.05" 3 8 3 32 48 64 0.05 2
case_ "K=E: L2 E4 K4 H16 F8 N20" 2 4 4 16 8 20 0.01 3
case_ "K=1 idle experts: E16 N6" 2 16 1 8 8 6 0.1 4
case_ "strong aux: L1 E6 K2 aux1" 1 6 2 12 10 30 1.0 5
case_ "defaults' shape: L2 E8 K2 H64 F128 N256" 2 8 2 64 128 256 0.01 6

printf '%-34s ' "reference self-test:"
"$py" "$ref" selftest || fail=1

# Refusals: a float64 file, a wrong shape, a missing file.
d="$tmp/bad"
"$py" "$ref" gen "$d" --layers 1 --experts 4 --hidden 8 --ffn 16 --tokens 12 --seed 7
"$py" -c "import numpy as np; np.save('$d/w2_0.npy', np.zeros((4, 16, 8)))"
if $train --load "$d" --steps 1 >"$tmp/bad.out" 2>&1 || ! grep -q "w2_0.npy.*dtype" "$tmp/bad.out"; then
  echo "FAIL: a float64 w2_0.npy: $(cat "$tmp/bad.out" | tail -n 2)"
  fail=1
fi
"$py" -c "import numpy as np; np.save('$d/w2_0.npy', np.zeros((4, 8, 16), dtype=np.float32))"
if $train --load "$d" --steps 1 >"$tmp/bad.out" 2>&1 || ! grep -q "w2_0.npy.*shape" "$tmp/bad.out"; then
  echo "FAIL: a w2_0.npy of the wrong shape: $(cat "$tmp/bad.out" | tail -n 2)"
  fail=1
fi
"$py" "$ref" gen "$d" --layers 1 --experts 4 --hidden 8 --ffn 16 --tokens 12 --seed 7
rm -f "$d/target.npy"
if $train --load "$d" --steps 1 >"$tmp/bad.out" 2>&1 || ! grep -q "target.npy" "$tmp/bad.out"; then
  echo "FAIL: no target.npy: $(cat "$tmp/bad.out" | tail -n 2)"
  fail=1
fi
exit $fail
