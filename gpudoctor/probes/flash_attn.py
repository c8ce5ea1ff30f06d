"""flash-attn inventory, read from package metadata and files (never imported).

Standard library only and Python 3.8-compatible: like python_stack_read.py this runs in the doctor's
process or inside the interpreter named by ``--python`` (python_stack's bootstrap serves it as ``gpudoctor.probes.flash_attn``).
python_stack_collect.collect_plain calls ``collect_plain(ctx)`` with what it has
already read (the search path, the first install of each distribution, editable mappings,
the torch facts), so nothing is scanned twice.

The variants (https://github.com/Dao-AILab/flash-attention#installation-and-features):
- FA2: distribution ``flash-attn``, package ``flash_attn``, top-level extension
  ``flash_attn_2_cuda.*.so``; wheel local version ``+cu12torch2.7cxx11abiTRUE`` (§3.5).
- FA3: distribution ``flash_attn_3`` (from ``hopper/``; not on PyPI), module
  ``flash_attn_interface``, extension ``flash_attn_3._C`` (earlier ``flash_attn_3_cuda``).
  FA3 betas built under FA2's name (``flash-attn`` 3.x) replace FA2 (flash-attention#1459).
- FA4: distribution ``flash-attn-4`` (briefly ``fa4``), pure Python, only
  ``flash_attn/cute/``; its ``__version__`` is unreliable (§3.3 #6), the dist version is used.
- vLLM's bundled build: ``vllm/vllm_flash_attn`` with ``_vllm_fa2_C``, ``_vllm_fa3_C``, ``cute/``.

Facts (plain dicts, as python_stack_read's):
- ``flash_attn.variants``: each installed variant: dist, version, parsed local tag, RECORD
  size, top-level names it writes, its extensions with their ELF facts (NEEDED libraries,
  C++ ABI, c10 symbols the installed torch does not export).
- ``flash_attn.namespace``: the ``flash_attn`` import package as Python resolves it: which
  directories, ``__init__.py`` (and the ``extend_path`` co-existence fix), ``ops``, ``cute``,
  and which distributions own which part (RECORD).
- ``flash_attn.clashes``: files that two distributions' RECORDs both claim, and whose
  content is on the disk now (RECORD hashes compared with the files).
- ``flash_attn.dependents``: code that needs ``flash_attn.ops`` when ``flash_attn`` merely
  exists (vLLM's rotary embedding import guarded by ``find_spec("flash_attn")``, §3.3 #5).
- ``flash_attn.vllm_builds``: the FA builds in vLLM's ``vllm_flash_attn``.
- ``flash_attn.build_env``: what a flash-attn source build would find (ninja).
"""

from __future__ import annotations

import ast
import os
import re
import struct
import sys
from typing import Any, Dict, Iterable, List, Optional, Set, Tuple

from gpudoctor.probes import extra_gates as _extra_gates
from gpudoctor.probes import python_stack_read as _stack_read

# Normalized distribution name -> variant.
VARIANTS = (
    ("flash-attn", "fa2"),
    ("flash-attn-3", "fa3"),
    ("flashattn-hopper", "fa3"),
    ("flash-attn-4", "fa4"),
    ("fa4", "fa4"),
    ("vllm-flash-attn", "vllm-fa"),
)
_LOCAL_TAG = re.compile(r"^(?:cu(?P<cuda>\d+)|rocm(?P<rocm>\d+))torch(?P<torch>\d+\.\d+)cxx11abi(?P<abi>TRUE|FALSE)$", re.I)
# Symbols of these c10 namespaces are defined in torch/lib/libc10.so or libc10_cuda.so (torch's
# c10/ and c10/cuda/ directories build those two libraries); other c10 namespaces (the
# dispatcher) live in libtorch_cpu.so, which is too large to read on every run.
C10_PREFIXES = (
    b"_ZN3c104cuda",  # c10::cuda (libc10_cuda.so), e.g. SetDevice
    b"_ZN3c105Error",  # c10::Error
    b"_ZN3c106detail14torchCheckFail",
    b"_ZN3c106detail23torchInternalAssertFail",
    b"_ZN3c104impl3cow",  # c10::impl::cow (_ZN3c104impl3cow11cow_deleterEPv)
    b"_ZN3c1010TensorImpl",
    b"_ZN3c107Warning",
)
MAX_RECORD = 8 << 20
MAX_HASHED_FILES = 400
MAX_HASHED_BYTES = 64 << 20
MAX_DYN = 64 << 20
SHOWN = 8

