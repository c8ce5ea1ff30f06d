"""Every shared object on the path that links torch, checked against the torch installed beside it.

Standard library only and Python 3.8-compatible: python_stack_collect.collect_plain calls ``collect`` in the
doctor's process or inside the interpreter named by ``--python`` (python_stack's bootstrap serves it as ``gpudoctor.probes.torch_links``).

What the dynamic loader will do when such an extension is imported after ``import torch``, read
from the files without loading them (System V gABI, "Dynamic Section"; glibc's ld.so(8) search
order; the GNU hash table as glibc's ``dl-lookup.c`` walks it):
- each ``DT_NEEDED`` library resolves: already loaded by torch (torch's own libraries and what
  they load through their RPATH, e.g. the ``nvidia-*`` wheels' ``libcudart.so.13``), else through
  the extension's ``DT_RPATH`` (when it has no ``DT_RUNPATH``), ``LD_LIBRARY_PATH``,
  ``DT_RUNPATH`` (``$ORIGIN`` expanded), the loader cache (``/etc/ld.so.cache``) and the default
  directories. An extension that wants ``libcudart.so.12`` where only ``.so.13`` exists fails with
  "libcudart.so.12: cannot open shared object file";
- each undefined symbol in torch's namespaces (``c10::``, ``at::``, ``torch::``, ``caffe2::``) is
  defined by one of torch's libraries (``torch/lib/*.so``: libc10, libtorch_cpu, libtorch_cuda,
  libtorch_python, …), looked up in their ``.gnu.hash`` tables. One that is not is the
  "undefined symbol: _ZN3c10…" of an extension built for another torch or C++ ABI
  (pytorch/pytorch#143962, Dao-AILab/flash-attention#1832).

Read: the ELF header, section headers, ``.dynamic``, ``.dynstr``, ``.dynsym`` and ``.gnu.hash``
(``.hash`` where there is none); nothing else of a file. The per-file facts (kind ``links-1``:
needed, RPATH, RUNPATH, soname) and each extension's symbol check (kind ``torch-symbols-1``,
valid while neither it nor any torch library changed) live in the persistent scan cache
(probes/scancache.py), so a warm check costs a ``stat`` per file and reads no symbol table.

Fact: ``torch.extensions`` — one entry per shared object outside torch that names a torch library
in ``DT_NEEDED``: path, dist, package, needed, unresolved libraries, the symbol check.
"""

import mmap
import os
import re
import struct
import sys
import zlib
from typing import Any, Dict, Iterable, List, Optional, Set, Tuple

from gpudoctor.probes import coldstart as _coldstart
from gpudoctor.probes import dynamic_loader as _versions
from gpudoctor.probes import python_stack_read as _stack_read
from gpudoctor.probes import scancache as _scancache
Loader = _versions.Loader

BUSIEST = ("libtorch_cpu.so", "libc10.so", "libtorch_python.so", "libtorch_cuda.so", "libc10_cuda.so")
LINKS_KIND = "links-1"
SYMBOLS_KIND = "torch-symbols-2"  # 2: with the symbol versions it needs
MAX_DYNSTR = 64 << 20
MAX_EXTENSIONS = 400  # torch-linked shared objects checked (a big image has ~60)
MAX_SHOWN = 5  # missing symbols / libraries kept per extension
MAX_TORCH_CLOSURE = 400  # libraries followed from torch's own to find what `import torch` loads
TORCH_PREFIXES = ("libc10", "libtorch", "libshm", "libcaffe2")  # torch/lib's own: libc10.so, libtorch_cuda.so, libshm.so
# c10::, at::, torch::, caffe2:: after _Z, an optional special-name prefix (vtable, typeinfo, …),
# N (nested) and cv/ref qualifiers (Itanium C++ ABI, "Mangling").
TORCH_SYMBOL = rb"^_Z(?:T[VIST]|Th|Tv)?N?[rVKRO]*(?:3c10|2at|5torch|6caffe2)[0-9_A-Za-z]"
SYSTEM_DIRS = ("/lib/", "/lib64/", "/usr/lib/", "/usr/lib64/", "/usr/local/lib/")
STB_WEAK = 2
# A first run reads this many files' dynamic sections or more: they are read in threads, whose
# waits for the disk overlap (one after the other, an H200 host's ~860 files cost ~0.2 s after the scan).
PARALLEL_FROM = 32


