#!/bin/sh
# The Python package's collectives against numpy on 2, 3 and 4 ranks (each
# started by python -m moeccl.run, with a deadline), its bad-input
# refusals, and the cost of the binding: a 4 KiB all-to-all from Python
# over the same from C, one run (tests/test_py_cost.py) on 1 and 2 ranks.
. "${srcdir:-.}/tests/py_env.sh"
st=0
for n in 2 3 4; do
  run "test_py_coll.py on $n ranks" 180 "$py" -m moeccl.run -n $n --deadline $((150 * scale)) \
    "$srcdir/tests/test_py_coll.py" || st=1
done
# the launcher: a failing rank's status comes back and stops the others; a
# deadline kills every rank (124)
launch() {
  want=$1
  shift
  start=$(date +%s)
  timeout -k 5 $((60 * scale)) "$py" -m moeccl.run "$@"
  rc=$?
  echo "moeccl.run $*: exit $rc (want $want) after $(($(date +%s) - start)) s"
  [ $rc -eq "$want" ]
}
echo "== the launcher's failure paths"
launch 3 -n 3 "$srcdir/tests/test_py_launch.py" fail || st=1
launch 124 -n 2 --deadline 3 "$srcdir/tests/test_py_launch.py" hang || st=1
# torchrun's environment (what torchrun sets, without torchrun): 2 ranks
port=$("$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
echo "== torchrun's environment, MASTER_PORT=$port"
for r in 0 1; do
  RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
    timeout -k 5 $((60 * scale)) "$py" "$srcdir/tests/test_py_launch.py" ok &
  eval "pid$r=\$!"
done
wait $pid0 || st=1
wait $pid1 || st=1
# 1 rank: the binding's own cost, at most 10 us over C in one of three
# measurements (4-5 us at load averages of 2 to 16 on 2 cores: the best of
# 100 short rounds is one that no other job interrupted); 2 ranks: reported
# (the peer's wake-ups dominate on a loaded machine)
cost=$PWD/tests/.libs/libpy_cost.so
limit=10
[ -n "$sanitized" ] && limit=0 # a sanitized library: reported, not judged
run "test_py_cost.py on 1 rank" 120 "$py" -m moeccl.run -n 1 --deadline $((100 * scale)) \
  "$srcdir/tests/test_py_cost.py" "$cost" --limit $limit || st=1
run "test_py_cost.py on 2 ranks" 180 "$py" -m moeccl.run -n 2 --deadline $((150 * scale)) \
  "$srcdir/tests/test_py_cost.py" "$cost" --iters 100 --rounds 50 || st=1
exit $st
