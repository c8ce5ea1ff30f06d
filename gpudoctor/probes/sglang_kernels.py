"""Which of sgl_kernel's compiled extensions SGLang loads on which GPU, read from sgl_kernel's own source.

Standard library only and Python 3.8-compatible: it runs in the doctor's process or inside
the interpreter named by ``--python`` (python_stack's bootstrap serves it as ``gpudoctor.probes.sglang_kernels``);
python_stack_collect.collect_plain calls ``collect_plain(ctx)``.

sglang-kernel (the ``sgl_kernel`` package SGLang requires) ships one ``common_ops`` extension
per GPU family and a loader that picks one by compute capability
(``sgl_kernel/load_utils.py``, ``_load_architecture_specific_ops``: in 0.4.10 ``sm90/`` when
``compute_capability == 90``, ``sm100/`` for every other GPU), imported by
``sgl_kernel/__init__.py`` on every CUDA GPU. Its FA3 (``flash_ops``) runs only where
``is_fa3_supported`` says (``sgl_kernel/flash_attn.py``: cc major 8 or 9; the functions raise
NotImplementedError elsewhere), and the other extensions (``flashmla_ops``, ``spatial_ops``,
``infllm_ops``) are imported guarded or lazily by the code that uses them. None of that is kept
in a list here: the loader's branches and the FA3 check are read from the installed source
with ``ast`` (https://github.com/sgl-project/sglang/tree/main/sgl-kernel/python/sgl_kernel).

Fact ``sglang.extensions``: ``{"root", "loader": {"where", "branches": [{"subdir", "when",
"line"}]} | None, "extensions": [{module, path, role, imports, gates, ...}]}`` with role
"loader" (a ``common_ops`` the loader picks on the GPUs of its branches: ``subdir``), "gated"
(used only on the cc majors in ``majors``, read from ``gate``), or, as vllm_kernels
classifies them, "optional" (imported only guarded or lazily) or "unreferenced".
"""

from __future__ import annotations

import ast
import os
import re
from typing import Any, Dict, List, Optional, Tuple

from gpudoctor.probes import extra_gates as _extra_gates
from gpudoctor.probes import python_stack_read as _stack_read
from gpudoctor.probes import vllm_kernels as _vllm_kernels
from gpudoctor.probes import scancache as _scancache
from gpudoctor.probes import coldstart as _coldstart
fact = _stack_read.fact

FACT_KEYS = _extra_gates.fact_keys("sglang_kernels")
TRIGGER_DISTS, TRIGGER_DIRS = _extra_gates.GATES["sglang_kernels"]
PACKAGE = "sgl_kernel"
LOADER_FILE = "load_utils.py"
MAX_FILES = 2_000
MAX_BYTES = 1 << 20
# cc as the loader computes it: properties.major * 10 + properties.minor (load_utils.py,
# _get_compute_capability); without that form the numbers in its branches mean something else.
_CC_FORM = re.compile(r"\.major\s*\*\s*10\s*\+\s*\w+\.minor")
_FA3_CHECK = re.compile(r"^is_fa\d*_supported$")
_OPS = {ast.Eq: "==", ast.NotEq: "!=", ast.GtE: ">=", ast.Gt: ">", ast.LtE: "<=", ast.Lt: "<", ast.Is: "is", ast.IsNot: "is not"}


def _read(path: str) -> Optional[str]:
    try:
        with open(path, "rb") as handle:
            return handle.read(MAX_BYTES).decode("utf-8", "replace")
    except OSError:
        return None


