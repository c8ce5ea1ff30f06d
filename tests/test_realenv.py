"""The real tier's cache (tests/realenv.py) without the real tier: what it does when the index cannot be
reached, and how it counts disk. Nothing here downloads anything."""

import os
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import realenv  # noqa: E402

LOCKED = ("nvidia-nonexistent==1.0 --hash=sha256:" + "0" * 64, "nvidia-nonexistent==1.0",
          "nvidia_nonexistent-1.0-py3-none-manylinux_2_27_x86_64.whl")


@pytest.fixture
def empty_cache(tmp_path, monkeypatch):
    for name in ("CACHE", "WHEELS", "SPARSE", "VENVS", "SCRATCH"):
        monkeypatch.setattr(realenv, name, tmp_path / "cache" / name.lower())
    return tmp_path / "cache"


def test_an_unreachable_index_is_a_clear_error_not_a_hang(empty_cache, monkeypatch):
    # A closed port on loopback: refused at once, for the tier's own download and for pip's fallback.
    monkeypatch.setattr(realenv, "INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", "")
    monkeypatch.setenv("PIP_FIND_LINKS", "")
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    started = time.monotonic()
    with pytest.raises(realenv.DownloadError, match="pip could not download nvidia-nonexistent==1.0 .*package index reachable"):
        realenv.sparse_forms([LOCKED])
    assert time.monotonic() - started < 120
    assert not list((empty_cache / "sparse").glob("*.whl")), "nothing half-made is left as if it were whole"


def test_disk_bytes_counts_holes_as_nothing_and_hard_links_once(tmp_path):
    sparse = tmp_path / "sparse.bin"
    with open(sparse, "wb") as handle:
        handle.write(b"x" * 4096)
        handle.truncate(64 << 20)
    os.link(sparse, tmp_path / "link.bin")
    (tmp_path / "dense.bin").write_bytes(b"y" * (1 << 20))
    used = realenv.disk_bytes(tmp_path)
    assert (1 << 20) <= used < (1 << 20) + (1 << 18)  # the dense MB, one block of the sparse file, counted once
