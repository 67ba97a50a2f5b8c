#!/usr/bin/env python3
"""Every collective of the moeccl Python package against numpy, on the
ranks `python -m moeccl.run -n N` started (tests/test_py_coll.sh runs it on
2, 3 and 4 ranks).  Each rank builds every rank's inputs from a seed and
checks its own outputs against numpy; then bad input is refused with a
clear message before any call, and the library's own refusals arrive as
MoecclError with moecclGetLastError's text.  Exit 0 passed, 1 failed."""
import sys

import numpy as np
import torch

import moeccl

FAILS = []


def check(cond, what):
    if not cond:
        FAILS.append(what)
        print("rank %d FAIL: %s" % (RANK, what), file=sys.stderr)


def inputs(r, n, dtype, salt=0):
    rng = np.random.default_rng(1000 * r + salt)
    if np.dtype(dtype).kind == "f":
        return rng.integers(-8, 8, n).astype(dtype)  # exact sums in every float type
    return rng.integers(0, 5, n).astype(dtype)


def collectives(c, dtype):
    P, r, n = c.size, c.rank, 12
    xs = [inputs(q, P * n, dtype) for q in range(P)]
    name = np.dtype(dtype).name
    # all_reduce (sum, max, min, prod, avg on floats), out of place and in place
    ops = {"sum": lambda a: np.sum(a, axis=0), "max": lambda a: np.max(a, axis=0),
           "min": lambda a: np.min(a, axis=0)}
    for op, f in ops.items():
        out = np.empty_like(xs[r])
        c.all_reduce(xs[r], out, op=op)
        check(np.array_equal(out, f(np.stack(xs)).astype(dtype)), "all_reduce %s %s" % (op, name))
    buf = xs[r].copy()
    c.all_reduce(buf, op=moeccl.SUM)
    check(np.array_equal(buf, np.sum(np.stack(xs), axis=0).astype(dtype)),
          "all_reduce in place %s" % name)
    # reduce_scatter
    out = np.empty(n, dtype)
    c.reduce_scatter(xs[r], out)
    check(np.array_equal(out, np.sum(np.stack(xs), axis=0).astype(dtype)[r * n:(r + 1) * n]),
          "reduce_scatter %s" % name)
    # all_gather
    out = np.empty(P * n, dtype)
    c.all_gather(xs[r][:n], out)
    check(np.array_equal(out, np.concatenate([x[:n] for x in xs])), "all_gather %s" % name)
    for root in range(P):
        # broadcast (out of place, in place)
        out = np.empty(n, dtype)
        c.broadcast(xs[r][:n] if r == root else None, out, root=root)
        check(np.array_equal(out, xs[root][:n]), "broadcast root %d %s" % (root, name))
        buf = xs[r][:n].copy()
        c.broadcast(buf, root=root)
        check(np.array_equal(buf, xs[root][:n]), "broadcast in place root %d %s" % (root, name))
        # reduce
        out = np.empty(n, dtype) if r == root else None
        c.reduce(xs[r][:n], out, op="sum", root=root)
        if r == root:
            check(np.array_equal(out, np.sum(np.stack([x[:n] for x in xs]), axis=0).astype(dtype)),
                  "reduce root %d %s" % (root, name))
        # gather
        out = np.empty(P * n, dtype) if r == root else None
        c.gather(xs[r][:n], out, root=root)
        if r == root:
            check(np.array_equal(out, np.concatenate([x[:n] for x in xs])),
                  "gather root %d %s" % (root, name))
        # scatter
        out = np.empty(n, dtype)
        c.scatter(xs[r] if r == root else None, out, root=root)
        check(np.array_equal(out, xs[root][r * n:(r + 1) * n]), "scatter root %d %s" % (root, name))
    # all_to_all
    out = np.empty(P * n, dtype)
    c.all_to_all(xs[r], out)
    check(np.array_equal(out, np.concatenate([x[r * n:(r + 1) * n] for x in xs])),
          "all_to_all %s" % name)


