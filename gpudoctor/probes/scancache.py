"""A persistent cache of what was read from files, keyed by the file's identity.

Standard library only and Python 3.8-compatible: it runs in the doctor's process or inside
the interpreter named by ``--python`` (python_stack's bootstrap serves it as ``gpudoctor.probes.scancache``),
so one cache serves every run and every ``--python`` target of a user.

Why: reading the fatbin headers of every CUDA binary on the path (hundreds of files in a
stock image with the nvidia-* wheels) and vLLM's source for its kernel gates costs a few
hundred milliseconds cold; a warm ``check`` must stay inside its budget. An entry is reused
only when the file still has the same (path, size, mtime_ns, inode, device): a reinstall,
an edit or a copy changes at least one of them.

Where: ``$GPUDOCTOR_CACHE_DIR``, else ``$XDG_CACHE_HOME/gpudoctor``, else
``~/.cache/gpudoctor`` (XDG Base Directory spec); ``GPUDOCTOR_CACHE=0`` turns it off. One file
per environment (``scan-v1-<crc32 of sys.prefix>.json``, ``file_name``): a run loads only the
entries of the environment it inspects, not those of every venv ever checked (one shared file of
20,000 entries cost ~0.7 s and 40 MB to load on every check). The ``MAX_SHARDS`` most recently
written are kept; the single file of older versions (``scan-v1.json``) is removed. When a file is
written, the entries of paths that no longer exist are left out of it.

Safety: the file is read with a size cap and ``O_NOFOLLOW``, must be owned by this user and
carry our format name and version, and each entry is type-checked (the caller validates the
value again); anything else is ignored and rewritten, never a crash. Writes go to a temp
file in the same directory and ``os.replace`` it (readers see the old or the new file, never
half of one), under a non-blocking ``flock`` merged with what another run wrote meanwhile; a
run that cannot take the lock just skips saving.
"""

from __future__ import annotations

import json
import os
import stat
import sys
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

FORMAT = "gpudoctor-scan-cache"
VERSION = 1
LEGACY_FILENAME = "scan-v1.json"  # one file for every environment, before shards
LOCK_FILENAME = "scan-v1.lock"
MAX_SHARDS = 64
MAX_FILE_BYTES = 32 << 20
MAX_ENTRIES = 20_000
LOCK_WAIT_S = 0.2

Key = List[int]


def cache_dir(environ: Optional[Dict[str, str]] = None) -> Optional[str]:
    env = os.environ if environ is None else environ
    if env.get("GPUDOCTOR_CACHE", "1").strip().lower() in ("0", "off", "no", "false"):
        return None
    if env.get("GPUDOCTOR_CACHE_DIR"):
        return env["GPUDOCTOR_CACHE_DIR"]
    base = env.get("XDG_CACHE_HOME") or ""
    if not os.path.isabs(base):  # the spec: a relative value is invalid and ignored
        home = env.get("HOME") or os.path.expanduser("~")
        if not home or not os.path.isabs(home):
            return None
        base = os.path.join(home, ".cache")
    return os.path.join(base, "gpudoctor")


def file_name(scope: Optional[str] = None) -> str:
    """The cache file of an environment (``scope``: its sys.prefix; default: this interpreter's)."""
    import zlib

    where = sys.prefix if scope is None else scope
    return "scan-v1-%08x.json" % zlib.crc32(where.encode("utf-8", "surrogateescape"))


def file_key(path: str) -> Optional[Key]:
    """(size, mtime_ns, inode, device) of a regular file, None if it is not one."""
    try:
        return key_of(os.stat(path))
    except (OSError, ValueError):
        return None


def key_of(st: Optional[os.stat_result]) -> Optional[Key]:
    """``file_key`` of a stat already made (None: the stat failed, or not a regular file)."""
    if st is None or not stat.S_ISREG(st.st_mode):
        return None
    return [st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev]


