"""Language-model and attention-supervision loss of a model on the same multi-page documents,
whole and placed inside longer unrendered documents (train.py's virtual_place: the positions page
groups give the decoder in a long document). Shows whether a model reads at long-document
positions (docs/TRAINING.md §7, run v1), and how sure it is where pages begin and end (the loss on
train.boundary_tokens(): where a long session skips a page or reads one twice).

    python3 -m uocr_dev.position_loss models/uocr-demo /tmp/uocr-train/ckpt.pt
"""
import argparse
import os
import random

import torch

from uocr_dev import ROOT, train
from uocr_dev.data import Renderer
from uocr_dev.model import UnlimitedOCR
from uocr_dev.tokenizer import Tok


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="+", help="training checkpoints or model folders")
    ap.add_argument("--tokenizer", default=os.path.join(ROOT, "models", "uocr-demo", "tokenizer.json"))
    ap.add_argument("--docs", type=int, default=6)
    ap.add_argument("--pages", type=int, default=3)
    ap.add_argument("--level", type=int, default=1)
    ap.add_argument("--seed", type=int, default=4242, help="renderer seed")
    ap.add_argument("--place-seed", type=int, default=7)
    ap.add_argument("--max-pages", type=int, default=400, help="longest unrendered document")
    a = ap.parse_args()
    torch.set_num_threads(1)
    tok = Tok(a.tokenizer)
    r = Renderer(size=512, seed=a.seed, level=a.level)
    docs = [train.make_doc(r, a.pages, a.level, mix_lower=0.0) for _ in range(a.docs)]
    rng = random.Random(a.place_seed)
    places = [train.virtual_place(rng, a.pages, a.max_pages) for _ in docs]
    for path in a.models:
        src = train.init_source(path)
        model = UnlimitedOCR(src["config"])
        model.load_state_dict(src["model"])
        model.eval()
        aux = train.AuxHeads(model.d.hidden)  # the grid loss is not reported; forward_losses needs a head
        row = []
        for kind, where in (("whole", None), ("placed", places)):
            batch = train.build_batch(docs, tok, model.d, where)
            with torch.no_grad():
                losses = train.forward_losses(model, aux, batch, tok, train.sup_plan(model.d.layers))
            row.append(f"{kind}: lm {float(losses['lm']):.3f} (page boundaries {float(losses['lm_b']):.3f}) "
                       f"attn {float(losses['attn']):.3f}")
        print(f"{path} (step {src.get('step', '-')}): " + " | ".join(row), flush=True)


if __name__ == "__main__":
    main()
