"""The Python stack, read from files without importing it.

Standard library only and Python 3.8-compatible, on purpose: this module also runs inside
another interpreter (``--python``: the venv where vLLM lives) as a script given to ``-I -c``,
so it cannot depend on gpudoctor or its deps. One code path, two places to run it:
probes.python_stack calls python_stack_collect.py's ``collect_plain`` (which calls the readers here) in the
doctor's process, or runs these files' source (with fatbin.py's) in the other interpreter and
reads the JSON that python_stack_collect's ``main`` prints.

What it reads, never importing any of it:
- ``torch/version.py`` text (``__version__``, ``cuda``, ``hip``, ``git_version``); torch's C++
  ABI from ``TorchConfig.cmake`` (``-D_GLIBCXX_USE_CXX11_ABI=N``, written by torch ≤ 2.6)
  or else from the symbol names of ``torch/lib/libc10.so`` (``__cxx11`` in the mangled
  names means the new ABI).
- every ``*.dist-info`` / ``*.egg-info`` on the path (METADATA headers only: the body is the
  long description); for the inference stack also ``Requires-Dist`` and, when asked, RECORD
  against the disk (stat only, ``.py`` and shared objects: what an import needs).
- where the CUDA extension binaries of the stack are (torch/lib, vllm, flash-attn 2/3,
  flashinfer, xformers), each scanned with the fatbin reader that the caller passes in
  (probes.fatbin, also stdlib-only, shipped beside this source to the other interpreter).
Bad input (unreadable or non-UTF-8 METADATA, permission denied, symlink loops) becomes an
entry with a status and a reason, never an exception.
"""

from __future__ import annotations

import ast
import errno
import os
import platform
import re
import sys
from typing import Any, Dict, Iterable, List, Optional, Tuple

SOURCE = "torch/version.py"

# The inference stack: requirements checked (pip check style), RECORD compared with the disk.
STACK = (
    "torch", "torchvision", "torchaudio", "vllm", "flashinfer-python", "flashinfer-cubin",
    "flashinfer-jit-cache", "flash-attn", "flash-attn-3", "flash-attn-4", "xformers", "triton",
    "transformers", "sglang", "sglang-kernel",
)
# The inference engines (distribution -> the name users know): which are installed is a fact of its own.
ENGINES = (("vllm", "vLLM"), ("sglang", "SGLang"))
# RECORD entries worth a stat: what an import or a kernel load needs. Headers, CMake files and
# bytecode are skipped (torch alone lists ~9,000 headers; checking all of RECORD costs ~50 ms).
_CHECKED_SUFFIXES = (".py", ".so", ".pyd")
MISSING_SHOWN = 20
METADATA_LIMIT = 1 << 20


