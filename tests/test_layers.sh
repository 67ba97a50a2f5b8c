#!/bin/sh
# The library's layering (docs/ARCHITECTURE.md, "Layers"), checked on the
# objects just built: no include or call up a layer, no circle of files,
# no source file over 800 lines outside tests/ (scripts/layers.py).
srcdir=${srcdir:-.}
command -v python3 >/dev/null 2>&1 || { echo "SKIP: no python3"; exit 77; }
command -v nm >/dev/null 2>&1 || { echo "SKIP: no nm"; exit 77; }
exec python3 "$srcdir/scripts/layers.py" .