fact = _stack_read.fact
normalize = _stack_read.normalize


# The facts this module owns (python_stack_read marks them error if collect_plain raises).
FACT_KEYS = _extra_gates.fact_keys("flash_attn")


def parse_local_tag(version: Optional[str]) -> Optional[Dict[str, Any]]:
    """``2.8.3+cu12torch2.7cxx11abiTRUE`` -> {cuda: "12", torch: "2.7", cxx11abi: True, ...}."""
    if not version or "+" not in str(version):
        return None
    local = str(version).split("+", 1)[1]
    match = _LOCAL_TAG.match(local)
    if not match:
        return {"raw": local}
    cuda = match.group("cuda")
    out: Dict[str, Any] = {"raw": local, "torch": match.group("torch"), "cxx11abi": match.group("abi").upper() == "TRUE"}
    if cuda:
        out["cuda"] = cuda if len(cuda) <= 2 else f"{cuda[:-1]}.{cuda[-1]}"  # cu12 -> 12, cu118 -> 11.8
        out["cuda_major"] = int(cuda[:2]) if len(cuda) >= 3 else int(cuda)
    if match.group("rocm"):
        out["rocm"] = match.group("rocm")
    return out


# --- RECORD ------------------------------------------------------------------------------
def read_record(location: str, meta: str) -> Optional[List[Tuple[str, str]]]:
    """(relative path, hash) of every file a RECORD lists (outside the dist-info); None without RECORD."""
    if not meta.endswith(".dist-info"):
        return None
    try:
        with open(os.path.join(location, meta, "RECORD"), "rb") as handle:
            text = handle.read(MAX_RECORD).decode("utf-8", "replace")
    except OSError:
        return None
    rows: List[Tuple[str, str]] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        if line.startswith('"'):
            import csv

            row = next(csv.reader([line]), None) or [""]
            path, digest = row[0], (row[1] if len(row) > 1 else "")
        else:
            parts = line.split(",")
            path, digest = parts[0], (parts[1] if len(parts) > 1 else "")
        path = path.replace("\\", "/")
        if not path or path.startswith("../") or path.startswith("/") or path.startswith(meta + "/"):
            continue
        if "__pycache__/" in path or path.endswith(".dist-info/RECORD"):
            continue
        rows.append((path, digest))
    return rows


