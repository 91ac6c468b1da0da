#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets, tests/fuzz/corpus/<target>/ (tests/fuzz/targets.hpp):
valid inputs taken from or made like the fixtures in tests/data and models/uocr-demo, and invalid
ones at the edges each parser checks. Standard library only, deterministic: running it again
rewrites the same files.

    python3 tests/fuzz/make_seeds.py
"""
import base64
import json
import os
import shutil
import struct
import zlib

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CORPUS = os.path.join(ROOT, "tests", "fuzz", "corpus")
PUBLISHED = os.path.join(ROOT, "tests", "data", "unlimited-ocr")
DEMO = os.path.join(ROOT, "models", "uocr-demo")
TINY = os.path.join(ROOT, "tests", "data", "reference", "tiny-b")
PREPROCESS = os.path.join(ROOT, "tests", "data", "preprocess")


def read(path):
    with open(path, "rb") as f:
        return f.read()


def dumps(value):
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


class Target:
    """The seed folder of one target, emptied first so that removed seeds do not linger."""

    def __init__(self, name):
        self.dir = os.path.join(CORPUS, name)
        shutil.rmtree(self.dir, ignore_errors=True)
        os.makedirs(self.dir)

    def add(self, name, data):
        with open(os.path.join(self.dir, name), "wb") as f:
            f.write(data)


# --- safetensors --------------------------------------------------------------------------------

def safetensors(entries, data, metadata=True, pad=True):
    """A safetensors file: entries = [(name, dtype, shape, [begin, end])], raw data section."""
    header = {"__metadata__": {"format": "pt"}} if metadata else {}
    for name, dtype, shape, offsets in entries:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": offsets}
    text = dumps(header)
    if pad:
        text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + data


def safetensors_seeds():
    t = Target("safetensors")
    f32 = struct.pack("<4f", 1, -2, 0.5, 3)
    bf16 = bytes([0x80, 0x3F, 0x00, 0xC0, 0x00, 0x00])
    f16 = bytes([0x00, 0x3C])
    t.add("valid_three_dtypes.safetensors", safetensors(
        [("a", "F32", [2, 2], [0, 16]), ("b", "BF16", [3], [16, 22]), ("c", "F16", [1], [22, 24]),
         ("empty", "F32", [0, 4], [24, 24])], f32 + bf16 + f16))
    t.add("valid_no_metadata.safetensors", safetensors([("w", "F32", [4], [0, 16])], f32, metadata=False, pad=False))
    t.add("valid_scalar.safetensors", safetensors([("s", "F32", [], [0, 4])], f32[:4]))
    # HF's safetensors requires the ranges to tile the data section: no overlap, gap or tail.
    t.add("overlapping_ranges.safetensors", safetensors(
        [("a", "F32", [2], [0, 8]), ("b", "F32", [2], [4, 12])], f32[:12]))
    t.add("same_range.safetensors", safetensors(
        [("a", "F32", [2], [0, 8]), ("b", "F32", [2], [0, 8])], f32[:8]))
    t.add("gap_between.safetensors", safetensors(
        [("a", "F32", [1], [0, 4]), ("b", "F32", [1], [8, 12])], f32[:12]))
    t.add("trailing_bytes.safetensors", safetensors([("a", "F32", [2], [0, 8])], f32))
    t.add("unsupported_dtype.safetensors", safetensors([("a", "I64", [2], [0, 16])], f32))
    t.add("size_mismatch.safetensors", safetensors([("a", "F32", [3], [0, 16])], f32))
    t.add("misaligned.safetensors", safetensors(
        [("a", "F16", [1], [0, 2]), ("b", "F32", [1], [2, 6]), ("c", "F16", [5], [6, 16])], f32))
    t.add("end_before_begin.safetensors", safetensors([("a", "F32", [0], [8, 4])], f32))
    t.add("past_the_end.safetensors", safetensors([("a", "F32", [8], [0, 32])], f32))
    t.add("huge_shape.safetensors", safetensors([("a", "F32", [1 << 40, 1 << 40], [0, 16])], f32))
    t.add("negative_shape.safetensors", safetensors([("a", "F32", [-4], [0, 16])], f32))
    t.add("float_offsets.safetensors", safetensors([("a", "F32", [4], [0.0, 16.5])], f32))
    for name, header in [("entry_not_object", b'{"a":[1,2]}     '), ("header_array", b"[1,2,3]"),
                         ("header_not_json", b"{'a':}"), ("duplicate_key", b'{"a":{},"a":{}} ')]:
        t.add(name + ".safetensors", struct.pack("<Q", len(header)) + header)
    t.add("header_length_past_end.safetensors", struct.pack("<Q", 1 << 62) + b"{}")
    t.add("too_short.safetensors", b"\x02\x00\x00\x00")
    # The same bytes are also read as a model.safetensors.index.json next to the shard of the
    # target's folder, model-00001-of-000001.safetensors with tensors "a" and "b".
    shard = "model-00001-of-000001.safetensors"
    t.add("index_valid.json", dumps({"metadata": {"total_size": 12}, "weight_map": {"a": shard, "b": shard}}))
    t.add("index_lists_missing_tensor.json", dumps({"weight_map": {"a": shard, "b": shard, "c": shard}}))
    t.add("index_other_shard.json", dumps({"weight_map": {"a": shard, "b": "model-00002-of-000002.safetensors"}}))
    t.add("index_path_in_name.json", dumps({"weight_map": {"a": "../" + shard}}))
    t.add("index_dot_dot.json", dumps({"weight_map": {"a": ".."}}))
    t.add("index_not_string.json", dumps({"weight_map": {"a": 1}}))
    t.add("index_no_weight_map.json", dumps({"metadata": {}}))
    t.add("index_empty_weight_map.json", dumps({"weight_map": {}}))


# --- config --------------------------------------------------------------------------------------

def config_seeds():
    t = Target("config")
    tiny = read(os.path.join(TINY, "config.json"))
    t.add("tiny_b_config.json", tiny)
    t.add("published_config.json", read(os.path.join(PUBLISHED, "config.json")))
    t.add("demo_config.json", read(os.path.join(DEMO, "config.json")))
    t.add("demo_uocr_decode.json", read(os.path.join(DEMO, "uocr_decode.json")))
    base = json.loads(tiny)

    def variant(name, edit):
        c = json.loads(json.dumps(base))
        edit(c)
        t.add(name, dumps(c))

    variant("zero_heads.json", lambda c: c.update(num_attention_heads=0))
    variant("heads_not_dividing.json", lambda c: c.update(num_attention_heads=3))
    variant("huge_vocab.json", lambda c: c.update(vocab_size=1 << 30, hidden_size=1 << 30))
    variant("eos_outside_vocab.json", lambda c: c.update(eos_token_id=c["vocab_size"]))
    variant("string_layers.json", lambda c: c.update(num_hidden_layers="3"))
    variant("negative_eps.json", lambda c: c.update(rms_norm_eps=-1e-6))
    variant("deepseek_vl_v2.json", lambda c: c.update(model_type="deepseek_vl_v2"))
    variant("vision_image_size_zero.json", lambda c: c["vision_config"].update(image_size=0))
    variant("sam_width_string.json", lambda c: c["vision_config"]["width"]["sam_vit_b"].update(width="48"))
    variant("sam_global_not_list.json", lambda c: c["vision_config"]["width"]["sam_vit_b"].update(global_attn_indexes=1))
    variant("projector_wrong.json", lambda c: c.update(projector_config={"projector_type": "mlp_gelu"}))
    t.add("decode_pages_one.json", dumps({"pages_per_group": 1}))
    t.add("decode_overlap_alone.json", dumps({"overlap_pages": 2}))
    t.add("decode_overlap_too_big.json", dumps({"pages_per_group": 3, "overlap_pages": 3}))
    t.add("decode_bad_positions.json", dumps({"positions": "sideways", "slide_kv": "reuse"}))
    t.add("decode_unknown_key.json", dumps({"pages_per_group": 4, "typo_key": 1}))
    t.add("decode_huge.json", dumps({"pages_per_group": 1 << 40}))
    t.add("not_an_object.json", b"[1, 2]")
    t.add("truncated.json", tiny[:100])
    t.add("deep_nesting.json", b"[" * 600 + b"]" * 600)


# --- tokenizer.json ------------------------------------------------------------------------------

def bytes_to_unicode():
    """GPT-2's byte -> printable character map, as ByteLevel uses it."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    out, n = {}, 0
    for b in range(256):
        if b in printable:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + n)
            n += 1
    return out


