"""Cross-flag checks vLLM's config classes run when vLLM builds them, read from their source.

``ModelConfig.__post_init__`` (vllm/config/model.py, 0.34.0) has ``if
self.checkpoint_prepare_on_startup and not self.enable_sleep_mode: raise
ValueError("checkpoint_prepare_on_startup requires enable_sleep_mode")``; ``ParallelConfig``
(vllm/config/parallel.py) raises "NUMA binding lists cannot be combined with numa_bind=False."
under ``if self.numa_bind_nodes is not None or self.numa_bind_cpus is not None: if
self.numa_bind is False:``. vLLM builds both for every command, before it loads a model.

A check is kept only when it can be decided from the command alone, so that it never blocks a
command vLLM accepts: it sits in ``__post_init__`` or an ``after`` model validator of a class vLLM
builds unconditionally (vllm_conditions), it is a statement of the function's own body (an ``if``
inside a top-level ``if`` is the conjunction of both tests), no ``return`` comes before it, every
value its test reads is a field of that class that a flag sets directly (the flag's Arg comes from
``get_kwargs`` of that class) and that the function does not assign before the test, each field's
default is a constant, and the test uses only ``and`` / ``or`` / ``not``, ``is (not) None``,
comparisons with constants and truth values. Stdlib only.
"""

from __future__ import annotations

import ast
import operator
from typing import Any, Dict, List, Optional, Tuple

from gpudoctor.probes.launch.vllm_index import _last, _name, _Source

MAX_CHECKS = 200

_ARITHMETIC = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Mod: operator.mod,
               ast.FloorDiv: operator.floordiv}
_COMPARE = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt,
            ast.GtE: operator.ge, ast.Is: operator.is_, ast.IsNot: operator.is_not}


def _fields_read(test: ast.AST) -> Optional[List[str]]:
    """The ``self.x`` fields a test reads, or None when it reads anything else (a call, a name)."""
    fields: List[str] = []
    for node in ast.walk(test):
        if isinstance(node, ast.Attribute):
            if _name(node.value) != "self":
                return None
            fields.append(node.attr)
        elif isinstance(node, (ast.Name, ast.Call, ast.Subscript, ast.Lambda, ast.NamedExpr)):
            if isinstance(node, ast.Name) and node.id == "self":
                continue
            return None
        elif isinstance(node, ast.Compare) and not all(type(op) in _COMPARE for op in node.ops):
            return None
    return sorted(set(fields))


def _message(node: ast.stmt) -> Optional[str]:
    if not (isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and _last(node.exc.func) == "ValueError"
            and node.exc.args):
        return None
    arg = node.exc.args[0]
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return arg.value
    if isinstance(arg, ast.JoinedStr):
        return "".join(str(v.value) if isinstance(v, ast.Constant) else "…" for v in arg.values)
    return None


def _assigned(body: List[ast.stmt]) -> List[str]:
    out = []
    for stmt in body:
        for node in ast.walk(stmt):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
            out.extend(t.attr for t in targets if isinstance(t, ast.Attribute) and _name(t.value) == "self")
    return out


def _is_validator(func: ast.FunctionDef) -> bool:
    if func.name == "__post_init__":
        return True
    for deco in func.decorator_list:
        if isinstance(deco, ast.Call) and _last(deco.func) == "model_validator" \
                and any(k.arg == "mode" and isinstance(k.value, ast.Constant) and k.value.value == "after" for k in deco.keywords):
            return True
    return False


def _checks_of(cls: ast.ClassDef, where: str) -> List[Dict[str, Any]]:
    out: List[Dict[str, Any]] = []
    for func in cls.body:
        if not (isinstance(func, ast.FunctionDef) and _is_validator(func)):
            continue
        for position, stmt in enumerate(func.body):
            if isinstance(stmt, ast.Return) or any(isinstance(n, ast.Return) for n in ast.walk(stmt)) and not isinstance(stmt, ast.If):
                break  # a return before: what follows may not run
            if not isinstance(stmt, ast.If):
                continue
            earlier = _assigned(func.body[:position])
            pairs: List[Tuple[ast.expr, ast.stmt]] = [(stmt.test, stmt.body[0])]
            pairs += [(ast.BoolOp(op=ast.And(), values=[stmt.test, inner.test]), inner.body[0])
                      for inner in stmt.body if isinstance(inner, ast.If)]  # `if A: if B: raise` is A and B
            for test, first in pairs:
                message = _message(first)
                fields = _fields_read(test)
                if message is None or not fields or any(f in earlier for f in fields):
                    continue
                if first is not stmt.body[0] and any(f in _assigned(stmt.body[:stmt.body.index(next(
                        i for i in stmt.body if isinstance(i, ast.If) and i.body[0] is first))]) for f in fields):
                    continue
                out.append({"test": ast.unparse(test), "fields": fields, "message": message,
                            "where": f"{where}:{getattr(first, 'lineno', stmt.lineno)} {cls.name}.{func.name}"})
            if any(isinstance(n, ast.Return) for n in ast.walk(stmt)):
                break
    return out


