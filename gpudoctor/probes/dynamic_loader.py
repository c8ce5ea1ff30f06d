"""What the dynamic loader does with a shared object: where it finds each library it needs, and
whether those libraries define the symbol versions it needs.

Standard library only and Python 3.8-compatible: probes/torch_links.py calls it, in the doctor's
process or inside the interpreter named by ``--python`` (python_stack's bootstrap serves it as ``gpudoctor.probes.dynamic_loader``).

Where (``Loader``): ld.so(8)'s search order — ``DT_RPATH`` (when there is no ``DT_RUNPATH``),
``LD_LIBRARY_PATH``, ``DT_RUNPATH`` (``$ORIGIN`` expanded), ``/etc/ld.so.cache``, the default
directories.

Symbol versions:
A library built with a newer toolchain than the machine's asks for versions the machine's
libraries do not define: ``GLIBCXX_3.4.32`` (GCC 13's libstdc++), ``CXXABI_1.3.15``,
``GLIBC_2.38``. The loader checks each one when it maps the object, before any symbol is bound
(glibc ``elf/dl-version.c``, ``_dl_check_map_versions``), and refuses it: "version
`GLIBCXX_3.4.32' not found (required by …/ext.so)". A weak requirement (``VER_FLG_WEAK``) is
only reported in verbose mode, never refused.

Read from the files (System V gABI and the LSB's "Symbol Versioning": ``.gnu.version_r`` is a
chain of Elf64_Verneed, one per library, each with a chain of Elf64_Vernaux, one per version;
``.gnu.version_d`` a chain of Elf64_Verdef, the first Elf64_Verdaux of each naming the version).
"""

import os
import re
import struct
from typing import Any, Dict, Iterable, List, Optional, Tuple

from gpudoctor.probes import python_stack_read as _stack_read

DEFAULT_DIRS = ("/lib64", "/usr/lib64", "/lib", "/usr/lib", "/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu",
                "/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu")
LD_CACHE = "/etc/ld.so.cache"
DEFS_KIND = "verdefs-1"
MAX_SECTION = 64 << 20
MAX_ENTRIES = 4096  # chain links followed: a corrupt chain must not loop
MAX_DYNAMIC = 1 << 20
DT_NEEDED, DT_SONAME, DT_RPATH, DT_RUNPATH = 1, 14, 15, 29
VER_FLG_BASE = 1
VER_FLG_WEAK = 2
SHOWN = 3  # missing versions kept per library



