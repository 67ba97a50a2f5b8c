#!/bin/sh
# moe_train's synthetic task with its defaults (L=2 E=8 K=2 H=64 F=128
# N=256, 200 steps, lr 0.003, aux 0.01, seed 1; one batch of random inputs,
# the targets from a teacher MoE of seed 2): the last step's loss must be
# below 10% of the loss of x_L = x on that batch.  Also --json (one object
# per step, valid JSON when a python3 is there), --fresh (runs, the loss
# falls) and the command-line errors it must refuse (exit 2).
train=./moe/moe_train
tmp=$(mktemp -d "${TMPDIR:-/tmp}/test_moe_train.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0

if ! $train --json "$tmp/run.json" >"$tmp/out" 2>&1; then
  echo "FAIL: moe_train with the defaults: $(tail -n 3 "$tmp/out")"
  exit 1
fi
tail -n 1 "$tmp/out"
ratio=$(awk '/^# loss \/ baseline/ {print $(NF - 3)}' "$tmp/out")
awk -v r="$ratio" 'BEGIN { exit !(r != "" && r < 0.1) }' ||
  { echo "FAIL: loss / baseline after the default steps is '$ratio', want < 0.1"; fail=1; }
steps=$(grep -c '"step":' "$tmp/run.json")
[ "$steps" -eq 200 ] || { echo "FAIL: --json has $steps steps, want 200"; fail=1; }
if command -v python3 >/dev/null 2>&1; then
  python3 -c "import json, sys; d = json.load(open(sys.argv[1])); assert len(d['steps']) == 200" \
    "$tmp/run.json" || { echo "FAIL: --json is not valid JSON"; fail=1; }
fi

# --fresh: new inputs every step; the loss must at least fall below the
# baseline (a teacher seen through fresh inputs is learnt much more slowly).
$train --fresh --steps 100 --hidden 16 --ffn 32 --experts 4 --lr 0.01 >"$tmp/fresh" 2>&1 ||
  { echo "FAIL: --fresh: $(tail -n 3 "$tmp/fresh")"; fail=1; }
ratio=$(awk '/^# loss \/ baseline/ {print $(NF - 3)}' "$tmp/fresh")
awk -v r="$ratio" 'BEGIN { exit !(r != "" && r < 1) }' ||
  { echo "FAIL: --fresh: loss / baseline '$ratio' after 100 steps, want < 1"; fail=1; }

refuse() { # refuse WHAT ARGS...: moe_train must exit 2
  what=$1
  shift
  $train "$@" >/dev/null 2>&1
  rc=$?
  [ $rc -eq 2 ] || { echo "FAIL: $what: exit status $rc, want 2"; fail=1; }
}
refuse "topk > experts" --experts 4 --topk 5 --steps 1
refuse "zero hidden" --hidden 0 --steps 1
refuse "negative lr" --lr -1 --steps 1
refuse "P x D != R" -n 2 --ep 2 --dp 2 --steps 1
refuse "unknown flag" --bogus
exit $fail
