"""Work in forks (probes/forks.py): what a fork may do to the process it was forked from, and
what a failed fork costs.

What must hold: an answer comes back exactly as ``work()`` returned it; a fork that dies,
raises, answers garbage or falls silent answers None, is reaped, and forks are waited for
together (N silent forks cost one SILENT_S, not N); a fork never returns into the caller's
code, holds none of the caller's descriptors (each is /dev/null) and runs no inherited
finalizer; with SIGCHLD ignored no fork is made (its pid could be reused). Real forks, real pipes.
"""

from __future__ import annotations

import gc
import os
import signal
import time
from typing import List

import pytest

from gpudoctor.probes import forks
from helpers import reaped


@pytest.fixture(autouse=True)
def enabled(monkeypatch):
    """Forks outside the probe's child, as the child makes them (forks.ENABLED)."""
    monkeypatch.setattr(forks, "ENABLED", True)


def test_the_doctors_own_process_makes_no_fork(monkeypatch):
    monkeypatch.setattr(forks, "ENABLED", False)
    assert forks.spawn(lambda: 1) is None and not forks.available()




def test_an_answer_comes_back_as_work_returned_it():
    value = {"a": [1, 2.5, None, True], "b": ("x", b"\x00\xff"), "c": {"nested": list(range(100_000))}}
    made = [forks.spawn(lambda: value), forks.spawn(lambda: os.getpid())]
    answers = forks.collect(made)
    assert answers[0] == value
    assert answers[1] == made[1][0] and answers[1] != os.getpid()  # it ran in the fork
    assert all(reaped(fork[0]) for fork in made)


@pytest.mark.parametrize("failure", ["dies", "raises", "interrupted", "garbage", "unmarshallable"])
def test_a_failed_fork_answers_none_and_never_comes_back(tmp_path, failure):
    parent = os.getpid()
    marker = tmp_path / "came-back"

    def work():
        if failure == "dies":
            os._exit(3)
        if failure == "raises":
            raise RuntimeError("a bug in the work")
        if failure == "interrupted":
            raise KeyboardInterrupt
        if failure == "garbage":
            os.write(max(int(n) for n in os.listdir("/proc/self/fd")), b"M" + b"\xff" * 40)
            os._exit(0)
        return object()  # marshal cannot send it

    try:
        made = forks.spawn(work)
        answers = forks.collect([made, forks.spawn(lambda: "fine")])
    finally:
        if os.getpid() != parent:  # a fork came back into this code, returning or raising
            marker.write_text(str(os.getpid()))
            os._exit(0)
    assert not marker.exists()
    assert answers == [None, "fine"]
    assert reaped(made[0])


def test_silent_forks_are_waited_for_together(monkeypatch):
    monkeypatch.setattr(forks, "SILENT_S", 1.0)
    started = time.monotonic()
    made = [forks.spawn(lambda: time.sleep(60)) for _ in range(4)] + [forks.spawn(lambda: "fine")]
    answers = forks.collect(made)
    assert time.monotonic() - started < 3.0  # one SILENT_S for all four, not four
    assert answers == [None] * 4 + ["fine"]
    assert all(reaped(fork[0]) for fork in made)


def test_heartbeats_keep_a_slow_fork_alive(monkeypatch):
    monkeypatch.setattr(forks, "SILENT_S", 0.6)
    monkeypatch.setattr(forks, "BEAT_S", 0.1)

    def slow():
        for _ in range(15):  # 1.5 s, longer than SILENT_S, with a sign of life every 0.1 s
            time.sleep(0.1)
            forks.beat()
        return "done"

    assert forks.collect([forks.spawn(slow)]) == ["done"]


