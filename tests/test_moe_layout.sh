#!/bin/sh
# moe_train's result does not depend on the rank layout: the first step's
# dump (--dump: out, grad_x, every gradient, full shapes, and the loss) on
# 2, 4 and 8 ranks (-n R, forked, no MPI) in P x D mixes equals the 1-rank
# dump to float32 summation order: per tensor max|dump - dump_1| <= 1e-5 *
# max|dump_1|, the loss within 1e-5 relative.  The batch is split unevenly
# (N = 62).  --chunks (each rank's tokens in C chunks, one plan each, the
# exchanges queued on a host stream under the experts' compute) gives the
# same: 1 rank with 4 chunks, 2 x 2 with 3, 2 x 4 with 4.  The weights and
# batch come from --load files that scripts/moe_ref.py writes when NumPy is
# there (and one layout is also
# checked against that reference); without it, moe_train's synthetic task
# (the same seeds on every rank).  Then the synthetic training run with the
# defaults falls below 10% of the baseline on 2 ranks (EP) and on 4 (2 x 2),
# and the layout errors moe_train refuses (exit 2).  Every run has a
# deadline (timeout 120 s; MP_DEADLINE_SCALE stretches it) and MOECCL_TIMEOUT=30.
moe_test=test_moe_layout
. "${srcdir:-.}/tests/moe_env.sh"
ref="$srcdir/scripts/moe_ref.py"

py=
for p in ${PYTHON:+"$PYTHON"} python3 /usr/bin/python3; do
  if "$p" -c 'import numpy' 2>/dev/null; then py=$p; break; fi
done
shape="--layers 2 --experts 8 --topk 2 --hidden 32 --ffn 48 --tokens 62 --aux 0.05"
if [ -n "$py" ]; then
  "$py" "$ref" gen "$tmp/in" --layers 2 --experts 8 --hidden 32 --ffn 48 --tokens 62 --seed 11 ||
    { echo "FAIL: moe_ref.py gen"; exit 1; }
  src="--load $tmp/in --topk 2 --aux 0.05"
  echo "data: scripts/moe_ref.py gen (L2 E8 K2 H32 F48 N62 aux 0.05)"
else
  src="$shape --seed 11"
  echo "data: moe_train's synthetic task (no python3 with numpy), L2 E8 K2 H32 F48 N62 aux 0.05"
fi

# dump NAME RANKS P D [CHUNKS] (in place of moe_env.sh's)
dump() {
  if ! run -n "$2" --ep "$3" --dp "$4" --chunks "${5:-1}" $src --steps 1 --dump "$tmp/$1" \
      >"$tmp/$1.out" 2>&1; then
    echo "FAIL: $1 ($2 ranks, EP $3 x DP $4, ${5:-1} chunks): $(tail -n 3 "$tmp/$1.out")"
    fail=1
    return 1
  fi
}
dump r1 1 1 1 || exit 1
for l in "2 2 1" "2 1 2" "4 2 2" "4 4 1" "4 1 4" "8 4 2" "8 8 1" "1 1 1 4" "4 2 2 3" "8 2 4 4"; do
  set -- $l
  name="r$1_ep$2_dp$3_c${4:-1}"
  dump "$name" "$1" "$2" "$3" "${4:-1}" || continue
  printf '%-32s ' "$1 ranks, EP $2 x DP $3, ${4:-1} chunk(s):"
  $cmp "$tmp/r1" "$tmp/$name" 1e-5 || { echo "FAIL: $name differs from 1 rank"; fail=1; }
done
if [ -n "$py" ]; then
  printf '%-32s ' "EP 2 x DP 2 vs NumPy:"
  "$py" "$ref" check "$tmp/in" "$tmp/r4_ep2_dp2_c1" --topk 2 --aux 0.05 || fail=1
fi

# train RANKS P D: the defaults (200 steps) below 10% of the baseline.
train() {
  t0=$(date +%s)
  if ! run -n "$1" --ep "$2" --dp "$3" >"$tmp/train$1.out" 2>&1; then
    echo "FAIL: training on $1 ranks: $(tail -n 3 "$tmp/train$1.out")"
    fail=1
    return
  fi
  ratio=$(awk '/^# loss \/ baseline/ {print $(NF - 3)}' "$tmp/train$1.out")
  echo "training, $1 ranks (EP $2 x DP $3): $(tail -n 1 "$tmp/train$1.out" | sed 's/^# //')" \
    "($(($(date +%s) - t0)) s)"
  awk -v r="$ratio" 'BEGIN { exit !(r != "" && r < 0.1) }' ||
    { echo "FAIL: $1 ranks: loss / baseline '$ratio' after the default steps, want < 0.1"; fail=1; }
}
train 2 2 1
train 4 2 2

refuse() { # refuse WHAT ARGS...: moe_train must exit 2
  what=$1
  shift
  run "$@" >"$tmp/refuse.out" 2>&1
  rc=$?
  [ $rc -eq 2 ] || { echo "FAIL: $what: exit status $rc, want 2"; fail=1; }
}
refuse "P x D != R" -n 4 --ep 2 --dp 3 --steps 1
refuse "P does not divide R" -n 4 --ep 3 --steps 1
refuse "P does not divide E" -n 3 --steps 1
refuse "--chunks 0" --chunks 0 --steps 1
exit $fail
