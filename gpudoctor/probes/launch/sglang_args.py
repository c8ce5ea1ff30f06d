"""SGLang's server flags, read from its installed source (never imported), and a command checked against them.

SGLang 0.5.x declares its server arguments as fields of namespace classes in
``sglang/srt/arg_groups/fields/*.py``: ``name: A[T, "help"] = default`` or ``A[T, Arg(...)]``
(``arg_utils.add_cli_args_from_dataclass`` turns each into ``--name-with-dashes``, plus
``Arg(cli_name=…)`` / ``Arg(aliases=[…])``; ``Arg(no_cli=True)`` has no flag), and registers
the rest by hand in ``ServerArgs.add_cli_args`` (``sglang/srt/server_args.py``: dynamic
choices, ``--config``, deprecated spellings). ``sglang serve`` takes the model as its first
word too (``cli/serve.py`` ``_normalize_positional_model_path``) and removes ``--model-type``
before parsing (``_extract_model_type_override``). The parser is a plain
``argparse.ArgumentParser``: a unique prefix of a flag is accepted (``allow_abbrev``).
https://github.com/sgl-project/sglang/blob/main/python/sglang/srt/arg_groups/arg_utils.py
"""

from __future__ import annotations

import ast
import difflib
import os
from typing import Any, Dict, List, Optional, Sequence, Tuple

FIELDS_DIR = os.path.join("srt", "arg_groups", "fields")
SERVER_ARGS = os.path.join("srt", "server_args.py")
SERVE_ONLY = ("--model-type",)  # taken out by cli/serve.py before the server parser sees the argv
ARGPARSE = ("-h", "--help")  # argparse.ArgumentParser(prog="sglang serve") adds them (add_help)
MAX_BYTES = 4 << 20


def _read(path: str) -> Optional[str]:
    try:
        with open(path, "rb") as handle:
            return handle.read(MAX_BYTES).decode("utf-8", "replace")
    except OSError:
        return None


def _annotated_meta(annotation: ast.AST) -> Optional[ast.AST]:
    """The metadata of ``A[T, meta]`` / ``Annotated[T, meta, …]``, or None for any other annotation."""
    if not isinstance(annotation, ast.Subscript):
        return None
    head = annotation.value
    name = head.id if isinstance(head, ast.Name) else head.attr if isinstance(head, ast.Attribute) else ""
    if name not in ("A", "Annotated"):
        return None
    items = annotation.slice
    items = getattr(items, "value", items)  # Python 3.8: ast.Index
    if not isinstance(items, ast.Tuple) or len(items.elts) < 2:
        return None
    for meta in items.elts[1:]:
        if isinstance(meta, ast.Constant) and isinstance(meta.value, str):
            return meta
        if isinstance(meta, ast.Call) and getattr(meta.func, "id", getattr(meta.func, "attr", "")) == "Arg":
            return meta
    return None


