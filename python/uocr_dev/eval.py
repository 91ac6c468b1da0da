"""Accuracy of uocr's decoding modes on held-out rendered documents (docs/ACCURACY.md).

Documents of 1, 10, 100, 300 ... pages are rendered with the training renderer
(uocr_dev.data) from seeds the training run never uses, transcribed with the `uocr run`
CLI in each decoding mode, and scored against their markdown:

  CER         edit distance / reference length, on the whole document's text (the "<PAGE>"
              markers removed and runs of whitespace made one space on both sides, so that the
              score is about the characters read, not line breaks)
  Distinct-n  distinct word n-grams / all word n-grams of the output (n = 20): a model caught in
              a loop repeats n-grams and scores low; rendered text scores ~100%
  headings    of the reference's headings found in the output (the closest heading text, at
              most 30% of it edited), the share written at the right level ('#' or '##': the
              renderer draws '#' larger; CER counts a wrong level as one character)
  pages/s     pages / (vision + prefill + decode seconds) from `--stats json`

Modes (the `uocr run` options each one adds):
  oneshot     --pages-per-group N (every page in one group: exactly one-shot R-SWA)
  infinite    page groups with uocr run's defaults (the model folder's uocr_decode.json, else
              G = 4, O = 3)
  sparse-A/B  page groups + SR-SWA at two reference budgets (--budgets A/B, default 2,8/1,4: uocr run
              --reference-budget PAGES,BLOCKS[,BLOCK_TOKENS])
  separate    --separate-pages: every page its own single-page run (what single-page models need)

--positions applies to every mode: `extrapolate` is upstream's one-shot numbering (past the
model's context when long), `group` lays every page group out as a G-page document
(docs/ARCHITECTURE.md). --group G,O sets the page-group modes' G and O; --slide-kv reuse|recompute
what a slide does with the kept pages' and the window's KV. Each of the three defaults to what
`uocr run` does without it: the model folder's uocr_decode.json, else the library's (limit, 4,3,
reuse).

--keep DIR keeps each document (pages, reference.md, <mode>.md transcripts) for reading the errors.

Needs PyPI `rapidfuzz` (edit distance of 100k-character documents) plus what uocr_dev.data needs
(Pillow, numpy; fonts-dejavu, fonts-liberation, wamerican).

    python3 -m uocr_dev.eval --uocr build/tools/uocr --model models/uocr-demo \
        --pages 1,10,100,300 --single-docs 16 --json /tmp/accuracy.json
"""
import argparse
import json
import os
import re
import subprocess
import tempfile
import time

from rapidfuzz.distance import Levenshtein

from uocr_dev.data import LEVELS, Renderer
from uocr_dev.sequence import join_pages
from uocr_dev.tokenizer import PAGE_MARK

# Far from every seed the training run derives (uocr_dev.train: 1234 + 7919*step + 100003*worker,
# evaluation 999 + ...), so these pages are held out.
HELD_OUT_SEED = 20_261_130

MODES = {  # uocr run options of each mode for an n-page document
    "oneshot": lambda a, n: ["--pages-per-group", str(max(2, n))],
    "infinite": lambda a, n: [],
    "sparse-A": lambda a, n: ["--reference-budget", a.budgets.split("/")[0]],
    "sparse-B": lambda a, n: ["--reference-budget", a.budgets.split("/")[1]],
    "separate": lambda a, n: ["--separate-pages"],
}


def group_args(a, mode):
    """--group G,O as uocr run options, for the modes that use page groups' defaults."""
    if not a.group or mode not in ("infinite", "sparse-A", "sparse-B"):
        return []
    g, o = a.group.split(",")
    return ["--pages-per-group", g, "--overlap", o]


def normalise(text):
    return " ".join(text.replace(PAGE_MARK, " ").split())


HEADING = re.compile(r"^(#+) (.+)$", re.M)


def headings(text):
    """[(level, text)] of the markdown headings of a transcript or reference."""
    return [(len(h), t.strip()) for h, t in HEADING.findall(text.replace(PAGE_MARK, "\n"))]


def heading_levels(hyp, ref):
    """-> (reference headings found in hyp, those written at the reference's level)."""
    written = headings(hyp)
    found = right = 0
    for level, text in headings(ref):
        dist, hyp_level = min(((Levenshtein.normalized_distance(t, text), lv) for lv, t in written), default=(1.0, 0))
        if dist <= 0.3:
            found += 1
            right += hyp_level == level
    return found, right


def distinct_n(text, n=20):
    words = text.split()
    grams = [tuple(words[i:i + n]) for i in range(len(words) - n + 1)]
    return len(set(grams)) / len(grams) if grams else 1.0


def render_document(out_dir, n_pages, level, seed):
    """Writes page PNGs; returns (paths, reference text of the document)."""
    r = Renderer(size=512, seed=seed, level=level)
    paths, mds = [], []
    for i in range(n_pages):
        img, md, _ = r.page()
        p = os.path.join(out_dir, f"page{i:04d}.png")
        img.save(p)
        paths.append(p)
        mds.append(md)
    return paths, join_pages(mds)[0]


