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
    for name in ("CACHE", "WHEELS", "SPARSE", "TREES", "OBJECTS", "VENVS", "SCRATCH"):
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


def test_venvs_share_the_files_their_records_agree_on(empty_cache):
    """A file is hard-linked between venvs only where both RECORDs have the same row (path, hash, size):
    a script, whose row names its venv, or a file of another version stays its own."""
    site = {}
    for name, script_hash, lib_hash in (("a", "sha256=aaa", "sha256=same"), ("b", "sha256=bbb", "sha256=same")):
        venv = empty_cache / "venvs" / name
        site[name] = realenv._site(venv)
        meta = site[name] / "demo-1.0.dist-info"
        meta.mkdir(parents=True)
        (site[name] / "demo").mkdir()
        for file, data in (("demo/lib.so", b"L" * 70000), ("demo/other.so", name.encode() * 70000)):
            (site[name] / file).write_bytes(data)
        (meta / "RECORD").write_text(f"demo/lib.so,{lib_hash},70000\ndemo/other.so,sha256={name},{70000 * 1}\n"
                                     f"../../../bin/demo,{script_hash},70000\n", encoding="utf-8")
        (venv / ".complete").write_text("", encoding="utf-8")
    assert realenv._share_files(site["b"].parents[2]) == 70000
    assert os.path.samefile(site["a"] / "demo" / "lib.so", site["b"] / "demo" / "lib.so")
    assert not os.path.samefile(site["a"] / "demo" / "other.so", site["b"] / "demo" / "other.so")


def test_a_venv_whose_code_runs_never_shares_a_closures_cut_file(empty_cache):
    """A closure's library is cut (zeros where the code was) though its RECORD row is the real one:
    linking it into a venv that imports it would load zeros."""
    site = {}
    for name in ("closure-vllm0.33.0-x", "parser-vllm0.33.0-y"):
        venv = empty_cache / "venvs" / name
        site[name] = realenv._site(venv)
        (site[name] / "demo-1.0.dist-info").mkdir(parents=True)
        (site[name] / "demo").mkdir()
        (site[name] / "demo" / "lib.so").write_bytes(name[:3].encode() * 70000)
        (site[name] / "demo-1.0.dist-info" / "RECORD").write_text("demo/lib.so,sha256=same,210000\n", encoding="utf-8")
        (venv / ".complete").write_text("", encoding="utf-8")
    assert realenv._share_files(site["parser-vllm0.33.0-y"].parents[2]) == 0
    assert (site["parser-vllm0.33.0-y"] / "demo" / "lib.so").read_bytes()[:3] == b"par"
