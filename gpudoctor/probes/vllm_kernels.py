"""Which of vLLM's compiled extensions it needs on every GPU, and which only on some, read from its source.

Standard library only and Python 3.8-compatible: it runs in the doctor's process or inside
the interpreter named by ``--python`` (python_stack's bootstrap serves it as ``gpudoctor.probes.vllm_kernels``);
python_stack_collect.collect_plain calls ``collect_plain(ctx)``.

vLLM builds some extensions only for some architectures (its CMakeLists selects a per-extension
arch list with ``cuda_archs_loose_intersection``: ``_qutlass_C`` and ``_deepselect_C`` for
Blackwell, ``_vllm_fa3_C`` and FlashMLA for Hopper/Blackwell) and imports them only where they
can run: inside ``try: … except ImportError`` / ``contextlib.suppress(ImportError)``, lazily in
the function that uses them, or behind ``current_platform.is_device_capability_family(100)``.
The one it needs on every CUDA GPU is imported unguarded by ``vllm/platforms/cuda.py``
(``import vllm._C`` up to 0.2x, ``import vllm._C_stable_libtorch`` from 0.33). A kernel
rule must not call a Blackwell-only library "missing code" on an A100, and must call a
required one that lacks the GPU an error. No wheel ships the CMake arch lists, so what is
read is the source: for every extension file found on disk (whatever its name, from vLLM's
RECORD or its directory), each line of vLLM's ``.py`` files that imports or looks it up, the
blocks that enclose that line (try / with suppress / if / def) and the compute-capability
checks of those blocks and functions.

Fact ``vllm.extensions``: ``{"root", "extensions": [{module, path, role, imports, gates}]}``
with role "required" (imported unguarded in platforms/cuda.py), "optional" (imported only
guarded or lazily) or "unreferenced" (no import found: loaded through ``torch.ops`` by a
caller we do not see, or not at all).
"""

from __future__ import annotations

import os
import re
from typing import Any, Dict, List, Optional, Tuple

from gpudoctor.probes import extra_gates as _extra_gates
from gpudoctor.probes import python_stack_read as _stack_read
from gpudoctor.probes import scancache as _scancache
from gpudoctor.probes import coldstart as _coldstart
fact = _stack_read.fact

FACT_KEYS = _extra_gates.fact_keys("vllm_kernels")
TRIGGER_DISTS, TRIGGER_DIRS = _extra_gates.GATES["vllm_kernels"]

CACHE_KIND = "vllm-extensions-1"  # bump when what classify() returns changes
PLATFORM_FILE = "platforms/cuda.py"  # imported on every CUDA GPU (vllm.platforms.current_platform)
MAX_SOURCE_FILES = 20_000
MAX_SOURCE_BYTES = 4 << 20  # per file
MAX_EXTENSIONS = 64
MAX_SITES = 12  # imports / gates kept per extension
_EXT_SUFFIX = re.compile(r"\.(?:abi3\.|cpython-[^.]+\.)?so$")
_HEADER = re.compile(r"^\s*(?:async\s+)?(try|with|if|elif|else|def|class|for|while|except|finally)\b")
_SUPPRESS_IMPORT = re.compile(r"suppress\([^)]*(ImportError|ModuleNotFoundError|Exception)")
# vLLM's Platform API (vllm/platforms/interface.py): has_device_capability(X) is cc >= X,
# is_device_capability(X) is cc == X, is_device_capability_family(X) is "same major" (X // 10).
_GATE = re.compile(r"(?<![\w.])(?:not\s+)?[\w.]*?\b(is_device_capability_family|is_device_capability|has_device_capability)"
                   r"\(\s*(?:(\d{2,3})|\(\s*(\d+)\s*,\s*(\d+)\s*\))\s*[,)]")


def module_name(rel: str) -> Optional[str]:
    """``vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so`` -> ``vllm.vllm_flash_attn._vllm_fa2_C``."""
    head, base = os.path.split(rel)
    match = _EXT_SUFFIX.search(base)
    if not match:
        return None
    stem = base[:match.start()]
    if not stem or "." in stem or not stem.isidentifier():
        return None
    return ".".join([p for p in head.split("/") if p] + [stem])