def _file_digest(path: str) -> Optional[str]:
    import hashlib  # only when two distributions share files (a cold import costs ms in the --python child)

    digest = hashlib.sha256()
    try:
        with open(path, "rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
    except OSError:
        return None
    import base64

    return "sha256=" + base64.urlsafe_b64encode(digest.digest()).rstrip(b"=").decode("ascii")


def _top_names(paths: Iterable[str]) -> List[str]:
    names = []
    for path in paths:
        first = path.split("/", 1)[0]
        if first.endswith(".dist-info") or first.endswith(".data"):
            continue
        module = first.split(".", 1)[0] if "/" not in path else first
        if module and module not in names:
            names.append(module)
    return sorted(names)


# --- ELF (64-bit little-endian; headers and the dynamic sections only) ---------------------
def elf_sections(path: str, names: Tuple[bytes, ...], limit: int = MAX_DYN) -> Dict[bytes, bytes]:
    """The named sections of an ELF file (absent and SHT_NOBITS ones left out); ValueError for non-ELF files.

    The one ELF reader, probes/elf.py (python_stack_read.elf_module finds it in either process). The
    .dynamic/.dynsym parsing below is for ELF64 layouts, so 32-bit files are refused here."""
    handle, elf = _stack_read.elf_module().open_elf(path)
    try:
        if not elf.is64:
            raise ValueError("not a 64-bit little-endian ELF file")
        out: Dict[bytes, bytes] = {}
        for name in names:
            data = elf.data(name, limit)
            if data is not None and name not in out:
                out[name] = data
        return out
    finally:
        handle.close()


def _cstr(table: bytes, offset: int) -> bytes:
    end = table.find(b"\0", offset)
    return table[offset:end if end >= 0 else None]


def elf_dynamic(path: str) -> Dict[str, Any]:
    """NEEDED libraries, RUNPATH and undefined symbols of interest of one shared object."""
    sections = elf_sections(path, (b".dynamic", b".dynstr", b".dynsym"))
    dynstr = sections.get(b".dynstr", b"")
    needed: List[str] = []
    runpath: List[str] = []
    dynamic = sections.get(b".dynamic", b"")
    for tag, value in struct.iter_unpack("<qQ", dynamic[: len(dynamic) // 16 * 16]):
        if tag == 0:
            break
        if tag == 1:  # DT_NEEDED
            needed.append(_cstr(dynstr, value).decode("utf-8", "replace"))
        elif tag in (15, 29):  # DT_RPATH, DT_RUNPATH
            runpath.append(_cstr(dynstr, value).decode("utf-8", "replace"))
    c10: List[str] = []
    cxx11 = False
    any_cpp = False
    dynsym = sections.get(b".dynsym", b"")
    for st_name, _info, _other, shndx, _value, _size in struct.iter_unpack("<IBBHQQ", dynsym[: len(dynsym) // 24 * 24]):
        if shndx != 0 or st_name == 0:
            continue  # defined here, or the null symbol
        name = _cstr(dynstr, st_name)
        if name.startswith(b"_Z"):
            any_cpp = True
            if b"__cxx11" in name:
                cxx11 = True
            if name.startswith(C10_PREFIXES):
                c10.append(name.decode("ascii", "replace"))
    return {"needed": needed, "runpath": runpath, "c10_undefined": c10,
            "cxx11_abi": True if cxx11 else (False if c10 else None) if any_cpp else None}


def _c10_exports(torch_dir: Optional[str]) -> Optional[Set[bytes]]:
    """The c10 symbol names torch's libc10.so and libc10_cuda.so carry (None if unreadable)."""
    if not torch_dir:
        return None
    names: Set[bytes] = set()
    found = False
    for lib in ("libc10.so", "libc10_cuda.so"):
        try:
            dynstr = elf_sections(os.path.join(torch_dir, "lib", lib), (b".dynstr",)).get(b".dynstr")
        except (OSError, ValueError):
            continue
        if dynstr is None:
            continue
        found = True
        names.update(n for n in dynstr.split(b"\0") if n.startswith(b"_ZN3c10"))
    return names if found else None


def cudart_major(needed: Iterable[str]) -> Optional[int]:
    for lib in needed:
        match = re.match(r"^libcudart\.so\.(\d+)", lib)
        if match:
            return int(match.group(1))
    return None


def extension_facts(path: str, module: str, exports: Optional[Set[bytes]]) -> Dict[str, Any]:
    entry: Dict[str, Any] = {"path": path, "module": module}
    try:
        elf = elf_dynamic(path)
    except OSError as exc:
        entry["elf"] = {"status": "error", "detail": exc.strerror or str(exc)}
        return entry
    except (ValueError, struct.error) as exc:
        entry["elf"] = {"status": "error", "detail": str(exc)}
        return entry
    info: Dict[str, Any] = {"status": "ok", "needed": elf["needed"], "cxx11_abi": elf["cxx11_abi"]}
    major = cudart_major(elf["needed"])
    if major is not None:
        info["cudart_major"] = major
    if elf["runpath"]:
        info["runpath"] = elf["runpath"]
    undefined = elf["c10_undefined"]
    info["c10_checked"] = len(undefined)
    if exports is not None and undefined:
        missing = [name for name in undefined if name.encode("ascii", "replace") not in exports]
        info["c10_missing"] = missing[:SHOWN]
        info["c10_missing_count"] = len(missing)
    elif undefined:
        info["c10_missing_count"] = None  # torch's libc10 unreadable: cannot tell
    entry["elf"] = info
    return entry


# --- the flash_attn package ------------------------------------------------------------------
def namespace_dirs(paths: List[str], editable: Dict[str, str]) -> Tuple[List[str], Optional[str]]:
    """Every ``flash_attn`` directory on the path, and the regular package Python would pick."""
    dirs: List[str] = []
    for location in paths:
        candidate = os.path.join(location, "flash_attn")
        if os.path.isdir(candidate) and candidate not in dirs:
            dirs.append(candidate)
    target = editable.get("flash_attn")
    if target and os.path.isdir(target) and target not in dirs:
        dirs.append(target)
    regular = next((d for d in dirs if os.path.isfile(os.path.join(d, "__init__.py"))), None)
    return dirs, regular


def _has_extend_path(init: str) -> bool:
    try:
        with open(init, "rb") as handle:
            return b"extend_path" in handle.read(1 << 16)
    except OSError:
        return False


def namespace_facts(paths: List[str], editable: Dict[str, str], records: Dict[str, List[str]]) -> Dict[str, Any]:
    dirs, regular = namespace_dirs(paths, editable)
    if not dirs:
        return {"path": None, "dirs": [], "importable": False}
    extend = bool(regular and _has_extend_path(os.path.join(regular, "__init__.py")))
    # A regular package hides the other directories unless its __init__ extends __path__.
    effective = dirs if regular is None or extend else [regular]
    owners: Dict[str, List[str]] = {}
    for dist, files in sorted(records.items()):
        for part, prefix in (("init", "flash_attn/__init__.py"), ("ops", "flash_attn/ops/"), ("cute", "flash_attn/cute/"),
                             ("layers", "flash_attn/layers/")):
            if any(f.startswith(prefix) if prefix.endswith("/") else f == prefix for f in files):
                owners.setdefault(part, []).append(dist)
    return {
        "path": regular or dirs[0],
        "dirs": dirs,
        "importable": True,
        "kind": "regular" if regular else "namespace",
        "init": regular is not None,
        "extend_path": extend,
        "ops": any(os.path.isfile(os.path.join(d, "ops", "triton", "rotary.py")) for d in effective),
        "cute": any(os.path.isfile(os.path.join(d, "cute", "__init__.py")) for d in effective),
        "cute_interface": any(os.path.isfile(os.path.join(d, "cute", "interface.py")) for d in effective),
        "flash_attn_interface": any(os.path.isfile(os.path.join(d, "flash_attn_interface.py")) for d in effective),
        "owners": owners,
    }


def clashes(records: Dict[str, List[Tuple[str, str]]], locations: Dict[str, str], versions: Dict[str, str]) -> List[Dict[str, Any]]:
    """Files claimed by two distributions' RECORDs, with which one's content is on the disk."""
    out: List[Dict[str, Any]] = []
    names = sorted(records)
    budget = [MAX_HASHED_FILES, MAX_HASHED_BYTES]
    for i, first in enumerate(names):
        mine = {path: digest for path, digest in records[first]}
        for second in names[i + 1:]:
            if locations.get(first) != locations.get(second):
                continue  # different directories: one shadows the other (GD504), no shared files
            theirs = {path: digest for path, digest in records[second]}
            shared = sorted(set(mine) & set(theirs))
            if not shared:
                continue
            dirs = sorted({p.rsplit("/", 1)[0] if "/" in p else "." for p in shared})
            on_disk = {first: 0, second: 0, "other": 0, "missing": 0, "unchecked": 0}
            base = locations.get(first) or ""
            for path in shared:
                full = os.path.join(base, path)
                if budget[0] <= 0 or budget[1] <= 0:
                    on_disk["unchecked"] += 1
                    continue
                try:
                    size = os.path.getsize(full)
                except OSError:
                    on_disk["missing"] += 1
                    continue
                budget[0] -= 1
                budget[1] -= size
                actual = _file_digest(full)
                if actual is None:
                    on_disk["unchecked"] += 1
                elif actual == mine[path] and actual == theirs[path]:
                    on_disk[first] += 1  # identical in both: nothing lost either way
                    on_disk[second] += 1
                elif actual == mine[path]:
                    on_disk[first] += 1
                elif actual == theirs[path]:
                    on_disk[second] += 1
                else:
                    on_disk["other"] += 1
            out.append({
                "dists": [first, second],
                "versions": [versions.get(first), versions.get(second)],
                "location": base,
                "count": len(shared),
                "dirs": dirs[:SHOWN],
                "examples": shared[:SHOWN],
                "on_disk": on_disk,
            })
    return out


# --- who needs flash_attn.ops ----------------------------------------------------------------
ROTARY_FILES = (
    "model_executor/layers/rotary_embedding/common.py",
    "model_executor/layers/rotary_embedding.py",
)


def _guarded(stack: List[ast.AST]) -> bool:
    for node in stack:
        if isinstance(node, ast.Try):
            for handler in node.handlers:
                caught = handler.type
                names = []
                if caught is None:
                    return True
                for item in (caught.elts if isinstance(caught, ast.Tuple) else [caught]):
                    if isinstance(item, ast.Name):
                        names.append(item.id)
                    elif isinstance(item, ast.Attribute):
                        names.append(item.attr)
                if set(names) & {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}:
                    return True
    return False


def _rocm_only(stack: List[ast.AST]) -> bool:
    for node in stack:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and re.search(r"hip|rocm", node.name, re.I):
            return True
        if isinstance(node, ast.If) and re.search(r"is_rocm|is_hip", ast.dump(node.test)):
            return True
    return False


def flash_attn_imports(source: str) -> List[Dict[str, Any]]:
    """Imports of flash_attn.ops / flash_attn.layers in a file: line, function, guarded, ROCm-only."""
    found: List[Dict[str, Any]] = []
    tree = ast.parse(source)

    def visit(node: ast.AST, stack: List[ast.AST]) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ImportFrom) and (child.module or "").startswith(("flash_attn.ops", "flash_attn.layers")):
                function = next((n.name for n in reversed(stack) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))), None)
                found.append({"module": child.module, "line": child.lineno, "function": function,
                              "guarded": _guarded(stack), "rocm_only": _rocm_only(stack)})
            elif isinstance(child, ast.Import):
                for alias in child.names:
                    if alias.name.startswith(("flash_attn.ops", "flash_attn.layers")):
                        function = next((n.name for n in reversed(stack) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))), None)
                        found.append({"module": alias.name, "line": child.lineno, "function": function,
                                      "guarded": _guarded(stack), "rocm_only": _rocm_only(stack)})
            visit(child, stack + [child])

    visit(tree, [])
    return found


