"""The RECORDs of the distributions on the path, as the kernel scan needs them: the shared objects
each lists, the top-level names it claims and the directories it lists files in; read together
(one wait for the disk), and on a first run read and parsed in forks too. Parses are kept in the
scan cache (probes/scancache.py) keyed by the RECORD's (size, mtime_ns, inode, device).

Standard library only and Python 3.8-compatible, like kernel_scan.py, its one user: inside the
interpreter named by ``--python`` python_stack's bootstrap serves it as ``gpudoctor.probes.dist_records``.
"""

import os
from typing import Any, Dict, List, Optional, Set, Tuple

from gpudoctor.probes import scancache as _scancache
from gpudoctor.probes import coldstart as _coldstart
from gpudoctor.probes import forks as _forks

RECORD_KIND = "record-so-2"
MAX_RECORD_BYTES = 64 << 20
RECORDS_PER_WORKER = 24  # RECORDs to read and parse for a fork to be worth it
COLD_RECORDS = 32  # RECORDs not in the scan cache: a first run, whose stats are made in threads (coldstart.stat_many)


def is_shared_object(name: str) -> bool:
    """``x.so``, ``x.cpython-311-x86_64-linux-gnu.so``, ``libcublas.so.12``, ``libnccl.so.2.21.5``."""
    if name.endswith(".so"):
        return True
    head, sep, tail = name.partition(".so.")
    return bool(sep and head and tail and all(part.isdigit() for part in tail.split(".")))


def _record_paths(text: str) -> List[str]:
    out = []
    for line in text.splitlines():
        if ".so" not in line:
            continue
        if line.startswith('"'):  # a quoted path (it has a comma): let csv read it
            import csv

            row = next(csv.reader([line]), None)
            rel = row[0] if row else ""
        else:
            rel = line.split(",", 1)[0]
        if is_shared_object(rel.rsplit("/", 1)[-1]):
            out.append(rel)
    return out


def _top(rel: str) -> str:
    first = rel.split("/", 1)[0]
    return first if "/" in rel else first.split(".", 1)[0]


def _record_dir(rel: str) -> Optional[str]:
    """The directory of a RECORD row worth checking for files RECORD does not list, or None: not
    the location itself, dist-info, __pycache__ or header trees (no shared object lives there)."""
    directory = rel.rsplit("/", 1)[0] if "/" in rel else ""
    if not directory:
        return None
    parts = directory.split("/")
    if parts[0].endswith((".dist-info", ".data")) or "__pycache__" in parts or "include" in parts:
        return None
    return directory


def record_shared_objects(dist: Dict[str, Any], cache, texts: Optional[Dict[str, Any]] = None) -> Tuple[List[str], Set[str], Dict[str, int], int]:
    """(shared objects RECORD lists, relative to the location; top-level names RECORD claims;
    directories it lists files in -> how many; RECORD's mtime_ns). ``texts``: RECORD path ->
    its bytes, the OSError, or its parse made by a fork, read beforehand by ``read_records``."""
    record = os.path.join(dist["location"], dist["meta"], "RECORD")
    key = _scancache.file_key(record)
    mtime = key[1] if key else 0
    parsed = cache.get(RECORD_KIND, record, key)
    if not _valid_parse(parsed):
        data = texts.get(record) if texts is not None else None
        if _valid_parse(data):
            parsed = data
        else:
            if data is None:
                data = next(_coldstart.read_many([record], MAX_RECORD_BYTES))[1]
            if not isinstance(data, bytes):
                return [], set(), {}, mtime
            parsed = parse_record(data)
        cache.put(RECORD_KIND, record, key, parsed)
    assert parsed is not None
    return ([str(p) for p in parsed["so"]], {str(t) for t in parsed["tops"]},
            {str(d): int(n) for d, n in parsed["dirs"].items() if isinstance(n, int)}, mtime)


def parse_record(data: bytes) -> Dict[str, Any]:
    """What the scan keeps of a RECORD: {"so": shared objects, "tops": top-level names, "dirs": directory -> files}."""
    text = data.decode("utf-8", "replace")
    tops, dirs = _record_tree(text)
    return {"so": _record_paths(text), "tops": sorted(tops), "dirs": dirs}


