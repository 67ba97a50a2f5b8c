#!/usr/bin/env python3
"""Checks the library's layering (docs/ARCHITECTURE.md, "Layers").

usage: scripts/layers.py BUILD_DIR

- every #include "x" of a file under src/ names a header of its own layer,
  a lower one, or include/;
- every symbol an object of the library takes from another object of it
  (from `nm`: the calls and data references the compiler emitted, so a
  declaration alone counts for nothing) is defined in its own layer or a
  lower one;
- no two source files need each other, directly or around a longer circle;
- no source file outside tests/ is over 800 lines (a .c and its same-named
  .h counted together).
Prints every breach and exits 1 if there is any.
"""
import os
import re
import subprocess
import sys

# Bottom up; a layer is the first folder under src/.
LAYERS = ["base", "device", "kernels", "sched", "topo", "comm", "transport", "algos",
          "tune", "plan", "exec", "api"]
MAX_LINES = 800
LONG_FILE_DIRS = ["src", "include", "moe", "perf", "shim", "scripts"]


def layer_of(path):
    parts = path.split("/")
    if parts[0] == "include":
        return -1
    if parts[0] != "src" or len(parts) < 3 or parts[1] not in LAYERS:
        raise SystemExit(f"layers.py: {path} is in no layer of {LAYERS}")
    return LAYERS.index(parts[1])


def sources(root, exts):
    out = []
    for top in ("src", "include"):
        for d, _, files in os.walk(os.path.join(root, top)):
            out += [os.path.relpath(os.path.join(d, f), root) for f in files if f.endswith(exts)]
    return sorted(out)


def check_includes(root, errors):
    for f in sources(root, (".c", ".h")):
        if f.startswith("include/"):
            continue
        text = open(os.path.join(root, f), errors="replace").read()
        for inc in re.findall(r'^\s*#\s*include\s+"([^"]+)"', text, re.M):
            cands = [os.path.normpath(os.path.join(os.path.dirname(f), inc)),
                     os.path.join("src", inc), os.path.join("include", inc)]
            hit = next((c for c in cands if os.path.isfile(os.path.join(root, c))), None)
            if hit is None:
                continue  # config.h and other generated headers
            if layer_of(hit) > layer_of(f):
                errors.append(f"include up: {f} includes {hit}")


def object_source(root, obj):
    """src/<dir>/<lib>-<name>.o -> src/<dir>/<name>.c"""
    d = os.path.dirname(obj)
    name = re.sub(r"^[A-Za-z0-9_]+_la-", "", os.path.basename(obj))[:-2]
    src = os.path.join(d, name + ".c")
    return src if os.path.isfile(os.path.join(root, src)) else None


def nm(path, args):
    out = subprocess.run(["nm"] + args + [path], capture_output=True, text=True, check=True)
    return out.stdout.splitlines()


def check_symbols(root, build, errors):
    objs = {}
    for d, _, files in os.walk(os.path.join(build, "src")):
        if "/.libs" in d:
            continue
        for fn in files:
            if fn.endswith(".o") and fn.startswith("libmoeccl_core_la-"):
                rel = os.path.relpath(os.path.join(d, fn), build)
                src = object_source(root, rel)
                if src:
                    objs[src] = os.path.join(d, fn)
    if not objs:
        raise SystemExit(f"layers.py: no library objects under {build}/src (build first)")
    defined = {}
    for src, o in objs.items():
        for line in nm(o, ["--defined-only", "-g"]):
            parts = line.split()
            if len(parts) == 3:
                defined[parts[2]] = src
    needs = {src: set() for src in objs}
    for src, o in objs.items():
        for line in nm(o, ["-u"]):
            sym = line.split()[-1]
            other = defined.get(sym)
            if other and other != src:
                needs[src].add(other)
                if layer_of(other) > layer_of(src):
                    errors.append(f"call up: {src} uses {sym} of {other}")
    return needs


def check_circles(needs, errors):
    # Tarjan's strongly connected components over the file graph.
    index, low, stack, on, comps, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(needs.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(needs):
        if v not in index:
            visit(v)
    for c in comps:
        errors.append("circle: " + " <-> ".join(c))


def check_lengths(root, errors):
    counts = {}
    for top in LONG_FILE_DIRS:
        for d, _, files in os.walk(os.path.join(root, top)):
            for fn in files:
                if not fn.endswith((".c", ".h", ".py", ".sh")):
                    continue
                path = os.path.relpath(os.path.join(d, fn), root)
                with open(os.path.join(root, path), errors="replace") as fh:
                    n = sum(1 for _ in fh)
                stem = path[:-2] if path.endswith((".c", ".h")) else path
                counts[stem] = counts.get(stem, 0) + n
    for stem, n in sorted(counts.items()):
        if n > MAX_LINES:
            errors.append(f"long file: {stem}.[ch] or {stem}: {n} lines (at most {MAX_LINES})")


def main():
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    root = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    build = os.path.abspath(sys.argv[1])
    errors = []
    check_includes(root, errors)
    check_circles(check_symbols(root, build, errors), errors)
    check_lengths(root, errors)
    for e in errors:
        print(e)
    print(f"layers: {len(errors)} breach(es) in {len(LAYERS)} layers")
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()
