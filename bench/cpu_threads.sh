#!/usr/bin/env bash
# CPU thread scaling: one page through `uocr run --stats json` with OMP_NUM_THREADS = each count
# given, the counts interleaved over the repeats (noisy machines), and a table of the medians:
# vision, prefill, decode seconds and decode tokens/s, with the speedup over the first count.
#
#   bash bench/cpu_threads.sh [--uocr PATH] [--tokens N] [--repeats R] [--precision f32|bf16] \
#       MODEL_DIR PAGE THREADS...
#   e.g. bash bench/cpu_threads.sh /tmp/uocr-real samples/data/demo-page1.png 1 2
#        bash bench/cpu_threads.sh /tmp/uocr-real samples/data/demo-page1.png 1 2 4 8 16   # a 16-core machine
#
# MODEL_DIR: the real dimensions come from `python3 -m uocr_dev.make_random --out DIR`
# (docs/PERFORMANCE.md). Greedy, --max-tokens N (default 64); the runs must write the same text
# (the script fails otherwise: the thread count must not change the output).
set -euo pipefail

uocr="build/tools/uocr"
tokens=64
repeats=2
precision=f32
die() { echo "cpu_threads.sh: $*" >&2; exit 1; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --uocr) uocr="$2"; shift 2 ;;
    --tokens) tokens="$2"; shift 2 ;;
    --repeats) repeats="$2"; shift 2 ;;
    --precision) precision="$2"; shift 2 ;;
    --help|-h) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) die "unknown option '$1' (see --help)" ;;
    *) break ;;
  esac
done
[[ $# -ge 3 ]] || die "needs MODEL_DIR PAGE and at least one thread count (see --help)"
model="$1" page="$2"
shift 2
threads=("$@")
for t in "${threads[@]}"; do [[ "$t" =~ ^[1-9][0-9]*$ ]] || die "thread counts are positive numbers, got '$t'"; done
[[ -x "$uocr" ]] || die "no uocr binary at $uocr (build it, or pass --uocr)"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
for ((r = 0; r < repeats; r++)); do
  for t in "${threads[@]}"; do
    rc=0
    OMP_NUM_THREADS="$t" OMP_WAIT_POLICY=passive "$uocr" run --model "$model" --max-tokens "$tokens" \
      --precision "$precision" --draft off --stats json --quiet -o "$work/out-$t-$r.md" "$page" > "$work/stats-$t-$r.json" 2>&1 ||
      rc=$?
    # 3: stopped at --max-tokens (or the context), as asked
    [[ $rc -eq 0 || $rc -eq 3 ]] || die "the run with $t threads failed (exit $rc): $(tail -3 "$work/stats-$t-$r.json")"
    cmp -s "$work/out-${threads[0]}-0.md" "$work/out-$t-$r.md" || die "$t threads wrote another text than ${threads[0]}"
  done
done

python3 - "$work" "$repeats" "${threads[@]}" <<'EOF'
import json, statistics, sys
work, repeats, threads = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
def stats(t):
    runs = []
    for r in range(repeats):
        with open("%s/stats-%s-%d.json" % (work, t, r)) as f:
            runs.append(next(json.loads(line) for line in f if line.startswith("{")))
    return {k: statistics.median(run[k] for run in runs)
            for k in ("vision_seconds", "prefill_seconds", "decode_seconds", "decode_tokens_per_second")}
rows = {t: stats(t) for t in threads}
base = rows[threads[0]]
print("| threads | vision s | prefill s | decode s | decode tok/s | speedup vision / prefill / decode |")
print("| ---: | ---: | ---: | ---: | ---: | --- |")
for t in threads:
    s = rows[t]
    print("| %s | %.2f | %.2f | %.2f | %.1f | %.2fx / %.2fx / %.2fx |" % (
        t, s["vision_seconds"], s["prefill_seconds"], s["decode_seconds"], s["decode_tokens_per_second"],
        base["vision_seconds"] / s["vision_seconds"], base["prefill_seconds"] / s["prefill_seconds"],
        base["decode_seconds"] / s["decode_seconds"]))
EOF
