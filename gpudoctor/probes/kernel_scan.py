"""Every shared object on the interpreter's path that carries CUDA device code, with its owner and its archs.

Standard library only and Python 3.8-compatible: python_stack_collect.collect_plain calls ``collect`` in the
doctor's process or inside the interpreter named by ``--python`` (python_stack's bootstrap serves it
as ``gpudoctor.probes.kernel_scan``).

Not a list of known packages: cupy, JAX's CUDA plugins, mamba-ssm, causal-conv1d, sgl-kernel,
bitsandbytes, DeepSpeed ops, a team's own kernels and whatever vLLM adds next release are all
just shared objects. Where they are:
- every ``*.dist-info`` on the path: the shared objects its RECORD lists (``*.so``, ``*.so.N``),
  including the libraries under ``*/lib/`` of the ``nvidia-*`` wheels — owner: that distribution;
- ``*.egg-info`` installs: ``installed-files.txt``, else the directories of ``top_level.txt``;
- editable installs (setuptools' ``__editable___*_finder.py`` mappings): their source trees;
- a shared object in a directory of a distribution that ships shared objects, but not listed in
  any RECORD (built in place, copied there by a team's script): owner "not in RECORD", attributed
  to the distribution that owns the directory. Cheap: a directory older than its RECORD has had no entry added since
  pip wrote it (one ``stat``); only a newer one is listed (and cached by its mtime/inode);
- anything else on a path entry that no RECORD claims (a copied-in package, a leftover of an
  interrupted uninstall): walked, bounded — owner: the directory it sits in.
Each candidate's ELF section table is read (probes/elf.py) and, if it has fatbin sections, its
fatbin headers (probes/fatbin.py); nothing else of the file. Results are kept in the persistent
scan cache (probes/scancache.py) keyed by (path, size, mtime_ns, inode, device), so a warm run
costs one ``stat`` per shared object; RECORD parses are cached the same way.

Facts: ``kernels.binaries`` (one entry per CUDA binary: path, dist, package, owner, scan) and
``kernels.scan`` (how many files were looked at, read, taken from the cache, unreadable).
"""

import os
import sys
import time
from typing import Any, Callable, Dict, Iterable, List, Optional, Set, Tuple

from gpudoctor.probes import python_stack_read as _stack_read
from gpudoctor.probes import scancache as _scancache
from gpudoctor.probes import coldstart as _coldstart
from gpudoctor.probes import dist_records as _records  # the RECORDs of the distributions
COLD_RECORDS = _records.COLD_RECORDS
is_shared_object, read_records, record_shared_objects = _records.is_shared_object, _records.read_records, _records.record_shared_objects
_record_dir, _top = _records._record_dir, _records._top
parse_record, _record_tree = _records.parse_record, _records._record_tree  # the tests read them here

SCAN_KIND = "fatbin-1"  # bump when FatbinScan.to_json changes meaning
DIR_KIND = "dir-so-1"  # a RECORD directory changed since install: its shared objects and subdirectories
MAX_CANDIDATES = 20_000
MAX_WALK_ENTRIES = 60_000  # directory entries visited outside RECORDs, all walks together
MAX_WALK_DEPTH = 12
MAX_UNREADABLE_SHOWN = 20
MAX_RECORD_DIRS = 50_000  # RECORD directories checked for files RECORD does not list, all distributions together
SKIP_DIRS = ("__pycache__", ".git", "node_modules")
_NOT_CUDA = ("absent", "not_elf")
PREFETCH_FROM = 16  # files to read for a cold-start prefetch to be worth asking whether it is one
COLD_RECORDS = 32  # RECORDs not in the scan cache: a first run, whose stats are made in threads (coldstart.stat_many)


