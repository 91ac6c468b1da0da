#!/usr/bin/env python3
"""Writes the hostile PDFs of tests/test_cli.cpp (issue 34 item 9) into this folder.

Each is a few hundred bytes, written object by object with a correct xref table, so that poppler
reads them without repairing anything: what it reports is what the file says.

    python3 tests/data/cli/make_pdfs.py
"""
import hashlib
import os
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
FILE_ID = bytes(range(16))


def write_pdf(name, objects, trailer_extra=b""):
    """objects: the bodies of objects 1..n (object 1 is the catalog)."""
    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    for offset in offsets:
        out += b"%010d 00000 n \n" % offset
    out += b"trailer\n<< /Size %d /Root 1 0 R /ID [<%s> <%s>] %s>>\n" % (
        len(objects) + 1, FILE_ID.hex().encode(), FILE_ID.hex().encode(), trailer_extra)
    out += b"startxref\n%d\n%%%%EOF\n" % xref
    with open(os.path.join(HERE, name), "wb") as f:
        f.write(out)


def stream(data, entries=b""):
    """A Flate-compressed stream object; `entries`: more of its dictionary."""
    data = zlib.compress(data, 9)
    return b"<< %s/Length %d /Filter /FlateDecode >>\nstream\n" % (entries, len(data)) + data + b"\nendstream"


def one_page(media_box=b"[0 0 200 200]", resources=b"<< >>", contents=None):
    """Catalog, page tree, one page (object 3) and, when given, its content stream (object 4)."""
    page = b"<< /Type /Page /Parent 2 0 R /MediaBox " + media_box + b" /Resources " + resources
    page += b" /Contents 4 0 R >>" if contents is not None else b" >>"
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>", page]
    return objects + ([contents] if contents is not None else [])


# The standard security handler, revision 2 (40-bit RC4): PDF 1.7 reference, algorithms 3.2-3.4.
PAD = bytes.fromhex("28bf4e5e4e758a4164004e56fffa01082e2e00b6d0683e802f0ca9fe6453697a")


def rc4(key, data):
    s = list(range(256))
    j = 0
    for i in range(256):
        j = (j + s[i] + key[i % len(key)]) % 256
        s[i], s[j] = s[j], s[i]
    i = j = 0
    out = bytearray()
    for byte in data:
        i = (i + 1) % 256
        j = (j + s[i]) % 256
        s[i], s[j] = s[j], s[i]
        out.append(byte ^ s[(s[i] + s[j]) % 256])
    return bytes(out)


def encrypt_dict(user, owner, permissions=-4):
    pad = lambda p: (p + PAD)[:32]
    o = rc4(hashlib.md5(pad(owner)).digest()[:5], pad(user))
    key = hashlib.md5(pad(user) + o + permissions.to_bytes(4, "little", signed=True) + FILE_ID).digest()[:5]
    u = rc4(key, PAD)
    return b"<< /Filter /Standard /V 1 /R 2 /O <%s> /U <%s> /P %d >>" % (o.hex().encode(), u.hex().encode(), permissions)


# A page whose media box at 300 dpi is 1.25 million pixels wide: pdftoppm renders it as 1x1.
write_pdf("huge_mediabox.pdf", one_page(media_box=b"[0 0 300000 300000]"))

# pdfinfo's "Page size" is the crop box, pdftoppm renders the media box, turned by /Rotate.
write_pdf("cropped_rotated.pdf", one_page(media_box=b"[0 0 300 200] /CropBox [20 20 120 70] /Rotate 90"))

# A user password: nothing can be read without it.
objects = one_page()
write_pdf("encrypted.pdf", objects + [encrypt_dict(b"secret", b"owner")], b"/Encrypt %d 0 R " % (len(objects) + 1))

# Only an owner password (permissions): poppler opens it with the empty user password. The page
# has no content stream, so there is nothing to encrypt but the dictionary's /O and /U.
write_pdf("owner_password.pdf", objects + [encrypt_dict(b"", b"owner", permissions=-60)], b"/Encrypt %d 0 R " % (len(objects) + 1))

write_pdf("zero_pages.pdf", [b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [] /Count 0 >>"])

# Nested forms, each drawing the one below it 16 times: 16^8 strokes from a few hundred bytes,
# a page that renders for far longer than any test waits.
LEVELS = 8
forms = b" ".join(b"/F%d %d 0 R" % (k, 5 + k) for k in range(LEVELS))
slow = one_page(resources=b"<< /XObject << " + forms + b" >> >>", contents=stream(b"/F0 Do"))
for k in range(LEVELS):
    if k + 1 < LEVELS:
        body = b"".join(b"q 1 0 0 1 %d %d cm /F%d Do Q " % (i % 4, i // 4, k + 1) for i in range(16))
        res = b"<< /XObject << /F%d %d 0 R >> >>" % (k + 1, 6 + k)
    else:
        body = b"".join(b"0 0 m %d %d l S " % (200 - i, 3 * i) for i in range(16))
        res = b"<< >>"
    slow.append(stream(body, b"/Type /XObject /Subtype /Form /BBox [0 0 200 200] /Resources " + res + b" "))
write_pdf("slow_page.pdf", slow)
