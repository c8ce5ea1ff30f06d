"""Work in forks of this process, each answering once on a pipe (a cold start's scans and RECORD parses).

Standard library only and Python 3.8-compatible: it runs in the doctor's process or inside the
interpreter named by ``--python`` (python_stack's bootstrap serves it as ``gpudoctor.probes.forks``).

Why: a cold kernel scan is CPU as well as disk, and the probe's process has one GIL, shared with
the other probes' threads. Forks work beside it, on other cores, with what the process already
has in memory (the probe code, the file lists): no interpreter to start, nothing to import.

Design constraints (a fork is a copy of a process whose other threads may be anywhere):
- A fork runs ``work()`` only: probe code on data in memory and files it opens itself. It imports
  nothing not imported yet (another thread may hold the import lock: it would wait for ever)
  and takes no lock another thread may hold (it writes nothing but its pipe: no stdio buffer).
- It holds none of this process's descriptors: each is made /dev/null, not closed, so that the
  number stays taken (an inherited object that closes "its" descriptor closes /dev/null, never
  a file the fork opened), and the cyclic GC is off (a collection would run inherited
  finalizers). The doctor reads this process's answer from a pipe: a fork holding it would keep
  the doctor waiting.
- It never returns into the caller's code: whatever happens (an exception, a KeyboardInterrupt
  from a signal), it leaves with ``os._exit``.
- It answers once (ANSWER, the length, the marshalled value), with HEARTBEAT bytes before
  while it works. ``collect`` waits for every fork at once: one that cannot be made, dies,
  answers garbage, or sends nothing for SILENT_S is killed, reaped and answers None; the caller
  does that work itself. Time, never a wrong answer; never a wait of SILENT_S per fork.
"""

import os
import struct
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

HEARTBEAT, ANSWER = b".", b"M"
BEAT_S = 0.25  # at most one heartbeat per this
SILENT_S = 10.0  # a fork that sends nothing this long is killed (its work is done by the caller)
REAP_S = 0.05  # after SIGKILL: how long to wait for a fork stuck in the kernel (a hung NFS read) to go

Fork = Tuple[int, int]  # (pid, read end of its pipe)

# Forks are made only inside the probe's child (python_stack's bootstrap marks the package it serves
# these modules from with IN_CHILD): there every thread runs probe code. The doctor's own process also holds NVML, psutil
# and the renderer's threads, so an in-process probe (where no interpreter can be started)
# does its work without forks. Tests turn this on.
ENABLED = bool(getattr(sys.modules.get("gpudoctor.probes"), "IN_CHILD", False))

_beat_fd = -1  # in a fork: its pipe
_last_beat = 0.0


def beat() -> None:
    """A sign of life, in a fork (at most one per BEAT_S); nothing elsewhere. Long loops call it."""
    global _last_beat
    if _beat_fd < 0:
        return
    now = time.monotonic()
    if now - _last_beat >= BEAT_S:
        _last_beat = now
        try:
            os.write(_beat_fd, HEARTBEAT)
        except OSError:
            pass


def available() -> bool:
    """Whether ``spawn`` may make forks here: Linux, inside the probe's child, and SIGCHLD not
    ignored (then an exited fork is reaped by the kernel at once and its pid may be another
    process's before this one kills or reaps it)."""
    if not (ENABLED and hasattr(os, "fork") and sys.platform.startswith("linux")):
        return False
    import signal

    try:
        return signal.getsignal(signal.SIGCHLD) != signal.SIG_IGN
    except (AttributeError, ValueError):
        return False


def spawn(work: Callable[[], Any]) -> Optional[Fork]:
    """A fork running ``work()`` (which must return plain data: marshal), or None: no fork could
    be made (not ``available``, a limit on processes, an interpreter shutting down)."""
    if not available():
        return None
    import gc  # before the fork: the fork imports nothing
    import marshal

    try:
        read_end, write_end = os.pipe()
    except OSError:
        return None
    parent = os.getpid()
    status, pid = 1, -1
    try:
        pid = os.fork()
        if pid == 0:
            global _beat_fd, _last_beat
            gc.disable()
            _only(write_end)
            _beat_fd, _last_beat = write_end, time.monotonic()
            payload = marshal.dumps(work())
            data = memoryview(ANSWER + struct.pack("<Q", len(payload)) + payload)
            while data:
                data = data[os.write(write_end, data):]
            status = 0
    except BaseException as exc:
        if os.getpid() == parent:  # fork() failed (OSError; RuntimeError at shutdown), or a signal came
            os.close(write_end)
            if pid > 0:
                _end([(pid, read_end)], None)
            else:
                os.close(read_end)
            if not isinstance(exc, Exception):
                raise
            return None
    finally:
        if os.getpid() != parent:  # the fork, even if a signal came before pid was set
            os._exit(status)
    os.close(write_end)
    return pid, read_end