def dependents(vllm_dir: Optional[str], vllm_version: Optional[str]) -> List[Dict[str, Any]]:
    out: List[Dict[str, Any]] = []
    if not vllm_dir:
        return out
    for rel in ROTARY_FILES:
        path = os.path.join(vllm_dir, rel)
        try:
            with open(path, "rb") as handle:
                source = handle.read(4 << 20).decode("utf-8", "replace")
        except OSError:
            continue
        try:
            imports = flash_attn_imports(source)
        except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
            out.append({"dist": "vllm", "version": vllm_version, "file": path, "status": "error", "detail": str(exc)})
            break
        for item in imports:
            item.update({"dist": "vllm", "version": vllm_version, "file": path})
            out.append(item)
        break
    return out


# --- vLLM's bundled builds -----------------------------------------------------------------
def vllm_builds(vllm_dir: Optional[str]) -> Optional[Dict[str, Any]]:
    if not vllm_dir:
        return None
    directory = os.path.join(vllm_dir, "vllm_flash_attn")
    try:
        names = sorted(e.name for e in os.scandir(directory))
    except OSError:
        return {"dir": directory, "present": False, "fa2": None, "fa3": None, "fa4": None}
    return {
        "dir": directory,
        "present": True,
        "fa2": next((n for n in names if n.startswith("_vllm_fa2_C") and ".so" in n), None),
        "fa3": next((n for n in names if n.startswith("_vllm_fa3_C") and ".so" in n), None),
        "fa4": "cute" if os.path.isdir(os.path.join(directory, "cute")) else None,
    }


