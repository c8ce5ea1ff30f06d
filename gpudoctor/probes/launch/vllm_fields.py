"""vLLM's config dataclasses read as flag definitions: the argparse keywords vLLM's ``get_kwargs``
(``_compute_kwargs``) derives from each field's type hint and ``Field(...)`` constraints, as one
:class:`Arg` per field, read from the syntax tree (nothing imported or executed).

A part of vllm_args (the walk of ``add_cli_args`` that calls it is there; its docstring says
which vLLM source each rule comes from).
"""

from __future__ import annotations

import ast
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

from gpudoctor.probes.launch.vllm_index import _last, _Source

HUMAN_INT_FIELDS = {"max_num_batched_tokens", "max_num_scheduled_tokens", "kv_cache_memory_bytes",
                    "safetensors_prefetch_block_size", "max_num_queued_tokens"}


@dataclass
class Arg:
    """One argparse action: how many values it takes and which values it accepts."""

    names: List[str]
    dest: str
    action: str = "store"  # store | switch (nargs 0) | bool (BooleanOptionalAction) | append | custom
    type: str = "any"  # any | str | int | float | json | human_int | human_int_or_auto | config | dict_or_str
    nargs: Any = None  # None | "?" | "+" | "*" | int
    choices: Optional[List[Any]] = None  # None: not restricted (or not readable)
    known_values: Optional[List[Any]] = None  # Literal values of a `Literal[...] | str` field (metavar)
    optional: bool = False  # "None" / "" give None (optional_type)
    bounds: Dict[str, float] = field(default_factory=dict)  # gt / ge / lt / le (pydantic Field)
    keys: Optional[List[str]] = None  # keys a JSON object may have (config class, extra forbidden)
    config_class: Optional[str] = None
    negatives: List[str] = field(default_factory=list)  # option strings that set it False
    origin: str = ""  # where it was read: "ModelConfig.max_model_len" or "arg_utils.py:123"
    bounds_class: str = ""  # the config class whose Field range ``bounds`` is (pydantic checks it when vLLM builds it)
    condition: Optional[Dict[str, Any]] = None  # vllm_conditions.Condition: vLLM builds that class only when it holds

    def to_json(self) -> Dict[str, Any]:
        return asdict(self)


# --- type hints -> _compute_kwargs --------------------------------------------------------------------
BUILTIN_HINTS = {"bool", "int", "float", "str", "dict", "list", "tuple", "set", "bytes"}
UNION_NAMES = {"Union", "Optional"}
LIST_NAMES = {"list", "List", "Sequence", "MutableSequence", "Iterable"}
DICT_NAMES = {"dict", "Dict", "Mapping", "MutableMapping", "defaultdict", "OrderedDict"}


class _Hints:
    def __init__(self, src: _Source):
        self.src = src

    def of(self, node: Optional[ast.AST], depth: int = 0) -> Set[Tuple[Any, ...]]:
        if node is None or depth > 12:
            return {("other", "?")}
        if isinstance(node, ast.Constant):
            if node.value is None:
                return {("none",)}
            if isinstance(node.value, str):  # a forward reference
                try:
                    return self.of(ast.parse(node.value, mode="eval").body, depth + 1)
                except SyntaxError:
                    return {("other", node.value)}
            return {("other", repr(node.value))}
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            return self.of(node.left, depth + 1) | self.of(node.right, depth + 1)
        if isinstance(node, (ast.Name, ast.Attribute)):
            name = _last(node)
            if name == "None":
                return {("none",)}
            if name in ("list", "set"):
                return {(name, ("other", "?"))}
            if name == "tuple":
                return {("tuple", ("other", "?"), "+")}
            if name in BUILTIN_HINTS:
                return {(name,)}
            if name in DICT_NAMES:
                return {("dict",)}
            if name in LIST_NAMES:
                return {("list", ("other", "?"))}
            if name in ("Any", "object"):
                return {("other", name)}
            value = self.src.alias(name) if isinstance(node, ast.Name) else None
            if value is not None and not isinstance(value, ast.Call):
                return self.of(value, depth + 1)
            cls = self.src.classdef(name)
            values = _int_enum_values(cls) if cls is not None else None
            if values is not None:
                return {("literal", tuple(values))}  # pydantic validates an IntEnum field by value
            if cls is not None:
                return {("class", name)}
            return {("other", name)}
        if isinstance(node, ast.Subscript):
            base = _last(node.value)
            inner = node.slice
            if isinstance(inner, ast.Index):  # Python 3.8 syntax trees
                inner = inner.value  # type: ignore[attr-defined]
            items = list(inner.elts) if isinstance(inner, ast.Tuple) else [inner]
            if base == "Optional":
                return self.of(items[0], depth + 1) | {("none",)}
            if base == "Union":
                out: Set[Tuple[Any, ...]] = set()
                for item in items:
                    out |= self.of(item, depth + 1)
                return out
            if base in ("Annotated", "SkipValidation", "Final", "Required", "NotRequired", "ReadOnly"):
                return self.of(items[0], depth + 1)
            if base == "Literal":
                values = self.literal_values(items, depth)
                return {("literal", tuple(values))} if values is not None else {("other", "Literal")}
            if base in LIST_NAMES:
                return {("list", self._one(items[0], depth))}
            if base in ("set", "Set", "frozenset", "FrozenSet"):
                return {("set", self._one(items[0], depth))}
            if base in ("tuple", "Tuple"):
                ellipsis = any(isinstance(i, ast.Constant) and i.value is Ellipsis for i in items)
                elems = [self._one(i, depth) for i in items if not (isinstance(i, ast.Constant) and i.value is Ellipsis)]
                return {("tuple", elems[0] if elems else ("other", "?"), "+" if ellipsis else len(elems))}
            if base in DICT_NAMES:
                return {("dict",)}
            return {("other", base)}
        return {("other", type(node).__name__)}

    def _one(self, node: ast.AST, depth: int) -> Tuple[Any, ...]:
        hints = self.of(node, depth + 1)
        if len(hints) == 1:
            return next(iter(hints))
        plain = [h for h in hints if h[0] in ("int", "float", "str")]
        if ("str",) in hints:
            return ("str",)
        return plain[0] if len(plain) == 1 else ("other", "union")

    def literal_values(self, items: Sequence[ast.AST], depth: int = 0) -> Optional[List[Any]]:
        values: List[Any] = []
        for item in items:
            if isinstance(item, ast.Constant):
                values.append(item.value)
                continue
            nested = self.of(item, depth + 1)
            literal = [h for h in nested if h[0] == "literal"]
            if len(nested) != 1 or not literal:
                return None
            values.extend(literal[0][1])
        return values


