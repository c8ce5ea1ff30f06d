"""Cold-start reads: what a scan will read, asked of the disk at once (fatbin headers, many small files).

Standard library only and Python 3.8-compatible: it runs in the doctor's process or inside the
interpreter named by ``--python`` (python_stack's bootstrap serves it as ``gpudoctor.probes.coldstart``).

Why: a scan's reads depend on each other. The section table is where the ELF header says, the
section names where the table says, each fatbin container and entry where the one before it
ends. With nothing in the page cache (a first run, a dropped cache, a fresh container) every
one of them is a wait for the disk, one after the other: libcublasLt's ~2,800 containers alone
are ~2,500 waits. Threads helped less than this does (the same 569 files on a 2-core machine:
one thread 1.06 s, 4 threads 0.70 s, 16 threads 1.28 s: each read hands the GIL over), and
readahead made it worse (each small read that missed pulled in 128 KB or more: 1 GB read for 3 MB of headers).

How: ``scan_many(paths)`` walks the same chains breadth-first over many files at once. Before
it reads any header of the next step, it tells the kernel about every one of them with
``posix_fadvise(POSIX_FADV_WILLNEED)``, which starts the read and does not wait, so the disk
works on hundreds of requests together instead of one: the ELF steps per batch of files, then
the containers and entries of every CUDA binary in the same waves. The ``.nvFatBinSegment``
records give the address of every registered container up front (checked on libcublasLt,
libcudnn, libtorch_cuda, libcusparseLt and vLLM's _C: one record per container), so those
chains all start in the first wave. The walk only follows the chains: ``fatbin.scan_reader``
then decides everything itself, on the file the prefetch opened, with the section table it read,
reading each header from the walk's memo of what it read there (elf.Reader.memo: one pread per
header instead of two; the scan of a warm vLLM 0.33 install 0.27 -> 0.21 s). A wrong hint (a
record that points at no container, a table moved by patchelf) costs one page read, never a
wrong answer. ``read_many`` does the same for
many small files (RECORDs, vLLM's sources).

And in forks (``start``, ``scan_parallel``; probes/forks.py says what a fork may do): a cold scan is CPU as well as disk (~19,000 headers parsed in
Python on an H200 host) and the probe's process has one GIL, shared with the other probes'
threads, so the files are shared by size among up to WORKERS processes, each walking its own
waves (which also keeps more requests in flight). ``stat_many`` makes many stats at once in
threads (a stat waiting for the disk lets go of the GIL).

Measured, page cache and scan cache emptied: a vLLM 0.33 install (569 shared objects, 2-core
VM), the scan's process 1.49 s -> 0.70-0.86 s; an H200 host's stock Python (891 shared
objects, 31 CUDA binaries, ~19,000 pages asked for in 58 waves), the scan 1.0 s -> 0.4 s in
waves, 0.36-0.43 -> 0.30-0.33 s in 8 processes; with the RECORD work in forks and the scan
started early, the whole cold check 1.00-1.07 -> 0.76-0.83 s (medians of 6-9 alternating runs).
"""

import errno
import os
import stat
import struct
import time
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Set, Tuple, Union

from gpudoctor.probes import fatbin as _fatbin
from gpudoctor.probes import elf as _elf
from gpudoctor.probes import forks as _forks

BATCH = 256  # files opened at once for their ELF steps
MAX_OPEN = 512  # CUDA binaries held open for their chains at once
TAIL = 4 << 10  # the end of a file: where linkers put the section table and its names
MAX_HINTS = 200_000  # all files together
MAX_WAVES = 4_096  # steps of one chain; a container with more entries is read cold past that
WORKERS = 8  # processes that scan a cold start's files together (an H200 host, cold: 4 -> 8 cut the scan 0.36 -> 0.30-0.33 s)
PER_WORKER = 64  # files per process at least: a smaller share is not worth a fork
SCANNER = _fatbin.scan  # what scan_many answers for (kernel_scan uses it only for this scanner)
CONTAINER = _fatbin.CONTAINER_BYTES
ENTRY = _fatbin.ENTRY_BASE

