#!/usr/bin/env python3
"""Draws a simulated pipeline schedule as a PNG timeline: one row per stage,
a box per op from its start to its end, coloured by kind (F, B, W) and
labelled with its micro-batch (mb.chunk when the schedule has chunks);
sends and receives are thin bars along the bottom of the row, so the time a
stage spends waiting in a group shows.

  scripts/pp_timeline.py RUN.json                  # writes RUN.png
  scripts/pp_timeline.py RUN.json -o t.png --title "zb-h1, 4 stages"
  scripts/pp_timeline.py --selftest                # draws a made-up run, checks the PNG

RUN.json is what pp_sched_write_json writes (moe/pp_sched.h):
  {"schedule": "1f1b", "stages": 4, "events": [{"stage": 0, "kind": "F",
   "mb": 0, "chunk": 0, "start": 0.0, "end": 1.0}, ...]}
(kinds F, B, W, SEND_F, RECV_F, SEND_B, RECV_B; other keys are ignored).
Needs matplotlib (Debian: python3-matplotlib).
"""
import argparse
import json
import os
import sys
import tempfile

COMPUTE = {"F": "#4C72B0", "B": "#DD8452", "W": "#55A868"}
COMM = {"SEND_F": "#8C8C8C", "RECV_F": "#B0B0B0", "SEND_B": "#6F4E37", "RECV_B": "#A0785A"}


def load(path):
    """The run, checked: a stage count and events with known kinds in range."""
    try:
        with open(path) as f:
            run = json.load(f)
    except (OSError, ValueError) as e:
        sys.exit("pp_timeline: %s: %s" % (path, e))
    if not isinstance(run, dict) or "stages" not in run or "events" not in run:
        sys.exit("pp_timeline: %s: no \"stages\" and \"events\"" % path)
    stages = run["stages"]
    for i, e in enumerate(run["events"]):
        missing = [k for k in ("stage", "kind", "mb", "start", "end") if k not in e]
        if missing:
            sys.exit("pp_timeline: %s: event %d has no %s" % (path, i, ", ".join(missing)))
        if e["kind"] not in COMPUTE and e["kind"] not in COMM:
            sys.exit("pp_timeline: %s: event %d: unknown kind %r" % (path, i, e["kind"]))
        if not 0 <= e["stage"] < stages or e["end"] < e["start"]:
            sys.exit("pp_timeline: %s: event %d: stage %s or times %s..%s out of range" %
                     (path, i, e["stage"], e["start"], e["end"]))
    return run


def draw(run, out, title=None):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    stages, events = run["stages"], run["events"]
    chunks = run.get("vstages", 1) > 1 or any(e.get("chunk", 0) for e in events)
    end = max((e["end"] for e in events), default=1.0) or 1.0
    fig, ax = plt.subplots(figsize=(min(40, max(8, len(events) / (6 * stages))), 0.6 * stages + 1.5))
    seen = set()
    for e in events:
        kind, y, width = e["kind"], e["stage"], e["end"] - e["start"]
        seen.add(kind)
        if kind in COMM:  # thin, at the bottom of the row
            ax.barh(y + 0.32, width, left=e["start"], height=0.12, color=COMM[kind], linewidth=0)
            continue
        ax.barh(y, width, left=e["start"], height=0.6, color=COMPUTE[kind], edgecolor="white",
                linewidth=0.5)
        label = "%d.%d" % (e["mb"], e.get("chunk", 0)) if chunks else "%d" % e["mb"]
        if width / end * fig.get_figwidth() * 72 > 6 * len(label):  # fits, in points
            ax.text(e["start"] + width / 2, y, label, ha="center", va="center", fontsize=7,
                    color="white")
    ax.set_yticks(range(stages))
    ax.set_yticklabels(["stage %d" % s for s in range(stages)])
    ax.set_ylim(stages - 0.5, -0.6)
    ax.set_xlim(0, end)
    ax.set_xlabel("time")
    if title is None:
        title = "%s: %d stages" % (run.get("schedule", "schedule"), stages)
        if "microbatches" in run:
            title += ", %d micro-batches" % run["microbatches"]
        if run.get("vstages", 1) > 1:
            title += ", %d chunks" % run["vstages"]
        if "bubble" in run:
            title += ", bubble %.1f%%" % (100 * run["bubble"])
    ax.set_title(title)
    kinds = [k for k in list(COMPUTE) + list(COMM) if k in seen]
    ax.legend([Patch(color={**COMPUTE, **COMM}[k]) for k in kinds], kinds, loc="upper center",
              bbox_to_anchor=(0.5, -0.12 - 0.3 / stages), ncol=len(kinds), frameon=False,
              fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


def gpipe_run(stages, mbs):
    """A GPipe run of unit ops with zero-time sends, as pp_sched_simulate gives it."""
    ev = []
    for s in range(stages):
        for m in range(mbs):
            t = s + m
            if s > 0:
                ev.append({"stage": s, "kind": "RECV_F", "mb": m, "chunk": 0, "start": t, "end": t})
            ev.append({"stage": s, "kind": "F", "mb": m, "chunk": 0, "start": t, "end": t + 1})
        for m in range(mbs):
            t = mbs + stages - 1 + (stages - 1 - s) + m
            ev.append({"stage": s, "kind": "B", "mb": m, "chunk": 0, "start": t, "end": t + 1})
            if s > 0:
                ev.append({"stage": s, "kind": "SEND_B", "mb": m, "chunk": 0, "start": t + 1,
                           "end": t + 1.2})
    return {"schedule": "gpipe", "stages": stages, "microbatches": mbs, "events": ev}


def selftest():
    with tempfile.TemporaryDirectory() as d:
        path, out = os.path.join(d, "run.json"), os.path.join(d, "run.png")
        with open(path, "w") as f:
            json.dump(gpipe_run(3, 4), f)
        draw(load(path), out)
        with open(out, "rb") as f:
            head = f.read(8)
        if head != b"\x89PNG\r\n\x1a\n" or os.path.getsize(out) < 2000:
            sys.exit("pp_timeline selftest: %s is not a PNG" % out)
        with open(path, "w") as f:
            json.dump({"stages": 1, "events": [{"stage": 3, "kind": "F", "mb": 0, "start": 0,
                                                "end": 1}]}, f)
        try:
            load(path)
            sys.exit("pp_timeline selftest: an event on stage 3 of 1 was taken")
        except SystemExit as e:
            if "out of range" not in str(e.code):
                raise
    print("pp_timeline selftest: ok")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("json", nargs="?", help="events of pp_sched_write_json")
    ap.add_argument("-o", "--output", help="PNG to write (default: the JSON's name .png)")
    ap.add_argument("--title", help="plot title (default: schedule, sizes and bubble)")
    ap.add_argument("--selftest", action="store_true", help="draw a made-up run and check it")
    args = ap.parse_args()
    if args.selftest:
        selftest()
        return
    if not args.json:
        ap.error("a JSON file, or --selftest")
    out = args.output or os.path.splitext(args.json)[0] + ".png"
    draw(load(args.json), out, args.title)
    print(out)


if __name__ == "__main__":
    main()
