#!/bin/sh
# scripts/gpu-check.sh as a dry run on the device seam's host emulation
# (GPU_CHECK_DEVICE=emu): the build without autotools (plain-build.sh), the
# device tests, the drop-in's test, a2a_dev_perf on 2, 4 and 8 ranks,
# moe_perf --device cuda on 2, 4 and 8 ranks (this build's, where MPI let it
# be built; skipped with the reason otherwise); the
# stages that need a GPU (PyTorch, the baseline NCCL, nccl-tests on the
# drop-in and on NCCL) skipped with their reason, MPS not started and
# summary.json saying so, with no failed stage; the logs in one archive.
# So the script a GPU machine runs cannot rot unseen.
# The script has its own budget; the test's deadline is above it.
srcdir=${srcdir:-.}
out=$PWD/gpu-check.$$
fail=0
moe=
[ -x ./perf/moe_perf ] && moe=$PWD/perf/moe_perf
OUT=$out PLAIN_DIR=$out/plain GPU_CHECK_DEVICE=emu DEV_PERF_MAX=4M GPU_CHECK_BUDGET=400 MOE_PERF=$moe \
  timeout -k 5 450 "$srcdir/scripts/gpu-check.sh" >"$out.log" 2>&1
rc=$?
[ $rc -eq 0 ] || { echo "FAIL: gpu-check.sh exit status $rc"; tail -n 30 "$out.log"; fail=1; }
for s in build device kernels mp_device shim dev_costs dev_perf_2 dev_perf_4 dev_perf_8; do
  grep -q "^$s 0 " "$out/summary.txt" 2>/dev/null || { echo "FAIL: stage $s did not pass"; fail=1; }
done
want=77
[ -n "$moe" ] && want=0
for s in moe_dev_perf_2 moe_dev_perf_4 moe_dev_perf_8; do
  grep -q "^$s $want " "$out/summary.txt" 2>/dev/null || { echo "FAIL: stage $s: not status $want"; fail=1; }
done
[ -z "$moe" ] || [ "$(grep -c '"wrong": 0' "$out/moe_dev_perf_8.json" 2>/dev/null)" = 2 ] ||
  { echo "FAIL: moe_dev_perf_8.json: want 2 rows with no wrong value"; fail=1; }
[ -n "$moe" ] || grep -q 'autotools build' "$out/moe_dev_perf_2.log" 2>/dev/null ||
  { echo "FAIL: the moe_dev_perf skip gives no reason"; fail=1; }
for s in torch_2 torch_4 baseline moe_overlap_2 moe_overlap_4 moe_overlap_8; do
  grep -q "^$s 77 " "$out/summary.txt" 2>/dev/null || { echo "FAIL: stage $s not skipped"; fail=1; }
done
for c in alltoall sendrecv all_gather broadcast; do
  for n in 2 4 8; do
    for s in nt_${c}_$n nccl_${c}_$n; do
      grep -q "^$s 77 " "$out/summary.txt" 2>/dev/null || { echo "FAIL: stage $s not skipped"; fail=1; }
    done
  done
done
grep -q 'nccl-tests needs a GPU' "$out/nt_alltoall_2.log" "$out/nccl_broadcast_8.log" 2>/dev/null ||
  { echo "FAIL: the skip gives no reason"; fail=1; }
grep -q 'needs a GPU' "$out/torch_2.log" 2>/dev/null || { echo "FAIL: the PyTorch skip gives no reason"; fail=1; }
grep -q '^not-run the device is emu' "$out/mps.txt" 2>/dev/null || { echo "FAIL: mps.txt"; fail=1; }
grep -q '^device hbm_GBps=.* link_GBps=.* copy_us=' "$out/dev_costs.tune" 2>/dev/null ||
  { echo "FAIL: dev_costs wrote no device line"; fail=1; }
tar -tJf "$out/gpu-check-logs.tar.xz" 2>/dev/null | grep -q '^summary.json$' ||
  { echo "FAIL: no summary.json in the logs' archive"; fail=1; }
python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
assert d["failed_stages"] == [], d["failed_stages"]
assert all(len(d["a2a_dev_perf"][n]) == 4 for n in ("2", "4", "8")), "a2a_dev_perf rows"
assert all(r["wrong"] == 0 for n in ("2", "4", "8") for r in d["a2a_dev_perf"][n]), "wrong values"
assert d["targets"]["nt_wrong"]["met"] is None, "nccl-tests judged without running"
assert d["targets"]["torch"]["met"] is None, "PyTorch judged without running"
assert d["mps"]["ran"] is False and "emu" in d["mps"]["detail"], d["mps"]
' "$out/summary.json" || { echo "FAIL: summary.json"; fail=1; }
[ $fail -eq 0 ] && rm -rf "$out" "$out.log" && echo "test_gpu_check: OK"
exit $fail
