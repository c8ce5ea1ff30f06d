"""A cold scan shared among forks (coldstart.start / scan_parallel, kernel_scan's early scan
and RECORD parses; what a fork itself may do is tests/test_forks.py's).

What must hold: the answers are ``fatbin.scan``'s (and one process's RECORD parse) for every
kind of path, whichever process made them; a share whose fork fails is done here; no fork is
left behind, whether the caller finishes, aborts or raises. Real nvcc output; the CPUs and the
page cache's state are what the tests set, so that forks are made on any machine.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Dict, List

import pytest

from gpudoctor.probes import coldstart, dist_records, fatbin, forks, kernel_scan, python_stack_read, scancache
from helpers import reaped
from fakes.fatbin_files import REAL, _many_containers
from fakes.site_packages import SM80_SM90_PTX90, SM86, SitePackages


@pytest.fixture
def four_cpus(monkeypatch):
    """Forks on any machine: four CPUs, shares of 8 files at least."""
    monkeypatch.setattr(coldstart.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    monkeypatch.setattr(coldstart, "PER_WORKER", 8)
    monkeypatch.setattr(forks, "ENABLED", True)  # as in the probe's child


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


def _after(monkeypatch, name: str, see) -> None:
    """forks.<name> as it is, with ``see`` shown each result (in this process)."""
    real = getattr(forks, name)

    def wrapped(*args):
        result = real(*args)
        see(result)
        return result

    monkeypatch.setattr(forks, name, wrapped)




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


def test_one_cpu_or_few_files_or_the_doctors_own_process_means_no_fork(monkeypatch):
    monkeypatch.setattr(coldstart.os, "sched_getaffinity", lambda pid: set(range(64)), raising=False)
    assert coldstart.workers_for(100_000) == 1  # this is the doctor's process, not the probe's child
    monkeypatch.setattr(forks, "ENABLED", True)
    monkeypatch.setattr(coldstart.os, "sched_getaffinity", lambda pid: {0}, raising=False)
    assert coldstart.workers_for(10_000) == 1
    monkeypatch.setattr(coldstart.os, "sched_getaffinity", lambda pid: set(range(64)), raising=False)
    assert coldstart.workers_for(coldstart.PER_WORKER - 1) == 1
    assert coldstart.workers_for(100_000) == coldstart.WORKERS


def test_a_share_whose_fork_fails_is_scanned_here(tmp_path, four_cpus, monkeypatch):
    """One fork raises (probes/forks.py: it answers None, is reaped, never comes back): its
    files are scanned in this process; the answers are the same."""
    paths = _paths(tmp_path)
    parent = os.getpid()
    real = coldstart.scan_many
    failing: List[List[str]] = []
    real_split = coldstart.split

    def split(*args):
        shares = real_split(*args)
        failing.append(shares[1])  # the first fork's share (shares[0] is this process's)
        return shares

    monkeypatch.setattr(coldstart, "split", split)

    def scan_many(share, budget=coldstart.MAX_HINTS):
        if os.getpid() != parent and share == failing[0]:
            raise RuntimeError("a bug in the fork")
        return real(share, budget)

    monkeypatch.setattr(coldstart, "scan_many", scan_many)
    out, stats = coldstart.scan_parallel(paths, _sizes(paths))
    assert stats["workers"] == 3  # this process and the two forks that answered
    assert {p: out[p][0] for p in paths} == _expected(paths)


def test_no_fork_at_all_is_the_plain_scan(tmp_path, four_cpus, monkeypatch):
    paths = _paths(tmp_path)
    monkeypatch.setattr(forks, "spawn", lambda work: None)
    scanning = coldstart.start(paths, _sizes(paths))
    out, stats = scanning.finish()
    assert stats["workers"] == 1 and {p: out[p][0] for p in paths} == _expected(paths)


def test_abort_leaves_no_fork(tmp_path, four_cpus, monkeypatch):
    made: List = []
    _after(monkeypatch, "spawn", made.append)
    paths = _paths(tmp_path)
    coldstart.start(paths, _sizes(paths)).abort()
    assert len(made) == 4 and all(reaped(fork[0]) for fork in made)


def test_stat_many_is_os_stat_with_threads_or_without(tmp_path, monkeypatch):
    paths = [str(tmp_path / f"f{i}") for i in range(100)]
    for path in paths[::2]:
        Path(path).write_text("x")
    expected = {p: (os.stat(p).st_ino if os.path.exists(p) else None) for p in paths + ["bad\0path"]}
    got = coldstart.stat_many(paths + ["bad\0path"])
    assert {p: (st.st_ino if st else None) for p, st in got.items()} == expected

    def no_thread(self):
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(threading.Thread, "start", no_thread)
    got = coldstart.stat_many(paths)  # no thread could start: all made here
    assert {p: (st.st_ino if st else None) for p, st in got.items()} == {p: expected[p] for p in paths}


def test_a_first_runs_records_are_parsed_in_forks_as_here(tmp_path, four_cpus, monkeypatch):
    """read_records in forks: the same parse as one process makes, a quoted row (a comma in its
    path) included; a RECORD a fork could not parse is read here."""
    site = SitePackages(tmp_path / "site")
    for i in range(30):
        site.dist(f"pkg{i}", "1.0", files={f"pkg{i}/__init__.py": "", f"pkg{i}/lib/_k{i}.so": SM86})
    record = site.path / "pkg3-1.0.dist-info" / "RECORD"
    record.write_text(record.read_text() + '"pkg3/odd,name.so",sha256=x,1\n')
    first, _, _ = python_stack_read.scan_dists([str(site.path)], read_all=False)
    monkeypatch.setattr(dist_records, "RECORDS_PER_WORKER", 4)
    made: List = []
    _after(monkeypatch, "spawn", made.append)
    cache = scancache.ScanCache(str(tmp_path / "cache"))
    texts = kernel_scan.read_records(first, cache)
    assert len(made) == 3 and all(reaped(fork[0]) for fork in made)
    parsed = {r: v for r, v in texts.items() if isinstance(v, dict)}
    assert len(parsed) > 10  # most came from forks, parsed
    for path, value in texts.items():
        data = Path(path).read_bytes()
        assert (value if isinstance(value, dict) else kernel_scan.parse_record(value)) == kernel_scan.parse_record(data)
    assert "pkg3/odd,name.so" in kernel_scan.parse_record(record.read_bytes())["so"]


def test_the_early_scan_gives_up_its_forks_when_the_candidates_raise(tmp_path, four_cpus, monkeypatch):
    site = SitePackages(tmp_path / "site")
    site.dist("team-kernels", "0.3.1", files={f"tk/v{i}/_k{i}.so": SM86 for i in range(40)})
    monkeypatch.setattr(coldstart, "page_cache_cold", lambda paths, sample=8: True)
    made: List = []
    _after(monkeypatch, "spawn", made.append)

    def broken(*args, **kwargs):
        raise RuntimeError("a bug after the early start")

    monkeypatch.setattr(kernel_scan, "not_in_record", broken)
    first, _, _ = python_stack_read.scan_dists([str(site.path)], read_all=False)
    with pytest.raises(RuntimeError):
        kernel_scan.collect([str(site.path)], first, {}, fatbin.scan, environ={"GPUDOCTOR_CACHE": "off"}, save=False)
    assert len(made) == 4 and all(reaped(fork[0]) for fork in made)


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
    first, _, _ = python_stack_read.scan_dists([str(site.path)], read_all=False)
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
    first, _, _ = python_stack_read.scan_dists([str(site.path)], read_all=False)
    facts = kernel_scan.collect([str(site.path)], first, {}, fatbin.scan, environ={"GPUDOCTOR_CACHE": "off"}, save=False)
    assert "prefetch" not in facts["kernels.scan"]["value"] and len(facts["kernels.binaries"]["value"]) == 40
