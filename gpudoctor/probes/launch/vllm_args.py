"""vLLM's command-line arguments as its parser builds them, read from its source with ``ast``.

vLLM (0.8 to 0.33 read, see tests/real/) builds `vllm serve`'s parser in
``EngineArgs.add_cli_args`` (vllm/engine/arg_utils.py) and ``FrontendArgs.add_cli_args`` /
``make_arg_parser`` (vllm/entrypoints/{openai,common}/cli_args.py). Most flags are
``group.add_argument("--max-model-len", **model_kwargs["max_model_len"])`` where
``model_kwargs = get_kwargs(ModelConfig)``: ``get_kwargs`` turns each dataclass field's type
hint into argparse keywords (``_compute_kwargs``): ``bool`` -> ``BooleanOptionalAction``
(``--x`` and ``--no-x``), ``Literal[...]`` -> ``choices`` (``metavar`` when ``str`` is also
allowed), ``list[T]`` -> ``nargs="+"``, a config dataclass -> a JSON object validated by pydantic
(extra keys forbidden by vLLM's ``@config``), ``X | None`` -> also ``"None"``. Numeric ranges are
the ``Field(gt=0, le=1)`` constraints pydantic enforces when vLLM builds the config
(``CacheConfig.gpu_memory_utilization``). 0.33's ``FlexibleArgumentParser`` registers
``EnableDisableAction`` for ``BooleanOptionalAction``: ``--enable-x`` also gets ``--disable-x``
(and ``--no-enable-x`` / ``--no-disable-x``).

This module re-does that walk on the syntax tree (nothing is imported or executed) and returns
one :class:`Arg` per option string. Whatever it cannot follow (an ``add_argument`` whose names
are computed in a way not handled here, a file this Python cannot parse) makes the table
``complete=False`` with the reason, so callers say "unknown" instead of "unknown flag".
"""

from __future__ import annotations

import ast
import os
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, Iterable, List, Optional, Sequence, Set, Tuple

from gpudoctor.probes.launch import vllm_combinations, vllm_conditions
from gpudoctor.probes.launch.vllm_index import _last, _name, _read, _Source

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


@dataclass
class ArgTable:
    args: Dict[str, Arg]  # every option string -> its action
    complete: bool
    problems: List[str]
    files: List[str]
    enable_disable: bool = False
    names_only: Set[str] = field(default_factory=set)  # defined, but what they accept is not readable
    sources: List[str] = field(default_factory=list)  # every file read (vllm_args_cache keys on them)
    combinations: List[Dict[str, Any]] = field(default_factory=list)  # vllm_combinations: cross-flag checks


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


# --- walking add_cli_args ---------------------------------------------------------------------------
def _type_from(node: ast.AST) -> Tuple[str, bool]:
    """(type, optional) of an explicit ``type=`` expression."""
    if isinstance(node, ast.Lambda) and len(node.args.args) == 1:
        # 0.34's --moe-backend / --linear-backend: `lambda s: s.lower().replace("-", "_")`, then choices
        body = ast.dump(node.body)
        if "attr='lower'" in body and "attr='replace'" in body and "Constant(value='-')" in body and "Constant(value='_')" in body:
            return "lower_snake", False
        return "any", False
    name = _last(node)
    if isinstance(node, ast.Call) and _last(node.func) in ("optional_type", "parse_type"):
        inner, _ = _type_from(node.args[0]) if node.args else ("any", False)
        return inner, _last(node.func) == "optional_type"
    return {"int": ("int", False), "float": ("float", False), "str": ("str", False), "loads": ("json", False),
            "human_readable_int": ("human_int", False), "human_readable_int_or_auto": ("human_int_or_auto", False),
            "union_dict_and_str": ("dict_or_str", True)}.get(name, ("any", False))


def _action_from(node: ast.AST) -> str:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        value = node.value
        if value in ("store_true", "store_false", "store_const", "count", "help", "version"):
            return "switch"
        return {"store": "store", "append": "append", "extend": "append", "append_const": "switch"}.get(value, "custom")
    name = _last(node)
    if name == "BooleanOptionalAction":
        return "bool"
    return "custom"


