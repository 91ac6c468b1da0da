"""uocr against the upstream PyTorch code on one page, in one sitting, the same model folder:

1. uocr: `uocr run --stats json` (vision, prefill, decode figures), then each `--uocr-run` variant;
2. upstream: the UNMODIFIED Unlimited-OCR remote code (loaded as make_reference.py loads it, from the
   five pinned .py files) on the CPU, `infer()`'s own preprocessing and prompt (base mode, 1024 px,
   `no_repeat_ngram_size=35, ngram_window=128` as upstream's README calls it), then its `generate()`
   with `max_new_tokens=N`, in float32 and then as the README runs the model (cast to bf16, under
   bf16 autocast), timed by forward hooks: vision = SAM + CLIP + projector, prefill = the first
   forward minus vision, decode = the rest of generate() (its n-gram processor included, as uocr's
   decode includes its own).

Both greedy with the same n-gram rule, both stop at N tokens or the end of sequence; uocr's loop
guard is off (upstream has none). "end to end" is vision + prefill + decode (model loading and image
decoding left out on both sides). Each repeat runs everything once; figures are medians. The last
lines say which runs wrote the same text.

    PYTHONPATH=python python bench/upstream_side_by_side.py --model DIR --upstream UPSTREAM_DIR \\
        [--tokens 1000] [--repeats 1] [--page PAGE.png] [--uocr build/tools/uocr]
        [--uocr-run NAME=ARGS ...] [--upstream-precision f32,bf16] [--upstream-threads 2]

DIR is a model folder in the upstream layout (e.g. `python -m uocr_dev.make_random --out DIR`, the real
dimensions); UPSTREAM_DIR holds the five upstream .py files (python/uocr_dev/fixtures/make_reference.md).
It needs torch 2.5.1 + torchvision 0.20.1 + transformers 4.46.3 + Pillow < 12.2 (and upstream's
imports: einops, addict, easydict) and about 14 GB of memory for the float32 model. `--uocr-run`
adds uocr variants, e.g. `"uocr bf16=--precision bf16"` or `"uocr int8=--model INT8_DIR"`.
"""
import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

from uocr_dev import ROOT
from uocr_dev.fixtures import make_reference

GOLDEN_PAGE = os.path.join(ROOT, "tests", "data", "reference", "golden", "page.png")
NGRAM, NGRAM_WINDOW = 35, 128


def run_uocr(uocr, model, page, tokens, extra, work):
    out = os.path.join(work, "uocr.md")
    cmd = [uocr, "run", "--model", model, "--mode", "base", "--max-tokens", str(tokens), "--ngram", str(NGRAM),
           "--ngram-window", str(NGRAM_WINDOW), "--loop-guard", "off", "--draft", "off", "--format", "raw",
           "--stats", "json", "--quiet", "-o", out] + extra + [page]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if p.returncode not in (0, 3):  # 3: stopped at --max-tokens, as asked
        sys.exit("upstream_side_by_side.py: %s failed (exit %d): %s" % (shlex.join(cmd), p.returncode, p.stderr[-500:]))
    stats = next(json.loads(line) for line in (p.stdout + p.stderr).splitlines() if line.startswith("{"))
    with open(out, encoding="utf-8") as f:
        text = f.read()
    return dict(vision=stats["vision_seconds"], prefill=stats["prefill_seconds"], decode=stats["decode_seconds"],
                tokens=stats["generated_tokens"], precision=stats["precision"], wall=wall, text=text.strip())


def load_upstream(torch, mu, model_dir):
    """Upstream's model at the folder's dimensions in float32, filled tensor by tensor from its
    safetensors (a state dict beside the model would need twice the memory)."""
    from safetensors import safe_open
    from transformers.modeling_utils import no_init_weights
    with open(os.path.join(model_dir, "config.json")) as f:
        config = mu.UnlimitedOCRConfig(**json.load(f))
    config._attn_implementation = "eager"
    with no_init_weights():
        model = mu.UnlimitedOCRForCausalLM(config)
    params = dict(model.named_parameters())
    with open(os.path.join(model_dir, "model.safetensors.index.json")) as f:
        shards = sorted(set(json.load(f)["weight_map"].values()))
    loaded = set()
    with torch.no_grad():
        for shard in shards:
            with safe_open(os.path.join(model_dir, shard), framework="pt") as st:
                for name in st.keys():
                    if name not in params:
                        sys.exit("upstream_side_by_side.py: %s: tensor %s is not in upstream's model" % (shard, name))
                    params[name].copy_(st.get_tensor(name))
                    loaded.add(name)
    missing = set(params) - loaded
    if missing:
        sys.exit("upstream_side_by_side.py: upstream's model has tensors the folder lacks: %s" % sorted(missing)[:5])
    return model.float().eval()