def test_a_fork_holds_none_of_the_callers_descriptors(tmp_path):
    held = os.open(str(tmp_path / "held"), os.O_CREAT | os.O_RDWR)
    other = forks.spawn(lambda: time.sleep(0.5))  # a sibling: its pipe must not be held either
    try:
        def listing():
            out = {}
            for name in os.listdir("/proc/self/fd"):
                try:
                    out[int(name)] = os.readlink(f"/proc/self/fd/{name}")
                except OSError:
                    pass
            return out

        [seen] = forks.collect([forks.spawn(listing)])
    finally:
        os.close(held)
        forks.collect([other])
    pipes = [fd for fd, target in seen.items() if target.startswith("pipe:")]
    assert len(pipes) == 1  # its own answer pipe, nothing else
    assert seen[0] == seen[1] == seen[2] == os.devnull
    assert str(tmp_path / "held") not in seen.values()
    assert seen[held] == os.devnull  # the number stays taken, on /dev/null


def test_an_inherited_finalizer_cannot_close_what_the_fork_opened(tmp_path):
    """A garbage cycle holding an open file, inherited: the fork's GC is off, and were it to
    run, the inherited descriptor is /dev/null by then, never a file the fork opened."""
    source = tmp_path / "data"
    source.write_bytes(b"x" * 1000)

    class Cycle:
        pass

    gc.disable()
    try:
        cycle = Cycle()
        cycle.me = cycle
        cycle.handle = open(source, "rb")  # noqa: SIM115 - left to the GC on purpose
        number = cycle.handle.fileno()
        del cycle

        def work():
            fds = []
            while len(fds) < 300 and number not in fds:  # until the fork's own file could have its number
                fds.append(os.open(str(source), os.O_RDONLY))
            gc.collect()  # what a collection in the fork would do: the inherited file is closed
            return [len(os.pread(fd, 10, 0)) for fd in fds]

        [answer] = forks.collect([forks.spawn(work)])
    finally:
        gc.enable()
        gc.collect()
    assert answer is not None and set(answer) == {10}


def test_with_sigchld_ignored_no_fork_is_made():
    """The kernel would reap an exited fork at once: its pid could be another process's by the
    time it is killed or reaped. The caller does the work itself."""
    previous = signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    try:
        assert not forks.available() and forks.spawn(lambda: "answer") is None
    finally:
        signal.signal(signal.SIGCHLD, previous)
    assert forks.collect([forks.spawn(lambda: "answer")]) == ["answer"]


def test_kill_reaps_forks_nobody_collects():
    made: List = [forks.spawn(lambda: time.sleep(60)) for _ in range(3)]
    forks.kill(made + [None])
    assert all(reaped(fork[0]) for fork in made)


def test_no_fork_means_none(monkeypatch):
    def refuse():
        raise OSError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(os, "fork", refuse)
    before = sorted(os.listdir("/proc/self/fd"))
    assert forks.spawn(lambda: 1) is None
    assert forks.collect([None]) == [None]
    assert sorted(os.listdir("/proc/self/fd")) == before  # the pipe it made is closed again


def test_decode_takes_only_a_whole_answer():
    import marshal
    import struct

    payload = marshal.dumps({"k": 1})
    whole = b"..." + forks.ANSWER + struct.pack("<Q", len(payload)) + payload
    assert forks.decode(whole) == {"k": 1}
    assert forks.decode(whole[:-1]) is None
    assert forks.decode(b"x" + whole) is None
    assert forks.decode(b"") is None


def test_shares_answer_in_order_and_a_failed_forks_share_is_done_here():
    parent = os.getpid()

    def work(share):
        if os.getpid() != parent and share == [3]:
            raise RuntimeError("this fork fails")
        return (sum(share), os.getpid() == parent)

    shares = forks.Shares(work, [[1], [2], [3], [4]], keep_first=True)
    assert [share for share, _ in shares.forks] == [[2], [3], [4]]
    answers, answered = shares.finish(lambda answer: isinstance(answer, tuple))
    assert answers == [(1, True), (2, False), (3, True), (4, False)] and answered == 2
    made = forks.Shares(lambda share: time.sleep(60), [[1], [2]])
    pids = [fork[0] for _, fork in made.forks]
    made.abort()
    assert all(reaped(pid) for pid in pids)
