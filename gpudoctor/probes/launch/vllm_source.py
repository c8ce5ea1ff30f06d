"""What the installed vLLM accepts, read from its source text (never imported).

Where vLLM defines things, in the versions read (vllm-project/vllm in the code index, 0.7 to
late 2026; https://github.com/vllm-project/vllm):

- **Flags.** ``vllm/engine/arg_utils.py`` ``EngineArgs.add_cli_args`` calls
  ``group.add_argument("--max-model-len", **model_kwargs["max_model_len"])`` with the flag
  names as string literals (≥ 0.10; older versions the same call with ``type=``/``action=``);
  ``vllm/entrypoints/openai/cli_args.py`` adds ``--host``, ``--port``, ``--tool-call-parser``
  … either the same way (older) or in a loop ``for key, value in frontend_kwargs.items():
  frontend_group.add_argument(f"--{key.replace('_', '-')}", **value)`` over the fields of the
  ``FrontendArgs`` dataclass (``frontend_kwargs = get_kwargs(FrontendArgs)``). Both forms are
  read: string literals of ``add_argument(`` calls, and the fields of every class passed to
  ``get_kwargs(...)`` in a file that adds flags from an f-string. A flag is a switch when its
  call says ``action="store_true"`` / ``BooleanOptionalAction`` or its dataclass field is a
  ``bool`` (``get_kwargs`` makes those ``BooleanOptionalAction``, hence ``--no-…``).
- **Tool-call / reasoning parsers.** Older: ``@ToolParserManager.register_module("name")`` or
  ``(["a", "b"])`` in ``vllm/entrypoints/openai/tool_parsers/*.py``; newer: the dict
  ``_TOOL_PARSERS_TO_REGISTER = {"name": (file, class), …}`` in ``vllm/tool_parsers/__init__.py``
  (and ``_REASONING_PARSERS_TO_REGISTER`` in ``vllm/reasoning/__init__.py``), or
  ``register_lazy_module("name", …)`` calls.
- **Speculative methods.** ``SpeculativeMethod = Literal["ngram", …, EagleModelTypes, …]`` in
  ``vllm/config/speculative.py`` (older: ``vllm/config.py``), aliases resolved.
- **Architectures.** The keys of the ``_…_MODELS = {"Qwen3ForCausalLM": ("qwen3", …)}``
  dicts of ``vllm/model_executor/models/registry.py``.
- **Quantization methods.** Per config class in ``vllm/model_executor/layers/quantization/``:
  ``get_name()`` returns the method, ``get_min_capability()`` the minimum compute capability
  (×10) that vLLM enforces ("The quantization method … is not supported for the current
  GPU. Minimum capability: …").
- **Attention backends.** Members of ``AttentionBackendEnum`` (``vllm/v1/attention/backends/
  registry.py``) or ``_Backend`` (older ``vllm/platforms/interface.py`` /
  ``vllm/attention/backends/registry.py``).
- **Markers**: whether ``vllm/envs.py`` still reads ``VLLM_ATTENTION_BACKEND``
  (https://docs.vllm.ai/en/latest/configuration/env_vars.html). Known-fix markers (DFlash's layer-id offset,
  PR #40727 …) are gpudoctor/knowledge/advisories.py's;
  probe.py runs them on the command's vLLM through probes/vllm_build.py.

Every extractor is a regular expression over the text, tolerant of formatting and of syntax
this interpreter could not parse; each returns None (unknown) when the place it reads does
not exist in this version.
"""

from __future__ import annotations

import glob
import os
import re
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Set, Tuple

from gpudoctor.probes.launch.vllm_locate import read
# Where the installed vLLM is (probe.py and the tests read these from here):
from gpudoctor.probes.launch.vllm_locate import Location as Location, _shebang as _shebang, locate as locate, same_environment as same_environment

MAX_PARSER_FILES = 400


# --- flags ----------------------------------------------------------------------------------------
FLAG_FILES = ("engine/arg_utils.py", "entrypoints/openai/cli_args.py", "entrypoints/cli/serve.py",
              "entrypoints/utils.py", "entrypoints/openai/api_server.py")
