#!/bin/sh
# moeccl.torch.MoELayer on 1-4 ranks against the same layer on one process
# in plain PyTorch (outputs, aux loss, every gradient), the dispatch and
# combine autograd Functions, and bad input (tests/test_py_moe.py).
. "${srcdir:-.}/tests/py_env.sh"
st=0
for n in 1 2 3 4; do
  run "test_py_moe.py on $n ranks" 240 "$py" -m moeccl.run -n $n --deadline $((200 * scale)) \
    "$srcdir/tests/test_py_moe.py" || st=1
done
exit $st