class StageClock:
    """Vision time from hooks on SAM, CLIP and the projector; the end of generate()'s first forward."""

    def __init__(self, model):
        self.vision = 0.0
        self.first_forward_end = None
        self.handles = []
        m = model.model
        for mod in (m.sam_model, m.vision_model, m.projector):
            self.handles.append(mod.register_forward_pre_hook(self.start))
            self.handles.append(mod.register_forward_hook(self.stop))
        self.handles.append(model.register_forward_hook(self.forward_done))

    def start(self, *_):
        self.t = time.perf_counter()

    def stop(self, *_):
        self.vision += time.perf_counter() - self.t

    def forward_done(self, *_):
        if self.first_forward_end is None:
            self.first_forward_end = time.perf_counter()

    def close(self):
        for h in self.handles:
            h.remove()


def run_upstream(upstream_dir, model_dir, page, tokens, precisions, threads, work):
    """One upstream run per precision: f32 (the float32 reference), then bf16 as upstream's README
    runs the model (cast to bf16, bf16 images, under bf16 autocast; on the CPU autocast "cpu")."""
    import torch
    from transformers import AutoTokenizer
    torch.set_num_threads(threads)
    mu, _, _, _ = make_reference.import_upstream(os.path.abspath(upstream_dir), work)
    make_reference.run_on_cpu(torch)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    t0 = time.perf_counter()
    model = load_upstream(torch, mu, model_dir)
    load = time.perf_counter() - t0
    case = dict(mode="base", images=[os.path.basename(page)])
    kw = make_reference.capture_inputs(torch, mu, model, tokenizer, case, os.path.dirname(os.path.abspath(page)),
                                       os.path.join(work, "infer_out"))
    # What infer() hands generate() when called with upstream's README n-gram settings, the ring
    # window armed as infer() arms it around its generate() call.
    kw.pop("max_length", None)
    kw.pop("streamer", None)
    kw["logits_processor"] = [mu.SlidingWindowNoRepeatNgramProcessor(NGRAM, NGRAM_WINDOW)]
    images = kw.pop("images")
    model.config._ring_window = model.config.sliding_window_size or model.config.sliding_window
    model.config.sliding_window = None
    prompt = kw["input_ids"].shape[1]
    runs = {}
    for precision in ("f32", "bf16"):  # f32 first: the cast to bf16 is one way
        if precision not in precisions:
            continue
        dtype = torch.float32 if precision == "f32" else torch.bfloat16
        model.to(dtype)
        autocast = torch.autocast("cpu", dtype=torch.bfloat16) if precision == "bf16" else make_reference.null_autocast()
        clock = StageClock(model)
        start = time.perf_counter()
        with torch.no_grad(), autocast:
            ids = model.generate(**kw, images=[(c.to(dtype), o.to(dtype)) for c, o in images], max_new_tokens=tokens)
        end = time.perf_counter()
        clock.close()
        generated = ids[0, prompt:].tolist()
        if generated and generated[-1] == tokenizer.eos_token_id:
            generated = generated[:-1]
        runs["upstream " + precision] = dict(vision=clock.vision, prefill=clock.first_forward_end - start - clock.vision,
                                             decode=end - clock.first_forward_end, tokens=len(ids[0]) - prompt,
                                             text=tokenizer.decode(generated).strip())
    return runs, dict(load=load, torch=torch.__version__, threads=torch.get_num_threads())