def _dir_listing(path: str, cache, st: Optional[os.stat_result] = None) -> Optional[Tuple[List[str], List[str]]]:
    """(shared-object names, subdirectory names) in a directory, cached by its mtime and inode
    (``st``: its stat when the caller has it: one stat per directory, ~1,800 of them on an H200 host)."""
    if st is None:
        try:
            st = os.stat(path)
        except (OSError, ValueError):
            return None
    key = [0, st.st_mtime_ns, st.st_ino, st.st_dev]
    cached = cache.get(DIR_KIND, path, key)
    if cached is not None and isinstance(cached.get("so"), list) and isinstance(cached.get("dirs"), list):
        return [str(n) for n in cached["so"]], [str(n) for n in cached["dirs"]]
    shared: List[str] = []
    subdirs: List[str] = []
    try:
        for entry in os.scandir(path):
            try:
                if entry.is_dir():
                    if entry.name not in SKIP_DIRS:
                        subdirs.append(entry.name)
                elif is_shared_object(entry.name) and entry.is_file():
                    shared.append(entry.name)
            except OSError:
                continue
    except OSError:
        return None
    cache.put(DIR_KIND, path, key, {"so": sorted(shared), "dirs": sorted(subdirs)})
    return sorted(shared), sorted(subdirs)


def not_in_record(owned: Dict[str, Dict[str, Any]], listed: Set[str], walk: "_Walk", cache, cold: bool = False) -> List[Dict[str, Any]]:
    """Shared objects in directories RECORDs list files in that no RECORD lists.

    ``owned``: location -> {"dirs": {rel_dir: {dist: files}} of the distributions that ship shared objects
    (a pure-Python distribution's directories are not checked: one stat each saved), "mtime": {dist:
    RECORD mtime_ns}, "known": every directory any RECORD there lists files in}.
    A directory whose mtime is older than the newest RECORD of its owners has had no entry added
    since the install (adding a file changes its directory's mtime): it costs one stat.
    ``cold``: a first run; the stats are made in threads first (coldstart.stat_many)."""
    found: List[Dict[str, Any]] = []
    checked = [(_joined(location, rel), info, rel, owners_of) for location, info in sorted(owned.items())
               for rel, owners_of in sorted(info["dirs"].items())][:MAX_RECORD_DIRS]
    stats = _coldstart.stat_many([path for path, _, _, _ in checked]) if cold else {}
    for path, info, rel, owners_of in checked:
        mtimes = info["mtime"]
        if len(owners_of) == 1:  # almost every directory: max() over a generator is ~1 µs each
            newest = mtimes.get(next(iter(owners_of)), 0)
        else:
            newest = max(mtimes.get(d, 0) for d in owners_of)
        if path in stats:
            st = stats[path]
            if st is None:
                continue
        else:
            try:
                st = os.stat(path)
            except (OSError, ValueError):
                continue
        if st.st_mtime_ns < newest:  # equal: written in the same clock tick as RECORD, or after
            continue
        listing = _dir_listing(path, cache, st)
        if listing is None:
            continue
        # The distribution with the most files directly in it owns it (nvidia/cu13/lib is shared).
        dist = max(sorted(owners_of), key=lambda d: owners_of[d])
        package = _top(rel + "/")
        paths = [os.path.join(path, name) for name in listing[0]]
        for name in listing[1]:
            child = f"{rel}/{name}"
            # A directory no RECORD knows (made after the install); not a header tree or __pycache__.
            if child not in info["known"] and _record_dir(child + "/x") is not None:
                paths.extend(walk.files(os.path.join(path, name)))
        for item in paths:
            if os.path.normpath(item) not in listed:
                found.append({"path": os.path.normpath(item), "dist": dist, "package": package, "owner": "not in RECORD"})
    return found


def _joined(location: str, rel: str) -> str:
    """os.path.join(location, rel) for POSIX paths, without its generality (~1,800 directories of a
    warm H200 check: a few ms of the scan's path to the answer)."""
    if rel.startswith("/"):
        return rel
    return location + rel if location.endswith("/") else location + "/" + rel