# --- build environment ---------------------------------------------------------------------
def build_env(environ: Dict[str, str], dists: Dict[str, Dict[str, Any]]) -> Dict[str, Any]:
    import shutil

    path = environ.get("PATH", "")
    ninja = shutil.which("ninja", path=path) if path else None
    venv_ninja = os.path.join(sys.prefix, "bin", "ninja")
    dist = dists.get("ninja")
    return {
        "ninja": ninja,
        "ninja_in_prefix": venv_ninja if os.path.isfile(venv_ninja) and os.access(venv_ninja, os.X_OK) else None,
        "ninja_dist": dist.get("version") if isinstance(dist, dict) else None,
        "prefix": sys.prefix,
    }


# --- everything ------------------------------------------------------------------------------
# What makes this collector look at all (python_stack's bootstrap gates the --python child on it too,
# so that an environment without any of it does not even compile this module there).
TRIGGER_DISTS, TRIGGER_DIRS = _extra_gates.GATES["flash_attn"]  # its VARIANTS and vllm


def triggered(ctx: Dict[str, Any]) -> bool:
    dists = ctx.get("dists") or {}
    if any(name in dists for name in TRIGGER_DISTS):
        return True
    editable = ctx.get("editable") or {}
    return any(d in editable or any(os.path.isdir(os.path.join(p, d)) for p in ctx.get("paths") or []) for d in TRIGGER_DIRS)


def empty_facts() -> Dict[str, Dict[str, Any]]:
    """The facts when nothing flash-attn-related is installed (what collect_plain returns then)."""
    return _extra_gates.empty_facts("flash_attn")


