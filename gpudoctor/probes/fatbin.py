"""Which GPU code a shared library carries: SASS (cubin) archs and PTX, read from its fatbin.

Pure standard library and Python 3.8+, on purpose: this module also runs inside another
interpreter as part of the stdlib-only probe script, so it imports nothing from gpudoctor.
It never imports the library it looks at and never reads the whole file: it reads the ELF
header, the section header table and the section-name table, then walks the fatbin container
and entry *headers* with seek + small reads, skipping every payload (compressed or not). A
456 MB ``libtorch_cuda.so`` with ~2,400 entries costs a few hundred KB of reads.

Layouts. Sources: "section.h" = NVIDIA's include/fatbinary_section.h (shipped in the
nvidia-cuda-nvcc wheels on PyPI); "layout" = the container and entry headers as read by
https://github.com/n-eiling/cuda-fatbin-decompression (fatbin-decompress.h) and
https://github.com/jiegec/fatbinary (lib.rs), with nvopen-tools' reverse-engineered format
notes for the rarer flags; "fixture" = real files built by nvcc and checked byte by byte, see
tests/fixtures/ground_truth/h200 and tests/fixtures/fatbin/build.sh + cuobjdump.txt:

* ELF: System V gABI header and section headers (ELF32 and ELF64, little-endian only).
* Where fatbins live (section.h): ``.nv_fatbin`` holds the fatbin data; ``__nv_relfatbin`` the
  relocatable (``-rdc``) objects; ``.nvFatBinSegment`` the ``__fatBinC_Wrapper_t`` records
  whose ``data`` pointer points at each registered container. cuobjdump (checked with 13.5 on
  tests/fixtures/fatbin/librdc.so and klto.o) lists ``.nv_fatbin`` and, only when a file has
  no ``.nv_fatbin`` (an object file), ``__nv_relfatbin``. We do the same; relocatable entries
  of a linked library are counted in ``relocatable`` only.
* Container header, 16 bytes (layout): magic 0xBA55ED50, u16 version (1), u16 header size
  (16), u64 size of the entries that follow. Containers follow each other inside a section.
* Entry header, 64 bytes and more (layout): u16 kind @0x00, u16 @0x02 (0x0101 in every
  file seen), u32 header size @0x04, u64 payload size @0x08 (padded: the next entry starts at
  entry + header size + payload size), u32 compressed size @0x10, u32 offset of the optional
  extension @0x14, u16 minor @0x18, u16 major @0x1A, u32 arch @0x1C, u64 flags @0x28,
  u64 decompressed size @0x38.
"""

import json
import os
import stat
import struct
import sys
from typing import Any, BinaryIO, Callable, Dict, List, Optional, Set, Tuple

from gpudoctor.probes import elf as _elf  # the ELF reader
from gpudoctor.probes import fatbin_result as _result_module  # the result type
from gpudoctor.probes.elf import Reader as _Reader
from gpudoctor.probes.fatbin_result import FatbinScan

# Statuses (fatbin_result.py): the snapshot's strings plus "not_elf" (FatbinScan.fact_status maps it).
OK = _result_module.OK
ABSENT = _result_module.ABSENT
ERROR = _result_module.ERROR
NO_PERMISSION = _result_module.NO_PERMISSION
NOT_ELF = _result_module.NOT_ELF
NOT_SUPPORTED = _result_module.NOT_SUPPORTED
SHT_NOBITS = _elf.SHT_NOBITS