class _Walk:
    """A bounded walk for shared objects: a budget of directory entries shared by every walk."""

    def __init__(self) -> None:
        self.left = MAX_WALK_ENTRIES
        self.truncated: List[str] = []

    def files(self, top: str) -> List[str]:
        found: List[str] = []
        stack = [(top, 0)]
        seen: Set[Tuple[int, int]] = set()
        while stack:
            directory, depth = stack.pop()
            try:
                st = os.stat(directory)
                if (st.st_dev, st.st_ino) in seen:
                    continue  # a symlink loop
                seen.add((st.st_dev, st.st_ino))
                entries = list(os.scandir(directory))
            except OSError:
                continue
            for entry in entries:
                self.left -= 1
                if self.left < 0:
                    if top not in self.truncated:
                        self.truncated.append(top)
                    return found
                try:
                    if entry.is_dir():
                        if depth < MAX_WALK_DEPTH and entry.name not in SKIP_DIRS:
                            stack.append((entry.path, depth + 1))
                    elif is_shared_object(entry.name) and entry.is_file():
                        found.append(entry.path)
                except OSError:
                    continue
        return sorted(found)


def candidates(paths: List[str], dists: Dict[str, Dict[str, Any]], editable: Dict[str, str], cache,
               phases: Optional[Dict[str, float]] = None,
               listed: Optional[Callable[[List[Dict[str, Any]], bool], None]] = None) -> Tuple[List[Dict[str, Any]], List[str]]:
    """Every shared object on the path, each with its owner: [{path, dist, package, owner}], notes.
    ``phases``: where the time went (RECORDs read, parsed, directories checked), in seconds.
    ``listed``: called with what the RECORDs (and egg-info lists) name, and whether this is a
    first run (COLD_RECORDS read), before the rest is looked for."""
    clock = time.perf_counter()
    found: List[Dict[str, Any]] = []
    notes: List[str] = []
    claimed: Dict[str, Set[str]] = {}  # location -> top-level names owned by some distribution
    record_dirs: Dict[str, Dict[str, Any]] = {}  # location -> directories RECORDs list files in (not_in_record)
    walk = _Walk()
    texts = read_records(dists, cache)
    cold = len(texts) >= COLD_RECORDS
    read_at = time.perf_counter()
    for key, dist in sorted(dists.items()):
        location, meta = dist.get("location"), str(dist.get("meta", ""))
        if not location or not meta:
            continue
        tops = claimed.setdefault(location, set())
        tops.add(meta)
        if meta.endswith(".dist-info"):
            shared, owned, dirs, mtime = record_shared_objects(dist, cache, texts)
            tops.update(owned)
            where = record_dirs.setdefault(location, {"dirs": {}, "mtime": {}, "known": set()})
            where["mtime"][key] = mtime
            where["known"].update(dirs)
            if shared:  # a distribution that ships compiled code: its directories are checked (one stat each)
                for rel_dir, count in dirs.items():
                    where["dirs"].setdefault(rel_dir, {})[key] = count
            for rel in shared:
                path = os.path.normpath(os.path.join(location, rel))
                found.append({"path": path, "dist": key, "package": _top(rel), "owner": "RECORD"})
        elif meta.endswith(".egg-info"):
            listed = _egg_files(os.path.join(location, meta))
            if listed is not None:
                for path in listed:
                    rel = os.path.relpath(path, location)
                    tops.add(_top(rel.replace(os.sep, "/")))
                    found.append({"path": path, "dist": key, "package": _top(rel.replace(os.sep, "/")), "owner": "installed-files.txt"})
            else:
                for top in _egg_tops(os.path.join(location, meta)):
                    tops.add(top)
                    where = os.path.join(location, top)
                    items = walk.files(where) if os.path.isdir(where) else []
                    found.extend({"path": p, "dist": key, "package": top, "owner": "top_level.txt"} for p in items)
    parsed_at = time.perf_counter()
    if listed is not None:
        try:
            listed(list(found), cold)
        except Exception:  # an early start is only a head start: the scan below does it all otherwise
            pass
    found.extend(not_in_record(record_dirs, {item["path"] for item in found}, walk, cache, cold))
    if phases is not None:
        phases.update({"records_read": round(read_at - clock, 4), "records_parsed": round(parsed_at - read_at, 4),
                       "not_in_record": round(time.perf_counter() - parsed_at, 4)})
    for package, target in sorted(editable.items()):
        owner = _owner_guess(package, dists)
        found.extend({"path": p, "dist": owner, "package": package, "owner": "editable"} for p in walk.files(target))
    entries_on_path = {os.path.normpath(p) for p in paths}
    for location in paths:
        try:
            entries = list(os.scandir(location))
        except OSError:
            continue
        owned = claimed.get(location, set())
        # The standard library's directory (it holds os.py): its packages are Python's own, and
        # site-packages / lib-dynload below it are path entries of their own (or not on the path).
        stdlib = any(e.name == "os.py" for e in entries) and any(e.name == "encodings" for e in entries)
        for entry in sorted(entries, key=lambda e: e.name):
            name = entry.name
            if name in owned or name.endswith((".dist-info", ".egg-info", ".pth", ".py", ".pyc")) or name in SKIP_DIRS:
                continue
            stem = name.split(".", 1)[0]
            try:
                if entry.is_dir():
                    if stem in owned or stdlib or name in ("site-packages", "dist-packages") \
                            or os.path.normpath(entry.path) in entries_on_path:
                        continue
                    items = walk.files(entry.path)
                elif is_shared_object(name) and entry.is_file():
                    if stem in owned:
                        continue
                    items = [entry.path]
                else:
                    continue
            except OSError:
                continue
            owner = _owner_guess(stem, dists)
            found.extend({"path": p, "dist": owner, "package": stem, "owner": "directory"} for p in items)
    if walk.truncated:
        notes.append(f"stopped walking after {MAX_WALK_ENTRIES} directory entries in {', '.join(walk.truncated[:3])}")
    unique: List[Dict[str, Any]] = []
    seen: Set[str] = set()
    for item in found:
        if item["path"] not in seen:
            seen.add(item["path"])
            unique.append(item)
    if len(unique) > MAX_CANDIDATES:
        notes.append(f"{len(unique)} shared objects, scanned the first {MAX_CANDIDATES}")
        unique = unique[:MAX_CANDIDATES]
    return unique, notes


