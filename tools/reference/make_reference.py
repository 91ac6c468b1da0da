#!/usr/bin/env python3
"""Upstream-PyTorch reference cases for tests/test_reference_cases.cpp (tests/data/reference/).

Runs the UNMODIFIED Unlimited-OCR Hugging Face remote code (modeling_unlimitedocr.py,
modeling_deepseekv2.py, deepencoder.py, configuration_deepseek_v2.py, conversation.py) with
PyPI torch + transformers, on the CPU, in float32, with random bf16 weights at reduced sizes,
and records what uocr must reproduce from the committed images:

  * gundam single page (crop_mode=True) for several tile grids, and a <= 640 px page (no tiles);
  * infer_multi() with 2 and 3 pages of different sizes, teacher-forced with R-SWA;
  * base mode with the tiny-a dimensions in an "unlimited-ocr" config (sliding_window 128).

Preprocessing and the prompt come from upstream infer() / infer_multi() themselves: their
self.generate(...) call is intercepted to capture input_ids, images, images_seq_mask and
images_spatial_crop. The forward passes are upstream's UnlimitedOCRForCausalLM.forward. Every
deviation from a plain upstream run is a shim listed in tools/reference/README.md.

Usage (see README.md for the environment):
    python tools/reference/make_reference.py --upstream DIR [--out tests/data/reference]
        [--work /tmp/uocr-reference] [--cases name,name]

DIR holds the five upstream .py files (a checkout of moyuan10086/Unlimited-OCR-NPU at
e14b5b27693ecf780b386b4b13bfdf0e3cf4d8c7, or the HF repo baidu/Unlimited-OCR at 3a7f4dbb); their
SHA-256 are checked. Nothing from DIR is written to the output folder.
"""
import argparse
import contextlib
import copy
import hashlib
import importlib
import json
import os
import platform
import shutil
import struct
import sys
import time
from functools import partial

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools", "checkpoint"))
import make_random  # noqa: E402  (tensor_list / write_checkpoint: the upstream tensor layout)

UPSTREAM_SHA256 = {
    "modeling_unlimitedocr.py": "268bdcbe12cf37bf5a2debb53faf542e56570958a5d9f3314aab3cab2cf6cb48",
    "modeling_deepseekv2.py": "74e36e6bd0ba7bc565ef76464a99baa8e6bccb710ae9c1007b54ac30b855fa4c",
    "deepencoder.py": "0ae2fb6d1e5ae8cf100fc32f854830acd08c821a0a1f23a94a76588c222ddcf2",
    "configuration_deepseek_v2.py": "b8470dd616ba8745fce6e27b093aef73a098863cc891b2477dcf9326a36000f7",
    "conversation.py": "ec7b6ce89bcda643de1f43269ffa66a7b2e65dc3ed30e427958f776546b4ba03",
}
PKG = "unlimited_ocr_upstream"
# The published model folder's small files (config, tokenizer); the weights are never needed here.
PUBLISHED = os.path.join(ROOT, "tests", "data", "unlimited-ocr")
FONT_DIR = "/usr/share/fonts/truetype/dejavu"
SINGLE_PROMPT = "<image>document parsing."
MULTI_PROMPT = "<image>Multi page parsing."
TOPK = 16

# ---------------------------------------------------------------------------------------------
# Models. Both configs start from the published Unlimited-OCR config.json (same keys and order);
# only sizes change, plus the keys tiny-a introduced for sizes upstream hard-codes in python
# (sam out_chans / window_size, clip ffn_hidden_size).

MODELS = {
    # Committed: tests/data/reference/tiny-b/ (config + index + one BF16 shard).
    "tiny-b": dict(
        seed=2,
        decoder=dict(hidden_size=16, intermediate_size=40, moe_intermediate_size=8, num_hidden_layers=3,
                     num_attention_heads=4, num_key_value_heads=2, v_head_dim=4, n_routed_experts=6,
                     num_experts_per_tok=3, n_shared_experts=2, first_k_dense_replace=1,
                     sliding_window_size=8, sliding_window=8),
        sam=dict(width=48, layers=3, heads=3, global_attn_indexes=[1], downsample_channels=[32, 48],
                 out_chans=24, window_size=14),
        clip=dict(width=48, layers=2, heads=3, ffn_hidden_size=80),
        weights=None,  # drawn by tools/checkpoint/make_random.py with `seed`
    ),
    # Config only (committed as tests/data/reference/tiny-a-uocr/config.json); the weights are
    # shared/golden/tiny-a's safetensors (seed 1, 18.9 MB, not copied).
    "tiny-a-uocr": dict(
        seed=None,
        decoder=dict(hidden_size=32, intermediate_size=64, moe_intermediate_size=32, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=4, v_head_dim=8, n_routed_experts=8,
                     num_experts_per_tok=2, n_shared_experts=1, first_k_dense_replace=1,
                     sliding_window_size=128, sliding_window=128),
        sam=dict(width=64, layers=4, heads=2, global_attn_indexes=[1, 3], downsample_channels=[64, 128],
                 out_chans=32, window_size=14),
        clip=dict(width=128, layers=2, heads=4, ffn_hidden_size=512),
        weights="golden/tiny-a",  # relative to the shared folder
    ),
}

