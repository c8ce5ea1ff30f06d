"""Which of sgl_kernel's compiled extensions SGLang loads on which GPU, read from sgl_kernel's own source.

Standard library only and Python 3.8-compatible: it runs in the doctor's process or inside
the interpreter named by ``--python`` (pystack's bootstrap loads it as
``gpudoctor_sglang_kernels``); pyenv.collect_plain calls ``collect_plain(ctx)``.

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
import sys
from typing import Any, Dict, List, Optional, Tuple

_pyenv = sys.modules.get("gpudoctor_pyenv")
if _pyenv is None:
    from gpudoctor.probes import pyenv as _pyenv
_vllm_kernels = sys.modules.get("gpudoctor_vllm_kernels")
if _vllm_kernels is None:
    from gpudoctor.probes import vllm_kernels as _vllm_kernels
fact = _pyenv.fact

FACT_KEYS = ("sglang.extensions",)
TRIGGER_DISTS = ("sglang-kernel", "sgl-kernel")
TRIGGER_DIRS = ("sgl_kernel",)
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
    return {"sglang.extensions": fact(None, "absent", PACKAGE, "sgl_kernel (sglang-kernel) is not installed")}


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


def collect_plain(ctx: Dict[str, Any]) -> Dict[str, Dict[str, Any]]:
    root = _package_dir(ctx)
    if root is None:
        return empty_facts()
    value = classify(root)
    loader = value["loader"]
    detail = (f"{len(value['extensions'])} extensions; loader {loader['where']}: "
              + ", ".join(f"{b['subdir']}/ " + ("otherwise" if b["when"][0]["op"] == "else" else
                          "when cc " + " and ".join(f"{c['op']} {c['value']}" for c in b["when"])) for b in loader["branches"])
              if loader else f"{len(value['extensions'])} extensions; no compute-capability loader read")
    return {"sglang.extensions": fact(value, source=root, detail=detail)}
