"""relocations.py: the addresses lld leaves to the loader, found in .rela.dyn without reading it all,
and the cold prefetch's chains started from them (jax-cuda13-pjrt 0.12.1's xla_cuda_plugin.so: 59
waves -> 7 measured on the real file; its 53 records are all 0)."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from gpudoctor.probes import coldstart, elf, fatbin, relocations
from fakes.fatbin_files import _many_containers

PAGE = 4096


def _open(path: Path):
    reader = elf.Reader(open(path, "rb", buffering=0))
    return reader, fatbin.read_elf(reader)


def _records(path: Path):
    """(address of each record's data pointer, the container address it should hold)."""
    reader, parsed = _open(path)
    segment = parsed.find(fatbin.WRAPPER_SECTION)
    fat = parsed.find(fatbin.FATBIN_SECTION)
    pointers = [segment.addr + base + 8 for base in range(0, segment.size, 24)]
    containers, offset = [], fat.offset
    while offset < fat.offset + fat.size:
        _, _, hsize, fsize = fatbin.CONTAINER_HEADER.unpack(reader.read(offset, 16))
        containers.append(0x100000 + offset)
        offset += hsize + fsize
    reader.handle.close()
    return pointers, containers


@pytest.mark.parametrize("before", [0, 70, 20_000, 300_000])
def test_the_search_finds_every_records_address_in_a_few_steps(tmp_path, before):
    lib = _many_containers(tmp_path, containers=40, archs=3, wrappers=True, lld=True, relocations_before=before)
    pointers, containers = _records(lib)
    reader, parsed = _open(lib)
    steps = relocations.search(reader, parsed, min(pointers), max(pointers) + 8)
    asked = []
    with pytest.raises(StopIteration) as done:
        while True:
            asked.append(next(steps))
    assert done.value.value == dict(zip(pointers, containers))
    assert len(asked) <= 4  # 300,000 relocations: three steps of the search and the last read
    read = sum(length for step in asked for _, length in step)
    assert read < 12_000, read  # not the table's 7.2 MB


def test_a_table_in_no_order_gives_no_wrong_answer(tmp_path, asked):
    """Hints only: whatever the search makes of an unsorted table, the scan's answer is the same."""
    lib = _many_containers(tmp_path, containers=40, archs=3, wrappers=True, lld=True, shuffled=True)
    before = fatbin.scan(str(lib)).to_json()
    coldstart.prefetch([str(lib)])
    results, _ = coldstart.scan_many([str(lib)])
    assert results[str(lib)][0].to_json() == before
    assert before["containers"] == 40 and before["entries"] == 120


def test_the_prefetch_starts_every_container_at_once_from_the_relocations(tmp_path, asked, monkeypatch):
    lib = _many_containers(tmp_path, containers=60, archs=3, wrappers=True, lld=True)
    stats = coldstart.prefetch([str(lib)])
    assert stats["waves"] <= 3 + 2, stats  # one step per entry of a container, not one per container
    monkeypatch.setattr(relocations, "run_together", lambda searches, ask: [{} for _ in searches])
    assert coldstart.prefetch([str(lib)])["waves"] >= 60  # without them: container after container
    result = fatbin.scan(str(lib))
    assert result.status == "ok" and result.containers == 60 and result.entries == 180


def test_searches_of_many_files_take_their_steps_together(tmp_path):
    """Each round asks the disk for every file's next step before any of them is read: four files
    cost the waits of one."""
    libs = []
    for i in range(4):
        (tmp_path / str(i)).mkdir()
        libs.append(_many_containers(tmp_path / str(i), containers=10, archs=2, wrappers=True, lld=True, relocations_before=20_000 + i))
    searches = []
    for lib in libs:
        reader, parsed = _open(lib)
        pointers, _ = _records(lib)
        searches.append((reader, relocations.search(reader, parsed, min(pointers), max(pointers) + 8)))
    order = []
    answers = relocations.run_together(searches, lambda reader, offset, length: order.append(reader))
    assert [len(answer) for answer in answers] == [10, 10, 10, 10]
    blocks = [reader for k, reader in enumerate(order) if k == 0 or order[k - 1] is not reader]
    readers = [reader for reader, _ in searches]
    assert blocks == readers * (len(blocks) // 4) and len(blocks) >= 8  # round after round, every file in each


@pytest.fixture
def asked(monkeypatch):
    real = os.posix_fadvise
    pages = set()

    def spy(fd, offset, length, advice):
        pages.update(range(offset // PAGE, (offset + max(length, 1) - 1) // PAGE + 1))
        return real(fd, offset, length, advice)

    monkeypatch.setattr(os, "posix_fadvise", spy)
    return pages


def test_not_x86_64_or_aarch64_and_elf32_give_nothing(tmp_path):
    lib = _many_containers(tmp_path, containers=4, archs=1, wrappers=True, lld=True)
    data = bytearray(lib.read_bytes())
    struct.pack_into("<H", data, 18, 20)  # EM_PPC
    other = tmp_path / "ppc.so"
    other.write_bytes(bytes(data))
    reader, parsed = _open(other)
    steps = relocations.search(reader, parsed, 0, 1 << 40)
    with pytest.raises(StopIteration) as done:
        next(steps)
    assert done.value.value == {}