class _Walker:
    def __init__(self, src: _Source, files: Sequence[str]):
        self.src = src
        self.files = files
        self.table: Dict[str, Arg] = {}
        self.problems: List[str] = []
        self.var_class: Dict[str, List[str]] = {}
        self.mods: Dict[Tuple[str, str], List[Tuple[str, str, Optional[ast.AST]]]] = {}
        self.names_only: Set[str] = set()
        self._bounds_index: Optional[Dict[str, List[Dict[str, float]]]] = None
        self.aliases: Dict[str, Tuple[str, str]] = {}  # `moe_backend_kwargs = kernel_kwargs["moe_backend"]`

    def field_bounds(self, dest: str) -> Tuple[Dict[str, float], str]:
        """The Field(ge=…, le=…) range of the config dataclass field named ``dest``, when every config
        class with such a field agrees: vLLM passes the flag's value to that field, pydantic checks it;
        with the first such class."""
        if self._bounds_index is None:
            self._bounds_index = {}
            for name in list(self.src.class_file):
                if name.endswith("Config") and _is_dataclass(self.src, name):
                    for fieldname, node in class_fields(self.src, name).items():
                        self._bounds_index.setdefault(fieldname, []).append((_bounds(node.value), name))
        found = self._bounds_index.get(dest) or [({}, "")]
        return (dict(found[0][0]), found[0][1]) if all(b == found[0][0] for b, _ in found) else ({}, "")

    # pass 1: variables holding get_kwargs(...) and the edits to them
    def scan(self, tree: ast.Module, rel: str) -> None:
        owner_of: Dict[int, str] = {}
        for cls in [n for n in tree.body if isinstance(n, ast.ClassDef)]:
            for node in ast.walk(cls):
                owner_of[id(node)] = cls.name
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                for call in ast.walk(node.value):
                    if isinstance(call, ast.Call) and _last(call.func) == "get_kwargs" and call.args:
                        target = _name(call.args[0])
                        if target in ("cls", "self"):
                            owner = owner_of.get(id(node))
                            classes = self.used_subclasses(owner) if owner else []
                        else:
                            classes = [target.split(".")[-1]]
                        self.var_class.setdefault(node.targets[0].id, [])
                        self.var_class[node.targets[0].id].extend(c for c in classes if c not in self.var_class[node.targets[0].id])
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                    and isinstance(node.value, ast.Subscript):
                self._alias(node.targets[0].id, node.value)
            # VAR["field"]["attr"] = value / del VAR["field"]["attr"] / VAR["field"]["choices"].remove(x)
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    self._mod(target, "set", node.value)
            elif isinstance(node, ast.Delete):
                for target in node.targets:
                    self._mod(target, "del", None)
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("remove", "append") \
                    and node.args:
                self._mod(node.func.value, node.func.attr, node.args[0])

    def _alias(self, name: str, value: ast.Subscript) -> None:
        """``X = VAR["field"]`` (the same dict: X's edits are VAR["field"]'s) or ``X = get_kwargs(Cls)["field"]``."""
        inner = value.slice.value if isinstance(value.slice, ast.Index) else value.slice  # type: ignore[attr-defined]
        if not (isinstance(inner, ast.Constant) and isinstance(inner.value, str)):
            return
        if isinstance(value.value, ast.Name):
            self.aliases[name] = (value.value.id, inner.value)
        elif isinstance(value.value, ast.Call) and _last(value.value.func) == "get_kwargs" and value.value.args:
            var = f"<get_kwargs {_name(value.value.args[0])}>"
            self.var_class.setdefault(var, [_name(value.value.args[0]).split(".")[-1]])
            self.aliases[name] = (var, inner.value)

    def _mod(self, target: ast.AST, op: str, value: Optional[ast.AST]) -> None:
        keys = []
        node = target
        while isinstance(node, ast.Subscript):
            inner = node.slice.value if isinstance(node.slice, ast.Index) else node.slice  # type: ignore[attr-defined]
            if not (isinstance(inner, ast.Constant) and isinstance(inner.value, str)):
                return
            keys.append(inner.value)
            node = node.value
        if len(keys) == 1 and isinstance(node, ast.Name) and node.id in self.aliases:
            self.mods.setdefault(self.aliases[node.id], []).append((op, keys[0], value))
            return
        if len(keys) != 2 or not isinstance(node, ast.Name):
            return
        attr, fieldname = keys
        self.mods.setdefault((node.id, fieldname), []).append((op, attr, value))

    def used_subclasses(self, owner: str) -> List[str]:
        """The classes whose ``add_cli_args`` the serve parser calls, among ``owner`` and its
        subclasses defined in the flag files (``FrontendArgs`` of ``BaseFrontendArgs``)."""
        texts = [self.src.text(rel) or "" for rel in self.files]
        bases: Dict[str, List[str]] = {}
        for text in texts:
            for match in re.finditer(r"^class\s+(\w+)\s*\(([^)]*)\)", text, re.M):
                bases[match.group(1)] = [b.strip().split(".")[-1] for b in match.group(2).split(",")]
        family = {owner}
        changed = True
        while changed:
            changed = False
            for name, parents in bases.items():
                if name not in family and family.intersection(parents):
                    family.add(name)
                    changed = True
        called = set()
        for text in texts:
            called.update(re.findall(r"\b(\w+)\.add_cli_args\(", text))
        chosen = sorted(family & called)
        return chosen or sorted(family)

    def base_spec(self, var: str, fieldname: str) -> Optional[Arg]:
        for cls_name in self.var_class.get(var, []):
            fields = class_fields(self.src, cls_name)
            if fieldname in fields:
                arg = field_kwargs(self.src, cls_name, fieldname, fields[fieldname])
                self.apply_mods(arg, var, fieldname)
                return arg
        return None

    def apply_mods(self, arg: Arg, var: str, fieldname: str) -> List[str]:
        extra_flags: List[str] = []
        for op, attr, value in self.mods.get((var, fieldname), []):
            if op == "del" and attr == "nargs":
                arg.nargs = None
            elif op == "set" and attr == "type" and value is not None:
                arg.type, optional = _type_from(value)
                arg.optional = arg.optional or optional
                if arg.type != "config":
                    arg.choices = None if arg.choices is None else arg.choices
            elif op == "set" and attr == "action" and value is not None:
                arg.action = _action_from(value)
            elif op == "set" and attr == "choices":
                arg.choices = _constants(value)
            elif op == "set" and attr == "metavar":
                pass
            elif op == "set" and attr == "nargs" and isinstance(value, ast.Constant):
                arg.nargs = value.value
            elif op == "set" and attr == "flags":
                extra_flags = _constants(value) or []
            elif op in ("remove", "append") and attr == "choices" and arg.choices is not None and value is not None:
                # `.remove(PASSTHROUGH_ALL2ALL_BACKEND)`: a constant named in another module (0.34 config/kernel.py)
                named = self.src.alias(value.id) if isinstance(value, ast.Name) else value
                if not isinstance(named, ast.Constant):
                    self.problems.append(f"choices of {fieldname} edited with a value not readable ({ast.dump(value)[:80]})")
                elif op == "remove":
                    arg.choices = [c for c in arg.choices if c != named.value]
                else:
                    arg.choices.append(named.value)
        return extra_flags

    # pass 2: the add_argument calls
    def calls(self, tree: ast.Module, rel: str) -> None:
        loops: Dict[int, Tuple[str, str]] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.For) and isinstance(node.iter, ast.Call) and isinstance(node.iter.func, ast.Attribute) \
                    and node.iter.func.attr == "items" and isinstance(node.target, ast.Tuple) and len(node.target.elts) == 2:
                var = _name(node.iter.func.value)
                key = _name(node.target.elts[0])
                for inner in ast.walk(node):
                    loops[id(inner)] = (var, key)
        literal_loops: Dict[int, Tuple[str, List[str]]] = {}
        for node in ast.walk(tree):
            # for arg, type in [("--guided-decoding-backend", str), …]: add_argument(arg, …)  (0.11)
            if isinstance(node, ast.For) and isinstance(node.iter, (ast.List, ast.Tuple)):
                target = node.target.elts[0] if isinstance(node.target, ast.Tuple) and node.target.elts else node.target
                names = []
                for item in node.iter.elts:
                    first = item.elts[0] if isinstance(item, ast.Tuple) and item.elts else item
                    if isinstance(first, ast.Constant) and isinstance(first.value, str):
                        names.append(first.value)
                if isinstance(target, ast.Name) and names:
                    for inner in ast.walk(node):
                        literal_loops[id(inner)] = (target.id, names)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument":
                literal = literal_loops.get(id(node))
                if literal and node.args and isinstance(node.args[0], ast.Name) and node.args[0].id == literal[0]:
                    for name in literal[1]:
                        clone = ast.Call(func=node.func, args=[ast.Constant(value=name)] + node.args[1:], keywords=node.keywords)
                        clone.lineno = node.lineno
                        self.one_call(clone, rel, None)
                    continue
                self.one_call(node, rel, loops.get(id(node)))

    def one_call(self, call: ast.Call, rel: str, loop: Optional[Tuple[str, str]]) -> None:
        where = f"{rel}:{call.lineno}"
        names: List[str] = []
        dynamic = False
        for item in call.args:
            if isinstance(item, ast.Constant) and isinstance(item.value, str):
                names.append(item.value)
            elif isinstance(item, ast.JoinedStr) or isinstance(item, ast.Starred):
                dynamic = True
            else:
                dynamic = True
        if names and not any(n.startswith("-") for n in names):
            return  # a positional (the model tag)
        keywords = list(call.keywords)
        spread: List[ast.AST] = []
        for keyword in call.keywords:
            if keyword.arg is not None:
                continue
            if isinstance(keyword.value, ast.Dict):  # **{**model_kwargs["x"], "default": None}
                for key, value in zip(keyword.value.keys, keyword.value.values):
                    if key is None:
                        spread.append(value)
                    elif isinstance(key, ast.Constant) and isinstance(key.value, str):
                        keywords.append(ast.keyword(arg=key.value, value=value))
            else:
                spread.append(keyword.value)
        if dynamic and loop and not names:
            var, _ = loop
            for cls_name in self.var_class.get(var, []):
                for fieldname in class_fields(self.src, cls_name):
                    arg = self.base_spec(var, fieldname) or Arg([], fieldname)
                    extra = self.apply_mods(arg, var, fieldname)
                    self.finish(arg, extra + ["--" + fieldname.replace("_", "-")], call, where)
            if not self.var_class.get(var):
                self.problems.append(f"{where}: flags added in a loop over {var}, whose class is not readable")
            return
        if dynamic and not names:
            self.problems.append(f"{where}: add_argument with computed names")
            return
        arg: Optional[Arg] = None
        for value in spread:
            if isinstance(value, ast.Name) and value.id in self.aliases:
                arg = self.base_spec(*self.aliases[value.id])
            if isinstance(value, ast.Subscript) and isinstance(value.value, ast.Name):
                inner = value.slice.value if isinstance(value.slice, ast.Index) else value.slice  # type: ignore[attr-defined]
                if isinstance(inner, ast.Constant) and isinstance(inner.value, str):
                    arg = self.base_spec(value.value.id, inner.value)
        if arg is None and spread:
            # `**kwargs["field"]` of a class this walk cannot read: the names are sure, what they
            # accept is not (the text scan of vllm_source decides switch or value).
            self.names_only.update(n for n in names if n.startswith("-"))
            return
        if arg is None:
            arg = Arg([], "", origin=where)
        explicit_action = False
        for keyword in keywords:
            if keyword.arg == "action":
                arg.action = _action_from(keyword.value)
                explicit_action = True
            elif keyword.arg == "type":
                arg.type, optional = _type_from(keyword.value)
                arg.optional = arg.optional or optional
            elif keyword.arg == "choices":
                arg.choices = _constants(keyword.value, self.src)
            elif keyword.arg == "nargs" and isinstance(keyword.value, ast.Constant):
                arg.nargs = keyword.value.value
        if not explicit_action and arg.action == "custom" and not spread:
            arg.action = "store"
        if not spread and not arg.bounds and arg.type in ("int", "float", "human_int"):
            dest = next((k.value.value for k in keywords if k.arg == "dest" and isinstance(k.value, ast.Constant)), None)
            longs = [n for n in names if n.startswith("--")]
            arg.bounds, arg.bounds_class = self.field_bounds(dest or (longs[0][2:].replace("-", "_") if longs else ""))
        if arg.action in ("switch", "bool"):
            arg.type, arg.nargs, arg.choices = "any", 0, None
        self.finish(arg, names, call, where)

    def finish(self, arg: Arg, names: List[str], call: ast.Call, where: str) -> None:
        arg.names = list(dict.fromkeys(names))
        longs = [n for n in arg.names if n.startswith("--")]
        arg.dest = arg.dest or (longs[0] if longs else arg.names[0]).lstrip("-").replace("-", "_")
        arg.origin = arg.origin or where
        if arg.action == "bool":
            arg.negatives = ["--no-" + n[2:] for n in longs]
        for name in arg.names:
            self.table[name] = arg