# --- fatbin (section.h, layout) ------------------------------------------------------------
FATBIN_SECTION = b".nv_fatbin"  # section.h: FATBIN_DATA_SECTION_NAME
RELFATBIN_SECTION = b"__nv_relfatbin"  # section.h: FATBIN_PRELINK_DATA_SECTION_NAME (-rdc)
WRAPPER_SECTION = b".nvFatBinSegment"  # section.h: FATBIN_CONTROL_SECTION_NAME
FATBIN_MAGIC = 0xBA55ED50  # layout: FATBIN_MAGIC; fixture: bytes 50 ed 55 ba at 0x8e990
OLD_FATBIN_MAGIC = 0x1EE55A01  # layout: "old style" (pre-CUDA 4) magic, not read
WRAPPER_MAGIC = 0x466243B1  # section.h: FATBINC_MAGIC, first int of __fatBinC_Wrapper_t
CONTAINER_HEADER = struct.Struct("<IHHQ")  # layout: magic, version, header_size, fat_size
ENTRY_HEAD = struct.Struct("<HHIQ")  # layout: kind, 0x0101, header_size, payload size
ENTRY_BASE = 64  # layout: entry header is 64 bytes, longer with the extension

# Entry kinds (u16 at entry+0x00).
KIND_PTX = 0x1  # layout; fixture: the compute_90 PTX of libk_sm80_sm90_ptx90.so
KIND_ELF = 0x2  # layout; fixture: every cubin of the three H200 libraries
KIND_LTO = 0x8  # fixture klto.o (nvcc -dlto, code=lto_90): LTO-IR, not listed by cuobjdump -lelf
KIND_ELF_ALT = 0x10  # layout (nvopen-tools, 2ND): "ELF variant", counted by cuobjdump; not seen here
KIND_CONCAT = 0x100  # fixture libconcat.so (fatbinary -concat): several entries in one stream

# Entry flags (u64 at entry+0x28).
FLAG_LZ4 = 0x2000  # layout (n-eiling/jiegec 0x2000); fixture liblz4.so (-compress-mode=speed)
FLAG_ZSTD = 0x8000  # layout (nvopen-tools bit 15); fixtures libk_compressed.so, PTX of libk_sm80_sm90_ptx90.so
FLAG_COMPRESSED = FLAG_LZ4 | FLAG_ZSTD
# The 'a' / 'f' suffixes are NOT in the arch integer (layout) and NOT in the cubin's ELF
# e_flags (sm_90 and sm_90a cubins both carry e_flags 0x05005a04 in libvariants.so). They are
# entry-header flag bits, found from real nvcc 13.5 output and cuobjdump 13.5's names for the
# same entries (tests/fixtures/fatbin/cuobjdump.txt), for cubins and PTX alike:
FLAG_ARCH_SPECIFIC = 0x100000  # bit 20: 'a' (sm_90a: 0x100011 vs sm_90: 0x11; sm_100a 0x1100011)
FLAG_FAMILY = 0x200000  # bit 21: 'f' (sm_100f: 0x1200011; compute_120f PTX: 0x208011)
# Bit 24 (0x1000000) is set on every sm_100+ cubin entry, which also has a longer header; its
# meaning is unknown and we do not use it. Not confirmed: the 'a'/'f' bits in fatbins made by
# CUDA 12.x tools (no CUDA 12 fatbinary was available to check); libtorch_cuda.so (cu130,
# nvcc 13.0: 59 sm_100a cubins per cuobjdump) is the check for 13.0.

CONTAINER_BYTES = CONTAINER_HEADER.size
MAX_ENTRIES = 1_000_000  # hard stops for adversarial input (libcublasLt has ~5,400 entries)
MAX_CONTAINERS = 1_000_000
MAX_RESYNC_BYTES = 8 << 20  # bytes we may read looking for a container magic after garbage
RESYNC_CHUNK = 64 << 10
MAX_WRAPPER_BYTES = 1 << 20
MAX_CONCAT_HEADER = 1 << 20


