"""When vLLM checks a flag's value at all: the config class that holds the check, and whether vLLM
builds that class for every command or only under a condition.

A range such as ``MultiModalConfig.video_pruning_rate: Field(ge=0.0, lt=1.0)`` is checked by
pydantic when vLLM builds a ``MultiModalConfig``, and vLLM builds one only for a multimodal
model (``ModelConfig.__post_init__``: ``if self._model_info.supports_multimodal:
self.multimodal_config = MultiModalConfig(**mm_config_kwargs)``, vllm/config/model.py, 0.33 and
0.34); ``LoRAConfig(max_loras=…)`` only with ``--enable-lora`` (``LoRAConfig(…) if
self.enable_lora else None`` in ``EngineArgs.create_engine_config``). So `vllm serve M
--video-pruning-rate 1` passes for a text model and `--max-loras 0` passes without
``--enable-lora``.

This module finds, on the syntax tree of vllm/config/ and vllm/engine/arg_utils.py, every place
that builds a class (``Cls(...)``) and the ``if`` / ``… if … else …`` around it. A class built at
least once outside any condition is unconditional; otherwise its checks hold only under the
condition. A condition that is one of EngineArgs' own switches (``self.enable_lora``) is decided
from the command; any other (the model's kind, the platform) is not known before the model is
read, so a value it would refuse is reported as unknown, never as a block. Stdlib only.
"""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from gpudoctor.probes.launch.vllm_index import _last, _name, _Source
from gpudoctor.probes.launch.vllm_index import _read as _read_source

MAX_SITES = 64  # constructions examined per class (0.34 builds each config class in 1 to 3 places)


@dataclass
class Condition:
    """The test vLLM must pass before it builds the class that checks a value."""

    text: str  # the condition as written in vLLM ("self._model_info.supports_multimodal")
    where: str  # "config/model.py:901"
    dest: str = ""  # an EngineArgs field the condition is (truthy); "" when it is not a flag
    negated: bool = False  # the class is built when that field is false
    flags: List[str] = field(default_factory=list)  # set by apply: the option strings of ``dest``
    default: Optional[bool] = None  # EngineArgs' default of ``dest`` (a constant True / False), else None

    def to_json(self) -> Dict[str, object]:
        return {"text": self.text, "where": self.where, "dest": self.dest, "negated": self.negated, "flags": list(self.flags),
                "default": self.default}


def _engine_default(src: _Source, dest: str) -> Optional[bool]:
    """``enable_lora: bool = False`` in EngineArgs -> False; anything not a constant bool -> None."""
    cls = src.classdef("EngineArgs")
    for node in cls.body if cls is not None else ():
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == dest:
            value = node.value
            return value.value if isinstance(value, ast.Constant) and isinstance(value.value, bool) else None
    return None


def _parents(tree: ast.AST) -> Dict[int, ast.AST]:
    out: Dict[int, ast.AST] = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            out[id(child)] = node
    return out


def _guards(node: ast.AST, parents: Dict[int, ast.AST]) -> List[Tuple[ast.expr, bool]]:
    """The (test, negated) of every ``if`` / conditional expression whose branch holds ``node``,
    up to the enclosing function (a module-level or class-level construction counts as unconditional)."""
    out: List[Tuple[ast.expr, bool]] = []
    child = node
    while id(child) in parents:
        parent = parents[id(child)]
        if isinstance(parent, ast.If):
            if child in parent.body:
                out.append((parent.test, False))
            elif child in parent.orelse:
                out.append((parent.test, True))
        elif isinstance(parent, ast.IfExp) and child is not parent.test:
            out.append((parent.test, child is parent.orelse))
        if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            break
        child = parent
    return out


def _as_flag(test: ast.expr, negated: bool) -> Tuple[str, bool]:
    """``self.enable_lora`` / ``not self.x`` -> (field, negated); ("", False) for anything else."""
    while isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        test, negated = test.operand, not negated
    if isinstance(test, ast.Attribute) and _name(test.value) == "self" and not test.attr.startswith("_"):
        return test.attr, negated
    return "", False


def _unparse(node: ast.AST) -> str:
    try:
        return ast.unparse(node)[:160]
    except Exception:  # pragma: no cover - ast.unparse handles every tree the parser makes
        return type(node).__name__


