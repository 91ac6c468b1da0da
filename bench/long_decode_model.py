#!/usr/bin/env python3
"""Writes the random-weight model bench/long_decode runs on (about 1 GB, never committed).

The published Unlimited-OCR config with the decoder's attention exactly as published (hidden
1280, 10 heads and 10 KV heads of 128, so a token's K+V per layer is the real 10,240 bytes), the
real vocabulary (129,280: the lm_head is a real-size read every step) and the MoE with its real
expert shape and top-6 routing, but 4 layers instead of 12 and 8 routed experts instead of 64, so
that 32k tokens of full-attention KV fit in memory (1.3 GB instead of 4 GB) and the model is
quick to write. The vision encoder is cut to a few MB: the benchmark feeds the decoder random
visual embeddings and never runs it. Weights are written by python/uocr_dev/make_random.py.

    python3 bench/long_decode_model.py --out /tmp/uocr-long
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

DECODER = {"num_hidden_layers": 4, "n_routed_experts": 8}
# Sizes of the vision tower only (binding needs every tensor; the benchmark never runs it).
VISION = {
    "sam_vit_b": {"downsample_channels": [32, 48], "global_attn_indexes": [1], "heads": 3, "layers": 3, "width": 48,
                  "out_chans": 24, "window_size": 14},
    "clip-l-14-224": {"heads": 3, "image_size": 224, "layers": 2, "patch_size": 14, "width": 48,
                      "ffn_hidden_size": 80},
}
PROJECTOR_INPUT = 96  # CLIP width 48 + SAM net_3 channels 48


def reduced_config(published):
    cfg = json.loads(json.dumps(published))
    for section in (cfg, cfg.get("language_config", {})):
        section.update(DECODER)
    for name, sizes in VISION.items():
        cfg["vision_config"]["width"][name].update(sizes)
    cfg["projector_config"]["input_dim"] = PROJECTOR_INPUT
    cfg["_name_or_path"] = "bench/long_decode_model.py (random weights: published decoder attention and vocab, " \
                           "4 layers, 8 routed experts)"
    return cfg


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--config", default=os.path.join(ROOT, "tests", "data", "unlimited-ocr", "config.json"),
                    help="the published config.json (its folder also supplies the tokenizer files)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    with open(args.config) as f:
        cfg = reduced_config(json.load(f))
    # make_random.py copies the tokenizer files from the config's folder: keep the config beside them.
    src_dir = os.path.dirname(os.path.abspath(args.config))
    with tempfile.TemporaryDirectory() as tmp:
        for name in os.listdir(src_dir):
            if name != "config.json":
                os.symlink(os.path.join(src_dir, name), os.path.join(tmp, name))
        path = os.path.join(tmp, "config.json")
        with open(path, "w") as f:
            json.dump(cfg, f, indent=2)
        cmd = [sys.executable, "-m", "uocr_dev.make_random", "--out", args.out, "--config", path, "--seed", str(args.seed)]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [os.path.join(ROOT, "python"),
                                                                        os.environ.get("PYTHONPATH")])))
        subprocess.run(cmd, check=True, env=env)


if __name__ == "__main__":
    main()
