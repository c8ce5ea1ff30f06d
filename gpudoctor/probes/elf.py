"""The one ELF reader: the section table of a little-endian ELF32/ELF64 file, and the bytes of named sections.

Standard library only and Python 3.8-compatible: it runs in the doctor's process or inside the
interpreter named by ``--python`` (python_stack's bootstrap serves it as ``gpudoctor.probes.elf``).
Used by the fatbin reader (probes/fatbin.py: where ``.nv_fatbin`` is), the torch ABI check
(probes/python_stack_read.py: ``.dynstr`` of libc10.so) and the extension checks (probes/flash_attn.py:
``.dynamic``/``.dynstr``/``.dynsym``). It reads the ELF header, the section header table and
the section-name table with positioned reads — never the whole file — and a section's bytes
only when asked, up to a limit.

Layouts: System V gABI (ELF header, section headers, extended numbering through section 0's
``sh_size``/``sh_link``). A ``SHT_NOBITS`` section (``.bss``, or any section of a stripped
debug file) occupies no bytes in the file: ``data()`` returns None for it, as for an absent
section, and ``find()`` still lists it so a caller can say why there is nothing to read.
"""

import io
import os
import struct
from typing import BinaryIO, Dict, List, Optional, Tuple

ELF_MAGIC = b"\x7fELF"
ELFCLASS32, ELFCLASS64 = 1, 2  # e_ident[EI_CLASS] (byte 4)
ELFDATA2LSB, ELFDATA2MSB = 1, 2  # e_ident[EI_DATA] (byte 5)
SHT_NOBITS = 8
SHF_ALLOC = 0x2
SHN_XINDEX = 0xFFFF
MAX_SECTION_TABLE = 16 << 20
MAX_NAME_TABLE = 1 << 20


class ElfError(ValueError):
    """Not an ELF file we can read; ``status`` is the fact status it maps to."""

    status = "error"


class NotElf(ElfError):
    status = "not_elf"


class Unsupported(ElfError):
    status = "not_supported"


class Truncated(ElfError):
    """A read came back short: the file ends before a structure it announces."""


class Reader:
    """Positioned reads on a binary file object, counting bytes; never reads more than asked.

    On a plain unbuffered file (``io.FileIO``, what ``open(path, "rb", buffering=0)`` returns)
    each read is one ``pread``, not a seek and a read: half the system calls of a scan that
    makes tens of thousands of small reads (libcublasLt's ~5,700 fatbin entries). Any other
    file object (a test's counting wrapper, BytesIO) is read with seek + read."""

    def __init__(self, handle: BinaryIO, size: Optional[int] = None) -> None:
        self.handle = handle
        self.size = handle.seek(0, 2) if size is None else size
        self.bytes_read = 0
        self.fd = handle.fileno() if type(handle) is io.FileIO else None  # for positioned reads; None: another file object
        # offset -> the bytes read there already, for a second reader of the same headers (coldstart's
        # breadth-first walk reads every fatbin header before fatbin.scan reads them again).
        self.memo: Optional[Dict[int, bytes]] = None

    def read(self, offset: int, length: int) -> bytes:
        if offset < 0 or length <= 0 or offset >= self.size:
            return b""
        length = min(length, self.size - offset)
        if self.memo is not None:
            data = self.memo.get(offset)
            if data is not None and len(data) >= length:
                self.bytes_read += length
                return data if len(data) == length else data[:length]
        if self.fd is not None:
            data = os.pread(self.fd, length, offset)
        else:
            self.handle.seek(offset)
            data = self.handle.read(length) or b""
        self.bytes_read += len(data)
        return data

    def exact(self, offset: int, length: int, what: str) -> bytes:
        data = self.read(offset, length)
        if len(data) != length:
            raise Truncated(f"file ends inside {what} (needs {length} bytes at {offset:#x}, file is {self.size} bytes)")
        return data


