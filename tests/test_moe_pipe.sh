#!/bin/sh
# moe_train's pipeline parallelism computes what one rank computes: the
# first step's dump (--dump: out, grad_x, every gradient, the loss) of
# S x P x D layouts up to 8 ranks, with every schedule (gpipe, 1f1b,
# interleaved with 2 virtual stages, zb-h1), equals the 1-rank dump with the
# same micro-batches to float32 summation order: per tensor max|dump -
# dump_1| <= 1e-5 * max|dump_1|, the loss within 1e-5 relative.  With the
# load-balancing loss off the result does not depend on the micro-batches
# either (one check against 1 rank, 1 micro-batch).  L = 4 layers, N = 62
# tokens so that micro-batches and ranks split unevenly.  Then a training run
# with 2 stages and 4 micro-batches falls below 10% of the baseline, the
# report prints the bubble, --timeline writes valid JSON, and the layout
# errors are refused (exit 2).  Every run has a deadline (timeout 120 s,
# MP_DEADLINE_SCALE stretches it) and MOECCL_TIMEOUT=30.
moe_test=test_moe_pipe
. "${srcdir:-.}/tests/moe_env.sh"
ref="$srcdir/scripts/moe_ref.py"

src="--layers 4 --experts 8 --topk 2 --hidden 32 --ffn 48 --tokens 62 --aux 0.05 --seed 11"

# check REF NAME ARGS...: NAME's dump against REF's
check() {
  r=$1 name=$2
  shift 2
  dump "$name" "$@" || return
  printf '%-58s ' "$*:"
  $cmp "$tmp/$r" "$tmp/$name" 1e-5 || { echo "FAIL: $name differs from $r"; fail=1; }
}

dump m4 --microbatches 4 || exit 1
dump m8 --microbatches 8 || exit 1
check m4 s1_gpipe --microbatches 4 --schedule gpipe
check m4 s1_zb --microbatches 4 --schedule zb-h1
check m4 s1_v4 --microbatches 4 --schedule interleaved --vstages 4
check m4 s2_gpipe -n 2 --pp 2 --microbatches 4 --schedule gpipe
check m4 s2_1f1b -n 2 --pp 2 --microbatches 4 --schedule 1f1b
check m4 s2_int -n 2 --pp 2 --microbatches 4 --schedule interleaved --vstages 2
check m4 s2_zb -n 2 --pp 2 --microbatches 4 --schedule zb-h1
check m4 s4_1f1b -n 4 --pp 4 --microbatches 4 --schedule 1f1b
check m8 s4_zb -n 4 --pp 4 --microbatches 8 --schedule zb-h1
check m4 s3_split -n 3 --pp 3 --split 2,1,1 --microbatches 4
check m4 s2ep2 -n 4 --pp 2 --ep 2 --microbatches 4 --schedule 1f1b
check m4 s2dp2 -n 4 --pp 2 --dp 2 --microbatches 4 --schedule interleaved --vstages 2 --chunks 2
check m8 s2ep2dp2 -n 8 --pp 2 --ep 2 --dp 2 --microbatches 8 --schedule zb-h1
check m4 s4dp2 -n 8 --pp 4 --dp 2 --microbatches 4 --schedule gpipe
check m4 s2ep4 -n 8 --pp 2 --ep 4 --microbatches 4 --schedule 1f1b --chunks 3

# --overlap: a forward next to another micro-batch's backward (interleaved's
# steady state, GPipe's turn on one stage) run layer by layer interleaved
check m4 s1_ov --microbatches 4 --schedule gpipe --overlap
check m4 s2_int_ov -n 2 --pp 2 --microbatches 4 --schedule interleaved --vstages 2 --overlap
check m4 s2ep2_int_ov -n 4 --pp 2 --ep 2 --microbatches 4 --schedule interleaved --vstages 2 \
  --overlap

# expert placements other than the blocks, and replicas of experts, compute
# the same step
check m4 ep2_rep -n 2 --ep 2 --microbatches 4 --replicas 2
check m4 s2ep2_rep -n 4 --pp 2 --ep 2 --microbatches 4 --replicas 2 --schedule zb-h1
check m4 ep4dp2_rep -n 8 --ep 4 --dp 2 --microbatches 4 --replicas 4 --chunks 2

# the independent NumPy reference (scripts/moe_ref.py) with the same
# micro-batches, when NumPy is there
py=
for p in ${PYTHON:+"$PYTHON"} python3 /usr/bin/python3; do
  if "$p" -c 'import numpy' 2>/dev/null; then py=$p; break; fi
done
if [ -n "$py" ]; then
  "$py" "$ref" gen "$tmp/in" --layers 4 --experts 8 --hidden 32 --ffn 48 --tokens 62 --seed 11 ||
    { echo "FAIL: moe_ref.py gen"; exit 1; }
  if run --load "$tmp/in" --topk 2 --aux 0.05 --steps 1 -n 4 --pp 2 --ep 2 --microbatches 4 \
      --schedule zb-h1 --dump "$tmp/np" >"$tmp/np.out" 2>&1; then
    printf '%-58s ' "PP 2 x EP 2, zb-h1, 4 micro-batches vs NumPy:"
    "$py" "$ref" check "$tmp/in" "$tmp/np" --topk 2 --aux 0.05 --microbatches 4 || fail=1
  else
    echo "FAIL: --load run: $(tail -n 3 "$tmp/np.out")"
    fail=1
  fi
