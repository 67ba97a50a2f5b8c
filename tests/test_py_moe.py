#!/usr/bin/env python3
"""moeccl.torch.MoELayer on the ranks of `python -m moeccl.run -n P`
against the same layer computed on one process with plain PyTorch ops
(dense per-expert products, masked by the routing; no moeccl): outputs,
the load-balancing loss, and the gradients of the input and of every
parameter (the router's summed over the ranks), to float32 tolerance.
Each rank holds a different number of tokens; E experts need not divide
among the ranks.  The bfloat16 layer's output is within bf16's precision
of the float32 layer's on the tokens both route alike.  Then the autograd
Functions alone (dispatch then combine with unit weights is the identity
on a token with k distinct experts) and bad input.  Exit 0 passed, 1 failed."""
import sys

import torch
import torch.nn.functional as F

import moeccl
from moeccl.torch import Combine, Dispatch, MoELayer, MoePlan

H, FFN, E, K, AUX = 16, 24, 8, 2, 0.01
FAILS = []
RANK = -1


def check(cond, what):
    if not cond:
        FAILS.append(what)
        print("rank %d FAIL: %s" % (RANK, what), file=sys.stderr)


def close(a, b, what, rtol=1e-4):
    if a is None:
        a = torch.zeros_like(b)
    err = (a.double() - b.double()).abs().max().item() if a.numel() else 0.0
    scale = max(b.double().abs().max().item() if b.numel() else 0.0, 1e-30)
    check(a.shape == b.shape and err <= rtol * scale,
          "%s: max|diff| %.3g > %.1g x max|ref| %.3g" % (what, err, rtol, scale))


def reference(x, wg, w1, w3, w2, k, aux):
    """The whole layer on one process, plain PyTorch (moe/README's math)."""
    logits = x @ wg
    top, ids = torch.topk(logits, k, dim=1)
    gate = torch.softmax(top, dim=1)
    coef = torch.zeros(x.shape[0], E).scatter_add(1, ids, gate)
    out = torch.zeros_like(x)
    for e in range(E):
        y = (F.silu(x @ w1[e]) * (x @ w3[e])) @ w2[e]
        out = out + coef[:, e:e + 1] * y
    p = torch.softmax(logits, dim=1)
    f = torch.bincount(ids.reshape(-1), minlength=E).double() / (x.shape[0] * k)
    return out, aux * E * torch.sum(f.float() * p.mean(0))


def layer_vs_reference(comm):
    P, r = comm.size, comm.rank
    counts = [13 + 7 * q for q in range(P)]  # tokens per rank differ
    N = sum(counts)
    g = torch.Generator().manual_seed(42)
    wg = torch.randn(H, E, generator=g) / H ** 0.5
    w1 = torch.randn(E, H, FFN, generator=g) / H ** 0.5
    w3 = torch.randn(E, H, FFN, generator=g) / H ** 0.5
    w2 = torch.randn(E, FFN, H, generator=g) / FFN ** 0.5
    x = torch.randn(N, H, generator=g)
    dout = torch.randn(N, H, generator=g)
    # one process, plain PyTorch
    params = [t.clone().requires_grad_() for t in (x, wg, w1, w3, w2)]
    ref_out, ref_aux = reference(*params, K, AUX)
    ((ref_out * dout).sum() + ref_aux).backward()
    # P ranks, moeccl
    lo = sum(counts[:r])
    layer = MoELayer(comm, H, FFN, E, topk=K, aux_coef=AUX)
    layer.load_full(wg, w1, w3, w2)
    xr = x[lo:lo + counts[r]].clone().requires_grad_()
    out = layer(xr)
    ((out * dout[lo:lo + counts[r]]).sum() + layer.aux_loss).backward()
    layer.allreduce_router_grads()
    close(out.detach(), ref_out.detach()[lo:lo + counts[r]], "output")
    close(layer.aux_loss.detach(), ref_aux.detach(), "aux loss")
    close(xr.grad, params[0].grad[lo:lo + counts[r]], "grad of the input")
    close(layer.router.weight.grad, params[1].grad.t(), "grad of the router")
    le = layer.local_experts
    close(layer.w1.grad, params[2].grad[le], "grad of w1 (experts %s)" % le)
    close(layer.w3.grad, params[3].grad[le], "grad of w3")
    close(layer.w2.grad, params[4].grad[le], "grad of w2")
    # a second step through the same layer (a new layout) after an SGD step
    with torch.no_grad():
        for p in layer.parameters():
            p -= 0.1 * p.grad
    out2 = layer(xr.detach())
    check(torch.isfinite(out2).all().item(), "second step finite")
    # residual: the input added
    layer.residual = True
    out3 = layer(xr.detach())
    close(out3.detach() - xr.detach(), out2.detach(), "residual adds the input", rtol=1e-5)


