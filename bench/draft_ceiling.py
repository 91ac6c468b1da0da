"""What draft decoding can save when the draft is right: one page decoded without drafts, then
again with that run's own transcript as the page's draft (the best a text layer can be), in one
process, alternating, through the Python binding. Prints both runs' decoder passes, decode seconds
and page seconds (vision + prefill + decode) and their ratios; the transcripts must be identical
(the script fails otherwise).

    UOCR_LIBRARY=build/c_api/libuocr.so OMP_WAIT_POLICY=passive \\
        python3 bench/draft_ceiling.py MODEL_DIR PAGE.png [--tokens 256] [--repeats 2] [--draft-max-tokens 16]

With random weights (uocr_dev.make_random) the transcript is arbitrary tokens, so this measures the
mechanism at the model's dimensions, not a real text layer's acceptance (docs/PERFORMANCE.md,
"Draft decoding").
"""
import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bindings", "python"))
import uocr  # noqa: E402


def decode(model, page, tokens, draft, draft_max_tokens):
    params = dict(max_new_tokens=tokens, draft=draft is not None, draft_max_tokens=draft_max_tokens)
    with model.session(**params) as s:
        s.add_image_file(page)
        if draft is not None:
            s.set_page_draft(0, draft)
        summary = s.run()
        return s.text(), summary


def page_seconds(summary):
    return summary.vision_seconds + summary.prefill_seconds + summary.decode_seconds


def seconds(values):
    return " / ".join("%.2f" % s for s in values)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("page")
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--draft-max-tokens", type=int, default=0, help="0: the library's default (16)")
    args = ap.parse_args()

    with uocr.Model(args.model) as model:
        text, _ = decode(model, args.page, args.tokens, None, args.draft_max_tokens)  # the draft, and a warm-up
        plain_s, drafted_s, plain_page, drafted_page = [], [], [], []
        for _ in range(args.repeats):
            plain_text, plain = decode(model, args.page, args.tokens, None, args.draft_max_tokens)
            drafted_text, drafted = decode(model, args.page, args.tokens, text, args.draft_max_tokens)
            if plain_text != text or drafted_text != text:
                sys.exit("FAIL: a run's transcript differs from the first run's")
            plain_s.append(plain.decode_seconds)
            drafted_s.append(drafted.decode_seconds)
            plain_page.append(page_seconds(plain))
            drafted_page.append(page_seconds(drafted))
        print("generated tokens: %d" % plain.generated_tokens)
        print("no draft:   %d passes, decode %s s, page %s s" % (plain.decode_passes, seconds(plain_s), seconds(plain_page)))
        print("own text:   %d passes (%d of %d drafted tokens accepted), decode %s s, page %s s" %
              (drafted.decode_passes, drafted.accepted_tokens, drafted.drafted_tokens, seconds(drafted_s),
               seconds(drafted_page)))
        print("ratios (medians): decode %.2fx, page %.2fx" % (statistics.median(plain_s) / statistics.median(drafted_s),
                                                             statistics.median(plain_page) / statistics.median(drafted_page)))


if __name__ == "__main__":
    main()
