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

from gpudoctor.probes.launch import sglang_args_legacy as legacy, sglang_values
from gpudoctor.probes.launch.sglang_values import human_readable_int, match  # noqa: F401  (preflight's names for them)

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
    """{"flags": sorted flag names, "defaults": {flag: literal default}, "fields": {flag: field}, "field_defaults",
    "values": {field: value spec}, "files", "problems"} of an installed SGLang, in any of its three layouts:
    fields in ``srt/arg_groups/fields/*.py`` (0.5.18 on), ``A[…]`` fields of ``ServerArgs`` in
    ``srt/server_args.py`` (0.5.17), or ``parser.add_argument`` calls there (0.5.12 and before)."""
    out: Dict[str, Any] = {"flags": {}, "defaults": {}, "field_defaults": {}, "values": {}, "files": [], "problems": []}
    lists = sglang_values.choice_lists(package, _read)
    directory = os.path.join(package, FIELDS_DIR)
    try:
        names: Optional[List[str]] = sorted(n for n in os.listdir(directory) if n.endswith(".py"))
    except OSError:
        names = None  # an older layout: everything is in server_args.py
    for name in names or []:
        tree = _parse(os.path.join(directory, name), name, out["problems"])
        if tree is not None:
            out["files"].append(f"sglang/srt/arg_groups/fields/{name}")
            _annotated_fields(tree, lists, out)
    tree = _parse(os.path.join(package, SERVER_ARGS), "sglang/srt/server_args.py", out["problems"])
    if tree is not None:
        out["files"].append("sglang/srt/server_args.py")
        here = dict(lists, **legacy.module_lists(tree))  # 0.5.17 and before: the *_CHOICES lists live in server_args.py
        if names is None:
            _annotated_fields(tree, here, out)
        legacy.add_argument_flags(tree, here, out)
    if not any(field for field in out["flags"].values()):
        out["problems"].append("no argument definitions found (neither srt/arg_groups/fields nor server_args.py)")
    flags = out["flags"]
    for flag in SERVE_ONLY + ARGPARSE:
        flags.setdefault(flag, None)
    return {"flags": sorted(flags), "defaults": out["defaults"], "fields": {f: n for f, n in flags.items() if n},
            "field_defaults": out["field_defaults"], "values": out["values"], "files": out["files"], "problems": out["problems"]}


def _parse(path: str, name: str, problems: List[str]) -> Optional[ast.AST]:
    text = _read(path)
    if text is None:
        problems.append(f"{name} not readable")
        return None
    try:
        return ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        problems.append(f"{name}: {type(exc).__name__}")
        return None


def _annotated_fields(tree: ast.AST, lists: Dict[str, List[Any]], out: Dict[str, Any]) -> None:
    """The ``name: A[T, "help" | Arg(…)] = default`` fields of every class in ``tree``."""
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
                out["flags"][flag] = item.target.id
            spec = sglang_values.value_spec(item.annotation, meta, lists) if found else None
            if spec:
                out["values"][item.target.id] = spec
            if found and isinstance(item.value, ast.Constant):
                out["defaults"][found[0]] = item.value.value
                out["field_defaults"][item.target.id] = item.value.value


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


# --- the GPUs a command takes ------------------------------------------------------------------------
# SGLang 0.5.23 places its schedulers this way (srt/entrypoints/engine.py _calculate_rank_ranges and
# _launch_scheduler_processes, srt/managers/data_parallel_controller.py launch_dp_schedulers):
#   gpu = base_gpu_id + dp_rank * tp * pp * gpu_id_step + (pp_rank % pp_per_node) * tp_per_node
#         + (tp_rank % tp_per_node) * gpu_id_step
# with pp_per_node = max(pp // nnodes, 1) and tp_per_node = tp // max(nnodes // pp, 1). dp_size counts
# replicas; attention DP (--attn-dp-size, or the deprecated --dp-size N --enable-dp-attention, which
# srt/arg_groups/parallel_hook.py turns into --attn-dp-size N) runs inside the TP group's GPUs.
LAYOUT_FIELDS = ("tp_size", "pp_size", "dp_size", "attn_dp_size", "nnodes", "base_gpu_id", "gpu_id_step")


def _field_value(words: Sequence[str], read: Dict[str, Any], field: str) -> Optional[str]:
    spellings = [f for f, n in (read.get("fields") or {}).items() if n == field]
    return value_of(words, read.get("flags") or [], spellings) if spellings else None


def _switch(words: Sequence[str], known: Sequence[str], flag: str) -> bool:
    return any(match(w.split("=", 1)[0], known)[0] == flag for w in words if w.startswith("--"))


