"""What the installed vLLM does with GPU memory at startup, read from its source (never imported).

Three things decide whether vLLM refuses to start on a GPU others already use:

1. the default ``--gpu-memory-utilization``: ``CacheConfig.gpu_memory_utilization``'s default
   (0.9 up to 0.11, ``Field(default=0.92, …)`` in 0.33.0). 0.34.0 leaves it ``None`` and resolves
   it in ``CacheConfig.resolved_gpu_memory_utilization``: ``1.0`` with the extensible KV cache,
   ``DEFAULT_GPU_MEMORY_UTILIZATION`` (0.92) otherwise (vllm/config/cache.py);
2. whether the extensible KV cache is on (0.34.0): ``--enable-extensible-kv-cache``; unset, vLLM
   turns it on unless one of the ``unsupported = …`` branches of
   ``VllmConfig._resolve_extensible_kv_cache`` holds (not CUDA/ROCm, ``kv_cache_memory_bytes`` or
   ``num_gpu_blocks_override`` set, elastic EP, some KV connectors) (vllm/config/vllm.py);
3. the check itself, ``request_memory`` in vllm/v1/worker/utils.py: ``raise ValueError(f"Free
   memory on device … is less than desired GPU memory utilization …")``, which 0.34.0 runs only
   ``and not cache_config.enable_extensible_kv_cache``.

``read`` returns those facts for one vLLM tree; ``for_command`` decides them for one command (its
typed options). Each piece that is not found is None, and the rule says unknown. Stdlib only.
"""

from __future__ import annotations

import ast
import glob
import os
from typing import Any, Dict, List, Optional, Tuple

from gpudoctor.probes.launch.vllm_index import _last, _name, _read

PHRASE = "less than desired GPU memory utilization"
CHECK_FILES = ("v1/worker/utils.py", "v1/worker/gpu_worker.py", "worker/worker.py", "v1/worker/*.py", "worker/*.py")
MAX_CHECK_FILES = 40


def _tree(path: str) -> Optional[ast.Module]:
    text = _read(path)
    if text is None:
        return None
    try:
        return ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _class(tree: Optional[ast.Module], name: str) -> Optional[ast.ClassDef]:
    for node in tree.body if tree else ():
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    return None


def _field_default(cls: Optional[ast.ClassDef], name: str) -> Tuple[bool, Any]:
    """(found, default) of a dataclass field: ``x: T = c`` or ``x: T = Field(default=c, …)``;
    a default that is not a constant is (True, ast node)."""
    for node in cls.body if cls else ():
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
            value = node.value
            if isinstance(value, ast.Call) and _last(value.func) == "Field":
                value = next((k.value for k in value.keywords if k.arg == "default"), value.args[0] if value.args else None)
            if isinstance(value, ast.Constant):
                return True, value.value
            return True, value
    return False, None


def _class_constant(cls: Optional[ast.ClassDef], name: str) -> Optional[float]:
    for node in cls.body if cls else ():
        target = node.target if isinstance(node, ast.AnnAssign) else node.targets[0] if isinstance(node, ast.Assign) else None
        if isinstance(target, ast.Name) and target.id == name and isinstance(node.value, ast.Constant) \
                and isinstance(node.value.value, (int, float)):
            return float(node.value.value)
    return None


def _resolved_utilization(cls: Optional[ast.ClassDef]) -> Dict[str, Optional[float]]:
    """0.34.0's ``resolved_gpu_memory_utilization``: ``if self.enable_extensible_kv_cache: return 1.0``
    then ``return self.DEFAULT_GPU_MEMORY_UTILIZATION``."""
    out: Dict[str, Optional[float]] = {"extensible": None, "otherwise": None}
    func = next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "resolved_gpu_memory_utilization"), None) if cls else None
    for node in func.body if func else ():
        if isinstance(node, ast.If) and _last(node.test) == "enable_extensible_kv_cache":
            ret = next((n for n in node.body if isinstance(n, ast.Return)), None)
            if ret is not None and isinstance(ret.value, ast.Constant) and isinstance(ret.value.value, (int, float)):
                out["extensible"] = float(ret.value.value)
        elif isinstance(node, ast.Return) and isinstance(node.value, ast.Attribute) and _name(node.value.value) == "self":
            out["otherwise"] = _class_constant(cls, node.value.attr)
        elif isinstance(node, ast.Return) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, (int, float)):
            out["otherwise"] = float(node.value.value)
    return out


def _cache_config(package: str) -> Tuple[Optional[ast.ClassDef], str]:
    """vLLM's CacheConfig class and its file: vllm/config/cache.py (0.10+), vllm/config.py (0.8), or
    another module of vllm/config/."""
    candidates = [os.path.join(package, "config", "cache.py"), os.path.join(package, "config.py")]
    candidates += sorted(glob.glob(os.path.join(package, "config", "*.py")))[:60]
    for path in candidates:
        text = _read(path)
        if text and "class CacheConfig" in text:
            found = _class(_tree(path), "CacheConfig")
            if found is not None:
                return found, os.path.relpath(path, os.path.dirname(package))
    return None, "vllm/config"