def _egg_files(egg: str) -> Optional[List[str]]:
    try:
        with open(os.path.join(egg, "installed-files.txt"), encoding="utf-8", errors="replace") as handle:
            lines = handle.read(8 << 20).splitlines()
    except OSError:
        return None
    return [os.path.normpath(os.path.join(egg, line.strip())) for line in lines
            if line.strip() and is_shared_object(os.path.basename(line.strip()))]


def _egg_tops(egg: str) -> List[str]:
    try:
        with open(os.path.join(egg, "top_level.txt"), encoding="utf-8", errors="replace") as handle:
            return [line.strip() for line in handle.read(1 << 16).splitlines() if line.strip() and "/" not in line]
    except OSError:
        return []


def _owner_guess(package: str, dists: Dict[str, Dict[str, Any]]) -> Optional[str]:
    key = _stack_read.normalize(package)
    for name in dists:
        if name == key:
            return name
    return None


def _valid_scan(value: Any) -> bool:
    return (isinstance(value, dict) and isinstance(value.get("status"), str)
            and all(isinstance(value.get(k, []), list) for k in ("sm", "sm_variants", "ptx", "ptx_variants")))


def _scan_files(paths: List[str], sizes: Dict[str, int], scanner: Callable[[str], Any], cold_start: Any,
                stats: Dict[str, Any], early: Optional["_EarlyScan"] = None) -> Dict[str, Tuple[Dict[str, Any], int, float]]:
    """path -> (scan as JSON, bytes read, seconds), for files the cache did not have.

    One after the other, in this thread; but when many files are to be read with the fatbin
    reader and their headers are not in the page cache (a first run, a dropped cache),
    ``cold_start`` (probes/coldstart.py) scans them first: all asked of the disk at once, shared
    among a few processes (``sizes``: path -> bytes, to share them evenly). ``early``: the scan
    of what RECORDs list, started before the other files were looked for."""
    out: Dict[str, Tuple[Dict[str, Any], int, float]] = {}
    if early is not None:
        out = early.finish(stats)
    rest = [path for path in paths if path not in out]
    if (cold_start is not None and scanner is cold_start.SCANNER and len(rest) >= PREFETCH_FROM
            and cold_start.page_cache_cold(rest)):
        started = time.perf_counter()
        try:
            more, prefetched = cold_start.scan_parallel(rest, sizes)
            out.update(more)
            _add_prefetch(stats, dict(prefetched, elapsed_s=round(time.perf_counter() - started, 4)))
        except Exception as exc:  # never the scan's end: each file is scanned below instead
            stats.setdefault("prefetch", {})["error"] = f"{type(exc).__name__}: {exc}"[:200]
    for path in rest:
        if path in out:
            continue
        started = time.perf_counter()
        try:
            scan = scanner(path)
            out[path] = (scan.to_json(), getattr(scan, "bytes_read", 0), time.perf_counter() - started)
        except Exception as exc:  # the reader promises not to raise; keep the promise here too
            out[path] = ({"status": "error", "detail": f"{type(exc).__name__}: {exc}"}, 0, time.perf_counter() - started)
    return out