def transcribe(a, paths, mode_args):
    cmd = [a.uocr, "run", "--model", a.model, "--format", "raw", "--stats", "json", "--quiet",
           *(["--positions", a.positions] if a.positions else []), *(["--slide-kv", a.slide_kv] if a.slide_kv else []),
           *(["--precision", a.precision] if a.precision else []), *mode_args, *paths]
    p = subprocess.run(cmd, capture_output=True, text=True)
    stats = None
    for line in reversed(p.stderr.splitlines()):
        if line.startswith("{"):
            stats = json.loads(line)
            break
    if stats is None:
        raise RuntimeError(f"{' '.join(cmd[:12])} ... exited {p.returncode}: {p.stderr.strip()[-400:]}")
    return p.stdout, stats


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--uocr", default="build/tools/uocr")
    ap.add_argument("--model", default="models/uocr-demo")
    ap.add_argument("--pages", default="1,10,100,300", help="document lengths")
    ap.add_argument("--modes", default=",".join(MODES), help="any of " + ", ".join(MODES))
    ap.add_argument("--single-docs", type=int, default=16, help="documents averaged for 1-page rows")
    ap.add_argument("--level", type=int, default=len(LEVELS) - 1, help="renderer level (0 = large type .. 4)")
    ap.add_argument("--oneshot-max-pages", type=int, default=10, help="longer documents skip one-shot (its KV grows)")
    ap.add_argument("--seed", type=int, default=HELD_OUT_SEED)
    ap.add_argument("--positions", choices=["limit", "extrapolate", "group"],
                    help="uocr run --positions for every mode (default: uocr run's, the model folder's uocr_decode.json, else limit)")
    ap.add_argument("--group", help="G,O: --pages-per-group G --overlap O for the page-group modes (default: uocr run's, "
                         "the model folder's uocr_decode.json, else 4,3)")
    ap.add_argument("--slide-kv", choices=["reuse", "recompute"],
                    help="uocr run --slide-kv for every mode (default: uocr run's, the model folder's uocr_decode.json, else reuse)")
    ap.add_argument("--precision", choices=["f32", "bf16"], help="uocr run --precision for every mode (default: uocr run's)")
    ap.add_argument("--budgets", default="2,8/1,4",
                    help="SR-SWA budgets of sparse-A / sparse-B: PAGES,BLOCKS[,BLOCK_TOKENS] each (uocr run --reference-budget)")
    ap.add_argument("--json", help="also write the rows here")
    ap.add_argument("--keep", help="keep every document here (page PNGs, reference.md, one transcript per mode)")
    a = ap.parse_args()
    modes = a.modes.split(",")
    for m in modes:
        if m not in MODES:
            ap.error(f"unknown mode {m}")

    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        tmp = a.keep or scratch
        for n in [int(x) for x in a.pages.split(",")]:
            docs = a.single_docs if n == 1 else 1
            rendered = []
            for d in range(docs):
                folder = os.path.join(tmp, f"n{n}-d{d}")
                os.makedirs(folder, exist_ok=True)
                rendered.append(render_document(folder, n, a.level, a.seed + 1000 * n + d))
                if a.keep:
                    with open(os.path.join(folder, "reference.md"), "w") as f:
                        f.write(rendered[-1][1])
            for m in modes:
                if m == "oneshot" and n > a.oneshot_max_pages:
                    continue
                if m != "oneshot" and n == 1:
                    continue  # one page: every mode is the same computation
                errors = ref_chars = 0
                distinct, pages, seconds, tokens, peak = [], 0, 0.0, 0, 0
                headings_found = headings_right = 0
                t0 = time.time()
                for paths, ref in rendered:
                    hyp, st = transcribe(a, paths, MODES[m](a, n) + group_args(a, m))
                    if a.keep:
                        with open(os.path.join(os.path.dirname(paths[0]), m + ".md"), "w") as f:
                            f.write(hyp)
                    h, r = normalise(hyp), normalise(ref)
                    errors += Levenshtein.distance(h, r)
                    ref_chars += len(r)
                    distinct.append(distinct_n(h))
                    found, right = heading_levels(hyp, ref)
                    headings_found += found
                    headings_right += right
                    pages += n
                    seconds += st["vision_seconds"] + st["prefill_seconds"] + st["decode_seconds"]
                    tokens += st["generated_tokens"]
                    peak = max(peak, st["peak_kv_bytes"])
                row = dict(pages=n, docs=docs, mode=m, level=a.level, cer=errors / max(1, ref_chars),
                           distinct20=min(distinct), pages_per_second=pages / seconds if seconds else 0.0,
                           headings=headings_found, heading_levels_right=headings_right / max(1, headings_found),
                           tokens=tokens, peak_kv_bytes=peak, wall_seconds=time.time() - t0)
                rows.append(row)
                print(f"{n:5d} pages x {docs:2d}  {m:9s}  CER {row['cer']:.3f}  Distinct-20 {row['distinct20']:.3f}  "
                      f"headings {row['heading_levels_right']:.2f} of {headings_found}  "
                      f"{row['pages_per_second']:.2f} pages/s  peak KV {peak / 2**20:.2f} MiB", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