class Constructions:
    """Per class name: None when vLLM builds it somewhere without a condition (or nowhere that was
    read: then nothing is known that would change the checks), else the condition."""

    def __init__(self, src: _Source):
        self.src = src
        self._memo: Dict[str, Optional[Condition]] = {}
        self._sites: Optional[Dict[str, List[Tuple[str, ast.Call, Dict[int, ast.AST]]]]] = None

    def _index(self) -> Dict[str, List[Tuple[str, ast.Call, Dict[int, ast.AST]]]]:
        if self._sites is None:
            self._sites = {}
            paths = [p for p in list(self.src._texts) if os.sep + "config" + os.sep in p
                     or p.endswith(os.path.join("engine", "arg_utils.py"))]
            for path in paths:
                tree = self.src.tree(path)
                if tree is None:
                    continue
                parents = _parents(tree)
                rel = os.path.relpath(path, self.src.package)
                for node in ast.walk(tree):
                    if isinstance(node, ast.Call):
                        name = _last(node.func)
                        if name and name[0].isupper():
                            self._sites.setdefault(name, []).append((rel, node, parents))
        return self._sites

    def condition(self, cls_name: str) -> Optional[Condition]:
        if cls_name not in self._memo:
            self._memo[cls_name] = self._condition(cls_name)
        return self._memo[cls_name]

    def _condition(self, cls_name: str) -> Optional[Condition]:
        sites = self._index().get(cls_name, [])[:MAX_SITES]
        found: Optional[Condition] = None
        for rel, call, parents in sites:
            guards = _guards(call, parents)
            if not guards:
                return None  # built for every command
            test, negated = guards[0]  # the innermost test decides; outer ones only narrow it further
            dest, flag_negated = _as_flag(test, negated) if len(guards) == 1 else ("", False)
            text = ("not " if negated else "") + _unparse(test)
            found = found or Condition(text, f"{rel}:{call.lineno}", dest, flag_negated)
            if found.dest != dest:  # two places, two conditions: none of them alone is the rule
                found = Condition(f"{found.text} or {text}", found.where)
        return found


def apply(src: _Source, table: Dict[str, object]) -> None:
    """Set ``condition`` on every Arg of ``table`` whose range comes from a class vLLM builds only
    under a condition, with the option strings of the switch that condition is (if it is one)."""
    constructions = Constructions(src)
    actions = {id(a): a for a in table.values()}.values()
    by_dest: Dict[str, List[str]] = {}
    for arg in actions:
        if getattr(arg, "action", "") in ("bool", "switch"):
            by_dest.setdefault(getattr(arg, "dest", ""), []).extend(n for n in getattr(arg, "names", []) if n.startswith("--"))
    for arg in actions:
        cls_name = getattr(arg, "bounds_class", "")
        if not cls_name or not getattr(arg, "bounds", None):
            continue
        condition = constructions.condition(cls_name)
        if condition is None:
            continue
        if condition.dest:
            condition.flags = by_dest.get(condition.dest, [])
            condition.default = _engine_default(src, condition.dest)
            if not condition.flags:  # an attribute, not a flag of this command: not decidable from it
                condition = Condition(condition.text, condition.where)
        arg.condition = condition.to_json()  # type: ignore[attr-defined]


def holds(condition: Dict[str, object], options: Dict[str, object]) -> Optional[bool]:
    """Whether the command meets ``condition`` (True / False), or None when the command alone
    cannot say (the model's kind, the platform). A switch not given keeps its default, False
    for EngineArgs' ``enable_*`` switches; one whose default is not read is not decided."""
    flags = [f for f in condition.get("flags") or [] if isinstance(f, str)]
    if not flags:
        return None
    given = [options[f] for f in flags if f in options]
    value = bool(given[-1]) if given else condition.get("default")
    if not isinstance(value, bool):
        return None
    return value != bool(condition.get("negated"))


# --- the platform ----------------------------------------------------------------------------------------
# gpudoctor judges NVIDIA GPUs: vLLM's current_platform is its CUDA platform there. Values such as
# ``current_platform.device_type`` are read from that class (vllm/platforms/cuda.py,
# ``CudaPlatformBase.device_type: str = "cuda"`` in 0.34), never assumed.
_PLATFORM_FILES = ("platforms/cuda.py",)


def platform_value(node: ast.AST, src: _Source) -> Optional[object]:
    """The value of ``current_platform.NAME`` (a class attribute of vLLM's CUDA platform), else None."""
    if not (isinstance(node, ast.Attribute) and _name(node.value) == "current_platform"):
        return None
    for rel in _PLATFORM_FILES:
        path = os.path.join(src.package, rel)
        if path not in src._texts:
            text = _read_source(path)
            if text is None:
                continue
            src.texts_index(path, text)
        tree = src.tree(path)
        for cls in tree.body if tree else ():
            if not (isinstance(cls, ast.ClassDef) and cls.name.startswith("Cuda")):
                continue
            for item in cls.body:
                target = item.target if isinstance(item, ast.AnnAssign) else item.targets[0] if isinstance(item, ast.Assign) else None
                if isinstance(target, ast.Name) and target.id == node.attr and isinstance(item.value, ast.Constant):
                    return item.value.value
    return None


def platform_test(test: ast.AST, src: _Source) -> Optional[bool]:
    """``current_platform.device_type not in ("", "cpu")`` on the CUDA platform; None if not that simple."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
        return None
    left = platform_value(test.left, src) if isinstance(test.left, ast.Attribute) else \
        test.left.value if isinstance(test.left, ast.Constant) else None
    right_node = test.comparators[0]
    if left is None:
        return None
    if isinstance(right_node, (ast.Tuple, ast.List, ast.Set)) and all(isinstance(e, ast.Constant) for e in right_node.elts):
        right: object = [e.value for e in right_node.elts]  # type: ignore[attr-defined]
    elif isinstance(right_node, ast.Constant):
        right = right_node.value
    else:
        return None
    op = test.ops[0]
    if isinstance(op, (ast.In, ast.NotIn)) and isinstance(right, list):
        return (left in right) == isinstance(op, ast.In)
    if isinstance(op, (ast.Eq, ast.NotEq)):
        return (left == right) == isinstance(op, ast.Eq)
    return None
