"""A vLLM launch command read from a file (``--from-file``): a shell script or a one-line file.

Backslash continuations, comments, ``export NAME=value`` lines and ``$NAME`` / ``${NAME}``
references to them are understood; the first line that launches vLLM is the command (parser.py
says which lines do). The one file it is given is all it reads, bounded (gpudoctor/bounded.py),
and every expansion is capped: a hostile script cannot make it read, expand or split without end.
"""

from __future__ import annotations

import re
import shlex
from typing import Dict, List, Optional, Set, Tuple

from gpudoctor.probes.launch.parser import _ASSIGNMENT, CommandFileError, classify, program_words

_VAR = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}|([A-Za-z_][A-Za-z0-9_]*))")
FILE_LIMIT = 1 << 20


def _logical_lines(text: str) -> List[Tuple[int, str]]:
    """Join backslash continuations; (first line number, text)."""
    out: List[Tuple[int, str]] = []
    buffer, start = "", 0
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.rstrip()
        if not buffer:
            start = number
        if stripped.endswith("\\") and not stripped.endswith("\\\\"):
            buffer += stripped[:-1] + " "
            continue
        buffer += line
        out.append((start, buffer))
        buffer = ""
    if buffer:
        out.append((start, buffer))
    return out


# $VAR expansion is bounded: `A=$A$A` repeated doubles a value each line (2**42 bytes after 42 lines).
MAX_EXPANSIONS = 1000  # per logical line
MAX_EXPANDED = 256 << 10  # characters of one expanded line
# shlex builds each token by string concatenation (quadratic): a quoted 1 MiB line takes minutes.
MAX_SHLEX_LINE = 64 << 10
_PLAIN = re.compile(r"[^'\"\\#]*")


def _expand(text: str, variables: Dict[str, str], unresolved: Set[str], number: int = 0) -> str:
    count = 0
    size = len(text)

    def repl(match: "re.Match[str]") -> str:
        nonlocal count, size
        count += 1
        if count > MAX_EXPANSIONS:
            raise CommandFileError(f"line {number}: more than {MAX_EXPANSIONS} $VARIABLE expansions; not a launch script")
        name = match.group(1) or match.group(3)
        if name in variables:
            value = variables[name]
        elif match.group(2) is not None:
            value = match.group(2)
        else:
            unresolved.add(name)
            return match.group(0)
        size += len(value)
        if size > MAX_EXPANDED:
            raise CommandFileError(f"line {number}: expanding ${name} makes it longer than {MAX_EXPANDED >> 10} KiB; "
                                   "not a launch script")
        return value

    return _VAR.sub(repl, text)


def _split(line: str, number: int = 0) -> List[str]:
    """``shlex.split(line, comments=True)``, linear on lines without quotes, escapes or comments."""
    if _PLAIN.fullmatch(line):
        return [word for word in re.split(r"[ \t\r\n]+", line) if word]
    if len(line) > MAX_SHLEX_LINE:
        raise ValueError(f"line {number} is {len(line) >> 10} KiB with quotes; longer than the "
                         f"{MAX_SHLEX_LINE >> 10} KiB of a launch command")
    return shlex.split(line, comments=True, posix=True)


def read_command_file(path: str, environ: Optional[Dict[str, str]] = None) -> Tuple[List[str], Dict[str, str], str, List[str]]:
    """(argv, script assignments, "FILE:LINE", notes) of the first vLLM launch in a file."""
    from gpudoctor import bounded

    try:  # regular files only: a FIFO or /dev/zero is refused at once, never read
        data = bounded.read_file(path, "--from-file", FILE_LIMIT + 1)
    except bounded.InputError as exc:
        raise CommandFileError(f"--from-file {path}: {exc.reason}") from None
    if len(data) > FILE_LIMIT:
        raise CommandFileError(f"--from-file {path}: larger than {FILE_LIMIT // 1024} KiB; not a launch script")
    if b"\0" in data:
        raise CommandFileError(f"--from-file {path}: a binary file, not a command or a shell script")
    text = data.decode("utf-8", "replace")
    variables: Dict[str, str] = dict(environ or {})
    exported: Dict[str, str] = {}
    notes: List[str] = []
    fallback: Optional[Tuple[int, List[str]]] = None
    for number, line in _logical_lines(text):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        unresolved: Set[str] = set()
        try:
            words = _split(_expand(stripped, variables, unresolved, number), number)
        except ValueError as exc:
            if re.search(r"\bvllm\b", stripped):
                raise CommandFileError(f"--from-file {path}:{number}: cannot split the command line ({exc})") from None
            continue
        if not words:
            continue
        if words[0] in ("export", "declare", "local", "readonly") or all(_ASSIGNMENT.match(w) for w in words):
            exporting = words[0] == "export" or words[0] == "declare" and "-x" in words
            for word in words[1:] if not _ASSIGNMENT.match(words[0]) else words:
                if _ASSIGNMENT.match(word):
                    name, _, value = word.partition("=")
                    variables[name] = value  # a shell variable; in the command's environment only if exported
                    if exporting:
                        exported[name] = value
            continue
        words = [w for w in words if w not in ('"$@"', "$@", "$*")]
        kind, _, _ = classify(program_words(words))
        if kind in ("vllm-serve", "vllm-api-server"):
            if unresolved:
                notes.append(f"{path}:{number}: ${', $'.join(sorted(unresolved))} not set in the script or the environment; left as written")
            return words, exported, f"{path}:{number}", notes
        if fallback is None and kind == "vllm-other":
            fallback = (number, words)
    if fallback is not None:
        return fallback[1], exported, f"{path}:{fallback[0]}", notes
    raise CommandFileError(f"--from-file {path}: no vLLM launch command in it (looked for `vllm serve` or "
                           "`python -m vllm.entrypoints.openai.api_server`)")
