"""Writes the image files that cost the most to decode within uocr's default decode budget
(100 Mpixel, 1 GiB of samples and of file, 100 JPEG scans), for bench/decode_image.cpp:

- progressive.jpg: SIZE x SIZE noise, progressive JPEG (quality 95), its largest refinement scan
  repeated until the file has --scans scans or would pass 1 GiB (libjpeg decodes every scan over
  the whole image);
- rgb16.png: SIZE x SIZE 16-bit RGB noise (stb decodes it, then uocr reduces it to 8 bits);
- noise.gif: SIZE x SIZE 256-colour noise;
- zeros.png: SIZE x SIZE 8-bit RGB of zeros (a small file, every pixel still inflated).

    python3 bench/worst_images.py OUT_DIR [--size 10000] [--scans 100]
    ninja -C BUILD bench/decode_image && BUILD/bench/decode_image OUT_DIR/*          # each file's time
    BUILD/bench/decode_image --budget 2 OUT_DIR/progressive.jpg                      # stops at 2 s

Needs numpy and Pillow. Files at the default size take about 2 GB of disk.
"""
import argparse
import os
import struct
import zlib

import numpy as np
from PIL import Image


def jpeg_segments(data):
    """(marker, bytes) of each segment of a JPEG: a scan's bytes run from its SOS marker to the
    next marker that is neither a stuffed 0xFF00 nor a restart marker."""
    assert data[:2] == b"\xff\xd8", "not a JPEG"
    out, i = [(0xD8, data[:2])], 2
    while i < len(data):
        assert data[i] == 0xFF, f"no marker at {i}"
        marker = data[i + 1]
        if marker == 0xD9:
            out.append((marker, data[i:i + 2]))
            break
        length = struct.unpack(">H", data[i + 2:i + 4])[0]
        end = i + 2 + length
        if marker == 0xDA:
            while not (data[end] == 0xFF and data[end + 1] != 0x00 and not 0xD0 <= data[end + 1] <= 0xD7):
                end += 1
        out.append((marker, data[i:end]))
        i = end
    return out


def repeat_refinement_scan(data, scans, max_bytes):
    """The JPEG with its largest successive-approximation refinement scan (Ah > 0) repeated until
    it has `scans` scans, or as often as `max_bytes` allows."""
    segments = jpeg_segments(data)
    sos = [k for k, (m, _) in enumerate(segments) if m == 0xDA]

    def refines(seg):
        count = seg[4]
        return seg[5 + 2 * count + 2] >> 4 > 0  # after Ns, the components and Ss, Se: Ah | Al

    refinements = [k for k in sos if refines(segments[k][1])]
    assert refinements, "the progressive JPEG has no refinement scan"
    largest = max(refinements, key=lambda k: len(segments[k][1]))
    copies = min(scans - len(sos), (max_bytes - len(data)) // len(segments[largest][1]))
    assert copies >= 0, f"the JPEG already has {len(sos)} scans or {len(data)} bytes"
    print(f"progressive.jpg: {len(sos) + copies} scans")
    out = b"".join(s for _, s in segments[:largest + 1])
    out += segments[largest][1] * copies
    return out + b"".join(s for _, s in segments[largest + 1:])


def png(path, width, height, bit_depth, rows):
    """An RGB PNG of `rows` (bytes of each row without its filter byte), zlib level 1."""
    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    z = zlib.compressobj(1)
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, bit_depth, 2, 0, 0, 0)))
        for row in rows:
            f.write(chunk(b"IDAT", z.compress(b"\x00" + row)))
        f.write(chunk(b"IDAT", z.flush()) + chunk(b"IEND", b""))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--size", type=int, default=10000)
    ap.add_argument("--scans", type=int, default=100)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    rng = np.random.default_rng(0)
    n = a.size

    noise = Image.fromarray(rng.integers(0, 256, (n, n, 3), dtype=np.uint8))
    tmp = os.path.join(a.out, "progressive-plain.jpg")
    noise.save(tmp, "JPEG", quality=95, progressive=True)
    with open(tmp, "rb") as f:
        data = repeat_refinement_scan(f.read(), a.scans, 1 << 30)
    os.remove(tmp)
    with open(os.path.join(a.out, "progressive.jpg"), "wb") as f:
        f.write(data)
    del noise

    png(os.path.join(a.out, "rgb16.png"), n, n, 16, (rng.integers(0, 65536, 3 * n, dtype=np.uint16).astype(">u2").tobytes() for _ in range(n)))
    png(os.path.join(a.out, "zeros.png"), n, n, 8, (bytes(3 * n) for _ in range(n)))
    Image.fromarray(rng.integers(0, 256, (n, n), dtype=np.uint8)).save(os.path.join(a.out, "noise.gif"))
    for name in sorted(os.listdir(a.out)):
        print(f"{name}: {os.path.getsize(os.path.join(a.out, name)):,} bytes")


if __name__ == "__main__":
    main()
