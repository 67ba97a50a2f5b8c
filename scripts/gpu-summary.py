#!/usr/bin/env python3
"""Summarises a scripts/gpu-check.sh run: OUT/summary.json.

  gpu-summary.py OUT [DEVICE]

Reads OUT/summary.txt (stage, status, seconds), the a2a_dev_perf JSON of
each rank count and the nccl-tests logs, and checks the targets of issue
10's section 7:
  roof80       all-to-all on 4 and 8 ranks of one GPU at >= 64 MiB per rank:
               moeccl's time within 1/0.8 of the device copy roofline's
  vs_nccl      where NCCL ran several ranks on one GPU: moeccl at least as
               fast as ncclAlltoAll from 1 MiB, and 1.2x grouped
               ncclSend/ncclRecv on the MoE-skewed all-to-allv
  nt_busbw     nccl-tests alltoall_perf on the drop-in: busbw within 10% of
               a2a_dev_perf's at the same sizes and rank counts
  nt_wrong     nccl-tests: #wrong 0 in every row, the drop-in loaded
A target is true, false, or null with the reason it could not be judged.
Prints the summary; exits 1 when a stage failed or a target is false.
"""
import json
import os
import re
import sys

MIB = 1 << 20


def stages(out):
    res = {}
    path = os.path.join(out, "summary.txt")
    if os.path.exists(path):
        for line in open(path):
            f = line.split()
            if len(f) >= 2 and f[0] != "summary":
                res[f[0]] = {"status": int(f[1]), "seconds": int(f[2]) if len(f) > 2 else None}
    return res


def dev_perf(out):
    res = {}
    for n in (2, 4, 8):
        path = os.path.join(out, "dev_perf_%d.json" % n)
        if os.path.exists(path):
            try:
                res[n] = json.load(open(path))
            except ValueError as e:
                res[n] = {"error": "unreadable JSON: %s" % e}
    return res


ROW = re.compile(r"^\s+(\d+)\s+(\d+)\s+(\S+)\s+(\S+)\s+(-?\d+)\s+(.*)$")


def nccl_test(path):
    """The rows of a nccl-tests log: bytes, out-of-place and in-place busbw and #wrong."""
    rows, text = [], open(path, errors="replace").read()
    for line in text.splitlines():
        m = ROW.match(line)
        if not m:
            continue
        f = m.group(6).split()
        try:
            rows.append({"bytes": int(m.group(1)), "oop_us": float(f[0]), "oop_busbw": float(f[2]),
                         "oop_wrong": float(f[3]), "ip_us": float(f[4]), "ip_busbw": float(f[6]),
                         "ip_wrong": float(f[7])})
        except (IndexError, ValueError):
            continue  # a row that says N/A
    oob = re.search(r"# Out of bounds values\s*:\s*(\d+)", text)
    return {"rows": rows, "out_of_bounds": int(oob.group(1)) if oob else None,
            "drop_in_loaded": "moeccl version" in text,
            "version_line": next((l for l in text.splitlines() if "nccl-tests version" in l), None)}


def main():
    out = sys.argv[1]
    device = sys.argv[2] if len(sys.argv) > 2 else "cuda"
    st = stages(out)
    dp = dev_perf(out)
    nt = {}
    for name in sorted(st):
        if name.startswith("nt_") and st[name]["status"] != 77:
            nt[name] = nccl_test(os.path.join(out, name + ".log"))
    targets = {}

    # roof80
    checked, bad, why = [], [], None
    for n in (4, 8):
        rows = dp.get(n)
        if not isinstance(rows, list):
            why = "no a2a_dev_perf rows for %d ranks" % n
            continue
        for r in rows:
            if r["op"] == "alltoall" and r["bytes"] >= 64 * MIB:
                checked.append((n, r["bytes"], r["pct_roof"]))
                if r["pct_roof"] < 80.0:
                    bad.append((n, r["bytes"], r["pct_roof"]))
    if not checked and not why:
        why = "no all-to-all row at or above 64 MiB per rank on 4 or 8 ranks"
    targets["roof80"] = {"met": (not bad) if checked and not why else (False if bad else None),
                         "rows": [{"ranks": n, "bytes": b, "pct_roof": p} for n, b, p in checked],
                         "why": why}

    # vs_nccl
    checked, bad = [], []
    for n, rows in dp.items():
        if not isinstance(rows, list):
            continue
        for r in rows:
            if "vs_nccl" not in r or r["bytes"] < MIB:
                continue
            need = 1.0 if r["op"] == "alltoall" else 1.2
            checked.append({"ranks": n, "op": r["op"], "bytes": r["bytes"], "vs_nccl": r["vs_nccl"],
                            "need": need})
            if r["vs_nccl"] < need:
                bad.append(checked[-1])
    why = None
    if not checked:
        why = "NCCL did not run in a2a_dev_perf (its header says why: %s)" % os.path.join(
            out, "dev_perf_2.log")
    targets["vs_nccl"] = {"met": (not bad) if checked else None, "rows": checked, "why": why}

    # nt_busbw and nt_wrong
    checked, bad, why = [], [], None
    for n in (2, 4, 8):
        log = nt.get("nt_alltoall_%d" % n)
        rows = dp.get(n)
        if not log or not log["rows"] or not isinstance(rows, list):
            why = "no nccl-tests alltoall_perf or a2a_dev_perf rows for %d ranks" % n
            continue
        ours = {r["bytes"]: r["moeccl_busbw"] for r in rows if r["op"] == "alltoall"}
        for r in log["rows"]:
            if r["bytes"] in ours and ours[r["bytes"]] > 0:
                ratio = r["oop_busbw"] / ours[r["bytes"]]
                checked.append({"ranks": n, "bytes": r["bytes"], "nccl_tests_busbw": r["oop_busbw"],
                                "a2a_dev_perf_busbw": ours[r["bytes"]], "ratio": round(ratio, 3)})
                if ratio < 0.9:
                    bad.append(checked[-1])
    targets["nt_busbw"] = {"met": (not bad) if checked and not why else (False if bad else None),
                           "rows": checked, "why": why}
    wrong = sum(r["oop_wrong"] + r["ip_wrong"] for l in nt.values() for r in l["rows"])
    loaded = all(l["drop_in_loaded"] for l in nt.values())
    ran = [k for k, l in nt.items() if l["rows"]]
    targets["nt_wrong"] = {"met": (wrong == 0 and loaded and len(ran) == len(nt)) if nt else None,
                           "wrong": wrong, "drop_in_loaded": loaded, "ran": ran,
                           "why": None if nt else "the nccl-tests stages were skipped (see their logs)"}

    failed = [k for k, v in st.items() if v["status"] not in (0, 77)]
    summary = {"device": device, "stages": st, "failed_stages": failed, "targets": targets,
               "a2a_dev_perf": dp, "nccl_tests": nt}
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    for k, v in targets.items():
        print("target %-9s %s%s" % (k, {True: "met", False: "NOT met", None: "not judged"}[v["met"]],
                                    (": " + v["why"]) if v.get("why") else ""))
    print("failed stages: %s" % (" ".join(failed) or "none"))
    return 1 if failed or any(v["met"] is False for v in targets.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
