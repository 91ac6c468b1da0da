#!/usr/bin/env python3
"""Averages the weights of model folders fine-tuned from one starting point ("model soup").

Runs that start from the same model and see different pages end in one basin of the loss; their
mean can read better than each of them (docs/TRAINING.md §7: the shipped yuzv = y + u + z + v).
Every folder must hold the same tensors (names, shapes); the output is a model folder in the
published layout: the first folder's files with the averaged BF16 weights, the index, and
training.json naming the sources.

    python3 tools/train/average.py --out /tmp/soup models/uocr-demo /tmp/model-u /tmp/model-z
"""
import argparse
import json
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import st_io  # noqa: E402
from st_io import SHARD  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folders", nargs="+", help="model folders (config.json, " + SHARD + ")")
    ap.add_argument("--out", required=True)
    ap.add_argument("--info", default="{}", help="JSON merged into training.json")
    a = ap.parse_args()
    if len(a.folders) < 2:
        raise SystemExit("average.py: give at least two model folders")
    if os.path.abspath(a.out) in (os.path.abspath(f) for f in a.folders):
        raise SystemExit("average.py: --out must be a new folder, not one of the sources")
    weights = [st_io.read(os.path.join(f, SHARD)) for f in a.folders]
    first = weights[0]
    for f, w in zip(a.folders[1:], weights[1:]):
        if sorted(w) != sorted(first) or any(w[n].shape != first[n].shape for n in first):
            raise SystemExit(f"average.py: {f} does not hold the tensors of {a.folders[0]}")
    mean = {n: sum(w[n] for w in weights) / len(weights) for n in first}

    shutil.rmtree(a.out, ignore_errors=True)
    shutil.copytree(a.folders[0], a.out)
    st_io.write_model_weights(a.out, mean)
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
