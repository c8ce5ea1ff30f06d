"""ELF files with fatbins for the kernel scan: the real ones built by nvcc, and generated ones with many
containers and wrapper records."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import List, Tuple

from fakes.elf_builder import COMPRESSED, LOCAL, PTX90, SM86, Sec, build_elf, write_chunks

REAL = [PTX90, SM86, COMPRESSED] + sorted(LOCAL.glob("*.so"))


def _many_containers(tmp_path: Path, containers: int, archs: int, wrappers: bool) -> Path:
    """A linked library's layout, as libcublasLt's: ``containers`` fatbins (one per compilation
    unit), ``archs`` cubins each with 64 KB payloads left as holes, section table at the end, and
    (``wrappers``) one .nvFatBinSegment record per container, as the linker writes them."""
    payload = 64 << 10
    start = 8192
    chunks: List[Tuple[int, bytes]] = []
    offsets = []
    pos = start
    for _ in range(containers):
        offsets.append(pos)
        chunks.append((pos, struct.pack("<IHHQ", 0xBA55ED50, 1, 16, archs * (64 + payload))))
        pos += 16
        for i in range(archs):
            chunks.append((pos, struct.pack("<HHIQIIHHIIIQQQ", 2, 0x0101, 64, payload, 0, 0, 8, 1, 75 + 5 * i, 0, 0, 0x11, 0, 0)))
            pos += 64 + payload
    sections = [Sec(b".nv_fatbin", offset=start, size=pos - start, addr=0x100000 + start)]
    if wrappers:
        records = b"".join(struct.pack("<IIQQ", 0x466243B1, 1, 0x100000 + off, 0) for off in offsets)
        sections.append(Sec(b".nvFatBinSegment", records, flags=3, offset=pos, size=len(records)))
        chunks.append((pos, records))
        pos += len(records)
    elf_chunks, size = build_elf(sections)
    return write_chunks(tmp_path / f"lib{containers}x{archs}{'w' if wrappers else ''}.so", elf_chunks + chunks, max(size, pos))