_CALL = re.compile(r"\badd_argument\s*\(")
_STRING = re.compile(r"""(?P<f>[fF]?)(?P<q>["'])(?P<s>(?:\\.|(?!(?P=q)).)*)(?P=q)""")
_FIELD = re.compile(r"^(?P<indent>[ \t]+)(?P<name>[a-z_][a-z0-9_]*)\s*:\s*(?P<type>[^=\n]+?)\s*(?:=|$)", re.M)
_BOOL_TYPE = re.compile(r"^(?:bool|Optional\[bool\]|bool\s*\|\s*None|None\s*\|\s*bool)$")


def _call_text(text: str, start: int, limit: int = 4000) -> str:
    """The argument text of a call whose '(' ends at ``start``: up to the matching ')'."""
    depth, i, end = 1, start, min(len(text), start + limit)
    while i < end:
        char = text[i]
        if char in "\"'":
            quote = text[i : i + 3] if text[i : i + 3] in ('"""', "'''") else char
            close = text.find(quote, i + len(quote))
            while close > 0 and text[close - 1] == "\\" and len(quote) == 1:
                close = text.find(quote, close + 1)
            i = (close + len(quote)) if close > 0 else end
            continue
        if char == "#":
            newline = text.find("\n", i)
            i = newline if newline > 0 else end
            continue
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
            if depth == 0:
                return text[start:i]
        i += 1
    return text[start:end]


def _class_fields(text: str) -> Dict[str, Tuple[List[str], Dict[str, str]]]:
    """class name -> (bases, {field: annotation}) for classes at the top level of a module."""
    out: Dict[str, Tuple[List[str], Dict[str, str]]] = {}
    for match in re.finditer(r"^class\s+(\w+)\s*(?:\(([^)]*)\))?\s*:", text, re.M):
        start = match.end()
        nxt = re.search(r"^\S", text[start:], re.M)
        body = text[start : start + nxt.start()] if nxt else text[start:]
        fields: Dict[str, str] = {}
        for item in _FIELD.finditer(body):
            if len(item.group("indent").expandtabs()) != 4:
                continue  # a nested function's local annotation
            annotation = item.group("type").strip()
            if annotation.startswith("ClassVar") or item.group("name").startswith("_"):
                continue
            fields.setdefault(item.group("name"), annotation)
        bases = [b.strip().split("[")[0].split(".")[-1] for b in (match.group(2) or "").split(",") if b.strip()]
        out[match.group(1)] = (bases, fields)
    return out


def _all_fields(name: str, classes: Dict[str, Tuple[List[str], Dict[str, str]]], seen: Optional[Set[str]] = None) -> Dict[str, str]:
    seen = seen or set()
    if name in seen or name not in classes:
        return {}
    seen.add(name)
    bases, fields = classes[name]
    merged: Dict[str, str] = {}
    for base in bases:
        merged.update(_all_fields(base, classes, seen))
    merged.update(fields)
    return merged


def _subclasses(name: str, classes: Dict[str, Tuple[List[str], Dict[str, str]]]) -> Set[str]:
    found: Set[str] = set()
    changed = True
    while changed:
        changed = False
        for other, (bases, _) in classes.items():
            if other not in found and (name in bases or found.intersection(bases)):
                found.add(other)
                changed = True
    return found


@dataclass
class Flags:
    known: Set[str]
    aliases: Dict[str, str]
    switches: Set[str]
    files: List[str]


def flag_files(package: str) -> List[str]:
    """FLAG_FILES plus every cli_args.py under vllm/entrypoints (0.33 has entrypoints/common/)."""
    found = list(FLAG_FILES)
    for path in sorted(glob.glob(os.path.join(package, "entrypoints", "**", "cli_args.py"), recursive=True))[:20]:
        rel = os.path.relpath(path, package).replace(os.sep, "/")
        if rel not in found:
            found.append(rel)
    return found


