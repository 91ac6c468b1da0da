#!/usr/bin/env python3
"""Reference fixtures for tests/test_preprocess.cpp, written to tests/data/preprocess/.

Everything the C++ side must reproduce bit for bit is computed here with the real libraries:
  * decoding / convert("RGB") / ImageOps.exif_transpose  -> Pillow
  * Image.resize(BICUBIC), ImageOps.pad                     -> Pillow
  * the gundam grid choice                                  -> a copy of upstream's
    dynamic_preprocess / find_closest_aspect_ratio (modeling_unlimitedocr.py)
  * F.interpolate(bicubic, antialias) / F.interpolate(linear) -> PyTorch (x86-64 CPU kernels)

Inputs are small files, or for large sizes a procedural hash-noise image that the test
regenerates (procedural() below and in the test must stay identical). Large outputs are stored
as checksums (see checksum()).

Usage: python3 tools/preprocess/gen_fixtures.py [out_dir]
Generated with Pillow 11.3.0 (its wheel's libjpeg-turbo 3.1.1), numpy 2.4, torch 2.5.1 (CPU
kernels), CPython 3.11.7. Without torch the interpolation fixtures already in out_dir are kept and
the manifest reuses them. JPEG pixels are the same with Debian's libjpeg-turbo 2.1.5, which the C++
side links, and with Pillow 13's libjpeg-turbo 3.2.0.

Pillow must be older than 12.2: 12.2 resizes images more than 100x taller than wide vertically
first, and 13.0 picks the vertical pass first whenever Resample.c estimates it cheaper
(python-pillow/Pillow#9524, #9549). Upstream ran with an older Pillow, which always does the
horizontal pass first, and that is what the C++ side reproduces.
"""
import io
import json
import os
import struct
import sys
import zlib

import numpy as np
import PIL
from PIL import Image, ImageOps

if tuple(int(v) for v in PIL.__version__.split(".")[:2]) >= (12, 2):
    sys.exit(f"Pillow {PIL.__version__} changed the resize pass order; use Pillow < 12.2 (see above)")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "tests", "data", "preprocess")
rng = np.random.default_rng(20240611)


def procedural(w, h, seed):
    """uint32 hash noise, HxWx3 uint8; the C++ test has the same function."""
    x = np.arange(w, dtype=np.uint32)[None, :, None]
    y = np.arange(h, dtype=np.uint32)[:, None, None]
    c = np.arange(3, dtype=np.uint32)[None, None, :]
    with np.errstate(over="ignore"):
        v = (x * np.uint32(73856093)) ^ (y * np.uint32(19349663)) ^ (c * np.uint32(83492791)) ^ np.uint32(seed)
        v ^= v >> np.uint32(13)
        v *= np.uint32(0x5BD1E995)
        v ^= v >> np.uint32(15)
    return (v & np.uint32(255)).astype(np.uint8)


def checksum(a):
    """(byte sum, sum of byte * (index + 1)) mod 2^64 over the flattened uint8 array."""
    b = np.ascontiguousarray(a, dtype=np.uint8).reshape(-1).astype(np.uint64)
    idx = np.arange(1, b.size + 1, dtype=np.uint64)
    with np.errstate(over="ignore"):
        return [str(int(b.sum(dtype=np.uint64))), str(int((b * idx).sum(dtype=np.uint64)))]


def save_npy(name, arr):
    np.save(os.path.join(OUT, name), arr)
    return name


def save_file(name, data):
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(data)
    return name


def encode(im, fmt, **kw):
    b = io.BytesIO()
    im.save(b, fmt, **kw)
    return b.getvalue()


def png_raw(w, h, color_type, bit_depth, rows):
    """A PNG written by hand (Pillow cannot save 16-bit RGB)."""
    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)
    ihdr = struct.pack(">IIBBBBB", w, h, bit_depth, color_type, 0, 0, 0)
    raw = b"".join(b"\0" + r for r in rows)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


