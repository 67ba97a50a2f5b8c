# Sourced by tests/test_py_*.sh: the Python ($PYTHON, else /usr/bin/python3,
# else python3, the first that imports numpy and torch; skip 77 without),
# this build's library (MOECCL_LIBRARY) and the package's source on
# PYTHONPATH.  MP_DEADLINE_SCALE stretches the deadlines.
# tests/test_torch_dropin.sh sources it with py_find_only=1 for find_python
# alone.
srcdir=${srcdir:-.}
scale=${MP_DEADLINE_SCALE:-1}
# find_python MODULES CANDIDATE...: py= the first candidate that is a
# command and imports MODULES ("numpy, torch"); empty (status 1) if none.
find_python() {
  modules=$1
  shift
  py=
  for p in "$@"; do
    if command -v "$p" >/dev/null 2>&1 && "$p" -c "import $modules" >/dev/null 2>&1; then
      py=$p
      return 0
    fi
  done
  return 1
}
[ -n "${py_find_only:-}" ] && return 0
find_python "numpy, torch" ${PYTHON:-} /usr/bin/python3 python3
if [ -z "$py" ]; then
  echo "SKIP: no Python here imports numpy and torch (install python3-numpy python3-torch)"
  exit 77
fi
MOECCL_LIBRARY=${MOECCL_LIBRARY:-$PWD/.libs/libmoeccl.so.0}
PYTHONPATH=$srcdir/python${PYTHONPATH:+:$PYTHONPATH}
export MOECCL_LIBRARY PYTHONPATH
# A sanitized library (build-asan) in an unsanitized Python: its runtimes
# must be loaded first; leaks are the C tests' to find (Python's own
# allocations outlive the process by design).
sanitized=
san_libs=$(ldd "$MOECCL_LIBRARY" 2>/dev/null | awk '/lib(asan|ubsan)\.so/ {print $3}' | tr '\n' ' ')
if [ -n "$san_libs" ]; then
  sanitized=1
  LD_PRELOAD="$san_libs${LD_PRELOAD:+ $LD_PRELOAD}"
  ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
  export LD_PRELOAD ASAN_OPTIONS
fi
# run NAME DEADLINE CMD...: CMD under `timeout`, its status reported
run() {
  name=$1 limit=$(($2 * scale))
  shift 2
  echo "== $name"
  timeout -k 5 "$limit" "$@"
  rc=$?
  [ $rc -eq 124 ] && echo "$name: past its deadline of $limit s"
  [ $rc -ne 0 ] && echo "$name: exit $rc"
  return $rc
}
