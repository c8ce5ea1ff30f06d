"""Room for a stack change: what pip would download and write, against the free space where it writes.

Sizes come from pip's own resolution (``--report``: each item's URL) through
gpudoctor/probes/download_size.py: a wheel's download size where it is known, and its unpacked size
(the sum of its files, read from the zip directory) where the wheel is a local file. What a change
needs on site-packages' file system is at least the unpacked size (or, where only the download size
is known, that: a wheel's files never take less than its compressed bytes), and nothing is freed while
pip works (pip and gpudoctor both keep what is replaced until the change is done). A change that
cannot fit is refused with the numbers before anything is touched; one that might fit goes ahead,
and if pip then runs out of space (``[Errno 28] No space left on device``) the user is told that the
disk is full, where, and how much was free, once everything is put back.
"""

from __future__ import annotations

import errno
import os
import tempfile
import urllib.parse
from typing import Any, Dict, List, Optional, Sequence

from gpudoctor.probes import download_size

DISK_FULL = ("No space left on device", "[Errno 28]", "Disk quota exceeded", "[Errno 122]")


def human(nbytes: Optional[int]) -> str:
    if nbytes is None:
        return "size unknown"
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes} B"


def free_bytes(path: str) -> Optional[int]:
    """Bytes this user may still write on ``path``'s file system (root may use the reserved blocks too)."""
    try:
        info = os.statvfs(path)
    except OSError:
        return None
    blocks = info.f_bfree if os.geteuid() == 0 else info.f_bavail
    return blocks * info.f_frsize


def mount_of(path: str) -> str:
    """The mount point of the file system ``path`` is on (the folder a user knows it by)."""
    path = os.path.realpath(path)
    try:
        device = os.stat(path).st_dev
    except OSError:
        return path
    while path != os.sep:
        parent = os.path.dirname(path)
        try:
            if os.stat(parent).st_dev != device:
                return path
        except OSError:
            return path
        path = parent
    return path


def shown_url(url: str) -> str:
    """The URL without user:password (pip's report has none; a find-links URL might)."""
    parts = urllib.parse.urlsplit(url)
    if "@" in parts.netloc:
        parts = parts._replace(netloc=parts.netloc.rsplit("@", 1)[1])
    return urllib.parse.urlunsplit(parts)


def measure(items: Sequence[Dict[str, Any]], deadline: float = download_size.DEADLINE) -> List[Dict[str, Any]]:
    """Each resolved item ({name, version, url}) with its ``download_bytes`` and ``unpacked_bytes`` (None: unknown)."""
    found = download_size.sizes([str(i.get("url") or "") for i in items], deadline=deadline)
    out = []
    for item in items:
        url = str(item.get("url") or "")
        size = found.get(url) or {"download": None, "unpacked": None}
        out.append({"name": item.get("name"), "version": item.get("version"), "url": shown_url(url),
                    "download_bytes": size["download"], "unpacked_bytes": size["unpacked"]})
    return out


def totals(measured: Sequence[Dict[str, Any]]) -> Dict[str, Any]:
    """The download in total (the known sizes), how many are unknown, and the least the install writes."""
    known = [m["download_bytes"] for m in measured if m.get("download_bytes") is not None]
    least = sum((m["unpacked_bytes"] if m.get("unpacked_bytes") is not None else m.get("download_bytes") or 0) for m in measured)
    return {"download_bytes": sum(known), "unknown": len(measured) - len(known), "needs_at_least_bytes": least}


def describe(measured: Sequence[Dict[str, Any]]) -> str:
    """``lark 1.2.2 (108.4 KiB, 341.9 KiB unpacked), torch 2.13.0 (size unknown); download 108.4 KiB in total
    (1 size unknown)``: what the plan and the apply say."""
    if not measured:
        return "nothing to download"
    each = ", ".join(f"{m['name']} {m['version']} ({human(m.get('download_bytes'))}"
                     + (f", {human(m['unpacked_bytes'])} unpacked" if m.get("unpacked_bytes") is not None else "") + ")"
                     for m in measured)
    total = totals(measured)
    unknown = f" ({total['unknown']} size{'s' if total['unknown'] > 1 else ''} unknown)" if total["unknown"] else ""
    if total["unknown"] == len(measured):
        return f"{each}; download size unknown"
    return f"{each}; download {human(total['download_bytes'])} in total{unknown}"


def where_pip_writes(site: str) -> Dict[str, str]:
    """The file systems a change writes to: site-packages' (the install) and pip's temporary folder (the download)."""
    places = {"site-packages": site}
    temporary = tempfile.gettempdir()
    try:
        if os.stat(temporary).st_dev != os.stat(site).st_dev:
            places["pip's temporary folder"] = temporary
    except OSError:
        pass
    return places


def room_problem(site: str, measured: Sequence[Dict[str, Any]], stash_bytes: int = 0) -> str:
    """Why the change cannot fit ("" when it may): the least it writes against the free space, in numbers.
    ``stash_bytes``: what gpudoctor itself writes beside site-packages first (the stash's manifest)."""
    total = totals(measured)
    needs = {"site-packages": total["needs_at_least_bytes"], "pip's temporary folder": total["download_bytes"]}
    for what, path in where_pip_writes(site).items():
        free = free_bytes(path)
        need = needs[what]
        if free is not None and need and free < need + (stash_bytes if what == "site-packages" else 0):
            how = "to download" if what != "site-packages" else (
                "unpacked" if all(m.get("unpacked_bytes") is not None for m in measured) else "(the download size: the unpacked one is unknown)")
            return (f"not enough free space: {mount_of(path)} (the file system of {what}, {path}) has {human(free)} free, and "
                    f"{_names(measured)} {_need(measured)} at least {human(need)} {how}"
                    f"{f', plus {human(stash_bytes)} for the record gpudoctor keeps to undo it' if what == 'site-packages' and stash_bytes else ''}: "
                    f"nothing was changed; free some space there, then run fix again")
    return ""


def _names(measured: Sequence[Dict[str, Any]]) -> str:
    return ", ".join(f"{m.get('name')} {m.get('version')}" for m in measured)


def _need(measured: Sequence[Dict[str, Any]]) -> str:
    return "needs" if len(measured) == 1 else "need"


def is_disk_full(said: str) -> bool:
    return any(mark in said for mark in DISK_FULL)


def disk_full_words(site: str, measured: Sequence[Dict[str, Any]], free_before: Dict[str, Optional[int]]) -> str:
    """What to tell the user when pip ran out of space: which file system, how much was free, how much was needed."""
    total = totals(measured)
    places = "; ".join(f"{mount_of(path)} (the file system of {what}, {path}) had {human(free_before.get(what))} free before the change"
                       for what, path in where_pip_writes(site).items())
    need = (f"; {_names(measured)} {_need(measured)} at least "
            f"{human(total['needs_at_least_bytes'])} unpacked (download {human(total['download_bytes'])}), plus bytecode"
            if total["needs_at_least_bytes"] else "")
    return f"the disk is full: pip stopped with \"No space left on device\". {places}{need}. Free some space there, then run fix again"


def stash_refusal(site: str, files: Sequence[str], exc: OSError) -> str:
    """Why the files could not be kept aside, in words (the change is then not made)."""
    where = os.path.dirname(site.rstrip(os.sep)) or site
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return (f"the disk is full: the {len(files)} file(s) to be replaced could not be kept aside in {where} "
                f"({exc.strerror}; {mount_of(where)} has {human(free_bytes(where))} free): "
                "nothing was changed; free some space there, then run fix again")
    return f"the file(s) to be replaced could not be kept aside in {where} ({exc.strerror or exc}): nothing was changed"