else
  echo "skip: the NumPy reference (no python3 with numpy)"
fi

# without the load-balancing loss the micro-batches do not matter
src="--layers 4 --experts 8 --topk 2 --hidden 32 --ffn 48 --tokens 62 --aux 0 --seed 11"
dump noaux_m1 || exit 1
check noaux_m1 noaux_s2 -n 4 --pp 2 --ep 2 --microbatches 4 --schedule 1f1b

# training: 2 stages, 4 micro-batches, below 10% of the baseline
t0=$(date +%s)
if ! run -n 2 --pp 2 --layers 2 --microbatches 4 --timeline "$tmp/tl.json" --json "$tmp/t.json" \
    >"$tmp/train.out" 2>&1; then
  echo "FAIL: training with --pp 2: $(tail -n 3 "$tmp/train.out")"
  fail=1
else
  ratio=$(awk '/^# loss \/ baseline/ {print $(NF - 3)}' "$tmp/train.out")
  echo "training, 2 stages x 4 micro-batches (1f1b): $(grep '^# loss' "$tmp/train.out" | sed 's/^# //')" \
    "($(($(date +%s) - t0)) s)"
  grep '^# bubble' "$tmp/train.out"
  awk -v r="$ratio" 'BEGIN { exit !(r != "" && r < 0.1) }' ||
    { echo "FAIL: --pp 2: loss / baseline '$ratio' after the default steps, want < 0.1"; fail=1; }
  grep -q '^# bubble: formula 20.0%' "$tmp/train.out" ||
    { echo "FAIL: --pp 2 -M 4: no bubble line with the formula's 1/5"; fail=1; }
  for f in tl.json t.json; do
    if command -v python3 >/dev/null; then
      python3 -c 'import json, sys; json.load(open(sys.argv[1]))' "$tmp/$f" ||
        { echo "FAIL: $f is not JSON"; fail=1; }
    fi
  done
fi

# adaptive placement on a skewed router: the load evens out and the training
# is the unmoved model's (to float32 summation order)
skew="-n 4 --ep 4 --skew 2 --steps 30"
if run $skew --json "$tmp/fixed.json" >"$tmp/fixed.out" 2>&1 &&
    run $skew --rebalance-every 10 --replicas 4 --json "$tmp/moved.json" >"$tmp/moved.out" 2>&1; then
  grep '^# expert load' "$tmp/fixed.out" "$tmp/moved.out" | sed 's/^[^:]*://'
  awk '/^# expert load/ { for (i = 1; i <= NF; i++) if ($i == "after") a = $(i + 2); b = $17 }
       END { exit !(a != "" && a + 0 < b + 0) }' "$tmp/moved.out" ||
    { echo "FAIL: --rebalance-every: the load did not even out"; fail=1; }
  l1=$(awk '$1 == 30 {print $2}' "$tmp/fixed.out")
  l2=$(awk '$1 == 30 {print $2}' "$tmp/moved.out")
  awk -v a="$l1" -v b="$l2" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && d <= 1e-4 * a) }' ||
    { echo "FAIL: rebalanced training's loss $l2 at step 30, unmoved $l1"; fail=1; }
  echo "loss at step 30: unmoved $l1, rebalanced with replicas $l2"
else
  echo "FAIL: --skew runs: $(tail -n 2 "$tmp/moved.out")"
  fail=1
fi

refuse() { # refuse WHAT ARGS...: moe_train must exit 2
  what=$1
  shift
  run "$@" >"$tmp/refuse.out" 2>&1
  rc=$?
  [ $rc -eq 2 ] || { echo "FAIL: $what: exit status $rc, want 2 ($(tail -n 1 "$tmp/refuse.out"))"; fail=1; }
}
refuse "R not a multiple of S" -n 4 --pp 3 --steps 1
refuse "--vstages without interleaved" --pp 1 --vstages 2 --steps 1
refuse "interleaved, M % S != 0" -n 2 --pp 2 --schedule interleaved --vstages 2 --layers 4 \
  --microbatches 3 --steps 1
refuse "more virtual stages than layers" -n 2 --pp 2 --layers 1 --steps 1
refuse "--split sums to 3, L = 2" -n 2 --pp 2 --split 2,1 --steps 1
refuse "--split with a 0" -n 2 --pp 2 --split 2,0 --layers 2 --steps 1
refuse "unknown schedule" --schedule zigzag --steps 1
refuse "--microbatches 0" --microbatches 0 --steps 1
refuse "--pp 0" --pp 0 --steps 1
refuse "--replicas that do not fill the ranks" -n 2 --ep 2 --replicas 1 --steps 1
refuse "more replicas than ranks to hold them" -n 2 --ep 2 --experts 2 --replicas 4 --steps 1
refuse "--overlap with --chunks" --overlap --chunks 2 --steps 1
exit $fail