def _constants(node: Optional[ast.AST], src: Optional[_Source] = None, depth: int = 0) -> Optional[List[Any]]:
    """A list of constants from a literal list/tuple/set (``[*NAMES, None]`` too), ``get_args(Alias)``,
    ``list(...)``, ``[f.value for f in SomeEnum]`` or a module-level name holding one of those."""
    if node is None or depth > 8:
        return None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):  # ["auto", "cpu"] + ([…] if … else [])
        left, right = _constants(node.left, src, depth + 1), _constants(node.right, src, depth + 1)
        return left + right if left is not None and right is not None else None
    if isinstance(node, ast.IfExp) and src is not None:  # decided on the platform gpudoctor judges (CUDA)
        verdict = vllm_conditions.platform_test(node.test, src)
        return None if verdict is None else _constants(node.body if verdict else node.orelse, src, depth + 1)
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)) and src is not None and any(
            isinstance(i, ast.Attribute) and _name(i.value) == "current_platform" for i in node.elts):
        values_on_cuda = [vllm_conditions.platform_value(i, src) if isinstance(i, ast.Attribute) else i for i in node.elts]
        if any(v is None for v in values_on_cuda):
            return None
        node = type(node)(elts=[v if isinstance(v, ast.AST) else ast.Constant(value=v) for v in values_on_cuda])
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        values: List[Any] = []
        for item in node.elts:
            inner = _constants(item.value, src, depth + 1) if isinstance(item, ast.Starred) else None
            if isinstance(item, ast.Starred) and inner is None or not isinstance(item, (ast.Starred, ast.Constant)):
                return None
            values.extend(inner if inner is not None else [item.value])  # type: ignore[attr-defined]
        return values
    if isinstance(node, ast.Call) and _last(node.func) in ("list", "sorted", "tuple") and node.args:
        return _constants(node.args[0], src, depth + 1)
    if isinstance(node, ast.Call) and _last(node.func) == "get_args" and node.args and src is not None:
        hints = _Hints(src).of(node.args[0])
        literal = [h for h in hints if h[0] == "literal"]
        return list(literal[0][1]) if len(hints) == 1 and literal else None
    if isinstance(node, ast.ListComp) and src is not None and len(node.generators) == 1:
        gen = node.generators[0]
        if not gen.ifs and isinstance(gen.target, ast.Name) and isinstance(node.elt, ast.Attribute) \
                and node.elt.attr == "value" and _name(node.elt.value) == gen.target.id:
            cls = src.classdef(_last(gen.iter))
            return _enum_values(cls) if cls is not None else None
    if isinstance(node, ast.Name) and src is not None:
        value = src.alias(node.id)
        return _constants(value, src, depth + 1) if value is not None else None
    return None