def bf16_layer(comm):
    """The layer in bfloat16 against the float32 one, same weights, on the
    tokens whose top-k bf16 rounding does not change."""
    x = torch.randn(11 + comm.rank, H)
    outs = []
    for dt in (torch.float32, torch.bfloat16):
        layer = MoELayer(comm, H, FFN, E, topk=K, seed=5, dtype=dt)
        xi = x.to(dt).detach().clone().requires_grad_()
        out = layer(xi)
        out.float().sum().backward()
        check(out.dtype == dt and xi.grad.dtype == dt, "%s layer keeps its dtype" % dt)
        with torch.no_grad():
            ids = torch.topk(layer.router(xi), K, dim=1).indices.sort(1).values
        outs.append((out.detach().float(), xi.grad.float(), ids))
        layer.plan.close()
    same = (outs[0][2] == outs[1][2]).all(1)  # tokens bf16 routes as float32 does
    check(same.sum().item() >= 0.8 * len(same), "bf16 routes most tokens alike")
    close(outs[1][0][same], outs[0][0][same], "bf16 output vs float32", rtol=5e-2)


def empty_ranks(comm):
    """A rank with no tokens (and then every rank without) still takes part."""
    layer = MoELayer(comm, H, FFN, E, topk=K)
    for step, n in enumerate((0 if comm.rank == comm.size - 1 else 6, 0)):
        x = torch.randn(n, H, requires_grad=True)
        out = layer(x)
        (out.sum() + layer.aux_loss).backward()
        check(out.shape == (n, H) and x.grad.shape == (n, H) and
              torch.isfinite(layer.aux_loss).item(), "empty ranks, step %d" % step)
    layer.plan.close()


def functions(comm):
    """dispatch then combine with gate 1/k on k distinct experts: identity."""
    T = 9 + comm.rank
    x = torch.randn(T, H, dtype=torch.float64).float().requires_grad_()
    ids = torch.stack([torch.randperm(E)[:K] for _ in range(T)])
    with MoePlan(comm, E) as plan:
        plan.layout(ids)
        rows = Dispatch.apply(x, plan)
        check(rows.shape == (plan.num_rows, H), "dispatch rows shape")
        w = torch.full((T, K), 1.0 / K, requires_grad=True)
        y = Combine.apply(rows, w, plan)
        close(y.detach(), x.detach(), "dispatch + combine round trip", rtol=1e-6)
        y.sum().backward()
        close(x.grad, torch.ones_like(x), "round trip's input gradient", rtol=1e-6)
        close(w.grad, x.detach().sum(1, keepdim=True).expand(T, K), "gate gradient", rtol=1e-5)
        # a second layout before backward is refused clearly
        rows = Dispatch.apply(x, plan)
        plan.layout(ids)
        try:
            rows.sum().backward()
            check(False, "stale plan: nothing raised")
        except RuntimeError as e:
            check("laid out again" in str(e), "stale plan message: %s" % e)


def bad_input(comm):
    A = moeccl.ArgumentError
    layer = MoELayer(comm, H, FFN, E, topk=K)
    cases = [
        (lambda: layer(torch.zeros(4, H + 1)), "hidden"),
        (lambda: layer(torch.zeros(4, H, dtype=torch.int32)), "floating-point"),
        (lambda: layer([1.0]), "torch tensor"),
        (lambda: MoELayer(comm, H, FFN, E, topk=E + 1), "topk"),
        (lambda: MoePlan(comm, E, placement=[comm.size] * E), "rank"),
        (lambda: MoePlan(comm, E, placement=[0] * (E - 1)), "entries"),
        (lambda: layer.plan.layout(torch.full((3, K), E)), "outside"),
        (lambda: layer.plan.layout(torch.zeros(3, K)), "integers"),
    ]
    for fn, needle in cases:
        try:
            fn()
            check(False, "bad input (%s): nothing raised" % needle)
        except A as e:
            check(needle in str(e), "bad input: %r lacks %r" % (str(e), needle))
    with MoePlan(comm, E) as plan:
        plan.layout(torch.zeros(3, K, dtype=torch.int64))
        for fn, needle in [
            (lambda: Dispatch.apply(torch.zeros(4, H), plan), "tokens"),
            (lambda: Dispatch.apply(torch.zeros(H, 3).t(), plan), "contiguous"),
            (lambda: Combine.apply(torch.zeros(plan.num_rows, H), torch.zeros(3, K,
                                   dtype=torch.float64), plan), "float32"),
            (lambda: Combine.apply(torch.zeros(plan.num_rows, H, dtype=torch.int32),
                                   torch.zeros(3, K), plan), "combine takes"),
        ]:
            try:
                fn()
                check(False, "bad input (%s): nothing raised" % needle)
            except A as e:
                check(needle in str(e), "bad input: %r lacks %r" % (str(e), needle))
        # nothing reached a peer: the plan still works
        x = torch.ones(3, H)
        rows = Dispatch.apply(x, plan)
        y = Combine.apply(rows, torch.full((3, K), 0.5), plan)
        close(y, x, "plan after refusals", rtol=1e-6)
    layer.plan.close()


def main():
    global RANK
    torch.manual_seed(0)
    comm = moeccl.Comm.from_env()
    RANK = comm.rank
    layer_vs_reference(comm)
    bf16_layer(comm)
    empty_ranks(comm)
    functions(comm)
    bad_input(comm)
    comm.destroy()
    print("rank %d of %d: %s" % (RANK, comm.size, "FAILED %d checks" % len(FAILS) if FAILS
                                 else "MoELayer matches plain PyTorch; all checks passed"))
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
