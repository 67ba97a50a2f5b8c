#!/bin/sh
# moe/ uses only moeccl's public headers: every #include "..." in moe/ names
# a header of moe/ itself or include/moeccl*.h, never one of src/ (its
# CPPFLAGS leave src/ out, but the top source folder is on the include path
# of every build, so "src/x.h" would still compile).
srcdir=${srcdir:-.}
fail=0
for f in "$srcdir"/moe/*.c "$srcdir"/moe/*.h; do
  sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f" | while read -r h; do
    case $h in
      moeccl.h | moeccl_moe.h | moeccl_sim.h) ;;
      */*) echo "FAIL: $f includes \"$h\" (not moe/ or the public API)"; exit 1 ;;
      *) [ -f "$srcdir/moe/$h" ] || { echo "FAIL: $f includes \"$h\", not a header of moe/"; exit 1; } ;;
    esac
  done || fail=1
done
[ $fail -eq 0 ] && echo "moe/ includes only its own headers and include/moeccl*.h"
exit $fail