def _parse_records(records: List[str]) -> Dict[str, Dict[str, Any]]:
    """A share of read_records (in a fork, or here): each RECORD read and parsed; one that cannot be read is left to the caller."""
    return {record: parse_record(data) for record, data in _coldstart.read_many(records, MAX_RECORD_BYTES) if isinstance(data, bytes)}


def _valid_parse(value: Any) -> bool:
    return (isinstance(value, dict) and isinstance(value.get("so"), list) and isinstance(value.get("tops"), list)
            and isinstance(value.get("dirs"), dict))


def _record_tree(text: str) -> Tuple[Set[str], Dict[str, int]]:
    """(top-level names, directory -> files RECORD lists directly in it, parents included with 0).

    Most rows share their directory with the row before (torch's RECORD: ~16,000 rows in ~900
    directories), so a directory is judged once and its later rows only counted: what made
    parsing the ~200 RECORDs of a CUDA host cost ~0.2 s of a cold check."""
    tops: Set[str] = set()
    dirs: Dict[str, int] = {}
    skipped: Set[str] = set()  # directories _record_dir leaves out (dist-info, __pycache__, headers)
    for line in text.splitlines():
        rel = line.split(",", 1)[0]
        if rel.startswith('"'):
            rel = rel.strip('"')
        directory, sep, _ = rel.rpartition("/")
        if directory in dirs:
            dirs[directory] += 1
            continue
        if not rel or rel.startswith(("../", "/")) or directory in skipped:
            continue
        tops.add(_top(rel))
        if not sep:
            continue  # a top-level module: its name is all there is
        accepted = _record_dir(rel)
        if accepted is None:
            skipped.add(directory)
            continue
        dirs[accepted] = 1
        while "/" in accepted:  # its parents too (nvidia/cu13 holds only directories)
            accepted = accepted.rsplit("/", 1)[0]
            dirs.setdefault(accepted, 0)
    return tops, dirs


def read_records(dists: Dict[str, Dict[str, Any]], cache) -> Dict[str, Any]:
    """RECORD path -> bytes (or OSError, or its parse) of every dist-info whose parse the cache
    does not have, read together (coldstart.read_many: ~200 RECORDs cold, one wait instead of
    200). Many of them (a first run): read and parsed in forks too, in shares of about the same
    size (the ~200 RECORDs of an H200 host: ~0.1 s read, ~0.1 s parsed, one after the other)."""
    records = [os.path.join(str(d["location"]), str(d["meta"]), "RECORD") for d in dists.values()
               if d.get("location") and str(d.get("meta", "")).endswith(".dist-info")]
    # No cache file yet (a first run): the stats wait for the disk (each RECORD's directory and
    # inode), so they are made in threads (~200 on an H200 host).
    known = _coldstart.stat_many(records) if cache.status in ("empty", "off") and len(records) >= COLD_RECORDS else {}
    todo: Dict[str, int] = {}
    for record in records:
        key = _scancache.key_of(known[record]) if record in known else _scancache.file_key(record)
        if cache.get(RECORD_KIND, record, key) is None:
            todo[record] = key[0] if key else 0
    if not todo:
        return {}
    out: Dict[str, Any] = {}
    count = _coldstart.workers_for(len(todo), per_worker=RECORDS_PER_WORKER)
    if count > 1:
        import csv  # noqa: F401  (before the forks: a quoted row needs it, and a fork imports nothing)

        shares = _coldstart.split(sorted(todo), todo, count, each=4096)
        answers, _ = _forks.Shares(_parse_records, shares, keep_first=True).finish(lambda answer: isinstance(answer, dict))
        for share, parsed in zip(shares, answers):
            out.update((record, parsed[record]) for record in share if _valid_parse(parsed.get(record)))
    rest = [record for record in todo if record not in out]
    out.update(_coldstart.read_many(rest, MAX_RECORD_BYTES))
    return out
