#!/usr/bin/env python3
"""How much of the EP communication moe_train's chunked pipeline hides.

Runs the same moe_train command unchunked (--chunks 1) and chunked
(--chunks C), alternating, REPS times each, and reads each run's
"# mean of steps" line (moe/README.md).  From the medians:

  comm     = dispatch + combine + backward exchanges   (the EP exchanges
             not hidden, unchunked: all of them)
  compute  = experts + backward - backward exchanges   (unchunked)
  together = dispatch + experts + combine + backward   (chunked)
  hidden   = (comm + compute - together) / comm

Each chunk count of --chunks C[,C...] (default 4) is set against the
unchunked run; the best one (most tokens/s) is named last.

Usage:
  scripts/moe_overlap.py [--reps N] [--chunks C[,C...]] [--json FILE] -- LAUNCH... [TRAIN ARGS]
e.g.
  scripts/moe_overlap.py -- build/moe/moe_train -n 2 --hidden 256 --tokens 4096
  scripts/moe_overlap.py -- mpirun -np 4 hostid.sh build/moe/moe_train ...
"""
import json
import re
import statistics
import subprocess
import sys

FIELDS = ("router", "dispatch", "experts", "combine", "backward", "exchanges", "allreduce",
          "optimizer")


def run(cmd):
    out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if out.returncode != 0:
        sys.exit("moe_overlap: %s failed (%d):\n%s" % (" ".join(cmd), out.returncode, out.stdout))
    line = next((l for l in out.stdout.splitlines() if l.startswith("# mean of steps")), None)
    if line is None:
        sys.exit("moe_overlap: no '# mean of steps' line from %s" % " ".join(cmd))
    got = {"tokens_per_s": float(re.search(r"([0-9.]+) tokens/s", line).group(1))}
    for f in FIELDS:
        got[f] = float(re.search(r"\b%s ([0-9.]+)" % f, line).group(1))
    got["comm_pct"] = float(re.search(r"communication ([0-9.]+)%", line).group(1))
    return got


def main(argv):
    reps, chunks, out = 5, [4], None
    if "--" not in argv:
        sys.exit(__doc__)
    opts, cmd = argv[: argv.index("--")], argv[argv.index("--") + 1:]
    i = 0
    try:
        while i < len(opts):
            if opts[i] == "--reps":
                reps, i = int(opts[i + 1]), i + 2
            elif opts[i] == "--chunks":
                chunks, i = [int(c) for c in opts[i + 1].split(",")], i + 2
            elif opts[i] == "--json":
                out, i = opts[i + 1], i + 2
            else:
                sys.exit(__doc__)
    except (IndexError, ValueError):
        sys.exit(__doc__)
    if reps < 1 or not chunks or min(chunks) < 2:
        sys.exit("moe_overlap: --reps at least 1, --chunks at least 2 each")
    counts = [1] + [c for c in chunks if c != 1]
    runs = {c: [] for c in counts}
    for _ in range(reps):
        for c in counts:
            runs[c].append(run(cmd + ["--chunks", str(c)]))
    med = {c: {k: statistics.median(r[k] for r in runs[c]) for k in runs[c][0]} for c in runs}
    one = med[1]
    comm = one["dispatch"] + one["combine"] + one["exchanges"]
    compute = one["experts"] + one["backward"] - one["exchanges"]
    print("# %s" % " ".join(cmd))
    print("# medians of %d runs each, ms per step (rank 0)" % reps)
    print("%-8s %10s %9s %9s %9s %9s %10s %8s %7s %8s" % (
        "chunks", "tokens/s", "dispatch", "experts", "combine", "backward", "exchanges", "comm%",
        "hidden", "speedup"))
    rows = []
    for c in counts:
        m = med[c]
        together = m["dispatch"] + m["experts"] + m["combine"] + m["backward"]
        hidden = (comm + compute - together) / comm if c > 1 and comm > 0 else 0.0
        speedup = m["tokens_per_s"] / one["tokens_per_s"] if one["tokens_per_s"] > 0 else 0.0
        rows.append(dict(m, chunks=c, hidden=hidden, speedup=speedup))
        print("%-8d %10.0f %9.3f %9.3f %9.3f %9.3f %10.3f %8.1f %6.0f%% %7.2fx" % (
            c, m["tokens_per_s"], m["dispatch"], m["experts"], m["combine"], m["backward"],
            m["exchanges"], m["comm_pct"], 100 * hidden, speedup))
    best = max(rows[1:], key=lambda r: r["tokens_per_s"])
    print("comm %.3f ms + compute %.3f ms unchunked (communication %.0f%% of the layer work); "
          "best %d chunks: %.0f%% of the communication hidden, %.2fx the unchunked step" % (
              comm, compute, 100 * comm / (comm + compute) if comm + compute > 0 else 0,
              best["chunks"], 100 * best["hidden"], best["speedup"]))
    if out:
        with open(out, "w") as f:
            json.dump({"command": cmd, "reps": reps, "comm_ms": comm, "compute_ms": compute,
                       "rows": rows, "best": best["chunks"]}, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1:])
