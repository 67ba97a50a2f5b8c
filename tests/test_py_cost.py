#!/usr/bin/env python3
"""The binding's cost: a 4 KiB all-to-all (per rank, float32) timed from
Python (Comm.all_to_all on numpy arrays, and on torch CPU tensors over the
same memory) and from C (a loop of moecclAlltoAll in tests/libpy_cost.so)
on the same ranks, communicator and buffers, interleaved in one run; prints
the best round of each and their ratio (many short rounds: on a loaded
machine the best is one that no other job interrupted).

  python -m moeccl.run -n N tests/test_py_cost.py PATH/libpy_cost.so [--iters N] [--rounds N]
                       [--limit US] [--tries N]

On 1 rank the call is a local copy, so the difference is the binding's own
cost; on more ranks it also holds how the ranks' arrival times meet the
library's spin-then-sleep waits (on a loaded machine a rank that arrives
late wakes its peer from a sleep, which costs tens of microseconds either
way).  Fails (exit 1) when the data is wrong, or with --limit when Python
(numpy arrays or torch tensors) adds more than that many microseconds per
call over C in each of --tries measurements (another job can slow one on a
shared machine)."""
import argparse
import ctypes
import sys
import time

import numpy as np

import moeccl


def measure(a, c, cost, send, recv, ts, tr, attempt):
    """One measurement: (exit status or None, 1 if over --limit else 0)."""
    P, r, blk = c.size, c.rank, send.size // c.size
    ptr = lambda x: x.__array_interface__["data"][0]  # noqa: E731
    tc, tp, tt = [], [], []
    for _ in range(a.rounds):
        t = cost.py_cost_alltoall(ptr(send), ptr(recv), blk, int(moeccl.DataType.FLOAT32),
                                  c.handle, a.iters)
        if t < 0:
            print("rank %d: the C loop failed: %s" % (r, c.last_error), file=sys.stderr)
            return 1, 0
        tc.append(t)
        t0 = time.perf_counter()
        for _ in range(a.iters):
            c.all_to_all(send, recv)
        tp.append((time.perf_counter() - t0) / a.iters)
        if ts is not None:
            t0 = time.perf_counter()
            for _ in range(a.iters):
                c.all_to_all(ts, tr)
            tt.append((time.perf_counter() - t0) / a.iters)
    c_us, py_us = 1e6 * min(tc), 1e6 * min(tp)
    torch_us = 1e6 * min(tt) if tt else 0
    torch_txt = ", torch tensors %.2f us" % torch_us if tt else ""
    print("rank %d of %d: %d-byte all-to-all: C %.2f us, Python %.2f us per call "
          "(Python/C %.2f, +%.2f us; numpy arrays%s); best of %d rounds of %d calls, "
          "interleaved%s" % (r, P, send.size * 4, c_us, py_us, py_us / c_us, py_us - c_us,
                             torch_txt, a.rounds, a.iters,
                             " (try %d)" % attempt if attempt > 1 else ""))
    return None, int(bool(a.limit) and max(py_us, torch_us) - c_us > a.limit)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cost_lib")
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--bytes", type=int, default=4096)
    ap.add_argument("--limit", type=float, default=0, help="max us Python may add (0: none)")
    ap.add_argument("--tries", type=int, default=3,
                    help="measurements before --limit fails (another job may slow one)")
    a = ap.parse_args()
    cost = ctypes.CDLL(a.cost_lib)
    cost.py_cost_alltoall.restype = ctypes.c_double
    cost.py_cost_alltoall.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                                      ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
    c = moeccl.Comm.from_env()
    P, r = c.size, c.rank
    n = a.bytes // 4
    n -= n % P
    send = (np.arange(n, dtype=np.float32) + 1000 * r)
    recv = np.empty_like(send)
    c.all_to_all(send, recv)  # warm up both paths (plans cached)
    blk = n // P
    ok = all(np.array_equal(recv[q * blk:(q + 1) * blk], np.arange(r * blk, (r + 1) * blk) + 1000 * q)
             for q in range(P))
    try:
        import torch
        ts, tr = torch.from_numpy(send), torch.from_numpy(recv)  # the same memory
    except ImportError:
        ts = tr = None
    for attempt in range(1, max(1, a.tries) + 1):
        rc, over = measure(a, c, cost, send, recv, ts, tr, attempt)
        if rc is not None:
            return rc
        # every rank measures again or none does: the calls stay matched
        flag = np.array([over], np.int32)
        c.all_reduce(flag, op="max")
        if not flag[0]:
            break
    c.destroy()
    if not ok:
        print("rank %d: wrong data" % r, file=sys.stderr)
        return 1
    if flag[0]:
        print("rank %d: the binding adds more than %g us per call in each of %d tries"
              % (r, a.limit, a.tries), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