def _add_prefetch(stats: Dict[str, Any], prefetched: Dict[str, Any]) -> None:
    """Two prefetches of one scan (the early one and the rest) count as one: summed, waves the longest."""
    before = stats.get("prefetch")
    if not isinstance(before, dict) or "files" not in before:
        stats["prefetch"] = dict(prefetched, **({"error": before["error"]} if isinstance(before, dict) and "error" in before else {}))
        return
    for key in ("files", "hints", "elapsed_s"):
        before[key] = round(before.get(key, 0) + prefetched.get(key, 0), 4)
    for key in ("waves", "workers"):
        before[key] = max(before.get(key, 0), prefetched.get(key, 0))


def _uncached(items: List[Dict[str, Any]], cache, keys: Dict[str, Any],
              looked_up: Optional[Dict[str, Any]] = None) -> List[Tuple[Dict[str, Any], Any, Optional[Dict[str, Any]]]]:
    """(item, file key, cached scan or None) of each regular file among ``items``, each inode once;
    ``keys``: path -> file key, filled here and read back (one stat per file for both passes);
    ``looked_up``: path -> the valid cached scan or None, the same (one lookup per file for both)."""
    todo: List[Tuple[Dict[str, Any], Any, Optional[Dict[str, Any]]]] = []
    inodes: Set[Tuple[int, int]] = set()
    for item in items:
        path = item["path"]
        if path not in keys:
            keys[path] = _scancache.file_key(path)
        key = keys[path]
        if key is None:
            continue  # vanished, or not a regular file (RECORD lists what pip wrote; a link to a dir …)
        if (key[3], key[2]) in inodes:
            continue  # the same file under another name
        inodes.add((key[3], key[2]))
        if looked_up is not None and path in looked_up:
            result = looked_up[path]
        else:
            result = cache.get(SCAN_KIND, path, key)
            result = result if _valid_scan(result) else None
            if looked_up is not None:
                looked_up[path] = result
        todo.append((item, key, result))
    return todo


