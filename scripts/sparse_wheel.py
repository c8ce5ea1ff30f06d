#!/usr/bin/env python3
"""Make a "sparse" copy of a wheel: every file as it is, except large CUDA binaries, whose bytes
are zeroed everywhere but where an ELF/fatbin reader looks (ELF header, section header table,
small sections, and every byte gpudoctor's fatbin scan reads). Sizes and names stay the same,
so metadata, RECORD sizes, version files and kernel scans read exactly as from the real wheel,
while the zeros compress to almost nothing: a 336 MB vLLM wheel becomes a few tens of MB that
can travel to a machine without internet. The copies cannot be loaded (their code is gone);
that is the point: they are for reading, as the doctor does.

    python scripts/sparse_wheel.py REAL.whl OUT.whl [--min-size MB] [--zero torch/include/]
"""

import argparse
import io
import os
import struct
import sys
import zipfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from gpudoctor.probes import fatbin  # noqa: E402  (a dev tool: the repo's own reader)

# Sections kept whole: what names a library and its needs (DT_NEEDED, SONAME, versions) and the
# fatbin wrapper records. Everything else (code, data, symbol tables, relocations) is zeroed,
# but for the bytes the fatbin scan reads.
KEEP_SECTIONS = {b".interp", b".dynamic", b".dynstr", b".shstrtab", b".nvFatBinSegment", b".gnu.version_d",
                 b".gnu.version_r", b".comment"}


class Recorder(io.BytesIO):
    def __init__(self, data, ranges):
        super().__init__(data)
        self.ranges = ranges

    def read(self, n=-1):
        start = self.tell()
        out = super().read(n)
        self.ranges.append((start, start + len(out)))
        return out


def kept_ranges(data: bytes):
    ranges = [(0, min(len(data), 4096))]
    if data[:4] == b"\x7fELF" and data[4] == 2 and data[5] == 1:
        shoff, = struct.unpack_from("<Q", data, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
        ranges.append((shoff, shoff + shentsize * shnum))
        sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
        names_off = sections[shstrndx][4] if shstrndx < shnum else 0
        for name, kind, _flags, _addr, offset, size, *_ in sections:
            end = data.find(b"\0", names_off + name)
            label = data[names_off + name:end]
            if kind != 8 and (label in KEEP_SECTIONS or label.startswith(b".note")):  # NOBITS: no bytes
                ranges.append((offset, offset + size))
    recorded = []
    fatbin.scan(sys.executable, opener=lambda _p: Recorder(data, recorded))  # any real path: scan() stats it first
    return ranges + recorded


def sparse(data: bytes) -> bytes:
    out = bytearray(len(data))
    for start, end in kept_ranges(data):
        out[start:end] = data[start:end]
    return bytes(out)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("real")
    ap.add_argument("out")
    ap.add_argument("--min-size", type=float, default=1.0, help="MB; smaller binaries are copied whole")
    ap.add_argument("--zero", action="append", default=[], metavar="PREFIX",
                    help="zero-fill (same size) every file under PREFIX, e.g. torch/include/")
    args = ap.parse_args()
    with zipfile.ZipFile(args.real) as src, zipfile.ZipFile(args.out, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            data = src.read(info)
            if any(info.filename.startswith(prefix) for prefix in args.zero):
                data = bytes(len(data))
            elif info.file_size >= args.min_size * 1e6 and data[:4] == b"\x7fELF":
                data = sparse(data)
            dst.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED, compresslevel=6)
    print(f"{args.out}: {os.path.getsize(args.out) / 1e6:.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
