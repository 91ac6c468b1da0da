"""Greedy decoding of the demo model in PyTorch, the way uocr's C++ engine runs it.

Prompt = [BOS] + the visual tokens of every page (rows of G/4 tokens + image_newline, then
view_seperator, page after page) + encode("document parsing.") for one page or
encode("Multi page parsing.") for several; positions 0..P-1; prefill with full causal attention;
then greedy argmax one token at a time at positions P, P+1, ..., each new token attending to the
whole prompt plus the last n generated tokens including itself (R-SWA, n = sliding_window_size);
stop at EOS. No repetition guard. Weights may be rounded to bf16 first (--bf16, default on when
loading an exported folder), as the shipped checkpoint stores them.

    python3 -m uocr_dev.infer --model models/uocr-demo samples/data/page1.png [page2.png ...]
    python3 -m uocr_dev.infer --ckpt /tmp/uocr-train/best.pt --eval 16 --level 4
"""
import argparse
import json
import os

import numpy as np
import torch

from uocr_dev import ROOT, safetensors_io
from uocr_dev.model import UnlimitedOCR
from uocr_dev.sequence import join_pages, prompt_ids
from uocr_dev.tokenizer import Tok


@torch.no_grad()
def generate(model, tok, pixels, max_new=600, window=None):
    """pixels [N,3,S,S] (the pages of ONE document) -> generated ids (EOS included if reached)."""
    d = model.d
    dev = next(model.parameters()).device
    n = d.window if window is None else window
    vis = model.encode_pages(pixels.to(dev)).reshape(-1, d.hidden)  # [N*tpp, C]
    ids = prompt_ids(tok, pixels.shape[0], d.tokens_per_page)
    P = len(ids)
    idt = torch.tensor(ids, device=dev)
    h = model.model.embed_tokens(idt).clone()
    h[idt == tok.image] = vis
    caches = [dict() for _ in model.model.layers]
    mask = torch.full((P, P), float("-inf"), device=dev).triu(1)[None, None]
    out, _ = model.decode(h[None], torch.arange(P, device=dev), mask, caches=caches)
    nxt = int(model.lm_head(out[0, -1]).argmax())
    gen = [nxt]
    while nxt != tok.eos and len(gen) < max_new:
        k = len(gen)  # the k-th generated token is fed at position P+k-1
        S = P + k
        m = torch.zeros(1, 1, 1, S, device=dev)
        if n and n > 0:
            lo = P + max(0, k - n)  # generated tokens older than the last n are not visible
            m[..., P:lo] = float("-inf")
        x = model.model.embed_tokens(torch.tensor([nxt], device=dev))[None]
        out, _ = model.decode(x, torch.tensor([P + k - 1], device=dev), m, caches=caches)
        nxt = int(model.lm_head(out[0, -1]).argmax())
        gen.append(nxt)
    return gen


def text_of(tok, gen):
    s = tok.decode([g for g in gen if g != tok.eos])
    return s.strip()


def edit_distance(a, b):
    if len(a) < len(b):
        a, b = b, a
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


def cer(hyp, ref):
    return edit_distance(hyp, ref) / max(1, len(ref))


def load_folder(folder, bf16=True):
    with open(os.path.join(folder, "config.json")) as f:
        cfg = json.load(f)
    m = UnlimitedOCR(cfg).eval()
    with open(os.path.join(folder, "model.safetensors.index.json")) as f:
        index = json.load(f)
    sd = {}
    for shard in sorted(set(index["weight_map"].values())):
        sd.update(safetensors_io.read(os.path.join(folder, shard)))
    m.load_state_dict(sd, strict=True)
    return m, Tok(os.path.join(folder, "tokenizer.json"))


def round_bf16_(model):
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(safetensors_io.bf16_round(p))


def load_image(path, size):
    from PIL import Image, ImageOps
    img = Image.open(path)
    img = ImageOps.exif_transpose(img).convert("RGB")
    if img.size != (size, size):  # what uocr does for image_size <= 640: squash, then pad (no-op)
        img = img.resize((size, size), Image.BICUBIC)
    a = np.asarray(img, dtype=np.float32) / 255.0
    return torch.from_numpy(((a - 0.5) / 0.5).transpose(2, 0, 1).copy())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("images", nargs="*")
    ap.add_argument("--model", help="exported model folder")
    ap.add_argument("--ckpt", help="training checkpoint (.pt)")
    ap.add_argument("--tokenizer", default=os.path.join(ROOT, "models", "uocr-demo", "tokenizer.json"))
    ap.add_argument("--no-bf16", action="store_true")
    ap.add_argument("--eval", type=int, default=0, help="CER on N held-out generated pages")
    ap.add_argument("--level", type=int, default=4)
    ap.add_argument("--pages", type=int, default=1, help="pages per held-out document")
    ap.add_argument("--seed", type=int, default=999)
    ap.add_argument("--show", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(1)
    if a.model:
        model, tok = load_folder(a.model)
    else:
        ck = torch.load(a.ckpt, map_location="cpu", weights_only=False)
        model = UnlimitedOCR(ck["config"]).eval()
        model.load_state_dict(ck["model"])
        tok = Tok(a.tokenizer)
    if not a.no_bf16:
        round_bf16_(model)
    S = model.d.image_size
    if a.images:
        pix = torch.stack([load_image(p, S) for p in a.images])
        gen = generate(model, tok, pix)
        print(text_of(tok, gen))
    if a.eval:
        from uocr_dev.data import Renderer, to_tensor_array
        r = Renderer(size=S, seed=a.seed, level=a.level)
        tot_e = tot_n = 0
        for i in range(a.eval):
            pages = [r.page() for _ in range(a.pages)]
            ref = join_pages([p[1] for p in pages])[0]
            pix = torch.from_numpy(np.stack([to_tensor_array(p[0]) for p in pages]))
            hyp = text_of(tok, generate(model, tok, pix))
            e = edit_distance(hyp, ref)
            tot_e += e
            tot_n += len(ref)
            if a.show:
                print(f"--- {i}: CER {e / max(1, len(ref)):.3f}\nREF {ref!r}\nHYP {hyp!r}")
        print(f"CER {tot_e / max(1, tot_n):.4f} over {a.eval} documents ({tot_n} chars), level {a.level}, {a.pages} page(s)")


if __name__ == "__main__":
    main()
