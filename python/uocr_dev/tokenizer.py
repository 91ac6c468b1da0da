"""Builds the demo model's tokenizer files (Hugging Face `tokenizers` format).

A small byte-level BPE learnt on the training text (uocr_dev.data) with the SAME
pipeline as the real Unlimited-OCR tokenizer, so uocr's C++ tokenizer reads it unchanged:
normalizer = empty Sequence, pre_tokenizer = the DeepSeek-V3 Sequence copied verbatim from
tests/data/unlimited-ocr/tokenizer.json (digits 1-3, CJK/kana, the word regex, ByteLevel without
prefix space), ByteLevel post-processor and decoder, BPE without byte fallback or unk.

Ids: 0 `<｜begin▁of▁sentence｜>` (BOS), 1 `<｜end▁of▁sentence｜>` (EOS), 2 `<｜▁pad▁｜>` (PAD), then the
12 OCR special tokens of the real tokenizer_config.json in their order (`<image>`, `<|ref|>`,
`<|/ref|>`, `<|det|>`, `<|/det|>`, `<|grounding|>`, `<td>`, `</td>`, `<tr>`, `</tr>`, `<|User|>`,
`<|Assistant|>`), then the 256 byte symbols and the learnt merges up to --vocab entries.
tokenizer_config.json and special_tokens_map.json mirror the real files' structure.

    python3 -m uocr_dev.tokenizer --out models/uocr-demo --vocab 1024
"""
import argparse
import json
import os

from uocr_dev import ROOT

REAL = os.path.join(ROOT, "tests", "data", "unlimited-ocr")
BOS, EOS, PAD = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜▁pad▁｜>"
OCR_SPECIALS = ["<image>", "<|ref|>", "<|/ref|>", "<|det|>", "<|/det|>", "<|grounding|>",
                "<td>", "</td>", "<tr>", "</tr>", "<|User|>", "<|Assistant|>"]
SPECIALS = [BOS, EOS, PAD] + OCR_SPECIALS
PROMPT_SINGLE = "document parsing."
PROMPT_MULTI = "Multi page parsing."
PAGE_MARK = "<PAGE>"

# The DeepSeek-V3 pre-tokenizer (identical to tests/data/unlimited-ocr/tokenizer.json's), used when
# that file is not available.
DSV3_PRE = {"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"Regex": "\\p{N}{1,3}"}, "behavior": "Isolated", "invert": False},
    {"type": "Split", "pattern": {"Regex": "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+"}, "behavior": "Isolated", "invert": False},
    {"type": "Split", "pattern": {"Regex": "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"},
     "behavior": "Isolated", "invert": False},
    {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}


def real_tokenizer_sections():
    path = os.path.join(REAL, "tokenizer.json")
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            t = json.load(f)
        return t["pre_tokenizer"], t["post_processor"], t["decoder"]
    return (DSV3_PRE, {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
            {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True})


def corpus(n_pages, n_paragraphs, seed=123):
    from uocr_dev.data import LEVELS, Renderer, TextSource  # Pillow and numpy: only to build a tokenizer
    r = Renderer(seed=seed)
    for i in range(n_pages):
        r.level = i % len(LEVELS)
        _, md, _ = r.page()
        yield PAGE_MARK + md if i % 3 == 0 else md
    ts = TextSource(seed + 7)
    for i in range(n_paragraphs):
        yield " ".join(ts.words_of(ts.rng.randint(3, 30)))
    for _ in range(200):
        yield PROMPT_SINGLE
        yield PROMPT_MULTI


def build(vocab_size, n_pages=2000, n_paragraphs=30000):
    from tokenizers import Tokenizer, pre_tokenizers, trainers
    pre, post, dec = real_tokenizer_sections()
    skeleton = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
        "normalizer": {"type": "Sequence", "normalizers": []}, "pre_tokenizer": pre, "post_processor": post,
        "decoder": dec,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": {}, "merges": []}}
    tok = Tokenizer.from_str(json.dumps(skeleton))
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), min_frequency=2)
    tok.train_from_iterator(corpus(n_pages, n_paragraphs), trainer)
    j = json.loads(tok.to_str())
    # the sections exactly as in the real file (training must not have altered them)
    j["pre_tokenizer"], j["post_processor"], j["decoder"] = pre, post, dec
    j["normalizer"] = {"type": "Sequence", "normalizers": []}
    for a in j["added_tokens"]:
        a.update(single_word=False, lstrip=False, rstrip=False, normalized=False, special=True)
    return j


def write(out_dir, j):
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(j, f, ensure_ascii=False, indent=2)
    ids = {a["content"]: a["id"] for a in j["added_tokens"]}
    decoder = {str(ids[s]): {"content": s, "lstrip": False, "normalized": False, "rstrip": False,
                             "single_word": False, "special": True} for s in SPECIALS}
    cfg = {"add_bos_token": True, "add_eos_token": False, "add_prefix_space": None,
           "added_tokens_decoder": decoder, "additional_special_tokens": ["<|User|>", "<|Assistant|>"],
           "bos_token": BOS, "clean_up_tokenization_spaces": False, "eos_token": EOS, "extra_special_tokens": {},
           "legacy": True, "model_max_length": 8192, "pad_token": PAD, "tokenizer_class": "LlamaTokenizerFast",
           "unk_token": None, "use_default_system_prompt": False}
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, ensure_ascii=False, indent=2)
    tokd = lambda s: {"content": s, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False}  # noqa: E731
    stm = {"additional_special_tokens": [tokd("<|User|>"), tokd("<|Assistant|>")], "bos_token": tokd(BOS),
           "eos_token": tokd(EOS), "pad_token": tokd(PAD)}
    with open(os.path.join(out_dir, "special_tokens_map.json"), "w", encoding="utf-8") as f:
        json.dump(stm, f, ensure_ascii=False, indent=2)


class Tok:
    """Thin wrapper used by training/inference: encode without specials, ids of the specials."""

    def __init__(self, path):
        from tokenizers import Tokenizer
        self.t = Tokenizer.from_file(path)
        self.bos, self.eos, self.pad = (self.t.token_to_id(s) for s in (BOS, EOS, PAD))
        self.image = self.t.token_to_id("<image>")
        self.vocab_size = self.t.get_vocab_size(with_added_tokens=True)

    def encode(self, text):
        return self.t.encode(text, add_special_tokens=False).ids

    def encode_offsets(self, text):
        e = self.t.encode(text, add_special_tokens=False)
        return e.ids, e.offsets

    def decode(self, ids):
        return self.t.decode(list(ids), skip_special_tokens=False)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--vocab", type=int, default=1024)
    ap.add_argument("--pages", type=int, default=2000)
    a = ap.parse_args()
    j = build(a.vocab, n_pages=a.pages)
    write(a.out, j)
    t = Tok(os.path.join(a.out, "tokenizer.json"))
    s = "# Heading 12345\n\n| a | b |\n| --- | --- |\n<PAGE>Hello, world. document parsing."
    ids = t.encode(s)
    assert t.decode(ids) == s, (t.decode(ids), s)
    print(f"vocab {t.vocab_size}; bos/eos/pad/image = {t.bos}/{t.eos}/{t.pad}/{t.image}; "
          f"{len(s)} chars -> {len(ids)} tokens; prompt ids {t.encode(PROMPT_SINGLE)}")