def median_runs(repeats):
    """Per run name: each timing's median over the repeats; the rest (text, tokens) from the first."""
    out = {}
    for name, first in repeats[0].items():
        out[name] = dict(first)
        for key in ("vision", "prefill", "decode", "wall"):
            if key in first:
                out[name][key] = statistics.median(r[name][key] for r in repeats)
        out[name]["same_text_each_repeat"] = all(r[name]["text"] == first["text"] for r in repeats)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--upstream", required=True, help="folder with the five upstream .py files")
    ap.add_argument("--uocr", default=os.path.join(ROOT, "build", "tools", "uocr"))
    ap.add_argument("--page", default=GOLDEN_PAGE)
    ap.add_argument("--tokens", type=int, default=1000)
    ap.add_argument("--uocr-run", action="append", default=[], metavar="NAME=ARGS",
                    help="another uocr variant, e.g. bf16='--precision bf16'")
    ap.add_argument("--upstream-precision", default="f32,bf16", help="f32, bf16 or both (comma-separated)")
    ap.add_argument("--upstream-threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=1)
    a = ap.parse_args()
    if a.tokens < 2 or a.repeats < 1:
        ap.error("--tokens must be at least 2, --repeats at least 1")
    precisions = set(a.upstream_precision.split(","))
    if not precisions or not precisions <= {"f32", "bf16"}:
        ap.error("--upstream-precision takes f32, bf16 or f32,bf16")
    variants = [("uocr", [])]
    for v in a.uocr_run:
        name, sep, args = v.partition("=")
        if not sep or not name:
            ap.error("--uocr-run takes NAME=ARGS")
        variants.append((name, shlex.split(args)))

    # Each repeat runs every uocr variant, then loads upstream afresh and runs its precisions; each
    # figure is the median over the repeats (the machine's speed drifts over minutes).
    ours_runs, theirs_runs = [], []
    with tempfile.TemporaryDirectory() as work:
        for _, extra in variants:  # untimed: a first run reads its model folder from disk
            run_uocr(a.uocr, a.model, a.page, 2, extra, work)
        for _ in range(a.repeats):
            ours_runs.append({name: run_uocr(a.uocr, a.model, a.page, a.tokens, extra, work) for name, extra in variants})
            theirs_r, info = run_upstream(a.upstream, a.model, a.page, a.tokens, precisions, a.upstream_threads, work)
            theirs_runs.append(theirs_r)
    ours, theirs = median_runs(ours_runs), median_runs(theirs_runs)

    stages = [("vision, one page (s)", lambda r: r["vision"], False),
              ("prefill (s)", lambda r: r["prefill"], False),
              ("decode (tokens/s)", lambda r: r["tokens"] / r["decode"], True),
              ("end to end (s)", lambda r: r["vision"] + r["prefill"] + r["decode"], False)]
    runs = {**theirs, **ours}
    print("| stage | " + " | ".join(runs) + " |")
    print("|---|" + "---:|" * len(runs))
    for label, f, _ in stages:
        print("| %s | %s |" % (label, " | ".join("%.2f" % f(r) for r in runs.values())))
    print("| tokens | %s |" % " | ".join(str(r["tokens"]) for r in runs.values()))
    print()
    pairs = [(o, t) for o in ours for t in theirs]
    print("| uocr / upstream, times faster | " + " | ".join("%s vs %s" % p for p in pairs) + " |")
    print("|---|" + "---:|" * len(pairs))
    for label, f, higher_is_faster in stages:
        print("| %s | %s |" % (label, " | ".join(
            "%.1fx" % (f(ours[o]) / f(theirs[t]) if higher_is_faster else f(theirs[t]) / f(ours[o])) for o, t in pairs)))
    print()
    print("upstream: torch %s, %d threads, model loaded in %.0f s; medians of %d repeats" %
          (info["torch"], info["threads"], info["load"], a.repeats))
    for name, r in runs.items():
        line = "%s: %d tokens%s" % (name, r["tokens"], "" if r["same_text_each_repeat"] else ", TEXT CHANGED BETWEEN REPEATS")
        if "precision" in r:
            line += ", precision %s, process %.1f s" % (r["precision"], r["wall"])
        line += "; text: " + "; ".join("%s %s" % ("same as" if r["text"] == theirs[t]["text"] else "differs from", t)
                                         for t in theirs if t != name)
        print(line)


if __name__ == "__main__":
    main()
