"""Writes a random-weight model folder in the published Unlimited-OCR layout.

Used to exercise uocr at the REAL dimensions (6.7 GB, never committed) or at any reduced size:
config.json is copied from --config (default: the published one), every tensor the architecture
defines is written as BF16 into one safetensors shard plus model.safetensors.index.json, and the
tokenizer files are copied alongside. The tensor list is derived here independently of the C++
loader, so loading the result checks uocr's names and shapes against the published totals
(2710 tensors, 3,336,106,240 parameters for the real config).

    python3 -m uocr_dev.make_random --out /tmp/uocr-real            # real dimensions
    python3 -m uocr_dev.make_random --out DIR --config other/config.json --seed 7

(from the repository root, with PYTHONPATH=python; needs numpy only)
"""
import argparse
import json
import os
import shutil
import sys
from functools import partial

import numpy as np

from uocr_dev import ROOT, safetensors_io

TOKENIZER_FILES = ["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "processor_config.json"]


def tensor_list(cfg):
    """(name, shape, init) for every tensor, init in {'normal', 'one', 'bias', 'relpos', 'pos', 'linear'}."""
    vw = cfg.get("vision_config", {}).get("width", {})
    sam = vw.get("sam_vit_b", {})
    clip = vw.get("clip-l-14-224", {})
    sw, sl, sh = sam.get("width", 768), sam.get("layers", 12), sam.get("heads", 12)
    window = sam.get("window_size", 14)
    glob = set(sam.get("global_attn_indexes", [2, 5, 8, 11]))
    neck = sam.get("out_chans", 256)
    c2, c3 = sam.get("downsample_channels", [512, 1024])
    cw, cl = clip.get("width", 1024), clip.get("layers", 24)
    cffn = clip.get("ffn_hidden_size", 4096)
    cpos = (clip.get("image_size", 224) // clip.get("patch_size", 14)) ** 2 + 1
    cpatch = clip.get("patch_size", 14)
    grid = 1024 // 16
    proj = cfg.get("projector_config", {})
    h = cfg["hidden_size"]
    heads = cfg["num_attention_heads"]
    kvh = cfg.get("num_key_value_heads", heads)
    hd = h // heads
    vocab = cfg["vocab_size"]
    out = []
    t = out.append
    p = "model.sam_model."
    t((p + "patch_embed.proj.weight", [sw, 3, 16, 16], "linear"))
    t((p + "patch_embed.proj.bias", [sw], "bias"))
    t((p + "pos_embed", [1, grid, grid, sw], "pos"))
    for b in range(sl):
        q = p + f"blocks.{b}."
        span = grid if b in glob else window
        t((q + "norm1.weight", [sw], "one")); t((q + "norm1.bias", [sw], "bias"))
        t((q + "norm2.weight", [sw], "one")); t((q + "norm2.bias", [sw], "bias"))
        t((q + "attn.qkv.weight", [3 * sw, sw], "linear")); t((q + "attn.qkv.bias", [3 * sw], "bias"))
        t((q + "attn.proj.weight", [sw, sw], "linear")); t((q + "attn.proj.bias", [sw], "bias"))
        t((q + "attn.rel_pos_h", [2 * span - 1, sw // sh], "relpos"))
        t((q + "attn.rel_pos_w", [2 * span - 1, sw // sh], "relpos"))
        t((q + "mlp.lin1.weight", [4 * sw, sw], "linear")); t((q + "mlp.lin1.bias", [4 * sw], "bias"))
        t((q + "mlp.lin2.weight", [sw, 4 * sw], "linear")); t((q + "mlp.lin2.bias", [sw], "bias"))
    t((p + "neck.0.weight", [neck, sw, 1, 1], "linear"))
    t((p + "neck.1.weight", [neck], "one")); t((p + "neck.1.bias", [neck], "bias"))
    t((p + "neck.2.weight", [neck, neck, 3, 3], "linear"))
    t((p + "neck.3.weight", [neck], "one")); t((p + "neck.3.bias", [neck], "bias"))
    t((p + "net_2.weight", [c2, neck, 3, 3], "linear"))
    t((p + "net_3.weight", [c3, c2, 3, 3], "linear"))
    p = "model.vision_model."
    t((p + "embeddings.class_embedding", [cw], "normal"))
    t((p + "embeddings.patch_embedding.weight", [cw, 3, cpatch, cpatch], "linear"))
    t((p + "embeddings.position_embedding.weight", [cpos, cw], "pos"))
    t((p + "pre_layrnorm.weight", [cw], "one")); t((p + "pre_layrnorm.bias", [cw], "bias"))
    for l in range(cl):
        q = p + f"transformer.layers.{l}."
        t((q + "layer_norm1.weight", [cw], "one")); t((q + "layer_norm1.bias", [cw], "bias"))
        t((q + "layer_norm2.weight", [cw], "one")); t((q + "layer_norm2.bias", [cw], "bias"))
        t((q + "self_attn.qkv_proj.weight", [3 * cw, cw], "linear")); t((q + "self_attn.qkv_proj.bias", [3 * cw], "bias"))
        t((q + "self_attn.out_proj.weight", [cw, cw], "linear")); t((q + "self_attn.out_proj.bias", [cw], "bias"))
        t((q + "mlp.fc1.weight", [cffn, cw], "linear")); t((q + "mlp.fc1.bias", [cffn], "bias"))
        t((q + "mlp.fc2.weight", [cw, cffn], "linear")); t((q + "mlp.fc2.bias", [cw], "bias"))
    t(("model.projector.layers.weight", [proj.get("n_embed", h), proj.get("input_dim", 2048)], "linear"))
    t(("model.projector.layers.bias", [proj.get("n_embed", h)], "bias"))
    t(("model.image_newline", [h], "normal"))
    t(("model.view_seperator", [h], "normal"))
    t(("model.embed_tokens.weight", [vocab, h], "normal"))
    n_exp = cfg.get("n_routed_experts", 0)
    for l in range(cfg["num_hidden_layers"]):
        q = f"model.layers.{l}."
        t((q + "input_layernorm.weight", [h], "one"))
        t((q + "post_attention_layernorm.weight", [h], "one"))
        t((q + "self_attn.q_proj.weight", [heads * hd, h], "linear"))
        t((q + "self_attn.k_proj.weight", [kvh * hd, h], "linear"))
        t((q + "self_attn.v_proj.weight", [kvh * hd, h], "linear"))
        t((q + "self_attn.o_proj.weight", [h, heads * hd], "linear"))

        def mlp(prefix, inter):
            t((prefix + "gate_proj.weight", [inter, h], "linear"))
            t((prefix + "up_proj.weight", [inter, h], "linear"))
            t((prefix + "down_proj.weight", [h, inter], "linear"))

        if n_exp and l >= cfg.get("first_k_dense_replace", 0):
            t((q + "mlp.gate.weight", [n_exp, h], "linear"))
            for e in range(n_exp):
                mlp(q + f"mlp.experts.{e}.", cfg["moe_intermediate_size"])
            if cfg.get("n_shared_experts", 0):
                mlp(q + "mlp.shared_experts.", cfg["moe_intermediate_size"] * cfg["n_shared_experts"])
        else:
            mlp(q + "mlp.", cfg["intermediate_size"])
    t(("model.norm.weight", [h], "one"))
    t(("lm_head.weight", [vocab, h], "linear"))
    return out


def draw(rng, shape, init):
    n = int(np.prod(shape))
    if init == "one":
        return 1.0 + 0.1 * rng.standard_normal(n, dtype=np.float32)
    scale = {"normal": 1.0, "bias": 0.05, "relpos": 0.2, "pos": 0.5}.get(init)
    if scale is None:  # matrices and convs: N(0, 1/fan_in)
        scale = 1.0 / np.sqrt(np.prod(shape[1:]))
    return (scale * rng.standard_normal(n, dtype=np.float32)).astype(np.float32)


def write_checkpoint(cfg, seed, out_dir):
    """Writes the BF16 checkpoint of `cfg` drawn with `seed` into out_dir (one shard, sorted names,
    and its index); returns the tensor count and the data bytes. The tensors are drawn in name
    order, each one when it is written."""
    tensors = sorted(tensor_list(cfg))
    rng = np.random.default_rng(seed)
    total = safetensors_io.write_model_weights(
        out_dir, [(name, shape, partial(draw, rng, shape, init)) for name, shape, init in tensors])
    return len(tensors), total


def main():
    default_cfg = os.path.join(ROOT, "tests", "data", "unlimited-ocr", "config.json")
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--config", default=default_cfg)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    with open(args.config) as f:
        cfg = json.load(f)
    os.makedirs(args.out, exist_ok=True)
    n_tensors, total = write_checkpoint(cfg, args.seed, args.out)
    cfg_dir = os.path.dirname(os.path.abspath(args.config))
    shutil.copy(args.config, os.path.join(args.out, "config.json"))
    for name in TOKENIZER_FILES:
        src = os.path.join(cfg_dir, name)
        if os.path.exists(src):
            shutil.copy(src, os.path.join(args.out, name))
    print(f"{args.out}: {n_tensors} tensors, {total // 2:,} parameters, {total:,} bytes", file=sys.stderr)


if __name__ == "__main__":
    main()