def dynamic_info(path: str) -> Dict[str, Any]:
    """needed, soname, rpath, runpath of one shared object (status "ok"), or its status and detail
    (probes/torch_links.py asks it of every shared object on the path).

    Read as the loader reads it: the ELF header and program headers (one read of the file's first
    4 KiB), the PT_DYNAMIC segment, and the strings it names through DT_STRTAB — three reads, no
    section table (0.33 ms a file with it; ~600 files of an SGLang install). A file without
    program headers that say so is read through its sections instead."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        return {"status": _stack_read.os_error_status(exc), "detail": _stack_read.describe_os_error(exc)}
    try:
        found = _dynamic_by_segments(fd)
    except (OSError, struct.error, ValueError):
        found = None
    finally:
        os.close(fd)
    return found if found is not None else _dynamic_by_sections(path)


def dynamic_info_safe(path: str) -> Dict[str, Any]:
    """dynamic_info in a worker thread: an unforeseen error is that file's answer, never the thread's end."""
    try:
        return dynamic_info(path)
    except Exception as exc:  # noqa: BLE001
        return {"status": "error", "detail": f"{type(exc).__name__}: {exc}"[:200]}


def _dynamic_by_segments(fd: int) -> Optional[Dict[str, Any]]:
    head = os.pread(fd, 4096, 0)
    if len(head) < 64 or head[:4] != b"\x7fELF":
        return None  # not ELF, or short: the section reader says which, with its words
    if head[4] != 2 or head[5] != 1:
        return None  # 32-bit or big-endian: the section reader refuses it
    (phoff,) = struct.unpack_from("<Q", head, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", head, 0x36)
    if phentsize < 56 or not 0 < phnum < 4096:
        return None
    table = head[phoff:phoff + phnum * phentsize] if phoff + phnum * phentsize <= len(head) else os.pread(fd, phnum * phentsize, phoff)
    if len(table) < phnum * phentsize:
        return None
    loads: List[Tuple[int, int, int]] = []
    dynamic: Optional[Tuple[int, int]] = None
    for i in range(phnum):
        p_type, _flags, offset, vaddr, _paddr, filesz = struct.unpack_from("<IIQQQQ", table, i * phentsize)
        if p_type == 1:  # PT_LOAD
            loads.append((vaddr, offset, filesz))
        elif p_type == 2:  # PT_DYNAMIC
            dynamic = (offset, filesz)
    if dynamic is None:
        return {"status": "ok", "needed": [], "static": True}
    data = os.pread(fd, min(dynamic[1], MAX_DYNAMIC), dynamic[0])
    wanted: List[Tuple[int, int]] = []
    strtab = strsz = None
    for tag, value in struct.iter_unpack("<qQ", data[:len(data) // 16 * 16]):
        if tag == 0:
            break
        if tag in (DT_NEEDED, DT_SONAME, DT_RPATH, DT_RUNPATH):
            wanted.append((tag, value))
        elif tag == 5:  # DT_STRTAB: an address
            strtab = value
        elif tag == 10:  # DT_STRSZ
            strsz = value
    if strtab is None or strsz is None:
        return None
    base = next((off + (strtab - va) for va, off, size in loads if va <= strtab < va + size), None)
    if base is None:
        return None
    strings: Dict[int, str] = {}
    if wanted:
        low = min(v for _, v in wanted)
        high = max(v for _, v in wanted)
        if high - low < (64 << 10):  # one read for all of them (they sit together at the table's start)
            chunk = os.pread(fd, min(high - low + 4096, strsz - low), base + low)
            strings = {v: _cstr(chunk, v - low) for _, v in wanted if v < strsz}
        else:
            strings = {v: _cstr(os.pread(fd, min(4096, strsz - v), base + v), 0) for _, v in wanted if v < strsz}
    out: Dict[str, Any] = {"status": "ok", "needed": [strings.get(v, "") for t, v in wanted if t == DT_NEEDED]}
    for tag, key in ((DT_SONAME, "soname"), (DT_RPATH, "rpath"), (DT_RUNPATH, "runpath")):
        values = [strings.get(v, "") for t, v in wanted if t == tag]
        if values:
            out[key] = values[0] if tag == DT_SONAME else ":".join(values)
    return out


def _dynamic_by_sections(path: str) -> Dict[str, Any]:
    """needed, soname, rpath, runpath of one shared object (status "ok"), or its status and detail."""
    elf = _stack_read.elf_module()
    try:
        handle, reader = elf.open_elf(path)
    except OSError as exc:
        return {"status": _stack_read.os_error_status(exc), "detail": _stack_read.describe_os_error(exc)}
    except elf.ElfError as exc:
        return {"status": exc.status, "detail": str(exc)[:200]}
    try:
        if not reader.is64:
            return {"status": "not_supported", "detail": "32-bit ELF"}
        dynamic = reader.data(b".dynamic", MAX_DYNAMIC)
        if not dynamic:
            return {"status": "ok", "needed": [], "static": True}
        dynstr = reader.find(b".dynstr")
        if dynstr is None or dynstr.nobits:
            return {"status": "error", "detail": "a .dynamic section but no .dynstr"}
        entries = [(tag, value) for tag, value in struct.iter_unpack("<qQ", dynamic[:len(dynamic) // 16 * 16])]
        wanted = [(tag, value) for tag, value in entries[:next((i for i, e in enumerate(entries) if e[0] == 0), len(entries))]
                  if tag in (DT_NEEDED, DT_SONAME, DT_RPATH, DT_RUNPATH)]
        # Most shared objects link no torch: only the strings the dynamic section names are read
        # (a few hundred bytes), not the whole string table (libcublasLt's is megabytes).
        strings: Dict[int, str] = {}
        for _, value in wanted:
            if value not in strings and value < dynstr.size:
                chunk = reader.reader.read(dynstr.offset + value, min(4096, dynstr.size - value))
                strings[value] = _cstr(chunk, 0)
        out: Dict[str, Any] = {"status": "ok", "needed": [strings.get(v, "") for t, v in wanted if t == DT_NEEDED]}
        for tag, key in ((DT_SONAME, "soname"), (DT_RPATH, "rpath"), (DT_RUNPATH, "runpath")):
            values = [strings.get(v, "") for t, v in wanted if t == tag]
            if values:
                out[key] = values[0] if tag == DT_SONAME else ":".join(values)
        return out
    except elf.ElfError as exc:
        return {"status": exc.status, "detail": str(exc)[:200]}
    except (OSError, struct.error) as exc:
        return {"status": "error", "detail": f"{type(exc).__name__}: {exc}"[:200]}
    finally:
        handle.close()


def _cstr(table: bytes, offset: int) -> str:
    if not 0 <= offset < len(table):
        return ""
    end = table.find(b"\0", offset)
    return table[offset:end if end >= 0 else None].decode("utf-8", "replace")


def parse_needed(verneed: bytes, strtab: bytes) -> Dict[str, List[str]]:
    """library -> the versions of it required (weak ones left out), from ``.gnu.version_r``."""
    out: Dict[str, List[str]] = {}
    offset, links = 0, 0
    while 0 <= offset and offset + 16 <= len(verneed) and links < MAX_ENTRIES:
        _version, count, file_name, aux, next_need = struct.unpack_from("<HHIII", verneed, offset)
        names = out.setdefault(_cstr(strtab, file_name), [])
        at = offset + aux
        for _ in range(min(count, MAX_ENTRIES)):
            if not (0 <= at and at + 16 <= len(verneed)):
                break
            _hash, flags, _other, name, next_aux = struct.unpack_from("<IHHII", verneed, at)
            links += 1
            if not flags & VER_FLG_WEAK:
                text = _cstr(strtab, name)
                if text and text not in names:
                    names.append(text)
            if not next_aux:
                break
            at += next_aux
        if not next_need:
            break
        offset += next_need
        links += 1
    return {k: v for k, v in out.items() if k and v}


def parse_defined(verdef: bytes, strtab: bytes) -> List[str]:
    """The versions a library defines (its own base name left out), from ``.gnu.version_d``."""
    out: List[str] = []
    offset, links = 0, 0
    while 0 <= offset and offset + 20 <= len(verdef) and links < MAX_ENTRIES:
        _version, flags, _index, _count, _hash, aux, next_def = struct.unpack_from("<HHHHIII", verdef, offset)
        links += 1
        if not flags & VER_FLG_BASE and 0 <= offset + aux and offset + aux + 8 <= len(verdef):
            (name,) = struct.unpack_from("<I", verdef, offset + aux)
            text = _cstr(strtab, name)
            if text:
                out.append(text)
        if not next_def:
            break
        offset += next_def
    return out


def needed_from_sections(sections: Dict[bytes, bytes]) -> Dict[str, List[str]]:
    """``parse_needed`` of sections already read (``.gnu.version_r``, ``.dynstr``)."""
    verneed = sections.get(b".gnu.version_r")
    return parse_needed(verneed, sections.get(b".dynstr", b"")) if verneed else {}


def defined_versions(path: str) -> Dict[str, Any]:
    """{"status": "ok", "defined": [...]} of a library, or its status and detail. A library with no
    ``.gnu.version_d`` ("versioned": False) satisfies any version asked of it: the loader then says
    nothing unless verbose (glibc ``match_symbol``: "The file has no symbol versioning")."""
    try:
        sections = _stack_read.elf_module().sections(path, (b".gnu.version_d", b".dynstr"), MAX_SECTION)
    except OSError as exc:
        return {"status": _stack_read.os_error_status(exc), "detail": _stack_read.describe_os_error(exc)}
    except ValueError as exc:  # ElfError
        return {"status": "error", "detail": str(exc)[:200]}
    verdef = sections.get(b".gnu.version_d")
    if not verdef:
        return {"status": "ok", "defined": [], "versioned": False}
    return {"status": "ok", "defined": parse_defined(verdef, sections.get(b".dynstr", b""))}


def _number(name: str) -> Tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", name))


def newest(defined: Iterable[str], like: str) -> Optional[str]:
    """The newest version of the family ``like`` belongs to (GLIBCXX_3.4.32 -> the newest GLIBCXX_)."""
    family = like.rsplit("_", 1)[0] + "_"
    same = [d for d in defined if d.startswith(family) and d[len(family):][:1].isdigit()]
    return max(same, key=_number) if same else None


class Loader:
    """Where the dynamic loader finds a library (ld.so(8)); each (directory, name) looked up once.

    One stat per question, not a listing of the directory: /usr/lib/x86_64-linux-gnu holds
    thousands of entries and is asked about a few names."""

    def __init__(self, environ: Dict[str, str]) -> None:
        self.ld_library_path = [d for d in (environ.get("LD_LIBRARY_PATH") or "").split(":") if d]
        self.present: Dict[Tuple[str, str], bool] = {}
        self._cache: Optional[Dict[str, str]] = None

    def has(self, directory: str, name: str) -> bool:
        found = self.present.get((directory, name))
        if found is None:
            found = self.present[(directory, name)] = os.path.exists(os.path.join(directory, name))
        return found

    def ld_cache(self) -> Dict[str, str]:
        """soname -> path of /etc/ld.so.cache: its strings are the paths it maps (glibc's format,
        old and new, keeps them NUL-terminated in one table)."""
        if self._cache is None:
            self._cache = {}
            try:
                with open(LD_CACHE, "rb") as handle:
                    data = handle.read(16 << 20)
            except OSError:
                data = b""
            for raw in data.split(b"\0"):  # NUL-terminated strings: the paths are those that start with /
                if raw[:1] == b"/" and b".so" in raw:
                    text = raw.decode("utf-8", "replace")
                    self._cache.setdefault(text.rsplit("/", 1)[-1], text)
        return self._cache

    @staticmethod
    def expand(paths: str, origin: str) -> List[str]:
        out = []
        for item in paths.split(":"):
            if not item:
                continue
            item = item.replace("${ORIGIN}", origin).replace("$ORIGIN", origin)
            out.append(os.path.normpath(item))
        return out

    def find(self, name: str, path: str, info: Dict[str, Any]) -> Optional[str]:
        """The file the loader opens for DT_NEEDED ``name`` of ``path`` (None: not found)."""
        if "/" in name:
            return name if os.path.exists(name) else None
        origin = os.path.dirname(os.path.abspath(path))  # the path it is loaded by (pip writes no links)
        dirs: List[str] = []
        if not info.get("runpath"):
            dirs += self.expand(info.get("rpath") or "", origin)
        dirs += self.ld_library_path
        dirs += self.expand(info.get("runpath") or "", origin)
        for directory in dirs:
            if "$" in directory:
                continue  # $LIB / $PLATFORM: not expanded here
            if self.has(directory, name):
                return os.path.join(directory, name)
        cached = self.ld_cache().get(name)
        if cached:
            return cached
        for directory in DEFAULT_DIRS:
            if self.has(directory, name):
                return os.path.join(directory, name)
        return None


class Definitions:
    """defined_versions of files, through the scan cache (keyed on each file's version)."""

    def __init__(self, cache, file_key) -> None:
        self.cache = cache
        self.file_key = file_key
        self.known: Dict[str, Dict[str, Any]] = {}

    def of(self, path: str) -> Dict[str, Any]:
        found = self.known.get(path)
        if found is not None:
            return found
        key = self.file_key(path)
        found = self.cache.get(DEFS_KIND, path, key) if key is not None else None
        if not (isinstance(found, dict) and isinstance(found.get("status"), str) and isinstance(found.get("defined", []), list)):
            found = defined_versions(path)
            if key is not None and found.get("status") != "no_permission":
                self.cache.put(DEFS_KIND, path, key, found)
        self.known[path] = found
        return found


def missing_versions(needed: Dict[str, List[str]], candidates: Dict[str, List[str]], definitions: Definitions) -> List[Dict[str, Any]]:
    """Each library whose required versions the file the loader will use does not define.

    ``candidates``: library -> the files the loader may use for it, the one it will use first
    (what ``import torch`` already loaded, else its search). Only when every readable candidate
    lacks a version is it reported — the loader's choice can hang on what is loaded before (a
    conda interpreter's own libstdc++), and a false "will not load" is worse than a miss."""
    out: List[Dict[str, Any]] = []
    for library, versions in sorted(needed.items()):
        paths = [p for p in candidates.get(library) or [] if p]
        facts = [(p, definitions.of(p)) for p in dict.fromkeys(paths)]
        readable = [(p, f) for p, f in facts if f.get("status") == "ok"]
        if not readable:
            continue
        if any(f.get("versioned") is False for _, f in readable):
            continue
        lacking = [v for v in versions if all(v not in (f.get("defined") or []) for _, f in readable)]
        if not lacking:
            continue
        path, first = readable[0]
        entry: Dict[str, Any] = {"library": library, "path": path, "missing": lacking[:SHOWN], "missing_count": len(lacking)}
        latest = newest(first.get("defined") or [], lacking[0])
        if latest:
            entry["newest"] = latest
        out.append(entry)
    return out


def interpreter_dirs(executable: str, dynamic_info) -> List[str]:
    """The directories of the interpreter binary's DT_RPATH / DT_RUNPATH (``$ORIGIN`` expanded): a
    conda ``python`` finds its environment's ``lib/libstdc++.so.6`` there, before the system's."""
    try:
        real = os.path.realpath(executable)
    except (OSError, ValueError):
        return []
    info = dynamic_info(real)
    origin = os.path.dirname(real)
    out = []
    for item in ":".join(str(info.get(k) or "") for k in ("rpath", "runpath")).split(":"):
        if item and "$" not in item.replace("${ORIGIN}", "").replace("$ORIGIN", ""):
            out.append(os.path.normpath(item.replace("${ORIGIN}", origin).replace("$ORIGIN", origin)))
    return out


def candidates(needed: Dict[str, List[str]], loaded: Dict[str, str], find, extra_dirs: List[str], has) -> Dict[str, List[str]]:
    """library -> the files the loader may use for it: the one ``import torch`` loaded (the loader
    reuses a loaded soname), the one its own search finds (``find``), one in ``extra_dirs``."""
    out: Dict[str, List[str]] = {}
    for library in needed:
        found = [loaded.get(library), find(library)] + [os.path.join(d, library) for d in extra_dirs if has(d, library)]
        out[library] = [p for p in found if p]
    return out