def parallel_layout(words: Sequence[str], read: Dict[str, Any]) -> Dict[str, Any]:
    """{tp_size, …, "gpus": GPUs on this node, "highest": the highest GPU index it uses, "why"}: "gpus"
    is None (with "why") where the layout is not this simple or a value is not an integer."""
    out: Dict[str, Any] = {}
    defined = set((read.get("fields") or {}).values())
    if read.get("problems") or not {"tp_size", "pp_size", "dp_size"} <= defined:
        # SGLang before the arg_groups namespaces (0.5.17 and older declare ServerArgs differently)
        return {"gpus": None, "why": "this SGLang's parallel flags could not be read from its source"}
    defaults = read.get("field_defaults") or {}
    for field in LAYOUT_FIELDS:
        text = _field_value(words, read, field)
        default = defaults.get(field, 0 if field == "base_gpu_id" else 1)
        try:
            out[field] = int(text) if text is not None else int(default)
        except (TypeError, ValueError):
            return dict(out, gpus=None, why=f"{field} is not an integer ({text!r}): SGLang's parser refuses it")
    out["dp_attention"] = _switch(words, read.get("flags") or [], "--enable-dp-attention")
    if out["dp_attention"] and out["attn_dp_size"] == 1:
        out["attn_dp_size"], out["dp_size"] = out["dp_size"], 1  # parallel_hook.py _handle_deprecated_dp_attention
    tp, pp, dp, nnodes = out["tp_size"], out["pp_size"], out["dp_size"], out["nnodes"]
    base, step = out["base_gpu_id"], out["gpu_id_step"]
    if min(tp, pp, dp, nnodes, out["attn_dp_size"], step) < 1 or base < 0:
        return dict(out, gpus=None, why="a parallel size below 1")
    if nnodes > 1 and dp > 1:
        return dict(out, gpus=None, why="data-parallel replicas across several nodes are not judged here")
    pp_per_node = max(pp // nnodes, 1)
    tp_per_node = tp // max(nnodes // pp, 1)
    if tp_per_node < 1:
        return dict(out, gpus=None, why="more nodes than TP × PP ranks")
    out["gpus"] = dp * pp_per_node * tp_per_node
    out["highest"] = base + (dp - 1) * tp * pp * step + (pp_per_node - 1) * tp_per_node + (tp_per_node - 1) * step
    return out


def mem_fraction(words: Sequence[str], read: Dict[str, Any]) -> Dict[str, Any]:
    """{"typed": the --mem-fraction-static value as typed or None, "value": it as a float or None}."""
    text = _field_value(words, read, "mem_fraction_static")
    try:
        value = float(text) if text is not None else None
    except ValueError:
        value = None  # argparse's float() refuses it: the parser's error, not judged here
    return {"typed": text, "value": value, "defined": "mem_fraction_static" in (read.get("fields") or {}).values()}


# The fields preflight reads about the model and its drafter (sglang/srt/arg_groups/fields/model.py, spec.py).
MODEL_FIELDS = ("context_length", "revision", "trust_remote_code", "speculative_algorithm", "speculative_draft_model_path",
                "speculative_draft_model_revision", "speculative_num_steps", "speculative_eagle_topk",
                "speculative_num_draft_tokens")


def model_settings(words: Sequence[str], read: Dict[str, Any]) -> Dict[str, Any]:
    """What the command sets about the model and speculative decoding, by SGLang field name:
    integers as SGLang parses them (None where its parser would refuse; ``typed`` keeps the text)."""
    out: Dict[str, Any] = {"typed": {}}
    for field in MODEL_FIELDS:
        if field == "trust_remote_code":
            spellings = [f for f, n in (read.get("fields") or {}).items() if n == field]
            out[field] = any(_switch(words, read.get("flags") or [], s) for s in spellings)
            continue
        text = _field_value(words, read, field)
        if text is None:
            continue
        out["typed"][field] = text
        if field == "context_length":
            out[field] = human_readable_int(text)
        elif field.startswith("speculative_num") or field == "speculative_eagle_topk":
            out[field] = int(text) if text.lstrip("-").isdigit() else None
        else:
            out[field] = text
    return out


def spelled_as(words: Sequence[str], read: Dict[str, Any]) -> Dict[str, str]:
    """{flag as typed: the field's own flag} for each long flag typed in another spelling (an alias or
    an argparse abbreviation: ``--tp`` -> ``--tp-size``), so a fix edits the flag where it was typed."""
    fields = read.get("fields") or {}
    primary: Dict[str, str] = {}
    for flag, field in fields.items():
        primary.setdefault(field, "--" + field.replace("_", "-") if ("--" + field.replace("_", "-")) in fields else flag)
    out: Dict[str, str] = {}
    for typed, _ in _option_words(words):
        canonical, _ = match(typed, read.get("flags") or [])
        field = fields.get(canonical or "")
        if field and primary.get(field) and typed != primary[field]:
            out[typed] = primary[field]
    return out