def added(content, id_, special=True, lstrip=False, rstrip=False, single_word=False, normalized=False):
    return {"id": id_, "content": content, "single_word": single_word, "lstrip": lstrip, "rstrip": rstrip,
            "normalized": normalized, "special": special}


def small_tokenizer(full, n_merges=100):
    """The published tokenizer cut down to its 256 byte tokens, its first merges and a few added
    tokens, ids renumbered from 0 in the published order."""
    vocab = full["model"]["vocab"]
    merges = [m.split(" ") if isinstance(m, str) else m for m in full["model"]["merges"][:n_merges]]
    keep = set(bytes_to_unicode().values())
    for a, b in merges:
        keep.update((a, b, a + b))
    tokens = sorted(keep, key=lambda tok: vocab[tok])
    ids = {tok: i for i, tok in enumerate(tokens)}
    n = len(ids)
    tok = {k: v for k, v in full.items() if k not in ("model", "added_tokens")}
    tok["added_tokens"] = [added("<｜begin▁of▁sentence｜>", n), added("<｜end▁of▁sentence｜>", n + 1),
                           added("<image>", n + 2), added("<td>", n + 3), added("<｜User｜>", n + 4, special=False)]
    model = {k: v for k, v in full["model"].items() if k not in ("vocab", "merges")}
    model["vocab"] = ids
    model["merges"] = [a + " " + b for a, b in merges]
    tok["model"] = model
    return tok


