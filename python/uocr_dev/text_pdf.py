"""PDFs with a text layer: pages rendered by uocr_dev.data, each drawn as its image with the
page's text on top in invisible type (text render mode 3), as a scanner's OCR pass or a
born-digital export leaves it. `pdftotext` reads that layer; `uocr run` verifies it as a draft
of its output (docs/PERFORMANCE.md, "Draft decoding").

    python3 -m uocr_dev.text_pdf OUT.pdf [--pages 3] [--seed 8] [--level 1] [--wrong]

(samples/data/demo-doc-text.pdf is written by uocr_dev.make_samples, with the sample's pages.)

--wrong writes every word of the text layer reversed (a layer that is wrong everywhere).
The images are stored losslessly; the PDF objects are written here (no PDF library).
"""
import argparse
import zlib

from uocr_dev.data import Renderer


def text_lines(markdown):
    """The page's lines as a text layer has them: no Markdown heading or emphasis marks."""
    lines = []
    for line in markdown.splitlines():
        line = line.lstrip("#").strip().replace("**", "")
        if line:
            lines.append(line)
    return lines


def _pdf_string(text):
    data = text.encode("latin-1", "replace")
    return b"(" + data.replace(b"\\", b"\\\\").replace(b"(", b"\\(").replace(b")", b"\\)") + b")"


def write_text_pdf(path, pages):
    """pages: [(PIL RGB image, [text line, ...])], each page as large in points as its image in pixels."""
    objects = []  # bodies; object i + 1

    def add(body):
        objects.append(body)
        return len(objects)

    catalog = add(None)
    tree = add(None)
    font = add(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>")
    kids = []
    for img, lines in pages:
        w, h = img.size
        raw = zlib.compress(img.convert("RGB").tobytes(), 9)
        image = add(b"<< /Type /XObject /Subtype /Image /Width %d /Height %d /ColorSpace /DeviceRGB "
                    b"/BitsPerComponent 8 /Filter /FlateDecode /Length %d >>\nstream\n" % (w, h, len(raw)) + raw +
                    b"\nendstream")
        size = max(8, h // max(12, 2 * len(lines) + 2))
        ops = [b"q %d 0 0 %d 0 0 cm /Im0 Do Q" % (w, h), b"BT 3 Tr"]
        for i, line in enumerate(lines):
            # Narrow enough to stay on the page (Helvetica's widest glyphs are under 1 em): text
            # outside the MediaBox is not extracted.
            fit = max(1.0, min(size, 0.9 * (w - size) / max(1, len(line))))
            ops.append(b"/F0 %.2f Tf 1 0 0 1 %d %d Tm %s Tj" % (fit, size, h - (2 * i + 2) * size, _pdf_string(line)))
        ops.append(b"ET")
        content = b"\n".join(ops)
        stream = add(b"<< /Length %d >>\nstream\n" % len(content) + content + b"\nendstream")
        kids.append(add(b"<< /Type /Page /Parent %d 0 R /MediaBox [0 0 %d %d] /Contents %d 0 R "
                        b"/Resources << /XObject << /Im0 %d 0 R >> /Font << /F0 %d 0 R >> >> >>" %
                        (tree, w, h, stream, image, font)))
    objects[catalog - 1] = b"<< /Type /Catalog /Pages %d 0 R >>" % tree
    objects[tree - 1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (
        b" ".join(b"%d 0 R" % k for k in kids), len(kids))

    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for i, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % i + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    for o in offsets:
        out += b"%010d 00000 n \n" % o
    out += b"trailer\n<< /Size %d /Root %d 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, catalog, xref)
    with open(path, "wb") as f:
        f.write(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--pages", type=int, default=3)
    ap.add_argument("--seed", type=int, default=8)
    ap.add_argument("--level", type=int, default=1)
    ap.add_argument("--wrong", action="store_true", help="every word of the text layer reversed")
    a = ap.parse_args()
    r = Renderer(size=512, seed=a.seed, level=a.level)
    pages = []
    for _ in range(a.pages):
        img, md, _ = r.page()
        lines = text_lines(md)
        if a.wrong:
            lines = [" ".join(word[::-1] for word in line.split(" ")) for line in lines]
        pages.append((img, lines))
    write_text_pdf(a.out, pages)


if __name__ == "__main__":
    main()
