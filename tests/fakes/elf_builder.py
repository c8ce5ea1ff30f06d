"""ELF files with fatbins built byte by byte (sections, containers, entries as nvcc lays them out), and
the real ones nvcc built (tests/fixtures/ground_truth/h200, tests/fixtures/fatbin)."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import List, Optional, Tuple

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
H200 = FIXTURES / "ground_truth" / "h200"
LOCAL = FIXTURES / "fatbin"
PTX90 = H200 / "libk_sm80_sm90_ptx90.so"
SM86 = H200 / "libk_sm86.so"
COMPRESSED = H200 / "libk_compressed.so"


def _section(path: Path, name: bytes) -> Tuple[int, int]:
    """(file offset, size) of a section of a little-endian ELF64 file."""
    data = path.read_bytes()
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    headers = [struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize) for i in range(shnum)]
    str_off, str_size = headers[shstrndx][4], headers[shstrndx][5]
    names = data[str_off:str_off + str_size]
    for sh_name, _, _, _, offset, size in headers:
        if names[sh_name:names.index(b"\0", sh_name)] == name:
            return offset, size
    raise KeyError(name)


def _fatbin_bytes(path: Path) -> bytes:
    offset, size = _section(path, b".nv_fatbin")
    return path.read_bytes()[offset:offset + size]


def _containers(blob: bytes) -> List[bytes]:
    out, pos = [], 0
    while pos + 16 <= len(blob):
        _, _, hsize, fsize = struct.unpack_from("<IHHQ", blob, pos)
        out.append(blob[pos:pos + hsize + fsize])
        pos += hsize + fsize
    return out


class Sec:
    def __init__(self, name: bytes, data: bytes = b"", *, sh_type: int = 1, flags: int = 2, addr: int = 0,
                 offset: Optional[int] = None, size: Optional[int] = None) -> None:
        self.name, self.data, self.type, self.flags, self.addr = name, data, sh_type, flags, addr
        self.offset, self.size = offset, size


def build_elf(sections: List[Sec], *, is64: bool = True, big: bool = False, extended: bool = False,
              ei_class: Optional[int] = None) -> Tuple[List[Tuple[int, bytes]], int]:
    """A minimal ELF: header, section header table, .shstrtab, then the sections' data.

    Returns (chunks, size): write each chunk at its offset; gaps stay holes (sparse files).
    ``extended`` uses the gABI escape: e_shnum = 0 and e_shstrndx = SHN_XINDEX.
    """
    e = ">" if big else "<"
    ehsize, shentsize = (64, 64) if is64 else (52, 40)
    shnum = len(sections) + 2  # NULL, the given ones, .shstrtab
    names = b"\0"
    name_offsets = []
    for sec in sections + [Sec(b".shstrtab")]:
        name_offsets.append(len(names))
        names += sec.name + b"\0"
    shoff = ehsize
    cursor = shoff + shnum * shentsize
    strtab_off = cursor
    cursor += len(names)
    chunks: List[Tuple[int, bytes]] = [(strtab_off, names)]
    placed = []
    for sec in sections:
        size = sec.size if sec.size is not None else len(sec.data)
        if sec.offset is not None:
            offset = sec.offset
        else:
            offset = (cursor + 7) & ~7
        if sec.data:
            chunks.append((offset, sec.data))
        placed.append((offset, size))
        cursor = max(cursor, offset + size)
    ident = b"\x7fELF" + bytes([ei_class or (2 if is64 else 1), 2 if big else 1, 1]) + bytes(9)
    shstrndx = shnum - 1
    e_shnum, e_shstrndx = (0, 0xFFFF) if extended else (shnum, shstrndx)
    if is64:
        header = ident + struct.pack(e + "HHIQQQIHHHHHH", 3, 62, 1, 0, 0, shoff, 0, ehsize, 0, 0, shentsize,
                                     e_shnum, e_shstrndx)
        fmt = e + "IIQQQQIIQQ"
    else:
        header = ident + struct.pack(e + "HHIIIIIHHHHHH", 3, 3, 1, 0, 0, shoff, 0, ehsize, 0, 0, shentsize,
                                     e_shnum, e_shstrndx)
        fmt = e + "IIIIIIIIII"
    table = struct.pack(fmt, 0, 0, 0, 0, 0, shnum if extended else 0, shstrndx if extended else 0, 0, 0, 0)
    for sec, name_off, (offset, size) in zip(sections, name_offsets, placed):
        table += struct.pack(fmt, name_off, sec.type, sec.flags, sec.addr, offset, size, 0, 0, 8, 0)
    table += struct.pack(fmt, name_offsets[-1], 3, 0, 0, strtab_off, len(names), 0, 0, 1, 0)
    chunks.insert(0, (0, header + table))
    return chunks, cursor


def write_chunks(path: Path, chunks: List[Tuple[int, bytes]], size: int) -> Path:
    with open(path, "wb") as handle:
        for offset, data in chunks:
            handle.seek(offset)
            handle.write(data)
        handle.truncate(size)
    return path


def elf_bytes(sections: List[Sec], **kw) -> bytes:
    chunks, size = build_elf(sections, **kw)
    out = bytearray(size)
    for offset, data in chunks:
        out[offset:offset + len(data)] = data
    return bytes(out)
