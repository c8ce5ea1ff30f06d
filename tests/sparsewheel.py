"""The sparse form of a real wheel: what the real test tier keeps instead of the wheel itself.

Design constraints:
- Every file of the wheel keeps its name, size, metadata and source; only large compiled objects
  (>= 64 KiB: ELF libraries, programs, cubins, static archives) are cut to the bytes gpudoctor's
  readers read: the ELF header and program headers, the section table, the
  sections that name a library and its needs and symbols (``.dynamic``, ``.dynstr``, ``.dynsym``,
  the symbol hash and version tables, notes, ``.comment``), the fatbin wrapper records, and every
  byte the fatbin scan reads (recorded by running that scan). The rest would be read by nobody: a cut
  file cannot be loaded or run, and nothing in the real tier loads or runs a closure's files.
- A cut is checked when it is made, on the real bytes: the ELF section table, the kept sections and
  the fatbin scan of the cut file must equal the full file's, or the wheel stays whole (and the
  manifest says why). The manifest records each cut file's check, so the tier can show it.
- Two files in the cache per wheel: ``STUB`` (the wheel with each cut file emptied: pip installs it
  as it would the real one, RECORD untouched) and ``STUB.cut`` (a zip: ``index.json`` with each cut
  file's size, kept ranges and check, and the kept bytes). ``materialize`` writes each cut file into
  an installed tree at its real size with holes where the zeros are: on disk a venv costs the bytes
  that are read, not the GBs of GPU code.
- ``sparse_wheel`` writes an ordinary wheel with the zeros written out (small once compressed), for
  carrying a real release's layout to a machine without internet (scripts/sparse_wheel.py).
- Stdlib plus gpudoctor's own ELF and fatbin readers, which it must agree with.
"""

from __future__ import annotations

import bisect
import hashlib
import io
import json
import os
import struct
import sys
import threading
import zipfile
import zlib
from pathlib import Path
from typing import BinaryIO, Dict, Iterator, List, Optional, Sequence, Tuple, Union

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from gpudoctor.probes import elf, fatbin  # noqa: E402  (the readers the cut must satisfy)

# From 64 KiB: flashinfer-cubin alone is 10,560 cubins of ~110 KB (1.2 GB a release).
MIN_SIZE = 1 << 16
FORMAT = 4  # what is cut and how it is stored: a cache keeps its forms under this number (realenv)
# Sections kept whole: what names a library, its needs, its symbols and their versions, and the fatbin
# wrapper records. Everything else (code, data, relocations) is zeroed, but for the bytes the scan reads.
KEEP_SECTIONS = frozenset({
    b".interp", b".dynamic", b".dynstr", b".dynsym", b".hash", b".gnu.hash", b".gnu.version", b".gnu.version_r",
    b".gnu.version_d", b".shstrtab", b".nvFatBinSegment", b".comment",
})
SHT_NOBITS = 8
Range = Tuple[int, int]


class _Recorder(io.BytesIO):
    """A file over ``data`` that notes every byte range read from it."""

    def __init__(self, data: bytes, ranges: List[Range]) -> None:
        super().__init__(data)
        self.ranges = ranges

    def read(self, n: Optional[int] = -1) -> bytes:  # type: ignore[override]
        start = self.tell()
        out = super().read(-1 if n is None else n)
        self.ranges.append((start, start + len(out)))
        return out

    def readinto(self, buffer) -> int:  # type: ignore[override]
        start = self.tell()
        count = super().readinto(buffer)
        self.ranges.append((start, start + count))
        return count


def _sections(data: bytes) -> List[Tuple[bytes, int, int, int]]:
    """(name, type, offset, size) of each section of a little-endian ELF64 file, [] otherwise."""
    if len(data) < 64 or data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return []
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    if not shoff or shentsize < 64 or shoff + shentsize * shnum > len(data):
        return []
    table = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names_off = table[shstrndx][4] if shstrndx < shnum else 0
    out = []
    for name, kind, _flags, _addr, offset, size, *_ in table:
        end = data.find(b"\0", names_off + name)
        out.append((data[names_off + name:end], kind, offset, size))
    return out


AR_MAGIC = b"!<arch>\n"


def cuttable(data: bytes, min_size: int = MIN_SIZE) -> bool:
    """A large compiled object: an ELF library, program, cubin or object file, or a static archive."""
    return len(data) >= min_size and (bool(_sections(data)) or data.startswith(AR_MAGIC))