class _EarlyScan:
    """The scan of the files RECORDs list, started in forks (coldstart.start) as soon as the
    RECORDs are parsed, when they are many and cold: the directories checked for files no RECORD
    lists (~1,800 stats, ~0.09 s of a cold H200 host) are checked while it runs, not before."""

    def __init__(self, scanner: Callable[[str], Any], cache, cold_start: Any) -> None:
        self.scanner, self.cache, self.cold_start = scanner, cache, cold_start
        self.keys: Dict[str, Any] = {}
        self.looked_up: Dict[str, Any] = {}  # path -> its cached scan or None (_uncached), for scan_all too
        self.scanning: Any = None
        self.created = time.perf_counter()
        self.started = 0.0
        self.timing: Dict[str, float] = {}

    def __call__(self, items: List[Dict[str, Any]], cold: bool = False) -> None:
        cold_start = self.cold_start
        if cold_start is None or self.scanner is not cold_start.SCANNER or self.scanning is not None:
            return
        called = time.perf_counter()
        if cold:  # a first run: each file's stat waits for the disk; made in threads
            self.keys.update((path, _scancache.key_of(st)) for path, st in cold_start.stat_many([item["path"] for item in items]).items())
        fresh = [(item["path"], key[0]) for item, key, result in _uncached(items, self.cache, self.keys, self.looked_up) if result is None]
        paths = [path for path, _ in fresh]
        if len(paths) < PREFETCH_FROM or cold_start.workers_for(len(paths)) < 2 or not cold_start.page_cache_cold(paths):
            return
        self.started = time.perf_counter()
        self.scanning = cold_start.start(paths, dict(fresh))
        # when it started (seconds after the kernel scan did), and what starting it cost (the stats, the forks)
        self.timing = {"started_at_s": round(self.started - self.created, 4), "start_s": round(time.perf_counter() - called, 4)}

    def finish(self, stats: Dict[str, Any]) -> Dict[str, Tuple[Dict[str, Any], int, float]]:
        """The early scan's answers (none if it did not start), its statistics added to ``stats``."""
        if self.scanning is None:
            return {}
        scanning, self.scanning = self.scanning, None
        try:
            out, prefetched = scanning.finish()
        except Exception as exc:  # never the scan's end: the caller scans every file instead
            scanning.abort()
            stats["prefetch"] = {"error": f"early scan: {type(exc).__name__}: {exc}"[:200]}
            return {}
        _add_prefetch(stats, dict(prefetched, early=True, elapsed_s=round(time.perf_counter() - self.started, 4), **self.timing))
        return out

    def close(self) -> None:
        """Gives up on a scan nobody collected (the candidates raised): no fork outlives this."""
        if self.scanning is not None:
            scanning, self.scanning = self.scanning, None
            scanning.abort()


def scan_all(items: List[Dict[str, Any]], scanner: Callable[[str], Any], cache, cold_start: Any = None,
             early: Optional[_EarlyScan] = None, stated: Optional[Callable[[], None]] = None) -> Tuple[List[Dict[str, Any]], Dict[str, Any]]:
    """Scan each candidate (or take its scan from the cache); keep those with CUDA device code.
    ``cold_start``: probes/coldstart.py (or None: no prefetch); ``early``: a scan already started
    of some of them; ``stated``: called once every candidate has its file key (in ``early.keys``),
    before any header is read."""
    binaries: List[Dict[str, Any]] = []
    unreadable: List[Dict[str, str]] = []
    stats = {"shared_objects": 0, "cuda_binaries": 0, "read": 0, "cached": 0, "bytes_read": 0, "unreadable": 0}
    todo = _uncached(items, cache, early.keys if early is not None else {}, early.looked_up if early is not None else None)
    if stated is not None:
        stated()
    fresh = _scan_files([item["path"] for item, _, result in todo if result is None],
                        {item["path"]: key[0] for item, key, result in todo if result is None}, scanner, cold_start, stats, early)
    for item, key, result in todo:
        path = item["path"]
        stats["shared_objects"] += 1
        cached = result is not None
        elapsed = 0.0
        if result is None:
            result, bytes_read, elapsed = fresh[path]
            stats["bytes_read"] += bytes_read
            stats["read"] += 1
            if result.get("status") not in ("no_permission",):
                cache.put(SCAN_KIND, path, key, result)
        else:
            stats["cached"] += 1
        status = result.get("status")
        if status in _NOT_CUDA:
            continue
        if status != "ok" and not result.get("sections"):
            # Not read far enough to see a fatbin section: it may be a CUDA binary. Kept, so a
            # kernel rule says "unknown" with the reason instead of passing it silently.
            stats["unreadable"] += 1
            if len(unreadable) < MAX_UNREADABLE_SHOWN:
                unreadable.append({"path": path, "status": status, "detail": str(result.get("detail", ""))[:200]})
        entry = dict(item, scan=result, elapsed_s=round(elapsed, 5))
        if cached:
            entry["cached"] = True
        binaries.append(entry)
    stats["cuda_binaries"] = len(binaries)
    stats["unreadable_files"] = unreadable
    return binaries, stats