dynamic_info = _versions.dynamic_info  # read here since torch_links was its first home (tests/realinstall.py uses it)


def torch_library(name: str) -> bool:
    """One of torch's own libraries (torch/lib of a CPU, CUDA or ROCm wheel): libc10.so, libtorch_cuda.so, libshm.so.
    Not every name that starts with libtorch: libtorchcodec_core4.so and libtorchaudio.so are other projects'.
    String tests, not a regex: this runs for every file of a warm check."""
    if not name.endswith(".so"):
        return False
    stem = name[:-3]
    return (stem in ("libc10", "libtorch", "libshm", "libcaffe2_nvrtc") or stem.startswith(("libc10_", "libtorch_cpu", "libtorch_cuda",
            "libtorch_hip", "libtorch_xpu", "libtorch_python", "libtorch_global_deps", "libtorch_nvshmem")))


def versioned(path: str) -> bool:
    """libcublas.so.13, libnccl.so.2.21.5: a system-style library, not a Python extension."""
    head, sep, tail = path.rpartition(".so.")
    return bool(sep) and "/" not in tail and tail.replace(".", "").isdigit()


def stem(name: str) -> str:
    """libcudart.so.13 -> libcudart; libtorch_cuda.so -> libtorch_cuda."""
    return name.split(".so", 1)[0]


def links_torch(info: Dict[str, Any]) -> bool:
    return any(torch_library(name) for name in info.get("needed") or [])


def _torch_symbol():
    return re.compile(TORCH_SYMBOL)  # re caches it; compiled only on a cold path


