#!/usr/bin/env python3
"""Generates tests/data/tokenizer_fixture.jsonl: strings with the ids the Hugging Face `tokenizers`
library gives them, for tests/test_tokenizer.cpp.

Each line is one JSON object:
  {"text": str, "ids": [int], "decoded": str[, "decoded_skip": str]}   encode(text) and decode(ids)
  {"ids": [int], "decoded": str[, "decoded_skip": str]}                 decode of random ids only
"decoded" is decode(ids, skip_special_tokens=False); "decoded_skip" (written only when it differs)
is decode(ids, skip_special_tokens=True). Encoding uses add_special_tokens=False.

    python3 tools/tokenizer/gen_fixture.py [--tokenizer PATH] [--out PATH]
"""
import argparse
import json
import os
import random

import tokenizers
from tokenizers import Tokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SEED = 20240611

PROSE = """The quick brown fox jumps over the lazy dog. It's a well-known pangram; they've used it
since the 1880s. "Don't panic," she said -- and we'll see what happens next... Dr. Smith's
results (n=42, p<0.05) weren't conclusive, yet the committee approved the $3.5M budget on
2023-04-01 at 09:30 a.m. E-mail: john.doe@example.com, URL: https://www.example.org/path?q=1&r=2#top.
Section 4.2.1 describes the algorithm; see Fig. 3b and Table II for the ablation results.
In 1969, Apollo 11 landed on the Moon. CAPITALS, camelCase, snake_case, kebab-case, PascalCase.
Price: €12.99 / £10 / ¥1500. Temperature: -3.5°C (26.6°F). Ratio 3:2, 50% off, #hashtag @user.
naïve café résumé coöperate façade jalapeño Zürich São Paulo Kraków Ångström Øresund.""".split("\n")

