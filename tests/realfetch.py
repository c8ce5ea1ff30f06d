"""Downloads for the real test tier (tests/realenv.py): a wheel straight from the index into memory, its
hash checked as it arrives, pip's own download as the fallback, and a progress line on the terminal.

Design constraints: stdlib only; every wait bounded (PIP_TIMEOUT_S a socket operation, 2 retries,
DOWNLOAD_DEADLINE_S for pip): an unreachable index is a DownloadError with pip's words, never a hang.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

PIP_TIMEOUT_S = 30  # per socket operation, with 2 retries: an unreachable index fails in minutes, not hours
DOWNLOAD_DEADLINE_S = 1800
_LOCK = threading.Lock()


class DownloadError(RuntimeError):
    """pip could not fetch a wheel (index unreachable, no such file, hash mismatch): its words."""


def canonical(name: str) -> str:
    """PEP 503 normalised name."""
    return re.sub(r"[-_.]+", "-", name).lower()


class Progress:
    """One line on the terminal (``/dev/tty``, past pytest's capture) while wheels download and are
    cut; nothing at all without a terminal (CI)."""

    def __init__(self, total: int, what: str) -> None:
        self.total, self.what, self.done, self.bytes = total, what, 0, 0
        self.started = time.monotonic()
        try:
            self.tty: Optional[int] = os.open("/dev/tty", os.O_WRONLY | os.O_NOCTTY) if total else None
        except OSError:
            self.tty = None

    def step(self, size: int) -> None:
        with _LOCK:
            self.done += 1
            self.bytes += size
            line = (f"\r  real tier: {self.what}: {self.done}/{self.total} wheels, {self.bytes / 1e9:.2f} GB "
                    f"downloaded and cut, {time.monotonic() - self.started:.0f} s ")
        if self.tty is not None:
            try:
                os.write(self.tty, line.encode())
            except OSError:
                pass

    def close(self) -> None:
        if self.tty is not None:
            try:
                os.write(self.tty, b"\r\x1b[K")
                os.close(self.tty)
            except OSError:
                pass


def pip_download(reqs: Sequence[str], into: Path, hashes: bool) -> None:
    """``pip download --no-deps`` of ``reqs`` into ``into`` (``--require-hashes`` when they carry hashes),
    with no pip cache (the tier keeps its own) and bounded waits. DownloadError with pip's words."""
    into.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check",
               "--no-cache-dir", "--timeout", str(PIP_TIMEOUT_S), "--retries", "2", "-d", str(into)]
    listing = None
    if hashes:
        listing = into / f".requirements-{os.getpid()}-{threading.get_ident()}.txt"
        listing.write_text("\n".join(reqs) + "\n", encoding="utf-8")
        command += ["--require-hashes", "-r", str(listing)]
    else:
        command += list(reqs)
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=DOWNLOAD_DEADLINE_S)
    except subprocess.TimeoutExpired:
        raise DownloadError(f"pip download of {', '.join(r.split()[0] for r in reqs)} took over {DOWNLOAD_DEADLINE_S} s")
    finally:
        if listing is not None:
            listing.unlink()
    if done.returncode != 0:
        names = ", ".join(r.split()[0] for r in reqs[:5]) + (f" and {len(reqs) - 5} more" if len(reqs) > 5 else "")
        raise DownloadError(f"pip could not download {names} (exit {done.returncode}); is the package index reachable? "
                            f"pip said:\n{(done.stderr or done.stdout)[-2000:]}")


def https_context():
    import ssl

    bundle = os.environ.get("PIP_CERT") or os.environ.get("SSL_CERT_FILE")
    return ssl.create_default_context(cafile=bundle) if bundle and os.path.isfile(bundle) else ssl.create_default_context()


def index_urls(index_url: str, name: str) -> Dict[str, str]:
    """file name -> URL of every file of a project on the index (PEP 691 JSON)."""
    import json
    import urllib.parse
    import urllib.request

    page = f"{index_url}/{canonical(name)}/"
    request = urllib.request.Request(page, headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(request, timeout=PIP_TIMEOUT_S, context=https_context()) as answer:
        doc = json.loads(answer.read(64 << 20))
    return {f["filename"]: urllib.parse.urljoin(page, f["url"]) for f in doc.get("files", [])}


def download_bytes(url: str, sha256: str) -> bytes:
    """The file at ``url`` in memory, its sha256 checked while it arrives."""
    import urllib.request

    digest = hashlib.sha256()
    with urllib.request.urlopen(url, timeout=PIP_TIMEOUT_S, context=https_context()) as answer:
        length = int(answer.headers.get("Content-Length") or 0)
        buffer = bytearray(length) if length else bytearray()
        view, pos = memoryview(buffer), 0
        while True:
            if length:
                if pos == length:
                    break
                count = answer.readinto(view[pos:pos + (1 << 22)])
                if not count:
                    break
                digest.update(view[pos:pos + count])
                pos += count
            else:
                chunk = answer.read(1 << 22)
                if not chunk:
                    break
                digest.update(chunk)
                buffer += chunk
                pos += len(chunk)
    view.release()
    if length and pos != length:
        raise DownloadError(f"{url}: the download ended at {pos} of {length} bytes")
    if digest.hexdigest() != sha256:
        raise DownloadError(f"{url}: sha256 {digest.hexdigest()} is not the lock's {sha256}")
    return bytes(buffer) if not length else buffer  # type: ignore[return-value]


def pip_resolve(reqs: Sequence[str], scratch: Path, no_deps: bool = False) -> List[Tuple[str, str, str]]:
    """What ``pip install REQS`` would install now, as lock items (requirement with its hash, name==version,
    wheel file name): pip's own resolver in a dry run (``--report``), which reads each wheel's metadata
    from the index, not the wheel. For a release whose own requirements do not resolve (vLLM 0.34.0 pins
    an unpublished flashinfer-python), the part that does, resolved as the lock would have it."""
    import json

    scratch.mkdir(parents=True, exist_ok=True)
    report = scratch / f"report-{os.getpid()}-{threading.get_ident()}.json"
    command = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "-q", "--only-binary=:all:",
               "--disable-pip-version-check", "--timeout", str(PIP_TIMEOUT_S), "--retries", "2", "--report", str(report),
               *(["--no-deps"] if no_deps else []), *reqs]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=DOWNLOAD_DEADLINE_S)
        if done.returncode != 0:
            raise DownloadError(f"pip could not resolve {', '.join(reqs[:5])} (exit {done.returncode}); is the package index "
                                f"reachable? pip said:\n{(done.stderr or done.stdout)[-2000:]}")
        entries = json.loads(report.read_text(encoding="utf-8")).get("install", [])
    except subprocess.TimeoutExpired:
        raise DownloadError(f"pip took over {DOWNLOAD_DEADLINE_S} s to resolve {', '.join(reqs[:5])}")
    finally:
        report.unlink(missing_ok=True)
    items = []
    for entry in entries:
        info = entry.get("download_info", {})
        digest = info.get("archive_info", {}).get("hashes", {}).get("sha256") or info.get("archive_info", {}).get("hash", "").partition("=")[2]
        pin = f"{entry['metadata']['name']}=={entry['metadata']['version']}"
        items.append((f"{pin} --hash=sha256:{digest}", pin, info["url"].rsplit("/", 1)[-1].split("#", 1)[0]))
    return items