def tiny_tokenizer(vocab, merges, **model_options):
    """A bare ByteLevel tokenizer of a few tokens (most bytes unknown), for the invalid seeds."""
    model = {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
             "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "vocab": vocab, "merges": merges}
    model.update(model_options)
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
            "normalizer": None, "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                                                  "use_regex": True},
            "post_processor": None, "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                                                "use_regex": True},
            "model": model}


def tokenizer_json_seeds(full):
    t = Target("tokenizer_json")
    t.add("demo_model_tokenizer.json", read(os.path.join(DEMO, "tokenizer.json")))
    small = small_tokenizer(full)
    t.add("published_cut_down.json", dumps(small))

    pairs = json.loads(json.dumps(small))
    pairs["model"]["merges"] = [m.split(" ") for m in pairs["model"]["merges"]]
    t.add("merges_as_pairs.json", dumps(pairs))

    gpt2 = json.loads(json.dumps(small))
    gpt2["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}
    gpt2["model"]["ignore_merges"] = True
    n = len(gpt2["model"]["vocab"])
    gpt2["added_tokens"] = [added("<s>", n, lstrip=True), added("</s>", n + 1, rstrip=True),
                            added("word", n + 2, special=False, single_word=True, normalized=True),
                            added("he", gpt2["model"]["vocab"]["he"], special=False)]
    t.add("gpt2_regex_prefix_space_strip_flags.json", dumps(gpt2))

    ab = {"a": 0, "b": 1, "ab": 2, "<unk>": 3}
    t.add("tiny_unk_fuse.json", dumps(tiny_tokenizer(ab, ["a b"], unk_token="<unk>", fuse_unk=True)))
    t.add("tiny_merge_result_missing.json", dumps(tiny_tokenizer({"a": 0, "b": 1}, ["a b"])))
    t.add("tiny_merge_part_missing.json", dumps(tiny_tokenizer({"a": 0, "ab": 1}, ["a b"])))
    t.add("tiny_merge_three_parts.json", dumps(tiny_tokenizer(ab, ["a b c"])))
    t.add("tiny_id_past_2_24.json", dumps(tiny_tokenizer({"a": 1 << 24, "b": 1, "ab": 2}, ["a b"])))
    t.add("tiny_id_negative.json", dumps(tiny_tokenizer({"a": -1, "b": 1, "ab": 2}, ["a b"])))
    t.add("tiny_dropout.json", dumps(tiny_tokenizer(ab, ["a b"], dropout=0.5)))
    t.add("tiny_unk_not_in_vocab.json", dumps(tiny_tokenizer(ab, [], unk_token="<missing>")))
    bad_decoder = tiny_tokenizer(ab, [])
    bad_decoder["decoder"] = {"type": "WordPiece"}
    t.add("tiny_decoder_wordpiece.json", dumps(bad_decoder))
    bad_normalizer = tiny_tokenizer(ab, [])
    bad_normalizer["normalizer"] = {"type": "NFKC"}
    t.add("tiny_normalizer_nfkc.json", dumps(bad_normalizer))
    no_added = tiny_tokenizer(ab, [])
    del no_added["added_tokens"]
    t.add("tiny_no_added_tokens.json", dumps(no_added))
    bad_added = tiny_tokenizer(ab, [])
    bad_added["added_tokens"] = [{"id": 4, "content": "x"}, added("", 5)]
    t.add("tiny_added_token_flags_missing.json", dumps(bad_added))
    split = tiny_tokenizer(ab, [])
    split["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": "\\p{N}{1,3}"}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
    t.add("tiny_digit_split.json", dumps(split))
    t.add("not_json.json", b'{"model": {"vocab": {"a": 0,')


# --- tokenizer codec -----------------------------------------------------------------------------

def tokenizer_codec_seeds(full):
    t = Target("tokenizer_codec")
    texts = {
        "ascii.txt": "The quick brown fox jumps over the lazy dog. 1234567890 -- e.g. don't stop!\n",
        "markdown_table.txt": "# Title\n\n| a | b |\n|---|---|\n| 1 | <td>2</td> |\n\n**bold** _it_ `code`\n",
        "cjk_kana.txt": "中文文本的识别。日本語のテキスト、カタカナとひらがな。한국어 텍스트.",
        "emoji_combining.txt": "e\u0301 n\u0303 \U0001F600\U0001F44D\U0001F3FD \u200d\ufeff",
        "rtl_indic.txt": "مرحبا بالعالم नमस्ते दुनिया ສະບາຍດີ",
        "special_tokens.txt": "<｜begin▁of▁sentence｜><image>\n<|grounding|>Convert the document to markdown. <PAGE>",
        "whitespace.txt": "a  b\t\tc\r\n\r\n   \n\u3000d\u00a0e\u2028f   ",
        "numbers_punct.txt": "3.14159, 2,718; 1e-10 ¥100 €5 ½ ①②③ x²+y²=z² !!!??? ...",
    }
    for name, text in texts.items():
        t.add(name, text.encode())
    t.add("invalid_utf8.bin", b"ok \xc3\x28 \xa0\xa1 \xe2\x28\xa1 \xf0\x28\x8c\xbc \xed\xa0\x80 \xc0\xaf \xf8\x88\x80\x80\x80 end")
    t.add("truncated_utf8.bin", "文".encode()[:2])
    vocab = full["model"]["vocab"]
    # Token ids as the target reads them (3 bytes each, little-endian): whole words, bytes that
    # are parts of one UTF-8 character, special tokens, the last id and one past it.
    words = ["ĠThe", "Ġquick", "ä¸", "Ń", "æĸĩ", "Ċ", "ĠĠ", "Ã", "©"]
    ids = [vocab[w] for w in words if w in vocab] + [0, 1, 2, 128815, 128825]
    t.add("ids_words_partial_chars.bin", b"".join(struct.pack("<I", i)[:3] for i in ids))
    t.add("ids_utf8_split.bin", b"".join(struct.pack("<I", vocab[w])[:3] for w in ["Ã", "Ã", "©", "ä", "Ċ"] if w in vocab))
    t.add("ids_past_the_end.bin", b"".join(struct.pack("<I", i)[:3] for i in [128826, 128827, 0xFFFFFF]))


# --- npy -----------------------------------------------------------------------------------------

def npy(descr, shape, data, version=1, fortran=False, header=None):
    if header is None:
        dims = "".join("%d," % d for d in shape) if len(shape) == 1 else ", ".join("%d" % d for d in shape)
        header = "{'descr': '%s', 'fortran_order': %s, 'shape': (%s), }" % (descr, "True" if fortran else "False", dims)
    header = header.encode("latin-1")
    prefix = 10 if version == 1 else 12
    header += b" " * ((64 - (prefix + len(header) + 1) % 64) % 64) + b"\n"
    length = struct.pack("<H", len(header)) if version == 1 else struct.pack("<I", len(header))
    return b"\x93NUMPY" + bytes([version, 0]) + length + header + data


def npy_seeds():
    t = Target("npy")
    t.add("f4_2x3.npy", npy("<f4", [2, 3], struct.pack("<6f", 0, 1, -1, 0.5, 1e30, -0.0)))
    t.add("f2_4.npy", npy("<f2", [4], bytes([0, 0x3C, 0, 0xBC, 0xFF, 0x7B, 0, 0x7C])))
    t.add("f8_2x2.npy", npy("<f8", [2, 2], struct.pack("<4d", 1, 2, 1e300, float("nan"))))
    t.add("i8_3.npy", npy("<i8", [3], struct.pack("<3q", 0, -1, 1 << 62)))
    t.add("i4_2x2.npy", npy("<i4", [2, 2], struct.pack("<4i", 1, -2, 2 ** 31 - 1, -2 ** 31)))
    t.add("b1_5.npy", npy("|b1", [5], bytes([1, 0, 1, 1, 0])))
    t.add("u1_3_alias.npy", npy("<u1", [3], bytes([0, 127, 255])))
    t.add("scalar.npy", npy("<f4", [], struct.pack("<f", 7)))
    t.add("empty_0x3.npy", npy("<f4", [0, 3], b""))
    t.add("version2.npy", npy("<i4", [2], struct.pack("<2i", 5, 6), version=2))
    t.add("version3.npy", npy("<f4", [1], struct.pack("<f", 1), version=3))
    t.add("fortran.npy", npy("<f4", [2, 2], struct.pack("<4f", 1, 2, 3, 4), fortran=True))
    t.add("big_endian.npy", npy(">f4", [1], struct.pack(">f", 1)))
    t.add("object_dtype.npy", npy("|O", [1], b"\0" * 8))
    def shape_only(shape):
        return npy("<f4", [], b"", header="{'descr': '<f4', 'fortran_order': False, 'shape': %s, }" % shape)

    t.add("shape_overflow.npy", shape_only("(4294967296, 4294967296, 4294967296)"))
    t.add("shape_huge_digits.npy", shape_only("(99999999999999999999999,)"))
    t.add("shape_empty_huge.npy", shape_only("(4611686018427387904, 4611686018427387904, 0)"))
    t.add("shape_negative.npy", shape_only("(-1,)"))
    t.add("shape_unclosed.npy", npy("<f4", [], b"", header="{'descr': '<f4', 'fortran_order': False, 'shape': (1, 2"))
    t.add("no_descr.npy", npy("<f4", [], b"", header="{'fortran_order': False, 'shape': (1,), }"))
    t.add("descr_at_end.npy", npy("<f4", [], b"", header="{'shape': (1,), 'fortran_order': False, 'descr':"))
    t.add("truncated_data.npy", npy("<f8", [4], struct.pack("<2d", 1, 2)))
    t.add("header_past_end.npy", b"\x93NUMPY\x01\x00\xff\xff{'descr'")
    t.add("bad_magic.npy", b"\x93NUMPX\x01\x00\x10\x00" + b" " * 16)
    t.add("nine_bytes.npy", b"\x93NUMPY\x02\x00\x00")


# --- image ---------------------------------------------------------------------------------------

def png_chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def png(width, height, depth, colour, rows, interlace=0, extra=b""):
    ihdr = struct.pack(">IIBBBBB", width, height, depth, colour, 0, 0, interlace)
    raw = b"".join(b"\0" + r for r in rows)
    return (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) + extra + png_chunk(b"IDAT", zlib.compress(raw, 9)) +
            png_chunk(b"IEND", b""))


