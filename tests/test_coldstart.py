"""The cold-start prefetch of the fatbin scan (probes/coldstart.py) on real nvcc output.

What must hold: every byte ``fatbin.scan`` reads of a file was asked of the disk by ``prefetch``
first (else a cold start waits for it on its own); the chains of a many-container library are
walked in as many steps as its longest container has entries, not as it has containers (the
point of it); hints never change an answer; hostile paths (a FIFO, a directory, garbage, a
truncated copy) neither raise nor block. The only injected piece is a spy on
``os.posix_fadvise`` that records each request and still makes it.
"""

from __future__ import annotations

import os
import struct
import threading
from pathlib import Path
from typing import Dict, List, Set, Tuple

import pytest

from gpudoctor.probes import fatbin, coldstart, kernel_scan, scancache
from fakes.elf_builder import PTX90, SM86, Sec, _containers, _fatbin_bytes, elf_bytes
from fakes.fatbin_files import REAL, _many_containers

PAGE = 4096


def _pages(offset: int, length: int) -> Set[int]:
    return set(range(offset // PAGE, (offset + max(length, 1) - 1) // PAGE + 1))


@pytest.fixture
def asked(monkeypatch) -> Dict[int, Set[int]]:
    """inode -> pages a WILLNEED was asked for (the request is still made)."""
    real = os.posix_fadvise
    pages: Dict[int, Set[int]] = {}

    def spy(fd, offset, length, advice):
        if advice == os.POSIX_FADV_WILLNEED:
            pages.setdefault(os.fstat(fd).st_ino, set()).update(_pages(offset, length))
        return real(fd, offset, length, advice)

    monkeypatch.setattr(os, "posix_fadvise", spy)
    return pages


class RecordingFile:
    """A real file whose reads are recorded as (offset, length)."""

    def __init__(self, path: str, reads: List[Tuple[int, int]]) -> None:
        self._f = open(path, "rb", buffering=0)
        self._reads = reads
        self._pos = 0

    def seek(self, offset: int, whence: int = 0) -> int:
        self._pos = self._f.seek(offset, whence)
        return self._pos

    def read(self, size: int = -1) -> bytes:
        data = self._f.read(size)
        self._reads.append((self._pos, len(data)))
        self._pos += len(data)
        return data

    def close(self) -> None:
        self._f.close()


def _read_pages(path: Path) -> Tuple[fatbin.FatbinScan, Set[int]]:
    reads: List[Tuple[int, int]] = []
    result = fatbin.scan(str(path), opener=lambda p: RecordingFile(p, reads))
    return result, set().union(*(_pages(o, n) for o, n in reads if n))


@pytest.mark.parametrize("path", REAL, ids=lambda p: p.name)
def test_every_page_the_scan_reads_was_asked_for_first(path, asked):
    stats = coldstart.prefetch([str(path)])
    result, pages = _read_pages(path)
    assert result.status == "ok", result.detail
    assert stats["files"] == 1 and stats["hints"] > 0
    missing = pages - asked.get(path.stat().st_ino, set())
    assert not missing, f"pages read but never asked for: {sorted(missing)}"


def test_wrapper_records_start_every_chain_at_once(tmp_path, asked):
    lib = _many_containers(tmp_path, containers=300, archs=4, wrappers=True)
    stats = coldstart.prefetch([str(lib)])
    # One step per entry of a container (4) and one more that finds nothing: not one per container.
    assert stats["waves"] <= 4 + 2, stats
    result, pages = _read_pages(lib)
    assert result.status == "ok" and result.containers == 300 and result.entries == 1200, result.detail
    fatbin_pages = {p for p in pages if p >= 8192 // PAGE}
    assert fatbin_pages <= asked[lib.stat().st_ino]


def test_without_wrapper_records_the_chain_is_still_followed(tmp_path, asked):
    lib = _many_containers(tmp_path, containers=40, archs=3, wrappers=False)
    stats = coldstart.prefetch([str(lib)])
    assert stats["waves"] >= 40  # container after container: nothing says where the next one is
    result, pages = _read_pages(lib)
    assert result.entries == 120
    assert {p for p in pages if p >= 8192 // PAGE} <= asked[lib.stat().st_ino]


def test_hints_never_change_an_answer(tmp_path):
    """Wrong hints too: records that point at no container, or past the file's end."""
    first, second = _containers(_fatbin_bytes(SM86))
    rodata = b"\0" * 64 + first + b"\0" * 16 + second
    records = b"".join(struct.pack("<IIQQ", 0x466243B1, 1, 0x10000 + off, 0) for off in (64, 8, 3, 1 << 40))
    odd = tmp_path / "odd.so"
    odd.write_bytes(elf_bytes([Sec(b".rodata", rodata, addr=0x10000), Sec(b".nvFatBinSegment", records, flags=3)]))
    paths = [str(p) for p in REAL] + [str(odd)]
    before = [fatbin.scan(p).to_json() for p in paths]
    coldstart.prefetch(paths)
    assert [fatbin.scan(p).to_json() for p in paths] == before


def test_hostile_paths_neither_raise_nor_block(tmp_path):
    fifo = tmp_path / "pipe.so"
    os.mkfifo(fifo)  # nobody writes: a plain open() would block forever
    (tmp_path / "dir.so").mkdir()
    (tmp_path / "garbage.so").write_bytes(os.urandom(5000))
    (tmp_path / "empty.so").write_bytes(b"")
    data = PTX90.read_bytes()
    (tmp_path / "cut.so").write_bytes(data[:len(data) - 100])  # the section table cut off
    (tmp_path / "head.so").write_bytes(data[:70])
    paths = [str(p) for p in sorted(tmp_path.iterdir())] + [str(tmp_path / "missing.so"), "bad\0path", "/dev/zero"]
    done: List[Dict[str, int]] = []
    worker = threading.Thread(target=lambda: done.append(coldstart.prefetch(paths)), daemon=True)
    worker.start()
    worker.join(10)
    assert done, "prefetch blocked"
    assert done[0]["files"] == 4  # garbage, empty, cut, head: the regular files
    assert coldstart.page_cache_cold([str(fifo), str(tmp_path / "dir.so"), "bad\0path"]) is False


def _evict(path: Path) -> bool:
    """Drop a file's pages from the page cache (clean pages only: written and synced); whether it worked."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        try:
            os.preadv(fd, [bytearray(1)], 0, os.RWF_NOWAIT)
            return False
        except BlockingIOError:
            return True
    finally:
        os.close(fd)


def test_page_cache_cold_tells_an_evicted_file_from_a_cached_one(tmp_path):
    lib = tmp_path / "lib.so"
    lib.write_bytes(PTX90.read_bytes())
    lib.read_bytes()
    assert coldstart.page_cache_cold([str(lib)]) is False
    if not _evict(lib):
        pytest.skip("this file system keeps the pages (tmpfs): nothing can be evicted here")
    assert coldstart.page_cache_cold([str(lib)]) is True


def test_a_cold_scan_prefetches_and_a_warm_one_does_not(tmp_path):
    site = tmp_path / "site"
    for i in range(kernel_scan.PREFETCH_FROM + 2):
        target = site / f"pkg{i}" / f"lib{i}.so"
        target.parent.mkdir(parents=True)
        target.write_bytes(PTX90.read_bytes())
    items = [{"path": str(p), "dist": None, "package": p.parent.name, "owner": "directory"} for p in sorted(site.rglob("*.so"))]
    _, warm = kernel_scan.scan_all(items, fatbin.scan, scancache.ScanCache(None), coldstart)
    assert "prefetch" not in warm and warm["cuda_binaries"] == len(items)
    if not all(_evict(Path(item["path"])) for item in items):
        pytest.skip("this file system keeps the pages (tmpfs): nothing can be evicted here")
    binaries, cold = kernel_scan.scan_all(items, fatbin.scan, scancache.ScanCache(None), coldstart)
    assert cold["prefetch"]["files"] == len(items) and cold["prefetch"]["hints"] >= 2 * len(items)
    assert [b["scan"] for b in binaries] == [fatbin.scan(item["path"]).to_json() for item in items]


def test_scan_many_answers_as_scan_does_for_every_kind_of_path(tmp_path):
    os.mkfifo(tmp_path / "pipe.so")
    (tmp_path / "dir.so").mkdir()
    (tmp_path / "garbage.so").write_bytes(os.urandom(5000))
    data = PTX90.read_bytes()
    (tmp_path / "cut.so").write_bytes(data[:len(data) - 100])
    (tmp_path / "lib.so").write_bytes(data)
    unreadable = tmp_path / "secret.so"
    unreadable.write_bytes(data)
    unreadable.chmod(0)
    paths = [str(p) for p in REAL] + [str(p) for p in sorted(tmp_path.iterdir())] + [str(tmp_path / "missing.so"), "/dev/zero"]
    results, stats = coldstart.scan_many(paths)
    assert sorted(results) == sorted(paths)
    assert {p: results[p][0].to_json() for p in paths} == {p: fatbin.scan(p).to_json() for p in paths}
    assert all(seconds >= 0 for _, seconds in results.values())
    assert stats["files"] == len(REAL) + 3 + (os.geteuid() == 0)  # the regular files it could open (root: secret.so too)


def test_scan_many_reads_each_fatbin_header_once(tmp_path, monkeypatch):
    """The breadth-first walk's reads are kept for the scan (elf.Reader.memo): on real nvcc output
    and a many-container library, no read inside a fatbin is made twice (a -concat entry's longer
    header is read once more, whole), and the answers are fatbin.scan's."""
    lib = _many_containers(tmp_path, containers=50, archs=3, wrappers=True)
    paths = [str(p) for p in REAL] + [str(lib)]
    expected = {p: fatbin.scan(p).to_json() for p in paths}
    real = os.pread
    reads: Dict[Tuple[int, int, int], int] = {}

    def spy(fd, length, offset):
        key = (os.fstat(fd).st_ino, offset, length)
        reads[key] = reads.get(key, 0) + 1
        return real(fd, length, offset)

    monkeypatch.setattr(os, "pread", spy)
    results, _ = coldstart.scan_many(paths)
    monkeypatch.setattr(os, "pread", real)
    assert {p: results[p][0].to_json() for p in paths} == expected
    twice = []
    for path in paths:
        result = results[path][0]
        if result.status != "ok":
            continue
        ino = os.stat(path).st_ino
        sections = [s for s in _sections(path) if s[0] in (b".nv_fatbin", b"__nv_relfatbin")]
        twice += [(path, off, length) for (i, off, length), n in reads.items()
                  if i == ino and n > 1 and any(lo <= off < lo + size for _, lo, size in sections)]
    assert not twice, twice[:5]


def _sections(path: str) -> List[Tuple[bytes, int, int]]:
    from gpudoctor.probes import elf

    with open(path, "rb", buffering=0) as handle:
        table = elf.Elf(elf.Reader(handle))
        return [(s.name, s.offset, s.size) for s in table.sections]


def test_read_many_reads_in_order_and_never_blocks(tmp_path):
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "dir").mkdir()
    (tmp_path / "small").write_bytes(b"abc")
    (tmp_path / "big").write_bytes(b"x" * 100_000)
    paths = [str(tmp_path / n) for n in ("small", "pipe", "dir", "missing", "big")] + ["bad\0path"]
    paths += [str(tmp_path / "small")] * (coldstart.BATCH + 3)  # more than one batch
    done: List[list] = []
    worker = threading.Thread(target=lambda: done.append(list(coldstart.read_many(paths, 4096))), daemon=True)
    worker.start()
    worker.join(10)
    assert done, "read_many blocked"
    got = done[0]
    assert [p for p, _ in got] == paths
    assert got[0][1] == b"abc" and got[4][1] == b"x" * 4096
    for index in (1, 2, 3, 5):  # FIFO, directory, missing, NUL: each an OSError, none a read
        assert isinstance(got[index][1], OSError), got[index]
    assert all(data == b"abc" for _, data in got[6:])
    assert len(os.listdir("/proc/self/fd")) < 64  # every descriptor closed again
