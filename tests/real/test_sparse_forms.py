"""The real tier keeps each real wheel in its sparse form (tests/sparsewheel.py, tests/realenv.py): every
file, size, metadata and source, the GPU code of large libraries cut to what gpudoctor's readers read.
These tests hold that form to the real wheels: every cut of every wheel of every locked closure was
checked equal on the real bytes when it was made, and where the whole wheel is at hand (the engines'
own wheels, CPU torch) the installed sparse files read, through gpudoctor's readers, as the real ones."""

import io
import sys
import zipfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import realenv  # noqa: E402
import sparsewheel  # noqa: E402

from gpudoctor.probes import fatbin  # noqa: E402

pytestmark = pytest.mark.real

LOCKS = sorted(realenv.CLOSURES.glob("*.txt"))
WHOLE_BECAUSE = ("not a large compiled object", "the readers read ")


def _engine_version(lock: Path):
    engine, _, version = lock.stem.rpartition("-")
    return engine, version


@pytest.mark.parametrize("lock", LOCKS, ids=lambda p: p.stem)
def test_every_library_of_a_closure_is_cut_only_where_the_readers_agree(lock):
    engine, version = _engine_version(lock)
    items = realenv.closure_lock(version, engine)
    stubs = realenv.sparse_forms(items)
    cut = whole = real_bytes = 0
    for _, pin, filename in items:
        index = sparsewheel.read_index(stubs[filename])
        for member, entry in index["members"].items():
            assert entry["check"] == "equal", (filename, member, entry["check"])
            cut += 1
            real_bytes += entry["size"]
        for member, why in index["whole"].items():
            assert why.startswith(WHOLE_BECAUSE), (filename, member, why)
            whole += 1
    assert cut > 10, (lock.stem, cut)  # a GPU closure has dozens of large libraries
    print(f"\n{lock.stem}: {len(items)} wheels, {cut} libraries cut ({real_bytes / 1e9:.1f} GB of real bytes), {whole} large files whole")


def _check_installed(stub: Path, whole_wheel: Path, site: Path) -> int:
    """Each cut file installed under ``site`` reads, through gpudoctor's readers, as the whole wheel's."""
    compared = 0
    with zipfile.ZipFile(whole_wheel) as archive:
        for member, size, _ranges, _kept in sparsewheel.cut_files(stub):
            installed = site / member
            real = archive.read(member)
            assert installed.stat().st_size == size == len(real)
            assert installed.stat().st_blocks * 512 < size // 2, member  # holes on disk
            assert fatbin.scan(str(installed)) == fatbin.scan(str(installed), opener=lambda _p: io.BytesIO(real)), member
            assert sparsewheel.readings(installed.read_bytes()) == sparsewheel.readings(real), member
            compared += 1
    return compared


def test_an_engine_installed_from_its_sparse_form_reads_as_its_real_wheel():
    """vLLM 0.33.0: the closure venv's vllm/*.so (linked from its tree) against the whole wheel (the one
    engine wheel the cache keeps whole, for this comparison)."""
    python = realenv.release_venv("0.33.0")
    whole = realenv.wheel("vllm", "0.33.0")
    site = python.parent.parent / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    assert _check_installed(realenv.SPARSE / whole.name, whole, site) >= 3


def test_torch_cut_keeps_every_symbol_table(tmp_path):
    """CPU torch (the whole wheel the tier imports): libtorch_cpu's symbol tables, which extension checks
    read, survive the cut byte for byte."""
    whole = realenv.wheel("torch", "2.13.0")
    stub = tmp_path / whole.name
    index = sparsewheel.make(whole, stub)
    libs = [m for m in index["members"] if m.endswith("libtorch_cpu.so")]
    assert libs, sorted(index["members"])
    with zipfile.ZipFile(whole) as archive:
        real = archive.read(libs[0])
    [(member, size, ranges, kept)] = [f for f in sparsewheel.cut_files(stub) if f[0] == libs[0]]
    target = tmp_path / "libtorch_cpu.so"
    sparsewheel.write_sparse(target, size, ranges, kept)
    readings = sparsewheel.readings(target.read_bytes())
    assert readings == sparsewheel.readings(real) and ".dynsym" in readings and ".gnu.version_r" in readings