def bool_fields(package: str) -> Set[str]:
    """Snake-case names of bool fields of vLLM's config classes (get_kwargs makes them switches)."""
    names: Set[str] = set()
    files = sorted(glob.glob(os.path.join(package, "config", "*.py"))) + [os.path.join(package, "config.py")]
    files += [os.path.join(package, rel) for rel in flag_files(package)]
    for path in files:
        text = read(path)
        if not text:
            continue
        for item in _FIELD.finditer(text):
            if _BOOL_TYPE.match(item.group("type").strip()):
                names.add(item.group("name"))
    return names


def flags(package: str) -> Optional[Flags]:
    known: Set[str] = set()
    aliases: Dict[str, str] = {}
    switches: Set[str] = set()
    files: List[str] = []
    classes: Dict[str, Tuple[List[str], Dict[str, str]]] = {}
    loop_classes: Set[str] = set()
    texts = []
    for rel in flag_files(package):
        path = os.path.join(package, rel)
        text = read(path)
        if text is None:
            continue
        files.append(rel)
        texts.append(text)
        classes.update(_class_fields(text))
    bools = bool_fields(package) if texts else set()
    for text in texts:
        dynamic = False
        for call in _CALL.finditer(text):
            args = _call_text(text, call.end())
            names: List[str] = []
            for string in _STRING.finditer(args):
                value = string.group("s")
                if string.group("f") and value.startswith("--{"):
                    dynamic = True
                    break
                if value.startswith("-") and re.fullmatch(r"--?[A-Za-z0-9][\w.-]*", value):
                    names.append(value)
                else:
                    break  # the first non-flag string ends the names (help text, a default …)
            if not names:
                continue
            longs = [n for n in names if n.startswith("--")] or names
            canonical = longs[0]
            known.update(names)
            for name in names:
                if name != canonical:
                    aliases[name] = canonical
            action = re.search(r"action\s*=\s*([\w.\"']+)", args)
            kwargs_key = re.search(r"\*\*\s*\w+\s*\[\s*[\"'](\w+)[\"']\s*\]", args)
            if action and re.search(r"store_true|store_false|BooleanOptionalAction|StoreBoolean", action.group(1)):
                switches.add(canonical)
                if "BooleanOptionalAction" in action.group(1):
                    known.add("--no-" + canonical[2:])
            elif kwargs_key and kwargs_key.group(1) in bools and not re.search(r"\btype\s*=", args):
                switches.add(canonical)
                known.add("--no-" + canonical[2:])
        if dynamic:
            for found in re.finditer(r"get_kwargs\(\s*(\w+)\s*\)", text):
                if found.group(1) in ("cls", "self"):
                    # `get_kwargs(cls)` in a classmethod: this class and its subclasses.
                    owner = [m.group(1) for m in re.finditer(r"^class\s+(\w+)", text[: found.start()], re.M)]
                    if owner:
                        loop_classes.add(owner[-1])
                        loop_classes.update(_subclasses(owner[-1], classes))
                else:
                    loop_classes.add(found.group(1))
        # Flags added in a loop over a literal list: `for arg, type in [("--x", str), …]:
        # group.add_argument(arg, type=type, …)` (0.11's deprecated guided-decoding flags).
        for loop in re.finditer(r"^\s*for\s+[\w, ()]+\s+in\s+[\[(]", text, re.M):
            items = _call_text(text, loop.end())
            after = text[loop.end() + len(items) : loop.end() + len(items) + 600]
            if not re.search(r"add_argument\(\s*[a-z_]\w*\s*[,)]", after):
                continue
            for name, kind in re.findall(r"\(\s*[\"'](--[a-z][\w-]*)[\"']\s*,\s*(\w+)", items):
                known.add(name)
                if kind == "bool":
                    known.add(name)
    for name in loop_classes:
        for field_name, annotation in _all_fields(name, classes).items():
            flag = "--" + field_name.replace("_", "-")
            known.add(flag)
            if _BOOL_TYPE.match(annotation):
                switches.add(flag)
                known.add("--no-" + flag[2:])
    if not known:
        return None
    known.update({"--help", "-h"})
    return Flags(known, aliases, switches, files)


# --- parser names -----------------------------------------------------------------------------------
_REGISTER = re.compile(r"register_module\(\s*(?:name\s*=\s*)?(\[[^\]]*\]|\(?\s*[\"'][^\"']+[\"'])")
_LAZY = re.compile(r"register_lazy_module\(\s*(?:name\s*=\s*)?[\"']([^\"']+)[\"']")