def kept_ranges(data: bytes) -> List[Range]:
    """The byte ranges of ``data`` (a cuttable file) that the readers read, merged and sorted."""
    ranges: List[Range] = [(0, min(len(data), 4096))]
    if data.startswith(AR_MAGIC):
        return ranges  # no reader opens a static archive: its header says what it is
    phoff, = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    ranges.append((phoff, phoff + phentsize * phnum))
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    ranges.append((shoff, shoff + shentsize * shnum))
    for name, kind, offset, size in _sections(data):
        if kind != SHT_NOBITS and (name in KEEP_SECTIONS or name.startswith(b".note")):
            ranges.append((offset, offset + size))
    recorded: List[Range] = []
    fatbin.scan(sys.executable, opener=lambda _p: _Recorder(data, recorded))  # any real path: scan() stats it first
    return _merge(ranges + recorded, len(data))


def _merge(ranges: Sequence[Range], size: int) -> List[Range]:
    out: List[Range] = []
    for start, end in sorted((max(0, s), min(size, e)) for s, e in ranges if e > s):
        if start >= size:
            continue
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


class _CutFile(io.RawIOBase):
    """``data`` as the cut file reads: the kept ranges, zeros elsewhere (no copy of the whole)."""

    def __init__(self, data: bytes, ranges: Sequence[Range]) -> None:
        self.data, self.ranges, self.pos = memoryview(data), list(ranges), 0
        self.ends = [end for _, end in self.ranges]

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        self.pos = offset if whence == 0 else (self.pos + offset if whence == 1 else len(self.data) + offset)
        return self.pos

    def tell(self) -> int:
        return self.pos

    def readinto(self, buffer) -> int:
        start, end = self.pos, min(len(self.data), self.pos + len(buffer))
        if start >= end:
            return 0
        view = memoryview(buffer).cast("B")
        view[:end - start] = bytes(end - start)
        for low, high in self.ranges[bisect.bisect_right(self.ends, start):]:
            if low >= end:
                break
            a, b = max(low, start), min(high, end)
            view[a - start:b - start] = self.data[a:b]
        self.pos = end
        return end - start


def readings(data: bytes, ranges: Optional[Sequence[Range]] = None) -> Dict[str, object]:
    """What gpudoctor's readers take from an ELF file (its cut form when ``ranges`` is given): its
    section table, the bytes of the sections that name libraries and symbols, and the fatbin scan.
    A cut file must give the same as the whole one."""

    def opened(_path: str = "") -> BinaryIO:
        return io.BufferedReader(_CutFile(data, ranges), 1) if ranges is not None else io.BytesIO(data)  # type: ignore[return-value]

    out: Dict[str, object] = {}
    try:
        parsed = elf.Elf(elf.Reader(opened(), len(data)))
        out["sections"] = [(s.name, s.type, s.offset, s.size) for s in parsed.sections]
        for name in sorted(KEEP_SECTIONS - {b".shstrtab"}):
            section = parsed.data(name, 1 << 31)
            if section is not None:
                out[name.decode()] = hashlib.sha256(section).hexdigest()
    except elf.ElfError as exc:
        out["elf"] = f"{type(exc).__name__}: {exc}"
    out["fatbin"] = fatbin.scan(sys.executable, opener=opened).to_json()
    return out


def cut(data: bytes, min_size: int = MIN_SIZE) -> Tuple[Optional[List[Range]], str]:
    """The ranges to keep of one file, checked; (None, why) when it must stay whole."""
    if not cuttable(data, min_size):
        return None, "not a large compiled object"
    ranges = kept_ranges(data)
    kept = sum(end - start for start, end in ranges)
    if kept > len(data) // 2:
        return None, f"the readers read {kept} of {len(data)} bytes"
    if readings(data, ranges) != readings(data):
        return None, "the readers read the cut file differently"  # never seen; kept whole if it happens
    return ranges, "equal"


def _member(archive: zipfile.ZipFile, raw: BinaryIO, info: zipfile.ZipInfo) -> bytes:
    """A member's bytes, inflated in one call into a buffer of its size (twice as fast as
    ZipFile.read on GB-sized libraries), its CRC checked."""
    if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED) or info.file_size < MIN_SIZE:
        return archive.read(info)
    raw.seek(info.header_offset)
    header = raw.read(30)
    name_len, extra_len = struct.unpack_from("<HH", header, 26)
    raw.seek(info.header_offset + 30 + name_len + extra_len)
    data = raw.read(info.compress_size)
    if info.compress_type == zipfile.ZIP_DEFLATED:
        data = zlib.decompress(data, -15, info.file_size)
    if len(data) != info.file_size or zlib.crc32(data) != info.CRC:
        raise zipfile.BadZipFile(f"{info.filename}: bad CRC or size")
    return data


