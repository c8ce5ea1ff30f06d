"""Read a vLLM launch command the way vLLM's argument parser reads it.

Accepted shapes (research: vLLM ``FlexibleArgumentParser``, vllm/utils/argparse_utils.py):

- ``vllm serve MODEL [flags]`` (also ``--model MODEL``, which vLLM moves to the front),
  ``python -m vllm.entrypoints.openai.api_server --model MODEL [flags]`` and
  ``python -m vllm.entrypoints.cli.main serve MODEL [flags]``;
- ``--flag value`` and ``--flag=value``; underscores in a flag name count as dashes
  (``--max_model_len``), up to the first dot;
- JSON-valued flags, whole (``--speculative-config '{"method": "dflash"}'``) or by key
  (``--speculative-config.method dflash``, ``--compilation-config.level 3``);
- ``-O3`` / ``-O 3`` (optimization level), short aliases (``-tp 2``, ``-sc '{…}'``);
- ``NAME=value`` assignments before the command and the wrappers ``env``, ``exec``,
  ``nohup``, ``time``, ``command``, ``uv run``, whose argv is kept for ``--exec``;
- a command in a file (``--from-file``, read by command_file.py): a shell script or a one-line
  file; backslash continuations, comments, ``export NAME=value`` lines and ``$NAME`` /
  ``${NAME}`` references to them are understood; the first line that launches vLLM is the command.

Nothing here touches the machine.
Which flags take a value and which are switches comes from the installed vLLM's source
(gpudoctor/probes/launch/vllm_source.py) when there is one, else from the built-in table below.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Optional, Sequence, Set, Tuple

# Short aliases vLLM defines next to the long names (vllm/engine/arg_utils.py, recent versions:
# "--tensor-parallel-size", "-tp"; "--speculative-config", "-sc"; "--compilation-config", "-cc"
# (older: "-O"); "--attention-config", "-ac"; "--quantization", "-q"; cli_args.py
# "--api-server-count", "-asc"). Used when the installed vLLM's source is not available.
BUILTIN_ALIASES = {
    "-tp": "--tensor-parallel-size",
    "-pp": "--pipeline-parallel-size",
    "-dp": "--data-parallel-size",
    "-dpl": "--data-parallel-size-local",
    "-q": "--quantization",
    "-sc": "--speculative-config",
    "-cc": "--compilation-config",
    "-ac": "--attention-config",
    "-asc": "--api-server-count",
    "-h": "--help",
}

# Switches (store_true / BooleanOptionalAction) of vLLM serve, for when its source is not
# available: without this list `--trust-remote-code MODEL` would swallow the model.
BUILTIN_SWITCHES = {
    "--trust-remote-code", "--enforce-eager", "--enable-prefix-caching", "--enable-chunked-prefill",
    "--enable-auto-tool-choice", "--disable-log-requests", "--enable-log-requests", "--disable-log-stats",
    "--enable-lora", "--enable-expert-parallel", "--headless", "--skip-tokenizer-init",
    "--disable-custom-all-reduce", "--disable-sliding-window", "--disable-cascade-attn", "--enable-sleep-mode",
    "--disable-frontend-multiprocessing", "--enable-request-id-headers", "--disable-fastapi-docs",
    "--enable-prompt-tokens-details", "--enable-force-include-usage", "--enable-server-load-tracking",
    "--allow-credentials", "--disable-uvicorn-access-log", "--return-tokens-as-token-ids", "--async-scheduling",
    "--enable-log-outputs", "--enable-tokenizer-info-endpoint", "--enable-eplb", "--enable-dbo",
    "--enable-per-request-metrics", "--enable-lora-bias", "--fully-sharded-loras", "--enable-return-routed-experts",
    "--ray-workers-use-nsight", "--disable-mm-preprocessor-cache", "--enable-ssl-refresh", "--trust-request-chat-template",
    "--exclude-tools-when-tool-choice-none", "--enable-mfu-metrics", "--kv-sharing-fast-prefill",
    "--disable-chunked-mm-input", "--enable-multimodal-encoder-data-parallel", "--help",
}

# Flags whose value vLLM reads as JSON (optional_type(json.loads) or a config dataclass).
JSON_FLAGS = {
    "--speculative-config", "--compilation-config", "--attention-config", "--kv-transfer-config",
    "--kv-events-config", "--ec-transfer-config", "--hf-overrides", "--override-generation-config",
    "--limit-mm-per-prompt", "--rope-scaling", "--model-loader-extra-config", "--additional-config",
    "--structured-outputs-config", "--default-chat-template-kwargs", "--reasoning-config", "--kernel-config",
    "--mm-processor-kwargs", "--override-pooler-config", "--pooler-config", "--observability-config",
}
# Of those, the ones a value that is not a JSON object breaks (the rest also take other forms).
JSON_OBJECT_FLAGS = {"--speculative-config", "--attention-config", "--kv-transfer-config", "--hf-overrides"}
# --compilation-config also takes an optimization level ("3") in the versions that had -O.
INT_FLAGS = {
    "--tensor-parallel-size", "--pipeline-parallel-size", "--data-parallel-size", "--data-parallel-size-local",
    "--port", "--max-num-seqs", "--seed", "--api-server-count", "--spec-tokens", "--decode-context-parallel-size",
}
HUMAN_INT_FLAGS = {"--max-model-len", "--max-num-batched-tokens"}
FLOAT_FLAGS = {"--gpu-memory-utilization", "--cpu-offload-gb", "--swap-space", "--kv-cache-memory-bytes"}

WRAPPERS = {"exec", "nohup", "time", "command", "builtin"}
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_PYTHON = re.compile(r"^python[0-9.]*$")
_NUMBER = re.compile(r"^-?\d+(\.\d+)?$")

# vLLM entry modules (``python -m MODULE``): the OpenAI server, and the CLI main that takes
# a subcommand like the ``vllm`` script.
API_SERVER_MODULES = {"vllm.entrypoints.openai.api_server"}
CLI_MODULES = {"vllm.entrypoints.cli.main", "vllm"}


class CommandFileError(ValueError):
    """A --from-file that cannot be read or holds no command: one line for the user."""


@dataclass
class FlagTable:
    """What the installed vLLM accepts; ``known`` None means: not known (vLLM not found)."""

    known: Optional[Set[str]] = None
    aliases: Dict[str, str] = field(default_factory=dict)
    switches: Set[str] = field(default_factory=set)
    # option string -> vllm_args.Arg (what it accepts), read from the installed vLLM's source;
    # a flag missing here (or an empty dict) is checked by the built-in tables only.
    specs: Dict[str, Any] = field(default_factory=dict)
    complete: bool = True  # False: some add_argument calls could not be followed (see vllm_args)
    combinations: List[Dict[str, Any]] = field(default_factory=list)  # cross-flag checks (vllm_combinations)

    def canonical(self, name: str) -> str:
        return self.aliases.get(name) or BUILTIN_ALIASES.get(name) or name

    def spec(self, name: str) -> Any:
        return self.specs.get(name)

    def negative(self, name: str) -> Optional[str]:
        """The canonical flag a negative form sets to False (--no-x, 0.33's --disable-x), else None."""
        spec = self.specs.get(name)
        if spec is not None and name in getattr(spec, "negatives", ()):
            longs = [n for n in spec.names if n.startswith("--")]
            return longs[0] if longs else None
        return None

    def is_switch(self, name: str) -> bool:
        spec = self.specs.get(name)
        if spec is not None:
            return spec.action in ("switch", "bool") or name in spec.negatives
        if name in self.switches or name in BUILTIN_SWITCHES:
            return True
        if name.startswith("--no-"):
            positive = "--" + name[5:]
            return positive in self.switches or positive in BUILTIN_SWITCHES
        return False


@dataclass
class Launch:
    source: str  # "argv" or "FILE:LINE"
    exec_argv: List[str]  # what --exec runs (argv without the leading NAME=value words)
    env: Dict[str, str]  # NAME=value before the command (and exports of a script)
    argv: List[str] = field(default_factory=list)  # the program's argv, wrappers stripped
    kind: str = "other"  # vllm-serve | vllm-api-server | vllm-other | sglang-serve | sglang-other | other
    program: str = ""
    model: Optional[str] = None
    options: Dict[str, Any] = field(default_factory=dict)  # canonical flag -> value (str, True, dict)
    given: List[Tuple[str, str]] = field(default_factory=list)  # (as typed, canonical) in order
    positionals: List[str] = field(default_factory=list)  # extra positional words vLLM would reject
    errors: List[Dict[str, Any]] = field(default_factory=list)  # {flag, value, problem}
    notes: List[str] = field(default_factory=list)

    @property
    def is_vllm(self) -> bool:
        return self.kind in ("vllm-serve", "vllm-api-server")


# --- splitting: assignments, wrappers, program -------------------------------------------------
def split_command(argv: Sequence[str]) -> Tuple[Dict[str, str], List[str], List[str], List[str]]:
    """(assignments, exec_argv, program argv, notes): ``A=1 env B=2 nohup vllm serve m``."""
    argv = list(argv)
    env: Dict[str, str] = {}
    notes: List[str] = []
    i = 0
    while i < len(argv) and _ASSIGNMENT.match(argv[i]):
        name, _, value = argv[i].partition("=")
        env[name] = value
        i += 1
    exec_argv = argv[i:]
    rest = list(exec_argv)
    changed = True
    while rest and changed:
        changed = False
        head = os.path.basename(rest[0])
        if head in WRAPPERS:
            rest = rest[1:]
            while rest and rest[0].startswith("-") and head == "time":
                rest = rest[1:]
            changed = True
        elif head == "env":
            rest = rest[1:]
            while rest:
                if _ASSIGNMENT.match(rest[0]):
                    name, _, value = rest[0].partition("=")
                    env[name] = value
                    rest = rest[1:]
                elif rest[0] in ("-i", "--ignore-environment"):
                    notes.append("env -i: the command starts with an empty environment")
                    rest = rest[1:]
                elif rest[0] in ("-u", "--unset") and len(rest) > 1:
                    rest = rest[2:]
                elif rest[0].startswith("-"):
                    rest = rest[1:]
                else:
                    break
            changed = True
        elif head in ("uv", "uvx", "pipx") and len(rest) > 1 and (head == "uvx" or rest[1] == "run"):
            rest = rest[1:] if head == "uvx" else rest[2:]
            while rest and rest[0].startswith("-"):
                takes_value = rest[0] in ("--with", "--python", "-p", "--from", "--project", "--directory", "--env-file")
                rest = rest[2:] if takes_value and "=" not in rest[0] else rest[1:]
            changed = True
    return env, exec_argv, rest, notes


# `python -m sglang.launch_server …`: SGLang's server entry point (sglang/launch_server.py), the same
# server arguments as `sglang serve` (prepare_server_args).
SGLANG_SERVER_MODULES = ("sglang.launch_server",)


def classify(argv: Sequence[str]) -> Tuple[str, str, List[str]]:
    """(kind, program, the words after the command) for a program argv."""
    if not argv:
        return "other", "", []
    program = argv[0]
    base = os.path.basename(program)
    if base == "vllm":
        if len(argv) > 1 and argv[1] == "serve":
            return "vllm-serve", program, list(argv[2:])
        return "vllm-other", program, list(argv[1:])
    if base == "sglang":  # SGLang's console script (sglang.cli.main): `sglang serve …`
        if len(argv) > 1 and argv[1] == "serve":
            return "sglang-serve", program, list(argv[2:])
        return "sglang-other", program, list(argv[1:])
    if _PYTHON.match(base):
        i = 1
        while i < len(argv) and argv[i].startswith("-") and argv[i] != "-m":
            i += 2 if argv[i] in ("-X", "-W") else 1
        if i + 1 < len(argv) and argv[i] == "-m":
            module = argv[i + 1]
            rest = list(argv[i + 2 :])
            if module in API_SERVER_MODULES:
                return "vllm-api-server", program, rest
            if module in SGLANG_SERVER_MODULES:
                return "sglang-serve", program, rest
            if module in CLI_MODULES:
                if rest and rest[0] == "serve":
                    return "vllm-serve", program, rest[1:]
                return "vllm-other", program, rest
    return "other", program, []


# --- flags -------------------------------------------------------------------------------------
def normalize_flag(token: str) -> str:
    """``--max_model_len`` -> ``--max-model-len``; underscores after the first dot stay (JSON keys)."""
    if not token.startswith("--"):
        return token
    head, dot, tail = token[2:].partition(".")
    return "--" + head.replace("_", "-") + dot + tail


def _looks_like_flag(token: str) -> bool:
    return token.startswith("-") and token != "-" and not _NUMBER.match(token)


def _json_value(text: str) -> Any:
    from gpudoctor import bounded

    try:
        return bounded.loads(text, "value")
    except bounded.InputError:
        return text


def parse_flags(words: Sequence[str], table: Optional[FlagTable] = None, launch: Optional[Launch] = None) -> Launch:
    """Read vLLM flags and positionals into ``launch`` (a new one when not given)."""
    table = table or FlagTable()
    launch = launch or Launch("argv", list(words), {})
    dotted: Dict[str, List[Tuple[List[str], Any, bool]]] = {}
    words = list(words)
    i = 0
    while i < len(words):
        token = words[i]
        i += 1
        if token == "--":
            launch.positionals.extend(words[i:])
            break
        if token.startswith("-O") and not token.startswith("--") and token != "-O":
            level = token[3:] if token[2:3] == "=" else token[2:]
            _store(launch, token, _optimization_flag(table), level)
            continue
        if token == "-O" and i < len(words) and words[i] in ("0", "1", "2", "3"):
            _store(launch, token, _optimization_flag(table), words[i])
            i += 1
            continue
        if not _looks_like_flag(token):
            launch.positionals.append(token)
            continue
        name, eq, value = token.partition("=")
        name = table.canonical(normalize_flag(name))
        base, dot, path = name.partition(".")
        if dot:  # --json-arg.key.sub value
            append = path.endswith("+")
            keys = [k for k in path.rstrip("+").split(".") if k]
            if not eq:
                if i < len(words) and not _looks_like_flag(words[i]):
                    value = words[i]
                    i += 1
                else:
                    launch.errors.append({"flag": token, "value": None, "problem": "expected a value"})
                    continue
            dotted.setdefault(base, []).append((keys, _json_value(value), append))
            launch.given.append((token, base))
            continue
        spec = table.spec(name)
        nargs = getattr(spec, "nargs", None)
        if eq and spec is not None and table.is_switch(name):
            launch.errors.append({"flag": token.split("=", 1)[0], "value": value, "problem": f"ignored explicit argument {value!r}: "
                                  f"{token.split('=', 1)[0]} is a switch and takes no value"})
            launch.given.append((token, name))
        elif eq:
            _store(launch, token, name, value, table)
        elif table.is_switch(name):
            _store(launch, token, name, True, table)
        elif nargs == "?":
            if i < len(words) and not _looks_like_flag(words[i]):
                _store(launch, token, name, words[i], table)
                i += 1
            else:
                _store(launch, token, name, True, table)
        elif nargs in ("+", "*") or isinstance(nargs, int) and nargs > 1:
            values = []
            limit = nargs if isinstance(nargs, int) else len(words)
            while i < len(words) and len(values) < limit and not _looks_like_flag(words[i]):
                values.append(words[i])
                i += 1
            if not values and nargs != "*" or isinstance(nargs, int) and len(values) != nargs:
                launch.errors.append({"flag": token, "value": None, "problem": "expected " + (
                    f"{nargs} values" if isinstance(nargs, int) else "at least one value")})
                launch.given.append((token, name))
            else:
                _store(launch, token, name, values, table)
        elif i < len(words) and not _looks_like_flag(words[i]):
            _store(launch, token, name, words[i], table)
            i += 1
        else:
            # A flag vLLM does not know at the end, or followed by another flag: a switch to us;
            # a known value flag without its value is an error vLLM reports too.
            if table.known is not None and name in table.known or name in INT_FLAGS | HUMAN_INT_FLAGS | FLOAT_FLAGS | JSON_FLAGS:
                launch.errors.append({"flag": token, "value": None, "problem": "expected a value"})
                launch.given.append((token, name))
            else:
                _store(launch, token, name, True, table)
    for base, updates in dotted.items():
        current = launch.options.get(base)
        if isinstance(current, str):
            current = _json_value(current)
        if not isinstance(current, dict):
            current = {} if current is None or current is True else current
        if isinstance(current, dict):
            for keys, value, append in updates:
                _set_nested(current, keys, value, append)
            launch.options[base] = current
    return launch


def _optimization_flag(table: FlagTable) -> str:
    """-O3: --optimization-level in recent vLLM, an alias of --compilation-config before."""
    if table.known is not None and "--optimization-level" not in table.known and "-O" in table.aliases:
        return table.aliases["-O"]
    return "--optimization-level"


def _store(launch: Launch, token: str, name: str, value: Any, table: Optional[FlagTable] = None) -> None:
    positive = table.negative(name) if table is not None else None
    if positive and value is True:
        launch.options[positive] = False  # --disable-prefix-caching: --enable-prefix-caching off
    elif name.startswith("--no-") and value is True:
        launch.options["--" + name[5:]] = False
    launch.options[name] = value
    launch.given.append((token, name))


def _set_nested(target: Dict[str, Any], keys: List[str], value: Any, append: bool) -> None:
    for key in keys[:-1]:
        nxt = target.get(key)
        if not isinstance(nxt, dict):
            nxt = target[key] = {}
        target = nxt
    if not keys:
        return
    last = keys[-1]
    if append:
        items = value.split(",") if isinstance(value, str) else [value]
        existing = target.get(last)
        target[last] = (existing if isinstance(existing, list) else []) + items
    else:
        target[last] = value


# --- values ------------------------------------------------------------------------------------
def typed_options(launch: Launch, table: Optional[FlagTable] = None) -> Dict[str, Any]:
    """The options with numbers and JSON converted; problems go to ``launch.errors``.

    With the installed vLLM's argument table (``table.specs``) each value is converted and
    checked as vLLM would: its type, ``choices``, the numeric range of its config field and the
    keys of a JSON config object; without it, by the built-in tables below.
    """
    from gpudoctor.probes.launch.vllm_values import human_readable_int  # one reader of '32k' for both paths

    out: Dict[str, Any] = {}
    for name, value in launch.options.items():
        spec = table.spec(name) if table is not None else None
        if spec is not None and spec.action not in ("switch", "bool", "custom") and (isinstance(value, (str, list))
                                                                                      or isinstance(value, dict) and spec.keys):
            out[name] = _checked(launch, name, spec, value)
            continue
        if not isinstance(value, str):
            out[name] = value
            continue
        try:
            if name in INT_FLAGS:
                if len(value.strip()) > 40:
                    raise ValueError(f"{len(value.strip())} characters; not a usable number")
                out[name] = int(value)
            elif name in HUMAN_INT_FLAGS:
                out[name] = human_readable_int(value)
            elif name in FLOAT_FLAGS:
                number = float(value)
                if number != number:  # nan
                    raise ValueError("not a number")
                out[name] = number
            elif name in JSON_FLAGS:
                out[name] = _parse_json_flag(name, value)
            else:
                out[name] = value
        except (ValueError, OverflowError) as exc:
            problem = str(exc) if name in JSON_FLAGS else f"not a valid {_kind(name)}{_why(exc)}"
            launch.errors.append({"flag": name, "value": value, "problem": problem})
    if table is not None and table.combinations and not launch.errors:
        from gpudoctor.probes.launch import vllm_combinations

        launch.errors.extend(vllm_combinations.refusals(table.combinations, out))
    return out


def _checked(launch: Launch, name: str, spec: Any, value: Any) -> Any:
    """One value through vllm_values.convert/problems; the problems become launch.errors."""
    from gpudoctor.probes.launch import vllm_values

    items = value if isinstance(value, list) else [value]
    converted = []
    for item in items:
        if isinstance(item, dict):  # --json-arg.key value, already merged
            result = item
        else:
            try:
                result = vllm_values.convert(spec, str(item))
            except ValueError as exc:
                launch.errors.append({"flag": name, "value": item, "problem": f"not a valid {_spec_kind(spec)}{_why(exc)}"})
                return value
        condition = getattr(spec, "condition", None)
        for problem in vllm_values.problems(spec, result, with_range=not condition):
            launch.errors.append({"flag": name, "value": item, "problem": problem})
        if condition:
            _conditional_range(launch, name, item, spec, result, condition)
        converted.append(result)
    if spec.type in ("config", "json") and name == "--compilation-config" and isinstance(converted[0], int):
        return {"level": converted[0]}
    return converted if isinstance(value, list) else converted[0]


def _conditional_range(launch: Launch, name: str, item: Any, spec: Any, result: Any, condition: Dict[str, Any]) -> None:
    """A range vLLM checks only when it builds the config class under a condition (vllm_conditions):
    an error when the command meets it, nothing when it does not, and, when only the model or the
    machine can say (``self._model_info.supports_multimodal``), an entry marked ``condition`` that
    GD701 reports as unknown, never as a block."""
    from gpudoctor.probes.launch import vllm_conditions, vllm_values

    problem = vllm_values.out_of_range(spec, result)
    if problem is None:
        return
    meets = vllm_conditions.holds(condition, launch.options)
    if meets is False:
        return
    entry = {"flag": name, "value": item, "problem": problem}
    if meets is None:
        entry["condition"] = f"{condition.get('text')} ({condition.get('where')})"
    launch.errors.append(entry)


def _why(exc: Exception) -> str:
    """": reason" for a refused value; nothing for int()/float()'s own words ("invalid literal for int() with
    base 10: 'two'"), which repeat the value and name Python internals."""
    text = str(exc)
    return "" if text.startswith(("invalid literal for", "could not convert")) else f": {text}"


def _spec_kind(spec: Any) -> str:
    return {"int": "integer", "human_int": "integer", "human_int_or_auto": "integer (or auto)", "float": "number",
            "json": "JSON value", "config": "JSON object", "dict_or_str": "JSON object or string"}.get(spec.type, "value")


def _kind(name: str) -> str:
    if name in FLOAT_FLAGS:
        return "number"
    return "integer"


def _parse_json_flag(name: str, value: str) -> Any:
    text = value.strip()
    if name == "--compilation-config" and re.fullmatch(r"\d+", text):
        return {"level": int(text)}
    if name not in JSON_OBJECT_FLAGS and not text.startswith(("{", "[")):
        return value
    from gpudoctor import bounded

    try:
        parsed = json.loads(text, parse_int=bounded.parse_json_int)
        if bounded.depth(parsed) > bounded.MAX_JSON_DEPTH:
            raise RecursionError
    except RecursionError:
        raise ValueError("not valid JSON (nested too deeply)") from None
    except ValueError as exc:
        msg = getattr(exc, "msg", str(exc))
        col = getattr(exc, "colno", None)
        raise ValueError(f"not valid JSON ({msg}" + (f" at column {col}" if col else "") + ")") from None
    if name in JSON_OBJECT_FLAGS and not isinstance(parsed, dict):
        raise ValueError(f"must be a JSON object ({{...}}), got {type(parsed).__name__}")
    return parsed


# --- whole commands ----------------------------------------------------------------------------
def parse(argv: Sequence[str], table: Optional[FlagTable] = None, source: str = "argv",
          env: Optional[Dict[str, str]] = None) -> Launch:
    assignments, exec_argv, program_argv, notes = split_command(argv)
    merged = dict(env or {})
    merged.update(assignments)
    launch = Launch(source, exec_argv, merged, notes=notes)
    launch.argv = program_argv
    launch.kind, launch.program, words = classify(program_argv)
    if not launch.is_vllm:
        return launch
    parse_flags(words, table, launch)
    if launch.kind == "vllm-serve" and launch.positionals:
        launch.model = launch.positionals.pop(0)
    model_flag = launch.options.get("--model")
    if isinstance(model_flag, str):
        if launch.model and launch.model != model_flag:
            launch.errors.append({"flag": "--model", "value": model_flag,
                                  "problem": f"a second model next to the positional {launch.model!r}"})
        launch.model = launch.model or model_flag
    for extra in launch.positionals:
        launch.errors.append({"flag": None, "value": extra, "problem": "unexpected word: vLLM takes one positional (the model)"})
    return launch


def program_words(argv: Sequence[str]) -> List[str]:
    """The program argv (assignments and wrappers stripped), for locating the interpreter."""
    return split_command(argv)[2]


def display(argv: Iterable[str]) -> str:
    """The command as one copy-pasteable shell line."""
    return " ".join(shlex.quote(str(word)) for word in argv)