def _dict_keys(text: str, name_pattern: str) -> Optional[List[str]]:
    match = re.search(r"^" + name_pattern + r"\s*(?::[^=\n]*)?=\s*\{", text, re.M)
    if not match:
        return None
    body = _call_text(text, match.end(), limit=1 << 20)
    keys: List[str] = []
    depth = 0
    for line in body.splitlines():
        if depth == 0:
            found = re.match(r"""\s*["']([^"']+)["']\s*:""", line)
            if found:
                keys.append(found.group(1))
        depth += line.count("(") + line.count("{") + line.count("[") - line.count(")") - line.count("}") - line.count("]")
        depth = max(depth, 0)
    return keys


def parser_names(package: str, kind: str) -> Optional[Dict[str, Any]]:
    """Registered names of tool-call ("tool") or reasoning ("reasoning") parsers."""
    if kind == "tool":
        dirs = ("tool_parsers", "entrypoints/openai/tool_parsers", "entrypoints/tool_parsers")
        registry_name = r"_TOOL_PARSERS_TO_REGISTER"
    else:
        dirs = ("reasoning", "entrypoints/openai/reasoning_parsers", "reasoning_parsers")
        registry_name = r"_REASONING_PARSERS_TO_REGISTER"
    names: Set[str] = set()
    places: List[str] = []
    for rel in dirs:
        folder = os.path.join(package, rel)
        if not os.path.isdir(folder):
            continue
        places.append(rel)
        files = sorted(glob.glob(os.path.join(folder, "*.py")))[:MAX_PARSER_FILES]
        for path in files:
            text = read(path)
            if not text:
                continue
            keys = _dict_keys(text, registry_name)
            if keys:
                names.update(keys)
            for match in _REGISTER.finditer(text):
                names.update(re.findall(r"[\"']([^\"']+)[\"']", match.group(1)))
            names.update(_LAZY.findall(text))
    if not places:
        return None
    return {"names": sorted(names), "where": places}


# --- speculative methods ---------------------------------------------------------------------------
def _literal_aliases(text: str) -> Dict[str, List[str]]:
    out: Dict[str, List[str]] = {}
    for match in re.finditer(r"^(\w+)\s*(?::[^=\n]*)?=\s*Literal\[", text, re.M):
        body = _call_text(text, match.end())
        items = [item.strip() for item in re.split(r",", re.sub(r"#[^\n]*", "", body)) if item.strip()]
        out[match.group(1)] = items
    return out


def _resolve(name: str, aliases: Dict[str, List[str]], seen: Set[str]) -> List[str]:
    if name in seen:
        return []
    seen.add(name)
    values: List[str] = []
    for item in aliases.get(name, []):
        if item[:1] in "\"'":
            values.append(item.strip("\"'"))
        elif item in aliases:
            values.extend(_resolve(item, aliases, seen))
    return values


def speculative_methods(package: str) -> Optional[List[str]]:
    for rel in ("config/speculative.py", "config.py"):
        text = read(os.path.join(package, rel))
        if not text:
            continue
        aliases = _literal_aliases(text)
        if "SpeculativeMethod" in aliases:
            return sorted(set(_resolve("SpeculativeMethod", aliases, set())))
    return None


# --- architectures -----------------------------------------------------------------------------------
def architectures(package: str) -> Optional[List[str]]:
    text = read(os.path.join(package, "model_executor", "models", "registry.py"))
    if not text:
        return None
    names: Set[str] = set()
    for match in re.finditer(r"^(_\w*MODELS\w*)\s*(?::[^=\n]*)?=\s*\{", text, re.M):
        keys = _dict_keys(text, re.escape(match.group(1)))
        names.update(keys or [])
    return sorted(names) or None


# --- quantization -------------------------------------------------------------------------------------
_GET_NAME = re.compile(r"def\s+get_name\s*\([^)]*\)[^:]*:\s*(?:\"\"\"[\s\S]*?\"\"\"\s*)?return\s+[\"']([\w.-]+)[\"']")
_MIN_CAP = re.compile(r"def\s+get_min_capability\s*\([^)]*\)[^:]*:\s*(?:(?:\"\"\"[\s\S]*?\"\"\"|#[^\n]*)\s*)*return\s+(\d+)")


