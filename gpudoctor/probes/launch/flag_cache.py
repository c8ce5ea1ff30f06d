"""The disk side of the flag-definition caches (vllm_args_cache.py, sglang_args_cache.py): where an
entry lives, a file's identity, reading an entry safely and writing one atomically.

An entry is one small JSON file per engine tree in the scan cache's directory (``GPUDOCTOR_CACHE_DIR``
…, ``GPUDOCTOR_CACHE=0`` turns it off). It is trusted only when it is ours (owner, no symlink, size
bound, format and version) and its identity (what each cache keys on) is the one asked for; anything
else is ignored and rewritten. Files changed in the last RACY_S seconds are not trusted: their mtime
may not move on the next write within the clock's granularity, so nothing is saved then.
"""

from __future__ import annotations

import json
import os
import time
import zlib
from typing import Any, Dict, Iterable, List, Optional

RACY_S = 2.0


def stat_key(path: str) -> Optional[List[int]]:
    """(size, mtime_ns, inode) of a file, None when it cannot be read: a pip install, an upgrade or an
    edit changes at least one."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return [st.st_size, st.st_mtime_ns, st.st_ino]


def entry_path(prefix: str, package: str, environ: Optional[Dict[str, str]]) -> Optional[str]:
    """The cache file of ``package`` (its real path), or None when caching is off."""
    from gpudoctor.probes.scancache import cache_dir

    directory = cache_dir(environ)
    if directory is None:
        return None
    where = os.path.realpath(package).encode("utf-8", "surrogateescape")
    return os.path.join(directory, "%s-%08x.json" % (prefix, zlib.crc32(where)))


def read_entry(path: str, fmt: str, version: int, max_bytes: int) -> Optional[Dict[str, Any]]:
    """The entry at ``path`` when it is ours and of this format and version, else None. Never raises."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if st.st_uid != os.geteuid() or st.st_size > max_bytes:
            return None
        data = json.loads(os.read(fd, max_bytes + 1))
        if not isinstance(data, dict) or data.get("format") != fmt or data.get("version") != version:
            return None
        return data
    except Exception:  # a foreign or damaged file: parse afresh (and rewrite it)
        return None
    finally:
        os.close(fd)


def too_fresh(keys: Iterable[Optional[List[int]]]) -> bool:
    """Whether a file was written within RACY_S seconds (its next write may keep the same mtime)."""
    now = time.time_ns()
    return any(key and now - key[1] < RACY_S * 1e9 for key in keys)


def write_entry(path: str, text: str, prefix: str) -> None:
    """Write ``text`` to ``path`` atomically (a temporary file renamed over it). Raises OSError."""
    directory = os.path.dirname(path)
    os.makedirs(directory, mode=0o700, exist_ok=True)
    import tempfile

    fd, tmp = tempfile.mkstemp(prefix="." + prefix + "-", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