class _Collector:
    """Accumulates entries; notes what could not be read (errors) and what is odd (notes)."""

    def __init__(self) -> None:
        self.sass: Set[Tuple[int, str]] = set()
        self.ptx: Set[Tuple[int, str]] = set()
        self.ptx_isa: Set[Tuple[int, int]] = set()
        self.lto: Set[int] = set()
        self.counts: Dict[str, int] = {}
        self.entries = 0
        self.compressed = 0
        self.containers = 0
        self.unknown_kinds: Set[int] = set()
        self.errors: List[str] = []
        self.notes: List[str] = []

    def add(self, kind: int, arch: int, flags: int, minor: int, major: int, compressed: bool) -> None:
        self.entries += 1
        if compressed:
            self.compressed += 1
        suffix = "a" if flags & FLAG_ARCH_SPECIFIC else ("f" if flags & FLAG_FAMILY else "")
        if kind in (KIND_ELF, KIND_ELF_ALT):
            self.sass.add((arch, suffix))
            name = f"sm_{arch}{'a' if suffix == 'a' else ''}"  # cuobjdump: sm_100f cubin = sm_100
        elif kind == KIND_PTX:
            self.ptx.add((arch, suffix))
            # layout minor/major; fixtures: 9.0 = the PTX's `.version 9.0` (nvcc 13.0), 9.5 (13.5)
            self.ptx_isa.add((major, minor))
            name = f"compute_{arch}{suffix}"
        elif kind == KIND_LTO:
            self.lto.add(arch)
            name = f"lto_{arch}"
        else:
            self.unknown_kinds.add(kind)
            name = f"kind_{kind:#x}"
        self.counts[name] = self.counts.get(name, 0) + 1


def _align8(value: int) -> int:
    return (value + 7) & ~7


def _extension_size(header: bytes, base: int) -> Optional[int]:
    """Length of the entry header record at ``header[base:]`` that has an extension.

    Learnt from nvcc 13.5 output (every entry of libvariants/libfamily/libconcat.so): u32 @0x14
    is the extension's offset (0x40); there, u32 = offset of a byte string (0x48) and u32 = its
    length; 4 more bytes follow it and the record is padded to 8. Gives 80 for PTX, 96/112/120
    for the sm_100+ cubins: equal to the header-size field of every plain entry that has one.
    """
    (ext,) = struct.unpack_from("<I", header, base + 0x14)
    if ext == 0:
        return ENTRY_BASE
    if ext < ENTRY_BASE or base + ext + 8 > len(header):
        return None
    str_off, str_len = struct.unpack_from("<II", header, base + ext)
    return _align8(str_off + str_len + 4)


