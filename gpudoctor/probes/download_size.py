"""How big the files pip would fetch are, before it fetches them (stdlib only, bounded).

pip's ``install --dry-run --report`` names each item's ``download_info.url`` but not its size
(https://pip.pypa.io/en/stable/reference/installation-report/): a ``file://`` URL (find-links, a
local index) is stat'ed, and a wheel there also gives its unpacked size from its zip directory
(what the install writes, before bytecode); an ``http(s)://`` URL is asked with one ``HEAD``
request, its ``Content-Length`` (what PyPI's files host answers), under a short deadline shared
by all the requests. Anything else — no answer in time, no length, an index that needs a login
gpudoctor does not have — is "unknown", never guessed. Credentials are never sent: a URL with
``user:password@`` is not asked (pip strips them from the report; an index that needs them says 401).
"""

from __future__ import annotations

import concurrent.futures
import os
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from typing import Dict, Iterable, Optional

HEAD_TIMEOUT = 5.0  # one request
DEADLINE = 8.0  # all of them together: the plan waits no longer for sizes
WORKERS = 8


def _local(url: str) -> Dict[str, Optional[int]]:
    path = urllib.request.url2pathname(urllib.parse.urlsplit(url).path)
    try:
        size = os.stat(path).st_size
    except OSError:
        return {"download": None, "unpacked": None}
    unpacked = None
    if path.endswith(".whl"):
        try:
            with zipfile.ZipFile(path) as wheel:
                unpacked = sum(info.file_size for info in wheel.infolist())
        except (OSError, zipfile.BadZipFile, ValueError):
            unpacked = None
    return {"download": size, "unpacked": unpacked}


def _head(url: str, timeout: float) -> Dict[str, Optional[int]]:
    request = urllib.request.Request(url, method="HEAD", headers={"User-Agent": "gpudoctor (download size)"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:  # noqa: S310 - http(s) only, checked by the caller
            length = answer.headers.get("Content-Length")
    except (OSError, ValueError, urllib.error.URLError):
        return {"download": None, "unpacked": None}
    return {"download": int(length) if length and length.isdigit() else None, "unpacked": None}


def sizes(urls: Iterable[str], deadline: float = DEADLINE, timeout: float = HEAD_TIMEOUT) -> Dict[str, Dict[str, Optional[int]]]:
    """url → {"download": bytes or None, "unpacked": bytes or None}; every URL is answered."""
    wanted = list(dict.fromkeys(u for u in urls if u))
    out: Dict[str, Dict[str, Optional[int]]] = {u: {"download": None, "unpacked": None} for u in wanted}
    remote = []
    for url in wanted:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme == "file":
            out[url] = _local(url)
        elif parts.scheme in ("http", "https") and "@" not in parts.netloc:
            remote.append(url)
    if not remote:
        return out
    until = time.monotonic() + deadline
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=min(WORKERS, len(remote)), thread_name_prefix="download-size")
    try:
        futures = {pool.submit(_head, url, min(timeout, deadline)): url for url in remote}
        try:
            for future in concurrent.futures.as_completed(futures, timeout=max(0.0, until - time.monotonic())):
                out[futures[future]] = future.result()
        except concurrent.futures.TimeoutError:
            pass  # the slow ones stay unknown
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    return out
