# Sourced by the perf tools' tests (test_dev_perf, test_moe_dev_perf):
# run WHAT COMMAND... (must exit 0 within 120 s) and refuse WHAT STATUS
# COMMAND... (must exit STATUS within 60 s), each writing out.$$ and err.$$
# and setting fail=1 when it does not; MP_DEADLINE_SCALE stretches both.
scale=${MP_DEADLINE_SCALE:-1}
fail=0
run() {
  what=$1
  shift
  timeout -k 5 $((120 * scale)) "$@" >out.$$ 2>err.$$
  rc=$?
  [ $rc -eq 0 ] || { echo "FAIL: $what: exit status $rc: $(cat err.$$)"; fail=1; }
}
refuse() {
  what=$1 want=$2
  shift 2
  timeout -k 5 $((60 * scale)) "$@" >out.$$ 2>err.$$
  rc=$?
  [ $rc -eq "$want" ] || { echo "FAIL: $what: exit status $rc, want $want"; fail=1; }
}
