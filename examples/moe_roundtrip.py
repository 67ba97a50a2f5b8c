#!/usr/bin/env python3
"""moe_roundtrip.c in Python: each rank's tokens go to the ranks holding
their top-2 experts (moeccl.torch.Dispatch), each expert scales its rows by
(its id + 1), and the rows come back summed with the gate weights
(Combine); then autograd runs the library's backward calls.  Every token
and its gradient are checked.

    python -m moeccl.run -n 4 examples/moe_roundtrip.py
"""
import sys

import torch

import moeccl
from moeccl.torch import Combine, Dispatch, MoePlan

E, K, H = 8, 2, 32

with moeccl.Comm.from_env() as comm:
    T = 100 + 10 * comm.rank  # ranks may hold different token counts
    with MoePlan(comm, E) as plan:  # experts in contiguous blocks over the ranks
        t = torch.arange(T)
        e0 = (t * 7 + comm.rank) % E
        ids = torch.stack([e0, (e0 + 1 + t % (E - 1)) % E], dim=1)
        w = torch.tensor([[0.75, 0.25]]).repeat(T, 1)
        x = (comm.rank + 0.01 * (t % 50)[:, None] + 0.001 * torch.arange(H)).float()
        x.requires_grad_()

        counts = plan.layout(ids)  # rows per local expert, ascending ids
        rows = Dispatch.apply(x, plan)
        scale = torch.repeat_interleave(torch.tensor(plan.local_experts) + 1.0,
                                        torch.tensor(counts, dtype=torch.long))
        y = Combine.apply(rows * scale[:, None], w, plan)
        y.sum().backward()

        s = (w * (ids + 1)).sum(1, keepdim=True)
        bad = int(((y - s * x).abs() > 1e-4 * (1 + (s * x).abs())).sum())
        bad += int(((x.grad - s).abs() > 1e-4).sum())  # d sum(y) / dx = s
        print("rank %d: %d tokens out, %d expert rows in (experts %s), %d wrong"
              % (comm.rank, T, plan.num_rows, plan.local_experts, bad))
sys.exit(1 if bad else 0)