def _clauses(test: ast.AST) -> Optional[List[Dict[str, Any]]]:
    """``cc == 90``, ``cc is not None``, ``a and b`` -> [{"op", "value"}] (a conjunction); None if it is anything else."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        out: List[Dict[str, Any]] = []
        for value in test.values:
            part = _clauses(value)
            if part is None:
                return None
            out.extend(part)
        return out
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.left, ast.Name):
        op = _OPS.get(type(test.ops[0]))
        right = test.comparators[0]
        if op and isinstance(right, ast.Constant) and (right.value is None or type(right.value) is int):
            return [{"op": op, "value": right.value}]
    return None


def _subdir_assigned(body: List[ast.stmt]) -> Optional[str]:
    """The directory a branch picks: its ``NAME = "smXY"`` assignment of a string constant."""
    for node in body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str) \
                and re.match(r"^sm\d+[a-z]?$", node.value.value):
            return node.value.value
    return None


def loader_branches(source: str) -> Optional[List[Dict[str, Any]]]:
    """The if/elif/else chain of the loader that assigns the ``smXY`` directory, in order, or None."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if not isinstance(node, ast.If) or _subdir_assigned(node.body) is None:
            continue
        branches: List[Dict[str, Any]] = []
        current: Optional[ast.If] = node
        while current is not None:
            subdir = _subdir_assigned(current.body)
            clauses = _clauses(current.test)
            if subdir is None or clauses is None:
                return None  # a branch we cannot read: say nothing rather than guess
            branches.append({"subdir": subdir, "when": clauses, "line": current.lineno})
            orelse = current.orelse
            if len(orelse) == 1 and isinstance(orelse[0], ast.If):
                current = orelse[0]
                continue
            if orelse:
                subdir = _subdir_assigned(orelse)
                if subdir is None:
                    return None
                branches.append({"subdir": subdir, "when": [{"op": "else", "value": None}], "line": orelse[0].lineno})
            current = None
        return branches
    return None


