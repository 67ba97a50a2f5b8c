#!/usr/bin/env python3
"""Summarises a scripts/gpu-check.sh run: OUT/summary.json.

  gpu-summary.py OUT [DEVICE]

Reads OUT/summary.txt (stage, status, seconds), OUT/mps.txt (whether the
MPS daemon ran), the a2a_dev_perf JSON of each rank count, the nccl-tests
logs (nt_* on moeccl's drop-in, nccl_* on the baseline NCCL: their busbw
side by side in "nccl_tests_side_by_side") and the PyTorch logs (torch_*),
and checks the targets of issue 10's section 7 and issue 24:
  roof80       all-to-all on 4 and 8 ranks of one GPU at >= 64 MiB per rank:
               moeccl's time within 1/0.8 of the device copy roofline's
  vs_nccl      where NCCL ran several ranks on one GPU: moeccl at least as
               fast as ncclAlltoAll from 1 MiB, and 1.2x grouped
               ncclSend/ncclRecv on the MoE-skewed all-to-allv
  nt_busbw     nccl-tests alltoall_perf on the drop-in: busbw within 10% of
               a2a_dev_perf's at the same sizes and rank counts
  nt_wrong     nccl-tests: #wrong 0 in every row, the drop-in loaded
  torch        tests/test_torch_dropin.py passed on 2 and 4 ranks with the
               drop-in mapped in every rank
and issue 28's, from the moe_overlap_N and moe_dev_perf_N JSON:
  overlap      moe_train --device cuda's best chunk count hides at least 60%
               of the EP communication and runs the step 1.3x the unchunked
  moe_vs_nccl  moe_perf --device cuda at least 1.5x permute + NCCL's grouped
               send/recv + unpermute at K = 2 and 6, every value right
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
    lib = re.search(r"nccl-library=(\d+)", text)
    return {"rows": rows, "out_of_bounds": int(oob.group(1)) if oob else None,
            "drop_in_loaded": "moeccl version" in text,
            "nccl_library": int(lib.group(1)) if lib else None,
            "version_line": next((l for l in text.splitlines() if "nccl-tests version" in l), None)}


def mps(out):
    """Whether gpu-check.sh ran the MPS daemon: OUT/mps.txt's first word, the rest, 'stopped'."""
    path = os.path.join(out, "mps.txt")
    if not os.path.exists(path):
        return {"ran": False, "detail": "gpu-check.sh wrote no mps.txt", "stopped": None}
    lines = open(path).read().split("\n")
    first = lines[0].split(None, 1)
    return {"ran": first[0] == "ran" if first else False, "detail": first[1] if len(first) > 1 else "",
            "stopped": "stopped" in lines[1:] if first and first[0] == "ran" else None}


def torch_logs(out, st):
    """The PyTorch stages: status, drop-in proof and torch's NCCL version as the ranks printed them."""
    res = {}
    for name in sorted(st):
        if not name.startswith("torch_"):
            continue
        path = os.path.join(out, name + ".log")
        text = open(path, errors="replace").read() if os.path.exists(path) else ""
        loaded = sorted({l.split("drop-in loaded: ", 1)[1].strip() for l in text.splitlines()
                         if "drop-in loaded: " in l})
        version = next((l.split("torch.cuda.nccl.version() = ", 1)[1].strip() for l in text.splitlines()
                        if "torch.cuda.nccl.version() = " in l), None)
        res[name] = {"status": st[name]["status"], "drop_in_loaded": loaded, "torch_nccl_version": version,
                     "verdict": next((l.strip() for l in text.splitlines()
                                      if l.startswith(("PASS", "FAIL", "SKIP"))), None)}
    return res


def side_by_side(nt):
    """nccl-tests busbw (GB/s) of the drop-in (nt_C_N) and the baseline NCCL (nccl_C_N) per size."""
    rows = []
    for name, log in sorted(nt.items()):
        if not name.startswith("nt_"):
            continue
        coll, n = name[3:].rsplit("_", 1)
        ref = {r["bytes"]: r for r in nt.get("nccl_%s_%s" % (coll, n), {}).get("rows", [])}
        for r in log["rows"]:
            b = ref.get(r["bytes"])
            row = {"op": coll, "ranks": int(n), "bytes": r["bytes"], "moeccl_oop_busbw": r["oop_busbw"],
                   "moeccl_ip_busbw": r["ip_busbw"], "nccl_oop_busbw": b["oop_busbw"] if b else None,
                   "nccl_ip_busbw": b["ip_busbw"] if b else None}
            row["oop_ratio"] = (round(r["oop_busbw"] / b["oop_busbw"], 3)
                                if b and b["oop_busbw"] > 0 else None)
            rows.append(row)
    return rows


