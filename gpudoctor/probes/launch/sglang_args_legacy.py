"""SGLang's server flags declared by hand: ``parser.add_argument`` calls in ``ServerArgs.add_cli_args``.

SGLang 0.5.12 and older declare every flag that way (sglang/srt/server_args.py), 0.5.17 and newer only
a few (``--config``, deprecated spellings, choices made at run time). Read without importing: each
call's option strings, the field it sets (``dest=``, else the first long option; ``from_cli_args``
renames some: ``args.tp_size = args.tensor_parallel_size``), its default (a constant or
``ServerArgs.<field>``, read from the class body) and, where plain, its type and choices (for
probes/launch/sglang_values.py). A call with an ``action`` or ``nargs`` gets no value spec.
"""

from __future__ import annotations

import ast
from typing import Any, Dict, List, Optional

TYPES = {"int": "int", "float": "float", "str": "str", "human_readable_int": "human_readable_int"}


def module_lists(tree: ast.AST) -> Dict[str, List[Any]]:
    """Module-level list literals of server_args.py (e.g. its ``*_CHOICES`` before arg_groups/choices.py)."""
    out: Dict[str, List[Any]] = {}
    for node in getattr(tree, "body", []):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                and isinstance(node.value, (ast.List, ast.Tuple)):
            values = [e.value for e in node.value.elts if isinstance(e, ast.Constant)]
            if len(values) == len(node.value.elts):
                out[node.targets[0].id] = values
    return out


def _class_defaults(tree: ast.AST) -> Dict[str, Any]:
    """``field: T = constant`` of ``class ServerArgs``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "ServerArgs":
            return {item.target.id: item.value.value for item in node.body
                    if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name) and isinstance(item.value, ast.Constant)}
    return {}


def _renames(tree: ast.AST) -> Dict[str, str]:
    """{argparse dest: ServerArgs field} from ``from_cli_args``'s ``args.X = args.Y`` lines."""
    out: Dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "from_cli_args":
            for line in ast.walk(node):
                if isinstance(line, ast.Assign) and len(line.targets) == 1 and isinstance(line.targets[0], ast.Attribute) \
                        and isinstance(line.value, ast.Attribute) and isinstance(line.value.value, ast.Name) \
                        and isinstance(line.targets[0].value, ast.Name) and line.value.value.id == line.targets[0].value.id:
                    out[line.value.attr] = line.targets[0].attr
    return out


def _spec(keywords: Dict[str, ast.AST], lists: Dict[str, List[Any]]) -> Optional[Dict[str, Any]]:
    if "action" in keywords or "nargs" in keywords:
        return None
    kind = keywords.get("type")
    type_name = TYPES.get(getattr(kind, "id", "")) if kind is not None else "str"
    if type_name is None:
        return None
    choices: Optional[List[Any]] = None
    given = keywords.get("choices")
    if given is not None:
        if isinstance(given, (ast.List, ast.Tuple)) and all(isinstance(e, ast.Constant) for e in given.elts):
            choices = [e.value for e in given.elts]  # type: ignore[attr-defined]
        elif isinstance(given, ast.Name) and given.id in lists:
            choices = lists[given.id]
        else:
            return None  # made at run time: not decided here
    return {"type": type_name, "choices": choices}


def add_argument_flags(tree: ast.AST, lists: Dict[str, List[Any]], out: Dict[str, Any]) -> None:
    """Every ``add_argument`` call's flags into ``out`` (read_flags' accumulator), with field, default and value spec."""
    defaults, renames = _class_defaults(tree), _renames(tree)
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument"):
            continue
        options = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.startswith("-")]
        if not options:
            continue
        keywords = {k.arg: k.value for k in node.keywords if k.arg}
        dest = keywords.get("dest")
        longs = [o for o in options if o.startswith("--")]
        name = dest.value if isinstance(dest, ast.Constant) and isinstance(dest.value, str) else (
            longs[0][2:].replace("-", "_") if longs else None)
        field = renames.get(name, name) if name else None
        for option in options:
            out["flags"].setdefault(option, None)
            if field and out["flags"][option] is None:
                out["flags"][option] = field
        if not field:
            continue
        default = keywords.get("default")
        known = False
        value: Any = None
        if isinstance(default, ast.Constant):
            known, value = True, default.value
        elif isinstance(default, ast.Attribute) and getattr(default.value, "id", "") == "ServerArgs" and default.attr in defaults:
            known, value = True, defaults[default.attr]
        if known:  # a call or an expression: its value is not read
            out["defaults"].setdefault(options[0], value)
            out["field_defaults"].setdefault(field, value)
        spec = _spec(keywords, lists)
        if spec:
            out["values"].setdefault(field, spec)
