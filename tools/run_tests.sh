#!/usr/bin/env bash
# Builds uocr and runs the whole test suite; prints a closing "N passed, N failed" line.
# Usage: tools/run_tests.sh [build-dir]
# The suite needs nothing outside the repository; UOCR_SHARED_DIR=DIR (a folder with golden/tiny-a)
# adds the extra reference case that reads it.
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
setup_args=()
[[ -n "${UOCR_SHARED_DIR:-}" ]] && setup_args+=(-Dshared_dir="$UOCR_SHARED_DIR")
if [[ -d "$build" ]]; then
  meson setup --reconfigure "$build" "${setup_args[@]}" >/dev/null || exit 1
else
  meson setup "$build" "${setup_args[@]}" >/dev/null || exit 1
fi
ninja -C "$build" || exit 1
meson test -C "$build" --print-errorlogs --num-processes 1
status=$?
# Closing line in test cases: doctest's per-binary totals, plus any binary that died before
# printing them (crash, timeout) counted as one failure.
log="$build/meson-logs/testlog.txt"
if [[ -f "$log" ]]; then
  read -r passed failed skipped < <(grep -h '^\[doctest\] test cases:' "$log" |
    awk -F'|' '{p+=$2; f+=$3; s+=$4} END {print p+0, f+0, s+0}')
  dead=$(grep -c -E '^ *[0-9]+/[0-9]+ .*(FAIL|TIMEOUT|ERROR) ' "$log")
  echo "tests: $passed passed, $((failed + dead)) failed, $skipped skipped"
fi
exit $status