def normalize(name: str) -> str:
    """PEP 503 normalized distribution name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def fact(value: Any = None, status: str = "ok", source: str = "", detail: str = "") -> Dict[str, Any]:
    out: Dict[str, Any] = {"value": value, "status": status}
    if source:
        out["source"] = source
    if detail:
        out["detail"] = detail
    return out


def os_error_status(exc: BaseException) -> str:
    if isinstance(exc, PermissionError):
        return "no_permission"
    if isinstance(exc, FileNotFoundError):
        return "absent"
    return "error"


def describe_os_error(exc: BaseException) -> str:
    if isinstance(exc, OSError):
        if exc.errno == errno.ELOOP:
            return "symlink loop"
        return exc.strerror or str(exc)
    return str(exc)


# --- torch -----------------------------------------------------------------------------------
def read_version_py(text: str) -> Dict[str, Any]:
    """Constant assignments of torch/version.py (``__version__``, ``cuda``, ``git_version`` …)."""
    values: Dict[str, Any] = {}
    for node in ast.parse(text).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        else:
            continue
        if isinstance(target, ast.Name) and isinstance(value, ast.Constant):
            values[target.id] = value.value
    return values


def find_package_file(package: str, filename: str, paths: Optional[List[str]] = None) -> Optional[str]:
    for entry in paths if paths is not None else sys.path:
        candidate = os.path.join(entry or ".", package, filename)
        if os.path.isfile(candidate):
            return candidate
    return None


_ABI_FLAG = re.compile(r"-D_GLIBCXX_USE_CXX11_ABI=([01])")


TORCH_ABI_KIND = "torch-abi-1"  # the scan cache's entries: libc10.so's answer, by its file key


def torch_abi(torch_dir: str, cache: Any = None) -> Dict[str, Any]:
    """torch's C++ ABI (True = CXX11 ABI) without importing torch. ``cache``: the scan cache, which
    keeps libc10.so's answer (torch 2.x's TorchConfig.cmake no longer names the ABI, and reading
    libc10's dynamic strings was ~10 ms of every warm check on an H200 host)."""
    for rel in ("share/cmake/Torch/TorchConfig.cmake", "share/cmake/Caffe2/Caffe2Config.cmake"):
        path = os.path.join(torch_dir, rel)
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                match = _ABI_FLAG.search(handle.read(1 << 18))
        except OSError:
            continue
        if match:
            return fact(match.group(1) == "1", source=path)
    lib = os.path.join(torch_dir, "lib", "libc10.so")
    key = None
    if cache is not None:
        from gpudoctor.probes import scancache

        key = scancache.file_key(lib)
        known = cache.get(TORCH_ABI_KIND, lib, key)
        if isinstance(known, dict) and isinstance(known.get("value"), bool) and known.get("status") == "ok":
            return known
    answer = _libc10_abi(lib)
    if cache is not None and answer.get("status") == "ok":
        cache.put(TORCH_ABI_KIND, lib, key, answer)
    return answer


def _libc10_abi(lib: str) -> Dict[str, Any]:
    """torch's C++ ABI from the symbols libc10.so exports."""
    try:
        dynstr = elf_section(lib, ".dynstr", limit=64 << 20)
    except OSError as exc:
        return fact(None, os_error_status(exc), lib, f"cannot read libc10.so: {describe_os_error(exc)}")
    except ValueError as exc:
        return fact(None, "error", lib, str(exc))
    if dynstr is None:
        return fact(None, "error", lib, "libc10.so has no .dynstr section")
    if b"__cxx11" in dynstr:
        return fact(True, source=lib, detail="libc10.so exports __cxx11 symbols")
    if b"_ZN3c10" in dynstr:
        return fact(False, source=lib, detail="libc10.so exports no __cxx11 symbols (pre-CXX11 ABI)")
    return fact(None, "error", lib, "libc10.so exports no c10 symbols")


def elf_module():
    """probes/elf.py, the one ELF reader (imported when first needed)."""
    from gpudoctor.probes import elf

    return elf


def elf_section(path: str, name: str, limit: int) -> Optional[bytes]:
    """The bytes of one section of an ELF file (None if it has none, or it is SHT_NOBITS)."""
    return elf_module().sections(path, (name.encode(),), limit).get(name.encode())