class ScanCache:
    """``get(kind, path, key)`` / ``put(kind, path, key, value)``, then ``save()`` once."""

    def __init__(self, directory: Optional[str], scope: Optional[str] = None) -> None:
        self.directory = directory
        self.filename = file_name(scope)
        self.entries: Dict[str, Dict[str, Any]] = {}
        self.changed: Dict[str, Dict[str, Any]] = {}
        self.status = "off" if directory is None else "empty"
        self.detail = ""
        self.hits = 0
        self.misses = 0
        if directory:
            self.entries = self._load(os.path.join(directory, self.filename))

    # --- reading ----------------------------------------------------------------------------
    def _load(self, path: str) -> Dict[str, Dict[str, Any]]:
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
        except FileNotFoundError:
            return {}
        except OSError as exc:
            self.status, self.detail = "ignored", f"cannot open: {exc.strerror or exc}"
            return {}
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or (hasattr(os, "geteuid") and st.st_uid != os.geteuid()):
                self.status, self.detail = "ignored", "not a regular file owned by this user"
                return {}
            if st.st_size > MAX_FILE_BYTES:
                self.status, self.detail = "ignored", f"{st.st_size} bytes (limit {MAX_FILE_BYTES})"
                return {}
            chunks = []
            while True:
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    break
                chunks.append(chunk)
        except OSError as exc:
            self.status, self.detail = "ignored", f"cannot read: {exc.strerror or exc}"
            return {}
        finally:
            os.close(fd)
        entries = parse(b"".join(chunks))
        if entries is None:
            self.status, self.detail = "ignored", "not a gpudoctor scan cache of this version (will be rewritten)"
            self.changed["__rewrite__"] = {}
            return {}
        self.status = "loaded"
        return entries

    def get(self, kind: str, path: str, key: Optional[Key]) -> Optional[Dict[str, Any]]:
        if key is None or self.directory is None:
            return None
        entry = self.entries.get(kind + "\0" + path)
        if entry is not None and entry.get("key") == key:
            self.hits += 1
            return entry["value"]
        self.misses += 1
        return None

    def put(self, kind: str, path: str, key: Optional[Key], value: Dict[str, Any]) -> None:
        if key is None or self.directory is None:
            return
        entry = {"key": list(key), "value": value, "used": int(time.time())}
        self.entries[kind + "\0" + path] = entry
        self.changed[kind + "\0" + path] = entry

    # --- writing ----------------------------------------------------------------------------
    def save(self) -> str:
        """Write what changed (merged with the file as it is now). Returns what happened."""
        if self.directory is None or not self.changed:
            return "unchanged"
        try:
            return self._save()
        except Exception as exc:  # a full disk or a read-only home must not cost the findings
            return f"not saved: {type(exc).__name__}: {exc}"

    def _save(self) -> str:
        os.makedirs(self.directory, mode=0o700, exist_ok=True)
        lock_path = os.path.join(self.directory, LOCK_FILENAME)
        lock = os.open(lock_path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0), 0o600)
        try:
            if not _lock(lock):
                return "skipped: another run is writing the cache"
            target = os.path.join(self.directory, self.filename)
            current = ScanCache.__new__(ScanCache)
            current.status, current.detail, current.changed = "empty", "", {}
            merged = current._load(target)
            # Taken at once: another thread (the kernel scan runs beside the RECORD checks) may
            # put entries meanwhile; those wait for the next save.
            changed, self.changed = self.changed, {}
            merged.update({k: v for k, v in changed.items() if k != "__rewrite__"})
            # Entries of files that are gone (an uninstalled or upgraded package, a deleted checkout or
            # venv) would otherwise stay until MAX_ENTRIES, loaded by every later run: one lstat each,
            # only when the file is written anyway.
            merged = {k: v for k, v in merged.items() if k in changed or os.path.lexists(k.partition("\0")[2])}
            if len(merged) > MAX_ENTRIES:  # keep the most recently used
                keep = sorted(merged.items(), key=lambda kv: kv[1].get("used", 0), reverse=True)[:MAX_ENTRIES]
                merged = dict(keep)
            data = json.dumps({"format": FORMAT, "version": VERSION, "entries": merged},
                              separators=(",", ":")).encode("utf-8")
            import tempfile

            fd, tmp = tempfile.mkstemp(prefix=".scan-", suffix=".tmp", dir=self.directory)
            try:
                with os.fdopen(fd, "wb") as handle:
                    handle.write(data)
                os.replace(tmp, target)
            except BaseException:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
                changed.update(self.changed)
                self.changed = changed  # not written: kept for the next try
                raise
            _prune(self.directory, self.filename)
            return f"saved {len(merged)} entries"
        finally:
            os.close(lock)