def quantization_min_capability(package: str) -> Optional[Dict[str, int]]:
    folder = os.path.join(package, "model_executor", "layers", "quantization")
    if not os.path.isdir(folder):
        return None
    out: Dict[str, int] = {}
    files = sorted(glob.glob(os.path.join(folder, "*.py")) + glob.glob(os.path.join(folder, "*", "*.py")))
    for path in files[:MAX_PARSER_FILES]:
        text = read(path)
        if not text or "get_min_capability" not in text:
            continue
        blocks = re.split(r"^class\s", text, flags=re.M)
        for block in blocks[1:]:
            name = _GET_NAME.search(block)
            cap = _MIN_CAP.search(block)
            if name and cap:
                out.setdefault(name.group(1), int(cap.group(1)))
    return out or None


# --- attention backends ----------------------------------------------------------------------------------
BACKEND_FILES = ("v1/attention/backends/registry.py", "attention/backends/registry.py", "platforms/interface.py")


def attention_backends(package: str) -> Optional[List[str]]:
    for rel in BACKEND_FILES:
        text = read(os.path.join(package, rel))
        if not text:
            continue
        match = re.search(r"^class\s+(AttentionBackendEnum|_Backend)\b[^:]*:", text, re.M)
        if not match:
            continue
        start = match.end()
        nxt = re.search(r"^\S", text[start:], re.M)
        body = text[start : start + nxt.start()] if nxt else text[start:]
        names = re.findall(r"^    ([A-Z][A-Z0-9_]*)\s*=", body, re.M)
        if names:
            return sorted(set(names))
    return None


# --- markers ----------------------------------------------------------------------------------------------
def markers(package: str) -> Dict[str, Optional[bool]]:
    """Code that decides a known behaviour: True present, False absent, None not applicable here.

    (Known-fix markers such as DFlash's layer-id offset belong to gpudoctor/knowledge/advisories.py and
    probes/vllm_build.py; the launch probe runs those on the command's vLLM.)
    """
    envs = read(os.path.join(package, "envs.py"))
    return {"reads_vllm_attention_backend_env": None if envs is None else ("VLLM_ATTENTION_BACKEND" in envs)}


_MEMO: Dict[Tuple[str, Any], Dict[str, Any]] = {}


def everything(package: str) -> Dict[str, Any]:
    """All extractions (each None when this vLLM has no such place); read once per process and
    vLLM tree (keyed by the tree's path and its arg_utils.py's size and mtime)."""
    try:
        stat = os.stat(os.path.join(package, "engine", "arg_utils.py"))
        key: Tuple[str, Any] = (os.path.realpath(package), (stat.st_size, stat.st_mtime_ns))
    except OSError:
        key = (os.path.realpath(package), None)
    if key not in _MEMO:
        if len(_MEMO) > 8:
            _MEMO.clear()
        _MEMO[key] = _everything(package)
    return _MEMO[key]


def _everything(package: str) -> Dict[str, Any]:
    flag_table = flags(package)
    try:
        from gpudoctor.probes.launch import vllm_args_cache

        arg_table = vllm_args_cache.read_args(package, flag_files(package))
    except Exception:  # an odd tree: names from the text scan only, no value checks
        arg_table = None
    return {
        "flags": flag_table,
        "args": arg_table,
        "tool_parsers": parser_names(package, "tool"),
        "reasoning_parsers": parser_names(package, "reasoning"),
        "spec_methods": speculative_methods(package),
        "architectures": architectures(package),
        "quantization": quantization_min_capability(package),
        "attention_backends": attention_backends(package),
        "markers": markers(package),
        "memory": _memory(package),
    }


def _memory(package: str) -> Optional[Dict[str, Any]]:
    from gpudoctor.probes.launch import vllm_memory

    try:
        return vllm_memory.read(package)
    except Exception:  # an odd tree: the memory rules say unknown
        return None
