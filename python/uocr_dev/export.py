"""Exports a training checkpoint as a model folder in the published Unlimited-OCR layout.

Writes into --out (default models/uocr-demo/):
  config.json                          upstream key layout, model_type "unlimited-ocr", our sizes,
                                       vision_config.image_size, sliding_window_size/sliding_window
  model-00001-of-000001.safetensors    every tensor in BF16, upstream names, sorted
  model.safetensors.index.json         {"metadata": {"total_size"}, "weight_map"}
  processor_config.json                the published one with this model's page size
  tokenizer.json, tokenizer_config.json, special_tokens_map.json   (copied from --tokenizer-dir
                                       when it is not --out itself)
  training.json                        where the weights came from (step, pages, CER, CPU hours)

The exported tensor set is checked against uocr_dev.make_random's tensor_list(config)
(with the SAM pos_embed / global rel-pos sizes that uocr's loader derives from image_size).

    python3 -m uocr_dev.export --ckpt /tmp/uocr-train/best.pt
"""
import argparse
import json
import os
import shutil

import torch

from uocr_dev import ROOT, safetensors_io
from uocr_dev.model import UnlimitedOCR, check_tensor_set
from uocr_dev.safetensors_io import SHARD

REAL = os.path.join(ROOT, "tests", "data", "unlimited-ocr")
DEMO = os.path.join(ROOT, "models", "uocr-demo")


def processor_config(image_size):
    path = os.path.join(REAL, "processor_config.json")
    if os.path.exists(path):
        with open(path) as f:
            p = json.load(f)
    else:
        p = {"add_special_token": False, "downsample_ratio": 4, "ignore_id": -100, "image_mean": [0.5] * 3,
             "image_std": [0.5] * 3, "image_token": "<image>", "mask_prompt": False, "normalize": True,
             "pad_token": "<｜▁pad▁｜>", "patch_size": 16, "processor_class": "UnlimitedOCRHFProcessor",
             "sft_format": "unlimitedocr"}
    p["candidate_resolutions"] = [[image_size, image_size]]
    return p


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ckpt", required=True)
    ap.add_argument("--out", default=DEMO)
    ap.add_argument("--tokenizer-dir", default=DEMO)
    ap.add_argument("--info", default="{}", help="JSON merged into training.json")
    a = ap.parse_args()
    ck = torch.load(a.ckpt, map_location="cpu", weights_only=False)
    cfg = ck["config"]
    model = UnlimitedOCR(cfg)
    model.load_state_dict(ck["model"])
    missing, extra, bad, notes = check_tensor_set(model, cfg)
    if missing or extra or bad:
        raise SystemExit(f"tensor set differs from tensor_list(config): missing {missing} extra {extra} shapes {bad}")
    sd = model.export_state_dict()
    os.makedirs(a.out, exist_ok=True)
    safetensors_io.write_model_weights(a.out, sd)
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    with open(os.path.join(a.out, "processor_config.json"), "w") as f:
        json.dump(processor_config(model.d.image_size), f, indent=2, ensure_ascii=False)
    if os.path.abspath(a.tokenizer_dir) != os.path.abspath(a.out):
        for n in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
            shutil.copy(os.path.join(a.tokenizer_dir, n), os.path.join(a.out, n))
    info = {"source_checkpoint": os.path.basename(a.ckpt), "step": ck.get("step")}
    if "rec" in ck:
        info.update(ck["rec"])
    info.update(json.loads(a.info))
    info["parameters"] = sum(v.numel() for v in sd.values())
    info["tensors"] = len(sd)
    with open(os.path.join(a.out, "training.json"), "w") as f:
        json.dump(info, f, indent=2)
    # reload and compare: the file must give back the bf16-rounded weights exactly
    back = safetensors_io.read(os.path.join(a.out, SHARD))
    assert sorted(back) == sorted(sd)
    for n, v in sd.items():
        assert torch.equal(back[n], safetensors_io.bf16_round(v)), n
    size = os.path.getsize(os.path.join(a.out, SHARD))
    print(f"{a.out}: {len(sd)} tensors, {info['parameters']:,} parameters, {size / 1e6:.2f} MB; "
          f"tensor set = tensor_list(config){' (' + '; '.join(notes) + ')' if notes else ''}")


if __name__ == "__main__":
    main()