def _utilization(package: str) -> Dict[str, Any]:
    cache, where = _cache_config(package)
    source = f"{where} CacheConfig.gpu_memory_utilization"
    found, default = _field_default(cache, "gpu_memory_utilization")
    if not found:  # 0.8: CacheConfig is a plain class; EngineArgs holds the default
        engine = _class(_tree(os.path.join(package, "engine", "arg_utils.py")), "EngineArgs")
        found, default = _field_default(engine, "gpu_memory_utilization")
        source = "vllm/engine/arg_utils.py EngineArgs.gpu_memory_utilization"
    if isinstance(default, (int, float)) and not isinstance(default, bool):
        return {"default": float(default), "with_extensible": None, "source": source}
    if found and default is None:
        resolved = _resolved_utilization(cache)
        return {"default": resolved["otherwise"], "with_extensible": resolved["extensible"],
                "source": f"{where} CacheConfig.resolved_gpu_memory_utilization"}
    return {"default": None, "with_extensible": None, "source": source}


def _names(node: ast.AST) -> List[str]:
    return sorted({n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)} | {n.id for n in ast.walk(node) if isinstance(n, ast.Name)})


def _extensible(package: str) -> Optional[Dict[str, Any]]:
    """The extensible KV cache: its field's default and, when unset, the branches that turn it off."""
    cache, _ = _cache_config(package)
    found, default = _field_default(cache, "enable_extensible_kv_cache")
    if not found:
        return None
    out: Dict[str, Any] = {"default": default if isinstance(default, bool) or default is None else "?", "off_when": [],
                           "resolver": None}
    for path in sorted(glob.glob(os.path.join(package, "config", "*.py")))[:60]:
        text = _read(path)
        if not text or "enable_extensible_kv_cache" not in text or "unsupported" not in text:
            continue
        tree = _tree(path)
        for func in ast.walk(tree) if tree else ():
            if not isinstance(func, ast.FunctionDef):
                continue
            local: Dict[str, List[str]] = {}
            branches: List[Dict[str, Any]] = []
            for node in ast.walk(func):
                if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                    local[node.targets[0].id] = _names(node.value)
                if isinstance(node, ast.If) and any(isinstance(s, ast.Assign) and any(_name(t) == "unsupported" for t in s.targets)
                                                    and not (isinstance(s.value, ast.Constant) and s.value.value is None)
                                                    for s in node.body):
                    names = _names(node.test)
                    for name in list(names):
                        names += local.get(name, [])
                    branches.append({"test": ast.unparse(node.test)[:200], "names": sorted(set(names))})
            if branches:
                out["off_when"] = branches
                out["resolver"] = f"{os.path.relpath(path, os.path.dirname(package))}:{func.lineno} {func.name}"
                return out
    return out


def _check(package: str) -> Optional[Dict[str, Any]]:
    """The raise of "Free memory on device … less than desired GPU memory utilization": where, its
    words (the f-string with its placeholders named), and what must hold for it to run."""
    seen: List[str] = []
    for pattern in CHECK_FILES:
        for path in sorted(glob.glob(os.path.join(package, pattern))):
            if path in seen or len(seen) >= MAX_CHECK_FILES:
                continue
            seen.append(path)
            text = _read(path)
            if not text or PHRASE not in text:
                continue
            tree = _tree(path)
            for node in ast.walk(tree) if tree else ():
                if not isinstance(node, ast.If):
                    continue
                raise_node = next((s for s in node.body if isinstance(s, ast.Raise)), None)
                message = raise_node.exc.args[0] if raise_node is not None and isinstance(raise_node.exc, ast.Call) \
                    and raise_node.exc.args else None
                words = _template(message) if message is not None else None
                if not words or PHRASE not in words or "engine's budget" in words:
                    continue
                tests = node.test.values if isinstance(node.test, ast.BoolOp) and isinstance(node.test.op, ast.And) else [node.test]
                skipped = any(isinstance(t, ast.UnaryOp) and isinstance(t.op, ast.Not) and _last(t.operand) == "enable_extensible_kv_cache"
                              for t in tests)
                return {"words": words, "where": f"{os.path.relpath(path, os.path.dirname(package))}:{node.lineno}",
                        "condition": ast.unparse(node.test)[:200], "skipped_with_extensible": skipped}
    return None


PLACEHOLDERS = (("device", "{device}"), ("free_memory", "{free}"), ("total_memory", "{total}"),
                ("utilization", "{utilization}"), ("requested_memory", "{requested}"))