def pillow_decode(data):
    """Upstream load_image + convert('RGB')."""
    return np.asarray(ImageOps.exif_transpose(Image.open(io.BytesIO(data))).convert("RGB"))


# ---- upstream grid search (modeling_unlimitedocr.py, verbatim logic) ----
def target_ratios(min_num=2, max_num=32):
    ratios = set((i, j) for n in range(min_num, max_num + 1) for i in range(1, n + 1) for j in range(1, n + 1)
                 if i * j <= max_num and i * j >= min_num)
    return sorted(ratios, key=lambda x: x[0] * x[1])


def find_closest_aspect_ratio(aspect_ratio, ratios, width, height, image_size):
    best_ratio_diff = float("inf")
    best_ratio = (1, 1)
    area = width * height
    for ratio in ratios:
        target_aspect_ratio = ratio[0] / ratio[1]
        ratio_diff = abs(aspect_ratio - target_aspect_ratio)
        if ratio_diff < best_ratio_diff:
            best_ratio_diff = ratio_diff
            best_ratio = ratio
        elif ratio_diff == best_ratio_diff:
            if area > 0.5 * image_size * image_size * ratio[0] * ratio[1]:
                best_ratio = ratio
    return best_ratio


def gundam_views(im, base_size=1024):
    """infer(crop_mode=True): (global view, grid, tiles) as Pillow images."""
    w, h = im.size
    grid, tiles = (0, 0), []
    if not (w <= 640 and h <= 640):
        grid = find_closest_aspect_ratio(w / h, target_ratios(), w, h, 640)
        resized = im.resize((640 * grid[0], 640 * grid[1]))
        for i in range(grid[0] * grid[1]):
            c, r = i % grid[0], i // grid[0]
            tiles.append(resized.crop((c * 640, r * 640, (c + 1) * 640, (r + 1) * 640)))
    glob = ImageOps.pad(im, (base_size, base_size), color=(127, 127, 127))
    return glob, grid, tiles


def plain_view(im, image_size):
    """infer(crop_mode=False) / infer_multi."""
    if image_size <= 640:
        im = im.resize((image_size, image_size))
    return ImageOps.pad(im, (image_size, image_size), color=(127, 127, 127))