def fa3_majors(source: str) -> Optional[Tuple[List[int], str, int]]:
    """(cc majors, function name, line) of the ``is_fa3_supported`` check in ``source``: the
    ``get_device_capability(…)[0] == N`` (or ``major == N``) comparisons it returns on."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef) or not _FA3_CHECK.match(node.name):
            continue
        majors = []
        for sub in ast.walk(node):
            if not (isinstance(sub, ast.Compare) and len(sub.ops) == 1 and isinstance(sub.ops[0], ast.Eq)):
                continue
            right, left = sub.comparators[0], sub.left
            if not (isinstance(right, ast.Constant) and type(right.value) is int):
                continue
            capability = isinstance(left, ast.Subscript) and "get_device_capability" in ast.dump(left.value) and any(
                isinstance(n, ast.Constant) and n.value == 0 and type(n.value) is int for n in ast.walk(left.slice))
            if capability or (isinstance(left, ast.Name) and left.id == "major"):
                majors.append(right.value)
        if majors:
            return sorted(set(majors)), node.name, node.lineno
    return None


def _files(root: str) -> Tuple[List[str], List[str]]:
    """(shared objects, .py files) under the sgl_kernel directory, relative to its parent."""
    parent = os.path.dirname(root.rstrip(os.sep))
    shared: List[str] = []
    sources: List[str] = []
    for top, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        rel_top = os.path.relpath(top, parent).replace(os.sep, "/")
        for name in names:
            rel = f"{rel_top}/{name}"
            if name.endswith(".py"):
                sources.append(rel)
            elif ".so" in name:
                shared.append(rel)
        if len(shared) + len(sources) > MAX_FILES:
            break
    return sorted(shared), sorted(sources)


def _package_dir(ctx: Dict[str, Any]) -> Optional[str]:
    for location in ctx.get("paths") or []:
        candidate = os.path.join(location, PACKAGE)
        if os.path.isfile(os.path.join(candidate, "__init__.py")):
            return candidate
    target = (ctx.get("editable") or {}).get(PACKAGE)
    return target if target and os.path.isdir(target) else None


def empty_facts() -> Dict[str, Dict[str, Any]]:
    return _extra_gates.empty_facts("sglang_kernels")


# --- what SGLang imports only under try/except ---------------------------------------------
# SGLang imports some compiled dependencies only inside ``try: … except Exception`` and falls
# back when they fail (sglang/srt/layers/moe/token_dispatcher/deepep.py: "deep_ep's import-time
# host checks raise more than ImportError; defer any failure to the first DeepEP use so other
# models still start"): such a package is an optional backend, used only when asked for.
OPTIONAL_KIND = "sglang-optional-imports-1"  # bump when optional_imports() changes what it returns
MAX_SOURCE_FILES = 20_000
MAX_SOURCE_BYTES = 4 << 20
_IMPORT = re.compile(rb"[ \t]*(?:from[ \t]+([A-Za-z_]\w*)[\w.]*[ \t]+import\b|import[ \t]+([A-Za-z_]\w*))")


def _import_lines(data: bytes) -> List[Tuple[int, bytes]]:
    """(offset, text) of each line with the word "import": found with bytes.find (75 MB of SGLang
    0.5.23's source in ~0.1 s), where a multi-line regex over every line start took ~1 s."""
    out = []
    pos = data.find(b"import")
    while pos >= 0:
        start = data.rfind(b"\n", 0, pos) + 1
        end = data.find(b"\n", pos)
        end = len(data) if end < 0 else end
        out.append((start, data[start:end]))
        pos = data.find(b"import", end)
    return out
_CATCHES = re.compile(r"^\s*except\b")


def _guarded_by_try(lines: List[str], index: int) -> Optional[int]:
    """The line of the ``try`` (with an ``except``) that encloses ``lines[index]``, or None."""
    for number, kind, _ in _vllm_kernels._enclosing(lines, index):
        if kind == "try":
            indent = len(lines[number - 1]) - len(lines[number - 1].lstrip())
            for later in lines[index + 1:]:
                if later.strip() and len(later) - len(later.lstrip()) <= indent:
                    return number if _CATCHES.match(later) else None
            return None
        if kind in ("def", "class"):
            return None
    return None


def optional_imports(sglang_dir: str, parent: str) -> Dict[str, List[str]]:
    """Top-level packages installed beside SGLang that its source imports only inside try/except: name -> sites."""
    sources: List[str] = []
    for top, dirs, names in os.walk(sglang_dir):
        dirs[:] = [d for d in dirs if d not in ("__pycache__", "test", "tests")]
        sources.extend(os.path.join(top, n) for n in names if n.endswith(".py"))
        if len(sources) > MAX_SOURCE_FILES:
            break
    guarded: Dict[str, List[str]] = {}
    unguarded = {b"sglang", b"__future__"}
    installed: Dict[bytes, bool] = {}
    for path, data in _coldstart.read_many(sorted(sources)[:MAX_SOURCE_FILES], MAX_SOURCE_BYTES):
        if not isinstance(data, bytes):
            continue
        lines: Optional[List[str]] = None
        for start, line_text in _import_lines(data):
            match = _IMPORT.match(line_text)
            if not match:
                continue
            name = match.group(1) or match.group(2)
            if name in unguarded:
                continue
            if name not in installed:
                installed[name] = os.path.isdir(os.path.join(parent, name.decode("ascii", "replace")))
            if not installed[name]:
                continue
            if lines is None:  # split only a file that imports an installed package not yet seen unguarded
                lines = data.decode("utf-8", "replace").splitlines()
            index = data.count(b"\n", 0, start)
            text = name.decode("ascii", "replace")
            if _guarded_by_try(lines, index) is None:
                unguarded.add(name)
                guarded.pop(text, None)
            else:
                where = os.path.relpath(path, parent).replace(os.sep, "/")
                guarded.setdefault(text, []).append(f"{where}:{index + 1}")
    return {name: sites[:3] for name, sites in sorted(guarded.items())}


def collect_optional(ctx: Dict[str, Any]) -> Dict[str, Dict[str, Any]]:
    sglang_dir = None
    for location in ctx.get("paths") or []:
        if os.path.isfile(os.path.join(location, "sglang", "__init__.py")):
            sglang_dir = os.path.join(location, "sglang")
            break
    if sglang_dir is None:
        return {"sglang.optional_imports": fact(None, "absent", "sglang", "SGLang is not installed")}
    dist = (ctx.get("dists") or {}).get("sglang")
    record = None
    if dist and str(dist.get("meta", "")).endswith(".dist-info") and os.path.join(dist["location"], "sglang") == sglang_dir:
        record = os.path.join(dist["location"], dist["meta"], "RECORD")
    cache = _scancache.shared(ctx.get("environ"))
    key = _scancache.file_key(record) if record else None
    cached = cache.get(OPTIONAL_KIND, record or "", key)
    if cached is not None and isinstance(cached.get("imports"), dict):
        found = cached["imports"]
    else:
        found = optional_imports(sglang_dir, os.path.dirname(sglang_dir))
        cache.put(OPTIONAL_KIND, record or "", key, {"imports": found})  # saved by python_stack_collect.collect_plain
    return {"sglang.optional_imports": fact(found, source=sglang_dir,
                                            detail=f"imported only under try/except: {', '.join(found) or 'none'}")}


def classify(root: str) -> Dict[str, Any]:
    parent = os.path.dirname(root.rstrip(os.sep))
    shared, sources = _files(root)
    extensions = _vllm_kernels.classify(parent, shared, sources) if shared else []
    loader: Optional[Dict[str, Any]] = None
    text = _read(os.path.join(root, LOADER_FILE))
    if text is not None:
        try:
            branches = loader_branches(text)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            branches = None
        if branches and _CC_FORM.search(text):
            loader = {"where": f"{PACKAGE}/{LOADER_FILE}", "branches": branches}
    subdirs = {b["subdir"] for b in (loader or {}).get("branches", [])}
    checks: Dict[str, Optional[Tuple[List[int], str, int]]] = {}
    for ext in extensions:
        rel = os.path.relpath(ext["path"], parent).replace(os.sep, "/")
        head = rel.split("/")
        if len(head) == 3 and head[1] in subdirs:
            ext["role"] = "loader"
            ext["subdir"] = head[1]
            continue
        # A gate in the module that imports it at its top (sgl_kernel/flash_attn.py for flash_ops).
        for site in ext.get("imports") or []:
            where = str(site.get("where", "")).rsplit(":", 1)[0]
            if site.get("function") or not where.endswith(".py"):
                continue
            if where not in checks:
                source = _read(os.path.join(parent, where))
                try:
                    checks[where] = fa3_majors(source) if source else None
                except (SyntaxError, ValueError, RecursionError, MemoryError):
                    checks[where] = None
            found = checks[where]
            if found:
                majors, name, line = found
                ext["role"] = "gated"
                ext["majors"] = majors
                ext["gate"] = f"{name}() at {where}:{line}"
                break
    return {"root": root, "loader": loader, "extensions": extensions}


# --- extensions their own package uses only on newer GPUs ------------------------------------
# A package beside SGLang may ship one extension per feature, each built for the GPUs of that
# feature, and load them all: torchao 0.17 (which SGLang 0.5.12-0.5.17 require) loads every
# ``torchao/_C*.so`` (torchao/__init__.py) and ``_C_mxfp8`` has sm_100 code only, while its Python
# uses the MX-FP8 kernels only where ``torchao/prototype/mx_formats/kernels.py`` allows:
# ``_mxfp8_cuda_kernels_available = (torch.cuda.is_available() and is_sm_at_least_100() and …)``.
# Fact ``sglang.capability_gates``: {extension path: {"min_sm", "gate", "name", "site"}} for a
# ``_C_<feature>`` extension whose package assigns a name holding <feature> from an
# ``is_sm_at_least_<N>()`` call. https://github.com/pytorch/ao/blob/main/torchao/prototype/mx_formats/kernels.py
GATES_KIND = "sglang-capability-gates-1"  # bump when capability_gates() changes what it returns
_FEATURE_EXT = re.compile(r"^_C_([a-z][a-z0-9]*?)(?:_\d+a?)?(?:\.abi3|\.cpython-[\w-]+)?\.so$")
_SM_AT_LEAST = re.compile(r"^is_sm_at_least_(\d+)$")
MAX_GATE_FILES = 5_000


def _sm_gate(value: ast.AST) -> Optional[Tuple[int, str]]:
    for node in ast.walk(value):
        if isinstance(node, ast.Call) and not node.args:
            name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
            match = _SM_AT_LEAST.match(name or "")
            if match:
                return int(match.group(1)), name + "()"
    return None


def capability_gates(parent: str) -> Dict[str, Dict[str, Any]]:
    """The ``_C_<feature>`` extensions of the packages in ``parent`` whose own Python names the GPUs
    that use them (see above)."""
    out: Dict[str, Dict[str, Any]] = {}
    try:
        tops = sorted(os.listdir(parent))
    except OSError:
        return out
    for top in tops:
        package = os.path.join(parent, top)
        try:
            features = {}
            for name in os.listdir(package):
                match = _FEATURE_EXT.match(name)
                if match:
                    features.setdefault(match.group(1), []).append(os.path.join(package, name))
        except OSError:
            continue
        if not features:
            continue
        sources: List[str] = []
        for root, dirs, names in os.walk(package):
            dirs[:] = [d for d in dirs if d not in ("__pycache__", "test", "tests")]
            sources.extend(os.path.join(root, n) for n in names if n.endswith(".py"))
            if len(sources) > MAX_GATE_FILES:
                break
        for path, data in _coldstart.read_many(sorted(sources)[:MAX_GATE_FILES], MAX_BYTES):
            if not isinstance(data, bytes) or b"is_sm_at_least_" not in data:
                continue
            wanted = [f for f in features if f.encode() in data and not all(p in out for p in features[f])]
            if not wanted:
                continue
            try:
                tree = ast.parse(data)
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                continue
            for node in ast.walk(tree):
                if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)):
                    continue
                target = node.targets[0].id
                for feature in wanted:
                    gate = _sm_gate(node.value) if feature in target.lower() else None
                    if gate:
                        site = f"{os.path.relpath(path, parent)}:{node.lineno}"
                        for ext in features[feature]:
                            out.setdefault(ext, {"min_sm": gate[0], "gate": gate[1], "name": target, "site": site})
    return out