def bmp(width, height, bits, pixels, palette=b"", top_down=False):
    """An uncompressed BITMAPINFOHEADER BMP; pixels = rows, each padded to 4 bytes."""
    offset = 14 + 40 + len(palette)
    info = struct.pack("<IiiHHIIiiII", 40, width, -height if top_down else height, 1, bits, 0, len(pixels), 2835, 2835,
                       len(palette) // 4, 0)
    return b"BM" + struct.pack("<IHHI", offset + len(pixels), 0, 0, offset) + info + palette + pixels


def image_seeds():
    t = Target("image")
    for name in sorted(os.listdir(PREPROCESS)):
        if name.endswith((".png", ".jpg", ".bmp", ".gif", ".ppm", ".tga")):
            t.add(name, read(os.path.join(PREPROCESS, name)))
    t.add("png_interlaced_rgb.png", png(5, 4, 8, 2, [bytes(range(y, y + 15)) for y in range(4)], interlace=1))
    t.add("png_palette_trns.png", png(3, 2, 8, 3, [b"\0\1\2", b"\2\1\5"],
                                      extra=png_chunk(b"PLTE", bytes(range(9))) + png_chunk(b"tRNS", b"\x80")))
    t.add("png_1bit_gray.png", png(9, 2, 1, 0, [b"\xaa\x80", b"\x55\x00"]))
    t.add("png_declares_huge.png", png(65535, 65535, 16, 6, [b""]))
    t.add("png_truncated.png", png(8, 8, 8, 2, [bytes(24)] * 8)[:60])
    t.add("bmp_top_down_24.bmp", bmp(3, 2, 24, bytes(range(12)) + bytes(range(12, 24)), top_down=True))
    t.add("bmp_palette_index_past.bmp", bmp(4, 2, 8, bytes([0, 1, 7, 200, 1, 0, 3, 255]),
                                            palette=bytes([255, 0, 0, 0, 0, 255, 0, 0])))
    t.add("bmp_32_alpha.bmp", bmp(2, 2, 32, bytes(range(16))))
    gif = read(os.path.join(PREPROCESS, "noise_23x17.gif"))
    t.add("gif_screen_65535.gif", gif[:6] + struct.pack("<HH", 65535, 65535) + gif[10:])
    t.add("pgm_16bit.pgm", b"P5\n3 2\n65535\n" + bytes(range(12)))
    t.add("ppm_maxval_15.ppm", b"P6 2 1 15 " + bytes([15, 0, 7, 1, 2, 3]))
    t.add("hdr_rle_off.hdr", b"#?RADIANCE\nFORMAT=32-bit_rle_rgbe\n\n-Y 2 +X 2\n" + bytes([128, 64, 32, 129] * 4))
    psd = (b"8BPS" + struct.pack(">H6xHIIHH", 1, 3, 2, 2, 8, 3) + struct.pack(">III", 0, 0, 0) + struct.pack(">H", 0) +
           bytes(range(12)))
    t.add("psd_raw_rgb.psd", psd)
    jpeg = read(os.path.join(PREPROCESS, "j420_33x17.jpg"))
    t.add("jpeg_truncated.jpg", jpeg[: len(jpeg) // 2])
    t.add("jpeg_soi_only.jpg", b"\xff\xd8\xff\xd9")


# --- session checkpoint --------------------------------------------------------------------------

def edit(at, drop, data, from_end=False):
    """An input of the checkpoint target: replace `drop` payload bytes at `at` by `data`."""
    return struct.pack("<HH", at | (0x8000 if from_end else 0), drop) + data


def checkpoint_seeds():
    t = Target("checkpoint")
    t.add("unchanged", b"")
    values = [b"\xff" * 8, b"\x00" * 8, b"\xff\xff\xff\x7f\x00\x00\x00\x00", b"\x00\x00\x00\x40\x00\x00\x00\x00"]
    # The payload begins with the identities (model, parameters, pages) and the layout, then the
    # page-group state and the first KV rows; it ends with the last logits and the loop state.
    for i, at in enumerate(range(0, 1600, 40)):
        t.add("start_%04d" % at, edit(at, 8, values[i % len(values)]))
    for i, back in enumerate(range(8, 4200, 104)):
        t.add("end_%04d" % back, edit(back, 8, values[i % len(values)], from_end=True))
    t.add("truncated_at_start", edit(200, 0xFFFF, b""))
    t.add("truncated_at_end", edit(16, 16, b"", from_end=True))
    t.add("extra_bytes", edit(0, 0, b"more", from_end=True))
    t.add("nan_logits", edit(4200, 4, struct.pack("<f", float("nan")), from_end=True))


# --- CLI arguments -------------------------------------------------------------------------------

def cli_args_seeds():
    t = Target("cli_args")
    lines = {
        "run_basic": ["--max-tokens", "100", "--quiet", "page.png"],
        "run_sampling": ["--temperature", "0.7", "--top-p", "0.9", "--seed", "42", "--ngram", "0", "a.png", "b.pdf"],
        "run_groups": ["--pages-per-group", "3", "--overlap", "2", "--positions", "group", "--slide-kv", "recompute", "d.pdf"],
        "run_sparse": ["--reference-budget", "4,8,64", "--reference-gate", "2,0", "d.pdf"],
        "run_checkpoint": ["--checkpoint", "run.ckpt", "--checkpoint-every", "50", "--resume", "-o", "out.md", "d.pdf"],
        "run_limits": ["--max-image-pixels", "18446744073709551615", "--max-image-bytes", "0", "--max-jpeg-scans", "-1", "x.jpg"],
        "run_int_min_group": ["--pages-per-group", "-2147483648", "x.png"],
        "run_bad_numbers": ["--temperature", "nan", "--window", "1e3", "--seed", "99999999999", "x.png"],
        "run_choices": ["--mode", "gundam", "--attention", "full", "--loop-guard", "off", "--format", "raw", "--cuda-graphs",
                        "maybe", "x.png"],
        "run_backend": ["--backend", "vulkan", "--device", "-1", "--stats", "json", "x.png"],
        "run_typo": ["--max-token", "5", "x.png"],
        "run_missing_value": ["x.png", "--dpi"],
        "run_budget_forms": ["--reference-budget", "0,0", "--reference-gate", "1,2", "x.png"],
        "run_budget_junk": ["--reference-budget", "4,,8", "x.png"],
        "inspect_model": ["--model", "models/uocr-demo", "--verify", "--checksums", "SHA256SUMS"],
        "tokenize_ids": ["--ids", "1,2, 3,-4,2147483648"],
        "tokenize_text": ["--text", "hello <image> world"],
        "vision": ["--image", "a.png", "--image", "b.png", "--mode", "base", "-o", "v.npy"],
        "logits": ["--image", "a.png", "--input-ids", "ids.npy", "--generated", "gen.npy", "--attention", "rswa",
                   "--window", "0", "-o", "l.npy"],
        "refused_backend": ["--backend", "cpu", "--image", "a.png", "-o", "v.npy"],
        "help_and_dash": ["--help", "-", "--", "-o"],
    }
    for name, argv in lines.items():
        t.add(name, "\0".join(argv).encode())


# --- uocr serve's requests ------------------------------------------------------------------------

def service_request_seeds():
    t = Target("service_request")
    png = read(os.path.join(PREPROCESS, "grad_64x48.png"))
    uri = "data:image/png;base64," + base64.b64encode(png).decode()
    image = {"type": "image_url", "image_url": {"url": uri}}
    infer_py = {"model": "Unlimited-OCR", "messages": [{"role": "user", "content": [{"type": "text", "text": "document parsing."}, image]}],
                "temperature": 0, "skip_special_tokens": False, "stream": True, "images_config": {"image_mode": "gundam"},
                "custom_logit_processor": "{}", "custom_params": {"ngram_size": 35, "window_size": 128}}
    t.add("infer_py", dumps(infer_py))
    t.add("vllm_recipe", dumps({"model": "baidu/Unlimited-OCR", "max_tokens": 8192, "temperature": 0.0, "skip_special_tokens": False,
                                "vllm_xargs": {"ngram_size": 35, "window_size": 128},
                                "messages": [{"role": "user", "content": [{"type": "text", "text": "<image>document parsing."}, image]}]}))
    t.add("multi_page", dumps({"messages": [{"role": "user", "content": [{"type": "text", "text": "<image><image>Multi page parsing."},
                                                                         image, image]}],
                               "stream_options": {"include_usage": True}, "extra_body": {"seed": 3, "top_p": 0.5}}))
    t.add("string_content", dumps({"messages": [{"role": "user", "content": "no image"}]}))
    t.add("bad_uri", dumps({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": "data:image/png;base64,=="}]}]}))
    t.add("job_options", dumps({"mode": "base", "pages": "2-7", "dpi": "150", "window_size": 1024, "temperature": "0.5",
                                "callback_url": "https://example.com/hook", "max_tokens": 100}))
    t.add("job_options_bad", dumps({"pages": "7-2", "seed": -1}))
    t.add("redis_url", b"redis://worker:secret@127.0.0.1:6379/2")
    t.add("storage_key", b"jobs/job-00000000000000000000000a/checkpoint-g2-17")
    t.add("job_progress", dumps({"state": "running", "started": 1, "ended": 0, "pages_done": 2, "tokens": 90, "output_bytes": 300,
                                 "prompt_tokens": 900, "finish_reason": "", "stop": "", "error_status": 0, "error": "",
                                 "page_seconds": {}}))


def http(head, body=b"", headers=()):
    """A raw HTTP/1.1 request: request line, headers (Content-Length added for a body), body."""
    lines = [head.encode()] + [h.encode() for h in headers]
    if body:
        lines.append(b"Content-Length: %d" % len(body))
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


def multipart(parts, boundary=b"uocr-seed"):
    """A multipart/form-data body: parts = [(name, filename or None, bytes)]."""
    out = b""
    for name, filename, data in parts:
        disposition = b'form-data; name="%s"' % name.encode() + (b'; filename="%s"' % filename.encode() if filename else b"")
        out += b"--" + boundary + b"\r\nContent-Disposition: " + disposition + b"\r\n\r\n" + data + b"\r\n"
    return out + b"--" + boundary + b"--\r\n"


def http_request_seeds():
    t = Target("http_request")
    png = read(os.path.join(PREPROCESS, "grad_64x48.png"))
    uri = "data:image/png;base64," + base64.b64encode(png).decode()
    chat = dumps({"model": "Unlimited-OCR", "messages": [{"role": "user", "content": [
        {"type": "text", "text": "document parsing."}, {"type": "image_url", "image_url": {"url": uri}}]}], "stream": True})
    json_type = "Content-Type: application/json"
    t.add("chat", http("POST /v1/chat/completions HTTP/1.1", chat, ["Host: 127.0.0.1:8000", "Authorization: Bearer key", json_type]))
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(chat[i:i + 500]), chat[i:i + 500]) for i in range(0, len(chat), 500)) + b"0\r\n\r\n"
    t.add("chat_chunked", http("POST /v1/chat/completions HTTP/1.1", headers=[json_type, "Transfer-Encoding: chunked"]) + chunks)
    form = "Content-Type: multipart/form-data; boundary=uocr-seed"
    t.add("job_multipart", http("POST /v1/jobs HTTP/1.1", multipart([("file", "page1.png", png), ("file", "page2.png", png),
                                                                        ("mode", None, b"base"), ("pages", None, b"1-2"),
                                                                        ("max_tokens", None, b"64")]), [form]))
    pdf = b"%PDF-1.4\n1 0 obj << /Type /Catalog >> endobj\ntrailer << /Root 1 0 R >>\n%%EOF\n"
    t.add("job_multipart_pdf", http("POST /v1/jobs HTTP/1.1", multipart([("file", "book.pdf", pdf),
                                                                            ("options", None, dumps({"dpi": 150, "pages": "3-7"}))]),
                                    [form, "Expect: 100-continue"]))
    t.add("job_multipart_bad", http("POST /v1/jobs HTTP/1.1", multipart([("files", "x", b""), ("pages", None, b"9-2")]), [form]))
    t.add("job_json", http("POST /v1/jobs HTTP/1.1", dumps({"files": [uri], "options": {"mode": "gundam", "seed": 7}}), [json_type]))
    job = "job-0123456789abcdef01234567"
    t.add("job_status", http(f"GET /v1/jobs/{job}?wait=2.5 HTTP/1.1"))
    t.add("job_result", http(f"GET /v1/jobs/{job}/result?format=json HTTP/1.1"))
    t.add("job_page_image", http(f"GET /v1/jobs/{job}/pages/3/image HTTP/1.1"))
    t.add("job_cancel", http(f"DELETE /v1/jobs/{job} HTTP/1.1"))
    t.add("job_id_climbs", http("GET /v1/jobs/%2e%2e%2f%2e%2e%2fetc/result HTTP/1.1"))


def main():
    with open(os.path.join(PUBLISHED, "tokenizer.json"), encoding="utf-8") as f:
        full = json.load(f)
    safetensors_seeds()
    config_seeds()
    tokenizer_json_seeds(full)
    tokenizer_codec_seeds(full)
    npy_seeds()
    image_seeds()
    checkpoint_seeds()
    cli_args_seeds()
    service_request_seeds()
    http_request_seeds()


if __name__ == "__main__":
    main()