def read(src: _Source, table: Dict[str, Any], constructions: Any) -> List[Dict[str, Any]]:
    """Every decidable cross-flag check, with the flags and defaults of the fields it reads."""
    import os

    by_origin: Dict[str, Any] = {}
    for arg in {id(a): a for a in table.values()}.values():
        by_origin.setdefault(getattr(arg, "origin", ""), arg)
    classes = sorted({origin.split(".")[0] for origin in by_origin if "." in origin and ":" not in origin})
    out: List[Dict[str, Any]] = []
    for name in classes:
        cls = src.classdef(name)
        if cls is None or constructions.condition(name) is not None:
            continue
        path = src.class_file.get(name, [""])[0]
        where = os.path.relpath(path, os.path.dirname(src.package)) if path else name
        fields = _class_field_defaults(cls)
        direct = _passed_directly(constructions, name)
        for check in _checks_of(cls, where):
            flags: Dict[str, Any] = {}
            for field in check["fields"]:
                if field not in direct:
                    break  # vLLM passes it something else than the flag's value (a local, an expression)
                arg = by_origin.get(f"{name}.{field}")
                if arg is None or field not in fields or fields[field] is _UNREADABLE:
                    break
                flags[field] = {"flags": [n for n in arg.names if n.startswith("--")], "negatives": list(arg.negatives),
                                "default": fields[field]}
            else:
                out.append({**check, "fields": flags})
            if len(out) >= MAX_CHECKS:
                return out
    return out


_UNREADABLE = object()


def _passed_directly(constructions: Any, name: str) -> List[str]:
    """Fields every unconditional ``Cls(...)`` of vllm/engine/arg_utils.py passes as ``field=self.field``
    (EngineArgs' own value: the flag's), e.g. ``ModelConfig(..., enable_sleep_mode=self.enable_sleep_mode)``."""
    from gpudoctor.probes.launch.vllm_conditions import _guards

    common: Optional[set] = None
    for rel, call, parents in constructions._index().get(name, []):
        if _guards(call, parents) or not rel.endswith("arg_utils.py"):  # where EngineArgs hands over the flags
            continue
        here = {k.arg for k in call.keywords if k.arg and isinstance(k.value, ast.Attribute)
                and _name(k.value.value) == "self" and k.value.attr == k.arg}
        common = here if common is None else common & here
    return sorted(common or ())


def _class_field_defaults(cls: ast.ClassDef) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for node in cls.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            value = node.value
            if isinstance(value, ast.Call) and _last(value.func) == "Field":
                value = next((k.value for k in value.keywords if k.arg == "default"), value.args[0] if value.args else None)
            out[node.target.id] = value.value if isinstance(value, ast.Constant) else None if value is None else _UNREADABLE
    return out


def _evaluate(node: ast.AST, values: Dict[str, Any]) -> Any:
    if isinstance(node, ast.BoolOp):
        results = [_evaluate(v, values) for v in node.values]
        return all(results) if isinstance(node.op, ast.And) else any(results)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return not _evaluate(node.operand, values)
    if isinstance(node, ast.Attribute):
        return values[node.attr]
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _ARITHMETIC:
        return _ARITHMETIC[type(node.op)](_evaluate(node.left, values), _evaluate(node.right, values))
    if isinstance(node, ast.Compare):
        left = _evaluate(node.left, values)
        for op, right_node in zip(node.ops, node.comparators):
            right = _evaluate(right_node, values)
            if not _COMPARE[type(op)](left, right):
                return False
            left = right
        return True
    raise ValueError("not decidable")


def refusals(checks: List[Dict[str, Any]], options: Dict[str, Any]) -> List[Dict[str, Any]]:
    """The checks this command fails: {flag, value, problem}; only those the command takes part in."""
    out = []
    for check in checks:
        values: Dict[str, Any] = {}
        given: List[Tuple[str, Any]] = []
        for field, info in (check.get("fields") or {}).items():
            named = [f for f in info.get("flags") or [] if f in options]
            values[field] = options[named[-1]] if named else info.get("default")
            given += [(f, options[f]) for f in named]
        if not given:
            continue
        try:
            test = ast.parse(check["test"], mode="eval").body
            failed = bool(_evaluate(test, values))
        except (SyntaxError, ValueError, TypeError, KeyError, ZeroDivisionError, ArithmeticError):
            continue
        if failed:
            flag, value = given[0]
            out.append({"flag": flag, "value": value if not isinstance(value, bool) else None,
                        "problem": f"vLLM refuses this combination when it builds its config: \"{check['message']}\" ({check['where']})"})
    return out
