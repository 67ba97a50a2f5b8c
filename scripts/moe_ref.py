#!/usr/bin/env python3
"""A NumPy reference of moeccl's MoE model (moe/README.md), float64.

Written from the model's text, not from moe/model.c: dense per-expert
products masked by the routing instead of expert-major rows, the backward by
hand.  Subcommands:

  gen DIR --layers L --experts E --hidden H --ffn F --tokens N --seed S
      writes wg{l}.npy [H,E], w1_{l}.npy, w3_{l}.npy [E,H,F], w2_{l}.npy
      [E,F,H], x.npy, target.npy [N,H] (float32, C order)
  check DIR DUMP --topk K --aux A [--rtol R] [--microbatches M]
      computes the first forward and backward from DIR and compares with
      the files a driver dumped into DUMP (out.npy, grad_x.npy,
      grad_wg{l}.npy, grad_w1_{l}.npy, grad_w3_{l}.npy, grad_w2_{l}.npy,
      loss.txt): per tensor, max|dump - ref| <= R * max|ref| (R = 1e-4), the
      loss within 1e-5 relative.  Exit 0 when all agree, 1 otherwise.
      --microbatches M: the load-balancing loss per micro-batch, as
      moe_train --microbatches M computes it.
  selftest
      central differences of this reference's own gradients (float64).
"""
import argparse
import os
import sys

import numpy as np


def load(directory):
    def rd(name):
        a = np.load(os.path.join(directory, name))
        if a.dtype != np.float32:
            raise SystemExit("%s: dtype %s, want float32" % (name, a.dtype))
        return a.astype(np.float64)

    layers = []
    while os.path.exists(os.path.join(directory, "wg%d.npy" % len(layers))):
        l = len(layers)
        layers.append({k: rd("%s%s.npy" % (k if k == "wg" else k + "_", l))
                       for k in ("wg", "w1", "w3", "w2")})
    return layers, rd("x.npy"), rd("target.npy")


def softmax(z):
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def layer_forward(w, x, k, aux):
    n, e_count = x.shape[0], w["wg"].shape[1]
    logits = x @ w["wg"]
    # K largest, ties to the lower expert: a stable sort of -logits.
    ids = np.argsort(-logits, axis=1, kind="stable")[:, :k]
    gate = softmax(np.take_along_axis(logits, ids, axis=1))
    p = softmax(logits)
    coef = np.zeros((n, e_count))  # coef[t, e] = gate weight of e for t (0 if not chosen)
    for j in range(k):
        coef[np.arange(n), ids[:, j]] += gate[:, j]
    cache = {"x": x, "ids": ids, "gate": gate, "p": p, "coef": coef, "a": [], "b": [], "y": []}
    out = x.copy()
    for e in range(e_count):
        a, b = x @ w["w1"][e], x @ w["w3"][e]
        y = (a * sigmoid(a) * b) @ w["w2"][e]
        cache["a"].append(a)
        cache["b"].append(b)
        cache["y"].append(y)
        out += coef[:, e:e + 1] * y
    f = np.bincount(ids.ravel(), minlength=e_count) / float(n * k)
    cache["f"] = f
    return out, aux * e_count * float(np.sum(f * p.mean(axis=0))), cache


def layer_backward(w, c, dout, aux):
    x, ids, gate, p, coef = c["x"], c["ids"], c["gate"], c["p"], c["coef"]
    n, e_count = x.shape[0], w["wg"].shape[1]
    g = {k: np.zeros_like(v) for k, v in w.items()}
    dx = dout.copy()
    dcoef = np.zeros((n, e_count))
    for e in range(e_count):
        a, b, y = c["a"][e], c["b"][e], c["y"][e]
        dcoef[:, e] = np.sum(dout * y, axis=1)
        dy = coef[:, e:e + 1] * dout
        s = sigmoid(a)
        h = a * s * b
        g["w2"][e] = h.T @ dy
        dh = dy @ w["w2"][e].T
        da = dh * b * (s + a * s * (1 - s))
        db = dh * a * s
        g["w1"][e] = x.T @ da
        g["w3"][e] = x.T @ db
        dx += da @ w["w1"][e].T + db @ w["w3"][e].T
    dgate = np.take_along_axis(dcoef, ids, axis=1)
    dsel = gate * (dgate - np.sum(gate * dgate, axis=1, keepdims=True))
    dlogits = np.zeros((n, e_count))
    for j in range(ids.shape[1]):
        dlogits[np.arange(n), ids[:, j]] += dsel[:, j]
    dp = np.broadcast_to(aux * e_count * c["f"] / n, (n, e_count))
    dlogits += p * (dp - np.sum(p * dp, axis=1, keepdims=True))
    g["wg"] = x.T @ dlogits
    dx += dlogits @ w["wg"].T
    return dx, g


def model(layers, x, target, k, aux, microbatches=1):
    """The loss, output, dL/dx and gradients.  With M micro-batches (rows
    [m*N/M, (m+1)*N/M)) the load-balancing loss is each micro-batch's, from
    its own f_e and P_e, weighted by its share of the tokens N_m / N (as
    moe_train --microbatches); the squared error is the whole batch's."""
    n, total = x.shape[0], x.size
    loss, out, gx = 0.0, np.empty_like(x), np.empty_like(x)
    grads = [None] * len(layers)
    for m in range(microbatches):
        a, b = m * n // microbatches, (m + 1) * n // microbatches
        if a == b:
            continue
        xs, caches, scale = x[a:b], [], aux * (b - a) / n
        for w in layers:
            xs, al, c = layer_forward(w, xs, k, scale)
            caches.append(c)
            loss += al
        loss += float(np.sum((xs - target[a:b]) ** 2)) / total
        out[a:b] = xs
        d = 2.0 * (xs - target[a:b]) / total
        for l in reversed(range(len(layers))):
            d, g = layer_backward(layers[l], caches[l], d, scale)
            grads[l] = g if grads[l] is None else {key: grads[l][key] + g[key] for key in g}
        gx[a:b] = d
    return loss, out, gx, grads


