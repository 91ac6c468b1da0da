"""Averages the weights of model folders fine-tuned from one starting point ("model soup").

Runs that start from the same model and see different pages end in one basin of the loss; their
mean can read better than each of them (docs/TRAINING.md §7: yuzv = y + u + z + v; the shipped kl = k + l).
Every folder must hold the same tensors (names, shapes); the output is a model folder in the
published layout: the first folder's files with the averaged BF16 weights, the index, and
training.json naming the sources.

    python3 -m uocr_dev.average --out /tmp/soup models/uocr-demo /tmp/model-u /tmp/model-z

Given training checkpoints instead (ckpt.pt files of train.py), it averages their model and
aux-head tensors and writes a checkpoint without optimizer state, the rest from the last source:
a start for `train.py --init-from` that keeps the trained aux heads (run m, §7).

    python3 -m uocr_dev.average --out /tmp/kl.pt /tmp/uocr-train-k/ckpt.pt /tmp/uocr-train-l/ckpt.pt
"""
import argparse
import json
import os
import shutil

from uocr_dev import safetensors_io
from uocr_dev.safetensors_io import SHARD


def mean_of(states, sources):
    """Elementwise mean of tensor dicts that must hold the same names and shapes."""
    first = states[0]
    for src, s in zip(sources[1:], states[1:]):
        if sorted(s) != sorted(first) or any(s[n].shape != first[n].shape for n in first):
            raise SystemExit(f"average.py: {src} does not hold the tensors of {sources[0]}")
    return {n: (sum(s[n].float() for s in states) / len(states)).to(first[n].dtype) for n in first}


def average_checkpoints(paths, out):
    import torch
    ckpts = [torch.load(p, map_location="cpu", weights_only=False) for p in paths]
    merged = {k: v for k, v in ckpts[-1].items() if k != "opt"}
    for part in ("model", "aux"):
        merged[part] = mean_of([c[part] for c in ckpts], paths)
    torch.save(merged, out)
    print(f"{out}: mean of {len(ckpts)} checkpoints, {len(merged['model'])} model tensors")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folders", nargs="+", help="model folders (config.json, " + SHARD + "), or train.py checkpoints")
    ap.add_argument("--out", required=True)
    ap.add_argument("--info", default="{}", help="JSON merged into training.json")
    a = ap.parse_args()
    if len(a.folders) < 2:
        raise SystemExit("average.py: give at least two model folders or checkpoints")
    if os.path.abspath(a.out) in (os.path.abspath(f) for f in a.folders):
        raise SystemExit("average.py: --out must be a new folder, not one of the sources")
    files = [os.path.isfile(f) for f in a.folders]
    if any(files) and not all(files):
        raise SystemExit("average.py: give model folders or training checkpoints, not both")
    if all(files):
        return average_checkpoints(a.folders, a.out)
    weights = [safetensors_io.read(os.path.join(f, SHARD)) for f in a.folders]
    mean = mean_of(weights, a.folders)

    shutil.rmtree(a.out, ignore_errors=True)
    shutil.copytree(a.folders[0], a.out)
    safetensors_io.write_model_weights(a.out, mean)
    info = {"average_of": [os.path.normpath(f) for f in a.folders]}
    for k, f in enumerate(a.folders):
        path = os.path.join(f, "training.json")
        if os.path.exists(path):
            with open(path) as t:
                info[f"source_{k}"] = json.load(t)
    info.update(json.loads(a.info))
    with open(os.path.join(a.out, "training.json"), "w") as f:
        json.dump(info, f, indent=2)
    print(f"{a.out}: mean of {len(weights)} models, {len(mean)} tensors")


if __name__ == "__main__":
    main()