def make(wheel: Union[Path, bytes], stub: Path) -> Dict[str, object]:
    """Write ``stub`` and ``stub.cut`` (see the header) from the real wheel (a path, or its bytes
    already in memory); returns the index."""
    raw: BinaryIO = io.BytesIO(wheel) if isinstance(wheel, (bytes, bytearray)) else open(wheel, "rb")
    index: Dict[str, object] = {"wheel": stub.name, "members": {}, "whole": {}}
    members: Dict[str, object] = index["members"]  # type: ignore[assignment]
    whole: Dict[str, str] = index["whole"]  # type: ignore[assignment]
    part = stub.with_name(stub.name + f".{os.getpid()}.{threading.get_ident()}.part")
    part_cut = stub.with_name(stub.name + f".cut.{os.getpid()}.{threading.get_ident()}.part")
    try:
        with raw, zipfile.ZipFile(raw) as src, zipfile.ZipFile(part, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as dst, \
                zipfile.ZipFile(part_cut, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as cuts:
            for info in src.infolist():
                data = _member(src, raw, info)
                # Only what lands in site-packages is cut: materialize writes it back there.
                inside = _installed_path(info.filename) is not None
                ranges, why = cut(data) if info.file_size >= MIN_SIZE and inside else (None, "")
                if ranges is None:
                    if why:
                        whole[info.filename] = why
                    dst.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED, compresslevel=1)
                    continue
                number = len(members)
                members[info.filename] = {"size": len(data), "ranges": ranges, "check": why, "data": f"data/{number}"}
                cuts.writestr(f"data/{number}", b"".join(data[s:e] for s, e in ranges))
                dst.writestr(info, b"", compress_type=zipfile.ZIP_STORED)
            cuts.writestr("index.json", json.dumps(index, sort_keys=True))
        os.replace(part_cut, cut_path(stub))
        os.replace(part, stub)
    finally:
        for leftover in (part, part_cut):
            if leftover.exists():
                leftover.unlink()
    return index


def cut_path(stub: Path) -> Path:
    return stub.with_name(stub.name + ".cut")


def read_index(stub: Path) -> Dict[str, object]:
    with zipfile.ZipFile(cut_path(stub)) as cuts:
        return json.loads(cuts.read("index.json"))


def _installed_path(member: str) -> Optional[str]:
    """Where a wheel member lands relative to site-packages (None: outside it)."""
    top, _, rest = member.partition("/")
    if top.endswith(".data"):
        kind, _, inner = rest.partition("/")
        return inner if kind in ("purelib", "platlib") else None
    return member


def cut_files(stub: Path) -> Iterator[Tuple[str, int, List[Range], bytes]]:
    """(member, size, kept ranges, kept bytes) of each cut file of a stub's wheel."""
    with zipfile.ZipFile(cut_path(stub)) as cuts:
        index = json.loads(cuts.read("index.json"))
        for member, entry in index["members"].items():
            yield member, entry["size"], [tuple(r) for r in entry["ranges"]], cuts.read(entry["data"])


def write_sparse(path: Path, size: int, ranges: Sequence[Range], kept: bytes) -> None:
    """The file at its real size: the kept bytes in place, holes (zeros on read) everywhere else."""
    with open(path, "wb") as handle:
        pos = 0
        for start, end in ranges:
            handle.seek(start)
            handle.write(kept[pos:pos + end - start])
            pos += end - start
        handle.truncate(size)


def materialize(stub: Path, site: Path) -> int:
    """Write each cut file of ``stub``'s wheel, installed (emptied) under ``site``, at its real size.
    Returns the bytes of the real files written this way."""
    total = 0
    for member, size, ranges, kept in cut_files(stub):
        relative = _installed_path(member)
        if relative is None:
            raise ValueError(f"{stub.name}: cut file {member} is installed outside site-packages")
        target = site / relative
        if not target.is_file() or target.stat().st_size != 0:
            raise ValueError(f"{stub.name}: {target} is not the emptied file pip installed")
        write_sparse(target, size, ranges, kept)
        total += size
    return total


def sparse_wheel(stub: Path, out: Path) -> None:
    """An ordinary wheel, each cut file with its zeros written out (they compress to almost nothing)."""
    files = {member: (size, ranges, kept) for member, size, ranges, kept in cut_files(stub)}
    with zipfile.ZipFile(stub) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename in files:
                size, ranges, kept = files[info.filename]
                buffer = bytearray(size)
                pos = 0
                for start, end in ranges:
                    buffer[start:end] = kept[pos:pos + end - start]
                    pos += end - start
                data = bytes(buffer)
            dst.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED, compresslevel=6)
