#!/usr/bin/env python3
"""Writes the seed corpus of the fuzz targets: fuzz/corpus/idx/* and fuzz/corpus/ckpt/*.

Tiny valid inputs and one of each kind of damage the readers check for. The files are committed;
rerun this only to change them. Layouts: see fuzz_idx.c and fuzz_ckpt.c.
"""
import gzip
import os
import struct
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))


def write(kind, name, data):
    d = os.path.join(HERE, "corpus", kind)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def idx_images(n, rows, cols, magic=2051, pixels=None):
    body = bytes(pixels if pixels is not None else [(7 * i) % 256 for i in range(n * rows * cols)])
    return struct.pack(">IIII", magic, n, rows, cols) + body


def idx_labels(labels, magic=2049, n=None):
    return struct.pack(">II", magic, len(labels) if n is None else n) + bytes(labels)


def idx_input(images, labels, limit=0):
    return bytes([limit]) + struct.pack("<I", len(images)) + images + labels


def gzip_with_header(gz, flags, fields, crc_xor=0):
    """The gzip member gz (FLG 0) with FLG = flags and the optional fields after its 10-byte header;
    with FHCRC (0x02) in flags, the header CRC follows them (xor crc_xor)."""
    head = bytearray(gz[:10])
    head[3] = flags
    head += fields
    if flags & 0x02:
        head += struct.pack("<H", (zlib.crc32(bytes(head)) & 0xFFFF) ^ crc_xor)
    return bytes(head) + gz[10:]


def ckpt(sizes, epoch=1, version=1, hsize=None, n_layers=None, crc_ok=True, cut=0, epoch_step=0,
         step=42, value=None):
    L = len(sizes) - 1
    hdr = bytearray(56 + 4 * (L + 1))
    hdr[0:8] = b"DDPCKPT\0"
    struct.pack_into("<IIIIQQIIII", hdr, 8, version, hsize if hsize is not None else len(hdr), epoch,
                     epoch_step, step, 1337, 2, 1, 3, n_layers if n_layers is not None else L)
    struct.pack_into(f"<{L + 1}I", hdr, 56, *sizes)
    n = sum(sizes[i] * sizes[i + 1] + sizes[i + 1] for i in range(L))
    values = [0.01 * i - 0.5 for i in range(2 * n)]
    if value is not None:  # (index, float): one edited value, e.g. a NaN
        values[value[0]] = value[1]
    body = bytes(hdr) + struct.pack(f"<{2 * n}f", *values)
    crc = zlib.crc32(body) & 0xFFFFFFFF
    out = body + struct.pack("<I", crc if crc_ok else crc ^ 1)
    return out[:len(out) - cut] if cut else out


def main():
    imgs, labs = idx_images(3, 2, 2), idx_labels([0, 9, 4])
    write("idx", "valid", idx_input(imgs, labs))
    write("idx", "valid_limit2", idx_input(imgs, labs, limit=2))
    write("idx", "valid_gzip", idx_input(gzip.compress(imgs, mtime=0), gzip.compress(labs, mtime=0)))
    write("idx", "valid_5x3x4", idx_input(idx_images(5, 3, 4), idx_labels([1, 2, 3, 4, 5])))
    write("idx", "truncated_images", idx_input(imgs[:-3], labs))
    write("idx", "truncated_labels", idx_input(imgs, labs[:-1]))
    write("idx", "truncated_header", idx_input(imgs[:10], labs))
    write("idx", "wrong_magic", idx_input(idx_images(3, 2, 2, magic=2049), labs))
    write("idx", "label_out_of_range", idx_input(imgs, idx_labels([0, 10, 4])))
    write("idx", "count_mismatch", idx_input(imgs, idx_labels([0, 9])))
    write("idx", "implausible_dims", idx_input(struct.pack(">IIII", 2051, 1, 5000, 2), labs))
    write("idx", "huge_count", idx_input(struct.pack(">IIII", 2051, 100000000, 28, 2) + b"\0" * 64,
                                         struct.pack(">II", 2049, 100000000) + b"\0" * 64))
    write("idx", "empty", b"\0\0\0\0\0")
    write("idx", "trailing_images", idx_input(imgs + b"\7", labs))
    write("idx", "trailing_labels", idx_input(imgs, labs + b"\1"))
    gz = bytearray(gzip.compress(imgs, mtime=0))
    gz[-8] ^= 1  # the trailer's CRC-32
    write("idx", "gzip_bad_crc", idx_input(bytes(gz), labs))
    gz = gzip.compress(imgs, mtime=0)
    write("idx", "gzip_junk_after", idx_input(gz + b"\0\0\0", labs))  # bytes after the last member
    write("idx", "gzip_cut_trailer", idx_input(gz[:-3], labs))
    write("idx", "gzip_header_crc", idx_input(gzip_with_header(gz, 0x02, b""), labs))
    write("idx", "gzip_header_crc_bad", idx_input(gzip_with_header(gz, 0x02, b"", crc_xor=1), labs))
    write("idx", "gzip_header_fields",  # FEXTRA, FNAME, FCOMMENT and FHCRC
          idx_input(gzip_with_header(gz, 0x1e, b"\3\0abcimg\0c\0"), gzip.compress(labs, mtime=0)))
    write("ckpt", "valid", b"\0" + ckpt([3, 4, 2]))
    write("ckpt", "valid_3layers", b"\0" + ckpt([2, 3, 3, 2], epoch=7))
    write("ckpt", "valid_fixcrc", b"\1" + ckpt([3, 4, 2]))
    write("ckpt", "shape_mismatch", b"\2" + ckpt([3, 4, 2]))
    write("ckpt", "bad_crc", b"\0" + ckpt([3, 4, 2], crc_ok=False))
    write("ckpt", "truncated", b"\0" + ckpt([3, 4, 2], cut=9))
    write("ckpt", "too_short", b"\0" + ckpt([3, 4, 2])[:40])
    write("ckpt", "bad_magic", b"\1" + b"NOTCKPT\0" + ckpt([3, 4, 2])[8:])
    write("ckpt", "bad_version", b"\1" + ckpt([3, 4, 2], version=2))
    write("ckpt", "bad_header_size", b"\1" + ckpt([3, 4, 2], hsize=100))
    write("ckpt", "zero_layers", b"\1" + ckpt([3, 4, 2], n_layers=0, hsize=60))
    write("ckpt", "zero_size", b"\1" + ckpt([3, 0, 2]))
    write("ckpt", "empty", b"\0")
    write("ckpt", "nan_param", b"\0" + ckpt([3, 4, 2], value=(0, float("nan"))))
    write("ckpt", "inf_momentum", b"\0" + ckpt([3, 4, 2], value=(-1, float("inf"))))
    write("ckpt", "epoch_2pow31", b"\0" + ckpt([3, 4, 2], epoch=1 << 31))
    write("ckpt", "epoch_step_above_step", b"\0" + ckpt([3, 4, 2], epoch_step=43))


if __name__ == "__main__":
    main()