def _field_flags(name: str, meta: ast.AST) -> List[str]:
    if isinstance(meta, ast.Constant):
        return ["--" + name.replace("_", "-")]
    keywords = {k.arg: k.value for k in getattr(meta, "keywords", []) if k.arg}
    no_cli = keywords.get("no_cli")
    if isinstance(no_cli, ast.Constant) and no_cli.value is True:
        return []
    cli = keywords.get("cli_name")
    flags = [cli.value if isinstance(cli, ast.Constant) and isinstance(cli.value, str) else "--" + name.replace("_", "-")]
    aliases = keywords.get("aliases")
    if isinstance(aliases, (ast.List, ast.Tuple)):
        flags += [e.value for e in aliases.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    action = keywords.get("action")
    if getattr(action, "attr", getattr(action, "id", "")) == "BooleanOptionalAction":
        # argparse.BooleanOptionalAction adds --no-FLAG for each long flag (Python 3.9+).
        flags += ["--no-" + f[2:] for f in flags if f.startswith("--")]
    return flags


def read_flags(package: str) -> Dict[str, Any]:
    """{"flags": sorted flag names, "defaults": {flag: literal default}, "files", "problems"} of an installed SGLang."""
    flags: Dict[str, Optional[str]] = {}
    defaults: Dict[str, Any] = {}
    files: List[str] = []
    problems: List[str] = []
    directory = os.path.join(package, FIELDS_DIR)
    try:
        names = sorted(n for n in os.listdir(directory) if n.endswith(".py"))
    except OSError as exc:
        return {"flags": [], "defaults": {}, "files": [], "problems": [f"{FIELDS_DIR}: {exc.strerror or exc}"]}
    for name in names:
        text = _read(os.path.join(directory, name))
        try:
            tree = ast.parse(text or "")
        except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
            problems.append(f"{name}: {type(exc).__name__}")
            continue
        files.append(f"sglang/srt/arg_groups/fields/{name}")
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef):
                continue
            for item in node.body:
                if not (isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)):
                    continue
                meta = _annotated_meta(item.annotation)
                if meta is None:
                    continue
                found = _field_flags(item.target.id, meta)
                for flag in found:
                    flags[flag] = item.target.id
                if found and isinstance(item.value, ast.Constant):
                    defaults[found[0]] = item.value.value
    text = _read(os.path.join(package, SERVER_ARGS))
    if text is None:
        problems.append("sglang/srt/server_args.py not readable")
    else:
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
            tree = None
            problems.append(f"server_args.py: {type(exc).__name__}")
        for node in ast.walk(tree) if tree is not None else ():
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument":
                for arg in node.args:
                    if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value.startswith("-"):
                        flags[arg.value] = None
        files.append("sglang/srt/server_args.py")
    for flag in SERVE_ONLY + ARGPARSE:
        flags.setdefault(flag, None)
    return {"flags": sorted(flags), "defaults": defaults, "files": files, "problems": problems}


def _option_words(words: Sequence[str]) -> List[Tuple[str, Optional[str]]]:
    """(flag as typed, its =value) for each word that argparse reads as an option."""
    out = []
    for word in words:
        if word == "--":
            break
        if not word.startswith("-") or word == "-" or word[1:2].isdigit() or word[1:2] == ".":
            continue  # a value (a negative number, a path) or a positional
        flag, _, value = word.partition("=")
        out.append((flag, value if "=" in word else None))
    return out


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


def unknown_flags(words: Sequence[str], known: Sequence[str]) -> List[Dict[str, Any]]:
    """The flags of ``words`` SGLang's parser would refuse: {flag, as_typed, suggestion, ambiguous?}."""
    out: List[Dict[str, Any]] = []
    for typed, _ in _option_words(words):
        found, candidates = match(typed, known)
        if found:
            continue
        if candidates:
            out.append({"flag": typed, "as_typed": typed, "suggestion": None, "ambiguous": sorted(candidates)[:4]})
            continue
        close = difflib.get_close_matches(typed, known, n=1, cutoff=0.75)
        out.append({"flag": typed, "as_typed": typed, "suggestion": close[0] if close else None})
    return out


def value_of(words: Sequence[str], known: Sequence[str], wanted: Sequence[str]) -> Optional[str]:
    """The value given to any of ``wanted`` (abbreviations included), the last one winning."""
    found = None
    for i, word in enumerate(words):
        if not word.startswith("--"):
            continue
        flag, eq, value = word.partition("=")
        canonical, _ = match(flag, known)
        if canonical in wanted:
            found = value if eq else (words[i + 1] if i + 1 < len(words) else None)
    return found


def model_of(words: Sequence[str], known: Sequence[str], positional: bool = True) -> Optional[str]:
    """The model: ``sglang serve MODEL`` (its first word; ``positional``) or --model-path / --model."""
    if positional and words and not words[0].startswith("-"):
        return words[0]
    return value_of(words, known, ("--model-path", "--model"))
