"""The values SGLang's argument parser refuses, decided from its installed source (never imported).

``add_cli_args_from_dataclass`` (sglang/srt/arg_groups/arg_utils.py) gives each ``A[T, …]`` field
of ``sglang/srt/arg_groups/fields/*.py`` an argparse ``type`` and ``choices``: ``int``/``float``
from ``T`` (``Optional[T]`` unwrapped), choices from ``Arg(choices=…)`` or a ``Literal[…]`` type,
``Arg(type_parser=…)`` in place of the type. argparse then exits with "argument --tp-size:
invalid int value: 'two'" or "invalid choice: 'x' (choose from …)". Decided here only where the
source says it plainly: int, float and str fields, ``human_readable_int``, choices given as a
list, a ``Literal`` or a list named in ``sglang/srt/arg_groups/choices.py``. A field with an
``action``, ``nargs``, another ``type_parser`` or choices made at run time is never judged.
"""

from __future__ import annotations

import ast
import os
import re
from decimal import Decimal
from typing import Any, Dict, List, Optional, Sequence, Tuple


CHOICES_FILE = os.path.join("srt", "arg_groups", "choices.py")
_NEGATIVE = re.compile(r"^-\d+$|^-\d*\.\d+$")  # argparse's _negative_number_matcher: such a word is a value
SCALARS = ("int", "float", "str")
_SI = {"k": 10 ** 3, "M": 10 ** 6, "G": 10 ** 9, "T": 10 ** 12}
_IEC = {"Ki": 2 ** 10, "Mi": 2 ** 20, "Gi": 2 ** 30, "Ti": 2 ** 40}
_HUMAN_INT = re.compile(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)")


def match(flag: str, known: Sequence[str]) -> Tuple[Optional[str], List[str]]:
    """(the flag argparse takes ``flag`` for, or None; the candidates when it is an ambiguous prefix)."""
    if flag in known:
        return flag, []
    if flag.startswith("--"):
        starts = [k for k in known if k.startswith(flag)]
        if len(starts) == 1:
            return starts[0], []
        if starts:
            return None, starts
    return None, []


def human_readable_int(text: Optional[str]) -> Optional[int]:
    """SGLang's ``--context-length`` parser (sglang/srt/utils/common.py human_readable_int): 4096,
    32k (SI, decimals allowed: 25.6k), 128Ki (IEC, integers only), case-sensitive; None where it refuses."""
    if text is None:
        return None
    found = _HUMAN_INT.fullmatch(text.strip())
    if found:
        number, suffix = found.groups()
        if suffix in _IEC:
            return None if "." in number else int(number) * _IEC[suffix]
        return int(Decimal(number) * _SI[suffix])
    try:
        return int(text.strip())
    except ValueError:
        return None


def choice_lists(package: str, read_file) -> Dict[str, List[Any]]:
    """{NAME: [constants]} of the module-level list literals in sglang/srt/arg_groups/choices.py."""
    text = read_file(os.path.join(package, CHOICES_FILE))
    try:
        tree = ast.parse(text or "")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return {}
    out: Dict[str, List[Any]] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            values = _constants(node.value)
            if values is not None:
                out[node.targets[0].id] = values
    return out


def _constants(node: ast.AST) -> Optional[List[Any]]:
    if not isinstance(node, (ast.List, ast.Tuple)):
        return None
    values = [e.value for e in node.elts if isinstance(e, ast.Constant)]
    return values if len(values) == len(node.elts) else None


def _slice(node: ast.Subscript) -> ast.AST:
    """A subscript's slice (Python 3.8 wraps it in ast.Index; a Constant's or Subscript's ``.value`` is not that)."""
    inner = node.slice
    return inner.value if type(inner).__name__ == "Index" else inner  # type: ignore[attr-defined]


def _unwrap_optional(node: ast.AST) -> ast.AST:
    if isinstance(node, ast.Subscript) and getattr(node.value, "id", getattr(node.value, "attr", "")) in ("Optional", "Union"):
        inner = _slice(node)
        items = inner.elts if isinstance(inner, ast.Tuple) else [inner]
        kept = [i for i in items if not (isinstance(i, ast.Constant) and i.value is None)]
        return kept[0] if len(kept) == 1 else node
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):  # T | None
        sides = [s for s in (node.left, node.right) if not (isinstance(s, ast.Constant) and s.value is None)]
        return sides[0] if len(sides) == 1 else node
    return node