_REFUSED_BELOW = {ast.Lt: "ge", ast.LtE: "gt", ast.Gt: "le", ast.GtE: "lt"}  # `if value < c: raise` -> value >= c


def _serve_checks(trees: Sequence[Tuple[str, ast.Module]]) -> Dict[str, Dict[str, float]]:
    """dest -> range from ``validate_parsed_serve_args``' ``if args.x < 0: raise …`` (or
    ``getattr(args, "x", d) < 0``): what `vllm serve` refuses before it loads anything."""
    out: Dict[str, Dict[str, float]] = {}
    for _, tree in trees:
        for func in ast.walk(tree):
            if not (isinstance(func, ast.FunctionDef) and func.name == "validate_parsed_serve_args"):
                continue
            for node in ast.walk(func):
                if not (isinstance(node, ast.If) and any(isinstance(b, ast.Raise) for b in node.body)):
                    continue
                tests = node.test.values if isinstance(node.test, ast.BoolOp) and isinstance(node.test.op, ast.And) else [node.test]
                for test in tests:
                    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and type(test.ops[0]) in _REFUSED_BELOW):
                        continue
                    left, limit = test.left, _number(test.comparators[0])
                    dest = left.attr if isinstance(left, ast.Attribute) and _name(left.value) == "args" else None
                    if isinstance(left, ast.Call) and _last(left.func) == "getattr" and len(left.args) >= 2 \
                            and _name(left.args[0]) == "args" and isinstance(left.args[1], ast.Constant):
                        dest = str(left.args[1].value)
                    if dest and limit is not None and len(tests) <= 2:
                        out.setdefault(dest, {})[_REFUSED_BELOW[type(test.ops[0])]] = limit
    return out


