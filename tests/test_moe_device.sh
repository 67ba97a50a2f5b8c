#!/bin/sh
# moe_train --device cuda keeps every tensor in the backend's memory: on the
# CUDA backend's host stand-in (MOE_CUDA_STANDIN=1), whose device memory
# faults when the host touches it, the first step's dump (--dump: out,
# grad_x, every gradient, the loss) equals --device host's on 1 rank and in
# P x D and pipeline layouts up to 8 ranks: per tensor max|cuda - host| <=
# 1e-4 * max|host|, the loss within 1e-4 relative (the issue's float32
# tolerance, what a GPU's cuBLAS and expf must meet; the stand-in, OpenBLAS
# in the column-major convention and the kernels' host twins, has matched
# the host bit for bit).  Then a short --device cuda training run falls
# below its first loss, --device auto runs, and a bad --device is refused.
# Every run has a deadline (timeout 120 s, MP_DEADLINE_SCALE stretches it)
# and MOECCL_TIMEOUT=30.
train=./moe/moe_train
cmp=./tests/moe_npy_cmp
tmp=$(mktemp -d "${TMPDIR:-/tmp}/test_moe_device.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
: "${MOECCL_TIMEOUT:=30}"
export MOECCL_TIMEOUT
scale=${MP_DEADLINE_SCALE:-1}
limit=$(awk -v s="$scale" 'BEGIN { s = s > 0 ? s : 1; printf "%d", 120 * s }')
run() { timeout -k 5 "$limit" "$train" "$@"; }
fail=0

src="--layers 4 --experts 8 --topk 2 --hidden 32 --ffn 48 --tokens 62 --aux 0.05 --seed 5"

# dump NAME ARGS...
dump() {
  name=$1
  shift
  if ! run $src --steps 1 --dump "$tmp/$name" "$@" >"$tmp/$name.out" 2>&1; then
    echo "FAIL: $name ($*): $(tail -n 3 "$tmp/$name.out")"
    fail=1
    return 1
  fi
}
# pair NAME ARGS...: the layout on the host, then on the stand-in, compared
pair() {
  pn=$1
  shift
  dump "${pn}_host" --device host "$@" || return
  MOE_CUDA_STANDIN=1 dump "${pn}_cuda" --device cuda "$@" || return
  grep -q 'stand-in' "$tmp/${pn}_cuda.out" ||
    { echo "FAIL: $pn: --device cuda did not run the stand-in"; fail=1; }
  printf '%-58s ' "--device cuda $*:"
  $cmp "$tmp/${pn}_host" "$tmp/${pn}_cuda" 1e-4 ||
    { echo "FAIL: $pn: --device cuda differs from --device host"; fail=1; }
}

pair r1
pair r1_chunks --chunks 2
pair ep2 -n 2 --ep 2
pair ep2dp2 -n 4 --ep 2 --dp 2 --chunks 2
pair ep4dp2 -n 8 --ep 4 --dp 2
pair pp2 -n 2 --pp 2 --microbatches 4 --schedule 1f1b
pair pp2ep2_zb -n 4 --pp 2 --ep 2 --microbatches 4 --schedule zb-h1
pair pp2_int_ov -n 2 --pp 2 --microbatches 4 --schedule interleaved --vstages 2 --overlap

# training on the stand-in: the loss falls
if MOE_CUDA_STANDIN=1 run $src --steps 20 --device cuda -n 2 --ep 2 >"$tmp/train.out" 2>&1; then
  awk '/^ +[0-9]+ / { if (!first) first = $2; last = $2 }
       END { if (!(last < first)) { print "FAIL: loss " first " -> " last; exit 1 } }' \
    "$tmp/train.out" || fail=1
else
  echo "FAIL: --device cuda training: $(tail -n 3 "$tmp/train.out")"
  fail=1
fi
# auto: the GPU where one is found, else the host; either way it runs
run $src --steps 1 --device auto >"$tmp/auto.out" 2>&1 ||
  { echo "FAIL: --device auto: $(tail -n 3 "$tmp/auto.out")"; fail=1; }
# a bad value, and placements (not yet on a device), are refused
if run $src --steps 1 --device tpu >"$tmp/bad.out" 2>&1 ||
  ! grep -q 'want host, cuda or auto' "$tmp/bad.out"; then
  echo "FAIL: --device tpu was not refused: $(tail -n 2 "$tmp/bad.out")"
  fail=1
fi
if MOE_CUDA_STANDIN=1 run $src --steps 1 --device cuda -n 2 --ep 2 --replicas 2 \
  >"$tmp/rep.out" 2>&1 || ! grep -q 'not yet with' "$tmp/rep.out"; then
  echo "FAIL: --device cuda --replicas was not refused: $(tail -n 2 "$tmp/rep.out")"
  fail=1
fi
[ $fail = 0 ] && echo "PASS"
exit $fail
