"""Trains the uocr demo model (Unlimited-OCR architecture, small dims) on CPU or a GPU (gpu_train.sh).

Data: pages rendered on the fly by uocr_dev.data (curriculum levels 0..4), one or several
pages per document. Decoder target = the markdown (single page) or "<PAGE>" + page 1 + "<PAGE>" +
page 2 ... (several pages), then EOS; prompt = [BOS] + visual tokens + "document parsing." /
"Multi page parsing."; the attention mask is the R-SWA mask the engine uses at inference.

Losses (only the first one is what inference uses; the others shape training and their heads
are not saved in the exported checkpoint):
  lm      next-token cross entropy on the target;
  grid    a training-only linear head on the visual tokens predicts, for every 16x8-pixel cell
          of the page (each visual token = a 4x8 block of cells), the character whose centre lies
          in it (or blank): it forces the encoder to put every glyph into the right visual token;
  attn    attention supervision: head 0 of decoder layers >= 1 is pushed to attend to the visual
          token(s) holding the first drawn character of the token being predicted;
  moe     the usual MoE load-balancing term.

    python3 -m uocr_dev.train --overfit-one-batch                  # pipeline check (minutes)
    nohup nice -n 19 python3 -m uocr_dev.train --out /tmp/uocr-train > /tmp/uocr-train/log.txt &
    nice -n 19 python3 -m uocr_dev.train --out /tmp/uocr-train --resume   # continue a run
"""
import argparse
import json
import math
import os
import queue
import random
import threading
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from uocr_dev import ROOT, infer
from uocr_dev.data import LEVELS, Renderer, normalise, page_u8, to_tensor_array
from uocr_dev.model import UnlimitedOCR, count_params, make_config, rswa_mask
from uocr_dev.sequence import join_pages, prompt_ids
from uocr_dev.tokenizer import PAGE_MARK, Tok

SUB_H, SUB_W = 4, 8  # fine cells per visual token (rows x cols) for the grid loss
BOUNDARY_TOKENS = 4  # page text tokens after each "<PAGE>" that count as its boundary (lm_b)
N_CHAR = 96  # 0 = blank, 1..95 = printable ASCII 32..126


class AuxHeads(nn.Module):
    """Training-only heads (never exported)."""

    def __init__(self, hidden):
        super().__init__()
        self.grid = nn.Linear(hidden, SUB_H * SUB_W * N_CHAR)

    def grid_logits(self, grid):  # grid [N, g, g, C] -> [N, g*SUB_H, g*SUB_W, N_CHAR]
        N, g = grid.shape[0], grid.shape[1]
        x = self.grid(grid).view(N, g, g, SUB_H, SUB_W, N_CHAR)
        return x.permute(0, 1, 3, 2, 4, 5).reshape(N, g * SUB_H, g * SUB_W, N_CHAR)


def make_doc(renderer, n_pages, level, mix_lower=0.3):
    pages = []
    for _ in range(n_pages):
        lv = level if (level == 0 or renderer.rng.random() > mix_lower) else renderer.rng.randint(0, level - 1)
        pages.append(renderer.page(lv))
    return pages


def virtual_place(rng, n_pages, max_pages):
    """Where a rendered group of n_pages sits in a longer document that is not rendered: page groups
    (infinite decoding) hold a few pages of an N-page document at their one-shot positions, the
    prompt's tail after page N-1 and the text after everything generated before (MODEL-SPEC
    positions), so the decoder sees large gaps between the pages held, the tail and its text.
    -> (N, index of the first rendered page, scale of the text before it vs. these pages' text)."""
    n = int(round(math.exp(rng.uniform(math.log(n_pages), math.log(max(n_pages, max_pages))))))
    return n, rng.randint(0, n - n_pages), rng.uniform(0.7, 1.3)


