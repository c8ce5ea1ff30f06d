"""A cold scan shared among forks (coldstart.start / scan_parallel, kernel_scan's early scan).

What must hold: the answers are ``fatbin.scan``'s for every kind of path, whichever process
scanned a file; a fork that dies, raises or falls silent costs time, never an answer (its files
are scanned in this process) and is reaped; a fork never returns into the caller's code and
holds none of this process's descriptors (the doctor reads the probe's answer from a pipe: a
fork holding it would keep the doctor waiting). Real nvcc output; the CPUs and the page cache's
state are what the tests set, so that forks are made on any machine.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Dict, List

import pytest

from gpudoctor.probes import coldstart, fatbin, kernel_scan, pyenv
from test_coldstart import REAL, _many_containers
from test_pystack_env import SM80_SM90_PTX90, SM86, SitePackages


@pytest.fixture
def four_cpus(monkeypatch):
    """Forks on any machine: four CPUs, shares of 8 files at least."""
    monkeypatch.setattr(coldstart.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    monkeypatch.setattr(coldstart, "PER_WORKER", 8)


def _paths(tmp_path: Path) -> List[str]:
    """Real binaries copied several times, a many-container library, and the hostile kinds."""
    out = []
    for copy in range(8):
        for source in REAL:
            target = tmp_path / f"copy{copy}" / source.name
            target.parent.mkdir(exist_ok=True)
            target.write_bytes(source.read_bytes())
            out.append(str(target))
    out.append(str(_many_containers(tmp_path, containers=40, archs=3, wrappers=True)))
    os.mkfifo(tmp_path / "pipe.so")
    (tmp_path / "dir.so").mkdir()
    (tmp_path / "garbage.so").write_bytes(os.urandom(5000))
    return out + [str(tmp_path / n) for n in ("pipe.so", "dir.so", "garbage.so", "missing.so")] + ["/dev/zero"]


def _sizes(paths: List[str]) -> Dict[str, int]:
    return {p: os.path.getsize(p) if os.path.isfile(p) else 0 for p in paths}


def _expected(paths: List[str]) -> Dict[str, dict]:
    return {p: fatbin.scan(p).to_json() for p in paths}


def test_forks_answer_as_scan_does(tmp_path, four_cpus):
    paths = _paths(tmp_path)
    out, stats = coldstart.scan_parallel(paths, _sizes(paths))
    assert stats["workers"] == 4
    assert {p: out[p][0] for p in paths} == _expected(paths)
    assert stats["files"] == sum(os.path.isfile(p) for p in paths)  # each regular file opened once, by one process
    assert max(out[p][0]["containers"] for p in paths) == 40  # the many-container library


def test_every_share_can_be_a_forks_while_this_process_goes_on(tmp_path, four_cpus):
    paths = _paths(tmp_path)
    scanning = coldstart.start(paths, _sizes(paths))
    assert scanning.own == [] and len(scanning.forks) == 4 and scanning.paths == set(paths)
    out, stats = scanning.finish()
    assert stats["workers"] == 4 and {p: out[p][0] for p in paths} == _expected(paths)


def test_shares_are_even_by_size():
    mb = 1 << 20
    sizes = {"big": 900 * mb, "mid": 500 * mb, "a": 400 * mb, "b": 1000, "c": 1000}
    shares = coldstart.split(list(sizes), sizes, 2)
    assert sorted(map(sorted, shares)) == [["a", "c", "mid"], ["b", "big"]]  # 900 MB + 1 file, 900 MB + 2 files


def test_one_cpu_or_few_files_means_no_fork(monkeypatch):
    monkeypatch.setattr(coldstart.os, "sched_getaffinity", lambda pid: {0}, raising=False)
    assert coldstart.workers_for(10_000) == 1
    monkeypatch.setattr(coldstart.os, "sched_getaffinity", lambda pid: set(range(64)), raising=False)
    assert coldstart.workers_for(coldstart.PER_WORKER - 1) == 1
    assert coldstart.workers_for(100_000) == coldstart.WORKERS


@pytest.mark.parametrize("failure", ["dies", "raises", "garbage", "silent"])
def test_a_fork_that_fails_costs_time_never_an_answer(tmp_path, four_cpus, monkeypatch, failure):
    paths = _paths(tmp_path)
    parent = os.getpid()
    real = coldstart.scan_many
    marker = tmp_path / "returned"
    forks: List[int] = []
    real_spawn = coldstart.spawn

    def spawn(work):
        made = real_spawn(work)
        if made is not None:
            forks.append(made[0])
        return made

    def scan_many(share, budget=coldstart.MAX_HINTS):
        if os.getpid() != parent and share == first_forked[0]:
            if failure == "dies":
                os._exit(3)
            if failure == "raises":
                raise RuntimeError("a bug in the fork")
            if failure == "garbage":
                os.write(_write_end(), b"M" + b"\xff" * 40)
                os._exit(0)
            time.sleep(30)
        return real(share, budget)

    def _write_end():  # the fork's only descriptor past the standard streams: its pipe
        return max(int(n) for n in os.listdir("/proc/self/fd"))

    first_forked: List[List[str]] = [[]]
    real_shares = coldstart.split

    def shares(*args):
        made = real_shares(*args)
        first_forked[0] = made[1]
        return made

    monkeypatch.setattr(coldstart, "split", shares)
    monkeypatch.setattr(coldstart, "spawn", spawn)
    monkeypatch.setattr(coldstart, "scan_many", scan_many)
    monkeypatch.setattr(coldstart, "FORK_SILENT_S", 0.5)
    started = time.monotonic()
    try:
        out, stats = coldstart.scan_parallel(paths, _sizes(paths))
    finally:
        if os.getpid() != parent:  # a fork came back into this code, returning or raising
            marker.write_text(str(os.getpid()))
            os._exit(0)
    assert not marker.exists()
    assert time.monotonic() - started < 20
    assert stats["workers"] == 3  # the failed fork's files were scanned here
    assert {p: out[p][0] for p in paths} == _expected(paths)
    for pid in forks:  # every fork reaped: none left, not even a zombie
        with pytest.raises(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)


def test_a_fork_holds_none_of_this_processes_descriptors(tmp_path, four_cpus, monkeypatch):
    """What each fork had open while it scanned, sent back in its statistics."""
    paths = _paths(tmp_path)
    held = os.open(str(tmp_path / "held"), os.O_CREAT | os.O_RDWR)
    parent = os.getpid()
    real = coldstart.scan_many

    def scan_many(share, budget=coldstart.MAX_HINTS):
        results, stats = real(share, budget)
        if os.getpid() != parent:
            stats["fds"] = sorted(int(n) for n in os.listdir("/proc/self/fd"))
            stats["stdout"] = os.readlink("/proc/self/fd/1")
        return results, stats

    seen: List[dict] = []
    real_collect = coldstart.collect

    def collect(fork):
        got = real_collect(fork)
        if got is not None:
            seen.append(got[1])
        return got

    monkeypatch.setattr(coldstart, "scan_many", scan_many)
    monkeypatch.setattr(coldstart, "collect", collect)
    try:
        coldstart.scan_parallel(paths, _sizes(paths))
    finally:
        os.close(held)
    assert len(seen) == 3
    for stats in seen:
        assert stats["stdout"] == os.devnull
        assert held not in stats["fds"] and len([fd for fd in stats["fds"] if fd > 2]) <= 2  # its pipe (and the listing)


def test_the_early_scan_of_record_files_answers_as_the_plain_scan(tmp_path, four_cpus, monkeypatch):
    """RECORD-listed files scanned in forks while the other candidates are found; a file no RECORD
    lists (copied in after the install) is still found, scanned here, and owned."""
    site = SitePackages(tmp_path / "site")
    files = {f"teamkernels/ops/v{i}/_k{i}.so": (SM80_SM90_PTX90 if i % 2 else SM86) for i in range(40)}
    site.dist("team-kernels", "0.3.1", files={"teamkernels/__init__.py": "", **files})
    copied = site.path / "teamkernels" / "ops" / "v3" / "_copied.so"
    time.sleep(0.01)
    copied.write_bytes(SM86.read_bytes())
    monkeypatch.setattr(coldstart, "page_cache_cold", lambda paths, sample=8: True)
    first, _, _ = pyenv.scan_dists([str(site.path)], read_all=False)
    started: List[int] = []
    real_start = coldstart.start
    monkeypatch.setattr(coldstart, "start", lambda paths, sizes, keep_one=False: started.append(len(paths)) or real_start(paths, sizes, keep_one))
    facts = kernel_scan.collect([str(site.path)], first, {}, fatbin.scan, environ={"GPUDOCTOR_CACHE": "off"}, save=False)
    stats = facts["kernels.scan"]["value"]
    assert started == [40] and stats["prefetch"]["early"] is True and stats["prefetch"]["workers"] == 4
    binaries = {Path(b["path"]).name: b for b in facts["kernels.binaries"]["value"]}
    assert binaries["_copied.so"]["owner"] == "not in RECORD" and binaries["_k3.so"]["owner"] == "RECORD"
    assert {n: b["scan"] for n, b in binaries.items()} == {n: fatbin.scan(b["path"]).to_json() for n, b in binaries.items()}
    assert len(binaries) == 41


def test_a_warm_page_cache_starts_no_early_scan(tmp_path, four_cpus, monkeypatch):
    site = SitePackages(tmp_path / "site")
    site.dist("team-kernels", "0.3.1", files={f"tk/v{i}/_k{i}.so": SM86 for i in range(40)})
    monkeypatch.setattr(coldstart, "page_cache_cold", lambda paths, sample=8: False)
    monkeypatch.setattr(coldstart, "start", lambda *a, **k: pytest.fail("no fork for a warm page cache"))
    first, _, _ = pyenv.scan_dists([str(site.path)], read_all=False)
    facts = kernel_scan.collect([str(site.path)], first, {}, fatbin.scan, environ={"GPUDOCTOR_CACHE": "off"}, save=False)
    assert "prefetch" not in facts["kernels.scan"]["value"] and len(facts["kernels.binaries"]["value"]) == 40