# (reader, offset, end of its region, what): a container header or an entry header to read next.
_CONTAINER, _ENTRY = 0, 1
Step = Tuple[Any, int, int, int]


def page_cache_cold(paths: List[str], sample: int = 8) -> bool:
    """Whether the first or last page of one of the first ``sample`` paths is not in the page
    cache (``preadv`` with ``RWF_NOWAIT`` refuses to wait for the disk). True where that cannot
    be asked: prefetching a warm cache costs time (~70 ms for 550 files), never an answer."""
    flag = getattr(os, "RWF_NOWAIT", None)
    if flag is None:
        return True
    buffer = bytearray(1)
    for path in paths[:sample]:
        fd = _open_regular(path)
        if fd is None:
            continue
        try:
            size = os.fstat(fd).st_size
            for offset in (0, max(0, size - 1)):
                os.preadv(fd, [buffer], offset, flag)
        except OSError:  # BlockingIOError: not cached; EOPNOTSUPP: a file system that cannot say
            return True
        finally:
            os.close(fd)
    return False


def _open_regular(path: str) -> Optional[int]:
    """A descriptor of ``path`` if it is a regular file. O_NONBLOCK: opening a FIFO cannot block."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except (OSError, ValueError, TypeError):
        return None
    try:
        if stat.S_ISREG(os.fstat(fd).st_mode):
            return fd
    except OSError:
        pass
    os.close(fd)
    return None


def read_many(paths: List[str], limit: int) -> Iterator[Tuple[str, Union[bytes, OSError]]]:
    """Each path's first ``limit`` bytes, or the OSError that stopped it, in order.

    ``BATCH`` files are opened, and each asked of the disk (WILLNEED), before the first is read:
    cold, their reads overlap instead of queueing (vLLM 0.33's 3,231 source files, 47 MB, page
    cache dropped: 0.34 s one after the other, 0.11 s this way; threads: 0.23 s). Warm, it is
    one more system call per file. Regular files only: a FIFO or a device is an OSError, never
    a read that blocks."""
    for start in range(0, len(paths), BATCH):
        opened: List[Tuple[str, Union[int, OSError]]] = []
        try:
            for path in paths[start:start + BATCH]:
                try:
                    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
                except OSError as exc:
                    opened.append((path, exc))
                    continue
                except (ValueError, TypeError) as exc:  # an embedded NUL
                    opened.append((path, OSError(errno.EINVAL, str(exc))))
                    continue
                opened.append((path, fd))
                try:
                    if stat.S_ISREG(os.fstat(fd).st_mode) and hasattr(os, "posix_fadvise"):
                        os.posix_fadvise(fd, 0, limit, os.POSIX_FADV_WILLNEED)
                except OSError:
                    pass
            for path, fd in opened:
                _forks.beat()
                if isinstance(fd, OSError):
                    yield path, fd
                    continue
                try:
                    yield path, _read_regular(fd, limit)
                except OSError as exc:
                    yield path, exc
        finally:
            for _, fd in opened:
                if isinstance(fd, int):
                    try:
                        os.close(fd)
                    except OSError:
                        pass


def _read_regular(fd: int, limit: int) -> bytes:
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        raise OSError(errno.EINVAL, "not a regular file")
    chunks = []
    left = limit
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 24))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


class _Hints:
    """The WILLNEED requests made so far, under one budget."""

    def __init__(self, budget: int = MAX_HINTS) -> None:
        self.budget = self.left = budget
        self.waves = 0

    def ask(self, reader: Any, offset: int, length: int) -> bool:
        """Ask for ``length`` bytes at ``offset`` (once per page: small entries share pages);
        False when nothing more may be asked, or the range is outside the file."""
        if self.left <= 0 or offset < 0 or length <= 0 or offset >= reader.size:
            return False
        pages = (offset >> 12, (offset + length - 1) >> 12)
        asked = reader.__dict__.setdefault("asked_pages", set())  # per file: a closed file's id may be reused
        if pages in asked:
            return True
        asked.add(pages)
        self.left -= 1
        try:
            os.posix_fadvise(reader.fd, offset, length, os.POSIX_FADV_WILLNEED)
        except OSError:
            return False
        return True


def prefetch(paths: List[str]) -> Dict[str, int]:
    """Warm the page cache for ``fatbin.scan`` of every path; never raises.
    Returns {"files", "hints", "waves"} for the scan statistics."""
    return _run(paths, None)


def scan_many(paths: List[str], budget: int = MAX_HINTS) -> Tuple[Dict[str, Tuple[Any, float]], Dict[str, int]]:
    """``fatbin.scan`` of every path with the prefetch first, each file opened and its section
    table read once for both: (path -> (FatbinScan, seconds), the prefetch's statistics).
    ``budget``: page requests at most. Never raises; a path that is not a regular file gets
    ``fatbin.scan``'s own answer."""
    results: Dict[str, Tuple[Any, float]] = {}
    stats = _run(paths, results, budget)
    return results, stats


Scanned = Tuple[Dict[str, Any], int, float]  # (FatbinScan.to_json(), bytes read, seconds)


def scan_parallel(paths: List[str], sizes: Dict[str, int]) -> Tuple[Dict[str, Scanned], Dict[str, int]]:
    """``scan_many`` of ``paths`` shared among up to WORKERS processes, this one among them (see
    ``start``): path -> (scan as JSON, bytes read, seconds), and the prefetch's statistics with
    "workers": how many processes scanned."""
    scanning = start(paths, sizes, keep_one=True)
    return scanning.finish()


def start(paths: List[str], sizes: Dict[str, int], keep_one: bool = False) -> "Scanning":
    """Start ``scan_many`` of ``paths`` in forks of this process (probes/forks.py), in shares of
    about the same total size (the big CUDA libraries are the long ones); ``finish()`` collects
    them, ``abort()`` gives up on them. ``keep_one``: one share is this process's own, scanned in
    ``finish()``; otherwise every share is a fork's and this process is free until then
    (kernel_scan finds the files no RECORD lists meanwhile). A fork that cannot be made, dies or
    falls silent costs time, never an answer: its files are scanned in this process."""
    count = workers_for(len(paths))
    budget = MAX_HINTS // count
    shares = split(paths, sizes, count) if count > 1 else [list(paths)]
    return Scanning(_forks.Shares(lambda share: _scanned(share, budget), shares, keep_first=keep_one or count == 1))


class Scanning:
    """Scans under way (``start``): the share this process keeps, and each fork's."""

    def __init__(self, shares: Any) -> None:
        self.shares = shares
        self.own: List[str] = shares.own[0] if shares.own else []
        self.forks = shares.forks

    @property
    def paths(self) -> Set[str]:
        return set(self.own).union(*(share for share, _ in self.forks))

    def finish(self) -> Tuple[Dict[str, Scanned], Dict[str, int]]:
        """Every path's scan: this process's share now, then every fork's answer (or its files
        scanned here: the fork failed). Every fork is reaped, whatever happens."""
        forked = len(self.shares.forks)
        answers, answered = self.shares.finish(_is_scanned)
        out: Dict[str, Scanned] = {}
        stats = {"files": 0, "hints": 0, "waves": 0}
        for scanned, more in answers:
            out.update(scanned)
            stats = {"files": stats["files"] + more.get("files", 0), "hints": stats["hints"] + more.get("hints", 0),
                     "waves": max(stats["waves"], more.get("waves", 0))}
        here = bool(self.own) or answered < forked  # this process scanned a share too
        return out, dict(stats, workers=answered + here)

    def abort(self) -> None:
        """Every fork killed and reaped, its answer dropped."""
        self.shares.abort()


def _is_scanned(answer: Any) -> bool:
    """A fork's answer to ``_scanned``: (path -> scan, statistics)."""
    return isinstance(answer, tuple) and len(answer) == 2 and isinstance(answer[0], dict) and isinstance(answer[1], dict)


def workers_for(files: int, per_worker: int = 0) -> int:
    """Processes for work on ``files`` files (``per_worker`` of them each at least; default
    PER_WORKER): one where no fork may be made (forks.available: Linux, the probe's child), or
    where there are few files or CPUs (a container's CPU set counts, not the host's)."""
    if not _forks.available():
        return 1
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return max(1, min(WORKERS, cpus, files // (per_worker or PER_WORKER)))


def stat_many(paths: List[str], threads: int = 8) -> Dict[str, Optional[os.stat_result]]:
    """``os.stat`` of each path (None: it failed), ``threads`` at a time. Cold, a stat waits for
    the disk (a directory's blocks, the inode), and a thread waiting lets go of the GIL: the
    waits overlap (with a cold scan beside them, one after the other they queue behind it: an
    H200 host's ~1,800 directory checks 0.12 s alone, 0.4-0.5 s beside the scan)."""
    def one(path: str) -> Optional[os.stat_result]:
        try:
            return os.stat(path)
        except (OSError, ValueError):
            return None

    return each_in_threads(one, paths, threads)


def each_in_threads(work: Callable[[str], Any], paths: List[str], threads: int = 8) -> Dict[str, Any]:
    """path -> ``work(path)`` for each path, ``threads`` at a time (``work`` must not raise): for
    work that waits for the disk, whose waits then overlap (a read waiting lets go of the GIL).
    Few paths, or no thread to be had: one after the other, here."""
    out: Dict[str, Any] = {}

    def share(chunk: List[str]) -> None:
        for path in chunk:
            out[path] = work(path)

    if threads < 2 or len(paths) < 4 * threads:
        share(paths)
        return out
    import threading

    running = []
    for index in range(1, threads):
        helper = threading.Thread(target=share, args=(paths[index::threads],), daemon=True)
        try:
            helper.start()
            running.append(helper)
        except RuntimeError:  # no more threads here: this one does that share too
            share(paths[index::threads])
    share(paths[::threads])
    for helper in running:
        helper.join()
    return out


def split(paths: List[str], sizes: Dict[str, int], count: int, each: int = 1 << 20) -> List[List[str]]:
    """``paths`` in ``count`` shares of about the same cost: a file costs its size plus ``each``
    (a shared object: opening it and its ELF steps, ~1 MB's worth of fatbin headers), the
    largest placed first, each in the lightest share."""
    shares: List[List[str]] = [[] for _ in range(count)]
    loads = [0] * count
    for path in sorted(paths, key=lambda p: -sizes.get(p, 0)):
        lightest = loads.index(min(loads))
        shares[lightest].append(path)
        loads[lightest] += sizes.get(path, 0) + each
    return shares


def _as_json(results: Dict[str, Tuple[Any, float]]) -> Dict[str, Scanned]:
    return {path: (scan.to_json(), getattr(scan, "bytes_read", 0), elapsed) for path, (scan, elapsed) in results.items()}


def _scanned(share: List[str], budget: int) -> Tuple[Dict[str, Scanned], Dict[str, int]]:
    scanned, stats = scan_many(share, budget)
    return _as_json(scanned), stats


def _run(paths: List[str], results: Optional[Dict[str, Tuple[Any, float]]], budget: int = MAX_HINTS) -> Dict[str, int]:
    """Per BATCH of files, the ELF steps; a file without GPU code is then scanned and closed at
    once, a CUDA binary stays open (up to MAX_OPEN) so that the chains of all of them are walked
    in the same waves: the long chains of a few libraries overlap instead of one batch after the
    other's."""
    hints = _Hints(budget)
    files = 0
    advise = hasattr(os, "posix_fadvise")
    held: List[Tuple[str, Any, Any]] = []  # (path, reader, Elf) of CUDA binaries, open
    try:
        for start in range(0, len(paths), BATCH):
            opened: List[Tuple[str, Any]] = []
            try:
                for path in paths[start:start + BATCH]:
                    fd = _open_regular(path) if advise else None
                    if fd is None:
                        if results is not None:
                            _timed(results, path, lambda: _fatbin.scan(path))
                        continue
                    opened.append((path, _elf.Reader(os.fdopen(fd, "rb", buffering=0))))
                files += len(opened)
                try:
                    elfs = _elf_steps([reader for _, reader in opened], hints)
                except Exception:
                    elfs = []  # only hints: the scan reads and reports everything itself
                for index, (path, reader) in enumerate(opened):
                    elf = elfs[index] if index < len(elfs) else None
                    if _has_gpu_sections(elf) and len(held) < MAX_OPEN:
                        held.append((path, reader, elf))
                        opened[index] = (path, None)
                    elif results is not None:
                        _timed(results, path, lambda: _fatbin.scan_reader(path, reader, elf))
            finally:
                _close(reader for _, reader in opened)
            if len(held) >= MAX_OPEN or start + BATCH >= len(paths):
                try:
                    _chain_steps([(reader, elf) for _, reader, elf in held], hints)
                except Exception:
                    pass
                if results is not None:
                    for path, reader, elf in held:
                        _timed(results, path, lambda: _fatbin.scan_reader(path, reader, elf))
                        reader.memo = None
                _close(reader for _, reader, _ in held)
                held = []
    finally:
        _close(reader for _, reader, _ in held)
    return {"files": files, "hints": hints.budget - hints.left, "waves": hints.waves}


def _close(readers: Iterable[Any]) -> None:
    for reader in readers:
        if reader is not None:
            try:
                reader.handle.close()
            except Exception:
                pass


def _has_gpu_sections(elf: Any) -> bool:
    return elf is not None and not isinstance(elf, _fatbin.FatbinScan) and any(
        elf.find(name) is not None for name in (_fatbin.FATBIN_SECTION, _fatbin.RELFATBIN_SECTION, _fatbin.WRAPPER_SECTION))


def _timed(results: Dict[str, Tuple[Any, float]], path: str, scan: Any) -> None:
    started = time.perf_counter()
    results[path] = (scan(), time.perf_counter() - started)
    _forks.beat()


def _elf_steps(readers: List[Any], hints: _Hints) -> List[Any]:
    """The ELF header, section table and names of each file, each step asked of all files before
    the first is read; returns what was read of each one's section table (``fatbin.read_elf``:
    an Elf, the scan that says why there is none, or None: the read failed, the scan retries)."""
    # Step 1: the ELF header, and the end of the file (the section table and names, mostly).
    for reader in readers:
        _fatbin._no_readahead(reader.handle.fileno())
        hints.ask(reader, 0, 64)
        hints.ask(reader, max(0, reader.size - TAIL), TAIL)
    # Step 2: the section table where the header puts it; step 3: the section names.
    tables = []
    for reader in readers:
        head = reader.read(0, 64)
        if len(head) < 52 or head[:4] != _elf.ELF_MAGIC or head[4] not in (_elf.ELFCLASS32, _elf.ELFCLASS64):
            continue
        is64 = head[4] == _elf.ELFCLASS64
        shoff, shentsize, shnum, shstrndx = _elf.header_fields(head, is64)
        if shentsize and 0 < shnum and shstrndx < shnum:
            hints.ask(reader, shoff, shentsize * shnum)
            tables.append((reader, is64, shoff + shstrndx * shentsize, shentsize))
    for reader, is64, where, size in tables:
        names = _elf.section_header(reader.read(where, size), is64) if size >= (64 if is64 else 40) else None
        if names is not None and names.size:
            hints.ask(reader, names.offset, min(names.size, _elf.MAX_NAME_TABLE))
    # Step 4: the section tables themselves.
    elfs: List[Any] = []
    for reader in readers:
        try:
            elfs.append(_fatbin.read_elf(reader))
        except Exception:
            elfs.append(None)
    return elfs


def _chain_steps(binaries: List[Tuple[Any, Any]], hints: _Hints) -> None:
    """The fatbin containers and entries of ``binaries`` ((reader, Elf) with GPU sections)."""
    # Step 5: each fatbin's first container, and the wrapper records.
    chains: List[Step] = []
    wrapped = []
    for reader, elf in binaries:
        regions = []
        for section in (elf.find(_fatbin.FATBIN_SECTION), elf.find(_fatbin.RELFATBIN_SECTION)):
            if section is not None and not section.nobits:
                end = min(section.offset + section.size, reader.size)
                hints.ask(reader, section.offset, CONTAINER + ENTRY)
                chains.append((reader, section.offset, end, _CONTAINER))
                regions.append((section.offset, end))
        wrappers = elf.find(_fatbin.WRAPPER_SECTION)
        if regions and wrappers is not None and not wrappers.nobits:
            hints.ask(reader, wrappers.offset, min(wrappers.size, _fatbin.MAX_WRAPPER_BYTES))
            wrapped.append((reader, elf, wrappers, regions))
    # Step 6: every container a wrapper record points at, inside a fatbin section of its file.
    for reader, elf, wrappers, regions in wrapped:
        ptr, size = ("<Q", 24) if elf.is64 else ("<I", 16)
        data = reader.read(wrappers.offset, min(wrappers.size, _fatbin.MAX_WRAPPER_BYTES))
        reader.memo = {wrappers.offset: data}  # fatbin's _walk_wrappers reads the same bytes
        for base in range(0, len(data) - size + 1, size):
            if struct.unpack_from("<I", data, base)[0] != _fatbin.WRAPPER_MAGIC:
                continue
            offset = elf.file_offset(struct.unpack_from(ptr, data, base + 8)[0])
            for lo, hi in regions:
                if offset is not None and lo < offset < hi and hints.ask(reader, offset, CONTAINER + ENTRY):
                    chains.append((reader, offset, hi, _CONTAINER))
    # Then the chains, one step of every chain per wave: a container gives the next container
    # and its first entry (read with it: its step is taken at once), an entry the next entry.
    # What is read is kept in the reader's memo, where fatbin.scan_reader's reads of the same
    # headers find it: each header costs one pread, not two (~35,000 on an H200 host).
    # The hot loop of a cold scan: plain preads and tuples.
    seen: Set[Tuple[int, int]] = set()
    container, entry = _fatbin.CONTAINER_HEADER.unpack_from, _fatbin.ENTRY_HEAD.unpack_from
    magic_ok, pread = _fatbin.FATBIN_MAGIC, os.pread
    with_entry = CONTAINER + ENTRY
    while chains and hints.waves < MAX_WAVES and hints.left > 0:
        hints.waves += 1
        _forks.beat()
        following: List[Step] = []
        for reader, offset, end, what in chains:
            memo = reader.memo
            if memo is None:
                memo = reader.memo = {}
            if what == _CONTAINER:
                key = (id(reader), offset)  # the readers live through this loop: ids are not reused
                if key in seen:  # a wrapper record and the chain before it both lead here
                    continue
                seen.add(key)
                try:
                    head = pread(reader.fd, with_entry, offset)
                except OSError:
                    continue
                if len(head) < CONTAINER:
                    continue
                memo[offset] = head
                magic, _, hsize, fsize = container(head)
                if magic != magic_ok or hsize < CONTAINER:
                    continue
                first, after = offset + hsize, offset + hsize + fsize
                if after + CONTAINER <= end and hints.ask(reader, after, with_entry):
                    following.append((reader, after, end, _CONTAINER))
                stop = min(after, end)
                if first + CONTAINER > stop:
                    continue
                if hsize != CONTAINER or len(head) < with_entry:
                    following.append((reader, first, stop, _ENTRY))
                    continue
                offset, head = first, head[CONTAINER:]
                end = stop
            else:
                try:
                    head = pread(reader.fd, ENTRY, offset)
                except OSError:
                    continue
                if len(head) < 16:
                    continue
            memo[offset] = head
            _, _, ehsize, size = entry(head)
            after = offset + ehsize + size
            if ehsize >= ENTRY and after + CONTAINER <= end and hints.ask(reader, after, ENTRY):
                following.append((reader, after, end, _ENTRY))
        chains = following