def alltoallv(c):
    """MoE-shaped counts: skewed, many zero blocks, changing per round."""
    P, r, H = c.size, c.rank, 16
    for rnd in range(3):
        rng = np.random.default_rng(7 + rnd)
        counts = rng.integers(0, 40, (P, P)) * (rng.random((P, P)) > 0.3)  # [src][dst] tokens
        counts[:, 0] += 50 * rnd  # a hot expert on rank 0
        xs = [inputs(q, int(counts[q].sum()) * H, np.float32, salt=rnd) for q in range(P)]
        recv = np.full(int(counts[:, r].sum()) * H, -1, np.float32)
        c.all_to_allv(xs[r], [int(k) * H for k in counts[r]], recv,
                      [int(k) * H for k in counts[:, r]])
        want = []
        for q in range(P):
            off = int(counts[q, :r].sum()) * H
            want.append(xs[q][off:off + int(counts[q, r]) * H])
        check(np.array_equal(recv, np.concatenate(want)), "all_to_allv round %d" % rnd)
    # explicit displacements with gaps: untouched bytes stay
    send = np.arange(P * 4, dtype=np.int64) + 1000 * r
    recv = np.full(P * 6, -7, np.int64)
    c.all_to_allv(send, [2] * P, recv, [2] * P, send_displs=[4 * j for j in range(P)],
                  recv_displs=[6 * j + 1 for j in range(P)])
    for q in range(P):
        blk = recv[6 * q:6 * q + 6]
        check(blk[0] == -7 and list(blk[1:3]) == [1000 * q + 4 * r, 1000 * q + 4 * r + 1]
              and all(blk[3:] == -7), "all_to_allv displacements from %d" % q)


