"""Command line: ``gpudoctor [check|snapshot|rules|explain] …``; ``check`` is the default.

``main`` never lets an exception out: usage and configuration errors exit 2 with one
line, Ctrl-C exits 130, and tracebacks appear only with ``-v``/``--debug``.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from typing import Callable, Dict, List, Mapping, Optional, TextIO

from gpudoctor import __version__
from gpudoctor.exitcodes import ExitCode

FORMATS = ("text", "json", "markdown")


class UsageError(Exception):
    """Bad input from the user: one line on stderr, exit 2."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpudoctor",
        description="A doctor for GPU inference environments (driver, CUDA, GPUs, flash-attn, vLLM).",
        epilog="Exit codes: 0 nothing at or above --fail-on, 1 blocking findings, 2 usage or internal error, 130 interrupted.",
    )
    parser.add_argument("--version", action="version", version=f"gpudoctor {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    check = sub.add_parser("check", help="probe this machine (or replay a snapshot) and run the rules (default)")
    _add_probe_options(check)
    check.add_argument("--snapshot", metavar="FILE", help="replay a snapshot saved by `gpudoctor snapshot` instead of probing")
    check.add_argument("--select", action="append", metavar="IDS", help="only these rules: IDs, prefixes (GD1), names or areas; comma-separated")
    check.add_argument("--ignore", action="append", metavar="IDS", help="skip these rules (same forms as --select)")
    check.add_argument("--format", choices=FORMATS, default="text")
    check.add_argument("--fail-on", choices=("error", "warning"), default="error", help="lowest severity that makes the exit code 1 (default: error)")
    check.add_argument("--color", choices=("auto", "always", "never"), default="auto")

    snapshot = sub.add_parser("snapshot", help="save the facts of this machine as JSON")
    _add_probe_options(snapshot)
    snapshot.add_argument("-o", "--output", metavar="FILE", help="write to FILE (default: stdout)")

    rules = sub.add_parser("rules", help="list the rule catalogue")
    rules.add_argument("--format", choices=("text", "json"), default="text")

    explain = sub.add_parser("explain", help="show a rule's documentation")
    explain.add_argument("rule", metavar="ID", help="rule ID or name, e.g. GD103 or driver-too-old-for-torch")
    return parser


def _add_probe_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-v", "--verbose", "--debug", dest="verbose", action="store_true", help="show unknown rules and tracebacks")
    parser.add_argument("--timeout", type=float, default=10.0, metavar="S", help="deadline for all probes together (default 10 s)")
    parser.add_argument("--root", default="/", help=argparse.SUPPRESS)  # fake filesystem root, for tests


COMMANDS = ("check", "snapshot", "rules", "explain")


def main(argv: Optional[List[str]] = None, environ: Optional[Mapping[str, str]] = None,
         stdout: Optional[TextIO] = None, stderr: Optional[TextIO] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    environ = dict(os.environ if environ is None else environ)
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    argv = _with_command(argv)
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:  # argparse: --help/--version exit 0, usage errors exit 2
        return ExitCode.OK if exc.code in (0, None) else ExitCode.USAGE
    handler: Dict[str, Callable[..., int]] = {"check": cmd_check, "snapshot": cmd_snapshot, "rules": cmd_rules, "explain": cmd_explain}
    try:
        return int(handler[args.command](args, environ, stdout, stderr))
    except UsageError as exc:
        stderr.write(f"gpudoctor: error: {exc}\n")
        return ExitCode.USAGE
    except KeyboardInterrupt:
        stderr.write("gpudoctor: interrupted\n")
        return ExitCode.INTERRUPTED
    except BrokenPipeError:
        _silence_broken_pipe()
        return ExitCode.OK
    except Exception as exc:
        if getattr(args, "verbose", False):
            traceback.print_exc(file=stderr)
        stderr.write(f"gpudoctor: internal error: {type(exc).__name__}: {exc} (run with -v for the traceback)\n")
        return ExitCode.USAGE


def _with_command(argv: List[str]) -> List[str]:
    """``check`` is the default command, and options may come before the command name."""
    for position, word in enumerate(argv):
        if word in COMMANDS:
            return [word] + argv[:position] + argv[position + 1 :]
        if not word.startswith("-") or word in ("-h", "--help", "--version"):
            break
    if argv and argv[0] in ("-h", "--help", "--version"):
        return argv
    return ["check"] + argv


def _silence_broken_pipe() -> None:
    # As pip does: stdout's reader went away (`gpudoctor check | head`); do not raise at exit.
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def _probe(args, environ) -> "object":
    from gpudoctor.probes import Context, collect

    if not os.path.isdir(args.root):
        raise UsageError(f"--root {args.root}: not a directory")
    if args.timeout <= 0:
        raise UsageError("--timeout must be positive")
    ctx = Context(root=args.root, environ=environ, timeout=args.timeout)
    snapshot = collect(ctx)
    snapshot.meta["gpudoctor"] = __version__
    snapshot.meta["debug"] = ctx.debug
    return snapshot


def _load_snapshot(path: str):
    from gpudoctor.snapshot import Snapshot, SnapshotError

    try:
        return Snapshot.load(path)
    except SnapshotError as exc:
        raise UsageError(str(exc)) from None


def cmd_check(args, environ, stdout, stderr) -> int:
    from gpudoctor import registry
    from gpudoctor.engine import run_rules

    try:
        rules = registry.select(registry.load_rules(), registry.split_selectors(args.select), registry.split_selectors(args.ignore))
    except registry.RegistryError as exc:
        raise UsageError(str(exc)) from None
    snapshot = _load_snapshot(args.snapshot) if args.snapshot else _probe(args, environ)
    result = run_rules(snapshot, rules)
    if args.verbose:
        for text in list(snapshot.meta.get("debug") or []) + result.debug:
            stderr.write(text + "\n")
    if args.format == "json":
        from gpudoctor.render import json_out

        stdout.write(json_out.dumps(json_out.document(result, args.fail_on)))
    elif args.format == "markdown":
        from gpudoctor.render import markdown

        stdout.write(markdown.render(result, args.fail_on))
    else:
        from gpudoctor.render import text

        color = _use_color(args.color, stdout, environ)
        unicode = (getattr(stdout, "encoding", None) or "").lower().replace("-", "") in ("utf8", "utf16", "")
        text.write(text.build(result, args.fail_on, args.verbose, unicode), stdout, color)
    return ExitCode.FINDINGS if result.blocking(args.fail_on) else ExitCode.OK


def _use_color(choice: str, stream, environ) -> bool:
    if choice != "auto":
        return choice == "always"
    if environ.get("NO_COLOR") or environ.get("TERM") == "dumb":
        return False
    return bool(getattr(stream, "isatty", lambda: False)())


def cmd_snapshot(args, environ, stdout, stderr) -> int:
    from gpudoctor.redact import redact

    snapshot = _probe(args, environ)
    if args.verbose:
        for text in snapshot.meta.get("debug") or []:
            stderr.write(text + "\n")
    snapshot.meta.pop("debug", None)
    data = redact(snapshot.dumps())
    if args.output:
        try:
            fd = os.open(args.output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(data)
        except OSError as exc:
            raise UsageError(f"cannot write {args.output}: {exc.strerror or exc}") from None
        stderr.write(f"gpudoctor: snapshot written to {args.output} ({len(snapshot.facts)} facts)\n")
    else:
        stdout.write(data)
    return ExitCode.OK


def cmd_rules(args, environ, stdout, stderr) -> int:
    from gpudoctor import registry

    rules = registry.load_rules()
    if args.format == "json":
        import json

        stdout.write(json.dumps([meta.to_json() for meta in rules], indent=1, ensure_ascii=False) + "\n")
        return ExitCode.OK
    for meta in rules:
        stdout.write(f"{meta.id}  {meta.name:<36} {meta.severity:<8} {meta.area:<10} {meta.title}\n")
    return ExitCode.OK


def cmd_explain(args, environ, stdout, stderr) -> int:
    from gpudoctor import registry

    meta = registry.find(args.rule)
    if meta is None:
        raise UsageError(f"no rule {args.rule!r} (see: gpudoctor rules)")
    stdout.write(f"{meta.id} {meta.name} ({meta.severity}, area {meta.area})\n\n{meta.doc}\n")
    return ExitCode.OK


if __name__ == "__main__":
    sys.exit(main())