def main():
    out = sys.argv[1]
    device = sys.argv[2] if len(sys.argv) > 2 else "cuda"
    st = stages(out)
    dp = dev_perf(out)
    nt = {}
    for name in sorted(st):
        if name.startswith(("nt_", "nccl_")) and st[name]["status"] != 77:
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
    ours = {k: l for k, l in nt.items() if k.startswith("nt_")}
    wrong = sum(r["oop_wrong"] + r["ip_wrong"] for l in ours.values() for r in l["rows"])
    loaded = all(l["drop_in_loaded"] for l in ours.values())
    ran = [k for k, l in ours.items() if l["rows"]]
    targets["nt_wrong"] = {"met": (wrong == 0 and loaded and len(ran) == len(ours)) if ours else None,
                           "wrong": wrong, "drop_in_loaded": loaded, "ran": ran,
                           "why": None if ours else "the nccl-tests stages were skipped (see their logs)"}

    tl = torch_logs(out, st)
    ran = {k: v for k, v in tl.items() if v["status"] != 77}
    targets["torch"] = {"met": all(v["status"] == 0 and v["drop_in_loaded"] for v in ran.values())
                        if ran else None, "stages": tl,
                        "why": None if ran else "the PyTorch stages were skipped (see their logs)"}

    failed = [k for k, v in st.items() if v["status"] not in (0, 77)]
    sbs = side_by_side(nt)
    # overlap: moe_train --device cuda's chunks (scripts/moe_overlap.py), the
    # issue's targets: at least 60% of the communication hidden and the step
    # 1.3x the unchunked one, with communication at least 30% of the work
    ov, rows = {}, []
    for n in (2, 4, 8):
        try:
            with open(os.path.join(out, "moe_overlap_%d.json" % n)) as f:
                d = json.load(f)
        except (OSError, ValueError):
            continue
        best = next(r for r in d["rows"] if r["chunks"] == d["best"])
        work = d["comm_ms"] + d["compute_ms"]
        ov[n] = {"best_chunks": d["best"], "hidden": round(best["hidden"], 3),
                 "speedup": round(best["speedup"], 3),
                 "comm_share": round(d["comm_ms"] / work, 3) if work > 0 else None}
        rows.append(ov[n])
    targets["overlap"] = {
        "met": all(r["hidden"] >= 0.6 and r["speedup"] >= 1.3 for r in rows) if rows else None,
        "ranks": ov, "why": None if rows else "the moe_overlap stages were skipped (see their logs)"}

    # moe_vs_nccl: moe_perf --device cuda against permute + NCCL's grouped
    # send/recv + unpermute, at least 1.5x at K = 2 and 6 (issue 28)
    mrows = []
    for n in (2, 4, 8):
        try:
            with open(os.path.join(out, "moe_dev_perf_%d.json" % n)) as f:
                rows = json.load(f)
        except (OSError, ValueError):
            continue
        for r in rows:
            if r.get("baseline") == "nccl" and r["topk"] in (2, 6):
                mrows.append({"ranks": n, "topk": r["topk"], "tokens": r["tokens"],
                              "speedup": r["speedup"], "wrong": r["wrong"],
                              "base_wrong": r["base_wrong"]})
    targets["moe_vs_nccl"] = {
        "met": all(r["speedup"] >= 1.5 and not r["wrong"] and not r["base_wrong"] for r in mrows)
        if mrows else None, "rows": mrows,
        "why": None if mrows else "no moe_dev_perf row against NCCL (skipped, or NCCL did not run)"}

    summary = {"device": device, "mps": mps(out), "stages": st, "failed_stages": failed,
               "targets": targets, "a2a_dev_perf": dp, "nccl_tests": nt, "nccl_tests_side_by_side": sbs}
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    for k, v in targets.items():
        print("target %-9s %s%s" % (k, {True: "met", False: "NOT met", None: "not judged"}[v["met"]],
                                    (": " + v["why"]) if v.get("why") else ""))
    print("mps: %s" % ("ran" if summary["mps"]["ran"] else "not run: " + summary["mps"]["detail"]))
    if sbs:
        print("nccl-tests busbw GB/s, out of place (in place): moeccl's drop-in | NCCL")
        for r in sbs:
            print("  %-10s %d ranks %10d B  %8.2f (%8.2f) | %s" % (
                r["op"], r["ranks"], r["bytes"], r["moeccl_oop_busbw"], r["moeccl_ip_busbw"],
                "%8.2f (%8.2f)" % (r["nccl_oop_busbw"], r["nccl_ip_busbw"])
                if r["nccl_oop_busbw"] is not None else "-"))
    print("failed stages: %s" % (" ".join(failed) or "none"))
    return 1 if failed or any(v["met"] is False for v in targets.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