def value_spec(annotation: ast.AST, meta: ast.AST, lists: Dict[str, List[Any]]) -> Optional[Dict[str, Any]]:
    """{"type": int|float|str|human_readable_int, "choices": [...] or None} of one field, or None: not decided here."""
    keywords = {k.arg: k.value for k in getattr(meta, "keywords", []) if k.arg}
    if "action" in keywords or "nargs" in keywords:
        return None
    items = _slice(annotation) if isinstance(annotation, ast.Subscript) else None
    if not isinstance(items, ast.Tuple) or not items.elts:
        return None
    kind = _unwrap_optional(items.elts[0])
    choices: Optional[List[Any]] = None
    if isinstance(kind, ast.Subscript) and getattr(kind.value, "id", getattr(kind.value, "attr", "")) == "Literal":
        inner = _slice(kind)
        choices = _constants(inner) if isinstance(inner, ast.Tuple) else (
            [inner.value] if isinstance(inner, ast.Constant) else None)
        typed = [c for c in choices or [] if c is not None]  # Literal[None, "a"]: argparse's type is the first value's
        if not typed:
            return None
        type_name = type(typed[0]).__name__
    elif isinstance(kind, ast.Name) and kind.id in SCALARS:
        type_name = kind.id
    else:
        return None  # bool (a switch), lists, dicts, custom types
    parser = keywords.get("type_parser")
    if parser is not None:
        if getattr(parser, "id", getattr(parser, "attr", "")) != "human_readable_int":
            return None
        type_name = "human_readable_int"
    given = keywords.get("choices")
    if given is not None:
        choices = _constants(given) if isinstance(given, (ast.List, ast.Tuple)) else (
            lists.get(given.id) if isinstance(given, ast.Name) else None)
        if choices is None:
            return None  # made at run time (Backend.ALL, a function): not decided here
    if type_name not in SCALARS + ("human_readable_int",):
        return None
    return {"type": type_name, "choices": choices}


def _convert(type_name: str, text: str) -> Any:
    """The value as argparse's ``type`` gives it, or raises ValueError."""
    if type_name == "int":
        return int(text)
    if type_name == "float":
        return float(text)
    if type_name == "human_readable_int":
        value = human_readable_int(text)
        if value is None:
            raise ValueError(text)
        return value
    return text


def value_errors(words: Sequence[str], read: Dict[str, Any]) -> List[Dict[str, Any]]:
    """[{flag, value, problem}] for each value SGLang's parser refuses, in argparse's words."""
    specs = read.get("values") or {}
    fields = read.get("fields") or {}
    known = read.get("flags") or []
    out: List[Dict[str, Any]] = []
    for i, word in enumerate(words):
        if word == "--":
            break
        if not word.startswith("--"):
            continue
        typed, eq, value = word.partition("=")
        canonical, _ = match(typed, known)
        field = fields.get(canonical or "")
        spec = specs.get(field)
        if not spec:
            continue
        name = "/".join(f for f, n in fields.items() if n == field)  # argparse names the action by all its option strings
        if not eq:
            following = words[i + 1] if i + 1 < len(words) else None
            if following is None or (following.startswith("-") and not _NEGATIVE.match(following)):
                continue  # "expected one argument": argparse's own error, not judged here
            value = following
        try:
            converted = _convert(spec["type"], value)
        except (ValueError, ArithmeticError):
            out.append({"flag": typed, "argument": name, "value": value, "problem": f"invalid {spec['type']} value: {value!r}"})
            continue
        choices = spec.get("choices")
        if choices is not None and converted not in choices:
            shown = ", ".join(repr(c) for c in choices[:10]) + (f", … {len(choices) - 10} more" if len(choices) > 10 else "")
            out.append({"flag": typed, "argument": name, "value": value, "problem": f"invalid choice: {value!r} (choose from {shown})"})
    return out
