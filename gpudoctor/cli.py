"""Command line: ``gpudoctor [COMMAND] …``; ``check`` is the default command.

``main`` never lets an exception out: usage and configuration errors exit 2 with one
line, Ctrl-C exits 130, and tracebacks appear only with ``-v``/``--debug``. The commands
themselves live in gpudoctor/commands/, one module each.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import List, Mapping, Optional, TextIO

from gpudoctor import __version__
from gpudoctor.commands import COMMANDS, DEFAULT
from gpudoctor.commands.common import IO, UsageError
from gpudoctor.exitcodes import ExitCode

HELP_FLAGS = ("-h", "--help", "--version")


def _entry(name: str):
    """(module name, help) for a command; a bare module name means the module has HELP."""
    entry = COMMANDS[name]
    if isinstance(entry, str):
        return entry, getattr(importlib.import_module(f"gpudoctor.commands.{entry}"), "HELP", "")
    return entry


def _module(name: str):
    return importlib.import_module(f"gpudoctor.commands.{_entry(name)[0]}")


def build_parser(chosen: Optional[str] = None) -> argparse.ArgumentParser:
    """With no command chosen (``gpudoctor --help``, a mistyped command), every command is listed;
    with one, only it: its module is imported and configured, and no parser is built for the
    others (10 of them: ~3 ms of every run, before `check` can start its Python child)."""
    parser = argparse.ArgumentParser(
        prog="gpudoctor",
        description="A doctor for GPU inference environments (driver, CUDA, GPUs, flash-attn, vLLM).",
        epilog="Exit codes: 0 nothing at or above --fail-on, 1 blocking findings, 2 usage or internal error, 130 interrupted.",
    )
    parser.add_argument("--version", action="version", version=f"gpudoctor {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS if chosen is None else [chosen]:
        text = _entry(name)[1]
        parser_for_command = sub.add_parser(name, help=text, description=text)
        if name == chosen:
            _module(name).configure(parser_for_command)
            parser.chosen = parser_for_command  # type: ignore[attr-defined]  # for gpudoctor/config.py
    return parser


def with_command(argv: List[str]) -> List[str]:
    """``check`` is the default command, and options may come before the command name."""
    for position, word in enumerate(argv):
        if word in COMMANDS:
            return [word] + argv[:position] + argv[position + 1 :]
        if position == 0 and not word.startswith("-"):
            return argv  # `gpudoctor chek`: argparse says "invalid choice: 'chek' (choose from …)"
        if not word.startswith("-") or word in HELP_FLAGS or word == "--":
            break
    if argv and argv[0] in HELP_FLAGS:
        return argv
    return [DEFAULT] + argv


def main(argv: Optional[List[str]] = None, environ: Optional[Mapping[str, str]] = None,
         stdout: Optional[TextIO] = None, stderr: Optional[TextIO] = None) -> int:
    from gpudoctor import runner

    # --timeout counts from the process start when we are the program (start-up included), from now in-process.
    runner.begin(from_process_start=argv is None)
    if argv is None:
        runner.watch_interrupts()
    try:
        code = _main(argv, environ, stdout, stderr)
    finally:
        runner.end()  # a command run later in this process (a test, a library) counts from its own start
    if argv is None and (code == ExitCode.INTERRUPTED or not _observed()):
        _exit_now(code)
    return code


def _observed() -> bool:
    """Whether a profiler or tracer watches this process (cProfile, coverage, a debugger): it
    writes what it saw when the interpreter finalizes, so the program must end normally then."""
    if sys.getprofile() is not None or sys.gettrace() is not None:
        return True
    monitoring = getattr(sys, "monitoring", None)  # Python 3.12+: cProfile and coverage may use it
    return monitoring is not None and any(monitoring.get_tool(tool) is not None for tool in range(6))


def _exit_now(code: int) -> None:
    """End the program now, with ``code``, without finalizing the interpreter: what a normal exit
    does that matters (threads that are not daemons joined, the exit handlers such as runner's kill of
    leftover children, the streams flushed), then out. Finalizing tears down every module and
    object the check made: 15-40 ms of a 0.2 s check, for nothing (measured on this repo's 2-core
    machine). And an interrupted program must end so: under ``python -m gpudoctor``, a
    KeyboardInterrupt that passed through exec() of a string on its way (dataclasses build their
    methods so, while modules are imported) makes CPython kill itself with SIGINT once finalized,
    even though the interrupt was handled (reproduced with a 5-line module: exit -2, not 130; ~1
    run in 8 of test_ctrl_c_exits_130_without_traceback under load)."""
    import atexit

    threading = sys.modules.get("threading")
    try:
        if code != ExitCode.INTERRUPTED and threading is not None:
            getattr(threading, "_shutdown", lambda: None)()  # what Python's own exit runs first
        atexit._run_exitfuncs()
    except BaseException:
        pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            pass
    os._exit(int(code))


def _main(argv: Optional[List[str]], environ: Optional[Mapping[str, str]], stdout: Optional[TextIO],
          stderr: Optional[TextIO]) -> int:
    argv = with_command(list(sys.argv[1:] if argv is None else argv))
    io = IO(dict(os.environ if environ is None else environ), encodable(stdout or sys.stdout), encodable(stderr or sys.stderr))
    args = None
    try:
        from gpudoctor import config

        chosen = argv[0] if argv and argv[0] in COMMANDS else None
        parser = build_parser(chosen)
        try:
            pending = config.prepare(parser.chosen, chosen, io.environ) if chosen else None
        except config.ConfigError as exc:
            raise UsageError(f"configuration: {exc}") from None
        try:
            args = parser.parse_args(argv)
        except SystemExit as exc:  # argparse: --help/--version exit 0, usage errors exit 2
            return ExitCode.OK if exc.code in (0, None) else ExitCode.USAGE
        try:
            config.resolve(args, pending, args.command)
        except config.ConfigError as exc:
            raise UsageError(f"configuration: {exc}") from None
        return int(_module(args.command).run(args, io))
    except UsageError as exc:
        io.stderr.write(f"gpudoctor: error: {exc}\n")
        return ExitCode.USAGE
    except KeyboardInterrupt:
        io.stderr.write("gpudoctor: interrupted\n")
        return ExitCode.INTERRUPTED
    except BrokenPipeError:
        _silence_broken_pipe()
        return ExitCode.OK
    except Exception as exc:
        if getattr(args, "verbose", False):
            import traceback  # not at start-up: ~2 ms of every run for the -v of a failing one

            traceback.print_exc(file=io.stderr)
        io.stderr.write(f"gpudoctor: internal error: {type(exc).__name__}: {exc} (run with -v for the traceback)\n")
        return ExitCode.USAGE


# What a terminal that cannot show Unicode (PYTHONIOENCODING=ascii, LANG=C) gets instead.
_ASCII = str.maketrans({"·": "-", "—": "-", "–": "-", "…": "...", "≤": "<=", "≥": ">=", "×": "x", "→": "->", "←": "<-",
                        "✓": "+", "✗": "x", "•": "*", "“": '"', "”": '"', "‘": "'", "’": "'", "§": "S", "🐛": ""})


class _Encodable:
    """A text stream that never raises UnicodeEncodeError: known symbols become ASCII, the rest \\u escapes."""

    def __init__(self, stream):
        self._stream = stream
        self._encoding = getattr(stream, "encoding", None) or "utf-8"

    def write(self, text: str) -> int:
        text = text.translate(_ASCII).encode(self._encoding, "backslashreplace").decode(self._encoding, "replace")
        return self._stream.write(text)

    def __getattr__(self, name):
        return getattr(self._stream, name)


def encodable(stream):
    from gpudoctor.commands.common import stream_is_unicode

    encoding = getattr(stream, "encoding", None)
    if encoding is None or stream_is_unicode(stream):
        return stream  # StringIO in tests, UTF-8 terminals and pipes: unchanged
    return _Encodable(stream)


def _silence_broken_pipe() -> None:
    # As pip does: the reader of stdout went away (`gpudoctor check | head`); don't raise at exit.
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


if __name__ == "__main__":
    sys.exit(main())
