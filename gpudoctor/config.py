"""Settings from a file and the environment, under the command line.

Precedence, highest first: a command-line flag; a ``GPUDOCTOR_*`` environment variable; the
nearest ``gpudoctor.toml`` (top-level keys) or ``pyproject.toml`` with a ``[tool.gpudoctor]``
table, looked for from the working directory upwards; the command's own default.

    [tool.gpudoctor]
    select = ["GD1", "GD3"]     # or "GD1,GD3"
    ignore = ["GD302"]
    fail-on = "warning"         # fail_on works too
    port = 8001
    timeout = 20
    format = "markdown"

A key a command does not have is skipped for that command (``format = "junit"`` does not
apply to ``report``); a key no command has, or a value no command accepts, is an error (exit 2).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import Any, Dict, Mapping, Optional, Tuple

KEYS = {"select": "select", "ignore": "ignore", "fail-on": "fail_on", "fail_on": "fail_on", "port": "port",
        "timeout": "timeout", "format": "format"}
DESTS = ("select", "ignore", "fail_on", "port", "timeout", "format")
# Which settings each command takes (smoke's --timeout is a request deadline, preflight's port is
# the command's own: those are not the probes' timeout and the checked port).
COMMAND_DESTS = {
    "check": DESTS,
    "preflight": ("select", "ignore", "fail_on", "timeout", "format"),
    "report": ("fail_on", "timeout", "format"),
    "cluster": ("select", "ignore", "fail_on", "port", "format"),
    "snapshot": ("timeout",),
    "fix": ("port", "timeout"),
}
ENV = {dest: "GPUDOCTOR_" + dest.upper() for dest in DESTS}
FILES = ("gpudoctor.toml", "pyproject.toml")
MAX_FILE = 1 << 20  # a config file bigger than 1 MiB is not a config file


class ConfigError(ValueError):
    pass


@dataclass
class Settings:
    """What was found: dest -> (value, where it came from)."""

    values: Dict[str, Tuple[Any, str]] = field(default_factory=dict)
    file: Optional[str] = None


def find_file(start: str) -> Optional[Tuple[str, Dict[str, Any]]]:
    """(path, table) of the nearest config file from ``start`` upwards; a pyproject.toml without
    [tool.gpudoctor] does not count (the search goes on past it)."""
    here = os.path.abspath(start)
    while True:
        for name in FILES:
            path = os.path.join(here, name)
            if os.path.isfile(path):
                data = _load(path)
                table = data if name == "gpudoctor.toml" else data.get("tool", {}).get("gpudoctor") if isinstance(data.get("tool"), dict) else None
                if isinstance(table, dict):
                    return path, table
        parent = os.path.dirname(here)
        if parent == here:
            return None
        here = parent


def load(environ: Mapping[str, str], cwd: Optional[str] = None) -> Settings:
    """The file's values, then the environment's over them (each with its source)."""
    settings = Settings()
    found = find_file(cwd or os.getcwd())
    if found is not None:
        path, table = found
        settings.file = path
        where = path if os.path.basename(path) == "gpudoctor.toml" else f"{path} [tool.gpudoctor]"
        for key, value in table.items():
            dest = KEYS.get(str(key))
            if dest is None:
                raise ConfigError(f"{where}: unknown key {key!r} (known: {', '.join(sorted(set(KEYS) - {'fail_on'}))})")
            settings.values[dest] = (_typed(dest, value, where), where)
    for dest, name in ENV.items():
        raw = environ.get(name)
        if raw is not None and raw.strip():
            settings.values[dest] = (_typed(dest, raw, name), f"environment {name}")
    return settings


def _typed(dest: str, value: Any, where: str) -> Any:
    try:
        if dest in ("select", "ignore"):
            if isinstance(value, str):
                return [part.strip() for part in value.split(",") if part.strip()]
            if isinstance(value, list) and all(isinstance(v, str) for v in value):
                return list(value)
            raise ValueError("a list of rule IDs, prefixes, names or areas")
        if dest == "port":
            port = int(value)
            if isinstance(value, bool) or not 0 < port < 65536:
                raise ValueError("a port number 1-65535")
            return port
        if dest == "timeout":
            seconds = float(value)
            if isinstance(value, bool) or not 0 < seconds <= 86400:
                raise ValueError("seconds between 0 and 86400")
            return seconds
        if not isinstance(value, str):
            raise ValueError("a string")
        return value.strip()
    except (TypeError, ValueError) as exc:
        reason = str(exc) if dest in ("select", "ignore") or "between" in str(exc) or "port" in str(exc) else \
            {"port": "a port number", "timeout": "a number of seconds"}.get(dest, "a string")
        raise ConfigError(f"{where}: {dest.replace('_', '-')} = {value!r} is not {reason}") from None


# --- applying settings to one command's parser ---------------------------------------------------------------
@dataclass
class Pending:
    """The command's own defaults, replaced by None so that a flag given on the command line can be told apart."""

    defaults: Dict[str, Any]
    choices: Dict[str, Optional[Tuple[str, ...]]]
    settings: Optional[Settings] = None