def torch_facts(paths: Optional[List[str]] = None, cache: Any = None) -> Dict[str, Dict[str, Any]]:
    """Plain-dict facts (the script form returns JSON) about the first torch on the path
    (``cache``: the scan cache, for torch_abi)."""
    path = find_package_file("torch", "version.py", paths)
    if path is None:
        absent = fact(None, "absent", SOURCE, "torch is not installed")
        return {"torch.version": absent, "torch.cuda": absent}
    try:
        with open(path, "rb") as handle:
            values = read_version_py(handle.read(1 << 20).decode("utf-8"))
    except (OSError, SyntaxError, ValueError, MemoryError, RecursionError) as exc:  # ast.parse of `- - - … 1`
        status = os_error_status(exc) if isinstance(exc, OSError) else "error"
        reason = describe_os_error(exc) if isinstance(exc, OSError) else f"{type(exc).__name__}: {exc}"
        broken = fact(None, status, path, f"torch/version.py unreadable: {reason}")
        return {"torch.path": fact(os.path.dirname(path), source=path), "torch.version": broken, "torch.cuda": broken}

    def one(key: str, absent_detail: str) -> Dict[str, Any]:
        if values.get(key) is None:
            return fact(None, "absent", path, absent_detail)
        return fact(values[key], source=path)

    torch_dir = os.path.dirname(path)
    return {
        "torch.path": fact(torch_dir, source=path),
        "torch.version": one("__version__", "no __version__ in torch/version.py"),
        "torch.cuda": one("cuda", "torch was built without CUDA (CPU or ROCm build)"),
        "torch.hip": one("hip", "not a ROCm build"),
        "torch.git_version": one("git_version", "no git_version"),
        "torch.cxx11_abi": torch_abi(torch_dir, cache),
    }


# --- the interpreter -------------------------------------------------------------------------
def marker_environment() -> Dict[str, str]:
    """PEP 508 marker variables of this interpreter (what packaging.markers.default_environment gives)."""
    impl = sys.implementation
    info = impl.version
    impl_version = f"{info.major}.{info.minor}.{info.micro}"
    if info.releaselevel != "final":
        impl_version += info.releaselevel[0] + str(info.serial)
    return {
        "implementation_name": impl.name,
        "implementation_version": impl_version,
        "os_name": os.name,
        "platform_machine": platform.machine(),
        "platform_release": platform.release(),
        "platform_system": platform.system(),
        "platform_version": platform.version(),
        "python_full_version": platform.python_version(),
        "platform_python_implementation": platform.python_implementation(),
        "python_version": ".".join(platform.python_version_tuple()[:2]),
        "sys_platform": sys.platform,
    }


def python_facts(paths: List[str]) -> Dict[str, Dict[str, Any]]:
    return {
        "python.executable": fact(sys.executable, source="sys"),
        "python.version": fact(platform.python_version(), source="sys"),
        "python.prefix": fact(sys.prefix, source="sys", detail="venv" if sys.prefix != getattr(sys, "base_prefix", sys.prefix) else ""),
        "python.sys_path": fact(paths, source="sys.path"),
        "python.marker_env": fact(marker_environment(), source="sys, platform"),
    }


def search_paths(pythonpath: str = "") -> List[str]:
    """Where this interpreter looks for distributions and packages.

    ``sys.path`` without the current directory (``''``: an environment is not where the doctor
    was started). Under ``-I`` Python ignores PYTHONPATH and the user site; they are added back
    here as a normal start would: PYTHONPATH first; the user site (outside a venv, unless
    PYTHONNOUSERSITE is set) before the system site-packages.
    """
    paths: List[str] = []
    system = list(sys.path)
    try:
        cwd = os.getcwd()
    except OSError:
        cwd = None
    if system and system[0] in ("", cwd):
        system = system[1:]  # `python -m gpudoctor` puts the current directory first
    for entry in [p for p in pythonpath.split(os.pathsep) if p] + system:
        if entry and entry not in paths:
            paths.append(entry)
    in_venv = sys.prefix != getattr(sys, "base_prefix", sys.prefix)
    if sys.flags.isolated and not in_venv and not os.environ.get("PYTHONNOUSERSITE"):
        try:
            import site

            user = site.getusersitepackages()
        except Exception:
            user = None
        if user and os.path.isdir(user) and user not in paths:
            # site.py adds the user site before the system site-packages: it shadows them.
            where = next((i for i, p in enumerate(paths) if p.endswith(("site-packages", "dist-packages"))), len(paths))
            paths.insert(where, user)
    return paths


# --- distributions ---------------------------------------------------------------------------
_WANTED_HEADERS = ("name", "version", "requires-dist", "requires-python")