class _Walker:
    def __init__(self, reader: _Reader, sink: _Collector) -> None:
        self.r = reader
        self.sink = sink
        self.resync_left = MAX_RESYNC_BYTES

    def walk_region(self, start: int, end: int, where: str) -> None:
        """Every container in file bytes [start, end)."""
        pos = start
        while (pos + CONTAINER_BYTES <= end and self.sink.entries < MAX_ENTRIES
               and self.sink.containers < MAX_CONTAINERS):
            head = self.r.read(pos, CONTAINER_BYTES)
            if len(head) < CONTAINER_BYTES:
                self.sink.errors.append(f"{where} is cut short: file ends at {self.r.size:#x}")
                return
            magic, version, hsize, fsize = CONTAINER_HEADER.unpack(head)
            if magic != FATBIN_MAGIC or hsize < CONTAINER_BYTES:
                if magic == OLD_FATBIN_MAGIC:
                    self.sink.errors.append(f"{where}: old-style fatbin (magic 0x1EE55A01, pre-CUDA 4) is not read")
                    return
                found, zeros = self._resync(pos + 8, start, end)
                if found is None:
                    if pos == start:
                        self.sink.errors.append(f"{where} holds no fatbin container (no magic 0xBA55ED50)")
                    elif zeros and head == bytes(CONTAINER_BYTES):
                        self.sink.notes.append(f"{where}: {end - pos} zero bytes at the end")
                    else:
                        self.sink.errors.append(f"{where}: bytes from {pos - start:#x} are not a fatbin container")
                    return
                self.sink.notes.append(f"{where}: skipped {found - pos} bytes between containers")
                pos = found
                continue
            if version != 1:
                self.sink.notes.append(f"{where}: container version {version} (expected 1)")
            self.sink.containers += 1
            cend = pos + hsize + fsize
            if cend > end:
                self.sink.errors.append(f"{where}: container at {pos - start:#x} runs past the section end")
                cend = end
            self._walk_entries(pos + hsize, cend, where)
            pos = cend

    def _resync(self, pos: int, start: int, end: int) -> Tuple[Optional[int], bool]:
        """(next container magic at an 8-aligned offset of the section in [pos, end), whether
        every byte read on the way was zero). Reads at most MAX_RESYNC_BYTES
        per scan. Chunks start 8-aligned and are a multiple of 8 long, so an aligned 4-byte magic
        never straddles two chunks."""
        pos = start + _align8(pos - start)
        needle = struct.pack("<I", FATBIN_MAGIC)
        zeros = True
        while pos < end:
            length = min(RESYNC_CHUNK, end - pos, self.resync_left) & ~7
            if length < 8:
                return None, zeros and end - pos < 8 and not self.r.read(pos, end - pos).strip(b"\0")
            chunk = self.r.read(pos, length)
            if len(chunk) < length:
                return None, False
            self.resync_left -= len(chunk)
            i = chunk.find(needle)
            while i >= 0:
                if i % 8 == 0:
                    if pos + i + CONTAINER_BYTES <= end:
                        return pos + i, zeros and not chunk[:i].strip(b"\0")
                    return None, False
                i = chunk.find(needle, i + 1)
            zeros = zeros and not chunk.strip(b"\0")
            pos += len(chunk)
        return None, zeros

    def _walk_entries(self, pos: int, end: int, where: str) -> None:
        # layout: next entry = entry + header_size + size; no terminator (nvopen-tools)
        while pos < end and self.sink.entries < MAX_ENTRIES:
            if pos + ENTRY_BASE > end:
                self.sink.errors.append(f"{where}: {end - pos} stray bytes at the end of a container")
                return
            head = self.r.read(pos, ENTRY_BASE)
            if len(head) < ENTRY_BASE:
                self.sink.errors.append(f"{where} is cut short: file ends at {self.r.size:#x}")
                return
            kind, _, ehsize, size = ENTRY_HEAD.unpack_from(head, 0)
            if ehsize < ENTRY_BASE or pos + ehsize > end:
                self.sink.errors.append(f"{where}: entry header at {pos:#x} has an impossible size {ehsize}")
                return
            minor, major, arch = struct.unpack_from("<HHI", head, 0x18)  # layout @0x18/0x1A/0x1C
            (flags,) = struct.unpack_from("<Q", head, 0x28)  # layout @0x28
            compressed = bool(flags & FLAG_COMPRESSED)  # layout: 0x2000 LZ4, 0x8000 zstd
            if kind == KIND_CONCAT:
                self._concat(pos, ehsize, compressed, where)
            else:
                self.sink.add(kind, arch, flags, minor, major, compressed)
            nxt = pos + ehsize + size
            if nxt > end:
                self.sink.errors.append(f"{where}: entry at {pos:#x} runs past its container")
                return
            pos = nxt

    def _concat(self, pos: int, ehsize: int, compressed: bool, where: str) -> None:
        """A fatbinary -concat entry (kind 0x100): its extension lists the members' headers.

        Layout from nvcc 13.5 output (tests/fixtures/fatbin/libconcat.so, checked against
        cuobjdump's list): at the extension (u32 @0x14, 0x40): u32 member count, u32 table
        size (these 8 bytes included), then one record per member laid out like an entry
        header (kind @0, arch @0x1C, flags @0x28 ...) except that u32 @4 is the member's offset
        in the decompressed stream, so each record's length comes from its own extension.
        """
        if ehsize > MAX_CONCAT_HEADER:
            self.sink.errors.append(f"{where}: concatenated entry at {pos:#x} has an implausible header")
            return
        header = self.r.read(pos, ehsize)
        (ext,) = struct.unpack_from("<I", header, 0x14) if len(header) >= 0x18 else (0,)
        if len(header) < ehsize or ext < ENTRY_BASE or ext + 8 > len(header):
            self.sink.errors.append(f"{where}: concatenated entry at {pos:#x} could not be read")
            return
        count, table_size = struct.unpack_from("<II", header, ext)
        table_end = ext + table_size
        members = []
        rec = ext + 8
        while rec + ENTRY_BASE <= min(table_end, len(header)) and len(members) < count:
            length = _extension_size(header, rec)
            if length is None or length < ENTRY_BASE:
                break
            kind = struct.unpack_from("<H", header, rec)[0]
            minor, major, arch = struct.unpack_from("<HHI", header, rec + 0x18)
            (flags,) = struct.unpack_from("<Q", header, rec + 0x28)
            members.append((kind, arch, flags, minor, major))
            rec += length
        if len(members) != count or rec != table_end or table_end > len(header):
            self.sink.errors.append(
                f"{where}: concatenated entry at {pos:#x}: member table not understood "
                f"({count} members announced, {len(members)} read)"
            )
            return
        for kind, arch, flags, minor, major in members:
            self.sink.add(kind, arch, flags, minor, major, compressed)