def prepare(parser, command: str, environ: Mapping[str, str], cwd: Optional[str] = None) -> Optional[Pending]:
    wanted = COMMAND_DESTS.get(command, ())
    actions = {a.dest: a for a in getattr(parser, "_actions", []) if a.dest in wanted}
    if not actions:
        return None
    pending = Pending({d: a.default for d, a in actions.items()}, {d: tuple(a.choices) if a.choices else None for d, a in actions.items()})
    parser.set_defaults(**{dest: None for dest in actions})
    pending.settings = load(environ, cwd)
    return pending


def resolve(args, pending: Optional[Pending], command: str) -> None:
    """Fill in every setting the command line left unset; ``args.config_sources`` says from where."""
    sources: Dict[str, Tuple[Any, str]] = {}
    if pending is None:
        args.config_sources = sources
        return
    assert pending.settings is not None
    for dest, default in pending.defaults.items():
        given = getattr(args, dest, None)
        if given is not None:
            sources[dest] = (given, "command line")
            continue
        value, where = pending.settings.values.get(dest, (None, ""))
        choices = pending.choices.get(dest)
        if value is not None and choices and value not in choices:
            if dest == "format" or (dest == "fail_on" and value in ("error", "warning", "unknown")):
                sources[dest] = (default, f"default ({where}: {value!r} is not a {dest.replace('_', '-')} of {command})")
                setattr(args, dest, default)
                continue
            raise ConfigError(f"{where}: {dest.replace('_', '-')} = {value!r}: choose from {', '.join(choices)}")
        if value is not None:
            setattr(args, dest, value)
            sources[dest] = (value, where)
        else:
            setattr(args, dest, default)
            sources[dest] = (default, "default")
    args.config_sources = sources
    args.config_file = pending.settings.file


def show(args) -> str:
    """The lines of ``--show-config``: every setting, its value and where it came from."""
    lines = [f"config file: {getattr(args, 'config_file', None) or 'none found (looked for gpudoctor.toml, pyproject.toml [tool.gpudoctor] from here upwards)'}"]
    for dest, (value, where) in getattr(args, "config_sources", {}).items():
        shown = ",".join(value) if isinstance(value, list) else "" if value is None else value
        lines.append(f"{dest.replace('_', '-'):<8} = {shown!s:<24} ({where})")
    return "\n".join(lines) + "\n"


# --- TOML ------------------------------------------------------------------------------------------------------
def _load(path: str) -> Dict[str, Any]:
    from gpudoctor import bounded

    try:  # a FIFO or a device named gpudoctor.toml must not block or feed the doctor
        data = bounded.read_head(path, MAX_FILE + 1, "config")
    except bounded.InputError as exc:
        raise ConfigError(str(exc)) from None
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    if len(data) > MAX_FILE:
        raise ConfigError(f"{path}: larger than 1 MiB; not read")
    text = data.decode("utf-8", "replace")
    parser = _toml_module()
    if parser is None:
        return _mini_toml(text, path)
    try:
        return parser.loads(text)
    except Exception as exc:  # tomllib.TOMLDecodeError (or tomli's): one line, exit 2
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None


def _toml_module():
    if sys.version_info >= (3, 11):
        import tomllib

        return tomllib
    try:  # Python 3.9/3.10: tomli when it is installed (pip and many tools bring it), else the reader below
        import tomli  # type: ignore[import-not-found]

        return tomli
    except ImportError:
        return None


def _mini_toml(text: str, path: str) -> Dict[str, Any]:
    """Enough TOML for our table on Pythons without tomllib: [tool.gpudoctor] or top-level keys,
    strings, numbers, booleans and (multi-line) arrays of them. Other tables are skipped."""
    import ast

    data: Dict[str, Any] = {}
    table: Optional[Dict[str, Any]] = data
    pending = ""
    for raw in text.splitlines():
        line = raw.strip() if not pending else raw
        if not pending and (not line or line.startswith("#")):
            continue
        if not pending and line.startswith("["):
            name = line.strip("[] \t").split("#")[0].strip()
            if name == "tool.gpudoctor":
                table = data.setdefault("tool", {}).setdefault("gpudoctor", {})
            else:
                table = None
            continue
        if table is None:
            continue
        pending += (" " if pending else "") + _strip_comment(line.strip())
        if pending.count("[") > pending.count("]"):
            continue  # a multi-line array
        key, sep, value = pending.partition("=")
        pending = ""
        if not sep:
            raise ConfigError(f"{path}: cannot read the line {raw.strip()!r}")
        value = value.strip()
        literal = {"true": "True", "false": "False"}.get(value, value)
        try:
            table[key.strip().strip('"')] = ast.literal_eval(literal)
        except (ValueError, SyntaxError):
            raise ConfigError(f"{path}: cannot read the value of {key.strip()!r}") from None
    return data


def _strip_comment(value: str) -> str:
    quote = None
    for i, char in enumerate(value):
        if char in "\"'" and quote in (None, char):
            quote = None if quote else char
        elif char == "#" and quote is None:
            return value[:i].strip()
    return value
