"""Writes samples/data/: a 3-page sample document rendered by uocr_dev.data.

  demo-page1.png .. demo-page3.png   the pages (512x512 RGB, the demo model's page size)
  demo-doc.pdf                        the same pages as a 3-page PDF (Pillow, 72 dpi: 512 pt pages)
  demo-doc-text.pdf                   the same pages with a text layer (uocr_dev.text_pdf): draft decoding
  demo-page1.md .. demo-page3.md      each page's ground-truth markdown (single-page target)
  demo-doc.md                         the multi-page target: "<PAGE>" + page 1 + "<PAGE>" + page 2 ...

    python3 -m uocr_dev.make_samples [--out samples/data] [--seed 8] [--level 1]

Level 1 (large type, up to 5 lines) is the curriculum level the bundled model was trained to
(docs/TRAINING.md §4); seed 8 is far from every seed the training run derives.
"""
import argparse
import os

from uocr_dev import ROOT
from uocr_dev.data import Renderer
from uocr_dev.sequence import join_pages
from uocr_dev.text_pdf import text_lines, write_text_pdf


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(ROOT, "samples", "data"))
    ap.add_argument("--seed", type=int, default=8)
    ap.add_argument("--level", type=int, default=1)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    r = Renderer(size=512, seed=a.seed, level=a.level)
    pages = [r.page() for _ in range(3)]
    imgs = []
    for i, (img, md, _) in enumerate(pages, 1):
        img.save(os.path.join(a.out, f"demo-page{i}.png"), optimize=True)
        with open(os.path.join(a.out, f"demo-page{i}.md"), "w") as f:
            f.write(md)
        imgs.append(img)
    imgs[0].save(os.path.join(a.out, "demo-doc.pdf"), save_all=True, append_images=imgs[1:], resolution=72.0)
    write_text_pdf(os.path.join(a.out, "demo-doc-text.pdf"), [(img, text_lines(md)) for img, md, _ in pages])
    with open(os.path.join(a.out, "demo-doc.md"), "w") as f:
        f.write(join_pages([p[1] for p in pages])[0])
    for n in sorted(os.listdir(a.out)):
        if n.startswith("demo-"):
            print(n, os.path.getsize(os.path.join(a.out, n)))


if __name__ == "__main__":
    main()