def _template(node: ast.AST) -> Optional[str]:
    """An f-string (or a sum of them) with each value replaced by a named placeholder."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value.replace("{", "{{").replace("}", "}}")
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _template(node.left), _template(node.right)
        return left + right if left is not None and right is not None else None
    if not isinstance(node, ast.JoinedStr):
        return None
    parts = []
    for value in node.values:
        if isinstance(value, ast.Constant):
            parts.append(str(value.value).replace("{", "{{").replace("}", "}}"))
        elif isinstance(value, ast.FormattedValue):
            expr = ast.unparse(value.value)
            parts.append(next((p for key, p in PLACEHOLDERS if key in expr), "{other}"))
    return "".join(parts)


def read(package: str) -> Optional[Dict[str, Any]]:
    """The memory facts of this vLLM tree; None when none of them is found."""
    out = {"utilization": _utilization(package), "extensible": _extensible(package), "check": _check(package)}
    if out["utilization"]["default"] is None and out["extensible"] is None and out["check"] is None:
        return None
    return out


# --- one command ---------------------------------------------------------------------------------------
# The platform gpudoctor judges: NVIDIA GPUs, where vLLM's current_platform is CUDA.
PLATFORM = {"is_cuda_alike": True, "is_cuda": True, "is_rocm": False, "is_tpu": False, "is_xpu": False, "is_cpu": False}


def _value(node: ast.AST, given: Dict[str, Any]) -> Tuple[bool, Any]:
    """(known, value) of ``cache_config.kv_cache_memory_bytes``-like attributes: the command's value
    of the flag with that dest, or the EngineArgs default when the command does not give it (None /
    False for every field the resolver reads in 0.34.0)."""
    if isinstance(node, ast.Attribute) and node.attr in given.get("__dests__", ()):
        return True, given.get(node.attr)
    return False, None


def _evaluate(node: ast.AST, given: Dict[str, Any]) -> Optional[bool]:
    """True / False, or None when the command alone cannot say."""
    if isinstance(node, ast.BoolOp):
        values = [_evaluate(v, given) for v in node.values]
        if isinstance(node.op, ast.And):
            return False if False in values else None if None in values else True
        return True if True in values else None if None in values else False
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        inner = _evaluate(node.operand, given)
        return None if inner is None else not inner
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and _last(node.func.value) == "current_platform":
        return PLATFORM.get(node.func.attr)
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.comparators[0], ast.Constant) \
            and node.comparators[0].value is None and isinstance(node.ops[0], (ast.Is, ast.IsNot)):
        known, value = _value(node.left, given)
        if not known:
            return None
        return (value is None) == isinstance(node.ops[0], ast.Is)
    known, value = _value(node, given)
    return bool(value) if known else None


def for_command(memory: Optional[Dict[str, Any]], given: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """What this vLLM does for one command. ``given``: dest -> value for every flag of the command,
    and "__dests__": every dest this vLLM defines."""
    if not memory:
        return None
    util = memory.get("utilization") or {}
    ext = memory.get("extensible")
    check = memory.get("check")
    out: Dict[str, Any] = {"extensible": False, "extensible_why": "this vLLM has no extensible KV cache"}
    if ext is not None:
        asked = given.get("enable_extensible_kv_cache")
        if isinstance(asked, bool):
            out.update(extensible=asked, extensible_why=f"--{'' if asked else 'no-'}enable-extensible-kv-cache")
        elif ext.get("default") is not None and ext.get("default") != "?":
            out.update(extensible=bool(ext["default"]), extensible_why="CacheConfig.enable_extensible_kv_cache's default")
        else:
            out.update(extensible=True, extensible_why=f"unset: vLLM turns it on (on CUDA) unless one of {ext.get('resolver')}'s "
                                                        "conditions holds; none does for this command")
            for branch in ext.get("off_when") or []:
                try:
                    test = ast.parse(branch["test"], mode="eval").body
                except (SyntaxError, KeyError, TypeError):
                    test = None
                verdict = _evaluate(test, given) if test is not None else None
                if verdict is None and not any(n in given and n != "__dests__" for n in branch.get("names") or []):
                    verdict = False  # only fields at their defaults: vLLM's default is the extensible cache on
                if verdict is True:
                    out.update(extensible=False, extensible_why=f"unset, and vLLM turns it off because {branch['test']}")
                    break
                if verdict is None:
                    out.update(extensible=None, extensible_why=f"unset; whether vLLM turns it off depends on {branch['test']} "
                                                               "(a KV connector's settings), not read here")
    chosen = given.get("gpu_memory_utilization")
    if isinstance(chosen, (int, float)) and not isinstance(chosen, bool):
        out.update(utilization=float(chosen), utilization_from="--gpu-memory-utilization")
    elif out["extensible"] is True and util.get("with_extensible") is not None:
        out.update(utilization=util["with_extensible"], utilization_from=f"the default with the extensible KV cache ({util.get('source')})")
    elif out["extensible"] is None and util.get("with_extensible") is not None:
        out.update(utilization=None, utilization_from="the default depends on the extensible KV cache, which is not decided")
    else:
        out.update(utilization=util.get("default"), utilization_from=f"the default ({util.get('source')})")
    if check is None:
        out.update(check_runs=None, check_why="no free-memory check found in this vLLM's source")
    else:
        out.update(words=check["words"], where=check["where"])
        if check.get("skipped_with_extensible") and out["extensible"] is not False:
            runs = False if out["extensible"] else None
            out.update(check_runs=runs, check_why=f"{check['where']} runs it only `{check['condition']}`; the extensible KV cache "
                                                  f"is {'on' if runs is False else 'not decided'} ({out['extensible_why']})")
        else:
            out.update(check_runs=True, check_why=f"{check['where']}: `{check['condition']}`")
    return out