CHINESE = [
    "深度学习模型在文档解析任务中表现出色。", "本文提出了一种新的光学字符识别方法，", "实验结果表明，该方法在多个基准数据集上均取得了最优性能。", "第三章　系统设计与实现",
    "表１：不同模型的对比结果（单位：％）", "“你好，世界！”他说道。", "《红楼梦》是中国古典四大名著之一。", "图像分辨率为１０２４×１０２４像素。",
    "北京时间2024年5月1日上午10点30分", "繁體中文：這是一個測試句子，包含標點符號。",
]
JAPANESE = [
    "これは日本語のテストです。", "東京都渋谷区でコーヒーを飲みました。", "カタカナとひらがなと漢字が混ざっています。", "ドキュメント・パーシングの精度は９５．３％でした。",
    "「こんにちは」と彼女は言った。", "ｱｲｳｴｵ 半角カナ ﾃｽﾄ", "令和６年４月１日（月）",
]
KOREAN = [
    "안녕하세요, 세계!", "문서 인식 모델의 성능을 평가합니다.", "한국어 텍스트와 English가 섞여 있습니다.", "ㄱㄴㄷ ㅏㅑㅓ 자모 테스트",
]
ARABIC = [
    "مرحبا بالعالم", "هذا نص تجريبي باللغة العربية.", "العدد ١٢٣٤٥ والعدد 678",
    "بِسْمِ اللَّهِ الرَّحْمَٰنِ الرَّحِيمِ",
]
OTHER_SCRIPTS = [
    "Привет, мир! Ёлка и щука.", "Γειά σου Κόσμε, αβγδε ΑΒΓΔΕ", "שלום עולם",
    "नमस्ते दुनिया, क्षत्रिय", "สวัสดีชาวโลก ภาษาไทย", "Xin chào thế giới, Tiếng Việt có dấu",
    "ქართული ენა", "Հայերեն լեզու", "ᠮᠣᠩᠭᠣᠯ ᠪᠢᠴᠢᠭ", "ꦗꦮ", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝐛𝐨𝐥𝐝 𝟏𝟐𝟑", "ᚠᚢᚦᚨᚱᚲ", "ⓐⓑⓒ ⒜⒝ ㈠㈡",
]
MARKDOWN = [
    "# Heading 1\n\n## Heading 2\n\nSome *italic* and **bold** text.",
    "- item one\n- item two\n  - nested item\n1. first\n2. second",
    "| Name | Value |\n|------|------:|\n| a | 1.5 |\n| b | 22 |",
    "```python\ndef f(x):\n    return x ** 2\n```", "> quote line\n>\n> another",
    "[link](http://a.b/c) ![img](images/0.jpg)", "---\n\n***\n\n___",
    "Term\n: definition\n\n\tindented code\n",
]
LATEX = [
    r"$E = mc^2$", r"\frac{a}{b} + \sqrt{x^2 + y^2}",
    r"$$\int_0^\infty e^{-x^2}\,dx = \frac{\sqrt{\pi}}{2}$$",
    r"\begin{align} f(x) &= \sum_{i=1}^{n} a_i x^i \\ g(x) &= \prod_{j} (x - r_j) \end{align}",
    r"\mathbf{W}_{q} \in \mathbb{R}^{d \times d_k}",
    r"\left( \alpha + \beta \right) \cdot \gamma_{12}", r"\text{softmax}(QK^\top / \sqrt{d})V",
    r"\{ x \mid x > 0 \}", r"a_{ij}^{(k)} \leq \epsilon",
]
HTML = [
    "<table><tr><td>1</td><td>2</td></tr><tr><td>3</td><td>4</td></tr></table>",
    "<table><tr><td colspan=\"2\">合计</td></tr><tr><td>A</td><td>B</td></tr></table>",
    "<td>a</td> <tr> </tr>\n<td>\n</td>", "<th>Header</th><td rowspan=2>x</td>",
    "<tr><td></td></tr>", "<div class=\"x\">text</div><br/><p>para</p>",
    "&amp; &lt; &gt; &nbsp; &#x4e2d;",
]
SPECIAL = [
    "<image>", "<|ref|>", "<|/ref|>", "<|det|>", "<|/det|>", "<|grounding|>", "<td>", "</td>",
    "<tr>", "</tr>", "<|User|>", "<|Assistant|>", "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>",
    "<｜▁pad▁｜>", "<|EOT|>", "<｜User｜>", "<｜Assistant｜>", "<｜fim▁hole｜>", "<｜tool▁sep｜>",
    "<｜place▁holder▁no▁17｜>",
]
NEAR_SPECIAL = [
    "<|det", "det|>", "<image", "image>", "<td", "</t", "<|/", "<<image>>", "<|det|<|det|>",
    "<imag<image>e>", "<|ref|><|ref|>", "<tr><tr>", "< td>", "<TD>", "<|ground", "<table>",
    "</table>", "<PAGE>", "<page>",
]
LABELS = [
    "text", "title", "header", "image", "image_caption", "table", "table_caption", "equation",
    "footer", "list",
]
EMOJI = [
    "😀", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇯🇵", "🇺🇸", "1️⃣", "❤️", "🧑🏿‍💻", "🤷‍♀️", "©️", "™", "🐍", "🚀✨",
    "👁‍🗨",
]
COMBINING = [
    "e\u0301", "n\u0303", "a\u0308\u0304", "Z\u0351\u036b\u0343a\u0310\u0344l\u0352g\u0351o",
    "\u0301abc", "क्ष", "ก\u0e31\u0e49", "\u0300\u0301\u0302", "ﷺ", "\u200d", "\u200b", "\ufeff",
    "\u00ad", "x\u20dd",
]
WHITESPACE = [
    " ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\n\n\n", "\r\n", "\r\n\r\n", "\r", " \n", "\n ",
    " \t \n", "\u00a0", "\u3000", "\u2028", "\u2029", "\u0085", "\u2009", "\u200a", "\u1680",
    "\x0b", "\x0c", "\u180e",
]
BLOCKS = [
    (0x20, 0x7E), (0xA0, 0x24F), (0x250, 0x2FF), (0x300, 0x36F), (0x370, 0x52F), (0x530, 0x8FF),
    (0x900, 0xDFF), (0xE00, 0xFFF), (0x1000, 0x1FFF), (0x2000, 0x206F), (0x2070, 0x2BFF),
    (0x2C00, 0x2FFF), (0x3000, 0x30FF), (0x3100, 0x4DBF), (0x4E00, 0x9FFF), (0xA000, 0xABFF),
    (0xAC00, 0xD7A3), (0xE000, 0xF8FF), (0xF900, 0xFFFF), (0x10000, 0x1FFFF), (0x1F300, 0x1FAFF),
    (0x20000, 0x2FFFF), (0xE0000, 0xE01EF), (0xF0000, 0x10FFFF),
]
ASCII_PUNCT = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"


