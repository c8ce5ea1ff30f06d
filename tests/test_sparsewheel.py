"""The sparse form of a wheel (tests/sparsewheel.py), on real compiled binaries: what the real tier keeps
instead of GBs of GPU code must read, for every reader gpudoctor has, exactly as the real file does."""

import sys
import zipfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import sparsewheel  # noqa: E402

from gpudoctor.probes import fatbin  # noqa: E402

FIXTURES = Path(__file__).resolve().parent / "fixtures"
# nvcc output with fatbins of every layout the scan knows (plain, compressed, family, rdc, concatenated, lz4),
# and torch-linked extensions with their .dynsym (built on the H200 and here).
BINARIES = sorted(p for d in ("fatbin", "ground_truth/h200", "torchabi", "loader") for p in (FIXTURES / d).glob("*.so*"))


@pytest.mark.parametrize("path", BINARIES, ids=lambda p: p.name)
def test_a_cut_binary_reads_as_the_real_one(path):
    data = path.read_bytes()
    ranges, why = sparsewheel.cut(data, min_size=0)
    if ranges is None:  # a file whose readers read most of it stays whole, and says why
        assert why.startswith("the readers read"), why
        return
    assert why == "equal"
    assert sum(e - s for s, e in ranges) < len(data)
    assert sparsewheel.readings(data, ranges) == sparsewheel.readings(data)


def test_the_check_sees_a_cut_that_loses_what_a_reader_reads():
    """The check can fail: drop the range the fatbin scan read last, or the .dynsym, and it differs."""
    data = (FIXTURES / "ground_truth" / "h200" / "libk_sm80_sm90_ptx90.so").read_bytes()
    ranges = sparsewheel.kept_ranges(data)
    assert sparsewheel.readings(data, ranges) == sparsewheel.readings(data)
    for dropped in (ranges[-1], max(ranges, key=lambda r: r[1] - r[0] if r[0] else 0)):
        assert sparsewheel.readings(data, [r for r in ranges if r != dropped]) != sparsewheel.readings(data), dropped


def _wheel(tmp_path, members):
    path = tmp_path / "demo-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


def test_stub_cut_and_materialize_give_the_real_sizes_with_holes(tmp_path, monkeypatch):
    monkeypatch.setattr(sparsewheel, "MIN_SIZE", 1 << 20)
    library = (FIXTURES / "fatbin" / "libvariants.so").read_bytes()
    big = library + bytes(3 << 20)  # past MIN_SIZE: what the readers never read is zeros, as in GPU code
    program = b"\x7fELF" + bytes(60) + b"x" * (2 << 20)  # no section table to read: kept whole
    archive_bytes = sparsewheel.AR_MAGIC + b"z" * (2 << 20)  # a static library: no reader opens it
    wheel = _wheel(tmp_path, {"demo/lib/libbig.so": big, "demo/__init__.py": b"x = 1\n", "demo/tool": program,
                              "demo/lib/libstatic.a": archive_bytes, "demo-1.0.data/data/bin/tool": big,
                              "demo-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n",
                              "demo-1.0.dist-info/RECORD": b""})
    stub = tmp_path / "stubs" / wheel.name
    stub.parent.mkdir()
    index = sparsewheel.make(wheel, stub)
    assert sorted(index["members"]) == ["demo/lib/libbig.so", "demo/lib/libstatic.a"]
    assert {entry["check"] for entry in index["members"].values()} == {"equal"}
    assert index["whole"] == {"demo/tool": "not a large compiled object"}
    with zipfile.ZipFile(stub) as archive:  # the stub: the cut file emptied, the rest as it was
        assert archive.read("demo/lib/libbig.so") == b"" and archive.read("demo/tool") == program
        assert archive.read("demo/__init__.py") == b"x = 1\n"
        assert archive.read("demo-1.0.data/data/bin/tool") == big  # installed outside site-packages: whole
    assert stub.stat().st_size + sparsewheel.cut_path(stub).stat().st_size < len(big) // 4
    site = tmp_path / "site"
    (site / "demo" / "lib").mkdir(parents=True)
    (site / "demo" / "lib" / "libbig.so").write_bytes(b"")  # what pip installs from the stub
    (site / "demo" / "lib" / "libstatic.a").write_bytes(b"")
    assert sparsewheel.materialize(stub, site) == len(big) + len(archive_bytes)
    assert (site / "demo" / "lib" / "libstatic.a").read_bytes()[:4096] == archive_bytes[:4096]
    installed = site / "demo" / "lib" / "libbig.so"
    assert installed.stat().st_size == len(big)
    assert installed.stat().st_blocks * 512 < len(big) // 2  # holes, not written zeros
    assert fatbin.scan(str(installed)) == fatbin.scan(str(FIXTURES / "fatbin" / "libvariants.so"))
    # The ordinary sparse wheel (for carrying a layout to a machine without internet) holds the same bytes.
    out = tmp_path / "sparse.whl"
    sparsewheel.sparse_wheel(stub, out)
    with zipfile.ZipFile(out) as archive:
        assert archive.read("demo/lib/libbig.so") == installed.read_bytes()


def test_materialize_refuses_a_tree_pip_did_not_install_from_the_stub(tmp_path, monkeypatch):
    monkeypatch.setattr(sparsewheel, "MIN_SIZE", 1 << 20)
    big = (FIXTURES / "fatbin" / "libvariants.so").read_bytes() + bytes(2 << 20)
    wheel = _wheel(tmp_path, {"demo/libbig.so": big})
    stub = tmp_path / "stubs" / wheel.name
    stub.parent.mkdir()
    sparsewheel.make(wheel, stub)
    (tmp_path / "site" / "demo").mkdir(parents=True)
    (tmp_path / "site" / "demo" / "libbig.so").write_bytes(b"not the stub's")
    with pytest.raises(ValueError, match="not the emptied file"):
        sparsewheel.materialize(stub, tmp_path / "site")


def test_a_wheel_in_memory_and_on_disk_give_the_same_sparse_form(tmp_path, monkeypatch):
    monkeypatch.setattr(sparsewheel, "MIN_SIZE", 1 << 20)
    big = (FIXTURES / "fatbin" / "libconcat.so").read_bytes() + bytes(2 << 20)
    wheel = _wheel(tmp_path, {"demo/libbig.so": big})
    a, b = tmp_path / "a" / wheel.name, tmp_path / "b" / wheel.name
    a.parent.mkdir()
    b.parent.mkdir()
    assert sparsewheel.make(wheel, a) == sparsewheel.make(wheel.read_bytes(), b)
    assert list(sparsewheel.cut_files(a)) == list(sparsewheel.cut_files(b))
    assert a.read_bytes() == b.read_bytes()