def gen(args):
    rng = np.random.default_rng(args.seed)
    h, e, f, n = args.hidden, args.experts, args.ffn, args.tokens
    os.makedirs(args.dir, exist_ok=True)

    def save(name, a):
        np.save(os.path.join(args.dir, name), np.ascontiguousarray(a, dtype="<f4"))

    for l in range(args.layers):
        save("wg%d.npy" % l, rng.normal(0, 1 / np.sqrt(h), (h, e)))
        save("w1_%d.npy" % l, rng.normal(0, 1 / np.sqrt(h), (e, h, f)))
        save("w3_%d.npy" % l, rng.normal(0, 1 / np.sqrt(h), (e, h, f)))
        save("w2_%d.npy" % l, rng.normal(0, 1 / np.sqrt(f), (e, f, h)))
    save("x.npy", rng.normal(0, 1, (n, h)))
    save("target.npy", rng.normal(0, 1, (n, h)))


def check(args):
    layers, x, target = load(args.dir)
    loss, out, gx, grads = model(layers, x, target, args.topk, args.aux, args.microbatches)
    pairs = [("out.npy", out), ("grad_x.npy", gx)]
    for l, g in enumerate(grads):
        pairs += [("grad_wg%d.npy" % l, g["wg"]), ("grad_w1_%d.npy" % l, g["w1"]),
                  ("grad_w3_%d.npy" % l, g["w3"]), ("grad_w2_%d.npy" % l, g["w2"])]
    ok, worst = True, 0.0
    for name, ref in pairs:
        path = os.path.join(args.dump, name)
        if not os.path.exists(path):
            print("FAIL %s: missing" % name)
            ok = False
            continue
        got = np.load(path)
        if got.shape != ref.shape or got.dtype != np.float32:
            print("FAIL %s: %s %s, want %s float32" % (name, got.shape, got.dtype, ref.shape))
            ok = False
            continue
        scale = max(float(np.abs(ref).max()), 1e-30)
        rel = float(np.abs(got.astype(np.float64) - ref).max()) / scale
        worst = max(worst, rel)
        if not rel <= args.rtol:
            print("FAIL %s: max error %.3g of max |ref| %.3g (tolerance %g)" % (name, rel, scale, args.rtol))
            ok = False
    with open(os.path.join(args.dump, "loss.txt")) as fh:
        got_loss = float(fh.read())
    loss_rel = abs(got_loss - loss) / abs(loss)
    if not loss_rel <= 1e-5:
        print("FAIL loss.txt: %.9g, reference %.9g" % (got_loss, loss))
        ok = False
    print("%s: loss %.7g (rel. error %.1e), worst tensor error %.2e of its max (tolerance %g)"
          % ("ok" if ok else "FAILED", loss, loss_rel, worst, args.rtol))
    return 0 if ok else 1


def selftest(args):
    rng = np.random.default_rng(3)
    h, e, f, n, k, aux = 5, 4, 6, 7, 2, 0.5
    layers = [{"wg": rng.normal(0, 0.5, (h, e)), "w1": rng.normal(0, 0.5, (e, h, f)),
               "w3": rng.normal(0, 0.5, (e, h, f)), "w2": rng.normal(0, 0.5, (e, f, h))}
              for _ in range(2)]
    x, target = rng.normal(0, 1, (n, h)), rng.normal(0, 1, (n, h))
    _, _, gx, grads = model(layers, x, target, k, aux)
    eps, worst = 1e-6, 0.0
    tensors = [(x, gx)] + [(layers[l][m], grads[l][m]) for l in range(2) for m in ("wg", "w1", "w3", "w2")]
    for v, g in tensors:
        flat, gflat = v.reshape(-1), g.reshape(-1)
        for i in range(flat.size):
            keep = flat[i]
            flat[i] = keep + eps
            up = model(layers, x, target, k, aux)[0]
            flat[i] = keep - eps
            down = model(layers, x, target, k, aux)[0]
            flat[i] = keep
            worst = max(worst, abs((up - down) / (2 * eps) - gflat[i]) / max(np.abs(gflat).max(), 1e-12))
    print("selftest: worst gradient error %.2e of the tensor's max" % worst)
    return 0 if worst < 1e-5 else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("gen")
    g.add_argument("dir")
    for name, default in (("layers", 2), ("experts", 4), ("hidden", 8), ("ffn", 16), ("tokens", 12), ("seed", 1)):
        g.add_argument("--" + name, type=int, default=default)
    c = sub.add_parser("check")
    c.add_argument("dir")
    c.add_argument("dump")
    c.add_argument("--topk", type=int, default=2)
    c.add_argument("--aux", type=float, default=0.01)
    c.add_argument("--rtol", type=float, default=1e-4)
    c.add_argument("--microbatches", type=int, default=1)
    sub.add_parser("selftest")
    args = ap.parse_args()
    if args.cmd == "gen":
        gen(args)
        return 0
    return check(args) if args.cmd == "check" else selftest(args)


if __name__ == "__main__":
    sys.exit(main())
