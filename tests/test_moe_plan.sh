#!/bin/sh
# The planner: moe_plan ranks the layouts of a DeepSeek-V3-like shape on the
# 4,096-rank dragonfly and a Mixtral-8x7B-like one on the 512-GPU fat tree
# (a2a_sim's presets, H100/H200-class rates), prints a winner that fits in
# memory with its split and MFU, writes JSON, predicts one --layout, and
# refuses bad arguments (exit 2); moe_train --plan on 2 ranks plans with its
# own communicator, prints the ranking and trains with the winner.
moe_test=test_moe_plan
. "${srcdir:-.}/tests/moe_env.sh"
plan=./moe/moe_plan

# at scale: a winner that fits, its memory and MFU
for args in "--model deepseek-v3 --cluster dragonfly" "--model mixtral-8x7b --cluster fattree --gpu h200"; do
  if ! timeout -k 5 "$limit" $plan $args --top 3 --json "$tmp/p.json" >"$tmp/p.out" 2>&1; then
    echo "FAIL: moe_plan $args: $(tail -n 2 "$tmp/p.out")"
    fail=1
    continue
  fi
  grep '^# winner' "$tmp/p.out"
  awk '/^#    1 / { ok = $0 !~ /does not fit/ } END { exit !ok }' "$tmp/p.out" ||
    { echo "FAIL: moe_plan $args: no winner that fits"; cat "$tmp/p.out"; fail=1; }
  grep -q '^#   memory per rank' "$tmp/p.out" && grep -q 'runner-up' "$tmp/p.out" ||
    { echo "FAIL: moe_plan $args: no memory split or runner-up line"; fail=1; }
  python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); assert len(d["layouts"]) > 10' \
    "$tmp/p.json" 2>/dev/null || { echo "FAIL: moe_plan --json"; fail=1; }
done

# one layout
if ! $plan --model mixtral-8x7b --cluster fattree \
    --layout "--pp 4 --ep 8 --dp 16 --microbatches 32 --schedule 1f1b" >"$tmp/l.out" 2>&1; then
  echo "FAIL: moe_plan --layout: $(tail -n 2 "$tmp/l.out")"
  fail=1
fi

refuse() { # refuse WHAT ARGS...: exit 2
  what=$1
  shift
  "$@" >"$tmp/r.out" 2>&1
  rc=$?
  [ $rc -eq 2 ] || { echo "FAIL: $what: exit status $rc, want 2"; fail=1; }
}
refuse "unknown model" $plan --model gpt5
refuse "unknown cluster" $plan --cluster nowhere
refuse "unknown gpu" $plan --gpu tpu
refuse "K > E" $plan --experts 2 --topk 4
refuse "a layout that does not apply" $plan --cluster fattree -n 8 --gpu host \
  --layout "--pp 3 --ep 1 --dp 1"
refuse "bad --rates" $plan --rates 16:x

# moe_train --plan on this machine
if ! timeout -k 5 "$limit" $train -n 2 --plan --steps 3 --plan-json "$tmp/t.json" >"$tmp/t.out" 2>&1; then
  echo "FAIL: moe_train --plan: $(tail -n 3 "$tmp/t.out")"
  fail=1
else
  grep '^# plan:' "$tmp/t.out" || { echo "FAIL: moe_train --plan: no '# plan:' line"; fail=1; }
  grep -q '^# loss / baseline' "$tmp/t.out" || { echo "FAIL: moe_train --plan did not train"; fail=1; }
fi
exit $fail
