"""What several commands share: the IO bundle, probe options, snapshot loading, colour."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from typing import Dict, TextIO

from gpudoctor import __version__


class UsageError(Exception):
    """Bad input from the user: one line on stderr, exit 2."""


@dataclass
class IO:
    environ: Dict[str, str]
    stdout: TextIO
    stderr: TextIO


def add_probe_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-v", "--verbose", "--debug", dest="verbose", action="store_true", help="show unknown rules and tracebacks")
    parser.add_argument("--timeout", type=float, default=10.0, metavar="S", help="deadline for all probes together (default 10 s)")
    parser.add_argument("--root", default="/", help=argparse.SUPPRESS)  # fake filesystem root, for tests


def probe(args, io: IO):
    """Run the probes on this machine (under args.root) and return the Snapshot."""
    from gpudoctor.probes import Context, collect

    if not os.path.isdir(args.root):
        raise UsageError(f"--root {args.root}: not a directory")
    if args.timeout <= 0:
        raise UsageError("--timeout must be positive")
    ctx = Context(root=args.root, environ=io.environ, timeout=args.timeout)
    snapshot = collect(ctx)
    snapshot.meta["gpudoctor"] = __version__
    if args.verbose:
        for text in ctx.debug:
            io.stderr.write(text + "\n")
    return snapshot


def load_snapshot(path: str):
    from gpudoctor.snapshot import Snapshot, SnapshotError

    try:
        return Snapshot.load(path)
    except SnapshotError as exc:
        raise UsageError(str(exc)) from None


def use_color(choice: str, stream, environ) -> bool:
    if choice != "auto":
        return choice == "always"
    if environ.get("NO_COLOR") or environ.get("TERM") == "dumb":
        return False
    return bool(getattr(stream, "isatty", lambda: False)())


def stream_is_unicode(stream) -> bool:
    encoding = (getattr(stream, "encoding", None) or "utf-8").lower().replace("-", "")
    return encoding in ("utf8", "utf16", "utf32")


def write_private(path: str, data: str) -> None:
    """Write a file only its owner can read (snapshots and reports can be sensitive)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(data)
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None