def _open_file(path: str) -> BinaryIO:
    handle = open(path, "rb", buffering=0)  # raw: a read(64) reads 64 bytes, not 8 KiB
    _no_readahead(handle.fileno())
    return handle


def _no_readahead(fd: int) -> None:
    """Our reads are a few bytes each, far apart: without this, each one that misses the page
    cache makes the kernel read 128 KB or more ahead (measured: 1 GB read from disk for the
    3 MB of headers of a vLLM install's 569 shared objects)."""
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
    except (AttributeError, OSError):
        pass


def _fail(status: str, detail: str) -> FatbinScan:
    return FatbinScan(status=status, detail=detail)


def scan(path: str, opener: Optional[Callable[[str], BinaryIO]] = None) -> FatbinScan:
    """Read the fatbin headers of the ELF file at ``path``. Never raises.

    ``opener(path)`` returns a binary file object with seek/read (default: unbuffered open);
    tests pass a counting wrapper to prove how little is read.
    """
    try:
        return _scan(path, opener or _open_file)
    except Exception as exc:  # the contract: a result, never a traceback
        return _fail(ERROR, f"unexpected {type(exc).__name__}: {exc}")


def _scan(path: str, opener: Callable[[str], BinaryIO]) -> FatbinScan:
    try:
        st = os.stat(path)  # before open(): opening a FIFO would block
    except PermissionError as exc:
        return _fail(NO_PERMISSION, f"{path}: {exc.strerror or exc}")
    except OSError as exc:
        return _fail(ERROR, f"{path}: {exc.strerror or exc}")
    except (ValueError, TypeError) as exc:  # embedded NUL, not a path
        return _fail(ERROR, f"bad path: {exc}")
    if stat.S_ISDIR(st.st_mode):
        return _fail(ERROR, f"{path}: is a directory")
    if not stat.S_ISREG(st.st_mode):
        return _fail(ERROR, f"{path}: not a regular file")
    try:
        handle = opener(path)
    except PermissionError as exc:
        return _fail(NO_PERMISSION, f"{path}: {exc.strerror or exc}")
    except OSError as exc:
        return _fail(ERROR, f"{path}: {exc.strerror or exc}")
    try:
        try:
            reader = _Reader(handle)
        except PermissionError as exc:
            return _fail(NO_PERMISSION, f"{path}: {exc.strerror or exc}")
        except OSError as exc:
            return _fail(ERROR, f"{path}: {exc.strerror or exc}")
        return scan_reader(path, reader)
    finally:
        try:
            handle.close()
        except Exception:
            pass