# Images: (file, width, height, style seed). Rendered with Pillow + DejaVu fonts.
IMAGES = {
    "small_600x420.png": (600, 420, 1),
    "wide_2000x650.png": (2000, 650, 2),
    "portrait_700x1050.png": (700, 1050, 3),
    "tall_640x1300.png": (640, 1300, 4),
    "page_a_800x1000.png": (800, 1000, 5),
    "page_b_1100x700.png": (1100, 700, 6),
    "page_c_500x500.png": (500, 500, 7),
    "base_900x1200.png": (900, 1200, 8),
}

# mode: gundam = infer(base_size=1024, image_size=640, crop_mode=True); base = infer(1024, 1024,
# False); multi = infer_multi(image_size=1024). gen: teacher-forced generated ids after the
# prompt (R-SWA with the config's window). full_rows: which logits rows are stored in full
# ("prefill" = last prompt position, or a generated index).
CASES = [
    dict(name="gundam_small", model="tiny-b", mode="gundam", images=["small_600x420.png"], gen=0, full_rows=[]),
    dict(name="gundam_3x1", model="tiny-b", mode="gundam", images=["wide_2000x650.png"], gen=0, full_rows=[]),
    dict(name="gundam_2x3", model="tiny-b", mode="gundam", images=["portrait_700x1050.png"], gen=12,
         full_rows=["prefill"]),
    dict(name="gundam_1x2", model="tiny-b", mode="gundam", images=["tall_640x1300.png"], gen=0, full_rows=[]),
    dict(name="multi_2", model="tiny-b", mode="multi", images=["page_a_800x1000.png", "page_b_1100x700.png"],
         gen=40, full_rows=[]),
    dict(name="multi_3", model="tiny-b", mode="multi",
         images=["page_b_1100x700.png", "page_c_500x500.png", "page_a_800x1000.png"], gen=40, full_rows=[20]),
    dict(name="base_tiny_b", model="tiny-b", mode="base", images=["base_900x1200.png"], gen=160, full_rows=[150]),
    # An extra case: its weights are the project's optional reference material (--shared).
    dict(name="base_tiny_a_uocr", model="tiny-a-uocr", mode="base", images=["base_900x1200.png"], gen=160,
         full_rows=[150]),
]

# The golden set (tests/data/reference/golden/): one 1024 px page in base mode on tiny-b, every
# vision stage, the prefix logits at every position, and one teacher-forced forward of GOLDEN_GEN
# ids under each attention variant (full causal and R-SWA windows), with full rows at
# GOLDEN_FULL_ROWS (just past each window's first wrap, and the last).
GOLDEN_MODEL = "tiny-b"
GOLDEN_PAGE = ("page.png", 1024, 1024, 9)
GOLDEN_GEN = 300
GOLDEN_WINDOWS = {"full_attention": None, "rswa_n128": 128, "rswa_n8": 8}
GOLDEN_FULL_ROWS = [9, 129, 299]


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# ---------------------------------------------------------------------------------------------
# Config and weights

def make_config(spec, name):
    with open(os.path.join(PUBLISHED, "config.json")) as f:
        cfg = json.load(f)
    cfg["_name_or_path"] = f"tests/data/reference/{name} (random weights, Unlimited-OCR layout)"
    d = spec["decoder"]
    for k, v in d.items():
        if k in cfg:
            cfg[k] = v
        if k in cfg["language_config"]:
            cfg["language_config"][k] = v
    assert cfg["model_type"] == "unlimited-ocr"
    cfg["projector_config"]["input_dim"] = spec["clip"]["width"] + spec["sam"]["downsample_channels"][1]
    cfg["projector_config"]["n_embed"] = d["hidden_size"]
    w = cfg["vision_config"]["width"]
    for k, v in spec["clip"].items():
        w["clip-l-14-224"][k] = v
    for k, v in spec["sam"].items():
        w["sam_vit_b"][k] = v
    assert spec["clip"]["width"] == spec["sam"]["downsample_channels"][1]
    return cfg


def read_safetensors_f32(path):
    """name -> float32 numpy array of a BF16 safetensors file (exact widening)."""
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    hdr = json.loads(raw[8:8 + n])
    base = 8 + n
    out = {}
    for name, e in hdr.items():
        if name == "__metadata__":
            continue
        assert e["dtype"] == "BF16", name
        a, b = e["data_offsets"]
        u = np.frombuffer(raw[base + a:base + b], dtype="<u2").astype(np.uint32) << 16
        out[name] = u.view(np.float32).reshape(e["shape"]).copy()
    return out