def collect_gates(ctx: Dict[str, Any]) -> Dict[str, Dict[str, Any]]:
    parents = [p for p in ctx.get("paths") or [] if os.path.isfile(os.path.join(p, "sglang", "__init__.py"))]
    if not parents:
        return {"sglang.capability_gates": fact(None, "absent", "sglang", "SGLang is not installed")}
    parent = parents[0]
    cache = _scancache.shared(ctx.get("environ"))
    key = _scancache.file_key(os.path.join(parent, "sglang", "__init__.py"))
    stamp = [sorted(os.listdir(parent))] if key else None
    cached = cache.get(GATES_KIND, parent, key)
    if cached is not None and cached.get("stamp") == stamp and isinstance(cached.get("gates"), dict):
        found = cached["gates"]
    else:
        found = capability_gates(parent)
        cache.put(GATES_KIND, parent, key, {"gates": found, "stamp": stamp})
    return {"sglang.capability_gates": fact(found, source=parent,
                                            detail=f"{len(found)} extension(s) their package uses only from a compute capability on")}


def collect_plain(ctx: Dict[str, Any]) -> Dict[str, Dict[str, Any]]:
    out = collect_optional(ctx)
    out.update(collect_gates(ctx))
    out.update(_collect_kernels(ctx))
    return out


def _collect_kernels(ctx: Dict[str, Any]) -> Dict[str, Dict[str, Any]]:
    root = _package_dir(ctx)
    if root is None:
        return {"sglang.extensions": empty_facts()["sglang.extensions"]}
    value = classify(root)
    loader = value["loader"]
    detail = (f"{len(value['extensions'])} extensions; loader {loader['where']}: "
              + ", ".join(f"{b['subdir']}/ " + ("otherwise" if b["when"][0]["op"] == "else" else
                          "when cc " + " and ".join(f"{c['op']} {c['value']}" for c in b["when"])) for b in loader["branches"])
              if loader else f"{len(value['extensions'])} extensions; no compute-capability loader read")
    return {"sglang.extensions": fact(value, source=root, detail=detail)}
