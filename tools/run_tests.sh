#!/usr/bin/env bash
# Builds uocr and runs the whole test suite, in three stages:
#   1. every test (build dir, default build/), closing with "tests: N passed, N failed, N skipped";
#   2. every CPU test (suite cpu: the CPU tests' program with the CLI it drives, the C ABI's tests
#      and the ops' conformance) again under AddressSanitizer + UBSan (<build>-sanitize), closing
#      with "sanitized tests: ..."; left out: the GPU backends (the sanitizers do not see into
#      their drivers) and the service (no CPU test drives it; its parsers are fuzzed),
#      memory_accounting (it replaces malloc, as ASan does) and the tests of other languages and
#      programs (bindings, install, serve; docs/RELIABILITY.md says why);
#   3. every libFuzzer target for UOCR_FUZZ_SECONDS (default 30) each (tests/fuzz/run.sh).
# Usage: tools/run_tests.sh [--quick] [build-dir]     --quick: stage 1 only
# The suite needs nothing outside the repository; UOCR_SHARED_DIR=DIR (a folder with golden/tiny-a)
# adds the extra reference case that reads it.
set -uo pipefail
cd "$(dirname "$0")/.."
quick=0
if [[ "${1:-}" == --quick ]]; then
  quick=1
  shift
fi
build=${1:-build}

# setup_build DIR [MESON_OPTION...]: configures DIR, or reconfigures it with the same options.
setup_build() {
  local dir=$1
  shift
  local args=("$@")
  [[ -n "${UOCR_SHARED_DIR:-}" ]] && args+=(-Dshared_dir="$UOCR_SHARED_DIR")
  if [[ -d "$dir" ]]; then
    meson setup --reconfigure "$dir" "${args[@]}" >/dev/null
  else
    meson setup "$dir" "${args[@]}" >/dev/null
  fi
}

# summarize LABEL DIR: doctest's per-binary totals, plus any binary that died before printing
# them (crash, sanitizer report, timeout) counted as one failure.
summarize() {
  local log="$2/meson-logs/testlog.txt"
  [[ -f "$log" ]] || return 0
  local passed failed skipped dead
  read -r passed failed skipped < <(grep -h '^\[doctest\] test cases:' "$log" |
    awk -F'|' '{p+=$2; f+=$3; s+=$4} END {print p+0, f+0, s+0}')
  dead=$(grep -c -E '^ *[0-9]+/[0-9]+ .*(FAIL|TIMEOUT|ERROR) ' "$log")
  echo "$1: $passed passed, $((failed + dead)) failed, $skipped skipped"
}

status=0
setup_build "$build" || exit 1
ninja -C "$build" || exit 1
meson test -C "$build" --print-errorlogs --num-processes 1 || status=1
main_summary=$(summarize tests "$build")
((quick)) && { echo "$main_summary"; exit $status; }

sanitized="$build-sanitize"
export ASAN_OPTIONS=detect_leaks=1:strict_string_checks=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
if setup_build "$sanitized" -Db_sanitize=address,undefined -Doptimization=2 -Ddebug=false -Db_ndebug=false \
  -Dvulkan=disabled -Dcuda=disabled -Dserve=disabled && ninja -C "$sanitized" tools/uocr tests/test_cpu tests/bindings/test_c_api tests/test_conformance; then
  meson test -C "$sanitized" --no-rebuild --print-errorlogs --num-processes 1 --timeout-multiplier 3 --suite cpu ||
    status=1
else
  status=1
fi
sanitized_summary=$(summarize "sanitized tests" "$sanitized")

bash tests/fuzz/run.sh "${UOCR_FUZZ_SECONDS:-30}" || status=1

echo "$main_summary"
echo "$sanitized_summary"
exit $status
