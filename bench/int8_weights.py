"""An int8 folder (`uocr quantize`) against the folder it was made from, in one sitting:

1. speed: `uocr run --stats json --max-tokens N` on one page with each folder, alternating, the
   median vision / prefill / decode figures of each and the ratios;
2. agreement: `uocr inspect logits` teacher-forces the same tokens through both (the golden
   prompt and token sequence in tests/data/reference/golden/) and compares the logits row by row:
   top-1 agreement, top-5 agreement (the source's top-1 among int8's top 5) and the largest
   difference relative to the row's largest |logit|.

    python3 bench/int8_weights.py SOURCE_DIR INT8_DIR \\
        [--uocr build/tools/uocr] [--tokens 64] [--repeats 2] [--page PAGE.png] [--forced 64]

The runs take the CLI's OpenMP settings (passive with a short spin) unless the environment sets
OMP_WAIT_POLICY or GOMP_SPINCOUNT; the summary line names what ran.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
GOLDEN = os.path.join(ROOT, "tests", "data", "reference", "golden")


def run_stats(uocr, model, page, tokens, out):
    p = subprocess.run([uocr, "run", "--model", model, "--max-tokens", str(tokens), "--draft", "off", "--stats", "json",
                        "--quiet", "-o", out, page], capture_output=True, text=True)
    if p.returncode not in (0, 3):  # 3: stopped at --max-tokens, as asked
        sys.exit("int8_weights.py: uocr run on %s failed (exit %d): %s" % (model, p.returncode, p.stderr[-500:]))
    return next(json.loads(line) for line in (p.stdout + p.stderr).splitlines() if line.startswith("{"))


def logits(uocr, model, forced, work):
    out = os.path.join(work, os.path.basename(os.path.normpath(model)) + ".npy")
    p = subprocess.run([uocr, "inspect", "logits", "--model", model, "--image", os.path.join(GOLDEN, "page.png"),
                        "--input-ids", os.path.join(GOLDEN, "input_ids.npy"), "--generated", forced, "-o", out],
                       capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("int8_weights.py: inspect logits on %s failed: %s" % (model, p.stderr[-500:]))
    return np.load(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("source")
    ap.add_argument("int8")
    ap.add_argument("--uocr", default=os.path.join(ROOT, "build", "tools", "uocr"))
    ap.add_argument("--page", default=os.path.join(GOLDEN, "page.png"))
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--forced", type=int, default=64, help="teacher-forced tokens (of the golden sequence)")
    a = ap.parse_args()
    if a.tokens < 1 or a.repeats < 1 or a.forced < 0:
        ap.error("--tokens and --repeats must be at least 1, --forced at least 0")

    with tempfile.TemporaryDirectory() as work:
        runs = {a.source: [], a.int8: []}
        texts = {}
        for r in range(a.repeats):
            for m in runs:
                out = os.path.join(work, "out.md")
                runs[m].append(run_stats(a.uocr, m, a.page, a.tokens, out))
                with open(out, encoding="utf-8") as f:
                    texts.setdefault(m, f.read())
        keys = ("vision_seconds", "prefill_seconds", "decode_tokens_per_second")
        med = {m: {k: statistics.median(run[k] for run in runs[m]) for k in keys} for m in runs}
        print("| weights | vision s | prefill s | decode tok/s |")
        print("| --- | ---: | ---: | ---: |")
        for m, name in ((a.source, "source"), (a.int8, "int8")):
            s = med[m]
            print("| %s | %.2f | %.2f | %.1f |" % (name, s["vision_seconds"], s["prefill_seconds"],
                                                  s["decode_tokens_per_second"]))
        first = runs[a.source][0]
        print("int8 / source decode rate: %.2fx (medians of %d runs, %d tokens); same text: %s; OpenMP wait %s, "
              "spin count %s" % (med[a.int8]["decode_tokens_per_second"] / med[a.source]["decode_tokens_per_second"],
                                 a.repeats, a.tokens, texts[a.source] == texts[a.int8],
                                 first.get("openmp_wait_policy", "?"), first.get("openmp_spin_count", "?")))

        forced = os.path.join(work, "forced.npy")
        np.save(forced, np.load(os.path.join(GOLDEN, "gen_ids.npy"))[:a.forced].astype(np.int32))
        ref, q = logits(a.uocr, a.source, forced, work), logits(a.uocr, a.int8, forced, work)
        top1 = ref.argmax(1) == q.argmax(1)
        top5 = np.array([ref[i].argmax() in np.argsort(q[i])[-5:] for i in range(len(ref))])
        rel = np.abs(ref - q).max(1) / np.abs(ref).max(1)
        print("teacher-forced rows: %d; top-1 agreement %d / %d, top-5 %d / %d; max |diff| / max |logit|: "
              "largest %.3g, median %.3g" % (len(ref), top1.sum(), len(ref), top5.sum(), len(ref), rel.max(),
                                              np.median(rel)))


if __name__ == "__main__":
    main()