def collect_plain(ctx: Dict[str, Any]) -> Dict[str, Dict[str, Any]]:
    """flash_attn.* facts. ``ctx``: paths, dists (first install of each), editable, facts, environ."""
    if not triggered(ctx):
        return empty_facts()
    paths: List[str] = ctx.get("paths") or []
    dists: Dict[str, Dict[str, Any]] = ctx.get("dists") or {}
    editable: Dict[str, str] = ctx.get("editable") or {}
    facts_so_far: Dict[str, Any] = ctx.get("facts") or {}
    environ: Dict[str, str] = ctx.get("environ") if ctx.get("environ") is not None else dict(os.environ)
    torch_dir = (facts_so_far.get("torch.path") or {}).get("value")

    variants: List[Dict[str, Any]] = []
    records: Dict[str, List[Tuple[str, str]]] = {}
    locations: Dict[str, str] = {}
    versions: Dict[str, str] = {}
    exports: Optional[Set[bytes]] = None
    exports_read = False
    for key, variant in VARIANTS:
        dist = dists.get(key)
        if not isinstance(dist, dict):
            continue
        version = dist.get("version")
        entry: Dict[str, Any] = {
            "variant": variant, "dist": key, "name": dist.get("name"), "version": version,
            "location": dist.get("location"), "meta": dist.get("meta"), "local": parse_local_tag(version),
        }
        if variant == "fa2" and version and re.match(r"^3\.", str(version)):
            entry["variant"] = "fa3"  # FA3 (hopper) built under FA2's name: flash-attention#1459
            entry["note"] = "FA3 installed under the flash-attn distribution name"
        rows = read_record(dist.get("location") or "", dist.get("meta") or "")
        if rows is None:
            entry["record"] = False
            rows = []
        else:
            entry["record"] = True
            records[key] = rows
            locations[key] = dist.get("location") or ""
            versions[key] = str(version)
        entry["files"] = len(rows)
        entry["top_level"] = _top_names(p for p, _ in rows)
        so_files = [p for p, _ in rows if p.endswith(".so") or ".so." in p]
        if not rows and variant == "fa2":  # no RECORD (egg-info, develop): look for the extension itself
            try:
                so_files = sorted(e.name for e in os.scandir(dist.get("location") or "")
                                  if e.name.startswith("flash_attn_2_cuda.") and e.name.endswith(".so"))
            except OSError:
                so_files = []
        extensions = []
        for rel in so_files[:8]:
            if not exports_read:
                exports, exports_read = _c10_exports(torch_dir), True
            module = rel[:-3].replace("/", ".").split(".cpython")[0].split(".abi3")[0]
            extensions.append(extension_facts(os.path.join(dist.get("location") or "", rel), module, exports))
        entry["extensions"] = extensions
        variants.append(entry)

    out: Dict[str, Dict[str, Any]] = {}
    out["flash_attn.variants"] = fact(variants, source="dist-info, RECORD, ELF",
                                      detail=", ".join(f"{v['dist']} {v['version']}" for v in variants) or "none installed")
    file_lists = {dist: [p for p, _ in rows] for dist, rows in records.items()}
    namespace = namespace_facts(paths, editable, file_lists)
    out["flash_attn.namespace"] = fact(namespace, source="files")
    out["flash_attn.clashes"] = fact(clashes(records, locations, versions), source="RECORD, file hashes")

    vllm = dists.get("vllm")
    vllm_dir = _stack_read.package_dir("vllm", paths, editable) if isinstance(vllm, dict) else None
    if vllm_dir:
        out["flash_attn.vllm_builds"] = fact(vllm_builds(vllm_dir), source=os.path.join(vllm_dir, "vllm_flash_attn"))
    else:
        out["flash_attn.vllm_builds"] = fact(None, "absent", "vllm", "vllm is not installed")
    # flash_attn.ops only matters when `flash_attn` exists but has no ops (FA4 alone, a clobbered FA2).
    if namespace.get("importable") and not namespace.get("ops") and vllm_dir:
        out["flash_attn.dependents"] = fact(dependents(vllm_dir, vllm.get("version") if isinstance(vllm, dict) else None),
                                            source="vllm rotary embedding (ast)")
    else:
        out["flash_attn.dependents"] = fact([], source="vllm rotary embedding (ast)",
                                            detail="not read: flash_attn.ops present, or no flash_attn / vllm")
    if variants:
        out["flash_attn.build_env"] = fact(build_env(environ, dists), source="PATH, sys.prefix")
    return out
