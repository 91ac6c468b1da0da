#!/usr/bin/env python3
"""ocr: transcribes page images through the uocr C ABI (ctypes binding: bindings/python).

    ocr.py [-n MAX_NEW_TOKENS] [-q] MODEL_DIR IMAGE...

From the repository root, with libuocr.so built in BUILD/c_api (or `pip install bindings/python`
instead of PYTHONPATH):

    export PYTHONPATH=bindings/python UOCR_LIBRARY=BUILD/c_api/libuocr.so
    python3 samples/python/ocr.py MODEL_DIR page.png

Prints the transcript and a newline on stdout (the library's exact bytes); the token stream and
a summary go to stderr unless -q. Pages are read here and passed as encoded bytes, exercising
uocr_session_add_image_encoded.
"""
import argparse
import sys

import uocr


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", "--max-new-tokens", type=int, default=0)
    ap.add_argument("-q", "--quiet", action="store_true")
    ap.add_argument("model_dir")
    ap.add_argument("images", nargs="+")
    args = ap.parse_args()

    tokens = []

    def on_event(event):
        if event.type == uocr.EVENT_TOKEN:
            tokens.append(event.text)
            if not args.quiet:
                sys.stderr.buffer.write(event.text)
                sys.stderr.flush()
        elif event.type == uocr.EVENT_BLOCK and not args.quiet:
            print("\n[page %d block %s: %s px]" % (event.page, event.label.decode(), event.box_px), file=sys.stderr)
        return False  # True would cancel

    try:
        with uocr.Model(args.model_dir) as model, model.session(max_new_tokens=args.max_new_tokens) as session:
            for path in args.images:
                with open(path, "rb") as f:
                    session.add_image_bytes(f.read())
            summary = session.run(on_event)
            text = session.text()
    except (uocr.Error, OSError) as e:
        print("ocr.py: %s" % e, file=sys.stderr)
        return 1
    if len(tokens) != summary.generated_tokens:
        print("ocr.py: %d token events but %d generated tokens" % (len(tokens), summary.generated_tokens),
              file=sys.stderr)
        return 1
    sys.stdout.buffer.write(text + b"\n")
    sys.stdout.flush()
    if not args.quiet:
        print("\n%d pages, %d generated tokens (stop: %s), vision %.2f s, decode %.2f s"
              % (summary.pages, summary.generated_tokens, uocr.stop_reason_name(summary.stop_reason),
                 summary.vision_seconds, summary.decode_seconds), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