def random_cp(rng):
    lo, hi = rng.choice(BLOCKS)
    while True:
        c = rng.randint(lo, hi)
        if not 0xD800 <= c < 0xE000:
            return chr(c)


def digits(rng):
    n = rng.choice([1, 2, 3, 4, 5, 6, 7, 9, 12, 16, 25, 40])
    s = "".join(rng.choice("0123456789") for _ in range(n))
    return rng.choice([s, s + "." + s[:2], "-" + s, "1,234,567", "3.14159", "０１２３４５", "²³¹", "ⅠⅡⅫ", "①②③",
                       "١٢٣٤", "৩৪", "¼½", s + "th", "v" + s, "#" + s, "$" + s])


def det_block(rng):
    box = [rng.randint(0, 999) for _ in range(4)]
    body = rng.choice(PROSE + CHINESE + ["", "<table><tr><td>x</td></tr></table>"])[:60]
    return f"<|det|>{rng.choice(LABELS)} {box}<|/det|>{body}\n"


def fragment(rng):
    kind = rng.randrange(17)
    if kind == 0:
        words = rng.choice(PROSE).split(" ")
        i = rng.randrange(len(words))
        return " ".join(words[i:i + rng.randint(1, 8)])
    if kind == 1:
        return rng.choice(CHINESE + JAPANESE + KOREAN + ARABIC + OTHER_SCRIPTS)
    if kind == 2:
        return digits(rng)
    if kind == 3:
        return rng.choice(MARKDOWN + LATEX + HTML)
    if kind == 4:
        return rng.choice(SPECIAL + NEAR_SPECIAL)
    if kind == 5:
        return det_block(rng)
    if kind == 6:
        return rng.choice(EMOJI + COMBINING)
    if kind == 7 or kind == 8:
        return rng.choice(WHITESPACE)
    if kind == 9:
        return "".join(random_cp(rng) for _ in range(rng.randint(1, 6)))
    if kind == 10:
        return rng.choice(ASCII_PUNCT) * rng.randint(1, 3) + rng.choice(["abc", "Xy", "é", "中", "", "1"])
    if kind == 11:
        return "".join(rng.choice("aZ1 .,'\"\n\t中あア한é\u0301-_/\\") for _ in range(rng.randint(1, 8)))
    if kind == 12:
        return rng.choice(["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "n't", "O'Neil", "rock'n'roll"])
    if kind == 13:
        return rng.choice(["http://x.y/z?a=1", "a.b@c.d", "C:\\path\\to\\file.txt", "/usr/bin/env", "x->y", "a==b", "i++",
                           "f(x)", "[1, 2, 3]", "{\"k\": \"v\"}", "<b>", "--flag=value", "a/b", "...", "?!", "¿Qué?"])
    if kind == 14:
        return rng.choice(["Ａｂｃ", "ﬁ ﬂ", "ǅ", "ß", "İ", "ﬀ", "Ⅸ", "㎞", "℃", "№", "™", "µ", "Å", "K"])
    if kind == 15:
        return rng.choice(["一", "龥", "龦", "〇", "ゟ", "゠", "ヿ", "ー", "・", "々", "〆", "ヶ", "㐀", "𠀀", "丶"])
    word = rng.choice(["word", "中文", ".", "1", "<td>", "é", "ا"])
    return rng.choice(WHITESPACE) + word + rng.choice(WHITESPACE)


def random_bytes_text(rng):
    data = bytes(rng.randrange(256) for _ in range(rng.randint(1, 24)))
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("utf-8", errors=rng.choice(["replace", "ignore"]))


def random_utf8_text(rng):
    # Bytes drawn to be mostly well-formed multi-byte sequences, so that decoding succeeds often.
    out = []
    for _ in range(rng.randint(1, 10)):
        out.append(random_cp(rng) if rng.random() < 0.7 else chr(rng.randint(0, 0x7F)))
    return "".join(out)


def texts(rng):
    fixed = ["document parsing.", "\nFree OCR.", "<image>", "<image>document parsing.", "<image>Multi page parsing.",
             "<image>\n<|grounding|>Given the layout of the image.", "<image>\nParse the figure.",
             "<image>\nExtract the text in the image.", "", " ", "a", "\n", "\r\n", "  \n  ", "trailing   ",
             "   leading", "\t\ttabs\tinside\t", "1234567890123", "a1b22c333d4444"]
    fixed += PROSE + CHINESE + JAPANESE + KOREAN + ARABIC + OTHER_SCRIPTS + MARKDOWN + LATEX + HTML
    fixed += SPECIAL + NEAR_SPECIAL + EMOJI + COMBINING + WHITESPACE
    out = list(fixed)
    for _ in range(3200):  # mixtures of fragments: the pre-tokenizer's boundary cases
        out.append("".join(fragment(rng) for _ in range(rng.randint(1, 6))))
    for _ in range(500):
        out.append("".join(random_cp(rng) for _ in range(rng.randint(1, 12))))
    for _ in range(400):
        out.append(random_bytes_text(rng))
    for _ in range(300):
        out.append(random_utf8_text(rng))
    for _ in range(300):  # whitespace runs around words
        pool = WHITESPACE + ["x", "Y", "中", ".", "7", "é", "\u0301"]
        out.append("".join(rng.choice(pool) for _ in range(rng.randint(2, 10))))
    for _ in range(200):
        out.append("".join(det_block(rng) for _ in range(rng.randint(1, 3))))
    for _ in range(6):  # a few long documents
        target = rng.randint(2000, 5000)
        parts = []
        while sum(map(len, parts)) < target:
            parts.append(fragment(rng))
        out.append("".join(parts)[:target])
    return out


def record(tok, ids, text=None):
    rec = {} if text is None else {"text": text}
    rec["ids"] = ids
    rec["decoded"] = tok.decode(ids, skip_special_tokens=False)
    skipped = tok.decode(ids, skip_special_tokens=True)
    if skipped != rec["decoded"]:
        rec["decoded_skip"] = skipped
    return rec


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokenizer", default=os.path.join(ROOT, "tests", "data", "unlimited-ocr", "tokenizer.json"))
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "data", "tokenizer_fixture.jsonl"))
    args = ap.parse_args()
    tok = Tokenizer.from_file(args.tokenizer)
    rng = random.Random(SEED)
    records = [record(tok, tok.encode(t, add_special_tokens=False).ids, t) for t in texts(rng)]
    # Random id sequences: byte tokens split UTF-8 characters, so decoding must insert U+FFFD.
    limit = tok.get_vocab_size(with_added_tokens=True)
    byte_ids = [i for i in range(limit)
                if len(tok.decode([i]).encode("utf-8")) == 1 or tok.decode([i]) == "\ufffd"]
    for _ in range(300):
        pool = byte_ids if rng.random() < 0.5 else range(limit)
        records.append(record(tok, [rng.choice(pool) for _ in range(rng.randint(1, 12))]))
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w", encoding="utf-8", newline="\n") as f:
        for rec in records:
            f.write(json.dumps(rec, ensure_ascii=False, separators=(",", ":")) + "\n")
    print(f"{args.out}: {len(records)} records, tokenizers {tokenizers.__version__}")


if __name__ == "__main__":
    main()
