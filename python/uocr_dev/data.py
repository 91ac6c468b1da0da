"""Synthetic document pages for training the demo model, rendered on the fly with Pillow.

A page is a square image (default 512x512, the demo model's vision_config.image_size) with
black-ish text on white or light paper, and its ground truth is the page's markdown:

  # Heading                    (drawn in bold without the '#', larger than body text:
                               '#' 1.32-1.5x, '##' 1.12-1.25x)
  paragraph text ...           (wrapped; soft line breaks become spaces in the markdown)
  1. list item                 (drawn as is)
  | a | b |\n| --- | --- |\n| c | d |   (drawn as a ruled table, without the pipes)

Blocks are separated by a blank line in the markdown. Every markdown character that is drawn
also gets its box on the page (used by training-only losses: which visual token holds which
character); markup that is not drawn ('# ', '|', '---') has none.

Text comes from four sources mixed per block so that reading cannot be replaced by guessing:
a word-bigram Markov chain over the Debian licence texts (/usr/share/common-licenses), random
words from /usr/share/dict/american-english (Debian package wamerican), random pseudo-words and
numbers/dates/prices. Fonts: DejaVu Sans/Serif/Mono and, when installed, Liberation
Sans/Serif/Mono (Debian package fonts-liberation), regular and bold. Mild degradations: paper
tint, ink colour, rotation up to ~1.5 degrees, Gaussian blur, pixel noise, JPEG re-encoding.

The files are read under UOCR_TRAIN_DATA_ROOT (default "/"): on a machine without those Debian
packages (a rented GPU, say), copy usr/share/fonts/truetype/{dejavu,liberation}, usr/share/dict
and usr/share/common-licenses from one that has them and point the variable at the copy. A
missing word list, licence corpus or font is an error, never a silent fallback.

`level` (0..4) is the curriculum: 0 = one to three short lines in large type, 4 = full pages
of up to ~250 characters at 17-26 px with headings, lists and tables.

    python3 -m uocr_dev.data --out /tmp/pages --n 8 --level 3     # writes PNG + .md previews
"""
import glob
import io
import math
import os
import random
import re

import numpy as np
from PIL import Image, ImageDraw, ImageFilter, ImageFont

DATA_ROOT = os.environ.get("UOCR_TRAIN_DATA_ROOT", "/")


def data_path(path):
    """`path` (absolute, as on Debian) under DATA_ROOT."""
    return os.path.join(DATA_ROOT, path.lstrip("/"))


FONT_DIRS = [data_path("/usr/share/fonts/truetype/dejavu"), data_path("/usr/share/fonts/truetype/liberation")]
REGULAR = ["DejaVuSans.ttf", "DejaVuSerif.ttf", "DejaVuSansMono.ttf", "DejaVuSansCondensed.ttf",
           "LiberationSans-Regular.ttf", "LiberationSerif-Regular.ttf", "LiberationMono-Regular.ttf"]
BOLD = {"DejaVuSans.ttf": "DejaVuSans-Bold.ttf", "DejaVuSerif.ttf": "DejaVuSerif-Bold.ttf",
        "DejaVuSansMono.ttf": "DejaVuSansMono-Bold.ttf", "DejaVuSansCondensed.ttf": "DejaVuSansCondensed-Bold.ttf",
        "LiberationSans-Regular.ttf": "LiberationSans-Bold.ttf", "LiberationSerif-Regular.ttf": "LiberationSerif-Bold.ttf",
        "LiberationMono-Regular.ttf": "LiberationMono-Bold.ttf"}

# curriculum: font px range, max text lines, max characters, block kinds allowed
LEVELS = [
    dict(font=(34, 44), lines=(1, 3), chars=70, kinds=("p",), degrade=0.3),
    dict(font=(28, 38), lines=(1, 5), chars=120, kinds=("p", "h"), degrade=0.5),
    dict(font=(24, 32), lines=(2, 7), chars=170, kinds=("p", "h", "l"), degrade=0.7),
    dict(font=(20, 28), lines=(3, 9), chars=220, kinds=("p", "h", "l", "t"), degrade=0.8),
    dict(font=(17, 26), lines=(3, 12), chars=260, kinds=("p", "h", "l", "t"), degrade=0.9),
]


