#!/usr/bin/env bash
# libFuzzer runs of uocr's parsers of untrusted input (tests/fuzz/targets.hpp):
#
#   tests/fuzz/run.sh [SECONDS-PER-TARGET] [TARGET...]    (default: 60 s, every target)
#
# Builds the fuzz program with clang (libFuzzer, ASan, UBSan) into build-fuzz/, again only when a
# file it includes changed, then runs each target (build-fuzz/fuzz_TARGET, a link to the program)
# for SECONDS (UOCR_FUZZ_JOBS targets at a time, default 2) on a copy of tests/fuzz/corpus/TARGET/ and
# tests/fuzz/regressions/TARGET/ (the committed files never change). Prints per target the inputs
# run, the new corpus units and the seconds taken. Exits 1 when a run finds a crash, leak, UB,
# timeout, out-of-memory or an exception that is not a refusal, naming the target and the input
# (kept in build-fuzz/findings/TARGET/). Once fixed, commit that input to
# tests/fuzz/regressions/TARGET/: tests/test_fuzz_corpus.cpp replays it in every build.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
seconds=${1:-60}
[[ $seconds =~ ^[0-9]+$ && $seconds -gt 0 ]] || { echo "usage: $0 [SECONDS-PER-TARGET] [TARGET...]" >&2; exit 2; }
shift $(($# > 0 ? 1 : 0))
requested=("$@")

out=build-fuzz
mkdir -p "$out"
CXX=${CXX:-clang++}
CC=${CC:-clang}
sanitize=(-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
read -r -a deps_flags <<<"$(pkg-config --cflags eigen3 nlohmann_json stb)"
# The service's HTTP request target, where cpp-httplib is installed (as uocr serve is built).
serve_flags=()
if pkg-config --exists cpp-httplib; then
  read -r -a serve_flags <<<"-DUOCR_CLI_SERVE $(pkg-config --cflags --libs cpp-httplib)"
fi

# True when $1 is missing or older than this script, than a file its depfile $2 lists or than
# any further argument.
stale() {
  [[ -e $1 && -e $2 && ! $0 -nt $1 ]] || return 0
  local f
  for f in $(sed -e 's/\\$//' -e 's/^[^:]*://' "$2") "${@:3}"; do
    [[ $f -nt $1 ]] && return 0
  done
  return 1
}

# stb_image compiled in, instrumented, so that the fuzzer follows its decoders and finds their
# memory errors (ASan, and UBSan's array bounds); the library builds link the system's copy of the
# same source. UBSan's other checks are off there: they flag stb's own arithmetic (a signed
# overflow in PNM headers, null + 0 in PNG), which a copy we do not build cannot fix. libjpeg is
# the system's.
stb=$out/stb_image.o
if stale "$stb" "$out/stb_image.d"; then
  printf '#define STB_IMAGE_IMPLEMENTATION\n#include <stb_image.h>\n' >"$out/stb_image.c"
  nice "$CC" -O1 -g -fsanitize=fuzzer-no-link,address,bounds -fno-sanitize-recover=bounds -fno-omit-frame-pointer \
    "${deps_flags[@]}" -MMD -MF "$out/stb_image.d" -c "$out/stb_image.c" -o "$stb"
fi

# Coverage feedback from our parsers, not from the arithmetic of Eigen, the vision encoder, the
# backends, checksums or the standard library (tracing every comparison there made the checkpoint
# target several times slower).
ignore=$out/coverage_ignore.txt
ignored=$(printf '%s\n' 'src:*/eigen3/*' 'src:*include/uocr/vision/*' 'src:*include/uocr/backends/*' 'src:*/include/c\+\+/*' \
  'fun:*Fnv64*')
[[ -e $ignore && $(<"$ignore") == "$ignored" ]] || echo "$ignored" >"$ignore"

# One program for every target (fuzzer.cpp), run as fuzz_<target>: the parsers compile once.
program=$out/uocr_fuzz
build_start=$SECONDS
if stale "$program" "$program.d" "$stb"; then
  nice "$CXX" -std=c++17 -O1 -g -fsanitize=fuzzer "${sanitize[@]}" -fsanitize-coverage-ignorelist="$ignore" \
    -Iinclude "${deps_flags[@]}" -DUOCR_HAVE_LIBJPEG -MMD -MF "$program.d" tests/fuzz/fuzzer.cpp "$stb" "${serve_flags[@]}" -ljpeg -lpthread \
    -o "$program" || { rm -f "$program"; echo "building the fuzz program failed" >&2; exit 1; }
fi
echo "build: $((SECONDS - build_start)) s"
mapfile -t all < <("$program" --targets)
targets=("${requested[@]}")
[[ ${#targets[@]} -gt 0 ]] || targets=("${all[@]}")
for t in "${targets[@]}"; do
  [[ " ${all[*]} " == *" $t "* ]] || { echo "unknown target '$t' (targets: ${all[*]})" >&2; exit 2; }
  ln -sf uocr_fuzz "$out/fuzz_$t"
done

# run_target TARGET: one libFuzzer run; its exit status and seconds go to its work folder.
run_target() {
  local t=$1 work=$out/work/$1 findings=$out/findings/$1 start=$SECONDS rc=0 kind
  rm -rf "$work" "$findings"
  mkdir -p "$work/corpus" "$work/tmp" "$findings"
  for kind in corpus regressions; do
    if [[ -d tests/fuzz/$kind/$t ]]; then cp -R "tests/fuzz/$kind/$t/." "$work/corpus/"; fi
  done
  # The scratch files of the targets (TMPDIR) stay inside build-fuzz; the outer timeout only
  # catches a hung process (start-up, final statistics), libFuzzer's own limits come first.
  UOCR_SOURCE_DIR=$root TMPDIR=$root/$work/tmp timeout -k 10 $((seconds + 300)) "$out/fuzz_$t" \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$findings/" "$work/corpus" >"$work/log" 2>&1 || rc=$?
  echo "$rc $((SECONDS - start))" >"$work/result"
}

# Two at a time (CI's machine has two cores): libFuzzer runs one process, and the limits hold per
# target.
jobs=${UOCR_FUZZ_JOBS:-2}
run_start=$SECONDS
for t in "${targets[@]}"; do
  run_target "$t" &
  while (($(jobs -rp | wc -l) >= jobs)); do wait -n || true; done
done
wait
run_seconds=$((SECONDS - run_start))

failed=()
printf '%-16s %12s %10s %8s\n' target execs new-units seconds
for t in "${targets[@]}"; do
  work=$out/work/$t
  findings=$out/findings/$t
  read -r rc elapsed <"$work/result"
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log")
  added=$(sed -n 's/^stat::new_units_added: *//p' "$work/log")
  printf '%-16s %12s %10s %8s\n' "$t" "${execs:-?}" "${added:-?}" "$elapsed"
  if [[ $rc -ne 0 ]]; then
    finding=$(ls -t "$findings" | head -n 1)
    echo "FINDING in $t (exit $rc): ${finding:+$findings/$finding} (log: $work/log)"
    grep -E -A 30 '^==[0-9]+==ERROR|runtime error|terminate called|SUMMARY|deadly signal|timeout after|out-of-memory' \
      "$work/log" | head -n 60 || tail -n 40 "$work/log"
    failed+=("$t")
  fi
done
echo "run: ${run_seconds} s"
if [[ ${#failed[@]} -gt 0 ]]; then
  echo "fuzzing found something in: ${failed[*]}" >&2
  exit 1
fi
