"""Issue 29: download sizes for the plan, and room on the disk before a stack change (fast tier).

Real files, a real file system and a real refused connection; a real full disk (a tmpfs) and a real
PyPI wheel's size are tests/real/test_real_disk_full.py's and tests/real/test_real_fix.py's.
"""

from __future__ import annotations

import errno
import http.server
import os
import re
import threading
import time
import zipfile
from pathlib import Path

from gpudoctor import stack_space
from gpudoctor.probes import download_size

from fakes.pip_venvs import build_wheel


def test_a_local_wheel_has_its_download_and_unpacked_size(tmp_path):
    files = {"pkg/__init__.py": "X = 1\n" * 1000, "pkg/data.txt": "y" * 5000}
    wheel = build_wheel(tmp_path, "pkg", "1.0", files)
    found = download_size.sizes([wheel.as_uri(), (tmp_path / "gone-1.0-py3-none-any.whl").as_uri()])
    [first, missing] = found.values()
    assert first["download"] == wheel.stat().st_size
    unpacked = first["unpacked"]
    assert unpacked is not None and unpacked > sum(len(t) for t in files.values())  # + METADATA, WHEEL, RECORD
    assert unpacked < 12000  # not the file system's blocks: the bytes written
    assert missing == {"download": None, "unpacked": None}


class _WheelServer(http.server.BaseHTTPRequestHandler):
    """Serves one wheel: HEAD with its length; GET with a Range (206) where ``ranges`` is on, else the
    whole file with 200 (a server without Range support), counting the bytes it sent."""

    body = b""
    ranges = True
    sent = 0

    def log_message(self, *args):  # quiet
        pass

    def do_HEAD(self):
        self.send_response(200)
        self.send_header("Content-Length", str(len(self.body)))
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()

    def do_GET(self):
        wanted = re.match(r"bytes=(\d+)-(\d+)", self.headers.get("Range") or "")
        if wanted and type(self).ranges:
            first, last = int(wanted.group(1)), int(wanted.group(2))
            part = self.body[first:last + 1]
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {first}-{last}/{len(self.body)}")
        else:
            part = self.body
            self.send_response(200)
        self.send_header("Content-Length", str(len(part)))
        self.end_headers()
        try:
            self.wfile.write(part)
            type(self).sent += len(part)
        except OSError:
            pass  # the client closed: it did not want the whole wheel


def test_a_remote_wheel_is_sized_by_head_and_its_directory_by_range_requests(tmp_path):
    # 3,000 files: a central directory (~200 KB) larger than the 64 KiB tail read first, so a second Range request
    files = {f"pkg/module_{n:05d}.py": f"X = {n}\n" * 100 for n in range(3000)}
    wheel = build_wheel(tmp_path, "pkg", "1.0", files)
    _WheelServer.body = wheel.read_bytes()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _WheelServer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/pkg-1.0-py3-none-any.whl"
    try:
        with zipfile.ZipFile(wheel) as whole:
            unpacked = sum(i.file_size for i in whole.infolist())
        _WheelServer.ranges, _WheelServer.sent = True, 0
        assert download_size.sizes([url])[url] == {"download": len(_WheelServer.body), "unpacked": unpacked}
        directory = len(_WheelServer.body) - min(zipfile.ZipFile(wheel).infolist()[-1].header_offset, len(_WheelServer.body))
        assert 64 << 10 < _WheelServer.sent <= (64 << 10) + directory + 4096 < len(_WheelServer.body) // 3  # never the wheel
        _WheelServer.ranges = False  # says Accept-Ranges, answers 200 with the whole file: not read
        assert download_size.sizes([url])[url] == {"download": len(_WheelServer.body), "unpacked": None}
    finally:
        server.shutdown()
        server.server_close()


def test_an_unreachable_or_credentialed_url_is_unknown_and_quick():
    started = time.monotonic()
    found = download_size.sizes(["http://127.0.0.1:9/simple/x/x-1.0-py3-none-any.whl",  # connection refused
                                 "https://user:secret@pypi.example.invalid/x-1.0.whl",  # never asked: it carries a password
                                 "ftp://example.invalid/x.whl"], deadline=3.0)
    assert all(v == {"download": None, "unpacked": None} for v in found.values()) and len(found) == 3
    assert time.monotonic() - started < 3.5
    assert stack_space.shown_url("https://user:secret@host/simple/x.whl") == "https://host/simple/x.whl"


def test_sizes_are_described_with_the_unknown_ones_counted():
    items = [{"name": "lark", "version": "1.2.2", "download_bytes": 111036, "unpacked_bytes": 350066},
             {"name": "torch", "version": "2.13.0", "download_bytes": None, "unpacked_bytes": None},
             {"name": "ext", "version": "1.1", "download_bytes": 3 << 30, "unpacked_bytes": None}]
    assert stack_space.describe(items) == ("lark 1.2.2 (108.4 KiB, 341.9 KiB unpacked), torch 2.13.0 (size unknown), ext 1.1 (3.0 GiB); "
                                           "download 3.0 GiB in total (1 size unknown)")
    assert stack_space.totals(items) == {"download_bytes": 111036 + (3 << 30), "unknown": 1, "needs_at_least_bytes": 350066 + (3 << 30)}
    assert stack_space.describe(items[1:2]) == "torch 2.13.0 (size unknown); download size unknown"
    assert stack_space.describe([]) == "nothing to download"


def test_a_change_that_cannot_fit_is_refused_with_numbers(tmp_path):
    site = tmp_path / "site-packages"
    site.mkdir()
    huge = [{"name": "big", "version": "1", "download_bytes": 1 << 40, "unpacked_bytes": 1 << 61}]
    problem = stack_space.room_problem(str(site), huge)
    free = stack_space.free_bytes(str(site))
    assert free is not None and problem.startswith(f"not enough free space: {stack_space.mount_of(str(site))} (the file system of "
                                                   f"site-packages, {site}) has {stack_space.human(free)} free")
    assert "big 1 needs at least 2147483648.0 GiB unpacked: " in problem and problem.endswith("nothing was changed; free some space there, then run fix again")
    small = [{"name": "small", "version": "1", "download_bytes": 10, "unpacked_bytes": 20}]
    assert stack_space.room_problem(str(site), small) == ""
    unknown = [{"name": "u", "version": "1", "download_bytes": None, "unpacked_bytes": None}]
    assert stack_space.room_problem(str(site), unknown) == ""  # nothing known: nothing refused


def test_mount_point_and_disk_full_words(tmp_path):
    assert stack_space.mount_of("/proc/self") == "/proc"
    assert os.path.ismount(stack_space.mount_of(str(tmp_path)))
    assert stack_space.is_disk_full("ERROR: Could not install packages due to an OSError: [Errno 28] No space left on device: '/x'")
    assert not stack_space.is_disk_full("ERROR: No matching distribution found for ext!=1.0")
    words = stack_space.stash_refusal(str(tmp_path / "lib" / "site-packages"), ["a", "b"], OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
    assert words.startswith(f"the disk is full: the 2 file(s) to be replaced could not be kept aside in {tmp_path / 'lib'} "
                            "(No space left on device; ") and words.endswith("nothing was changed; free some space there, then run fix again")
    other = stack_space.stash_refusal(str(Path("/x/site-packages")), [], OSError(errno.EACCES, "Permission denied"))
    assert other == "the file(s) to be replaced could not be kept aside in /x (Permission denied): nothing was changed"
