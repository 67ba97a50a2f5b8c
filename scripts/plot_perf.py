#!/usr/bin/env python3
"""Plots the --json output of a2a_perf or any *_perf tool as a PNG: bus
bandwidth against size (log x) for moeccl (one line per -a algorithm), the
MPI baseline and the copy roofline (the fastest copy of the same bytes seen
in the run; and the network roofline of a2a_perf's
--net-roofline), all measured in the same run.

  scripts/plot_perf.py RUN.json                 # writes RUN.png
  scripts/plot_perf.py a.json b.json -o cmp.png # several runs on one plot

A roofline's bus bandwidth is the size over the roofline time, times the
row's busbw factor (busbw_factor, or moeccl_busbw / moeccl_algbw for
a2a_perf).  Rows of one run that differ in type, redop, root or dist get
lines of their own.  Points whose moeccl result had wrong elements are
marked with a red x.  Needs matplotlib (Debian: python3-matplotlib).
"""
import argparse
import json
import os
import sys
from collections import OrderedDict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter  # noqa: E402


def human(n):
    for unit, mul in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= mul and n % mul == 0:
            return "%d%s" % (n // mul, unit)
    return "%d" % n


def factor(row):
    if row.get("busbw_factor") is not None:
        return row["busbw_factor"]
    if row.get("moeccl_algbw"):
        return row["moeccl_busbw"] / row["moeccl_algbw"]
    n = row.get("nranks", 2)
    return (n - 1) / n


def roof_bw(row, key):
    us = row.get(key)
    if not us or us <= 0:
        return None
    return row["size"] / (us * 1e3) * factor(row)


def group_key(row):
    """What makes rows of one run separate lines, the algorithm aside."""
    return tuple((k, row[k]) for k in ("type", "redop", "root", "dist") if k in row)


def load(path):
    with open(path) as f:
        rows = json.load(f)
    if not isinstance(rows, list) or not rows:
        sys.exit("plot_perf: %s: no rows" % path)
    return rows


def describe(rows, path, several):
    r = rows[0]
    coll = r.get("collective", "AlltoAll" if "dist" in r else "?")
    parts = ["%s, %d ranks" % (coll, r.get("nranks", 0))]
    if several:
        parts.insert(0, os.path.splitext(os.path.basename(path))[0])
    return ", ".join(parts)


def plot_run(ax, rows, label, color_iter):
    groups = OrderedDict()
    for row in rows:
        groups.setdefault(group_key(row), []).append(row)
    for key, grows in groups.items():
        tag = " ".join(str(v) for k, v in key if v not in ("none", "-1"))
        prefix = "%s %s" % (label, tag) if label else tag
        algos = OrderedDict()
        for row in grows:
            algos.setdefault(row.get("algo", "moeccl"), []).append(row)
        for algo, arows in algos.items():
            arows.sort(key=lambda r: r["size"])
            xs = [r["size"] for r in arows]
            ax.plot(xs, [r["moeccl_busbw"] for r in arows], marker="o", markersize=4,
                    linewidth=1.8, color=next(color_iter),
                    label="moeccl (%s) %s" % (algo, prefix))
            bad = [r for r in arows if (r.get("moeccl_wrong") or 0) > 0]
            if bad:
                ax.plot([r["size"] for r in bad], [r["moeccl_busbw"] for r in bad], "x",
                        color="red", markersize=9, markeredgewidth=2,
                        label="moeccl wrong results %s" % prefix)
        # The baseline and the rooflines are the same for every algorithm.
        first = OrderedDict()
        for row in sorted(grows, key=lambda r: r["size"]):
            first.setdefault(row["size"], row)
        srows = list(first.values())
        mpi = [(r["size"], r["mpi_busbw"]) for r in srows if r.get("mpi_busbw") is not None]
        if mpi:
            ax.plot(*zip(*mpi), marker="s", markersize=4, linewidth=1.5, linestyle="--",
                    color=next(color_iter), label="MPI %s" % prefix)
        for key_us, name, style in (("roofline_us", "copy roofline (fastest copy)", ":"),
                                    ("netroof_us", "network roofline", "-."),
                                    ("shmroof_us", "shared-memory roofline", "--")):
            pts = [(r["size"], roof_bw(r, key_us)) for r in srows]
            pts = [p for p in pts if p[1] is not None]
            if pts:
                ax.plot(*zip(*pts), linewidth=1.5, linestyle=style, color=next(color_iter),
                        label="%s %s" % (name, prefix))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("json", nargs="+", help="--json files of a2a_perf or the *_perf tools")
    ap.add_argument("-o", "--output", help="PNG to write (default: the first JSON's name .png)")
    ap.add_argument("--title", help="plot title")
    ap.add_argument("--logy", action="store_true", help="log scale for the bandwidth too")
    args = ap.parse_args()
    out = args.output or os.path.splitext(args.json[0])[0] + ".png"

    colors = iter(plt.rcParams["axes.prop_cycle"].by_key()["color"] * 20)
    fig, ax = plt.subplots(figsize=(10, 6), dpi=110)
    titles = []
    sizes = set()
    several = len(args.json) > 1
    for path in args.json:
        rows = load(path)
        sizes.update(r["size"] for r in rows if r["size"] > 0)
        label = os.path.splitext(os.path.basename(path))[0] if several else ""
        plot_run(ax, rows, label, colors)
        titles.append(describe(rows, path, several))
    ax.set_xscale("log", base=2)
    if args.logy:
        ax.set_yscale("log")
    ticks = sorted(sizes)
    while len(ticks) > 12:  # every other size once they crowd
        ticks = ticks[::2]
    ax.set_xticks(ticks)
    ax.xaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: human(int(round(v)))))
    ax.set_xlabel("size (bytes, as the tool's size column)")
    ax.set_ylabel("bus bandwidth (GB/s)")
    ax.set_title(args.title or "; ".join(titles))
    ax.grid(True, which="major", alpha=0.35)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    fig.savefig(out)
    print(out)


if __name__ == "__main__":
    main()