def _find_font(name):
    for d in FONT_DIRS:
        p = os.path.join(d, name)
        if os.path.exists(p):
            return p
    return None


class TextSource:
    """Words, Markov sentences, pseudo-words and numbers."""

    def __init__(self, seed=0):
        self.rng = random.Random(seed)
        words = []
        for path in (data_path("/usr/share/dict/american-english"), data_path("/usr/share/dict/words")):
            if os.path.exists(path):
                with open(path, encoding="utf-8", errors="ignore") as f:
                    words = [w.strip() for w in f if re.fullmatch(r"[A-Za-z]{1,12}", w.strip())]
                break
        if not words:
            raise FileNotFoundError(f"no word list at {data_path('/usr/share/dict/american-english')}: install "
                                    "wamerican or set UOCR_TRAIN_DATA_ROOT to a copy of it")
        self.words = words
        corpus = []
        for path in sorted(glob.glob(data_path("/usr/share/common-licenses/*"))):
            if os.path.isfile(path):
                with open(path, encoding="utf-8", errors="ignore") as f:
                    corpus.extend(re.findall(r"[A-Za-z0-9][A-Za-z0-9'\-]*[.,;:]?|[(\"]", f.read()))
        corpus = [w for w in corpus if all(32 <= ord(c) < 127 for c in w)]
        self.chain = {}
        for a, b in zip(corpus, corpus[1:]):
            self.chain.setdefault(a, []).append(b)
        if not corpus:
            raise FileNotFoundError(f"no licence texts in {data_path('/usr/share/common-licenses')} (Debian base-files), "
                                    "or set UOCR_TRAIN_DATA_ROOT to a copy of them")
        self.starts = [w for w in corpus if w[:1].isupper()] or self.words

    def dict_word(self):
        w = self.rng.choice(self.words)
        r = self.rng.random()
        if r < 0.1:
            w = w.upper()
        elif r < 0.3:
            w = w.capitalize()
        elif r < 0.8:
            w = w.lower()
        return w

    def pseudo_word(self):
        cons, vow = "bcdfghjklmnprstvwxyz", "aeiou"
        n = self.rng.randint(1, 4)
        w = "".join(self.rng.choice(cons) + self.rng.choice(vow) + (self.rng.choice(cons) if self.rng.random() < 0.4 else "")
                    for _ in range(n))
        return w.capitalize() if self.rng.random() < 0.2 else w

    def number(self):
        r = self.rng.random()
        if r < 0.3:
            return str(self.rng.randint(0, 9999))
        if r < 0.5:
            return f"{self.rng.randint(0, 999)}.{self.rng.randint(0, 99):02d}"
        if r < 0.65:
            return f"{self.rng.randint(1, 99)}%"
        if r < 0.8:
            return f"${self.rng.randint(1, 999)}.{self.rng.randint(0, 99):02d}"
        return f"{self.rng.randint(1990, 2030)}-{self.rng.randint(1, 12):02d}-{self.rng.randint(1, 28):02d}"

    def markov(self, n):
        w = self.rng.choice(self.starts)
        out = [w]
        while len(out) < n:
            nxt = self.chain.get(w)
            w = self.rng.choice(nxt) if nxt and self.rng.random() > 0.05 else self.rng.choice(self.starts)
            out.append(w)
        return out

    def words_of(self, n, mode=None):
        mode = mode or self.rng.choices(["markov", "dict", "pseudo", "mixed"], [0.35, 0.35, 0.12, 0.18])[0]
        if mode == "markov":
            return self.markov(n)
        out = []
        for _ in range(n):
            r = self.rng.random()
            if mode == "dict" or (mode == "mixed" and r < 0.6):
                w = self.dict_word()
            elif mode == "pseudo" or r < 0.75:
                w = self.pseudo_word()
            else:
                w = self.number()
            if self.rng.random() < 0.08:
                w += self.rng.choice([",", ".", ";", ":", "!", "?"])
            elif self.rng.random() < 0.02:
                w = self.rng.choice(["(", "\""]) + w + self.rng.choice([")", "\""])
            out.append(w)
        return out