def undefined_torch_symbols(path: str, sections: Optional[Dict[bytes, bytes]] = None) -> List[Tuple[str, bool]]:
    """(name, weak) of each undefined dynamic symbol in torch's namespaces. OSError / ElfError."""
    if sections is None:
        sections = _stack_read.elf_module().sections(path, (b".dynsym", b".dynstr"), MAX_DYNSTR)
    dynsym, dynstr = sections.get(b".dynsym", b""), sections.get(b".dynstr", b"")
    out: List[Tuple[str, bool]] = []
    for st_name, info, _other, shndx, _value, _size in struct.iter_unpack("<IBBHQQ", dynsym[:len(dynsym) // 24 * 24]):
        if shndx != 0 or st_name == 0 or st_name >= len(dynstr) or dynstr[st_name:st_name + 2] != b"_Z":
            continue
        end = dynstr.find(b"\0", st_name)
        name = dynstr[st_name:end if end >= 0 else None]
        if _torch_symbol().match(name):
            out.append((name.decode("ascii", "replace"), info >> 4 == STB_WEAK))
    return out


def gnu_hash(name: bytes) -> int:
    """The GNU hash of a symbol name (glibc's dl_new_hash: h = h * 33 + c, from 5381)."""
    h = 5381
    for byte in name:
        h = (h * 33 + byte) & 0xFFFFFFFF
    return h


class Exports:
    """What one of torch's libraries defines, looked up by name in its hash table (not read whole:
    libtorch_cpu.so's .dynstr is tens of megabytes). Mapped read-only; pages touched on lookup."""

    def __init__(self, path: str) -> None:
        elf = _stack_read.elf_module()
        self.path = path
        handle, reader = elf.open_elf(path)
        try:
            self.map = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
            self.dynsym = reader.find(b".dynsym")
            self.dynstr = reader.find(b".dynstr")
            self.gnu = reader.find(b".gnu.hash")
            self.sysv = reader.find(b".hash")
        finally:
            handle.close()
        if self.dynsym is None or self.dynstr is None or self.dynsym.nobits or self.dynstr.nobits:
            raise elf.ElfError("no dynamic symbol table")
        for section in (self.gnu, self.sysv, self.dynsym, self.dynstr):
            _will_need(self.map, section)
        self.names: Optional[Set[bytes]] = None
        if self.gnu is not None and not self.gnu.nobits:
            nbuckets, self.symoffset, bloom_size, _ = struct.unpack_from("<IIII", self.map, self.gnu.offset)
            self.nbuckets = nbuckets
            self.buckets = self.gnu.offset + 16 + bloom_size * 8
            self.chain = self.buckets + nbuckets * 4
        elif self.sysv is not None and not self.sysv.nobits:
            self.gnu = None
        else:
            self.names = self._all_names()

    def close(self) -> None:
        self.map.close()

    def _symbol(self, index: int) -> Tuple[bytes, int]:
        st_name, _info, _other, shndx = struct.unpack_from("<IBBH", self.map, self.dynsym.offset + index * 24)
        start = self.dynstr.offset + st_name
        end = self.map.find(b"\0", start, self.dynstr.offset + self.dynstr.size)
        return self.map[start:end], shndx

    def _all_names(self) -> Set[bytes]:
        count = self.dynsym.size // 24
        return {name for name, shndx in (self._symbol(i) for i in range(1, count)) if shndx != 0}

    def defines(self, name: bytes, h: int) -> bool:
        """Whether this library defines ``name`` (``h``: its GNU hash, computed once for every library)."""
        if self.names is not None:
            return name in self.names
        if self.gnu is None:
            return self._sysv_defines(name)
        (index,) = struct.unpack_from("<I", self.map, self.buckets + (h % self.nbuckets) * 4)
        if index < self.symoffset:
            return False
        while True:
            (h2,) = struct.unpack_from("<I", self.map, self.chain + (index - self.symoffset) * 4)
            if (h | 1) == (h2 | 1):
                found, shndx = self._symbol(index)
                if found == name:
                    return shndx != 0
            if h2 & 1:
                return False
            index += 1

    def _sysv_defines(self, name: bytes) -> bool:
        assert self.sysv is not None
        nbucket, _nchain = struct.unpack_from("<II", self.map, self.sysv.offset)
        h = 0
        for byte in name:
            h = ((h << 4) + byte) & 0xFFFFFFFF
            g = h & 0xF0000000
            if g:
                h ^= g >> 24
            h &= ~g & 0xFFFFFFFF
        (index,) = struct.unpack_from("<I", self.map, self.sysv.offset + 8 + (h % nbucket) * 4)
        seen = 0
        while index and seen < 1 << 22:
            found, shndx = self._symbol(index)
            if found == name:
                return shndx != 0
            (index,) = struct.unpack_from("<I", self.map, self.sysv.offset + 8 + nbucket * 4 + index * 4)
            seen += 1
        return False


def _will_need(mapped: "mmap.mmap", section: Any) -> None:
    """Ask the kernel to read a section's pages now, without waiting for them: the lookups of a first
    run then find them on their way instead of waiting for the disk at each page they touch
    (madvise(2) MADV_WILLNEED)."""
    advise = getattr(mapped, "madvise", None)  # Python 3.8+
    if advise is None or section is None or section.nobits or not hasattr(mmap, "MADV_WILLNEED"):
        return
    start = section.offset - section.offset % mmap.PAGESIZE
    try:
        advise(mmap.MADV_WILLNEED, start, min(section.offset + section.size, len(mapped)) - start)
    except (OSError, ValueError):
        pass


def _hint_symbol_tables(path: str) -> None:
    """posix_fadvise(WILLNEED) on an extension's .dynsym, .dynstr and .gnu.version_r (its section
    table is in memory after the kernel scan): check_symbols reads them soon, here read ahead."""
    advise = getattr(os, "posix_fadvise", None)
    if advise is None:
        return
    try:
        handle, reader = _stack_read.elf_module().open_elf(path)
    except (OSError, ValueError):
        return
    try:
        for name in (b".dynsym", b".dynstr", b".gnu.version_r"):
            section = reader.find(name)
            if section is not None and not section.nobits:
                advise(handle.fileno(), section.offset, min(section.size, MAX_DYNSTR), os.POSIX_FADV_WILLNEED)
    except (OSError, ValueError, struct.error):
        pass
    finally:
        handle.close()


class _Files:
    """dynamic_info of files, through the scan cache."""

    def __init__(self, cache) -> None:
        self.cache = cache
        self.read = 0
        self.cached = 0
        self.ready: Dict[str, Dict[str, Any]] = {}  # read ahead in threads (``prefetch``)
        self.looked_up: Dict[Tuple[str, bool], Tuple[Any, Dict[str, Any]]] = {}  # prefetch's lookups, for info()

    def _cached(self, path: str, key: Any, compact: bool) -> Optional[Dict[str, Any]]:
        known = self.looked_up.get((path, compact))
        if known is not None and known[0] == key:
            return known[1]
        found = self.cache.get(LINKS_KIND, path, key)
        if isinstance(found, dict) and isinstance(found.get("needed", []), list) and isinstance(found.get("status"), str) \
                and (compact or "needed" in found or found.get("status") != "ok"):
            self.looked_up[(path, compact)] = (key, found)
            return found
        return None

    def prefetch(self, wanted: List[Tuple[str, Any, bool]]) -> None:
        """Read the dynamic sections of the files (path, key, compact) the cache does not have, in
        threads, when there are PARALLEL_FROM of them or more (a first run)."""
        todo = [path for path, key, compact in wanted if key is not None and self._cached(path, key, compact) is None]
        if len(todo) >= PARALLEL_FROM:
            self.ready = _coldstart.each_in_threads(_versions.dynamic_info_safe, todo)

    def info(self, path: str, key: Any = None, compact: bool = False) -> Dict[str, Any]:
        """``compact``: a file that links no torch is kept as {"status": "ok"} alone (most of them:
        the cache file stays small, and loading it is part of every warm check)."""
        if key is None:
            key = _scancache.file_key(path)
        found = self._cached(path, key, compact)
        if found is not None:
            self.cached += 1
            return found
        info = self.ready.pop(path, None) or dynamic_info(path)
        self.read += 1
        if info.get("status") != "no_permission":
            kept = {"status": "ok"} if compact and info.get("status") == "ok" and not links_torch(info) else info
            self.cache.put(LINKS_KIND, path, key, kept)
        return info


def torch_loaded(torch_lib: str, files: _Files, loader: Loader) -> Tuple[Dict[str, str], List[str]]:
    """(soname -> path of every library ``import torch`` loads, torch's libraries) followed from
    torch/lib's shared objects through their own RPATHs (the nvidia-* wheels' directories)."""
    try:
        own = sorted(os.path.join(torch_lib, n) for n in os.listdir(torch_lib) if torch_library(n) or n.endswith(".so"))
    except OSError:
        return {}, []
    own = [p for p in own if os.path.isfile(p)]
    loaded: Dict[str, str] = {}
    todo = list(own)
    seen: Set[str] = set()
    while todo and len(seen) < MAX_TORCH_CLOSURE:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        info = files.info(path)
        loaded.setdefault(os.path.basename(path), path)
        if info.get("soname"):
            loaded.setdefault(str(info["soname"]), path)
        for name in info.get("needed") or []:
            if name in loaded:
                continue
            found = loader.find(name, path, info)
            if found:
                loaded[name] = found
                todo.append(found)
    return loaded, own


def torch_digest(libraries: Iterable[str]) -> int:
    """One number for the versions of torch's libraries (a symbol check stays valid while it holds)."""
    keys = [[os.path.basename(p)] + (_scancache.file_key(p) or [0]) for p in sorted(libraries)]
    return zlib.crc32(repr(keys).encode())


def check_symbols(path: str, exports: List[Exports]) -> Dict[str, Any]:
    """The undefined torch symbols of ``path`` that no torch library defines, and the symbol versions
    it needs of each library (checked against the libraries on every run: they are not torch's)."""
    try:
        sections = _stack_read.elf_module().sections(path, (b".dynsym", b".dynstr", b".gnu.version_r"), MAX_DYNSTR)
        undefined = undefined_torch_symbols(path, sections)
    except OSError as exc:
        return {"status": _stack_read.os_error_status(exc), "detail": _stack_read.describe_os_error(exc)}
    except ValueError as exc:  # ElfError
        return {"status": "error", "detail": str(exc)[:200]}
    missing = []
    for name, weak in undefined:
        if weak:
            continue
        raw = name.encode("ascii", "replace")
        h = gnu_hash(raw)
        if not any(e.defines(raw, h) for e in exports):
            missing.append(name)
    out: Dict[str, Any] = {"status": "ok", "checked": len(undefined), "missing_count": len(missing), "missing": missing[:MAX_SHOWN]}
    versions = _versions.needed_from_sections(sections)
    if versions:
        out["versions_needed"] = versions
    if any("__cxx11" in name for name, _ in undefined):
        out["cxx11_abi"] = True
    elif any(re.search(r"Ss|NSs|Sb", name) for name, _ in undefined):
        out["cxx11_abi"] = False  # std::string as Ss: built with _GLIBCXX_USE_CXX11_ABI=0
    return out


def _torch_requirement(dist: Optional[Dict[str, Any]]) -> Optional[List[str]]:
    """The distribution's Requires-Dist lines on torch (read from METADATA when the scan skipped them)."""
    if not isinstance(dist, dict):
        return None
    requires = dist.get("requires") or []
    if not requires and dist.get("location") and str(dist.get("meta", "")).endswith(".dist-info"):
        try:
            text = _stack_read.read_head(os.path.join(dist["location"], dist["meta"], "METADATA")).decode("utf-8", "replace")
            requires = _stack_read.parse_headers(text, ("requires-dist",)).get("requires-dist", [])
        except OSError:
            return None
    return [r for r in requires if re.match(r"^torch(?![\w.-])", r.strip(), re.I)]


def collect(items: List[Dict[str, Any]], torch_dir: Optional[str], dists: Dict[str, Dict[str, Any]], cache,
            environ: Optional[Dict[str, str]] = None) -> Dict[str, Dict[str, Any]]:
    """``torch.extensions``: ``items`` are the kernel scan's shared objects (path, dist, package)."""
    import time

    started = time.perf_counter()
    if not torch_dir:
        return {"torch.extensions": _stack_read.fact(None, "absent", "ELF", "torch is not installed")}
    torch_dir = os.path.normpath(torch_dir)
    torch_lib = os.path.join(torch_dir, "lib")
    files = _Files(cache)
    loader = Loader(dict(os.environ) if environ is None else environ)
    _read_ahead(items, torch_dir, torch_lib, files, cache)
    loaded, own = torch_loaded(torch_lib, files, loader)
    if not own:
        return {"torch.extensions": _stack_read.fact(None, "error", torch_lib, "no shared objects in torch/lib")}
    digest = torch_digest(own)
    families = {stem(name) for name in loaded}
    requirements: Dict[str, Optional[List[str]]] = {}
    definitions = _versions.Definitions(cache, _scancache.file_key)
    interpreter: Optional[List[str]] = None
    exports: Optional[List[Exports]] = None
    unreadable: List[str] = []
    found: List[Dict[str, Any]] = []
    notes: List[str] = []
    symbols_read = 0
    try:
        for item in items:
            path = str(item.get("path"))
            if path.startswith(torch_dir + os.sep):
                continue  # torch's own libraries and _C: what the others are checked against
            if versioned(path):
                continue  # libcublas.so.13, libnccl.so.2: system-style libraries (the nvidia-* wheels), not torch extensions
            key = item.get("key") if isinstance(item.get("key"), list) else _scancache.file_key(path)
            if key is None:
                continue
            info = files.info(path, key, compact=True)
            if info.get("status") != "ok" or not links_torch(info):
                continue
            if len(found) >= MAX_EXTENSIONS:
                notes.append(f"checked the first {MAX_EXTENSIONS} torch-linked shared objects")
                break
            entry: Dict[str, Any] = {"path": path, "dist": item.get("dist"), "package": item.get("package"),
                                     "needed": info.get("needed") or []}
            resolved = {n: loaded.get(n) or loader.find(n, path, info) for n in entry["needed"]}
            # Only a library of the torch stack counts: torch's own, or one of a family torch loads
            # (libcudart.so.12 where torch loads libcudart.so.13). Others may be optional by design:
            # torchcodec ships one core library per FFmpeg major and loads the one whose FFmpeg exists.
            unresolved = [n for n, found_at in resolved.items() if found_at is None and (torch_library(n) or stem(n) in families)]
            if unresolved:
                entry["unresolved"] = unresolved[:MAX_SHOWN]
                entry["searched"] = {k: info[k] for k in ("rpath", "runpath") if info.get(k)}
            # Its own libraries beside it (not torch's, not the system's) may define torch-namespace
            # symbols too (a bundled helper library): the loader finds them there, so does the check.
            own_libs = sorted(p for n, p in resolved.items() if p and n not in loaded and not p.startswith(SYSTEM_DIRS))
            ext_digest = digest if not own_libs else zlib.crc32(repr((digest, torch_digest(own_libs))).encode())
            symbols = cache.get(SYMBOLS_KIND, path, key)
            if not (isinstance(symbols, dict) and symbols.get("torch") == ext_digest and isinstance(symbols.get("status"), str)):
                if exports is None:
                    # the libraries that define most of what extensions use first: a found symbol stops the search
                    exports, unreadable = _open_exports(sorted(own, key=lambda p: (os.path.basename(p) not in BUSIEST, p)))
                if unreadable:  # a symbol it defines would look missing: no verdict, and nothing cached
                    symbols = {"status": "error", "detail": "torch's libraries are unreadable: " + "; ".join(unreadable[:3])}
                else:
                    beside, _ = _open_exports(own_libs)
                    try:
                        symbols = dict(check_symbols(path, exports + beside), torch=ext_digest)
                    finally:
                        for table in beside:
                            table.close()
                    symbols_read += 1
                    if symbols.get("status") != "no_permission":
                        cache.put(SYMBOLS_KIND, path, key, symbols)
            entry["symbols"] = {k: v for k, v in symbols.items() if k not in ("torch", "versions_needed")}
            needs = symbols.get("versions_needed")
            if isinstance(needs, dict) and needs:
                if interpreter is None:
                    interpreter = _versions.interpreter_dirs(sys.executable, files.info)
                where = _versions.candidates(needs, loaded, lambda n: loader.find(n, path, info), interpreter, loader.has)
                lacking = _versions.missing_versions(needs, where, definitions)
                if lacking:
                    entry["versions_missing"] = lacking
            if unresolved or symbols.get("missing_count") or entry.get("versions_missing"):
                dist = dists.get(str(item.get("dist"))) if item.get("dist") else None
                if isinstance(dist, dict):
                    entry["version"] = dist.get("version")
                    name = str(item.get("dist"))
                    if name not in requirements:  # METADATA read once per distribution
                        requirements[name] = _torch_requirement(dist)
                    entry["requires_torch"] = requirements[name]
            found.append(entry)
    finally:
        for table in exports or []:
            table.close()
    stats = {"files_read": files.read, "files_cached": files.cached, "symbol_checks_read": symbols_read,
             "torch_libraries": [os.path.basename(p) for p in own], "elapsed_s": round(time.perf_counter() - started, 4)}
    broken = sum(1 for e in found if e.get("unresolved") or e.get("versions_missing") or (e.get("symbols") or {}).get("missing_count"))
    detail = f"{len(found)} torch-linked shared objects, {broken} with unresolved libraries, symbols or symbol versions"
    return {"torch.extensions": _stack_read.fact({"extensions": found, "stats": stats, "torch_loads": sorted(loaded)[:300]},
                                     source="ELF (.dynamic, .dynsym, .gnu.hash)", detail="; ".join([detail] + notes))}


def _read_ahead(items: List[Dict[str, Any]], torch_dir: str, torch_lib: str, files: _Files, cache) -> None:
    """A first run: what ``collect`` will read, read (or asked of the disk) ahead, so its reads wait
    together instead of one after the other: the dynamic sections of torch's libraries and of every
    other shared object but the versioned ones, in threads; then the symbol tables of the
    extensions among them that link torch."""
    wanted: List[Tuple[str, Any, bool]] = []
    for item in items:
        path = str(item.get("path"))
        own = path.startswith(torch_lib + os.sep)
        if versioned(path) or (path.startswith(torch_dir + os.sep) and not own):
            continue
        key = item.get("key") if isinstance(item.get("key"), list) else _scancache.file_key(path)
        wanted.append((path, key, not own))
    files.prefetch(wanted)
    for path, info in list(files.ready.items()):
        if not path.startswith(torch_dir + os.sep) and info.get("status") == "ok" and links_torch(info):
            _hint_symbol_tables(path)


def _open_exports(libraries: List[str]) -> Tuple[List[Exports], List[str]]:
    """The export tables of torch's libraries, and why any of them cannot be read."""
    out, unreadable = [], []
    for path in libraries:
        try:
            out.append(Exports(path))
        except (OSError, ValueError, struct.error) as exc:
            if torch_library(os.path.basename(path)):  # torch's own; another library there defines no torch symbol
                unreadable.append(f"{os.path.basename(path)}: {exc}"[:200])
    return out, unreadable
