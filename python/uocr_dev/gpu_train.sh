#!/usr/bin/env bash
# Trains the demo model for a fixed time on an NVIDIA GPU (a rented or lent machine, minutes to
# hours), starting from a checkpoint, and leaves in OUT what is worth copying back before the
# machine goes: the exported model folder, the model + aux-head weights to start the next run
# from (no optimizer state), and the log. python/uocr_dev/train.py does the training.
#
#   bash python/uocr_dev/gpu_train.sh --init CKPT --minutes M [options] [-- more train.py options]
#     --init CKPT       a training checkpoint (ckpt.pt, best.pt, or the slim.pt this script
#                       wrote): its matching tensors and aux heads start the run; or a model
#                       folder (models/uocr-demo): its weights, the training-only heads afresh
#     --minutes M       training time; start-up, the final checkpoint and the export add ~1.5 min
#     --out DIR         results (default: $OUT, else /tmp/uocr-gpu-train)
#     --level L         curriculum level to train at (default 2)
#     --workers N       page-rendering processes (default: cores - 2)
#     --batch-pages B   pages per step (default 96)
#     --reuse K         train on each rendered batch up to K times while the render workers are
#                       behind the GPU (default 4; 1: every step on fresh pages)
#     --part-mb N       split slim.pt into parts of N MB for machines that return files of
#                       limited size (default 0: one file); restore with cat slim.pt.part-* > slim.pt
#     --device D        cuda (default) or cpu (to try this script on a CPU machine)
#     --data-root DIR   where the fonts, word list and licence texts are (UOCR_TRAIN_DATA_ROOT,
#                       python/uocr_dev/data.py); needed where the Debian packages are not installed
#     --help
# Results in OUT: model/ (export.py's folder, what models/uocr-demo holds), slim.pt (or its
# parts), train.log. Needs python3 with torch, numpy and Pillow.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export PYTHONPATH="$(dirname "$here")${PYTHONPATH:+:$PYTHONPATH}"  # python/: python3 -m uocr_dev.* below
init=""
minutes=""
out="${OUT:-/tmp/uocr-gpu-train}"
level=2
workers=$(( $(nproc 2> /dev/null || echo 4) - 2 ))
batch=96
reuse=4
part_mb=0
device=cuda
extra=()

die() { echo "gpu_train.sh: $*" >&2; exit 1; }
need_value() { [[ $# -ge 2 && -n "$2" ]] || die "$1 needs a value (see --help)"; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --init) need_value "$@"; init="$2"; shift 2 ;;
    --minutes) need_value "$@"; minutes="$2"; shift 2 ;;
    --out) need_value "$@"; out="$2"; shift 2 ;;
    --level) need_value "$@"; level="$2"; shift 2 ;;
    --workers) need_value "$@"; workers="$2"; shift 2 ;;
    --batch-pages) need_value "$@"; batch="$2"; shift 2 ;;
    --reuse) need_value "$@"; reuse="$2"; shift 2 ;;
    --part-mb) need_value "$@"; part_mb="$2"; shift 2 ;;
    --device) need_value "$@"; device="$2"; shift 2 ;;
    --data-root) need_value "$@"; export UOCR_TRAIN_DATA_ROOT="$2"; shift 2 ;;
    --help|-h) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    --) shift; extra=("$@"); break ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
done
[[ -f "$init" || -f "$init/config.json" ]] || die "--init needs a checkpoint file or a model folder (got '$init')"
[[ "$minutes" =~ ^[0-9]+([.][0-9]+)?$ ]] || die "--minutes must be a number, got '$minutes'"
[[ "$level" =~ ^[0-4]$ ]] || die "--level must be 0..4, got '$level'"
[[ "$workers" =~ ^[0-9]+$ ]] || die "--workers must be a number, got '$workers'"
[[ "$batch" =~ ^[1-9][0-9]*$ ]] || die "--batch-pages must be a positive number, got '$batch'"
[[ "$reuse" =~ ^[1-9][0-9]*$ ]] || die "--reuse must be a positive number, got '$reuse'"
[[ "$part_mb" =~ ^[0-9]+$ ]] || die "--part-mb must be a number, got '$part_mb'"
if [[ "$device" == cuda ]]; then
  python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" \
    || die "torch sees no CUDA device (use --device cpu to try the script without one)"
fi

mkdir -p "$out"
work="$(mktemp -d "${TMPDIR:-/tmp}/uocr-gpu-train.XXXXXX")"
log="$out/train.log"
hours=$(python3 -c "print($minutes / 60)")
echo "gpu_train.sh: $minutes min on $device from $init, level $level, $workers render workers, $batch pages a step, each batch up to $reuse times" | tee "$log"
# Evaluations (held-out CER, best.pt) about three times a run; the learning rate's cosine runs
# over the wall time, so it has decayed when the time is up and the final checkpoint is written.
eval_min=$(python3 -c "print(max(0.5, $minutes / 3))")
python3 -m uocr_dev.train --out "$work" --init-from "$init" --device "$device" --workers "$workers" \
  --batch-pages "$batch" --level "$level" --max-hours "$hours" --schedule time --reuse "$reuse" --eval-min "$eval_min" --ckpt-min 1e9 \
  ${extra[@]+"${extra[@]}"} >> "$log" 2>&1 || die "train.py failed: $(tail -n 3 "$log")"

python3 -m uocr_dev.export --ckpt "$work/ckpt.pt" --out "$out/model" \
  --info "{\"gpu_train_minutes\": $minutes, \"device\": \"$device\"}" >> "$log" 2>&1 || die "export failed: $(tail -n 3 "$log")"
python3 -m uocr_dev.slim "$work/ckpt.pt" "$out/slim.pt" >> "$log" 2>&1 || die "slim checkpoint failed: $(tail -n 3 "$log")"
if [[ "$part_mb" -gt 0 && $(stat -c %s "$out/slim.pt") -gt $(( part_mb * 1000000 )) ]]; then
  split -b "${part_mb}000000" "$out/slim.pt" "$out/slim.pt.part-"
  rm "$out/slim.pt"
fi
rm -rf "$work"
grep -E "^EVAL|^stopped|slim checkpoint" "$log" | tail -n 5
echo "gpu_train.sh: done; results in $out: $(ls "$out" | tr '\n' ' ')"