def _files(vllm_dir: str, dist: Optional[Dict[str, Any]]) -> Tuple[List[str], List[str]]:
    """(shared objects, .py files) of the vllm package, relative to its parent: RECORD, else a walk."""
    parent = os.path.dirname(vllm_dir.rstrip(os.sep))
    rows: List[str] = []
    if dist and str(dist.get("meta", "")).endswith(".dist-info") and os.path.join(dist["location"], "vllm") == vllm_dir:
        try:
            with open(os.path.join(dist["location"], dist["meta"], "RECORD"), "rb") as handle:
                text = handle.read(64 << 20).decode("utf-8", "replace")
            rows = [line.split(",", 1)[0] for line in text.splitlines() if line.startswith("vllm/")]
        except OSError:
            rows = []
    if not rows:  # an editable checkout or a RECORD-less install: the directory itself
        for top, dirs, names in os.walk(vllm_dir):
            dirs[:] = [d for d in dirs if d not in ("__pycache__", "third_party", "csrc", "tests") or top != vllm_dir]
            rel_top = os.path.relpath(top, parent).replace(os.sep, "/")
            rows.extend(f"{rel_top}/{n}" for n in names)
            if len(rows) > MAX_SOURCE_FILES * 2:
                break
    shared = [r for r in rows if _EXT_SUFFIX.search(r) and "/__pycache__/" not in r]
    sources = [r for r in rows if r.endswith(".py") and "/__pycache__/" not in r][:MAX_SOURCE_FILES]
    return shared, sources


def _enclosing(lines: List[str], index: int) -> List[Tuple[int, str, str]]:
    """The block headers around ``lines[index]``, innermost first: (line number, kind, text)."""
    out: List[Tuple[int, str, str]] = []
    line = lines[index]
    indent = len(line) - len(line.lstrip())
    for j in range(index - 1, -1, -1):
        text = lines[j]
        stripped = text.strip()
        if not stripped or stripped.startswith("#"):
            continue
        level = len(text) - len(text.lstrip())
        if level >= indent:
            continue
        match = _HEADER.match(text)
        if not match:
            continue  # a continuation line of a multi-line header or call
        out.append((j + 1, match.group(1), stripped))
        indent = level
        if level == 0:
            break
    return out


def _function_body(lines: List[str], def_line: int) -> List[Tuple[int, str]]:
    """The lines of the def that starts at ``def_line`` (1-based), with their numbers."""
    start = def_line - 1
    indent = len(lines[start]) - len(lines[start].lstrip())
    body = [(start + 1, lines[start])]
    for j in range(start + 1, len(lines)):
        text = lines[j]
        if text.strip() and len(text) - len(text.lstrip()) <= indent and not text.lstrip().startswith((")", "]", "#")):
            break
        body.append((j + 1, text))
    return body


def _gates(text: str) -> List[Dict[str, Any]]:
    found = []
    for match in _GATE.finditer(text):
        if match.group(0).lstrip().startswith("not "):
            continue  # "not on Blackwell": no positive statement of where it runs
        check = match.group(1)
        arch = int(match.group(2)) if match.group(2) else int(match.group(3)) * 10 + int(match.group(4))
        found.append({"check": check, "arch": arch})
    return found


def _patterns(module: str) -> Tuple[bytes, "re.Pattern[str]", "re.Pattern[str]"]:
    package, _, short = module.rpartition(".")
    full = re.escape(module)
    imports = re.compile(
        rf"^\s*import\s+{full}\b|^\s*from\s+{full}\s+import\b|^\s*from\s+{re.escape(package)}\s+import\s+(?:\(?\s*)?(?:[\w\s,]*,\s*)?{re.escape(short)}\b"
        rf"|find_spec\(\s*['\"]{full}['\"]|import_module\(\s*['\"]{full}['\"]")
    relative = re.compile(rf"^\s*from\s+\.\s+import\s+(?:\(?\s*)?(?:[\w\s,]*,\s*)?{re.escape(short)}\b")
    return short.encode(), imports, relative


def _import_lines(data: bytes) -> bytes:
    """The lines of ``data`` with "import" or "find_spec" in them, joined.

    Every import site the patterns of ``_patterns`` match has one of the two words on the line
    that names the extension, so an extension absent from these lines has no site in the file.
    Searching ~3,000 source files (50 MB in vLLM 0.33) once per extension cost 0.4-0.6 s on a
    cold scan cache; the import lines are a few per cent of them."""
    found = []
    for word in (b"import", b"find_spec"):
        pos = data.find(word)
        while pos >= 0:
            end = data.find(b"\n", pos)
            end = len(data) if end < 0 else end
            found.append(data[data.rfind(b"\n", 0, pos) + 1:end])
            pos = data.find(word, end)
    return b"\n".join(found)