def parse_headers(text: str, wanted: Tuple[str, ...] = _WANTED_HEADERS, stop_when_found: bool = False) -> Dict[str, List[str]]:
    """RFC 822-style headers of METADATA / PKG-INFO (stops at the first blank line).

    Only the ``wanted`` headers are kept (lower-case names); continuation lines are joined.
    ``stop_when_found``: return as soon as each wanted header was seen once (Name and Version
    come first in every METADATA: no need to read 50 Classifier lines for them).
    """
    end = text.find("\n\n")
    crlf = text.find("\r\n\r\n")
    if crlf >= 0 and (end < 0 or crlf < end):
        end = crlf
    if end >= 0:
        text = text[:end]
    headers: Dict[str, List[str]] = {}
    last = None
    for line in text.split("\n"):
        if line[:1] in (" ", "\t"):
            if last is not None:
                headers[last][-1] += "\n" + line.strip()
            continue
        key, sep, value = line.partition(":")
        key = key.strip().lower()
        if not sep or key not in wanted:
            last = None
            continue
        last = key
        headers.setdefault(key, []).append(value.strip())
        if stop_when_found and len(headers) == len(wanted):
            break
    return headers


def read_head(path: str) -> bytes:
    """The header block of a metadata file, up to its first blank line (at most 1 MiB).

    Only the headers: the body (the long description) is never decoded, so a multi-byte
    character cut by a read boundary cannot look like bad UTF-8.
    """
    data = b""
    with open(path, "rb") as handle:
        while len(data) < METADATA_LIMIT:
            chunk = handle.read(16384)
            if not chunk:
                break
            data += chunk
            ends = [i for i in (data.find(b"\n\n"), data.find(b"\r\n\r\n")) if i >= 0]
            if ends:
                return data[:min(ends) + 1]
    return data


_DIST_DIR = re.compile(r"^(?P<name>.+?)-(?P<version>[^-]+?)(-py\d.*)?\.(dist-info|egg-info)$")


def read_dist(location: str, entry: str, read_all: bool = True) -> Dict[str, Any]:
    """One installed distribution: name, version, requires; or an error with its reason.

    Without ``read_all`` a ``NAME-VERSION.dist-info`` folder outside the inference stack is
    taken at its name (pip writes it from the metadata): reading 200 METADATA files cost
    ~60 ms on an H200 host. Its METADATA is then checked only with --deep.
    """
    meta_dir = os.path.join(location, entry)
    match = _DIST_DIR.match(entry)
    dist: Dict[str, Any] = {
        "name": match.group("name") if match else entry.rsplit(".", 1)[0],
        "version": match.group("version") if match else None,
        "location": location,
        "meta": entry,
    }
    if not read_all and match and entry.endswith(".dist-info") and normalize(dist["name"]) not in STACK:
        dist["requires"] = []
        return dist
    if entry.endswith(".egg-info") and not os.path.isdir(meta_dir):
        meta_file = meta_dir  # a PKG-INFO-style file written by distutils
    else:
        meta_file = os.path.join(meta_dir, "METADATA" if entry.endswith(".dist-info") else "PKG-INFO")
    try:
        raw = read_head(meta_file)
    except OSError as exc:
        dist["status"] = os_error_status(exc) if not isinstance(exc, FileNotFoundError) else "error"
        dist["error"] = f"{os.path.basename(meta_file)}: {describe_os_error(exc)}"
        return dist
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        dist["status"] = "error"
        dist["error"] = f"{os.path.basename(meta_file)} is not UTF-8 (byte 0x{raw[exc.start]:02x} at offset {exc.start})"
        text = raw.decode("latin-1")
    in_stack = normalize(dist["name"]) in STACK
    headers = parse_headers(text) if in_stack else parse_headers(text, ("name", "version"), stop_when_found=True)
    if not in_stack and headers.get("name") and normalize(headers["name"][0]) in STACK:
        headers = parse_headers(text)  # a folder name that does not say which project it is
    if headers.get("name"):
        dist["name"] = headers["name"][0]
    if headers.get("version"):
        dist["version"] = headers["version"][0]
    elif "error" not in dist:
        dist["status"] = "error"
        dist["error"] = f"{os.path.basename(meta_file)} has no Version header"
    dist["requires"] = headers.get("requires-dist", [])
    if headers.get("requires-python"):
        dist["requires_python"] = headers["requires-python"][0]
    return dist


