#!/usr/bin/env bash
# The GPU run of the CUDA backend, in one go, on a machine with an NVIDIA GPU and this repository:
# builds the backend (meson + ninja, -Dcuda=enabled), runs its tests on
# the GPU (op conformance, golden parity (tests/data/reference), batching, page groups, SR-SWA, the vision
# encoder, checkpoints / resume), writes a random-weight checkpoint at the REAL dimensions (python/uocr_dev/make_random.py:
# python3 + numpy), times the encoder and the decoder (bench/gpu/cuda_bench.cpp) and prints a
# table last. Budget: 8 minutes.
#
#   bash bench/gpu/run.sh [options]
#     --build-dir DIR   build directory (default: build-gpu)
#     --model-dir DIR   where the random checkpoint goes; reused when its config matches
#                       (default: $TMPDIR/uocr-random-<config name>)
#     --config FILE     model config (default: tests/data/unlimited-ocr/config.json, the real one)
#     --device N        CUDA device index (default 0)
#     --jobs N          build jobs (default: all cores)
#     --quick           shorter timings (smoke run)
#     --skip-build      use the build directory as it is
#     --without-gpu-ok  go on past "no usable GPU" (wait for the checkpoint, start the benchmark,
#                       which then exits 2 with the no-device message): tests this script on a CPU machine
#     --help
# Results: $OUT (default <build-dir>/gpu-results): run.log, test*.log (one per test executable), cuda_bench.json and
# cuda_results.md (the table with the GPU name and date, for docs/PERFORMANCE.md).
# Exit status: 0 done; 2 no usable GPU (the tests ran their no-device checks and skipped the rest);
# 1 a step failed (its log says which). A failing test suite does not stop the run: the other
# suites and the timings still run, and the exit status is 1 at the end.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
build="build-gpu"
model_dir=""
config="$repo/tests/data/unlimited-ocr/config.json"
device=0
jobs="$(nproc 2>/dev/null || echo 4)"
quick=0
skip_build=0
without_gpu_ok=0

die() { echo "run.sh: $*" >&2; exit 1; }
need_value() { [[ $# -ge 2 && -n "$2" ]] || die "$1 needs a value (see --help)"; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build-dir) need_value "$@"; build="$2"; shift 2 ;;
    --model-dir) need_value "$@"; model_dir="$2"; shift 2 ;;
    --config) need_value "$@"; config="$2"; shift 2 ;;
    --device) need_value "$@"; device="$2"; shift 2 ;;
    --jobs) need_value "$@"; jobs="$2"; shift 2 ;;
    --quick) quick=1; shift ;;
    --skip-build) skip_build=1; shift ;;
    --without-gpu-ok) without_gpu_ok=1; shift ;;
    --help|-h) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
