"""The one way gpudoctor runs a program: argv list, deadline, bounded output, LC_ALL=C, never a shell.

A child runs in its own session (process group). When it misses its deadline or prints more
than its cap, the whole group is killed — a ``--python`` that forks a hanging grandchild
leaves nothing behind — and the output read so far (at most the cap) is kept for the reason.
Output is read as it comes, so a program that floods stdout costs at most ``max_output``
bytes of memory, never gigabytes.
"""

from __future__ import annotations

import atexit
import os
import selectors
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence, Set

MAX_OUTPUT = 4 << 20  # bytes of stdout kept by default: nvidia-smi -q of 8 GPUs is ~100 KiB
MAX_STDERR = 256 << 10  # stderr is only ever shown as a reason
_CHUNK = 1 << 16
_IMPORTED = time.monotonic()


@dataclass
class Completed:
    status: str  # ok | absent | timeout | error (snapshot statuses)
    returncode: Optional[int] = None
    stdout: str = ""
    stderr: str = ""
    detail: str = ""


# --- one deadline per command ---------------------------------------------------------------
# ``--timeout S`` promises an answer within S seconds of the command starting, as the person (or
# the CI job) that ran it counts them: from the process start, interpreter start-up and imports
# included. Every phase works against the same point in time: the probes and every subprocess
# they run stop at ``work_deadline``, which leaves ``answer_reserve`` seconds for the rules, the
# rendering and a bundle, so that the answer is out by ``command_deadline``.
_ANCHOR: Optional[float] = None  # time.monotonic() the current command counts from (set by begin())


def process_start() -> float:
    """time.monotonic() when this process was started (fork + exec), from /proc/self/stat.

    /proc gives the start in clock ticks since boot (CLOCK_BOOTTIME); the difference to now is
    converted to the monotonic clock. Without /proc it is the time this module was imported.
    """
    try:
        with open("/proc/self/stat", "rb") as handle:  # a kernel file of one line, never a user's
            fields = handle.read(4096).rsplit(b")", 1)[1].split()
        ticks = int(fields[19])  # field 22 (starttime); fields[0] is field 3 (state)
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError, AttributeError):
        return _IMPORTED
    now = time.monotonic()
    return now - age if 0 <= age < 86400 * 365 else _IMPORTED


def begin(from_process_start: bool) -> float:
    """Start counting the current command's ``--timeout``: from the process start when gpudoctor is
    the program (``gpudoctor check``), from now when it is called in-process (tests, a library)."""
    global _ANCHOR
    _ANCHOR = process_start() if from_process_start else time.monotonic()
    return _ANCHOR


# Ctrl-C: Python raises KeyboardInterrupt wherever the main thread is, and where that is a
# weakref callback or a __del__ (import's module-lock callbacks, while rules are imported) it is
# printed as "Exception ignored" and lost: the command went on waiting for its probes. The
# program's handler (watch_interrupts) also sets this flag, and the long waits look at it.
_INTERRUPTED = threading.Event()