def collect(paths: List[str], dists: Dict[str, Dict[str, Any]], editable: Dict[str, str],
            scanner: Optional[Callable[[str], Any]], environ: Optional[Dict[str, str]] = None,
            save: bool = True, shared_objects: Optional[List[Dict[str, Any]]] = None,
            listed: Optional[Callable[[], None]] = None) -> Dict[str, Dict[str, Any]]:
    """``kernels.binaries`` and ``kernels.scan`` for this path. ``save=False``: the caller saves
    the scan cache once, with what else it adds (python_stack_collect.collect_plain), and sets ``cache_save``.
    ``shared_objects``: filled with every shared object found (path, dist, package, file key), CUDA
    or not, for the torch link check (probes/torch_links.py), as soon as each has its key and
    before their headers are read; ``listed`` is called then (the link check can start)."""
    started = time.perf_counter()
    fact = _stack_read.fact
    from gpudoctor.probes import fatbin
    cache = _scancache.shared(environ)
    loaded = time.perf_counter()
    inner: Dict[str, float] = {}
    early = _EarlyScan(scanner or fatbin.scan, cache, _coldstart)
    try:
        items, notes = candidates(paths, dists, editable, cache, inner, early)
        found = time.perf_counter()

        def stated() -> None:
            if shared_objects is not None:  # with the file key each was looked up by: one stat per file, not two
                shared_objects.extend(dict(item, key=early.keys.get(item["path"])) for item in items)
            if listed is not None:
                listed()
        binaries, stats = scan_all(items, scanner or fatbin.scan, cache, _coldstart, early, stated)
    finally:
        early.close()
    scanned = time.perf_counter()
    saved = cache.save() if save else "with the other probes' entries"
    stats.update({"elapsed_s": round(time.perf_counter() - started, 4), "cache": cache.status,
                  "cache_dir": cache.directory, "cache_save": saved,
                  # where a slow (cold) scan spent its time: cache load, finding the files, reading them, saving
                  "phases_s": {"load": round(loaded - started, 4), "candidates": round(found - loaded, 4),
                               "scan": round(scanned - found, 4), "save": round(time.perf_counter() - scanned, 4), **inner}})
    if cache.detail:
        stats["cache_detail"] = cache.detail
    detail = (f"{stats['cuda_binaries']} CUDA binaries in {stats['shared_objects']} shared objects "
              f"({stats['cached']} from the scan cache)")
    return {
        "kernels.binaries": fact(binaries, source="fatbin", detail="; ".join([detail] + notes)),
        "kernels.scan": fact(stats, source="kernel_scan", detail=detail),
    }


def owners(binaries: Iterable[Dict[str, Any]]) -> Dict[str, List[str]]:
    """dist (or "?") -> file names, for a human summary."""
    out: Dict[str, List[str]] = {}
    for b in binaries:
        out.setdefault(b.get("dist") or "?", []).append(os.path.basename(str(b.get("path"))))
    return out


if __name__ == "__main__":  # python -m gpudoctor.probes.kernel_scan: this interpreter's CUDA binaries
    import json

    search = _stack_read.search_paths()
    first, _, _ = _stack_read.scan_dists(search, read_all=False)
    facts = collect(search, first, _stack_read.editable_mappings(search), None)
    for b in facts["kernels.binaries"]["value"]:
        scan = b["scan"]
        sys.stdout.write(json.dumps({"path": b["path"], "dist": b["dist"], "sm": scan.get("sm_variants"),
                                     "ptx": scan.get("ptx_variants"), "status": scan.get("status")}) + "\n")
    sys.stdout.write(json.dumps({k: v for k, v in facts["kernels.scan"]["value"].items() if k != "unreadable_files"}) + "\n")