class Section:
    __slots__ = ("name", "type", "flags", "addr", "offset", "size")

    def __init__(self, name: bytes, sh_type: int, flags: int, addr: int, offset: int, size: int) -> None:
        self.name, self.type, self.flags, self.addr, self.offset, self.size = name, sh_type, flags, addr, offset, size

    @property
    def nobits(self) -> bool:
        return self.type == SHT_NOBITS


class Elf:
    """The section table of one ELF file. ``Elf(reader)`` reads it; ElfError if it cannot."""

    def __init__(self, reader: Reader) -> None:
        self.reader = reader
        ident = reader.read(0, 16)
        if not ident:
            raise NotElf("empty file")
        if ident[:4] != ELF_MAGIC:
            raise NotElf("not an ELF file")
        if len(ident) < 16:
            raise ElfError("truncated ELF header")
        ei_class, ei_data = ident[4], ident[5]
        if ei_data == ELFDATA2MSB:
            raise Unsupported("big-endian ELF is not supported (NVIDIA fatbins are little-endian)")
        if ei_data != ELFDATA2LSB:
            raise ElfError(f"unknown ELF data encoding {ei_data}")
        if ei_class not in (ELFCLASS32, ELFCLASS64):
            raise ElfError(f"unknown ELF class {ei_class}")
        self.is64 = ei_class == ELFCLASS64
        self._sections: Optional[List[Section]] = None
        self._loaded: Optional[List[Section]] = None
        self._last: Optional[Section] = None  # file_offset's last section
        try:
            self._load()
        except struct.error as exc:
            raise ElfError(f"malformed ELF: {exc}")

    # Every check a file can fail is made when it is opened (_load); the table's entries are
    # turned into Sections only when one is asked for by a name the name table holds. Most
    # shared objects of a scan have no fatbin section: ~40 entries each left unparsed (890
    # files of an H200 host: ~0.1 s of a cold check).
    @property
    def sections(self) -> List[Section]:
        if self._sections is None:
            sections = [self._parse(self._table[i * self._entsize:i * self._entsize + self._need]) for i in range(self._count)]
            names = self._names
            for section, name_off in zip(sections, self._name_offsets()):
                end = names.find(b"\0", name_off)
                section.name = names[name_off:end] if 0 <= name_off < len(names) and end >= 0 else b""
            self._sections = sections
        return self._sections

    @property
    def loaded(self) -> List[Section]:
        if self._loaded is None:
            self._loaded = [s for s in self.sections if s.flags & SHF_ALLOC and not s.nobits and s.addr]
        return self._loaded

    def _name_offsets(self) -> List[int]:
        return [struct.unpack_from("<I", self._table, i * self._entsize)[0] for i in range(self._count)]  # sh_name @0

    def _load(self) -> None:
        r = self.reader
        head = r.exact(0, 64 if self.is64 else 52, "the ELF64 header" if self.is64 else "the ELF32 header")
        shoff, shentsize, shnum, shstrndx = header_fields(head, self.is64)
        need = 64 if self.is64 else 40
        if shoff == 0:
            raise ElfError("no section header table")
        if shentsize < need:
            raise ElfError(f"section header entries of {shentsize} bytes (expected {need})")
        if shnum == 0 or shstrndx == SHN_XINDEX:
            # gABI extended numbering: the real values live in section 0's sh_size / sh_link.
            zero = r.exact(shoff, need, "section header 0")
            shnum = shnum or self._parse(zero).size
            if shstrndx == SHN_XINDEX:
                shstrndx = struct.unpack_from("<I", zero, 0x28 if self.is64 else 0x18)[0]
        if shnum * shentsize > MAX_SECTION_TABLE:
            raise ElfError(f"implausible section header table ({shnum} entries)")
        table = r.exact(shoff, shnum * shentsize, "the section header table")
        if not 0 <= shstrndx < shnum:
            raise ElfError(f"section name table index {shstrndx} out of range ({shnum} sections)")
        strtab = self._parse(table[shstrndx * shentsize:shstrndx * shentsize + need])
        self._names = r.exact(strtab.offset, min(strtab.size, MAX_NAME_TABLE), "the section name table")
        self._table, self._entsize, self._need, self._count = table, shentsize, need, shnum

    def _parse(self, entry: bytes) -> Section:
        return section_header(entry, self.is64)

    def find(self, name: bytes) -> Optional[Section]:
        if name + b"\0" not in self._names:  # no section can have this name (names end with NUL)
            return None
        for section in self.sections:
            if section.name == name:
                return section
        return None

    def data(self, name: bytes, limit: int) -> Optional[bytes]:
        """The bytes of the first section called ``name``; None if absent or SHT_NOBITS.

        ElfError if it is larger than ``limit`` or the file ends inside it."""
        section = self.find(name)
        if section is None or section.nobits:
            return None
        if section.size > limit:
            raise ElfError(f"{name.decode('ascii', 'replace')} is {section.size} bytes (limit {limit})")
        return self.reader.exact(section.offset, section.size, name.decode("ascii", "replace"))

    def file_offset(self, vaddr: int) -> Optional[int]:
        """Where the loaded address ``vaddr`` comes from in the file, via SHF_ALLOC sections."""
        last = self._last
        if last is not None and last.addr <= vaddr < last.addr + last.size:  # thousands of wrapper records: one section
            return last.offset + (vaddr - last.addr)
        for s in self.loaded:
            if s.addr <= vaddr < s.addr + s.size:
                self._last = s
                return s.offset + (vaddr - s.addr)
        return None


