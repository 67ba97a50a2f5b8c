#!/bin/sh
# perf/a2a_dev_perf on the device seam's host emulation (MOECCL_DEVICE=emu):
# forked ranks, moecclMemAllocDevice buffers, calls on device streams, the
# roofline copy, every received element checked by the tool (its exit
# status is 1 on a wrong value), the JSON rows, the NCCL baseline's refusal
# on a backend that is not CUDA, and the command-line errors it must refuse.
# Each run has a deadline (MP_DEADLINE_SCALE stretches it under sanitizers).
perf=./perf/a2a_dev_perf
. "${srcdir:-.}/tests/perf_env.sh"
rows() { grep -c '^ ' out.$$; }
export MOECCL_DEVICE=emu

# 2 ranks: both ops, 3 sizes (one not a multiple of the ranks' blocks),
# NCCL asked for and refused with the reason, everything checked.
run "2 ranks" $perf -n 2 -b 40000 -e 640000 -f 4 -i 2 -w 1 -r 3 --json dev.$$.json
[ "$(rows)" -eq 6 ] || { echo "FAIL: 2 ranks: $(rows) rows, want 6"; fail=1; }
grep -q 'baseline: none: NCCL could not run here: .*emu, not cuda' out.$$ ||
  { echo "FAIL: the NCCL baseline's refusal not stated: $(grep baseline out.$$)"; fail=1; }
awk '/^ / && ($(NF-1) != 0 || $(NF) != "0") { bad = 1 } END { exit bad }' out.$$ ||
  { echo "FAIL: wrong values reported"; fail=1; }
[ "$(grep -c '"wrong": 0' dev.$$.json)" -eq 6 ] || { echo "FAIL: JSON rows"; fail=1; }

# 3 ranks (odd), random delays in the emulated streams, the MoE skew only.
MOECCL_DEVICE_EMU_DELAY_US=200 run "3 ranks, delays" $perf -n 3 -b 96K -e 96K -o alltoallv \
  -i 3 -w 1 -r 1 --baseline none
[ "$(rows)" -eq 1 ] || { echo "FAIL: 3 ranks: $(rows) rows, want 1"; fail=1; }

# --costs: the device line the tuner reads (MOECCL_TUNE_FILE), every key
# measured, and a run that prices with it (its INFO line says so)
run "--costs" $perf -n 2 -b 1M -e 1M -o alltoall -i 2 -r 1 --baseline none --costs costs.$$.tune
grep -Eq '^device hbm_GBps=[0-9.e+]+ link_GBps=[0-9.e+]+ copy_us=[0-9.e+-]+ launch_us=[0-9.e+-]+$' \
  costs.$$.tune || { echo "FAIL: --costs: $(cat costs.$$.tune)"; fail=1; }
MOECCL_TUNE_FILE=costs.$$.tune MOECCL_DEBUG=INFO MOECCL_DEBUG_SUBSYS=ALGO \
  run "priced with the costs" $perf -n 2 -b 64K -e 64K -o alltoall -i 1 -r 1 --baseline none
grep -q 'device buffers (costs from the file)' err.$$ out.$$ ||
  { echo "FAIL: the measured costs were not taken"; fail=1; }
refuse "--costs without the all-to-all" 2 $perf -n 2 -o alltoallv --costs costs.$$.tune

refuse "one rank" 2 $perf -n 1
refuse "no -n" 2 $perf -b 1M
refuse "unknown op" 2 $perf -n 2 -o reduce
refuse "unknown baseline" 2 $perf -n 2 --baseline mpi
refuse "min > max" 2 $perf -n 2 -b 2M -e 1M
MOECCL_DEVICE=none refuse "no device backend" 1 $perf -n 2 -b 64K -e 64K
grep -q 'no device backend' err.$$ || { echo "FAIL: no device backend: not said"; fail=1; }

rm -f out.$$ err.$$ dev.$$.json costs.$$.tune
[ $fail -eq 0 ] && echo "test_dev_perf: OK"
exit $fail