def torch_buffers(c):
    P, r = c.size, c.rank
    for dt in (torch.float32, torch.bfloat16, torch.float16, torch.int64):
        xs = [torch.arange(P * 4, dtype=torch.float32).to(dt) + q for q in range(P)]
        out = torch.empty(P * 4, dtype=dt)
        c.all_reduce(xs[r], out)
        want = sum(x.to(torch.float64) for x in xs).to(dt)
        check(torch.equal(out, want), "torch all_reduce %s" % dt)
        out = torch.empty(P * 4, dtype=dt)
        c.all_to_all(xs[r].view(P, 4), out.view(P, 4))
        want = torch.cat([x[r * 4:(r + 1) * 4] for x in xs])
        check(torch.equal(out, want), "torch all_to_all %s" % dt)
    check(moeccl.to_datatype(torch.bfloat16) == moeccl.DataType.BFLOAT16, "bf16 maps")
    check(moeccl.torch_dtype(moeccl.DataType.BFLOAT16) == torch.bfloat16, "bf16 maps back")
    check(moeccl.numpy_dtype(moeccl.DataType.FLOAT16) == np.float16, "fp16 maps back")
    check(moeccl.to_datatype("fp8e4m3") == moeccl.DataType.FLOAT8E4M3, "fp8 by name")
    # bf16 carried in a numpy uint16 array, read as bf16
    a = torch.full((8,), 1.5, dtype=torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    out = np.empty_like(a)
    c.all_reduce(a, out, dtype="bfloat16")
    got = torch.from_numpy(out.view(np.int16)).view(torch.bfloat16)
    check(torch.equal(got, torch.full((8,), 1.5 * P, dtype=torch.bfloat16)), "bf16 via dtype=")


def p2p_groups_streams(c):
    P, r = c.size, c.rank
    right, left = (r + 1) % P, (r - 1) % P
    send = np.arange(10, dtype=np.float64) + r
    recv = np.empty(10)
    with moeccl.group():
        c.send(send, right)
        c.recv(recv, left)
    check(np.array_equal(recv, np.arange(10) + left), "send/recv ring in a group")
    # a host stream: issue, then synchronize
    with moeccl.HostStream() as s:
        x = np.full(64, r + 1, np.int32)
        out = np.empty(64 * P, np.int32)
        c.all_gather(x, out, stream=s)
        y = np.full(P * 3, float(r))
        z = np.empty(P * 3)
        c.all_to_all(y, z, stream=s)
        s.synchronize()
        check(s.query(), "host stream idle after synchronize")
        check(np.array_equal(out, np.repeat(np.arange(1, P + 1, dtype=np.int32), 64)),
              "all_gather on a host stream")
        check(np.array_equal(z, np.repeat(np.arange(P, dtype=np.float64), 3)),
              "all_to_all on a host stream")
    # premul sum
    op = c.premul_sum(2.0, np.float32)
    x = np.full(5, r + 1, np.float32)
    c.all_reduce(x, op=op)
    check(np.array_equal(x, np.full(5, 2.0 * P * (P + 1) / 2, np.float32)), "premul_sum")
    c.destroy_op(op)
    # split: even and odd ranks
    sub = c.split(r % 2, comm_name="halves")
    want = len(range(r % 2, P, 2))
    check(sub.size == want and sub.rank == r // 2, "split size/rank")
    x = np.array([r], np.int32)
    sub.all_reduce(x)
    check(int(x[0]) == sum(range(r % 2, P, 2)), "all_reduce on the split")
    sub.destroy()
    check(c.split(None) is None, "split with no color gives None")
    # a communicator of one rank each: the context manager aborts it on an
    # exception and destroys it otherwise
    solo = c.split(r)
    try:
        with solo:
            check(solo.async_error() is None, "no async error")
            raise KeyError("leave the block")
    except KeyError:
        pass
    check(solo.handle is None, "aborted by the context manager")
    with c.split(r) as solo:
        x = np.arange(3.0)
        solo.all_reduce(x)
    check(solo.handle is None and np.array_equal(x, np.arange(3.0)), "destroyed on exit")

    class Wrapped:  # only DLPack: read through torch.utils.dlpack
        def __init__(self, a):
            self.a = a

        def __dlpack__(self, stream=None):
            return self.a.__dlpack__()

        def __dlpack_device__(self):
            return self.a.__dlpack_device__()

    src = np.full(2 * P, r, np.float32)
    dst = np.zeros(2 * P, np.float32)
    c.all_to_all(Wrapped(src), Wrapped(dst))
    check(np.array_equal(dst, np.repeat(np.arange(P, dtype=np.float32), 2)), "DLPack buffers")


def expect(exc, fn, needle, what):
    try:
        fn()
    except exc as e:
        ok = needle.lower() in str(e).lower()
        check(ok, "%s: message %r lacks %r" % (what, str(e), needle))
        return e
    except Exception as e:  # noqa: BLE001
        check(False, "%s: raised %s: %s, want %s" % (what, type(e).__name__, e, exc.__name__))
        return None
    check(False, "%s: nothing raised" % what)
    return None


def bad_input(c):
    P = c.size
    A = moeccl.ArgumentError
    x = np.zeros(P * 4, np.float32)
    expect(A, lambda: c.all_to_all(x, np.zeros(P * 4 + 1, np.float32)), "must match", "a2a size")
    expect(A, lambda: c.all_to_all(np.zeros(P * 4 + 1, np.float32), np.zeros(P * 4 + 1,
                                   np.float32)), "multiple", "a2a not a multiple")
    expect(A, lambda: c.all_to_all(x, np.zeros(P * 4, np.float64)), "datatypes differ", "dtype")
    expect(A, lambda: c.all_reduce(np.zeros((4, 4), np.float32)[:, 1]), "contiguous",
           "numpy strided")
    expect(A, lambda: c.all_reduce(torch.zeros(4, 4).t()), "contiguous", "torch transposed")
    ro = np.zeros(4, np.float32)
    ro.flags.writeable = False
    expect(A, lambda: c.all_reduce(x[:4], ro), "read-only", "read-only output")
    expect(A, lambda: c.all_reduce(np.zeros(4, np.complex64)), "datatype", "complex dtype")
    expect(A, lambda: c.all_reduce(np.zeros(4, ">f4")), "big-endian", "big-endian")
    expect(A, lambda: c.all_reduce([1.0, 2.0]), "not a buffer", "a list")
    expect(A, lambda: c.all_reduce(torch.zeros(4, requires_grad=True)), "requires grad",
           "leaf requiring grad")
    expect(A, lambda: c.all_reduce(x, op="xor"), "sum, prod", "bad op name")
    expect(A, lambda: c.broadcast(x, np.zeros(4, np.float32), root=P), "root", "root out of range")
    expect(A, lambda: c.send(x, -1), "peer", "bad peer")
    expect(A, lambda: c.all_to_allv(x, [1] * (P + 1), x.copy(), [1] * P), "one per rank",
           "counts length")
    expect(A, lambda: c.all_to_allv(x, [5] * P, np.zeros(P * 5, np.float32), [5] * P),
           "past the end", "v block past the end")
    expect(A, lambda: c.all_reduce(x, stream=12345), "HostStream", "host buffer, CUDA stream")
    expect(A, lambda: moeccl.Comm(2, b"short", 0), "bytes", "short unique id")
    expect(A, lambda: moeccl.Comm(2, bytes(128), 5), "rank", "rank out of range")
    expect(A, lambda: moeccl.to_datatype(99), "0..11", "datatype out of range")

    class FakeCuda:  # a strided device array: refused before any call
        __cuda_array_interface__ = {"shape": (4, 4), "typestr": "<f4", "data": (0x1000, False),
                                    "strides": (4, 16), "version": 3}

    class FakeCudaOK:
        __cuda_array_interface__ = {"shape": (P * 4,), "typestr": "<f4", "data": (0x1000, False),
                                    "strides": None, "version": 3, "stream": 1}

    expect(A, lambda: c.all_reduce(FakeCuda()), "not c-contiguous", "CUDA strided")
    expect(A, lambda: c.all_to_all(x, FakeCudaOK()), "all be host or all be cuda", "host + CUDA")
    expect(A, lambda: c.all_reduce(FakeCudaOK(), stream=moeccl.HostStream()), "host stream",
           "CUDA on a host stream")
    if torch.cuda.is_available():
        pass  # device buffers are tested on a GPU machine only
    # the library's own refusal arrives with moecclGetLastError's text
    e = expect(moeccl.MoecclError, lambda: c.all_reduce(x, op=77), "op", "invalid op")
    check(e is not None and e.name == "moecclInvalidArgument",
          "invalid op: result %s" % (e.name if e else None))
    # a destroyed stream and a destroyed communicator are refused
    s = moeccl.HostStream()
    s.destroy()
    expect(A, lambda: c.all_reduce(x, stream=s), "destroyed", "destroyed stream")
    # nothing above reached a peer: a collective still agrees afterwards
    y = np.ones(3, np.float32)
    c.all_reduce(y)
    check(np.array_equal(y, np.full(3, P, np.float32)), "collective after refusals")


def main():
    global RANK
    c = moeccl.Comm.from_env(comm_name="test_py_coll")  # through moecclCommInitRankConfig
    RANK = c.rank
    for dtype in (np.float32, np.float64, np.int32, np.int64, np.uint8, np.int8, np.float16):
        collectives(c, dtype)
    alltoallv(c)
    torch_buffers(c)
    p2p_groups_streams(c)
    bad_input(c)
    c.destroy()
    expect(moeccl.ArgumentError, lambda: c.all_reduce(np.zeros(2, np.float32)), "destroyed",
           "destroyed communicator")
    print("rank %d of %d: %s" % (RANK, c.size, "FAILED %d checks" % len(FAILS) if FAILS else
                                 "all checks passed"))
    return 1 if FAILS else 0


RANK = -1
if __name__ == "__main__":
    sys.exit(main())