def header_fields(head: bytes, is64: bool) -> Tuple[int, int, int, int]:
    """(e_shoff, e_shentsize, e_shnum, e_shstrndx) of an ELF header (64 or 52 bytes)."""
    if is64:
        # Elf64_Ehdr: e_shoff u64 @0x28, e_shentsize u16 @0x3A, e_shnum @0x3C, e_shstrndx @0x3E
        (shoff,) = struct.unpack_from("<Q", head, 0x28)
        return (shoff,) + struct.unpack_from("<HHH", head, 0x3A)
    # Elf32_Ehdr: e_shoff u32 @0x20, e_shentsize u16 @0x2E, e_shnum @0x30, e_shstrndx @0x32
    (shoff,) = struct.unpack_from("<I", head, 0x20)
    return (shoff,) + struct.unpack_from("<HHH", head, 0x2E)


def section_header(entry: bytes, is64: bool) -> Section:
    """One section header (its name left empty: it lives in the section name table)."""
    if is64:
        # Elf64_Shdr: sh_type u32 @4, sh_flags u64 @8, sh_addr @0x10, sh_offset @0x18, sh_size @0x20
        sh_type, sh_flags, addr, offset, size = struct.unpack_from("<IQQQQ", entry, 4)
    else:
        # Elf32_Shdr: sh_type u32 @4, sh_flags u32 @8, sh_addr @0xC, sh_offset @0x10, sh_size @0x14
        sh_type, sh_flags, addr, offset, size = struct.unpack_from("<IIIII", entry, 4)
    return Section(b"", sh_type, sh_flags, addr, offset, size)


def open_elf(path: str) -> Tuple[BinaryIO, Elf]:
    """Open ``path`` unbuffered and read its section table (caller closes the handle)."""
    handle = open(path, "rb", buffering=0)  # raw: a seek + read(64) reads 64 bytes, not 8 KiB
    try:
        return handle, Elf(Reader(handle))
    except BaseException:
        handle.close()
        raise


def sections(path: str, names: Tuple[bytes, ...], limit: int) -> Dict[bytes, bytes]:
    """The named sections of an ELF file that have bytes (absent and SHT_NOBITS ones left out).

    OSError when the file cannot be read, ElfError when it is not an ELF file we read or a
    section is larger than ``limit``."""
    handle, elf = open_elf(path)
    try:
        out: Dict[bytes, bytes] = {}
        for name in names:
            data = elf.data(name, limit)
            if data is not None:
                out[name] = data
        return out
    finally:
        handle.close()
