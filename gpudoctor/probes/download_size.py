"""How big the files pip would fetch are, before it fetches them (stdlib only, bounded).

pip's ``install --dry-run --report`` names each item's ``download_info.url`` but not its size
(https://pip.pypa.io/en/stable/reference/installation-report/): a ``file://`` URL (find-links, a
local index) is stat'ed, and a wheel there also gives its unpacked size from its zip directory
(what the install writes, before bytecode); an ``http(s)://`` URL is asked with one ``HEAD``
request, its ``Content-Length`` (what PyPI's files host answers), and a wheel's unpacked size from
its zip directory read with Range requests (the end of the file only: pip's own lazy-wheel way),
under a short deadline shared by all the requests. Anything else — no answer in time, no length, an index that needs a login
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
from typing import Dict, Iterable, List, Optional, Tuple

HEAD_TIMEOUT = 5.0  # one request
DEADLINE = 8.0  # all of them together: the plan waits no longer for sizes
WORKERS = 8
TAIL = 64 << 10  # the end of a wheel read first: its end record, and often its whole central directory
MAX_DIRECTORY = 32 << 20  # a central directory larger than this is not read (torch's is ~2 MB)
MAX_REQUESTS = 6
USER_AGENT = "gpudoctor (download size)"


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


class _Ranges:
    """A remote wheel as a read-only file, read with HTTP Range requests (as pip's own ``LazyZipOverHTTP``
    does): ``zipfile`` reads its end record and central directory, a few KB to a few MB, never the wheel."""

    def __init__(self, url: str, length: int, until: float, timeout: float):
        self.url, self.length, self.until, self.timeout = url, length, until, timeout
        self.position = 0
        self.chunks: List[Tuple[int, bytes]] = []
        self.requests = 0

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.position

    def seek(self, offset: int, whence: int = 0) -> int:
        self.position = max(0, {0: 0, 1: self.position, 2: self.length}[whence] + offset)
        return self.position

    def read(self, size: Optional[int] = -1) -> bytes:
        end = self.length if size is None or size < 0 else min(self.length, self.position + size)
        data = self._get(self.position, end) if end > self.position else b""
        self.position += len(data)
        return data

    def _get(self, start: int, end: int) -> bytes:
        for first, data in self.chunks:
            if first <= start and end <= first + len(data):
                return data[start - first:end - first]
        left = self.until - time.monotonic()
        if self.requests >= MAX_REQUESTS or left <= 0 or end - start > MAX_DIRECTORY:
            raise OSError("the wheel's directory could not be read in time")
        first = min(start, max(0, self.length - TAIL))  # the end record is read once, with the tail before it
        request = urllib.request.Request(self.url, headers={"Range": f"bytes={first}-{end - 1}", "User-Agent": USER_AGENT})
        self.requests += 1
        with urllib.request.urlopen(request, timeout=min(self.timeout, left)) as answer:  # noqa: S310 - http(s) only
            if answer.status != 206:  # no Range support: the whole wheel would come; never read it
                raise OSError("the server does not answer Range requests")
            data = answer.read(end - first + 1)
        self.chunks.append((first, data))
        return data[start - first:end - first]


def _head(url: str, timeout: float, until: float) -> Dict[str, Optional[int]]:
    request = urllib.request.Request(url, method="HEAD", headers={"User-Agent": USER_AGENT})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:  # noqa: S310 - http(s) only, checked by the caller
            length = answer.headers.get("Content-Length")
            ranges = "bytes" in str(answer.headers.get("Accept-Ranges") or "")
            where = answer.geturl()  # after redirects: the file host
    except (OSError, ValueError, urllib.error.URLError):
        return {"download": None, "unpacked": None}
    size = int(length) if length and length.isdigit() else None
    unpacked = None
    if size and ranges and urllib.parse.urlsplit(url).path.endswith(".whl"):
        try:
            with zipfile.ZipFile(_Ranges(where, size, until, timeout)) as wheel:  # type: ignore[arg-type]
                unpacked = sum(info.file_size for info in wheel.infolist())
        except (OSError, ValueError, zipfile.BadZipFile, urllib.error.URLError, EOFError):
            unpacked = None
    return {"download": size, "unpacked": unpacked}


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
        futures = {pool.submit(_head, url, min(timeout, deadline), until): url for url in remote}
        try:
            for future in concurrent.futures.as_completed(futures, timeout=max(0.0, until - time.monotonic())):
                out[futures[future]] = future.result()
        except concurrent.futures.TimeoutError:
            pass  # the slow ones stay unknown
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    return out
