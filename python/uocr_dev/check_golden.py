"""Parity check of uocr_dev.model against the upstream reference outputs in
shared/golden/tiny-a (random weights, computed by the original DeepSeek-OCR PyTorch code).

Loads the golden safetensors into UnlimitedOCR with the golden config.json and compares
sam_out, clip_out, vision_tokens, prefill logits and the teacher-forced R-SWA (n=8) logits.
Exit status 0 when every max abs difference is below 1e-4 (the README's suggested tolerance).

    python3 -m uocr_dev.check_golden [--golden ../shared/golden/tiny-a]
"""
import argparse
import json
import os
import sys

import numpy as np
import torch

from uocr_dev import ROOT, safetensors_io
from uocr_dev.model import UnlimitedOCR, rswa_mask


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--golden", default=os.path.join(os.path.dirname(ROOT), "shared", "golden", "tiny-a"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    g = args.golden
    cfg = json.load(open(os.path.join(g, "config.json")))
    m = UnlimitedOCR(cfg).eval()
    sd = safetensors_io.read(os.path.join(g, safetensors_io.SHARD))
    missing, unexpected = m.load_state_dict(sd, strict=True), None
    ok = True

    def cmp(name, a, b):
        nonlocal ok
        d = float((torch.as_tensor(a).float() - torch.as_tensor(b).float()).abs().max())
        good = d < 1e-4
        ok &= good
        print(f"{name:28s} max|diff| {d:.3g} {'ok' if good else 'FAIL'}")

    with torch.no_grad():
        img = torch.from_numpy(np.load(os.path.join(g, "image_normalized.npy")).astype(np.float32))
        sam = m.model.sam_model(img)
        cmp("sam_out", sam, np.load(os.path.join(g, "sam_out.npy")))
        clip = m.model.vision_model(sam)
        cmp("clip_out", clip, np.load(os.path.join(g, "clip_out.npy")))
        toks = m.encode_pages(img)[0]
        cmp("vision_tokens", toks, np.load(os.path.join(g, "vision_tokens.npy")))
        ids = torch.from_numpy(np.load(os.path.join(g, "input_ids.npy")))
        gen = torch.from_numpy(np.load(os.path.join(g, "gen_ids.npy")))
        P, T = len(ids), len(gen)
        allids = torch.cat([ids, gen])
        h = m.model.embed_tokens(allids)[None].clone()
        mask_img = torch.from_numpy(np.load(os.path.join(g, "images_seq_mask.npy")))
        h[0, :P][mask_img] = toks
        for variant, n in (("rswa_n8", 8), ("full_attention", 0)):
            mask = rswa_mask(P, T, n)[None, None]
            out, _ = m.decode(h, torch.arange(P + T), mask)
            logits = m.lm_head(out)[0]
            if variant == "rswa_n8":
                cmp("prefill_logits", logits[P - 1], np.load(os.path.join(g, "prefill_logits.npy")))
            rows = np.load(os.path.join(g, "logits_rows_gen_index.npy"))
            ref = np.load(os.path.join(g, f"{variant}_logits_rows.npy"))
            cmp(f"{variant}_logits_rows", logits[P + torch.from_numpy(rows)], ref)
            lse = np.load(os.path.join(g, f"{variant}_logits_lse.npy"))
            cmp(f"{variant}_lse", torch.logsumexp(logits[P:], -1), lse)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