def _enable_disable(src: _Source) -> bool:
    """0.33+: FlexibleArgumentParser pairs --enable-x with --disable-x (EnableDisableAction)."""
    for rel in ("utils/argparse_utils.py", "utils/__init__.py", "utils.py"):
        text = src.text(rel)
        if text and re.search(r"register\(\s*[\"']action[\"']\s*,\s*(?:argparse\.)?BooleanOptionalAction\s*,\s*EnableDisableAction", text):
            return True
    return False


def read_args(package: str, flag_files: Sequence[str]) -> Optional[ArgTable]:
    """Every option string of `vllm serve` in this vLLM, with what it accepts; None: no flag file."""
    src = _Source(package, flag_files)
    for rel in ("utils/__init__.py", "utils.py"):
        text = _read(os.path.join(package, rel))
        if text is not None:
            src.texts_index(os.path.join(package, rel), text)
    walker = _Walker(src, flag_files)
    trees = []
    for rel in flag_files:
        path = os.path.join(package, rel)
        if path not in src._texts:
            continue
        tree = src.tree(path)
        if tree is not None:
            trees.append((rel, tree))
    if not trees:
        return None
    for rel, tree in trees:
        walker.scan(tree, rel)
    for rel, tree in trees:
        walker.calls(tree, rel)
    if not walker.table and not walker.names_only:
        return None
    table = dict(walker.table)
    vllm_conditions.apply(src, table)
    for dest, bounds in _serve_checks(trees).items():
        for arg in {id(a): a for a in table.values() if a.dest == dest and a.type in ("int", "float", "human_int")}.values():
            arg.bounds = {**bounds, **arg.bounds}
    enable_disable = _enable_disable(src)
    for arg in list({id(a): a for a in walker.table.values()}.values()):
        if arg.action != "bool":
            continue
        extra: List[str] = []
        if enable_disable:
            for name in arg.names:
                for prefix, inverse in (("--enable-", "--disable-"), ("--disable-", "--enable-")):
                    if name.startswith(prefix):
                        extra.append(inverse + name[len(prefix):])
        arg.negatives = list(dict.fromkeys(arg.negatives + extra))
        for name in arg.negatives:
            table.setdefault(name, arg)
    problems = walker.problems + src.problems
    for name in ("--help", "-h"):
        table.setdefault(name, Arg([name], "help", action="switch", nargs=0))
    names_only = {n for n in walker.names_only if n not in table}
    combinations = vllm_combinations.read(src, table, vllm_conditions.Constructions(src))
    return ArgTable(table, not problems, problems, [r for r, _ in trees], enable_disable, names_only, sorted(src._texts), combinations)


def summary(table: ArgTable) -> Dict[str, Any]:
    actions = {id(a): a for a in table.args.values()}
    return {"options": len(table.args), "actions": len(actions), "complete": table.complete,
            "problems": table.problems[:10], "enable_disable": table.enable_disable}


def iter_actions(table: ArgTable) -> Iterable[Arg]:
    return {id(a): a for a in table.args.values()}.values()