def scan_dists(paths: Iterable[str], read_all: bool = True) -> Tuple[Dict[str, Dict[str, Any]], Dict[str, List[Dict[str, Any]]], List[Dict[str, Any]]]:
    """(first install of each distribution, extra installs shadowed by it, unreadable entries)."""
    first: Dict[str, Dict[str, Any]] = {}
    shadowed: Dict[str, List[Dict[str, Any]]] = {}
    unreadable: List[Dict[str, Any]] = []
    scanned = set()
    for location in paths:
        try:
            real = os.path.realpath(location)
        except (OSError, ValueError):
            real = location
        if real in scanned:
            continue  # the same directory again through a symlink (a loop, lib64 -> lib): not a second install
        scanned.add(real)
        try:
            entries = sorted(e.name for e in os.scandir(location))
        except NotADirectoryError:
            continue  # a zip or egg file on sys.path
        except FileNotFoundError:
            continue  # sys.path often names directories that do not exist
        except OSError as exc:
            unreadable.append({"path": location, "status": os_error_status(exc), "detail": describe_os_error(exc)})
            continue
        for entry in entries:
            if not (entry.endswith(".dist-info") or entry.endswith(".egg-info")):
                continue
            full = os.path.join(location, entry)
            if entry.endswith(".dist-info") and not os.path.isdir(full):
                try:
                    os.stat(full)
                    reason, status = "not a directory", "error"
                except OSError as exc:  # a symlink loop, a dangling link, a permission problem
                    reason, status = describe_os_error(exc), os_error_status(exc)
                    status = "error" if status == "absent" else status
                unreadable.append({"path": full, "status": status, "detail": reason})
                continue
            dist = read_dist(location, entry, read_all)
            if dist.get("error"):
                unreadable.append({"path": full, "status": dist.get("status", "error"), "detail": dist["error"]})
            key = normalize(dist["name"])
            if key not in first:
                first[key] = dist
            elif first[key]["location"] == location and _mtime(full) > _mtime(os.path.join(location, first[key]["meta"])):
                # Two dist-info of one package in one directory: the newer folder is the last
                # install, the other one metadata an interrupted up- or downgrade left behind.
                shadowed.setdefault(key, []).append(first[key])
                first[key] = dist
            else:
                shadowed.setdefault(key, []).append(dist)
    return first, shadowed, unreadable


def _mtime(path: str) -> float:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return 0.0


RECORD_CHECK_KINDS = {False: "record-check-1", True: "record-check-full-1"}  # scan cache kinds (probes/scancache.py)


