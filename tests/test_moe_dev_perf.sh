#!/bin/sh
# moe_perf --device cuda on the device seam's host emulation
# (MOECCL_DEVICE=emu): forked ranks without MPI, device buffers, the MoE
# layout + dispatch + combine on each rank's stream, every output element
# checked by the tool against the exact value (its exit status is 3 on a
# wrong one), the NCCL baseline refused with its reason on a backend that
# is not CUDA, the baseline's own path (device permute, counts all-to-all,
# grouped send/recv, device unpermute) checked on moeccl's calls in NCCL's
# place (--baseline moeccl), the JSON rows, and the command lines it must
# refuse.  Each run has a deadline (MP_DEADLINE_SCALE stretches it).
perf=./perf/moe_perf
[ -x "$perf" ] || { echo "SKIP: no $perf (moe_perf is built where configure found MPI)"; exit 77; }
. "${srcdir:-.}/tests/perf_env.sh"
rows() { grep -cE '^(float|bfloat16) ' out.$$; }
# every row: wrong (next to last column) 0, bwrong (last) $1
rows_ok() { awk -v b="$1" '/^(float|bfloat16) / && ($(NF-1) != 0 || $NF != b) { bad = 1 } END { exit bad }' out.$$; }
export MOECCL_DEVICE=emu

# 2 ranks, K = 2 and 6, both types: NCCL asked for and refused with the
# reason, moeccl's results checked.
run "2 ranks" $perf --device cuda -n 2 -t 200 -H 48 -E 8 -k 2,6 -d all -i 2 -w 1 -r 3 \
  --json moedev.$$.json
[ "$(rows)" -eq 4 ] || { echo "FAIL: 2 ranks: $(rows) rows, want 4"; fail=1; }
grep -q 'baseline: none: NCCL could not run here: .*emu, not cuda' out.$$ ||
  { echo "FAIL: the NCCL baseline's refusal not stated: $(grep baseline out.$$)"; fail=1; }
rows_ok - || { echo "FAIL: 2 ranks: wrong values reported"; fail=1; }
[ "$(grep -c '"wrong": 0' moedev.$$.json)" -eq 4 ] || { echo "FAIL: 2 ranks: JSON rows"; fail=1; }

# 3 ranks (odd), --device after the other options, two token counts, rows
# of 74 bytes (bfloat16, H 37): the baseline's path on moeccl's calls,
# both sides checked.
run "3 ranks" $perf -n 3 -t 96,160 -H 37 -E 6 -k 2,6 -d bfloat16 -i 2 -w 1 -r 2 \
  --baseline moeccl --json moedev.$$.json --device cuda
[ "$(rows)" -eq 4 ] || { echo "FAIL: 3 ranks: $(rows) rows, want 4"; fail=1; }
rows_ok 0 || { echo "FAIL: 3 ranks: wrong values reported"; fail=1; }
[ "$(grep -c '"base_wrong": 0' moedev.$$.json)" -eq 4 ] || { echo "FAIL: 3 ranks: JSON rows"; fail=1; }

# random delays in the emulated streams
MOECCL_DEVICE_EMU_DELAY_US=200 run "2 ranks, delays" $perf --device=cuda -n 2 -t 64 -H 16 -k 6 \
  -i 2 -w 1 -r 1 --baseline moeccl
[ "$(rows)" -eq 1 ] && rows_ok 0 || { echo "FAIL: delays: $(rows) rows or wrong values"; fail=1; }

refuse "--device gpu" 2 $perf --device gpu -n 2
refuse "no -n" 2 $perf --device cuda
refuse "one rank" 2 $perf --device cuda -n 1
refuse "K > E" 2 $perf --device cuda -n 2 -E 4 -k 2,6
refuse "K not exact in bfloat16" 2 $perf --device cuda -n 2 -E 16 -k 9 -d bfloat16
refuse "unknown baseline" 2 $perf --device cuda -n 2 --baseline mpi
refuse "unknown dtype" 2 $perf --device cuda -n 2 -d half
refuse "zero tokens" 2 $perf --device cuda -n 2 -t 0
refuse "bad token list" 2 $perf --device cuda -n 2 -t 64,x
MOECCL_DEVICE=none refuse "no device backend" 1 $perf --device cuda -n 2 -t 8 -H 8
grep -q 'no device backend' err.$$ || { echo "FAIL: no device backend: not said"; fail=1; }

rm -f out.$$ err.$$ moedev.$$.json
[ $fail -eq 0 ] && echo "test_moe_dev_perf: OK"
exit $fail