def _prune(directory: str, keep: str) -> None:
    """Remove the older-version file and all but the MAX_SHARDS newest environment files."""
    try:
        os.unlink(os.path.join(directory, LEGACY_FILENAME))
    except OSError:
        pass
    try:
        shards = [e for e in os.scandir(directory) if e.name.startswith("scan-v1-") and e.name.endswith(".json")]
        if len(shards) <= MAX_SHARDS:
            return
        shards.sort(key=lambda e: e.stat(follow_symlinks=False).st_mtime_ns, reverse=True)
        for entry in shards[MAX_SHARDS:]:
            if entry.name != keep:
                os.unlink(entry.path)
    except OSError:
        pass


def _lock(fd: int) -> bool:
    try:
        import fcntl
    except ImportError:  # not POSIX: the atomic rename alone still keeps the file whole
        return True
    deadline = time.monotonic() + LOCK_WAIT_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        except OSError:
            return True  # a filesystem without locks


def parse(data: bytes) -> Optional[Dict[str, Dict[str, Any]]]:
    """The entries of a cache file's bytes; None when it is not ours (or corrupt)."""
    try:
        doc = json.loads(data.decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or doc.get("version") != VERSION:
        return None
    raw = doc.get("entries")
    if not isinstance(raw, dict):
        return None
    entries: Dict[str, Dict[str, Any]] = {}
    # Per entry, the checks are written out (no generator, no new dict): a warm check on an H200
    # host loads ~4,000 entries. JSON gives exact ints, so ``type(v) is int`` is "an int, not a bool".
    for name, entry in raw.items():
        if type(name) is not str or "\0" not in name or type(entry) is not dict or type(entry.get("value")) is not dict:
            continue
        key = entry.get("key")
        if type(key) is not list or len(key) != 4 or not (type(key[0]) is int and type(key[1]) is int
                                                          and type(key[2]) is int and type(key[3]) is int):
            continue
        if len(entry) != 3 or type(entry.get("used")) is not int:
            entry = {"key": key, "value": entry["value"], "used": entry["used"] if type(entry.get("used")) is int else 0}
        entries[name] = entry
    return entries


_shared: Dict[str, Tuple[Optional[str], "ScanCache"]] = {}
_shared_lock = threading.Lock()


def shared(environ: Optional[Dict[str, str]] = None) -> ScanCache:
    """One cache object per process and directory (the kernel scan and the vLLM reader share it).
    Under a lock: the kernel scan's thread and the RECORD checks ask for it at the same moment,
    and two objects would each keep half of what was found."""
    directory = cache_dir(environ)
    key = directory or ""
    with _shared_lock:
        if key not in _shared:
            _shared[key] = (directory, ScanCache(directory))
        return _shared[key][1]


def forget() -> None:
    """Drop the in-process cache objects (tests; a long-lived process that wants fresh reads)."""
    _shared.clear()


if __name__ == "__main__":  # python -m gpudoctor.probes.scancache: where the cache is and what it holds
    where = cache_dir()
    cache = ScanCache(where)
    sys.stdout.write(json.dumps({"dir": where, "status": cache.status, "detail": cache.detail,
                                 "entries": len(cache.entries)}) + "\n")