class Renderer:
    def __init__(self, size=512, seed=0, level=0):
        self.size = size
        self.rng = random.Random(seed)
        self.nrng = np.random.default_rng(seed)
        self.text = TextSource(seed + 1)
        self.level = level
        self.fonts = [f for f in REGULAR if _find_font(f)]
        if not self.fonts:
            raise FileNotFoundError(f"no fonts in {' or '.join(FONT_DIRS)}: install fonts-dejavu-core "
                                    "(and fonts-liberation) or set UOCR_TRAIN_DATA_ROOT to a copy of them")
        self._cache = {}
        self._bb = {}

    def font(self, name, px, bold=False):
        if bold:
            name = BOLD.get(name, name)
        key = (name, px)
        if key not in self._cache:
            self._cache[key] = ImageFont.truetype(_find_font(name), px)
        return self._cache[key]

    def _bbox(self, font, ch):
        key = (id(font), ch)
        if key not in self._bb:
            self._bb[key] = font.getbbox(ch)
        return self._bb[key]

    # ------------------------------------------------------------------ layout
    def _wrap(self, words, font, width):
        lines, cur = [], ""
        for w in words:
            t = w if not cur else cur + " " + w
            if font.getlength(t) <= width or not cur:
                cur = t
            else:
                lines.append(cur)
                cur = w
        if cur:
            lines.append(cur)
        # a single word wider than the line: cut it
        out = []
        for ln in lines:
            while font.getlength(ln) > width and len(ln) > 1:
                k = len(ln)
                while k > 1 and font.getlength(ln[:k]) > width:
                    k -= 1
                out.append(ln[:k])
                ln = ln[k:]
            out.append(ln)
        return out

    def page(self, level=None):
        """-> (PIL RGB image, markdown str, chars: list of (md_index, x0, y0, x1, y1))."""
        L = LEVELS[self.level if level is None else level]
        rng, S = self.rng, self.size
        px = rng.randint(*L["font"])
        fname = rng.choice(self.fonts)
        margin_x = rng.randint(12, 40)
        y = rng.randint(10, 50 if L["lines"][1] > 4 else 160)
        width = S - 2 * margin_x
        max_lines = rng.randint(*L["lines"])
        budget = L["chars"]
        ink = tuple([rng.randint(0, 70)] * 3) if rng.random() < 0.8 else (rng.randint(0, 60), rng.randint(0, 60), rng.randint(30, 110))
        paper = tuple(255 - rng.randint(0, 22) for _ in range(3)) if rng.random() < 0.5 else (255, 255, 255)
        img = Image.new("RGB", (S, S), paper)
        dr = ImageDraw.Draw(img)
        md_parts, chars = [], []
        md_len = 0
        lines_used = 0
        first = True

        def emit(text, x, y0, font, md_offset):
            """draw one line, record boxes of its characters (md_offset = md index of text[0])."""
            dr.text((x, y0), text, font=font, fill=ink)
            asc, desc = font.getmetrics()
            pref = [font.getlength(text[:i]) for i in range(len(text) + 1)]
            for i, ch in enumerate(text):
                if ch == " ":
                    continue
                a, b = pref[i], pref[i + 1]
                bb = self._bbox(font, ch)
                top = y0 + (bb[1] if bb[3] > bb[1] else asc * 0.3)
                bot = y0 + (bb[3] if bb[3] > bb[1] else asc)
                chars.append((md_offset + i, x + a, top, x + b, bot))

        while lines_used < max_lines and md_len < budget:
            kinds = list(L["kinds"])
            kind = rng.choice(kinds) if not first else ("h" if "h" in kinds and rng.random() < 0.4 else "p")
            sep = "" if first else "\n\n"
            gap = 0 if first else int(px * rng.uniform(0.4, 1.0))
            if kind == "h":
                # the size tells the level, as on a real page: drawn alike, '#' vs '##' is a coin
                # no model can read
                hashes = "#" * rng.choice([1, 1, 2])
                hpx = int(px * (rng.uniform(1.32, 1.5) if len(hashes) == 1 else rng.uniform(1.12, 1.25)))
                font = self.font(fname, hpx, bold=True)
                lh = int(hpx * 1.3)
                if y + gap + lh > S - 8:
                    break
                words = self.text.words_of(rng.randint(1, 4), mode=rng.choice(["dict", "markov", "mixed"]))
                line = self._wrap(words, font, width)[0]
                prefix = sep + hashes + " "
                md_parts.append(prefix + line)
                y += gap
                emit(line, margin_x, y, font, md_len + len(prefix))
                md_len += len(prefix) + len(line)
                y += lh
                lines_used += 1
            elif kind == "p":
                font = self.font(fname, px)
                lh = int(px * rng.uniform(1.2, 1.5))
                room = min(max_lines - lines_used, (S - 8 - y - gap) // lh)
                if room <= 0:
                    break
                nwords = rng.randint(2, 40)
                words = self.text.words_of(nwords)
                lines = self._wrap(words, font, width)[:room]
                # keep within the character budget
                keep, total = [], md_len
                for ln in lines:
                    if keep and total + len(ln) + 1 > budget:
                        break
                    keep.append(ln)
                    total += len(ln) + 1
                lines = keep
                y += gap
                off = md_len + len(sep)
                text = " ".join(lines)
                md_parts.append(sep + text)
                for ln in lines:
                    emit(ln, margin_x, y, font, off)
                    off += len(ln) + 1
                    y += lh
                md_len += len(sep) + len(text)
                lines_used += len(lines)
            elif kind == "l":
                font = self.font(fname, px)
                lh = int(px * rng.uniform(1.2, 1.5))
                room = min(max_lines - lines_used, (S - 8 - y - gap) // lh, rng.randint(2, 4))
                if room <= 0:
                    break
                y += gap
                items = []
                off = md_len + len(sep)
                start = rng.choice([1, 1, 1, rng.randint(2, 9)])
                for k in range(room):
                    num = f"{start + k}. "
                    words = self.text.words_of(rng.randint(1, 6))
                    line = self._wrap(words, font, width - font.getlength(num))[0]
                    item = num + line
                    if md_len + sum(len(i) + 1 for i in items) + len(item) > budget and items:
                        break
                    items.append(item)
                    emit(item, margin_x, y, font, off)
                    off += len(item) + 1
                    y += lh
                text = "\n".join(items)
                md_parts.append(sep + text)
                md_len += len(sep) + len(text)
                lines_used += len(items)
            else:  # table
                font = self.font(fname, px)
                ncol = rng.randint(2, 3)
                nrow = rng.randint(2, 4)
                lh = int(px * 1.6)
                room = min(max_lines - lines_used, (S - 8 - y - gap) // lh)
                nrow = min(nrow, room)
                if nrow < 2:
                    break
                colw = width // ncol
                cells = [[" ".join(self.text.words_of(1, mode=rng.choice(["dict", "mixed", "pseudo"])))
                          if not (r > 0 and rng.random() < 0.4) else self.text.number()
                          for _ in range(ncol)] for r in range(nrow)]
                for r in range(nrow):
                    for c in range(ncol):
                        while font.getlength(cells[r][c]) > colw - 10 and len(cells[r][c]) > 1:
                            cells[r][c] = cells[r][c][:-1]
                y += gap
                off = md_len + len(sep)
                rows_md = []
                top = y
                for r in range(nrow):
                    parts = "| "
                    for c in range(ncol):
                        cx = margin_x + c * colw + 5
                        emit(cells[r][c], cx, y + int(px * 0.25), font, off + len(parts))
                        parts += cells[r][c] + (" | " if c < ncol - 1 else " |")
                    rows_md.append(parts)
                    off += len(parts) + 1
                    if r == 0:
                        sepline = "|" + "|".join([" --- "] * ncol) + "|"
                        rows_md.append(sepline)
                        off += len(sepline) + 1
                    y += lh
                lw = 1 if rng.random() < 0.7 else 2
                for r in range(nrow + 1):
                    dr.line([(margin_x, top + r * lh), (margin_x + ncol * colw, top + r * lh)], fill=ink, width=lw)
                for c in range(ncol + 1):
                    dr.line([(margin_x + c * colw, top), (margin_x + c * colw, top + nrow * lh)], fill=ink, width=lw)
                text = "\n".join(rows_md)
                md_parts.append(sep + text)
                md_len += len(sep) + len(text)
                lines_used += nrow
            first = False
        md = "".join(md_parts)
        if not md.strip():  # nothing fitted: one short line
            font = self.font(fname, px)
            line = self._wrap(self.text.words_of(3), font, width)[0]
            emit(line, margin_x, 30, font, 0)
            md = line
        img, chars = self._degrade(img, chars, paper, L["degrade"])
        return img, md, chars

    def _degrade(self, img, chars, paper, strength):
        rng, S = self.rng, self.size
        if rng.random() < strength * 0.6:
            ang = rng.uniform(-1.5, 1.5)
            img = img.rotate(ang, resample=Image.BICUBIC, fillcolor=paper)
            # PIL rotates counter-clockwise about the centre for positive angles
            t = math.radians(ang)
            c, s = math.cos(t), math.sin(t)
            cx = cy = S / 2
            out = []
            for (k, x0, y0, x1, y1) in chars:
                mx, my = (x0 + x1) / 2 - cx, (y0 + y1) / 2 - cy
                nx, ny = c * mx + s * my + cx, -s * mx + c * my + cy
                hw, hh = (x1 - x0) / 2, (y1 - y0) / 2
                out.append((k, nx - hw, ny - hh, nx + hw, ny + hh))
            chars = out
        if rng.random() < strength * 0.5:
            img = img.filter(ImageFilter.GaussianBlur(rng.uniform(0.2, 0.9)))
        if rng.random() < strength * 0.4:
            a = np.asarray(img).astype(np.int16)
            a = a + self.nrng.normal(0, rng.uniform(2, 10), a.shape[:2])[..., None].astype(np.int16)
            img = Image.fromarray(np.clip(a, 0, 255).astype(np.uint8))
        if rng.random() < strength * 0.3:
            buf = io.BytesIO()
            img.save(buf, "JPEG", quality=rng.randint(40, 90))
            buf.seek(0)
            img = Image.open(buf).convert("RGB")
        return img, chars


def page_u8(img):
    """PIL RGB -> uint8 [3,S,S]: a quarter of the float bytes for render workers to hand over."""
    return np.ascontiguousarray(np.asarray(img, dtype=np.uint8).transpose(2, 0, 1))


def normalise(chw):
    """[...,3,S,S] of byte values (float32 numpy array or uint8 torch tensor) -> float32 normalised
    like upstream: (u8/255 - 0.5)/0.5."""
    return (chw / 255.0 - 0.5) / 0.5


def to_tensor_array(img):
    """PIL RGB -> float32 [3,S,S], normalised."""
    return normalise(np.asarray(img, dtype=np.float32).transpose(2, 0, 1))


def text_corpus(n_pages, seed=123, levels=(0, 1, 2, 3, 4)):
    """Markdown of n_pages pages (for tokenizer training): cheap, text only."""
    r = Renderer(seed=seed)
    out = []
    for i in range(n_pages):
        r.level = levels[i % len(levels)]
        _, md, _ = r.page()
        out.append(md)
    return out


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--level", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--boxes", action="store_true", help="draw the character boxes (debug)")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    r = Renderer(seed=a.seed, level=a.level)
    for i in range(a.n):
        img, md, chars = r.page()
        if a.boxes:
            d = ImageDraw.Draw(img)
            for (k, x0, y0, x1, y1) in chars:
                d.rectangle([x0, y0, x1, y1], outline=(255, 0, 0))
        img.save(os.path.join(a.out, f"page{i}.png"))
        with open(os.path.join(a.out, f"page{i}.md"), "w") as f:
            f.write(md)
        assert all(md[k] != " " for k, *_ in chars)
        print(i, len(md), repr(md[:100]))
