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
one :class:`Arg` per option string (the type-hint part, ``get_kwargs``, is in vllm_fields.py).
Whatever it cannot follow (an ``add_argument`` whose names are computed in a way not handled
here, a file this Python cannot parse) makes the table ``complete=False`` with the reason, so
callers say "unknown" instead of "unknown flag".
"""

from __future__ import annotations

import ast
import os
import re
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Optional, Sequence, Set, Tuple

from gpudoctor.probes.launch import vllm_combinations, vllm_conditions
from gpudoctor.probes.launch.vllm_fields import Arg, _bounds, _enum_values, _Hints, _is_dataclass, _number, class_fields, field_kwargs
from gpudoctor.probes.launch.vllm_index import _last, _name, _read, _Source


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