def main():
    os.makedirs(OUT, exist_ok=True)
    manifest = {"decode": [], "resize": [], "pad": [], "views": [], "grid": {}, "interpolate": []}
    images = {}  # file name -> RGB array as Pillow decodes it

    # ---- decoding ----
    def add_decode(name, data):
        save_file(name, data)
        arr = pillow_decode(data)
        images[name] = arr
        # JPEG pixels are exact with libjpeg (Pillow's decoder) and within a few levels with stb.
        manifest["decode"].append({"file": name, "expected": save_npy(name + ".npy", arr),
                                   "jpeg": data[:3] == b"\xff\xd8\xff"})

    noise = lambda w, h: rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    add_decode("noise_37x53.png", encode(Image.fromarray(noise(37, 53)), "PNG"))
    add_decode("noise_300x17.png", encode(Image.fromarray(noise(300, 17)), "PNG"))
    add_decode("px_1x1.png", encode(Image.fromarray(noise(1, 1)), "PNG"))
    gy, gx = np.mgrid[0:48, 0:64]
    grad = np.stack([gx * 4, gy * 5, (gx + gy) * 2], -1).astype(np.uint8)
    add_decode("grad_64x48.png", encode(Image.fromarray(grad), "PNG"))
    rgba = np.concatenate([noise(21, 13), rng.integers(0, 256, (13, 21, 1), dtype=np.uint8)], -1)
    add_decode("rgba_21x13.png", encode(Image.fromarray(rgba), "PNG"))
    add_decode("gray_31x19.png", encode(Image.fromarray(noise(31, 19)[..., 0]), "PNG"))
    la = np.stack([noise(13, 11)[..., 0], noise(13, 11)[..., 1]], -1)
    add_decode("la_13x11.png", encode(Image.fromarray(la), "PNG"))
    pal = Image.fromarray(noise(20, 10)).quantize(16)
    add_decode("palette_20x10.png", encode(pal, "PNG", transparency=3))
    g16 = (np.arange(63, dtype=np.uint16).reshape(7, 9) * 1039).astype(np.uint16)
    g16[0, :4] = [0, 1, 255, 256]
    add_decode("gray16_9x7.png", png_raw(9, 7, 0, 16, [r.astype(">u2").tobytes() for r in g16]))
    c16 = rng.integers(0, 65536, (5, 6, 3)).astype(">u2")
    add_decode("rgb16_6x5.png", png_raw(6, 5, 2, 16, [r.tobytes() for r in c16]))
    small = Image.fromarray(noise(23, 17))
    add_decode("noise_23x17.bmp", encode(small, "BMP"))
    add_decode("noise_23x17.tga", encode(small, "TGA"))
    add_decode("noise_23x17.ppm", encode(small, "PPM"))
    add_decode("noise_23x17.gif", encode(small.quantize(64), "GIF"))

    # EXIF orientation, PNG eXIf chunk: bit-exact (no lossy codec involved).
    base = Image.fromarray(noise(7, 5))
    for o in range(1, 9):
        exif = Image.Exif()
        exif[0x0112] = o
        add_decode(f"orient{o}_7x5.png", encode(base, "PNG", exif=exif.tobytes()))
    # JPEG: identical compressed data, only the orientation differs.
    yy, xx = np.mgrid[0:32, 0:48]
    photo = np.stack([xx * 5, yy * 7, 128 + 60 * np.sin(xx / 5.0) * np.cos(yy / 4.0)], -1).astype(np.uint8)
    photo_im = Image.fromarray(photo)
    for o in (1, 3, 6):
        exif = Image.Exif()
        exif[0x0112] = o
        add_decode(f"photo{o}_48x32.jpg", encode(photo_im, "JPEG", quality=95, exif=exif.tobytes()))
    # JPEG variants at odd sizes (partial MCUs, edge upsampling): every chroma subsampling, progressive,
    # grayscale, CMYK (Pillow writes it with an Adobe marker and reads it inverted). Own generator, so
    # that the fixtures above and below keep their random draws.
    jrng = np.random.default_rng(20261130)

    def jpeg_source(w, h):
        y, x = np.mgrid[0:h, 0:w]
        smooth = np.stack([x * 255 // w, y * 255 // h, 128 + 90 * np.sin(x / 3.0) * np.cos(y / 5.0)], -1)
        return np.clip(smooth + jrng.normal(0, 12, (h, w, 3)), 0, 255).astype(np.uint8)

    jpegs = {
        "j420_33x17.jpg": encode(Image.fromarray(jpeg_source(33, 17)), "JPEG", quality=90, subsampling=2),
        "j422_29x21.jpg": encode(Image.fromarray(jpeg_source(29, 21)), "JPEG", quality=85, subsampling=1),
        "j444_19x23.jpg": encode(Image.fromarray(jpeg_source(19, 23)), "JPEG", quality=95, subsampling=0),
        "jprog_35x27.jpg": encode(Image.fromarray(jpeg_source(35, 27)), "JPEG", quality=80, progressive=True),
        "jgray_27x13.jpg": encode(Image.fromarray(jpeg_source(27, 13)[..., 1]), "JPEG", quality=90),
        "jcmyk_21x15.jpg": encode(Image.frombytes("CMYK", (21, 15), np.concatenate(
            [jpeg_source(21, 15), jrng.integers(0, 256, (15, 21, 1), dtype=np.uint8)], -1).tobytes()), "JPEG",
            quality=90),
    }
    for name, data in jpegs.items():
        add_decode(name, data)
    # Cut JPEGs: Pillow (LOAD_TRUNCATED_IMAGES off) refuses or decodes each; the decoder must agree.
    manifest["truncated"] = []
    for name, data in jpegs.items():
        for keep in sorted({150, len(data) // 2, len(data) - 7, len(data) - 3, len(data) - 2, len(data) - 1}):
            try:
                pillow_decode(data[:keep])
                ok = True
            except OSError:
                ok = False
            manifest["truncated"].append({"file": name, "bytes": keep, "pillow_decodes": ok})
    # Corrupt entropy-coded data: libjpeg warns and goes on, and Pillow ignores its warnings.
    corrupt = bytearray(jpegs["j420_33x17.jpg"])
    for k in range(len(corrupt) // 2, len(corrupt) // 2 + 20):
        corrupt[k] ^= 0x5A
    add_decode("jcorrupt_33x17.jpg", bytes(corrupt))

    # ---- resize ----
    def add_resize(src, w, h, arr):
        out = np.asarray(Image.fromarray(arr).resize((w, h), Image.BICUBIC))
        case = {"source": src, "w": w, "h": h}
        if out.size <= 64 * 64 * 3:
            case["expected"] = save_npy(f"resize_{src_name(src)}_{w}x{h}.npy", out)
        else:
            case["checksum"] = checksum(out)
        manifest["resize"].append(case)

    def src_name(src):
        return src if isinstance(src, str) else "proc{}x{}s{}".format(src["w"], src["h"], src["seed"])

    def source_array(src):
        return images[src] if isinstance(src, str) else procedural(src["w"], src["h"], src["seed"])

    resize_cases = [
        ("noise_37x53.png", [(20, 31), (74, 106), (37, 90), (11, 53), (1, 1), (64, 64), (36, 54)]),
        ("noise_300x17.png", [(64, 3), (100, 40), (17, 60), (299, 17)]),
        ("px_1x1.png", [(5, 3), (1, 7)]),
        ("grad_64x48.png", [(97, 13), (640, 480)]),
        ({"w": 640, "h": 641, "seed": 1}, [(64, 64), (641, 640), (1280, 1282), (33, 700)]),
        ({"w": 900, "h": 500, "seed": 2}, [(50, 28), (1024, 569), (1920, 640)]),
    ]
    for src, sizes in resize_cases:
        for w, h in sizes:
            add_resize(src, w, h, source_array(src))

    # ---- pad (ImageOps.pad with the upstream colour) ----
    pad_sources = ["noise_37x53.png", "noise_300x17.png", "px_1x1.png", "grad_64x48.png",
                   {"w": 640, "h": 641, "seed": 1}, {"w": 900, "h": 500, "seed": 2},
                   {"w": 3, "h": 128, "seed": 3}, {"w": 5, "h": 128, "seed": 4}, {"w": 7, "h": 128, "seed": 5},
                   {"w": 128, "h": 5, "seed": 6}, {"w": 501, "h": 1000, "seed": 8}]
    for src in pad_sources:
        for s in (64, 100):
            out = np.asarray(ImageOps.pad(Image.fromarray(source_array(src)), (s, s), color=(127, 127, 127)))
            manifest["pad"].append({"source": src, "size": s,
                                    "expected": save_npy(f"pad_{src_name(src)}_{s}.npy", out)})

    # ---- whole views per mode (checksums of the uint8 views) ----
    view_cases = [
        ({"w": 1000, "h": 1500, "seed": 11}, "gundam"),
        ({"w": 1300, "h": 700, "seed": 12}, "gundam"),
        ({"w": 641, "h": 480, "seed": 13}, "gundam"),
        ({"w": 640, "h": 640, "seed": 14}, "gundam"),
        ({"w": 2480, "h": 3508, "seed": 15}, "gundam"),
        ({"w": 900, "h": 500, "seed": 2}, "base"),
        ({"w": 900, "h": 500, "seed": 2}, "tiny"),
        ({"w": 300, "h": 700, "seed": 16}, "small"),
        ({"w": 700, "h": 300, "seed": 17}, "large"),
    ]
    sizes = {"base": 1024, "tiny": 512, "small": 640, "large": 1280}
    for src, mode in view_cases:
        im = Image.fromarray(procedural(src["w"], src["h"], src["seed"]))
        if mode == "gundam":
            glob, grid, tiles = gundam_views(im)
        else:
            glob, grid, tiles = plain_view(im, sizes[mode]), (0, 0), []
        manifest["views"].append({"source": src, "mode": mode, "global_size": glob.size[0],
                                  "global": checksum(np.asarray(glob)), "grid": list(grid),
                                  "tiles": [checksum(np.asarray(t)) for t in tiles]})

    # ---- grid choices ----
    pairs = [(2480, 3508), (1654, 2339), (2550, 3300), (800, 600), (641, 640), (640, 641), (641, 1),
             (1, 641), (20000, 641), (641, 20000), (1280, 640), (2560, 1280), (1000, 2000), (2000, 4000),
             (1280, 2560), (3000, 6000), (4000, 8000), (1500, 1000), (1600, 1280), (1920, 1080), (4032, 3024),
             (1241, 1754), (1275, 1650), (3508, 2480), (5000, 5000), (641, 641), (1300, 1300), (2000, 1000)]
    g = np.random.default_rng(7)
    while len(pairs) < 200:
        w, h = int(g.integers(100, 6000)), int(g.integers(100, 6000))
        if w > 640 or h > 640:
            pairs.append((w, h))
    manifest["grid"] = {
        "candidates": [list(r) for r in target_ratios()],
        "cases": [[w, h, *find_closest_aspect_ratio(w / h, target_ratios(), w, h, 640)] for w, h in pairs],
    }

    # ---- interpolation (PyTorch) ----
    try:
        import torch
        import torch.nn.functional as F
    except Exception as e:  # torch missing or unloadable: keep what is there
        print("torch unavailable (%s); keeping existing interpolation fixtures" % e)
        with open(os.path.join(OUT, "manifest.json")) as f:
            manifest["interpolate"] = json.load(f)["interpolate"]
    else:
        aa_cases = [((3, 64, 64), (40, 40)), ((5, 16, 16), (10, 10)), ((2, 7, 9), (12, 5)),
                    ((2, 20, 20), (20, 7)), ((1, 9, 4), (3, 4)), ((2, 3, 3), (8, 8))]
        for shape, (oh, ow) in aa_cases:
            x = rng.normal(0, 0.5, shape).astype(np.float32)
            y = F.interpolate(torch.from_numpy(x)[None], size=(oh, ow), mode="bicubic", antialias=True,
                              align_corners=False)[0].numpy()
            tag = "x".join(map(str, shape)) + f"_to_{oh}x{ow}"
            manifest["interpolate"].append({"mode": "bicubic_aa", "input": save_npy(f"aa_in_{tag}.npy", x),
                                            "expected": save_npy(f"aa_out_{tag}.npy", y)})
        for shape, ol in [((64, 127), 79), ((3, 27), 40), ((2, 10), 3), ((2, 5), 5), ((1, 2), 9)]:
            x = rng.normal(0, 0.2, shape).astype(np.float32)
            y = F.interpolate(torch.from_numpy(x)[None], size=ol, mode="linear", align_corners=False)[0].numpy()
            tag = "x".join(map(str, shape)) + f"_to_{ol}"
            manifest["interpolate"].append({"mode": "linear", "input": save_npy(f"lin_in_{tag}.npy", x),
                                            "expected": save_npy(f"lin_out_{tag}.npy", y)})

    with open(os.path.join(OUT, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    total = sum(os.path.getsize(os.path.join(OUT, n)) for n in os.listdir(OUT))
    print(f"wrote {len(os.listdir(OUT))} files, {total} bytes to {OUT}")


if __name__ == "__main__":
    main()
