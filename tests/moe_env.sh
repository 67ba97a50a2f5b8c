# Sourced by the moe_train tests after setting moe_test (the test's name):
# moe_train and the .npy comparison, a temporary directory removed at exit,
# MOECCL_TIMEOUT=30 unless set, run() (moe_train with a 120 s deadline,
# MP_DEADLINE_SCALE stretches it) and fail=0.
srcdir=${srcdir:-.}
train=./moe/moe_train
cmp=./tests/moe_npy_cmp
tmp=$(mktemp -d "${TMPDIR:-/tmp}/$moe_test.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
: "${MOECCL_TIMEOUT:=30}"
export MOECCL_TIMEOUT
scale=${MP_DEADLINE_SCALE:-1}
limit=$(awk -v s="$scale" 'BEGIN { s = s > 0 ? s : 1; printf "%d", 120 * s }')
run() { timeout -k 5 "$limit" "$train" "$@"; }
fail=0

# dump NAME ARGS...: one step of the test's $src with ARGS, dumped in
# $tmp/NAME (its output in $tmp/NAME.out); says FAIL and returns 1 if it fails
dump() {
  name=$1
  shift
  if ! run $src --steps 1 --dump "$tmp/$name" "$@" >"$tmp/$name.out" 2>&1; then
    echo "FAIL: $name ($*): $(tail -n 3 "$tmp/$name.out")"
    fail=1
    return 1
  fi
}