def classify(parent: str, shared: List[str], sources: List[str]) -> List[Dict[str, Any]]:
    """For each extension file, where vLLM imports it, how that import is guarded and gated."""
    exts = []
    for rel in shared[:MAX_EXTENSIONS]:
        module = module_name(rel)
        if module:
            short, imports, relative = _patterns(module)
            exts.append({"module": module, "rel": rel, "short": short, "re": imports, "relative": relative,
                         "dir": os.path.dirname(rel), "imports": [], "gates": [], "required": False})
    if not exts:
        return []
    files = [os.path.join(parent, rel) for rel in sources]
    for rel, (_, data) in zip(sources, _coldstart.read_many(files, MAX_SOURCE_BYTES)):
        if not isinstance(data, bytes):
            continue
        sites = _import_lines(data)
        hits = [e for e in exts if e["short"] in sites]
        if not hits:
            continue
        lines = data.decode("utf-8", "replace").splitlines()
        where_dir = os.path.dirname(rel)
        for ext in hits:
            for index, text in enumerate(lines):
                if ext["short"].decode() not in text or text.lstrip().startswith("#"):
                    continue
                if not (ext["re"].search(text) or (where_dir == ext["dir"] and ext["relative"].search(text))):
                    continue
                _record_site(ext, rel[len("vllm/"):] if rel.startswith("vllm/") else rel, lines, index)
    out = []
    for ext in exts:
        role = "required" if ext["required"] else ("optional" if ext["imports"] else "unreferenced")
        out.append({"module": ext["module"], "path": os.path.join(parent, ext["rel"]), "role": role,
                    "imports": ext["imports"][:MAX_SITES], "gates": ext["gates"][:MAX_SITES]})
    return out


def _record_site(ext: Dict[str, Any], rel: str, lines: List[str], index: int) -> None:
    blocks = _enclosing(lines, index)
    guard = ""
    for number, kind, text in blocks:
        if kind in ("try", "except") or (kind == "with" and _SUPPRESS_IMPORT.search(text)):
            guard = f"{kind} at line {number}"
            break
    lazy = next((text for _, kind, text in blocks if kind == "def"), "")
    conditional = [(n, t) for n, kind, t in blocks if kind in ("if", "elif", "else")]
    how = "find_spec" if "find_spec(" in lines[index] else ("import_module" if "import_module(" in lines[index] else "import")
    site = {"where": f"{rel}:{index + 1}", "how": how}
    if guard:
        site["guard"] = guard
    if lazy:
        site["function"] = lazy.split("(")[0].replace("def ", "").replace("async ", "").strip()
    if conditional:
        site["condition"] = conditional[0][1][:160]
    ext["imports"].append(site)
    if rel == PLATFORM_FILE and how == "import" and not guard and not conditional:
        ext["required"] = True
    # Capability checks of the enclosing conditions and of the function the lookup sits in.
    texts = [(n, t) for n, t in conditional]
    def_line = next((n for n, kind, _ in blocks if kind == "def"), None)
    if def_line is not None:
        texts.extend(_function_body(lines, def_line))
    for number, text in texts:
        for gate in _gates(text):
            entry = dict(gate, where=f"{rel}:{number}")
            if entry not in ext["gates"]:
                ext["gates"].append(entry)


def _vllm_dir(ctx: Dict[str, Any]) -> Optional[str]:
    for location in ctx.get("paths") or []:
        candidate = os.path.join(location, "vllm")
        if os.path.isfile(os.path.join(candidate, "__init__.py")):
            return candidate
    target = (ctx.get("editable") or {}).get("vllm")
    return target if target and os.path.isdir(target) else None


def empty_facts() -> Dict[str, Dict[str, Any]]:
    return _extra_gates.empty_facts("vllm_kernels")


def collect_plain(ctx: Dict[str, Any]) -> Dict[str, Dict[str, Any]]:
    vllm_dir = _vllm_dir(ctx)
    if vllm_dir is None:
        return empty_facts()
    dist = (ctx.get("dists") or {}).get("vllm")
    parent = os.path.dirname(vllm_dir.rstrip(os.sep))
    # Cached by vLLM's RECORD: a reinstall rewrites it. Editable checkouts are read every time.
    record = None
    if dist and str(dist.get("meta", "")).endswith(".dist-info") and os.path.join(dist["location"], "vllm") == vllm_dir:
        record = os.path.join(dist["location"], dist["meta"], "RECORD")
    cache = _scancache.shared(ctx.get("environ"))
    key = _scancache.file_key(record) if record else None
    cached = cache.get(CACHE_KIND, record or "", key)
    if cached is not None and isinstance(cached.get("extensions"), list) and all(
            isinstance(e, dict) and isinstance(e.get("module"), str) and isinstance(e.get("path"), str)
            and e.get("role") in ("required", "optional", "unreferenced") for e in cached["extensions"]):
        extensions = cached["extensions"]
    else:
        shared, sources = _files(vllm_dir, dist)
        extensions = classify(parent, shared, sources) if shared else []
        cache.put(CACHE_KIND, record or "", key, {"extensions": extensions})  # saved by python_stack_collect.collect_plain
    if not extensions:
        return {"vllm.extensions": fact({"root": vllm_dir, "extensions": []}, source=vllm_dir,
                                        detail="no compiled extension in the vllm package")}
    required = [e["module"] for e in extensions if e["role"] == "required"]
    detail = f"{len(extensions)} extensions; needed on every CUDA GPU: {', '.join(required) or 'none found'}"
    return {"vllm.extensions": fact({"root": vllm_dir, "platform_file": os.path.join(vllm_dir, *PLATFORM_FILE.split("/")),
                                     "extensions": extensions}, source=vllm_dir, detail=detail)}