done
[[ "$device" =~ ^[0-9]+$ ]] || die "--device must be a number, got '$device'"
[[ "$jobs" =~ ^[1-9][0-9]*$ ]] || die "--jobs must be a positive number, got '$jobs'"
[[ -f "$config" ]] || die "no model config at $config (pass --config)"
cd "$repo"
[[ "$build" = /* ]] || build="$repo/$build"
out="${OUT:-$build/gpu-results}"
mkdir -p "$out"
[[ -n "$model_dir" ]] || model_dir="${TMPDIR:-/tmp}/uocr-random-$(basename "$(dirname "$config")")"
log="$out/run.log"
: > "$log"
start=$(date +%s)
say() { echo "[$(( $(date +%s) - start ))s] $*" | tee -a "$log"; }
# run_step SECONDS NAME CMD...: runs with a time limit, output appended to the log.
run_step() {
  local limit="$1" name="$2"; shift 2
  say "$name"
  local rc=0
  timeout "$limit" "$@" >> "$log" 2>&1 || rc=$?
  [[ $rc -eq 124 ]] && say "$name: timed out after ${limit}s"
  return $rc
}

say "uocr GPU run: repo $repo, build $build, results $out"

# The random-weight checkpoint at the config's dimensions (about 6.7 GB for the real config; one
# Python process, minutes) is written in the background while the build runs.
python3 -c "import numpy" 2> /dev/null || die "make_random.py needs python3 with numpy (e.g. apt install python3-numpy)"
gen_pid=""
stop_generation() {
  if [[ -n "$gen_pid" ]] && kill -0 "$gen_pid" 2> /dev/null; then
    kill "$gen_pid" 2> /dev/null || true
    rm -rf "$model_dir"  # a half-written checkpoint must not be reused
  fi
}
trap stop_generation EXIT
if [[ -f "$model_dir/model.safetensors.index.json" ]] && cmp -s "$config" "$model_dir/config.json"; then
  say "random checkpoint: reusing $model_dir"
else
  rm -rf "$model_dir"
  say "random checkpoint at the dimensions of $config -> $model_dir (background)"
  PYTHONPATH="$repo/python" timeout 420 python3 -m uocr_dev.make_random --out "$model_dir" --config "$config" > "$out/make_random.log" 2>&1 &
  gen_pid=$!
fi
{ command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv; } >> "$log" 2>&1 \
  || say "nvidia-smi not found or failed (no driver?)"

# 1. Build: only the CUDA test and benchmark targets.
if [[ $skip_build -eq 0 ]]; then
  command -v meson > /dev/null && command -v ninja > /dev/null || die "needs meson and ninja"
  if [[ -f "$build/build.ninja" ]]; then
    run_step 60 "configure (existing build dir)" meson configure "$build" -Dcuda=enabled || die "configure failed (see $log)"
  else
    run_step 120 "configure" meson setup "$build" -Dcuda=enabled -Dvulkan=disabled -Dbuildtype=release \
      || die "meson setup failed: is the CUDA toolkit (nvcc, cuBLAS) installed? (see $log)"
  fi
  build_start=$(date +%s)
  run_step 360 "build (ninja -j$jobs)" ninja -C "$build" -j"$jobs" tests/test_conformance tests/test_cuda tests/test_cuda_sparse \
    tests/test_cuda_vision tests/test_cuda_resume tests/test_cuda_graphs backends/cuda/uocr_cuda_bench \
    || die "build failed (see $log)"
  say "build took $(( $(date +%s) - build_start ))s"
fi
for exe in tests/test_conformance tests/test_cuda tests/test_cuda_sparse tests/test_cuda_vision tests/test_cuda_resume \
  tests/test_cuda_graphs backends/cuda/uocr_cuda_bench; do
  [[ -x "$build/$exe" ]] || die "CUDA target $exe missing in $build (build with -Dcuda=enabled)"
done

# 2. Tests on the GPU. Exit 77: no usable GPU (the no-device checks passed, the rest skipped).
# run_tests NAME EXE LOG SECONDS
failed=()
run_tests() {
  say "tests: $1"
  local rc=0
  UOCR_SOURCE_DIR="$repo" timeout "$4" "$2" > "$3" 2>&1 || rc=$?
  tail -n 4 "$3" | tee -a "$log"
  if [[ $rc -eq 77 ]]; then
    say "no usable GPU: $(grep -m1 'GPU cases skipped' "$3" || true)"
    if [[ $without_gpu_ok -eq 0 ]]; then
      say "nothing to time; exiting 2"
      exit 2
    fi
  elif [[ $rc -ne 0 ]]; then
    # Go on: one GPU run should report every failing suite and still time the rest.
    say "FAILED: $1 (exit $rc): see $3"
    failed+=("$1")
  fi
  grep -E "MESSAGE: (cuda|device|page groups|CUDA|G = |engine|[A-Za-z0-9_]+ on cuda:)" "$3" | sed 's/^.*MESSAGE: /  /' | tee -a "$log" || true
}
run_tests "every op, the decoder goldens and input errors on every backend built (CPU, CUDA)" "$build/tests/test_conformance" "$out/test_conformance.log" 300
run_tests "allocator, bf16 tensor cores, argmax, routing ties, batching, page groups, engine" "$build/tests/test_cuda" "$out/test.log" 300
run_tests "SR-SWA against the CPU's" "$build/tests/test_cuda_sparse" "$out/test_sparse.log" 120
run_tests "vision encoder against the CPU's and upstream" "$build/tests/test_cuda_vision" "$out/test_vision.log" 120
run_tests "checkpoints: CUDA -> CUDA, CPU -> CUDA, CUDA -> CPU" "$build/tests/test_cuda_resume" "$out/test_resume.log" 120
run_tests "CUDA graphs: decode steps replayed == eager, bit for bit" "$build/tests/test_cuda_graphs" "$out/test_graphs.log" 120

# 3. The random-weight checkpoint (written meanwhile, see above).
if [[ -n "$gen_pid" ]]; then
  say "waiting for the random checkpoint"
  gen_rc=0
  wait "$gen_pid" || gen_rc=$?
  gen_pid=""
  cat "$out/make_random.log" >> "$log"
  [[ $gen_rc -eq 0 ]] || die "make_random.py failed (exit $gen_rc): $(tail -n 2 "$out/make_random.log")"
  say "random checkpoint written: $(tail -n 1 "$out/make_random.log")"
fi

# 4. Timings.
bench_args=(--model "$model_dir" --device "$device" --json "$out/cuda_bench.json")
[[ $quick -eq 1 ]] && bench_args+=(--decode 64 --batch 16 --batch-steps 16 --long 256)
say "benchmark: uocr_cuda_bench ${bench_args[*]}"
bench_rc=0
timeout 300 "$build/backends/cuda/uocr_cuda_bench" "${bench_args[@]}" > "$out/bench.log" 2>&1 || bench_rc=$?
cat "$out/bench.log" >> "$log"
if [[ $bench_rc -eq 2 ]]; then
  say "no usable GPU for the benchmark: $(tail -n 1 "$out/bench.log")"
  exit 2
fi
[[ $bench_rc -eq 0 ]] || die "benchmark failed (exit $bench_rc): $(tail -n 3 "$out/bench.log")"

# 5. The table, last (also as markdown for docs/PERFORMANCE.md).
{
  echo "## CUDA backend on $(head -n 1 "$out/bench.log" | sed 's/^uocr_cuda_bench on //; s/:.*$//'), $(date -u +%Y-%m-%d)"
  echo
  echo "Random weights at the dimensions of $(basename "$(dirname "$config")")/config.json; \`bash bench/gpu/run.sh\` ($(( $(date +%s) - start )) s in all)."
  echo "Continuous batching: decode_batch_greedy steps any set of sequences together (one KV cache each)."
  echo
  sed -n '/^| measurement/,$p' "$out/bench.log"
} > "$out/cuda_results.md"
say "done in $(( $(date +%s) - start ))s; results in $out"
echo
cat "$out/cuda_results.md"
if [[ ${#failed[@]} -gt 0 ]]; then
  say "test suites that FAILED: ${failed[*]}"
  exit 1
fi