def scan_reader(path: str, reader: _Reader, elf: Any = None) -> FatbinScan:
    """``scan`` of a file already open (``elf``: its section table or the scan that says why
    there is none, when already read: probes/coldstart.py). Never raises."""
    try:
        try:
            result = _scan_open(reader, elf)
            result.bytes_read = reader.bytes_read
            return result
        except PermissionError as exc:
            return _fail(NO_PERMISSION, f"{path}: {exc.strerror or exc}")
        except OSError as exc:
            return _fail(ERROR, f"{path}: {exc.strerror or exc}")
    except Exception as exc:  # the contract: a result, never a traceback
        return _fail(ERROR, f"unexpected {type(exc).__name__}: {exc}")


def read_elf(r: _Reader) -> Any:
    """The section table of the file (an ``elf.Elf``), or the FatbinScan that says why it cannot
    be read. OSError (the read itself failed) is left to the caller."""
    try:
        return _elf.Elf(r)
    except _elf.NotElf as exc:
        return _fail(NOT_ELF, str(exc))
    except _elf.Unsupported as exc:
        return _fail(NOT_SUPPORTED, str(exc))
    except _elf.Truncated as exc:
        return _fail(ERROR, f"truncated ELF: {exc}")
    except _elf.ElfError as exc:
        text = str(exc)
        return _fail(ERROR, text if text.startswith(("truncated ELF", "unknown ELF", "malformed ELF")) else f"malformed ELF: {text}")


def _scan_open(r: _Reader, elf: Any = None) -> FatbinScan:
    if elf is None:
        elf = read_elf(r)
    if isinstance(elf, FatbinScan):
        return elf

    fatbin = elf.find(FATBIN_SECTION)
    relfatbin = elf.find(RELFATBIN_SECTION)
    wrappers = elf.find(WRAPPER_SECTION)
    if fatbin is None and relfatbin is None and wrappers is None:
        return _fail(ABSENT, "no .nv_fatbin, __nv_relfatbin or .nvFatBinSegment section: not a CUDA binary")

    sink = _Collector()
    walker = _Walker(r, sink)
    sections: List[str] = []
    covered: List[Tuple[int, int]] = []
    # What cuobjdump lists: .nv_fatbin; in a file without it (an object file) __nv_relfatbin.
    primary = fatbin if fatbin is not None else relfatbin
    if primary is not None:
        _walk_section(r, walker, primary, sink)
        sections.append(primary.name.decode("ascii", "replace"))
        covered.append((primary.offset, primary.offset + primary.size))
    relocatable = 0
    if fatbin is not None and relfatbin is not None:
        # The -rdc objects a linked library keeps: counted, not listed (not what is loaded).
        rel = _Collector()
        _walk_section(r, _Walker(r, rel), relfatbin, rel)
        relocatable = rel.entries
        sink.errors.extend(rel.errors)
        sections.append(relfatbin.name.decode("ascii", "replace"))
        covered.append((relfatbin.offset, relfatbin.offset + relfatbin.size))
    if wrappers is not None:
        _walk_wrappers(r, elf, walker, wrappers, covered, sink, sections)
    return _result(sink, sections, relocatable)


def _walk_section(r: _Reader, walker: _Walker, section, sink: _Collector) -> None:
    where = section.name.decode("ascii", "replace")
    if section.type == SHT_NOBITS:
        sink.errors.append(f"{where} has no data in this file (SHT_NOBITS: a stripped or debug-only file?)")
        return
    end = section.offset + section.size
    if end > r.size:
        sink.errors.append(f"{where} ends at {end:#x} but the file is {r.size} bytes (truncated)")
        end = r.size
    walker.walk_region(section.offset, end, where)


