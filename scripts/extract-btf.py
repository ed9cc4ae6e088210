#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Cut the kernel's .BTF blob out of a raw kernel Image (arm64 vmlinuz is not
ELF, so `bpftool btf dump file` cannot read it directly).

  scripts/extract-btf.py vmlinuz OUT.btf

The blob starts with struct btf_header (magic 0xeB9F little-endian:
9f eb 01 00, hdr_len, type_off/len, str_off/len); its size is
hdr_len + max(type_off + type_len, str_off + str_len). The first candidate
whose header is self-consistent and whose string section starts with NUL
(BTF's empty string) wins.
"""
import struct
import sys


def find_btf(data):
    pos = 0
    while True:
        pos = data.find(b"\x9f\xeb\x01\x00", pos)
        if pos < 0:
            return None
        hdr_len, type_off, type_len, str_off, str_len = struct.unpack_from("<IIIII", data, pos + 4)
        end = hdr_len + max(type_off + type_len, str_off + str_len)
        if (hdr_len == 24 and type_len > 1 << 16 and str_len > 1 << 16 and pos + end <= len(data)
                and data[pos + hdr_len + str_off] == 0):
            return data[pos:pos + end]
        pos += 4


def decompress(kind, data):
    import gzip, lzma, subprocess, zlib
    try:
        if kind == "xz":
            return lzma.LZMADecompressor().decompress(data)
        if kind == "gzip":
            return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(data)
        out = subprocess.run(["zstd", "-dc"], input=data, capture_output=True)
        return out.stdout
    except (lzma.LZMAError, zlib.error, OSError, EOFError):
        return None


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    image = open(sys.argv[1], "rb").read()
    blob = find_btf(image)
    # x86 bzImage and some arm64 images wrap the kernel in a compressed
    # stream: try each embedded stream that decompresses.
    for magic, kind in ((b"\xfd7zXZ\x00", "xz"), (b"\x1f\x8b\x08", "gzip"), (b"\x28\xb5\x2f\xfd", "zstd")):
        pos = image.find(magic)
        while blob is None and pos >= 0:
            inner = decompress(kind, image[pos:])
            if inner:
                blob = find_btf(inner)
            pos = image.find(magic, pos + 1)
        if blob is not None:
            break
    if blob is None:
        sys.exit(f"extract-btf: no BTF blob in {sys.argv[1]} (kernel built without CONFIG_DEBUG_INFO_BTF?)")
    open(sys.argv[2], "wb").write(blob)
    print(f"extract-btf: {len(blob)} bytes of BTF -> {sys.argv[2]}")
