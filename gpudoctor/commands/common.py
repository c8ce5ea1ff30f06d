"""What several commands share: the IO bundle, probe options, snapshot loading, colour."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from typing import Dict, TextIO

from gpudoctor import __version__


MAX_TIMEOUT = 86400.0  # a day; thread.join cannot wait for inf (OverflowError)


class Status:
    """One line on a terminal's stderr that says what a slow step is doing (the probes under --deep,
    a report's smoke check, asking a cluster's nodes), rewritten in place and cleared when it is done;
    nothing at all on a pipe, a file or ``TERM=dumb`` (CI logs and ``2>file`` stay clean). Issue 31:
    ``report --url … -o r.md`` printed nothing for over 25 s of a 95 s run."""

    def __init__(self, stream, environ) -> None:
        self.stream = stream
        self.tty = bool(getattr(stream, "isatty", lambda: False)()) and environ.get("TERM") != "dumb"
        self.shown = False

    def say(self, text: str) -> None:
        if not self.tty:
            return
        from gpudoctor.redact import redact

        try:
            self.stream.write("\r\x1b[K" + redact(text)[:160])
            self.stream.flush()
            self.shown = True
        except (OSError, ValueError):
            pass  # a closed stderr must not stop the work

    def clear(self) -> None:
        if self.tty and self.shown:
            try:
                self.stream.write("\r\x1b[K")
                self.stream.flush()
            except (OSError, ValueError):
                pass
            self.shown = False


class UsageError(Exception):
    """Bad input from the user: one line on stderr, exit 2."""


@dataclass
class IO:
    environ: Dict[str, str]
    stdout: TextIO
    stderr: TextIO


class SnapshotFiles(argparse.Action):
    """``--snapshot FILE``, repeatable: ``snapshot`` keeps the first file (one file: the single-node
    path, unchanged), ``snapshots`` every file (several: a cluster, one file per node)."""

    def __call__(self, parser, namespace, values, option_string=None):
        files = list(getattr(namespace, "snapshots", None) or []) + [values]
        namespace.snapshots = files
        setattr(namespace, self.dest, files[0])


def add_probe_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-v", "--verbose", "--debug", dest="verbose", action="store_true", help="show unknown rules and tracebacks")
    parser.add_argument("--timeout", type=float, default=10.0, metavar="S", help="answer within S seconds, start-up included: the probes stop in time for the verdict (default 10 s)")
    parser.add_argument("--root", default="/", help=argparse.SUPPRESS)  # fake filesystem root, for tests
    parser.add_argument("--python", metavar="PY", help="inspect the environment of this interpreter (e.g. the venv vLLM lives in) instead of gpudoctor's own")
    parser.add_argument("--deep", action="store_true", help="also load, in a child interpreter with a timeout, the stack's compiled extensions and every CUDA binary without code for the GPU (nothing launched): what the loader says (undefined symbol, missing library) goes into the findings; "
                             "and, with torch, copy between every pair of GPUs and verify, and run one NCCL all-reduce over them (transport, bus bandwidth)")
    parser.add_argument("--gpu", metavar="SPEC", help='judge against this target instead of the GPUs present: [COUNTx]GPU[-MEMORY], e.g. sm_80, A100, H200, '
                             '2xH100-80GB, 8xA100-40GB, "A100 80GB" (kernels, arch lists, TP/PP, memory fit)')


def probe(request, io: IO, meanwhile=None, overlay=None, command_env=None, announce: bool = False):
    """Run the probes on this machine (under request.root) and return the Snapshot.

    ``meanwhile`` runs while the probe threads work (loading the rules overlaps NVML's
    start-up and the file reads).

    ``overlay`` (preflight: the launch command's facts) is laid over the snapshot before the --deep
    children run, so they test the launch's TP × PP group; ``command_env`` (its ``NAME=value``
    assignments) is in their environment, as it will be in the server's.
    """
    from gpudoctor.probes import Context, start

    if not os.path.isdir(request.root):
        raise UsageError(f"--root {request.root}: not a directory")
    if not (0 < request.timeout <= MAX_TIMEOUT):  # also refuses nan and inf
        raise UsageError(f"--timeout must be a number of seconds between 0 and {MAX_TIMEOUT:g}")
    gpu = gpu_option(request)
    python = request.python
    if python is not None:
        from gpudoctor.probes.python_stack import python_option_error

        problem = python_option_error(python)
        if problem:
            raise UsageError(problem)
    from gpudoctor import runner

    ctx = Context(root=request.root, environ=io.environ, timeout=request.timeout, port=8000 if request.port is None else request.port,
                  python=python, deep=request.deep, deadline=runner.work_deadline(request.timeout))
    status = Status(io.stderr, io.environ)
    if request.deep or announce:  # the plain probes take a fraction of a second: no line for them
        status.say(f"gpudoctor: probing this machine{' (--deep: loading the stack in a child interpreter)' if request.deep else ''}"
                   f" … (up to {request.timeout:g} s)")
    running = start(ctx)
    if meanwhile is not None:
        meanwhile()
    try:
        snapshot = running.finish()
        snapshot.meta["gpudoctor"] = __version__
        if gpu is not None:
            from gpudoctor.gpu_target import override_snapshot

            override_snapshot(snapshot, gpu, request.gpu)
        if overlay is not None:
            overlay(snapshot)
        if ctx.deep:  # now that the GPUs to judge are known: load what lacks code for them (in a child)
            if command_env:
                ctx.environ = {**ctx.environ, **command_env}
            from gpudoctor.probes import deep_extensions_load, deep_fabric, deep_load_check, merge

            ctx.deadline = runner.work_deadline(request.timeout)  # what the probes left of the one deadline
            between = deep_fabric.start(snapshot, ctx)  # P2P and NCCL run on the GPUs while the loads run
            merge(snapshot, deep_load_check.load(snapshot, ctx))
            merge(snapshot, deep_extensions_load.load(snapshot, ctx))  # every torch extension, after import torch
            merge(snapshot, deep_fabric.load(snapshot, ctx, between))
    finally:
        status.clear()
    if request.verbose:
        for text in ctx.debug:
            io.stderr.write(text + "\n")
    return snapshot


def gpu_option(request):
    """``--gpu SPEC`` parsed (a GpuSpec), None when not given; a bad spec is a usage error."""
    text = request.gpu
    if text is None:
        return None
    from gpudoctor.gpu_target import SpecError, parse_spec

    try:
        return parse_spec(text)
    except SpecError as exc:
        raise UsageError(str(exc)) from None


def replay(request):
    """``--snapshot FILE``: load it; ``--gpu`` applies to a replay too, ``--python`` cannot."""
    if request.python:
        raise UsageError("--python inspects an interpreter on this machine; it cannot be combined with --snapshot")
    gpu = gpu_option(request)
    snapshot = load_snapshot(request.snapshot)
    if gpu is not None:
        from gpudoctor.gpu_target import override_snapshot

        override_snapshot(snapshot, gpu, request.gpu)
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
        os.fchmod(fd, 0o600)  # the mode above only applies to a new file, not one being overwritten
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(data)
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None


def selected_rules(request):
    """The rules --select / --ignore pick (every command that runs rules)."""
    from gpudoctor import registry

    select = list(request.select) if request.select is not None else None
    ignore = list(request.ignore) if request.ignore is not None else None
    try:
        return registry.select(registry.load_rules(), registry.split_selectors(select), registry.split_selectors(ignore))
    except registry.RegistryError as exc:
        raise UsageError(str(exc)) from None
