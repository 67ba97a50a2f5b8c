#!/usr/bin/env python3
"""The planner against the machine, in one run: for a list of layouts of one
model (1 to 8 ranks, with and without pipeline stages, chunks, overlap and
each schedule), the step time moe_train --plan predicts for each layout
(its --plan-json, one planning run per rank count, on those ranks'
communicator) next to the step time moe_train measures with that layout
(the mean of the steps after the first).  Interleaved: each of --reps
rounds plans every rank count once (the probe sees the machine of that
round) and runs every layout once; the medians over the rounds are
compared.

  scripts/plan_calibrate.py BUILD_DIR [--steps 8] [--reps 3] [--json FILE]

Prints a table (predicted ms, measured ms, error) and two verdicts: how many
layouts are predicted within 20% of the measured time, and, for each rank
count, whether the layout measured fastest is the one predicted fastest or
within 10% of it (measured).  Exit 0 when every layout is within 20% and
every verdict holds, 1 otherwise, 2 when a run fails.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

MODEL = ["--layers", "4", "--experts", "8", "--topk", "2", "--hidden", "128", "--ffn", "256",
         "--tokens", "1024"]

# (ranks, moe_train flags as plan_flags writes them)
LAYOUTS = [
    (1, "--pp 1 --ep 1 --dp 1 --microbatches 1 --schedule 1f1b --chunks 1"),
    (1, "--pp 1 --ep 1 --dp 1 --microbatches 4 --schedule 1f1b --chunks 1"),
    (2, "--pp 1 --ep 2 --dp 1 --microbatches 1 --schedule 1f1b --chunks 1"),
    (2, "--pp 1 --ep 1 --dp 2 --microbatches 1 --schedule 1f1b --chunks 1"),
    (2, "--pp 1 --ep 2 --dp 1 --microbatches 1 --schedule 1f1b --chunks 2"),
    (2, "--pp 2 --ep 1 --dp 1 --microbatches 4 --schedule gpipe --chunks 1"),
    (2, "--pp 2 --ep 1 --dp 1 --microbatches 4 --schedule 1f1b --chunks 1"),
    (2, "--pp 2 --ep 1 --dp 1 --microbatches 4 --schedule zb-h1 --chunks 1"),
    (2, "--pp 2 --ep 1 --dp 1 --microbatches 4 --schedule interleaved --vstages 2 --chunks 1"),
    (4, "--pp 1 --ep 4 --dp 1 --microbatches 1 --schedule 1f1b --chunks 1"),
    (4, "--pp 2 --ep 2 --dp 1 --microbatches 4 --schedule 1f1b --chunks 1"),
    (4, "--pp 1 --ep 2 --dp 2 --microbatches 1 --schedule 1f1b --chunks 1"),
]


def run(cmd, timeout):
    env = dict(os.environ)
    env.setdefault("MOECCL_TIMEOUT", "60")
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    if p.returncode != 0:
        sys.stderr.write("plan_calibrate: %s failed (%d):\n%s\n" % (" ".join(cmd), p.returncode,
                                                                    p.stderr[-2000:]))
        sys.exit(2)
    return p.stdout


def measure(train, ranks, flags, steps):
    out = run([train, "-n", str(ranks)] + MODEL + flags.split() + ["--steps", str(steps)], 600)
    m = re.search(r"^# mean of steps \d+-\d+: ([0-9.]+) tokens/s", out, re.M)
    if not m:
        sys.exit("plan_calibrate: no mean line from -n %d %s" % (ranks, flags))
    tokens = int(MODEL[MODEL.index("--tokens") + 1])
    return tokens / float(m.group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("build")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--json")
    a = ap.parse_args()
    train = os.path.join(a.build, "moe", "moe_train")
    tmp = tempfile.mkdtemp(prefix="plan_calibrate.")
    preds = {}
    rows = []
    times = {k: [] for k in LAYOUTS}
    for rep in range(a.reps):  # interleaved: every plan and every layout once per round
        for ranks in sorted({r for r, _ in LAYOUTS}):
            path = os.path.join(tmp, "plan%d.json" % ranks)
            run([train, "-n", str(ranks)] + MODEL + ["--plan-json", path, "--steps", "0"], 600)
            with open(path) as f:
                for lay in json.load(f)["layouts"]:
                    preds.setdefault((ranks, lay["flags"]), []).append(lay["step_s"])
        for r, flags in LAYOUTS:
            times[(r, flags)].append(measure(train, r, flags, a.steps))
    predicted = {k: statistics.median(v) for k, v in preds.items() if len(v) == a.reps}
    print("# model: %s; %d steps per run, medians of %d rounds, interleaved" %
          (" ".join(MODEL), a.steps, a.reps))
    print("# %5s %10s %10s %7s  %s" % ("ranks", "predicted", "measured", "error", "layout"))
    within = 0
    for r, flags in LAYOUTS:
        if (r, flags) not in predicted:
            sys.exit("plan_calibrate: the planner has no prediction for -n %d %s" % (r, flags))
        p, m = predicted[(r, flags)], statistics.median(times[(r, flags)])
        err = (p - m) / m
        within += abs(err) <= 0.2
        rows.append({"ranks": r, "flags": flags, "predicted_s": p, "measured_s": m,
                     "runs_s": times[(r, flags)], "predictions_s": preds[(r, flags)],
                     "error": err})
        print("  %5d %10.3f %10.3f %+6.1f%%  %s" % (r, 1e3 * p, 1e3 * m, 100 * err, flags))
    ok = within == len(rows)
    print("# within 20%%: %d of %d layouts" % (within, len(rows)))
    for ranks in sorted({r for r, _ in LAYOUTS}):
        mine = [x for x in rows if x["ranks"] == ranks]
        if len(mine) < 2:
            continue
        best_m = min(mine, key=lambda x: x["measured_s"])
        best_p = min(mine, key=lambda x: x["predicted_s"])
        slower = best_p["measured_s"] / best_m["measured_s"] - 1
        good = best_p is best_m or slower <= 0.10
        ok &= good
        print("# %d ranks: measured best %s; predicted best %s (%s)" %
              (ranks, best_m["flags"], best_p["flags"],
               "the same" if best_p is best_m else "%.1f%% slower measured" % (100 * slower)))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"model": MODEL, "steps": a.steps, "reps": a.reps, "layouts": rows}, f,
                      indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