def _enum_values(cls: ast.ClassDef, bases: Sequence[str] = ("Enum", "IntEnum", "StrEnum")) -> Optional[List[Any]]:
    """The member values of an Enum class whose members are all constants (else None)."""
    if not any(_last(b) in bases for b in cls.bases):
        return None
    values = []
    for node in cls.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            if not (isinstance(node.value, ast.Constant) and isinstance(node.value.value, (int, str))):
                return None
            values.append(node.value.value)
    return values or None


def _int_enum_values(cls: ast.ClassDef) -> Optional[List[Any]]:
    """An IntEnum's values: pydantic validates such a field by value (a str Enum vLLM may look up by name)."""
    values = _enum_values(cls, ("IntEnum",))
    return values if values and all(type(v) is int for v in values) else None


def _is_dataclass(src: _Source, name: str, seen: Optional[Set[str]] = None) -> bool:
    seen = seen or set()
    if name in seen:
        return False
    seen.add(name)
    cls = src.classdef(name)
    if cls is None:
        return False
    for deco in cls.decorator_list:
        target = deco.func if isinstance(deco, ast.Call) else deco
        if _last(target) in ("dataclass", "config", "pydantic_dataclass"):
            return True
    return any(_is_dataclass(src, _last(base), seen) for base in cls.bases)


def _is_dict_subclass(src: _Source, name: str) -> bool:
    cls = src.classdef(name)
    if cls is None:
        return False
    bases = {_last(b.value if isinstance(b, ast.Subscript) else b) for b in cls.bases}
    return bool(bases & {"dict", "Dict", "defaultdict", "OrderedDict"}) and "TypedDict" not in bases


def class_fields(src: _Source, name: str, seen: Optional[Set[str]] = None) -> Dict[str, ast.AnnAssign]:
    """Dataclass fields (own and inherited, in definition order) of a class."""
    seen = seen or set()
    cls = src.classdef(name)
    if cls is None or name in seen:
        return {}
    seen.add(name)
    out: Dict[str, ast.AnnAssign] = {}
    for base in cls.bases:
        out.update(class_fields(src, _last(base.value if isinstance(base, ast.Subscript) else base), seen))
    for node in cls.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            if _last(node.annotation.value if isinstance(node.annotation, ast.Subscript) else node.annotation) in ("ClassVar", "InitVar"):
                continue
            if node.target.id.startswith("_") and not node.target.id.startswith("__"):
                pass  # private dataclass fields are still fields; argparse gets them too
            out[node.target.id] = node
    return out