class Shares:
    """``work(share)`` for each of ``shares``, in forks made at once (the first share kept for
    this process when ``keep_first``); ``finish`` collects the answers, doing here the work of
    each fork that failed, or ``abort`` drops them. No fork outlives either, whatever happens."""

    def __init__(self, work: Callable[[Any], Any], shares: List[Any], keep_first: bool = False) -> None:
        self.work = work
        self.own = shares[:1] if keep_first else []
        self.forks: List[Tuple[Any, Optional[Fork]]] = []
        try:
            for share in shares[len(self.own):]:
                self.forks.append((share, spawn(lambda share=share: work(share))))
        except BaseException:
            self.abort()
            raise

    def finish(self, valid: Callable[[Any], bool]) -> Tuple[List[Any], int]:
        """Every share's answer, in the order of ``shares`` (a fork's that is not ``valid`` is
        made here), and how many came from forks."""
        forks, self.forks = self.forks, []
        try:
            answers = [self.work(share) for share in self.own]
        except BaseException:
            kill([fork for _, fork in forks])
            raise
        answered = 0
        for (share, _), answer in zip(forks, collect([fork for _, fork in forks])):  # collect reaps them all
            if valid(answer):
                answered += 1
            else:
                answer = self.work(share)
            answers.append(answer)
        return answers, answered

    def abort(self) -> None:
        """Every fork killed and reaped, its answer dropped."""
        forks, self.forks = self.forks, []
        kill([fork for _, fork in forks])


def _only(keep: int) -> None:
    """In a fork: every inherited descriptor but ``keep`` made /dev/null (see the header)."""
    null = os.open(os.devnull, os.O_RDWR)
    try:
        inherited = [int(name) for name in os.listdir("/proc/self/fd")]
    except (OSError, ValueError):  # no /proc: the numbers a process usually has, those open
        inherited = [fd for fd in range(1024) if _is_open(fd)]
    for fd in set(inherited) | {0, 1, 2}:
        if fd not in (keep, null):
            try:
                os.dup2(null, fd)
            except OSError:  # the listing's own descriptor, gone already
                pass


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
        return True
    except OSError:
        return False


def collect(forks: List[Optional[Fork]]) -> List[Optional[Any]]:
    """What each fork answered (None: it was not made, failed, or fell silent for SILENT_S and
    was killed), in order. Every fork is reaped before this returns or raises."""
    import select

    answers: List[Optional[Any]] = [None] * len(forks)
    live: Dict[int, Tuple[int, int]] = {fork[1]: (index, fork[0]) for index, fork in enumerate(forks) if fork is not None}
    received: Dict[int, bytearray] = {fd: bytearray() for fd in live}
    heard = dict.fromkeys(live, time.monotonic())
    poller = select.poll()
    try:
        for fd in live:
            poller.register(fd, select.POLLIN)
        while live:
            now = time.monotonic()
            silent = [fd for fd in live if now - heard[fd] >= SILENT_S]
            _end([(live.pop(fd)[1], fd) for fd in silent], poller)
            if not live:
                break
            wait = max(0.0, min(heard[fd] for fd in live) + SILENT_S - now)
            for fd, _ in poller.poll(wait * 1000):
                if fd not in live:
                    continue
                try:
                    chunk = os.read(fd, 1 << 20)
                except OSError:
                    chunk = b""
                    received[fd] = bytearray()  # what came is not trusted
                if chunk:
                    received[fd] += chunk
                    heard[fd] = time.monotonic()
                    continue
                index, pid = live[fd]
                _end([(pid, fd)], poller)
                del live[fd]
                answers[index] = decode(received[fd])
    finally:
        _end([(pid, fd) for fd, (_, pid) in live.items()], poller)
    return answers


def kill(forks: List[Optional[Fork]]) -> None:
    """Every fork killed and reaped, its answer dropped (the caller gave up on it). Only for
    forks not collected: a reaped fork's pid may be another process's by now."""
    _end([fork for fork in forks if fork is not None], None)


def decode(data: bytes) -> Optional[Any]:
    """The value of a whole answer (heartbeats, ANSWER, length, marshal), else None: a whole
    answer is valid whatever the fork's exit status."""
    import marshal

    start = data.find(ANSWER)
    if start < 0 or data[:start].strip(HEARTBEAT) or len(data) < start + 9:
        return None
    if len(data) != start + 9 + struct.unpack_from("<Q", data, start + 1)[0]:
        return None
    try:
        return marshal.loads(bytes(data[start + 9:]))
    except (EOFError, ValueError, TypeError):
        return None


def _end(ended: List[Fork], poller: Any) -> None:
    """Close each pipe and kill each fork (harmless once it exited: it stays a zombie until
    reaped, so its pid is no one else's), then reap them; a fork the kernel keeps (stuck in a
    read) is left after REAP_S, never waited for."""
    for pid, fd in ended:
        try:
            if poller is not None:
                poller.unregister(fd)
        except (KeyError, ValueError):
            pass
        try:
            os.close(fd)
        except OSError:
            pass
        try:
            os.kill(pid, 9)
        except OSError:
            pass
    left = [pid for pid, _ in ended]
    give_up = time.monotonic() + REAP_S
    while left:
        for pid in list(left):
            try:
                if os.waitpid(pid, os.WNOHANG)[0] == pid:
                    left.remove(pid)
            except OSError:  # reaped already
                left.remove(pid)
        if not left or time.monotonic() >= give_up:
            return
        time.sleep(0.001)