def build_batch(docs, tok, d, places=None):
    """docs: list of documents (each a list of (img, md, chars)), all with the same page count;
    places: None (each document is whole) or a virtual_place() per document."""
    S, g = d.image_size, d.tok_grid
    cell = S // g
    n_pages = len(docs[0])
    tpp = d.tokens_per_page
    prompt = prompt_ids(tok, n_pages, tpp)
    P = len(prompt)
    pix, tgts, locs, grid_labels, texts, bounds = [], [], [], [], [], []
    gh, gw = g * SUB_H, g * SUB_W
    ch, cw = S / gh, S / gw
    for doc in docs:
        text, offs = join_pages([p[1] for p in doc])
        texts.append(text)
        ids, offsets = tok.encode_offsets(text)
        ids = ids + [tok.eos]
        # visual token positions (in the decoder sequence) of every drawn character
        char_pos = {}
        for pi, (img, md, chars) in enumerate(doc):
            pix.append(page_u8(img))
            lab = np.zeros((gh, gw), dtype=np.int64)
            for (k, x0, y0, x1, y1) in chars:
                c = md[k]
                # cells under the character's core: ignored; its centre cell: labelled
                cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
                r0, r1 = int(max(0, y0) // ch), int(min(S - 1, y1) // ch)
                c0, c1 = int(max(0, x0) // cw), int(min(S - 1, x1) // cw)
                lab[r0:r1 + 1, c0:c1 + 1] = -100
                if 0 <= cx < S and 0 <= cy < S:
                    lab[int(cy // ch), int(cx // cw)] = (ord(c) - 31) if 32 <= ord(c) < 127 else -100
                # visual tokens overlapped by the central half of the character
                qx0, qx1 = cx - (x1 - x0) / 4, cx + (x1 - x0) / 4
                qy0, qy1 = cy - (y1 - y0) / 4, cy + (y1 - y0) / 4
                rows = range(int(max(0, qy0) // cell), int(min(S - 1, qy1) // cell) + 1)
                cols = range(int(max(0, qx0) // cell), int(min(S - 1, qx1) // cell) + 1)
                char_pos[offs[pi] + k] = [1 + pi * tpp + r * (g + 1) + c for r in rows for c in cols]
            grid_labels.append(lab)
        # per target token: where its first drawn character is (or the next drawn one)
        drawn = sorted(char_pos)
        loc, last = [], []
        j = 0
        for t, (a, b) in enumerate(offsets):
            while j < len(drawn) and drawn[j] < a:
                j += 1
            loc.append(char_pos[drawn[j]] if j < len(drawn) else [])
            inside = [c for c in range(a, b) if c in char_pos]
            last.append(char_pos[inside[-1]] if inside else [])
        loc.append([])  # EOS
        tgts.append(ids)
        bounds.append(boundary_tokens(offsets, offs, len(ids)) if len(doc) > 1 else [])
        locs.append((loc, last))
    T = max(len(t) for t in tgts)
    B = len(docs)
    inp = torch.full((B, P + T - 1), tok.pad, dtype=torch.long)
    labels = torch.full((B, T), -100, dtype=torch.long)
    att = torch.zeros(B, T, P)  # query k (predicting target k): where target k's first drawn char is
    att_ok = torch.zeros(B, T, dtype=torch.bool)
    cur = torch.zeros(B, T, P)  # query k >= 1 (input = target k-1): where its last drawn char is
    cur_ok = torch.zeros(B, T, dtype=torch.bool)
    boundary = torch.zeros(B, T, dtype=torch.bool)
    for b, ids in enumerate(tgts):
        boundary[b, bounds[b]] = True
        inp[b, :P] = torch.tensor(prompt)
        inp[b, P:P + len(ids) - 1] = torch.tensor(ids[:-1])
        labels[b, :len(ids)] = torch.tensor(ids)
        nxt, last = locs[b]
        for k, pos in enumerate(nxt):
            if pos:
                att[b, k, pos] = 1.0
                att_ok[b, k] = True
        for k, pos in enumerate(last):
            if pos and k + 1 < T:
                cur[b, k + 1, pos] = 1.0
                cur_ok[b, k + 1] = True
    pos = torch.arange(P + T - 1).repeat(B, 1)
    for b, (n_doc, first, scale) in enumerate(places or []):
        pos[b, 1:1 + n_pages * tpp] += first * tpp  # the pages' slots (after BOS)
        pos[b, 1 + n_pages * tpp:] += (n_doc - n_pages) * tpp  # the tail and the text after all pages
        pos[b, P:] += int(round(first * len(tgts[b]) / n_pages * scale))  # text of the earlier pages
    return dict(pix=torch.from_numpy(np.stack(pix)), inp=inp, pos=pos, labels=labels, boundary=boundary, P=P, T=T,
                att=att, att_ok=att_ok, cur=cur, cur_ok=cur_ok,
                grid=torch.from_numpy(np.stack(grid_labels)), texts=texts, n_pages=n_pages)


def boundary_tokens(offsets, page_offsets, n_ids):
    """Target indices where a multi-page document's reading decides which page comes next: every
    "<PAGE>" marker, the first BOUNDARY_TOKENS tokens of the page it opens, and the final EOS
    (index n_ids - 1). A long session's errors are made there: a page skipped or read twice."""
    out = []
    for start in page_offsets:
        first = [t for t, (a, _) in enumerate(offsets) if a >= start - len(PAGE_MARK)]
        text = [t for t, (a, _) in enumerate(offsets) if a >= start]
        if first:
            end = text[0] + BOUNDARY_TOKENS if text else len(offsets)
            out.extend(range(first[0], min(end, len(offsets))))
    return sorted(set(out)) + [n_ids - 1]


def sup_plan(n_layers):
    """Which decoder layer's head 0 is supervised towards what: layer 1 -> the current token's
    place on the page, later layers -> the next token's place (layer 0 only gathers context)."""
    if n_layers <= 2:
        return {i: "next" for i in range(1, n_layers)}
    return {1: "cur", **{i: "next" for i in range(2, n_layers)}}


class BatchStream(torch.utils.data.IterableDataset):
    """Endless training batches; with DataLoader workers each worker renders its own pages.
    `level` is a shared multiprocessing.Value so the curriculum reaches the workers."""

    def __init__(self, tok_path, d, batch_pages, level, multi_frac, multi_level, seed, virtual_frac=0.0,
                 virtual_max_pages=1, multi_max_level=None, multi_pages=(2, 3, 4)):
        self.tok_path, self.d, self.batch_pages = tok_path, d, batch_pages
        self.level, self.multi_frac, self.multi_level, self.seed = level, multi_frac, multi_level, seed
        self.multi_max_level, self.multi_pages = multi_max_level, list(multi_pages)
        self.virtual_frac, self.virtual_max_pages = virtual_frac, virtual_max_pages

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        wid = info.id if info is not None else 0
        tok = Tok(self.tok_path)
        r = Renderer(size=self.d.image_size, seed=self.seed + 100003 * wid, level=self.level.value)
        while True:
            level = self.level.value
            n_pages = 1
            if level >= self.multi_level and r.rng.random() < self.multi_frac:
                n_pages = r.rng.choice(self.multi_pages)
                if self.multi_max_level is not None:
                    level = min(level, self.multi_max_level)
            n_docs = max(1, self.batch_pages // n_pages)
            docs = [make_doc(r, n_pages, level) for _ in range(n_docs)]
            places = None
            if n_pages > 1 and r.rng.random() < self.virtual_frac:
                places = [virtual_place(r.rng, n_pages, self.virtual_max_pages) for _ in docs]
            yield build_batch(docs, tok, self.d, places)


def to_device(batch, dev):
    return {k: (v.to(dev, non_blocking=True) if torch.is_tensor(v) else v) for k, v in batch.items()}


def forward_losses(model, aux, batch, tok, sup_layers, head_only=False):
    """head_only: the grid loss trains the grid head alone (a fresh head's gradients would
    disturb a trained encoder until the head has caught up). `lm_b`: the lm loss over the page
    boundary tokens alone (boundary_tokens(); nan in a batch of single pages)."""
    d = model.d
    dev = next(model.parameters()).device
    batch = to_device(batch, dev)
    B, P, T = batch["inp"].shape[0], batch["P"], batch["T"]
    vis, grid = model.encode_pages(normalise(batch["pix"]), return_grid=True)
    h = model.model.embed_tokens(batch["inp"])
    img = batch["inp"] == tok.image
    h = h.masked_scatter(img[..., None], vis.reshape(-1, d.hidden).to(h.dtype))
    mask = rswa_mask(P, T - 1, d.window, device=dev)[None, None]
    out, probs = model.decode(h, batch["pos"], mask, want_probs=[0], probs_layers=sup_layers)
    logits = model.lm_head(out[:, P - 1:])  # [B, T, V]
    labels = batch["labels"]
    ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100,
                         reduction="none").view_as(labels)
    valid = labels != -100
    at_b = batch["boundary"] & valid
    lm = ce[valid].mean()
    lm_b = ce[at_b].mean() if bool(at_b.any()) else torch.full((), float("nan"), device=dev)
    # grid loss
    gl = aux.grid_logits(grid.detach() if head_only else grid).reshape(-1, N_CHAR)
    lab = batch["grid"].reshape(-1)
    is_char, is_blank = lab > 0, lab == 0
    # character cells and blank cells averaged separately: blanks are ~95% of the cells
    grid_loss = F.cross_entropy(gl[is_char], lab[is_char]) + 0.2 * F.cross_entropy(gl[is_blank], lab[is_blank])
    with torch.no_grad():
        grid_acc = (gl[is_char].argmax(-1) == lab[is_char]).float().mean()
    # attention supervision on queries P-1 .. P+T-2 (the ones that predict target tokens)
    att_loss = torch.zeros((), device=dev)
    if sup_layers:
        for li, what in sup_layers.items():
            tgt, ok = (batch["att"], batch["att_ok"]) if what == "next" else (batch["cur"], batch["cur_ok"])
            p = probs[li][:, 0, P - 1:, :P]  # [B, T, P]
            mass = (p * tgt).sum(-1)
            att_loss = att_loss + (-torch.log(mass + 1e-4))[ok].mean() / len(sup_layers)
    moe = model.moe_aux_loss()
    return dict(lm=lm, lm_b=lm_b, grid=grid_loss, attn=att_loss, moe=moe, gacc=grid_acc, logits=logits)


def lr_at(step, args, hours=0.0):
    """Warm-up, then a cosine over --steps steps, or over --max-hours of wall time (a timed run
    on a machine whose speed is not known in advance ends with the rate decayed)."""
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    if args.schedule == "time":
        t = min(1.0, hours / args.max_hours)
    else:
        t = min(1.0, (step - args.warmup) / max(1, args.steps - args.warmup))
    return args.lr * (args.min_lr_frac + (1 - args.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * t)))


class Batches:
    """Training batches for the loop: the next fresh one when the render workers have it ready,
    else (with reuse > 1, when rendering is slower than the device's steps) one of the last
    `keep` batches again, each used at most `reuse` times in all. Batches stay on the device."""

    def __init__(self, loader, dev, reuse, keep=32):
        self.dev, self.reuse, self.keep = dev, reuse, keep
        self.fresh = queue.Queue(maxsize=2)
        self.recent = []  # [batch, uses left]
        self.rng = random.Random(0)
        threading.Thread(target=self._pull, args=(loader,), daemon=True).start()

    def _pull(self, loader):
        while True:
            try:
                self.fresh.put(next(loader))
            except BaseException as e:  # a dead render worker must stop training, not hang it
                self.fresh.put(e)
                return

    def next(self):
        """-> (batch, is_fresh)"""
        try:
            b = self.fresh.get_nowait()
        except queue.Empty:
            again = [e for e in self.recent if e[1] > 0]
            if again:
                e = self.rng.choice(again)
                e[1] -= 1
                return e[0], False
            b = self.fresh.get()
        if isinstance(b, BaseException):
            raise RuntimeError("page rendering failed") from b
        b = to_device(b, self.dev)
        if self.reuse > 1:  # kept only to be used again
            self.recent.append([b, self.reuse - 1])
            del self.recent[:-self.keep]
        return b, True


def evaluate(model, tok, level, n_docs, n_pages=1, seed=999, show=0):
    model.eval()
    r = Renderer(size=model.d.image_size, seed=seed + 17 * level + 1000 * n_pages, level=level)
    tot_e = tot_n = 0
    samples = []
    for i in range(n_docs):
        pages = [r.page() for _ in range(n_pages)]
        ref = join_pages([p[1] for p in pages])[0]
        pix = torch.from_numpy(np.stack([to_tensor_array(p[0]) for p in pages]))
        hyp = infer.text_of(tok, infer.generate(model, tok, pix, max_new=int(len(ref) * 0.8) + 20))
        tot_e += infer.edit_distance(hyp, ref)
        tot_n += len(ref)
        if i < show:
            samples.append((ref, hyp))
    model.train()
    return tot_e / max(1, tot_n), samples


def init_source(path):
    """--init-from: a training checkpoint (model, aux heads, config) or an exported model folder
    such as models/uocr-demo (its weights and config.json; the training-only heads start afresh)."""
    if os.path.isdir(path):
        model, _ = infer.load_folder(path)
        return dict(model=model.state_dict(), config=model.cfg)
    return torch.load(path, map_location="cpu", weights_only=False)


def param_groups(model, aux, wd):
    decay, no = [], []
    for mod in (model, aux):
        for n, p in mod.named_parameters():
            (decay if p.dim() >= 2 and "embed" not in n and "pos" not in n else no).append(p)
    return [dict(params=decay, weight_decay=wd), dict(params=no, weight_decay=0.0)]


def cpu_state(module):
    return {k: v.detach().cpu() for k, v in module.state_dict().items()}


def save(path, state):
    tmp = path + ".tmp"
    torch.save(state, tmp)
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="/tmp/uocr-train")
    ap.add_argument("--tokenizer", default=os.path.join(ROOT, "models", "uocr-demo", "tokenizer.json"))
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--overfit-one-batch", action="store_true")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--batch-pages", type=int, default=12, help="pages per step (docs x pages per doc)")
    ap.add_argument("--steps", type=int, default=40000, help="length of the cosine schedule")
    ap.add_argument("--lr", type=float, default=1.5e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=300)
    ap.add_argument("--wd", type=float, default=0.05)
    ap.add_argument("--w-grid", type=float, default=1.0)
    ap.add_argument("--w-attn", type=float, default=0.3)
    ap.add_argument("--w-moe", type=float, default=0.01)
    ap.add_argument("--level", type=int, default=0, help="starting curriculum level")
    ap.add_argument("--set-level", type=int, help="with --resume: continue at this curriculum level")
    ap.add_argument("--advance-cer", type=float, default=0.12, help="held-out CER that moves to the next level")
    ap.add_argument("--multi-frac", type=float, default=0.25, help="share of multi-page steps from --multi-level on")
    ap.add_argument("--multi-level", type=int, default=2, help="curriculum level from which steps may hold multi-page documents")
    ap.add_argument("--multi-pages", type=lambda v: [int(x) for x in v.split(",")], default=[2, 3, 4],
                    help="page counts of multi-page documents, one drawn per step (3: the documents page groups of "
                         "G = 3 show the decoder)")
    ap.add_argument("--multi-max-level", type=int,
                    help="render multi-page documents at most at this level (default: the curriculum's)")
    ap.add_argument("--virtual-frac", type=float, default=0.0,
                    help="share of multi-page documents placed inside a longer unrendered one (page-group positions)")
    ap.add_argument("--virtual-max-pages", type=int, default=400, help="longest such document")
    ap.add_argument("--eval-min", type=float, default=10.0)
    ap.add_argument("--ckpt-min", type=float, default=5.0)
    ap.add_argument("--eval-docs", type=int, default=8)
    ap.add_argument("--max-hours", type=float, default=1e9)
    ap.add_argument("--schedule", choices=("steps", "time"), default="steps",
                    help="cosine over --steps, or over --max-hours of wall time")
    ap.add_argument("--reuse", type=int, default=1,
                    help="train on a rendered batch up to this many times while the renderers are behind")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--workers", type=int, default=0, help="DataLoader processes rendering pages (0: in the main process)")
    ap.add_argument("--dims", default="{}", help="JSON overrides of model.DEMO_DIMS")
    ap.add_argument("--init-from", help="checkpoint or model folder whose matching tensors (and aux heads) start a new run")
    ap.add_argument("--head-warmup", type=int,
                    help="steps in which the grid loss trains only its head (default: 500 when the head "
                         "starts afresh from --init-from a model folder, else 0)")
    ap.add_argument("--init-prefix", help="comma-separated name prefixes to copy with --init-from")
    a = ap.parse_args()
    if not a.multi_pages or min(a.multi_pages) < 2:
        ap.error(f"--multi-pages: page counts of 2 or more, got {a.multi_pages}")
    if a.schedule == "time" and a.max_hours >= 1e9:
        ap.error("--schedule time needs --max-hours")
    if a.reuse < 1:
        ap.error("--reuse must be >= 1")
    torch.set_num_threads(a.threads)
    os.makedirs(a.out, exist_ok=True)
    tok = Tok(a.tokenizer)
    random.seed(a.seed)
    np.random.seed(a.seed)
    torch.manual_seed(a.seed)

    ck_path = os.path.join(a.out, "ckpt.pt")
    state = src = None
    if a.resume and os.path.exists(ck_path):
        state = torch.load(ck_path, map_location="cpu", weights_only=False)
        cfg = state["config"]
    else:
        src = init_source(a.init_from) if a.init_from else None
        # the starting point's config.json (written where tests/data/unlimited-ocr has the published one) unless
        # --dims asks for other sizes
        cfg = src["config"] if src is not None and not json.loads(a.dims) else \
            make_config(json.loads(a.dims), vocab_size=tok.vocab_size)
    model = UnlimitedOCR(cfg)
    d = model.d
    aux = AuxHeads(d.hidden)
    with torch.no_grad():
        aux.grid.weight.normal_(0, 1 / math.sqrt(d.hidden))
        aux.grid.bias.zero_()
    opt = torch.optim.AdamW(param_groups(model, aux, a.wd), lr=a.lr, betas=(0.9, 0.98), eps=1e-8)
    sup_layers = sup_plan(d.layers)
    step, level, cpu_total, pages_seen, history, best = 0, a.level, 0.0, 0, [], None
    head_warmup = a.head_warmup or 0
    if src is not None:
        own = model.state_dict()
        took = {k: v for k, v in src["model"].items() if k in own and own[k].shape == v.shape
                and (a.init_prefix is None or any(k.startswith(p) for p in a.init_prefix.split(",")))}
        model.load_state_dict(took, strict=False)
        if "aux" in src:
            aux.load_state_dict(src["aux"])
        elif a.head_warmup is None:
            head_warmup = 500
        print(f"init-from {a.init_from}: {len(took)} of {len(own)} tensors copied", flush=True)
    if state is not None:
        model.load_state_dict(state["model"])
        aux.load_state_dict(state["aux"])
        opt.load_state_dict(state["opt"])
        step, level, cpu_total = state["step"], state["level"], state["cpu_total"]
        pages_seen, history, best = state["pages_seen"], state["history"], state.get("best")
        if a.set_level is not None:
            level = a.set_level
        print(f"resumed {ck_path}: step {step}, level {level}, {cpu_total / 3600:.2f} CPU h so far", flush=True)
    print(f"model: {count_params(model):,} parameters (exported), aux heads {sum(p.numel() for p in aux.parameters()):,}; "
          f"{d.tokens_per_page} visual tokens/page; R-SWA n={d.window}", flush=True)
    dev = torch.device(a.device)
    model.to(dev)
    aux.to(dev)
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    if state is not None:  # optimizer state follows the parameters' device
        for st in opt.state.values():
            for k, v in st.items():
                if torch.is_tensor(v):
                    st[k] = v.to(dev)
    renderer = Renderer(size=d.image_size, seed=a.seed + 7919 * step, level=level)

    if a.overfit_one_batch:
        return overfit(model, aux, opt, tok, renderer, a, sup_layers)

    import multiprocessing as mp
    level_v = mp.Value("i", level)
    stream = BatchStream(a.tokenizer, d, a.batch_pages, level_v, a.multi_frac, a.multi_level,
                         a.seed + 7919 * step, a.virtual_frac, a.virtual_max_pages, a.multi_max_level,
                         a.multi_pages)
    if a.workers > 0:
        loader = iter(torch.utils.data.DataLoader(stream, batch_size=None, num_workers=a.workers, prefetch_factor=2,
                                                  persistent_workers=True, pin_memory=dev.type == "cuda"))
    else:
        loader = iter(stream)
    batches = Batches(loader, dev, a.reuse)

    t_proc0, t_wall0 = time.process_time(), time.time()
    last_eval = last_ck = time.time()
    run_loss = {}
    reused = 0

    def checkpoint():
        cpu_now = cpu_total + time.process_time() - t_proc0
        save(ck_path, dict(config=cfg, model=cpu_state(model), aux=cpu_state(aux), opt=opt.state_dict(), step=step,
                           level=level, cpu_total=cpu_now, pages_seen=pages_seen, history=history, best=best,
                           args=vars(a)))

    model.train()
    while True:
        if (time.time() - t_wall0) / 3600 > a.max_hours:
            checkpoint()  # a timed run (a rented GPU) ends with its last step saved
            print(f"stopped after {a.max_hours:.3g} h: step {step}, {ck_path}", flush=True)
            break
        batch, fresh = batches.next()
        n_docs, n_pages = len(batch["texts"]), batch["n_pages"]
        hours = (time.time() - t_wall0) / 3600
        for g in opt.param_groups:
            g["lr"] = lr_at(step, a, hours)
        losses = forward_losses(model, aux, batch, tok, sup_layers, head_only=step < head_warmup)
        loss = losses["lm"] + a.w_grid * losses["grid"] + a.w_attn * losses["attn"] + a.w_moe * losses["moe"]
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(list(model.parameters()) + list(aux.parameters()), 1.0)
        opt.step()
        step += 1
        if fresh:
            pages_seen += n_docs * n_pages
        else:
            reused += 1
        for k in ("lm", "lm_b", "grid", "attn", "moe", "gacc"):
            v = float(losses[k].detach())
            if not math.isnan(v):  # lm_b: single-page steps have no boundary
                run_loss[k] = run_loss[k] * 0.95 + v * 0.05 if k in run_loss else v
        if step % 25 == 0:
            el = time.time() - t_wall0
            print(f"step {step} lvl {level} pages {pages_seen} (steps on reused batches: {reused}) lr {lr_at(step, a, hours):.2e} "
                  f"lm {run_loss['lm']:.3f} (boundaries {run_loss.get('lm_b', float('nan')):.3f}) grid {run_loss['grid']:.3f} (char acc {run_loss['gacc']:.2f}) attn {run_loss['attn']:.3f} "
                  f"moe {run_loss['moe']:.3f} "
                  f"gn {float(gn):.2f} | {el / 60:.1f} min wall, cpu {(cpu_total + time.process_time() - t_proc0) / 3600:.2f} h",
                  flush=True)
        now = time.time()
        if now - last_eval > a.eval_min * 60:
            c_lvl, samples = evaluate(model, tok, level, a.eval_docs, show=1)
            c_top, _ = evaluate(model, tok, len(LEVELS) - 1, a.eval_docs) if level < len(LEVELS) - 1 else (c_lvl, None)
            cpu_h = (cpu_total + time.process_time() - t_proc0) / 3600
            rec = dict(step=step, pages=pages_seen, level=level, cer_level=c_lvl, cer_top=c_top, lm=run_loss["lm"],
                       grid=run_loss["grid"], grid_char_acc=run_loss["gacc"], attn=run_loss["attn"], cpu_h=cpu_h,
                       wall=time.strftime("%H:%M:%S"))
            history.append(rec)
            print("EVAL", json.dumps(rec), flush=True)
            print(f"  REF {samples[0][0][:150]!r}\n  HYP {samples[0][1][:150]!r}", flush=True)
            if best is None or c_top < best["cer_top"]:
                best = rec
                save(os.path.join(a.out, "best.pt"), dict(config=cfg, model=cpu_state(model), step=step, rec=rec))
            if c_lvl < a.advance_cer and level < len(LEVELS) - 1:
                level += 1
                level_v.value = level
                print(f"curriculum -> level {level}", flush=True)
            last_eval = time.time()
            last_ck = 0  # checkpoint right after an eval
        if time.time() - last_ck > a.ckpt_min * 60:
            checkpoint()
            last_ck = time.time()


def overfit(model, aux, opt, tok, renderer, a, sup_layers):
    """Trains on ONE fixed batch; prints loss and the greedy CER on that batch."""
    d = model.d
    docs = [make_doc(renderer, 1, a.level, mix_lower=0.0) for _ in range(a.batch_pages)]
    batch = build_batch(docs, tok, d)
    print(f"overfit: {len(docs)} pages, level {a.level}, {sum(len(t) for t in batch['texts'])} chars, "
          f"T={batch['T']} tokens, P={batch['P']}", flush=True)
    t0, c0 = time.time(), time.process_time()
    model.train()
    for step in range(1, 2001):
        for g in opt.param_groups:
            g["lr"] = a.lr * min(1.0, step / 30)
        losses = forward_losses(model, aux, batch, tok, sup_layers)
        loss = losses["lm"] + a.w_grid * losses["grid"] + a.w_attn * losses["attn"] + a.w_moe * losses["moe"]
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(model.parameters()) + list(aux.parameters()), 1.0)
        opt.step()
        if step % 10 == 0:
            print(f"step {step} lm {float(losses['lm']):.4f} grid {float(losses['grid']):.3f} "
                  f"(char acc {float(losses['gacc']):.2f}) attn {float(losses['attn']):.3f} "
                  f"{time.time() - t0:.0f}s", flush=True)
        if step % 50 == 0 or float(losses["lm"]) < 0.01:
            model.eval()
            e = n = 0
            for i, doc in enumerate(docs):
                pix = torch.from_numpy(np.stack([to_tensor_array(p[0]) for p in doc]))
                hyp = infer.text_of(tok, infer.generate(model, tok, pix, max_new=300))
                e += infer.edit_distance(hyp, batch["texts"][i])
                n += len(batch["texts"][i])
                if i == 0:
                    print(f"  REF {batch['texts'][0][:120]!r}\n  HYP {hyp[:120]!r}")
            model.train()
            c = e / n
            print(f"OVERFIT step {step}: greedy CER {c:.4f} on the batch, {time.time() - t0:.0f}s wall, "
                  f"{time.process_time() - c0:.0f}s cpu", flush=True)
            if c < 0.005:
                break


if __name__ == "__main__":
    main()
