"""Writes a training checkpoint without its optimizer state: model + aux-head weights, step,
curriculum level and history (~20 MB instead of ~57 MB). It starts a new run through
`train.py --init-from` (python/uocr_dev/gpu_train.sh's --init): small enough to carry to a rented GPU
and back.

    python3 -m uocr_dev.slim /tmp/uocr-train/ckpt.pt /tmp/slim.pt
"""
import sys

import torch

KEEP = ("config", "model", "aux", "step", "level", "pages_seen", "history", "best")


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    c = torch.load(sys.argv[1], map_location="cpu", weights_only=False)
    missing = [k for k in ("config", "model") if k not in c]
    if missing:
        sys.exit(f"{sys.argv[1]}: not a training checkpoint (no {', '.join(missing)})")
    torch.save({k: c[k] for k in KEEP if k in c}, sys.argv[2])
    print(f"slim checkpoint: step {c.get('step')}, level {c.get('level')}, {c.get('pages_seen')} pages"
          f"{'' if 'aux' in c else ', no aux heads'} -> {sys.argv[2]}")


if __name__ == "__main__":
    main()