def _extra_forbidden(src: _Source, name: str) -> bool:
    """Whether building this config class refuses unknown keys: ``ConfigDict(extra="forbid")``,
    vLLM's ``@config`` where it merges extra="forbid" (0.33's config/utils.py), or a plain
    dataclass (``cls(**d)`` raises TypeError). A pydantic dataclass otherwise ignores them (0.11)."""
    cls = src.classdef(name)
    if cls is None or not _is_dataclass(src, name):
        return False
    decorators = set()
    for deco in cls.decorator_list:
        text = ast.dump(deco)
        if "'forbid'" in text:
            return True
        if "'allow'" in text or "'ignore'" in text:
            return False
        decorators.add(_last(deco.func if isinstance(deco, ast.Call) else deco))
    if "config" in decorators:
        utils = src.text("config/utils.py") or ""
        if re.search(r"extra\s*=\s*[\"']forbid[\"']", utils):
            return True
    module = src._texts.get(src.class_file.get(name, [""])[0], "")
    if "dataclass" in decorators or "config" in decorators:
        return not re.search(r"from\s+pydantic\.dataclasses\s+import\s+dataclass|pydantic\.dataclasses\.dataclass", module)
    return False


def _bounds(default: Optional[ast.AST]) -> Dict[str, float]:
    out: Dict[str, float] = {}
    if isinstance(default, ast.Call) and _last(default.func) == "Field":
        for keyword in default.keywords:
            if keyword.arg in ("gt", "ge", "lt", "le"):
                value = _number(keyword.value)
                if value is not None:
                    out[keyword.arg] = value
    return out


_ARITHMETIC = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
               ast.FloorDiv: lambda a, b: a // b if b else None, ast.Div: lambda a, b: a / b if b else None,
               ast.Pow: lambda a, b: a ** b if abs(b) <= 256 and abs(a) <= 2 ** 16 else None}


def _number(node: ast.AST, depth: int = 0) -> Optional[float]:
    """A number written as a constant or constant arithmetic (``le=2**32 - 1``, ModelConfig.seed in 0.34)."""
    if depth > 16:
        return None
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _number(node.operand, depth + 1)
        return -inner if inner is not None else None
    if isinstance(node, ast.BinOp) and type(node.op) in _ARITHMETIC:
        left, right = _number(node.left, depth + 1), _number(node.right, depth + 1)
        if left is None or right is None:
            return None
        try:
            return _ARITHMETIC[type(node.op)](left, right)
        except (OverflowError, ZeroDivisionError, ValueError):
            return None
    return None


def field_kwargs(src: _Source, cls_name: str, name: str, node: ast.AnnAssign) -> Arg:
    """``_compute_kwargs`` for one dataclass field."""
    hints = _Hints(src).of(node.annotation)
    hints = {("dict",) if h[0] == "class" and _is_dict_subclass(src, h[1]) else h for h in hints}
    arg = Arg([], name, origin=f"{cls_name}.{name}", bounds=_bounds(node.value))
    arg.bounds_class = cls_name if arg.bounds else ""
    kinds = {h[0] for h in hints}
    dataclass_hint = next((h[1] for h in hints if h[0] == "class" and _is_dataclass(src, h[1])), None)
    non_builtin = any(h[0] in ("class", "other") for h in hints)
    if dataclass_hint:
        arg.type, arg.config_class = "config", dataclass_hint
        if _extra_forbidden(src, dataclass_hint):
            arg.keys = sorted(class_fields(src, dataclass_hint))
    elif kinds == {"bool", "str", "none"}:
        arg.type, arg.nargs = "str", "?"
    elif "bool" in kinds:
        arg.action = "bool"
    elif "literal" in kinds:
        values = next(h[1] for h in hints if h[0] == "literal")
        arg.type = {int: "int", float: "float"}.get(type(values[0]), "str") if values else "str"
        if "str" not in kinds:
            arg.choices = sorted(values, key=repr) if values else None
        else:
            arg.known_values = sorted(values, key=repr) if values else None
    elif kinds & {"tuple", "list", "set"}:
        hint = next(h for h in hints if h[0] in ("tuple", "list", "set"))
        elem = hint[1]
        arg.type = {"int": "int", "float": "float"}.get(elem[0], "str")
        arg.nargs = hint[2] if hint[0] == "tuple" else "+"
        if elem[0] == "literal":
            arg.choices = list(elem[1])
    elif "int" in kinds:
        arg.type = "human_int_or_auto" if name == "max_model_len" else "human_int" if name in HUMAN_INT_FIELDS else "int"
    elif "float" in kinds:
        arg.type = "float"
    elif "dict" in kinds and ("str" in kinds or non_builtin):
        arg.type = "dict_or_str"
    elif "dict" in kinds:
        arg.type = "json"
    else:
        arg.type = "str" if ("str" in kinds or non_builtin) else "any"
    if "none" in kinds and "bool" not in kinds:
        arg.optional = True
        if arg.choices is not None:
            arg.choices.append(None)
    return arg
