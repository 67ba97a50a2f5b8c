#!/usr/bin/env bash
# Builds the libFuzzer harnesses of tests/fuzz (clang, with ASan and UBSan)
# and runs each for FUZZ_SECONDS (default 15) on a copy of its seed corpus.
#   scripts/fuzz.sh [BUILD-DIR]      (default build-fuzz)
# Prints, per harness, the executions and executions per second, and writes
# BUILD-DIR/test-suite.log ("# PASS: n" ... as automake's, so that
# scripts/test.sh counts each harness as one test) with a .log and .trs per
# harness.  Exits nonzero when a harness did not build or found a crash, a
# leak, a broken invariant or a timeout (its input's path is printed), 77
# when clang or libFuzzer is missing.
# FUZZ_HARNESSES (names, space-separated) runs only those.
# The corpus a run grows stays in BUILD-DIR/run/NAME/corpus; tests/fuzz/corpus
# is never written.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out=${1:-build-fuzz}
seconds=${FUZZ_SECONDS:-15}
cc=${FUZZ_CC:-clang}

# Each harness and the library sources it is built from (they are compiled
# into it directly, instrumented), besides tests/fuzz/fuzz_stubs.c, which
# stands for the rest of the library.
boot="src/comm/bootstrap.c src/comm/bootstrap_ring.c src/comm/bootstrap_live.c src/comm/bootstrap_auth.c src/comm/secret.c src/base/sha256.c src/base/socket.c src/base/host.c src/base/param.c src/base/debug.c"
declare -A sources=(
  [bootstrap_msg]=$boot
  [unique_id]=$boot
  [topo_file]="src/topo/topo.c src/topo/topo_file.c"
  [tune_file]="src/topo/topo.c src/topo/topo_file.c"
  [param]="src/base/param.c src/base/debug.c"
)
names=(bootstrap_msg unique_id topo_file tune_file param)
[ -z "${FUZZ_HARNESSES:-}" ] || read -r -a names <<<"$FUZZ_HARNESSES"

# shellcheck disable=SC2054 # the commas are -fsanitize's
flags=(-std=gnu11 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
  -fno-omit-frame-pointer -D_GNU_SOURCE -Iinclude -Isrc -Itests/fuzz
  -Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers)

mkdir -p "$out"
rm -f "$out/test-suite.log" "$out"/*.trs
summary() { # PASS FAIL SKIP
  printf '# TOTAL: %d\n# PASS: %d\n# SKIP: %d\n# XFAIL: 0\n# FAIL: %d\n# XPASS: 0\n# ERROR: 0\n' \
    $(($1 + $2 + $3)) "$1" "$3" "$2" >"$out/test-suite.log"
}

# The toolchain: clang that links libFuzzer's runtime and runs its output.
# Some kernels randomize mmap more than this compiler's ASan can bear (as
# scripts/test.sh finds for gcc): then the fuzzers run under setarch -R.
probe=$out/probe
prefix=()
if ! command -v "$cc" >/dev/null 2>&1; then
  echo "fuzz.sh: $cc not found (Debian: apt-get install clang); skipping ${#names[@]} harnesses" >&2
  summary 0 0 ${#names[@]}
  exit 77
fi
echo 'int LLVMFuzzerTestOneInput(const char* d, unsigned long n) { return 0; }' >"$probe.c"
if ! "$cc" "${flags[@]}" "$probe.c" -o "$probe" 2>"$probe.err"; then
  echo "fuzz.sh: $cc cannot build with -fsanitize=fuzzer,address,undefined (libFuzzer missing?" \
    "Debian: libclang-rt-NN-dev):" >&2
  cat "$probe.err" >&2
  summary 0 0 ${#names[@]}
  exit 77
fi
if ! "$probe" -runs=1 >/dev/null 2>&1; then
  if setarch "$(uname -m)" -R "$probe" -runs=1 >/dev/null 2>&1; then
    echo "fuzz.sh: sanitized programs need ASLR off here; running under setarch -R"
    prefix=(setarch "$(uname -m)" -R)
  else
    echo "fuzz.sh: a libFuzzer program does not run on this machine" >&2
    "$probe" -runs=1 >&2 || true
    summary 0 0 ${#names[@]}
    exit 77
  fi
fi

pass=0 fail=0
failures=()
for name in "${names[@]}"; do
  [ -n "${sources[$name]:-}" ] || { echo "fuzz.sh: no harness $name" >&2; exit 2; }
  bin=$out/fuzz_$name log=$out/fuzz_$name.log run=$out/run/$name
  # shellcheck disable=SC2086 # the source lists split on blanks
  if ! "$cc" "${flags[@]}" "tests/fuzz/fuzz_$name.c" tests/fuzz/fuzz_stubs.c ${sources[$name]} \
    -lm -lpthread -o "$bin" >"$log" 2>&1; then
    echo "fuzz_$name: FAIL (does not build; $log)"
    cat "$log"
    echo ":test-result: FAIL" >"$out/fuzz_$name.trs"
    fail=$((fail + 1)) failures+=("fuzz_$name: build failed")
    continue
  fi
  rm -rf "$run"
  mkdir -p "$run/corpus"
  cp tests/fuzz/corpus/"$name"/* "$run/corpus/"
  rc=0
  "${prefix[@]}" "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$run/" "$run/corpus" >>"$log" 2>&1 || rc=$?
  execs=$(awk '/^stat::number_of_executed_units:/ { print $2 }' "$log")
  rate=$(awk '/^stat::average_exec_per_sec:/ { print $2 }' "$log")
  units=$(find "$run/corpus" -type f | wc -l)
  artifact=$(find "$run" -maxdepth 1 -type f \( -name 'crash-*' -o -name 'leak-*' \
    -o -name 'timeout-*' -o -name 'oom-*' \) | head -n 1)
  if [ "$rc" -eq 0 ] && [ -z "$artifact" ]; then
    echo "fuzz_$name: PASS ${execs:-?} executions in ${seconds} s, ${rate:-?} exec/s, corpus $units inputs"
    echo ":test-result: PASS" >"$out/fuzz_$name.trs"
    pass=$((pass + 1))
  else
    echo "fuzz_$name: FAIL (exit $rc) after ${execs:-?} executions; input: ${artifact:-none written}"
    grep -a -m 20 -E 'ERROR|invariant broken|runtime error|SUMMARY|Test unit written' "$log" || true
    echo "  reproduce: $bin ${artifact:-<input>}   (full output: $log)"
    echo ":test-result: FAIL" >"$out/fuzz_$name.trs"
    fail=$((fail + 1)) failures+=("fuzz_$name: ${artifact:-exit $rc}")
  fi
done

summary "$pass" "$fail" 0
echo "fuzz.sh: $pass passed, $fail failed (${seconds} s each)"
for f in "${failures[@]}"; do echo "---- $f"; done
[ "$fail" -eq 0 ]
