#!/usr/bin/env bash
# The test suite: installs what is missing, then runs `make check` three times,
#   build/           with warnings as errors,
#   build-asan/      with AddressSanitizer and UndefinedBehaviorSanitizer,
#   build-valgrind/  the multi-process tests under valgrind memcheck (2 and 3
#                    ranks, no variants; test_sched is pure computation and
#                    left to the sanitizers),
# then runs the libFuzzer harnesses of tests/fuzz for FUZZ_SECONDS each
# (default 15; scripts/fuzz.sh, in build-fuzz/, each harness one test),
# and ends with one line: "moeccl: N passed, M failed, K skipped".
# Exits nonzero when a test failed or a build did not complete.
# MOECCL_CHECK_TIMEOUT (seconds, default 3600) bounds each `make check`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD

./scripts/install-deps.sh

jobs=$(nproc)
check_timeout=${MOECCL_CHECK_TIMEOUT:-3600}
sanitize='-fsanitize=address,undefined'
asan_cflags="-O1 -g $sanitize -fno-omit-frame-pointer"
# MP_DEADLINE_SCALE stretches the multi-process tests' deadlines (tests/local.mk).
asan_env=(
  ASAN_OPTIONS=detect_leaks=1
  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
  LSAN_OPTIONS="suppressions=$root/scripts/lsan.supp"
  MP_DEADLINE_SCALE=3
  # test_coll_sched up to 300 ranks (the plain build checks up to 1,024;
  # the larger counts were a minute of this stage)
  COLL_SCHED_MAX_RANKS=300
)
stage_errors=()

# Some kernels randomize mmap more than this compiler's ASan can bear; a
# sanitized program then dies at start.  Run without ASLR if that helps.
asan_prefix=()
probe_asan() {
  local dir
  dir=$(mktemp -d)
  echo 'int main(void) { return 0; }' >"$dir/probe.c"
  if ! cc $sanitize "$dir/probe.c" -o "$dir/probe" 2>/dev/null; then
    echo "test.sh: the compiler cannot build with $sanitize" >&2
  elif ! env "${asan_env[@]}" "$dir/probe" >/dev/null 2>&1; then
    if setarch "$(uname -m)" -R env "${asan_env[@]}" "$dir/probe" >/dev/null 2>&1; then
      echo "test.sh: sanitized programs need ASLR off here; running build-asan checks under setarch -R"
      asan_prefix=(setarch "$(uname -m)" -R)
    else
      echo "test.sh: sanitized programs do not run on this machine" >&2
    fi
  fi
  rm -rf "$dir"
}

# run_stage DIR [ENV...] -- [CONFIGURE-ARGS...]: build in DIR, then make check
# there with ENV set.  Records a stage that could not produce test results.
run_stage() {
  local dir=$1 env=() rc=0
  shift
  while [ "$1" != -- ]; do env+=("$1"); shift; done
  shift
  echo "==== $dir: build"
  # Results of an earlier run must not pass for this run's.
  rm -f "$dir/test-suite.log"
  [ ! -d "$dir" ] || find "$dir" -name '*.trs' -delete
  if ! ./scripts/build.sh "$dir" "$@"; then
    stage_errors+=("$dir: the build failed (output above; configure's in $dir/config.log)")
    return
  fi
  echo "==== $dir: make check"
  timeout "$check_timeout" env "${env[@]}" "${check_prefix[@]}" make --no-print-directory -C "$dir" -j"$jobs" check "${make_args[@]}" || rc=$?
  if [ "$rc" = 124 ]; then
    stage_errors+=("$dir: make check passed MOECCL_CHECK_TIMEOUT=${check_timeout}s and was stopped")
  elif [ ! -f "$dir/test-suite.log" ]; then
    stage_errors+=("$dir: make check failed before any test ran (exit $rc)")
  fi
}

# count DIR FIELD...: sum the "# FIELD: n" lines of DIR/test-suite.log.
count() {
  local log=$1/test-suite.log
  shift
  [ -f "$log" ] || { echo 0; return; }
  local pattern
  pattern=$(IFS='|'; echo "$*")
  awk -v re="^# ($pattern): *[0-9]+" '$0 ~ re { n += $NF } END { print n + 0 }' "$log"
}

check_prefix=()
make_args=()
run_stage build -- --enable-werror
probe_asan
check_prefix=("${asan_prefix[@]}")
run_stage build-asan "${asan_env[@]}" -- CFLAGS="$asan_cflags" LDFLAGS="$sanitize"

# valgrind follows the forked ranks; an error or a definite leak fails the test.
check_prefix=()
vg_tests="tests/test_param tests/api_nompi tests/mp_alltoall tests/mp_alltoallv tests/mp_sendrecv"
vg_tests+=" tests/mp_split tests/mp_hoststream tests/mp_badargs tests/mp_coll tests/mp_coll_badargs"
vg_tests+=" tests/test_device tests/test_boot_reply tests/mp_device tests/test_sim"
vg_cmd="$root/build-valgrind/libtool --mode=execute valgrind -q --trace-children=yes --error-exitcode=99"
vg_cmd+=" --leak-check=full --errors-for-leak-kinds=definite --suppressions=$root/scripts/valgrind.supp"
make_args=("TESTS=$vg_tests" "LOG_COMPILER=$vg_cmd")
run_stage build-valgrind MP_RANKS=2,3 MP_VARIANTS=0 MP_DEADLINE_SCALE=10 MOECCL_TIMEOUT=120 \
  TEST_SIM_NO_TIMING=1 --
make_args=()

# The fuzz harnesses, a bounded run each (about 1.5 minutes in all with their
# builds).  fuzz.sh writes build-fuzz/test-suite.log and a .trs and .log per
# harness, so they are counted and shown below like make check's; without
# clang or libFuzzer it counts them as skipped.
echo "==== build-fuzz: fuzz"
rm -f build-fuzz/test-suite.log
rc=0
timeout "$check_timeout" ./scripts/fuzz.sh build-fuzz || rc=$?
if [ "$rc" = 124 ]; then
  stage_errors+=("build-fuzz: fuzz.sh passed MOECCL_CHECK_TIMEOUT=${check_timeout}s and was stopped")
elif [ ! -f build-fuzz/test-suite.log ]; then
  stage_errors+=("build-fuzz: scripts/fuzz.sh failed before any harness ran (exit $rc)")
fi

stages=(build build-asan build-valgrind build-fuzz)
passed=0 failed=0 skipped=0
for dir in "${stages[@]}"; do
  passed=$((passed + $(count "$dir" PASS)))
  failed=$((failed + $(count "$dir" FAIL ERROR XPASS)))
  skipped=$((skipped + $(count "$dir" SKIP)))
done

if [ "$failed" -gt 0 ] || [ ${#stage_errors[@]} -gt 0 ]; then
  for dir in "${stages[@]}"; do
    [ -d "$dir" ] || continue
    while IFS= read -r trs; do
      log=${trs%.trs}.log
      echo "---- $log: first failure lines, then its last 40 lines"
      grep -m 10 -E '^(FAIL|ERROR)|Sanitizer|runtime error' "$log" 2>/dev/null || true
      echo "...."
      tail -n 40 "$log" 2>/dev/null || true
    done < <(grep -rlE --include='*.trs' '^:test-result: (FAIL|ERROR|XPASS)' "$dir" | sort)
  done
  for e in "${stage_errors[@]}"; do echo "---- $e"; done
fi

# A build that produced no results counts as one failure, so that the
# summary never reads as clean when something did not run.
failed=$((failed + ${#stage_errors[@]}))
echo "moeccl: $passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