# ---------------------------------------------------------------------------------------------
# Images

def render_page(w, h, seed):
    from PIL import Image, ImageDraw, ImageFont
    rng = np.random.default_rng(1000 + seed)
    img = Image.new("RGB", (w, h), (252, 251, 248))
    d = ImageDraw.Draw(img)
    # Plain (1-bit) glyphs keep the PNGs small; one page keeps anti-aliased text for varied values.
    d.fontmode = "L" if seed == 3 else "1"
    bold = ImageFont.truetype(os.path.join(FONT_DIR, "DejaVuSans-Bold.ttf"), max(18, min(w, h) // 18))
    body = ImageFont.truetype(os.path.join(FONT_DIR, "DejaVuSans.ttf"), max(14, min(w, h) // 30))
    mono = ImageFont.truetype(os.path.join(FONT_DIR, "DejaVuSansMono.ttf"), max(12, min(w, h) // 34))
    margin = max(16, w // 20)
    # header band and title
    d.rectangle([0, 0, w, h // 12 + 10], fill=(40 + 20 * seed % 90, 70, 120 + 10 * seed % 100))
    d.text((margin, h // 48 + 2), f"Reference page {seed}: {w} x {h}", font=bold, fill=(255, 255, 255))
    words = ("unlimited ocr reference sliding window attention gundam tile global view projector "
             "decoder expert routing logits prefill vision tokens newline separator page parsing "
             "document layout table formula caption header footer").split()
    y = h // 12 + 30
    line_h = int(body.size * 1.5)
    para = 0
    while y + line_h < h - margin:
        if rng.random() < 0.12:  # a small table
            cols = 3
            cw = (w - 2 * margin) // cols
            rows = 3
            for r in range(rows):
                for c in range(cols):
                    x0, y0 = margin + c * cw, y + r * line_h
                    d.rectangle([x0, y0, x0 + cw, y0 + line_h], outline=(60, 60, 60), width=1)
                    d.text((x0 + 6, y0 + 3), f"{words[(r * cols + c + seed) % len(words)]} {r}{c}", font=mono,
                           fill=(20, 20, 20))
            y += rows * line_h + line_h // 2
            continue
        n = int(rng.integers(3, 12))
        text = " ".join(words[int(i)] for i in rng.integers(0, len(words), n))
        if para % 4 == 0:
            text = f"{para // 4 + 1}. " + text.capitalize()
            d.text((margin, y), text, font=bold, fill=(10, 10, 60))
        else:
            d.text((margin, y), text, font=body, fill=(int(rng.integers(0, 60)),) * 3)
        para += 1
        y += line_h
    # a coloured figure box on the right half
    bx = w // 2 + int(rng.integers(0, w // 6))
    by = h // 3
    d.ellipse([bx, by, bx + w // 5, by + h // 8], outline=(200, 40, 40), width=3)
    d.line([margin, h - margin, w - margin, h - margin - h // 20], fill=(30, 140, 60), width=2)
    return img


# ---------------------------------------------------------------------------------------------
# Upstream import and shims

def import_upstream(upstream_dir, cache_dir):
    pkg_dir = os.path.join(cache_dir, PKG)
    os.makedirs(pkg_dir, exist_ok=True)
    hashes = {}
    for name, want in UPSTREAM_SHA256.items():
        src = os.path.join(upstream_dir, name)
        got = sha256_file(src)
        if got != want:
            sys.exit(f"{src}: SHA-256 {got} is not the pinned upstream file ({want})")
        shutil.copyfile(src, os.path.join(pkg_dir, name))
        hashes[name] = got
    # The files use package-relative imports, so they live in a package; __init__ is empty.
    open(os.path.join(pkg_dir, "__init__.py"), "w").close()
    sys.path.insert(0, cache_dir)
    mu = importlib.import_module(PKG + ".modeling_unlimitedocr")
    mv = importlib.import_module(PKG + ".modeling_deepseekv2")
    de = importlib.import_module(PKG + ".deepencoder")
    return mu, mv, de, hashes


class Capture:
    """Records the kwargs of the intercepted generate() and the decoder input embeddings."""
    gen_kwargs = None
    inputs_embeds = None


def install_shims(torch, mu, mv, de, spec):
    """Reduced-size builders; no-op .cuda(); capture of inputs_embeds. See README.md."""
    sam, clip = spec["sam"], spec["clip"]

    def build_sam_reduced():
        # _build_sam's exact arguments, sizes from the spec.
        enc = de.ImageEncoderViT(
            depth=sam["layers"], embed_dim=sam["width"], img_size=1024, mlp_ratio=4,
            norm_layer=partial(torch.nn.LayerNorm, eps=1e-6), num_heads=sam["heads"], patch_size=16,
            qkv_bias=True, use_rel_pos=True, global_attn_indexes=sam["global_attn_indexes"],
            window_size=sam["window_size"], out_chans=sam["out_chans"])
        # net_2 / net_3 are hard-coded 256->512->1024 in ImageEncoderViT.__init__: same layers, reduced.
        c2, c3 = sam["downsample_channels"]
        enc.net_2 = torch.nn.Conv2d(sam["out_chans"], c2, kernel_size=3, stride=2, padding=1, bias=False)
        enc.net_3 = torch.nn.Conv2d(c2, c3, kernel_size=3, stride=2, padding=1, bias=False)
        enc.eval()
        return enc

    def build_clip_reduced():
        cfg = de.adict(copy.deepcopy(dict(de.vit_model_cfg)))
        cfg.update(num_layers=clip["layers"], hidden_size=clip["width"], num_heads=clip["heads"],
                   num_attention_heads=clip["heads"], ffn_hidden_size=clip["ffn_hidden_size"])
        return de.VitModel(cfg=cfg, freeze_embed=False, freeze_pre_norm=False)

    mu.build_sam_vit_b = build_sam_reduced
    mu.build_clip_l = build_clip_reduced
    torch.Tensor.cuda = lambda self, *a, **k: self

    if getattr(mv.DeepseekV2Model.forward, "_uocr_capture", False):
        return
    orig_forward = mv.DeepseekV2Model.forward

    def capturing_forward(self, *args, **kwargs):
        emb = kwargs.get("inputs_embeds")
        if emb is not None and emb.shape[1] > 1:
            Capture.inputs_embeds = emb.detach().clone()
        return orig_forward(self, *args, **kwargs)

    capturing_forward._uocr_capture = True
    mv.DeepseekV2Model.forward = capturing_forward


def build_model(torch, mu, cfg, weights):
    config = mu.UnlimitedOCRConfig(**cfg)
    config._attn_implementation = "eager"
    model = mu.UnlimitedOCRForCausalLM(config)
    h, pin = cfg["hidden_size"], cfg["projector_config"]["input_dim"]
    # UnlimitedOCRModel.__init__ hard-codes n_embed=1280 / input_dim=2048: same modules, reduced.
    m = model.model
    m.projector = mu.MlpProjector(mu.Dict(projector_type="linear", input_dim=pin, n_embed=h))
    m.image_newline = torch.nn.Parameter(torch.empty(h))
    m.view_seperator = torch.nn.Parameter(torch.empty(h))
    state = {k: torch.from_numpy(v) for k, v in weights.items()}
    # A persistent buffer of upstream's CLIP embeddings, not a checkpoint tensor (arange(257)).
    state["model.vision_model.embeddings.position_ids"] = torch.arange(257).expand(1, -1)
    model.load_state_dict(state, strict=True)
    model.float().eval()
    return model


@contextlib.contextmanager
def null_autocast():
    yield


def capture_inputs(torch, mu, model, tokenizer, case, img_dir, tmp):
    """Runs upstream infer()/infer_multi() up to its generate() call; returns the captured kwargs."""
    def fake_generate(**kwargs):
        Capture.gen_kwargs = kwargs
        return kwargs["input_ids"]

    model.generate = fake_generate
    Capture.gen_kwargs = None
    paths = [os.path.join(img_dir, f) for f in case["images"]]
    real_autocast = torch.autocast
    torch.autocast = lambda *a, **k: null_autocast()  # CUDA autocast around generate(): CPU-only run
    try:
        if case["mode"] == "gundam":
            model.infer(tokenizer, prompt=SINGLE_PROMPT, image_file=paths[0], output_path=tmp, base_size=1024,
                        image_size=640, crop_mode=True)
        elif case["mode"] == "base":
            model.infer(tokenizer, prompt=SINGLE_PROMPT, image_file=paths[0], output_path=tmp, base_size=1024,
                        image_size=1024, crop_mode=False)
        else:
            model.infer_multi(tokenizer, prompt=MULTI_PROMPT, image_files=paths, output_path=tmp, image_size=1024)
    finally:
        torch.autocast = real_autocast
        del model.generate
    kw = Capture.gen_kwargs
    assert kw is not None, "generate() was not reached"
    return kw


# ---------------------------------------------------------------------------------------------
# Summaries

def bf16_hash(t):
    """sum_i bits16(x_i) * (i * 0x9E3779B97F4A7C15 + 0x632BE59BD9B4E019) mod 2^64 over the flat
    CHW bf16 view (the C++ test computes the same from its float32 values)."""
    import torch
    bits = t.contiguous().view(torch.int16).numpy().reshape(-1).astype(np.uint16).astype(np.uint64)
    idx = np.arange(bits.size, dtype=np.uint64)
    with np.errstate(over="ignore"):
        mult = idx * np.uint64(0x9E3779B97F4A7C15) + np.uint64(0x632BE59BD9B4E019)
        return int((bits * mult).sum(dtype=np.uint64))


def view_summary(t, image_index, image, kind, index):
    import torch
    return dict(image_index=image_index, image=image, view=kind, index=index, shape=list(t.shape),
                bf16_hash=f"{bf16_hash(t):016x}", sum=float(t.to(torch.float64).sum()))


def topk_summary(torch, rows):
    """rows [n, V] float32 -> (ids int32 [n,16], vals float32 [n,16], lse float32 [n], margins)."""
    vals, ids = torch.topk(rows, TOPK, dim=-1, sorted=True)
    lse = torch.logsumexp(rows.double(), dim=-1).float()
    margins = (vals[:, 0] - vals[:, 1]).tolist()
    gaps = (vals[:, :-1] - vals[:, 1:]).min(dim=-1).values.tolist()
    return ids.int().numpy(), vals.numpy(), lse.numpy(), margins, gaps


def rswa_mask(torch, p, length, n):
    m = torch.tril(torch.ones(length, length))
    i = torch.arange(length)[:, None]
    j = torch.arange(length)[None, :]
    far = (i >= p) & (j >= p) & (i - j >= n)
    m[far] = 0
    return m[None, None]


class GateWatch:
    """Smallest gap between the k-th and (k+1)-th MoE gate score seen (routing near-ties)."""

    def __init__(self, torch, model):
        self.min_gap = float("inf")
        self.handles = []
        for mod in model.modules():
            if type(mod).__name__ == "MoEGate":
                self.handles.append(mod.register_forward_hook(partial(self.hook, torch)))

    def hook(self, torch, mod, inputs, output):
        x = inputs[0].reshape(-1, inputs[0].shape[-1]).float()
        scores = torch.nn.functional.linear(x, mod.weight.float()).softmax(-1)
        s = scores.sort(dim=-1, descending=True).values
        k = mod.top_k
        self.min_gap = min(self.min_gap, float((s[:, k - 1] - s[:, k]).min()))

    def close(self):
        for h in self.handles:
            h.remove()


# ---------------------------------------------------------------------------------------------

def ring_decode(torch, model, cache, gen_ids, p):
    """Logits rows of `gen_ids` fed one at a time after a prompt of p positions through upstream's
    own ring-buffer cache (what generate() does after the first token)."""
    rows = []
    with torch.no_grad():
        for g, token in enumerate(gen_ids):
            o = model(input_ids=torch.tensor([[int(token)]]), past_key_values=cache, use_cache=True,
                      position_ids=torch.tensor([[p + g]]), return_dict=True)
            cache = o.past_key_values
            rows.append(o.logits[0, -1].clone())
    return rows


def run_case(torch, mu, model, cfg, tokenizer, case, img_dir, out_dir, tmp):
    from transformers.cache_utils import DynamicCache
    t0 = time.time()
    kw = capture_inputs(torch, mu, model, tokenizer, case, img_dir, tmp)
    ids = kw["input_ids"]                      # [1, P]
    crop, ori = kw["images"][0]
    seq_mask = kw["images_seq_mask"]           # [1, P] bool
    spatial = kw["images_spatial_crop"]        # [n_images, 2] = (tiles across, tiles down)
    p = ids.shape[1]
    n_vis = int(seq_mask.sum())

    views = []
    for i, f in enumerate(case["images"]):
        views.append(view_summary(ori[i], i, f, "global", 0))
    if case["mode"] == "gundam" and float(crop.float().abs().sum()) != 0:
        for t in range(crop.shape[0]):
            views.append(view_summary(crop[t], 0, case["images"][0], "tile", t))

    window = cfg["sliding_window_size"]
    gen = case["gen"]
    gen_ids = np.random.RandomState(7000 + len(case["name"]) * 31 + p).randint(100, 128000, size=gen)

    watch = GateWatch(torch, model)
    # 1) Prefill exactly as generate() runs it (R-SWA ring cache armed), capturing the embeddings.
    model.config._ring_window = window
    model.config.sliding_window = None
    Capture.inputs_embeds = None
    with torch.no_grad():
        out = model(input_ids=ids, images=[(crop.float(), ori.float())], images_seq_mask=seq_mask,
                    images_spatial_crop=spatial, past_key_values=DynamicCache(), use_cache=True,
                    position_ids=torch.arange(p)[None], return_dict=True)
    emb = Capture.inputs_embeds[0]
    vision = emb[seq_mask[0]].numpy().astype(np.float32)
    prefill_row = out.logits[0, -1].clone()
    # 2) Decode the teacher-forced ids one by one through upstream's ring buffer (what generate()
    #    does after the first token), to cross-check the 4-D mask forward below.
    ring_rows = ring_decode(torch, model, out.past_key_values, gen_ids, p)
    model.config.sliding_window = cfg.get("sliding_window")
    del out

    res = dict(name=case["name"], model=case["model"], mode=case["mode"], images=case["images"],
               prompt=MULTI_PROMPT if case["mode"] == "multi" else SINGLE_PROMPT,
               preprocess={"gundam": [1024, 640, True], "base": [1024, 1024, False],
                           "multi": [1024, 1024, False]}[case["mode"]],
               spatial_crop=spatial.tolist(), prompt_len=p, visual_tokens=n_vis, hidden=cfg["hidden_size"],
               window=window, gen=gen, views=views)
    np.save(os.path.join(out_dir, "input_ids.npy"), ids[0].numpy().astype(np.int32))
    np.save(os.path.join(out_dir, "vision_tokens.npy"), vision)
    pi, pv, pl, pm, pg = topk_summary(torch, prefill_row[None])
    np.save(os.path.join(out_dir, "prefill_top16_ids.npy"), pi[0])
    np.save(os.path.join(out_dir, "prefill_top16_vals.npy"), pv[0])
    np.save(os.path.join(out_dir, "prefill_lse.npy"), pl)
    res["prefill_top2_margin"] = pm[0]
    if "prefill" in case["full_rows"]:
        np.save(os.path.join(out_dir, "prefill_logits.npy"), prefill_row.numpy())

    if gen:
        # 3) One teacher-forced forward over prompt + gen ids with the R-SWA 4-D mask (1 = may
        #    attend), as tiny-a's README describes; the vision runs again inside (same images).
        full = torch.cat([ids, torch.from_numpy(gen_ids)[None].long()], dim=1)
        fmask = torch.cat([seq_mask, torch.zeros(1, gen, dtype=torch.bool)], dim=1)
        with torch.no_grad():
            out = model(input_ids=full, images=[(crop.float(), ori.float())], images_seq_mask=fmask,
                        images_spatial_crop=spatial, attention_mask=rswa_mask(torch, p, p + gen, window),
                        use_cache=False, position_ids=torch.arange(p + gen)[None], return_dict=True)
        rows = out.logits[0, p:].clone()            # row g: output after feeding gen id g
        last_prompt = out.logits[0, p - 1].clone()
        del out
        ring = torch.stack(ring_rows)
        res["check_ring_vs_mask_max_abs"] = float((ring - rows).abs().max())
        res["check_prefill_vs_full_forward_max_abs"] = float((last_prompt - prefill_row).abs().max())
        gi, gv, gl, gm, gg = topk_summary(torch, rows)
        np.save(os.path.join(out_dir, "gen_ids.npy"), gen_ids.astype(np.int32))
        np.save(os.path.join(out_dir, "gen_top16_ids.npy"), gi)
        np.save(os.path.join(out_dir, "gen_top16_vals.npy"), gv)
        np.save(os.path.join(out_dir, "gen_lse.npy"), gl)
        res["gen_min_top2_margin"] = min(gm)
        res["gen_rows_margin_gt_1e-2"] = int(sum(m > 1e-2 for m in gm))
        res["gen_min_neighbour_gap"] = min(gg)
        idx = [r for r in case["full_rows"] if r != "prefill"]
        if idx:
            np.save(os.path.join(out_dir, "gen_rows_index.npy"), np.array(idx, dtype=np.int32))
            np.save(os.path.join(out_dir, "gen_logits_rows.npy"), rows[idx].numpy())
        # Sanity: the window matters (a full-attention run differs after `window` steps).
        with torch.no_grad():
            out = model(input_ids=full, images=[(crop.float(), ori.float())], images_seq_mask=fmask,
                        images_spatial_crop=spatial, use_cache=False, position_ids=torch.arange(p + gen)[None],
                        return_dict=True)
        full_rows = out.logits[0, p:]
        del out
        d = (full_rows - rows).abs().amax(dim=-1)
        res["check_full_vs_rswa_max_abs_within_window"] = float(d[:window].max())
        res["check_full_vs_rswa_max_abs_after_window"] = float(d[window:].max()) if gen > window else None
    res["moe_min_gate_gap"] = watch.min_gap
    watch.close()
    with open(os.path.join(out_dir, "case.json"), "w") as f:
        json.dump(res, f, indent=1)
        f.write("\n")
    res["seconds"] = round(time.time() - t0, 1)  # printed only (keeps the fixtures reproducible)
    return res


def run_golden(torch, mu, model, cfg, tokenizer, out_dir, tmp):
    """The golden set: vision stages, prefix logits, teacher-forced decode under every variant."""
    t0 = time.time()
    page = GOLDEN_PAGE[0]
    kw = capture_inputs(torch, mu, model, tokenizer, dict(mode="base", images=[page]), out_dir, tmp)
    ids, seq_mask, spatial = kw["input_ids"], kw["images_seq_mask"], kw["images_spatial_crop"]
    crop, ori = kw["images"][0]
    p = ids.shape[1]
    images = [(crop.float(), ori.float())]

    stages = {}
    m = model.model
    hooks = [mod.register_forward_hook(lambda _m, _i, out, name=name: stages.setdefault(name, out.detach().clone()))
             for name, mod in (("sam_neck", m.sam_model.neck), ("sam_out", m.sam_model),
                               ("clip_out", m.vision_model), ("projector_out", m.projector))]
    watch = GateWatch(torch, model)
    Capture.inputs_embeds = None
    with torch.no_grad():
        out = model(input_ids=ids, images=images, images_seq_mask=seq_mask, images_spatial_crop=spatial,
                    use_cache=False, position_ids=torch.arange(p)[None], return_dict=True)
    for h in hooks:
        h.remove()
    prefix = out.logits[0].clone()
    del out
    np.save(os.path.join(out_dir, "input_ids.npy"), ids[0].numpy().astype(np.int32))
    for name, t in stages.items():
        np.save(os.path.join(out_dir, name + ".npy"), t.float().numpy().squeeze(0) if name == "projector_out"
                else t.float().numpy())
    np.save(os.path.join(out_dir, "vision_tokens.npy"), Capture.inputs_embeds[0][seq_mask[0]].numpy())
    np.save(os.path.join(out_dir, "prefill_logits.npy"), prefix[-1].numpy())
    pi, pv, pl, pm, _ = topk_summary(torch, prefix)
    np.save(os.path.join(out_dir, "prefix_logits_top16_ids.npy"), pi)
    np.save(os.path.join(out_dir, "prefix_logits_top16_vals.npy"), pv)
    np.save(os.path.join(out_dir, "prefix_logits_lse.npy"), pl)

    gen_ids = np.random.RandomState(1001).randint(100, 128000, size=GOLDEN_GEN)
    np.save(os.path.join(out_dir, "gen_ids.npy"), gen_ids.astype(np.int32))
    np.save(os.path.join(out_dir, "logits_rows_gen_index.npy"), np.array(GOLDEN_FULL_ROWS, dtype=np.int32))
    full = torch.cat([ids, torch.from_numpy(gen_ids)[None].long()], dim=1)
    fmask = torch.cat([seq_mask, torch.zeros(1, GOLDEN_GEN, dtype=torch.bool)], dim=1)
    res = dict(model=GOLDEN_MODEL, page=page, prompt=SINGLE_PROMPT, preprocess=[1024, 1024, False], prompt_len=p,
               visual_tokens=int(seq_mask.sum()), gen=GOLDEN_GEN, full_rows=GOLDEN_FULL_ROWS,
               view=view_summary(ori[0], 0, page, "global", 0), prefill_top2_margin=pm[-1],
               stages={k: list(v.shape) for k, v in stages.items()}, variants={})
    for variant, window in GOLDEN_WINDOWS.items():
        mask = None if window is None else rswa_mask(torch, p, p + GOLDEN_GEN, window)
        with torch.no_grad():
            out = model(input_ids=full, images=images, images_seq_mask=fmask, images_spatial_crop=spatial,
                        attention_mask=mask, use_cache=False, position_ids=torch.arange(p + GOLDEN_GEN)[None],
                        return_dict=True)
        rows = out.logits[0, p:].clone()
        info = dict(window=window, check_prefill_vs_full_forward_max_abs=float((out.logits[0, p - 1] - prefix[-1]).abs().max()))
        del out
        if window is not None:
            # Upstream's own ring-buffer cache, one id at a time (what generate() does), against the mask.
            from transformers.cache_utils import DynamicCache
            model.config._ring_window = window
            model.config.sliding_window = None
            with torch.no_grad():
                o = model(input_ids=ids, images=images, images_seq_mask=seq_mask, images_spatial_crop=spatial,
                          past_key_values=DynamicCache(), use_cache=True, position_ids=torch.arange(p)[None],
                          return_dict=True)
            ring = ring_decode(torch, model, o.past_key_values, gen_ids, p)
            model.config.sliding_window = cfg.get("sliding_window")
            info["check_ring_vs_mask_max_abs"] = float((torch.stack(ring) - rows).abs().max())
            del o, ring
        gi, gv, gl, gm, gg = topk_summary(torch, rows)
        np.save(os.path.join(out_dir, f"{variant}_logits_top16_ids.npy"), gi)
        np.save(os.path.join(out_dir, f"{variant}_logits_top16_vals.npy"), gv)
        np.save(os.path.join(out_dir, f"{variant}_logits_lse.npy"), gl)
        np.save(os.path.join(out_dir, f"{variant}_logits_rows.npy"), rows[GOLDEN_FULL_ROWS].numpy())
        info.update({"gen_min_top2_margin": min(gm), "gen_rows_margin_gt_1e-2": int(sum(x > 1e-2 for x in gm)),
                     "gen_min_neighbour_gap": min(gg)})
        res["variants"][variant] = info
    res["moe_min_gate_gap"] = watch.min_gap
    watch.close()
    with open(os.path.join(out_dir, "golden.json"), "w") as f:
        json.dump(res, f, indent=1)
        f.write("\n")
    res["seconds"] = round(time.time() - t0, 1)
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--upstream", required=True, help="folder with the five upstream .py files")
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "data", "reference"))
    ap.add_argument("--shared", default=os.path.join(os.path.dirname(ROOT), "shared"),
                    help="folder with golden/tiny-a (only the base_tiny_a_uocr case reads it)")
    ap.add_argument("--work", default="/tmp/uocr-reference", help="cache folder (package copy, scratch)")
    ap.add_argument("--cases", default="", help="comma-separated subset of case names ('golden': the golden set)")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()

    import PIL
    if tuple(int(v) for v in PIL.__version__.split(".")[:2]) >= (12, 2):
        sys.exit(f"Pillow {PIL.__version__}: use Pillow < 12.2 (upstream's horizontal-first resize; "
                 "see tools/preprocess/gen_fixtures.py)")
    import torch
    import transformers
    from transformers import AutoTokenizer
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    os.makedirs(args.work, exist_ok=True)
    mu, mv, de, hashes = import_upstream(os.path.abspath(args.upstream), os.path.abspath(args.work))
    tokenizer = AutoTokenizer.from_pretrained(PUBLISHED)

    out = os.path.abspath(args.out)
    img_dir = os.path.join(out, "images")
    os.makedirs(img_dir, exist_ok=True)
    for f, (w, h, s) in IMAGES.items():
        render_page(w, h, s).save(os.path.join(img_dir, f), optimize=True)

    wanted = set(filter(None, args.cases.split(",")))
    manifest_path = os.path.join(out, "manifest.json")
    manifest = json.load(open(manifest_path)) if os.path.exists(manifest_path) and wanted else {"cases": {}}
    models_info = {}
    for mname, spec in MODELS.items():
        cases = [c for c in CASES if c["model"] == mname and (not wanted or c["name"] in wanted)]
        golden = mname == GOLDEN_MODEL and (not wanted or "golden" in wanted)
        if not cases and not golden:
            continue
        cfg = make_config(spec, mname)
        mdir = os.path.join(out, mname)
        os.makedirs(mdir, exist_ok=True)
        with open(os.path.join(mdir, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2)
            f.write("\n")
        if spec["weights"] is None:
            make_random.write_checkpoint(cfg, spec["seed"], mdir)
            shard = os.path.join(mdir, "model-00001-of-000001.safetensors")
        else:
            shard = os.path.join(args.shared, spec["weights"], "model-00001-of-000001.safetensors")
        weights = read_safetensors_f32(shard)
        models_info[mname] = dict(seed=spec["seed"], weights=spec["weights"] or f"{mname}/model-00001-of-000001.safetensors",
                                  shard_sha256=sha256_file(shard), shard_bytes=os.path.getsize(shard),
                                  parameters=int(sum(v.size for v in weights.values())))
        install_shims(torch, mu, mv, de, spec)
        model = build_model(torch, mu, cfg, weights)
        for case in cases:
            cdir = os.path.join(out, "cases", case["name"])
            shutil.rmtree(cdir, ignore_errors=True)
            os.makedirs(cdir)
            res = run_case(torch, mu, model, cfg, tokenizer, case, img_dir, cdir, os.path.join(args.work, "infer_out"))
            manifest["cases"][case["name"]] = {k: res[k] for k in ("model", "mode", "images", "prompt_len",
                                                                  "visual_tokens", "gen")}
            print(json.dumps(res), flush=True)
        if golden:
            gdir = os.path.join(out, "golden")
            shutil.rmtree(gdir, ignore_errors=True)
            os.makedirs(gdir)
            name, w, h, seed = GOLDEN_PAGE
            render_page(w, h, seed).save(os.path.join(gdir, name), optimize=True)
            print(json.dumps(run_golden(torch, mu, model, cfg, tokenizer, gdir, os.path.join(args.work, "infer_out"))),
                  flush=True)
        del model
    manifest.setdefault("models", {}).update(models_info)
    manifest["upstream_sha256"] = hashes
    manifest["versions"] = dict(python=platform.python_version(), torch=torch.__version__,
                                transformers=transformers.__version__, pillow=PIL.__version__,
                                numpy=np.__version__)
    manifest["images"] = {f: dict(size=[w, h], sha256=sha256_file(os.path.join(img_dir, f)))
                          for f, (w, h, _) in IMAGES.items()}
    with open(manifest_path, "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