def record_check(dist: Dict[str, Any], thorough: bool = False, cache=None) -> Dict[str, Any]:
    """RECORD against the disk for one distribution.

    By default only the shared objects and the top-level package's ``__init__.py`` (what an
    import and a kernel load need first): torch's RECORD lists about 6,000 .py files and
    stat-ing them cost 0.2 s on an H200 host. ``thorough`` (--deep) stats every .py and
    shared object. ``cache`` (a probes/scancache.ScanCache): which RECORD lines to stat is
    kept by the RECORD file's identity, so a warm run stats them without reading and
    splitting torch's 15,000-line RECORD again (10-20 ms); the stats are done every time.
    """
    if not dist["meta"].endswith(".dist-info"):
        return {"record": "absent", "detail": "egg-info install: no RECORD"}
    record = os.path.join(dist["location"], dist["meta"], "RECORD")
    kind = RECORD_CHECK_KINDS[bool(thorough)]
    from gpudoctor.probes import scancache

    key = scancache.file_key(record) if cache is not None else None
    cached = cache.get(kind, record, key) if key is not None else None
    if cached is not None and isinstance(cached.get("paths"), list) and all(isinstance(p, str) for p in cached["paths"]):
        paths = cached["paths"]
    else:
        try:
            with open(record, "rb") as handle:
                text = handle.read(64 << 20).decode("utf-8", "replace")
        except OSError as exc:
            return {"record": os_error_status(exc), "detail": f"RECORD: {describe_os_error(exc)}"}
        paths = _record_checked_paths(text, thorough)
        if key is not None:
            cache.put(kind, record, key, {"paths": paths})
    missing: List[str] = []
    checked = 0
    problems = 0
    base = os.path.join(dist["location"], "")
    for rel in paths:
        checked += 1
        try:
            os.stat(rel if rel.startswith("/") else base + rel)
        except ValueError:  # a NUL byte in this RECORD line: that line is garbage, the rest still counts
            checked -= 1
            continue
        except OSError as exc:
            if isinstance(exc, FileNotFoundError) or exc.errno in (errno.ELOOP, errno.ENOTDIR):
                problems += 1
                if len(missing) < MISSING_SHOWN:
                    missing.append(rel + (" (symlink loop)" if exc.errno == errno.ELOOP else ""))
            # EACCES on a parent directory is not "missing": the doctor cannot tell
    return {"record": "ok", "checked": checked, "missing": missing, "missing_count": problems}


def _record_checked_paths(text: str, thorough: bool) -> List[str]:
    """The RECORD entries record_check stats: shared objects and the top-level package (every module when thorough)."""
    paths = []
    for line in text.splitlines():
        if line.startswith('"'):  # a quoted path (it has a comma): let csv read it
            import csv

            row = next(csv.reader([line]), None)
            rel = row[0] if row else ""
        else:
            comma = line.find(",")
            rel = line if comma < 0 else line[:comma]
        top_package = rel.endswith("/__init__.py") and rel.count("/") == 1
        if rel.endswith((".so", ".pyd")) or ".so." in rel or top_package or (thorough and rel.endswith(_CHECKED_SUFFIXES)):
            if not (rel.startswith("../") or "__pycache__" in rel):  # scripts outside site-packages (absent with --target installs)
                paths.append(rel)
    return paths


def compact(dist: Dict[str, Any]) -> Dict[str, Any]:
    out = {"name": dist["name"], "version": dist["version"], "location": dist["location"]}
    if dist.get("error"):
        out["error"] = dist["error"]
    return out


# --- editable installs -----------------------------------------------------------------------
def editable_mappings(paths: Iterable[str]) -> Dict[str, str]:
    """Top-level package -> source directory, from setuptools' ``__editable___*_finder.py`` files."""
    mapping: Dict[str, str] = {}
    for location in paths:
        try:
            names = [e.name for e in os.scandir(location) if e.name.startswith("__editable__") and e.name.endswith("_finder.py")]
        except OSError:
            continue
        for name in names:
            try:
                with open(os.path.join(location, name), encoding="utf-8", errors="replace") as handle:
                    tree = ast.parse(handle.read(1 << 20))
            except (OSError, SyntaxError, ValueError, MemoryError, RecursionError):
                continue
            for node in tree.body:
                if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "MAPPING" for t in node.targets):
                    try:
                        value = ast.literal_eval(node.value)
                    except ValueError:
                        continue
                    if isinstance(value, dict):
                        for key, target in value.items():
                            if isinstance(key, str) and isinstance(target, str):
                                mapping.setdefault(key, target)
    return mapping


def package_dir(package: str, paths: Iterable[str], editable: Dict[str, str]) -> Optional[str]:
    for location in paths:
        candidate = os.path.join(location, package)
        if os.path.isdir(candidate):
            return candidate
    target = editable.get(package)
    return target if target and os.path.isdir(target) else None