def watch_interrupts() -> None:
    """Install the SIGINT handler (gpudoctor as the program, main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        return
    try:
        signal.signal(signal.SIGINT, _on_sigint)
    except (ValueError, OSError):
        pass


def _on_sigint(signum, frame) -> None:
    _INTERRUPTED.set()
    raise KeyboardInterrupt


def check_interrupt() -> None:
    """Raise KeyboardInterrupt if a Ctrl-C arrived (even one swallowed where it landed)."""
    if _INTERRUPTED.is_set():
        raise KeyboardInterrupt


def end() -> None:
    """The command is over: a later one that does not call begin() counts from the moment it asks."""
    global _ANCHOR
    _ANCHOR = None


def command_deadline(timeout: float) -> float:
    """The monotonic time by which a command given ``--timeout timeout`` must have answered (counted from
    begin(); without it, from now: a command module's run() called directly, as tests do)."""
    return (_ANCHOR if _ANCHOR is not None else time.monotonic()) + timeout


def answer_reserve(timeout: float) -> float:
    """Seconds kept back from the probes for what comes after them (rules, rendering, a bundle's
    gzip): ~0.1 s on an idle machine, several times that on a loaded 2-core box (load 15: ~0.7 s)."""
    return min(0.8, 0.2 * timeout)


def work_deadline(timeout: float) -> float:
    """When probing (and every subprocess a probe runs) must stop so the answer is on time."""
    return command_deadline(timeout) - answer_reserve(timeout)


def remaining(deadline: Optional[float], timeout: float) -> float:
    """The seconds a step may take: its own timeout, cut to what is left of the overall deadline."""
    if deadline is None:
        return timeout
    return max(0.0, min(timeout, deadline - time.monotonic()))


def run(argv: Sequence[str], timeout: float = 5.0, env: Optional[Mapping[str, str]] = None,
        deadline: Optional[float] = None, max_output: int = MAX_OUTPUT, stdin: Optional[bytes] = None) -> Completed:
    """Run ``argv`` for at most ``timeout`` seconds (and never past ``deadline``, a monotonic time).

    ``stdin``: bytes handed to the child's standard input (written at once when they fit in its
    pipe, else from a thread: a child that does not read them cannot block us); without it the
    child's stdin is /dev/null.
    """
    return start(argv, timeout, env, deadline, max_output, stdin).wait()


class Started:
    """A child started by ``start()``; ``wait()`` reads its output to the end (or its deadline)
    and gives what ``run()`` gives. A child that could not be started carries its answer."""

    def __init__(self, argv0: str, proc: Optional[subprocess.Popen] = None, until: float = 0.0, limit: float = 0.0,
                 max_output: int = MAX_OUTPUT, answer: Optional[Completed] = None) -> None:
        self.argv0, self.proc, self.until, self.limit, self.max_output = argv0, proc, until, limit, max_output
        self.answer = answer

    def wait(self) -> Completed:
        if self.answer is not None:
            return self.answer
        proc = self.proc
        assert proc is not None
        try:
            out, err, why = _collect(proc, self.until, self.max_output)
        finally:
            _finish(proc)
        stdout = out.decode("utf-8", "replace")  # from the bytearrays: no bytes copy of a capped flood
        stderr = err.decode("utf-8", "replace")
        del out, err
        argv0 = self.argv0
        if why == "timeout":
            self.answer = Completed("timeout", None, stdout, stderr, f"{argv0} did not answer within {_seconds(self.limit)} s")
        elif why == "flood":
            self.answer = Completed("error", None, stdout, stderr,
                                    f"{argv0} printed more than {self.max_output >> 20 or 1} MiB; stopped it (not its normal output)")
        elif proc.returncode != 0:
            first = (stdout.strip() or stderr.strip()).splitlines()[:1]
            detail = f"{argv0} exited {proc.returncode}" + (f": {first[0][:200]}" if first else "")
            self.answer = Completed("error", proc.returncode, stdout, stderr, detail)
        else:
            self.answer = Completed("ok", 0, stdout, stderr)
        return self.answer


def start(argv: Sequence[str], timeout: float = 5.0, env: Optional[Mapping[str, str]] = None,
          deadline: Optional[float] = None, max_output: int = MAX_OUTPUT, stdin: Optional[bytes] = None) -> Started:
    """``run()``'s first half: the child is started (its time counts from now) and this returns at
    once; ``.wait()`` is the second half. For a child worth starting before other work (python_stack's)."""
    exe = shutil.which(argv[0], path=(env or os.environ).get("PATH")) if os.sep not in argv[0] else argv[0]
    if not exe:
        return Started(argv[0], answer=Completed("absent", detail=f"{argv[0]} not found on PATH"))
    limit = remaining(deadline, timeout)
    if limit <= 0:
        return Started(argv[0], answer=Completed("timeout", detail=f"{argv[0]} was not run: no time left under the overall deadline"))
    child_env = dict(env if env is not None else os.environ)
    child_env["LC_ALL"] = "C"
    try:
        proc = subprocess.Popen([exe, *argv[1:]], stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=child_env, start_new_session=True)
    except (OSError, ValueError) as exc:  # ValueError: an embedded NUL byte in argv or env
        return Started(argv[0], answer=Completed("error", detail=f"cannot run {argv[0]}: {getattr(exc, 'strerror', None) or exc}"))
    with _LOCK:
        _ACTIVE.add(proc.pid)
    if stdin is not None:
        if _fits_in_pipe(proc.stdin, len(stdin)):
            _feed(proc.stdin, stdin)  # the pipe holds it all: written now, never waiting for the child
        else:
            threading.Thread(target=_feed, args=(proc.stdin, stdin), name="runner-stdin", daemon=True).start()
    return Started(argv[0], proc, time.monotonic() + limit, limit, max_output)


def _fits_in_pipe(pipe, size: int) -> bool:
    """Whether the pipe to the child can hold ``size`` bytes (grown to it on Linux, F_SETPIPE_SZ,
    at most /proc/sys/fs/pipe-max-size: 1 MiB by default). Then the bytes are written at once:
    a feeding thread would need this process's GIL for every 64 KiB the child reads, and a cold
    start's imports hold it (python_stack's ~216 kB bootstrap waited ~60 ms for it on an H200 host)."""
    try:
        import fcntl

        grow = getattr(fcntl, "F_SETPIPE_SZ", 1031)  # Linux's value; Python < 3.10 has no name for it
        return fcntl.fcntl(pipe.fileno(), grow, max(size, 1 << 16)) >= size
    except (ImportError, OSError, ValueError, AttributeError):
        return False


def _collect(proc: subprocess.Popen, until: float, max_output: int):
    """Read both pipes until they close, the deadline passes or stdout passes its cap."""
    out, err = bytearray(), bytearray()
    selector = selectors.DefaultSelector()
    for stream in (proc.stdout, proc.stderr):
        os.set_blocking(stream.fileno(), False)
        selector.register(stream, selectors.EVENT_READ)
    try:
        while selector.get_map():
            left = until - time.monotonic()
            if left <= 0:
                return out, err, "timeout"
            for key, _ in selector.select(min(left, 0.5)):
                try:
                    chunk = os.read(key.fd, _CHUNK)
                except BlockingIOError:
                    continue
                if not chunk:
                    selector.unregister(key.fileobj)
                    continue
                if key.fileobj is proc.stdout:
                    out += chunk
                    if len(out) > max_output:
                        del out[max_output:]
                        return out, err, "flood"
                else:
                    err += chunk
                    if len(err) > MAX_STDERR:  # keep the tail: the last lines say what went wrong
                        del err[: len(err) - MAX_STDERR]
        # Both pipes closed: the child is exiting; wait for it, still under the deadline.
        while proc.poll() is None:
            if time.monotonic() >= until:
                return out, err, "timeout"
            time.sleep(0.005)
        return out, err, ""
    finally:
        selector.close()


# Process groups still running. A probe runs in a daemon thread: when the doctor answers at its
# deadline and exits, that thread may not have reached _finish yet, and the group (a hung
# nvidia-smi and its grandchildren) would outlive us. atexit kills what is left.
_ACTIVE: Set[int] = set()
_LOCK = threading.Lock()


@atexit.register
def _kill_leftovers() -> None:
    with _LOCK:
        groups = list(_ACTIVE)
        _ACTIVE.clear()
    for pgid in groups:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _feed(pipe, data: bytes) -> None:
    try:
        pipe.write(data)
    except (OSError, ValueError):  # the child exited or closed its stdin: nothing more to give
        pass
    finally:
        try:
            pipe.close()
        except (OSError, ValueError):
            pass


def _finish(proc: subprocess.Popen) -> None:
    """Kill whatever is left of the child's process group, then reap the child."""
    # A reaped leader's id stays reserved while any member of its group (a grandchild) lives,
    # so this reaches the leftovers and nothing else; an empty group answers ESRCH.
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    with _LOCK:
        _ACTIVE.discard(proc.pid)
    for stream in (proc.stdout, proc.stderr):
        try:
            stream.close()
        except OSError:
            pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:  # unkillable (D state): leave it, never hang on it
        pass


def _seconds(value: float) -> str:
    """0.299998 -> "0.3": a limit cut from a deadline is shown as a person would say it."""
    return f"{value:.2g}" if value < 10 else f"{value:.0f}"