def _walk_wrappers(r: _Reader, elf, walker: _Walker, section,
                   covered: List[Tuple[int, int]], sink: _Collector, sections: List[str]) -> None:
    """Containers that wrapper records point at outside the sections already read (section.h).

    __fatBinC_Wrapper_t = {int magic, int version, ptr data, ptr filename_or_fatbins}: 24 bytes
    in ELF64, 16 in ELF32. ``data`` is a virtual address, written in place by the linker in
    shared libraries (fixture: 0x8e990 = .nv_fatbin) and 0 in object files (a relocation).
    """
    if section.type == SHT_NOBITS:
        return
    ptr, size = ("<Q", 24) if elf.is64 else ("<I", 16)
    data = r.read(section.offset, min(section.size, MAX_WRAPPER_BYTES))
    extra = False
    for base in range(0, len(data) - size + 1, size):
        (magic,) = struct.unpack_from("<I", data, base)
        if magic != WRAPPER_MAGIC:
            continue
        (vaddr,) = struct.unpack_from(ptr, data, base + 8)
        offset = elf.file_offset(vaddr) if vaddr else None
        if offset is None or any(lo <= offset < hi for lo, hi in covered):
            continue
        head = r.read(offset, CONTAINER_BYTES)
        if len(head) < CONTAINER_BYTES:
            continue
        magic, _, hsize, fsize = CONTAINER_HEADER.unpack(head)
        if magic != FATBIN_MAGIC or hsize < CONTAINER_BYTES:
            continue
        end = min(offset + hsize + fsize, r.size)
        walker.walk_region(offset, end, f"container at {offset:#x} (from {WRAPPER_SECTION.decode()})")
        covered.append((offset, end))
        extra = True
    if extra:
        sections.append(WRAPPER_SECTION.decode())


def _name_order(item: Tuple[str, int]) -> Tuple[str, int, str]:
    prefix, _, rest = item[0].partition("_")
    digits = rest.rstrip("af")
    return (prefix, int(digits) if digits.isdigit() else -1, rest)


def _result(c: _Collector, sections: List[str], relocatable: int) -> FatbinScan:
    # cuobjdump prints a family cubin (sm_100f) as sm_100: the same code; PTX keeps its 'f'.
    cubins = sorted({(arch, "a" if suffix == "a" else "") for arch, suffix in c.sass})
    scan = FatbinScan(
        sm=sorted({arch for arch, _ in c.sass}),
        sm_variants=[f"sm_{arch}{suffix}" for arch, suffix in cubins],
        ptx=sorted({arch for arch, _ in c.ptx}),
        ptx_variants=[f"compute_{arch}{suffix}" for arch, suffix in sorted(c.ptx)],
        ptx_isa=[f"{major}.{minor}" for major, minor in sorted(c.ptx_isa)],
        lto=sorted(c.lto),
        entries=c.entries,
        compressed=c.compressed,
        containers=c.containers,
        relocatable=relocatable,
        sections=sections,
        counts=dict(sorted(c.counts.items(), key=_name_order)),
    )
    notes = list(c.errors)
    if c.unknown_kinds:
        notes.append("entries of unknown kind " + ", ".join(f"{k:#x}" for k in sorted(c.unknown_kinds)))
    notes.extend(c.notes)
    if c.entries >= MAX_ENTRIES or c.containers >= MAX_CONTAINERS:
        c.errors.append(f"stopped after {c.entries} entries in {c.containers} containers")
        notes.append(c.errors[-1])
    scan.detail = "; ".join(notes)
    if c.errors:
        scan.status = ERROR
    elif c.entries == 0 and sections:
        scan.status = ERROR
        scan.detail = scan.detail or f"{', '.join(sections)} holds no fatbin entries"
    elif c.entries == 0:
        scan.status = ABSENT
        scan.detail = scan.detail or "only .nvFatBinSegment, and no fatbin it points at: not a CUDA binary"
    return scan


# Which code runs on which GPU (the 'a'/'f' family rules, PTX JIT) is decided in one place,
# gpudoctor.knowledge.gpus.kernel_support, from the sm_variants / ptx_variants read here.


def main(argv: Optional[List[str]] = None) -> int:
    """``python -m gpudoctor.probes.fatbin FILE...``: one JSON line per file."""
    paths = sys.argv[1:] if argv is None else argv
    for path in paths:
        result = scan(path)
        out = {"path": path, **result.to_json(), "bytes_read": result.bytes_read}
        print(json.dumps(out, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
