#!/usr/bin/env python3
"""A PyTorch model with moeccl's MoE layer, trained for a few steps.

The model: Linear -> MoELayer (8 SwiGLU experts, top-2, split over the
ranks) with a residual -> Linear, fit to a fixed random teacher by Adam.
Each rank trains on its own shard of the batch; the experts live on one
rank each and see every rank's tokens, the other parameters are
replicated, so their gradients are summed over the ranks (as DDP would)
before the step.  Prints the loss of the whole batch each step; exits 1
if it did not fall.

    python -m moeccl.run -n 4 examples/train_moe.py [--steps 30]
    torchrun --nproc-per-node 4 examples/train_moe.py
"""
import argparse
import sys

import torch

import moeccl
from moeccl.torch import MoELayer


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--tokens", type=int, default=256, help="tokens per rank")
    a = ap.parse_args()
    torch.manual_seed(0)
    with moeccl.Comm.from_env() as comm:
        H = 32
        embed, head = torch.nn.Linear(H, H), torch.nn.Linear(H, H)
        moe = MoELayer(comm, hidden=H, ffn=64, num_experts=8, topk=2, residual=True, seed=1)
        model = torch.nn.Sequential(embed, moe, head)  # same init on every rank (seeded)
        replicated = list(embed.parameters()) + list(head.parameters()) + [moe.router.weight]
        opt = torch.optim.Adam(model.parameters(), lr=3e-3)
        g = torch.Generator().manual_seed(100 + comm.rank)  # this rank's shard
        x = torch.randn(a.tokens, H, generator=g)
        teacher = torch.nn.Sequential(torch.nn.Linear(H, H), torch.nn.Tanh())
        with torch.no_grad():
            target = teacher(x)
        total = torch.zeros(1, dtype=torch.float64)
        losses = []
        for step in range(a.steps):
            opt.zero_grad()
            out = model(x)
            mse = ((out - target) ** 2).sum() / (a.tokens * comm.size * H)  # global mean
            (mse + moe.aux_loss).backward()  # each rank's aux gradient: its own tokens' share
            for p in replicated:  # data-parallel sum of the replicated gradients
                comm.all_reduce(p.grad)
            opt.step()
            total[0] = mse.item()
            comm.all_reduce(total)
            losses.append(total.item())
            if comm.rank == 0 and (step % 5 == 0 or step == a.steps - 1):
                print("step %3d  loss %.5f  aux %.4f" % (step, losses[-1], moe.aux_loss.item()))
        fell = losses[-1] < 0.7 * losses[0]
        if comm.rank == 0:
            print("train_moe: %d ranks, loss %.5f -> %.5f: %s" % (
                comm.size, losses[0], losses[-1], "fell" if fell else "DID NOT FALL"))
    return 0 if fell else 1


if __name__ == "__main__":
    sys.exit(main())
