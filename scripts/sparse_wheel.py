#!/usr/bin/env python3
"""Make a "sparse" copy of a wheel: every file as it is, except large ELF libraries, whose bytes are
zeroed everywhere but where gpudoctor's readers look (tests/sparsewheel.py: the ELF and program
headers, the section table, the dynamic, symbol and version sections, and every byte the fatbin
scan reads, checked equal on the real bytes). Sizes and names stay the same, so metadata, RECORD
sizes, version files, symbol tables and kernel scans read exactly as from the real wheel, while the
zeros compress to almost nothing: a 336 MB vLLM wheel becomes a few tens of MB that can travel to a
machine without internet. The copies cannot be loaded (their code is gone); that is the point:
they are for reading, as the doctor does. The real test tier keeps the same form in its cache.

    python scripts/sparse_wheel.py REAL.whl OUT.whl [--zero torch/include/]
"""

import argparse
import os
import sys
import tempfile
import zipfile
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
import sparsewheel  # noqa: E402  (the test tier's sparse form)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("real")
    ap.add_argument("out")
    ap.add_argument("--zero", action="append", default=[], metavar="PREFIX",
                    help="zero-fill (same size) every file under PREFIX, e.g. torch/include/")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        stub = Path(tmp) / Path(args.real).name
        sparsewheel.make(Path(args.real), stub)
        sparsewheel.sparse_wheel(stub, Path(args.out))
    if args.zero:
        zeroed = Path(args.out).with_suffix(".zero.part")
        with zipfile.ZipFile(args.out) as src, zipfile.ZipFile(zeroed, "w", zipfile.ZIP_DEFLATED) as dst:
            for info in src.infolist():
                data = src.read(info)
                if any(info.filename.startswith(prefix) for prefix in args.zero):
                    data = bytes(len(data))
                dst.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED, compresslevel=6)
        os.replace(zeroed, args.out)
    print(f"{args.out}: {os.path.getsize(args.out) / 1e6:.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
