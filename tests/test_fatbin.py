"""The fatbin reader against cuobjdump's ground truth, and against everything else a file can be.

Real inputs: the three libraries built by nvcc 13.0 on the H200 (tests/fixtures/ground_truth/h200,
cuobjdump's lists in capture.log) and the ones in tests/fixtures/fatbin built by nvcc 13.5 from
the PyPI wheels ('a'/'f' variants, Blackwell headers, fatbinary -concat, LZ4, -rdc, -dlto; their
cuobjdump lists in cuobjdump.txt, rebuilt by build.sh). Generated inputs: ELF files laid out here
byte by byte around real fatbin bytes (ELF32, relocated or sparse sections, garbage), truncated
copies, random bytes and random mutations (hypothesis). No mocks: the only injected piece is a
file opener that counts the bytes read.
"""

from __future__ import annotations

import ast
import glob
import io
import os
import re
import shutil
import struct
import subprocess
import sys
import sysconfig
import tempfile
from collections import Counter
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpudoctor.probes import fatbin
from gpudoctor.knowledge.gpus import kernel_support
from gpudoctor.probes.fatbin import FatbinScan, scan
from fakes.elf_builder import COMPRESSED, FIXTURES, H200, LOCAL, PTX90, SM86, Sec, _containers, _fatbin_bytes, _section, build_elf, elf_bytes, write_chunks

STATUSES = {"ok", "absent", "error", "no_permission", "not_elf", "not_supported"}
MIB = 1 << 20


# --- ground truth: cuobjdump's lists -------------------------------------------------------

_LINE = re.compile(r"^(ELF|PTX) file\s+\d+: (\S+?)\.\d+\.(sm_\w+?)\.(?:cubin|ptx)$", re.M)


def _arch_key(name: str) -> Tuple[int, str]:
    digits = re.sub(r"\D", "", name)
    return int(digits), name


def _cuobjdump(text: str) -> Dict[str, Dict[str, Counter]]:
    """{file stem: {"elf": Counter(sm_90a=1), "ptx": Counter(sm_90=1)}} from cuobjdump -lelf -lptx."""
    out: Dict[str, Dict[str, Counter]] = {}
    for kind, stem, name in _LINE.findall(text):
        out.setdefault(stem, {"elf": Counter(), "ptx": Counter()})[kind.lower()][name] += 1
    return out


def _h200_truth() -> Dict[str, Dict[str, Counter]]:
    log = (H200 / "capture.log").read_text(encoding="utf-8")
    return _cuobjdump(log.split("===== fatbin", 1)[1].split("\n===== ", 1)[0])


def _local_truth() -> Dict[str, Dict[str, Counter]]:
    text = (LOCAL / "cuobjdump.txt").read_text(encoding="utf-8")
    return _cuobjdump(text)


def _local_file(stem: str) -> Path:
    for candidate in (LOCAL / f"{stem}.so", LOCAL / f"{stem}.o"):
        if candidate.exists():
            return candidate
    raise AssertionError(f"no fixture file for {stem}")


def _assert_matches_cuobjdump(result: FatbinScan, truth: Dict[str, Counter]) -> None:
    assert result.status == "ok", result.detail
    assert result.sm_variants == sorted(truth["elf"], key=_arch_key)
    assert result.sm == sorted({int(re.sub(r"\D", "", n)) for n in truth["elf"]})
    assert result.ptx_variants == ["compute_" + n[3:] for n in sorted(truth["ptx"], key=_arch_key)]
    assert result.ptx == sorted({int(re.sub(r"\D", "", n)) for n in truth["ptx"]})
    ours_elf = {n: c for n, c in result.counts.items() if n.startswith("sm_")}
    ours_ptx = {"sm_" + n[len("compute_"):]: c for n, c in result.counts.items() if n.startswith("compute_")}
    assert ours_elf == dict(truth["elf"])
    assert ours_ptx == dict(truth["ptx"])
    listed = sum(truth["elf"].values()) + sum(truth["ptx"].values())
    lto = sum(c for n, c in result.counts.items() if n.startswith("lto_"))
    assert result.entries == listed + lto  # cuobjdump -lelf/-lptx does not list LTO-IR


def test_ground_truth_files_are_all_here():
    assert sorted(_h200_truth()) == ["libk_compressed", "libk_sm80_sm90_ptx90", "libk_sm86"]
    assert sorted(_local_truth()) == ["klto", "libconcat", "libfamily", "liblz4", "librdc", "libvariants"]


@pytest.mark.parametrize("stem", ["libk_compressed", "libk_sm80_sm90_ptx90", "libk_sm86"])
def test_h200_libraries_match_cuobjdump(stem):
    _assert_matches_cuobjdump(scan(str(H200 / f"{stem}.so")), _h200_truth()[stem])


@pytest.mark.parametrize("stem", ["klto", "libconcat", "libfamily", "liblz4", "librdc", "libvariants"])
def test_nvcc_13_5_fixtures_match_cuobjdump(stem):
    _assert_matches_cuobjdump(scan(str(_local_file(stem))), _local_truth()[stem])


def test_h200_libraries_in_numbers():
    a = scan(str(PTX90))
    assert (a.sm, a.sm_variants, a.ptx, a.ptx_variants) == ([80, 90], ["sm_80", "sm_90"], [90], ["compute_90"])
    assert a.entries == 5 and a.counts == {"compute_90": 1, "sm_80": 2, "sm_90": 2}  # 4 ELF + 1 PTX
    assert a.compressed == 1  # nvcc 13 compresses PTX by default: its entry has flags 0x8011 (zstd)
    assert a.containers == 2 and a.ptx_isa == ["9.0"]  # nvcc 13.0 writes PTX ISA 9.0
    assert a.sections == [".nv_fatbin"] and a.relocatable == 0
    b = scan(str(SM86))
    assert (b.sm, b.sm_variants, b.ptx, b.entries, b.compressed) == ([86], ["sm_86"], [], 2, 0)
    c = scan(str(COMPRESSED))
    assert (c.sm, c.sm_variants, c.ptx, c.entries, c.compressed) == ([80, 90], ["sm_80", "sm_90"], [], 4, 4)


def test_arch_specific_and_family_variants():
    v = scan(str(LOCAL / "libvariants.so"))
    assert v.sm_variants == ["sm_90", "sm_90a", "sm_100a", "sm_103a", "sm_120", "sm_121a"]
    assert v.sm == [90, 100, 103, 120, 121]
    assert v.ptx_variants == ["compute_90", "compute_90a", "compute_103a"] and v.ptx == [90, 103]
    assert v.ptx_isa == ["9.5"]  # nvcc 13.5
    f = scan(str(LOCAL / "libfamily.so"))
    # cuobjdump names an sm_100f cubin sm_100 (same code) but keeps the 'f' of the PTX.
    assert f.sm_variants == ["sm_80", "sm_100", "sm_120"]
    assert f.ptx_variants == ["compute_100f", "compute_120f"]


def test_concatenated_lz4_rdc_and_lto_layouts():
    concat = scan(str(LOCAL / "libconcat.so"))
    assert concat.sm_variants == ["sm_90a", "sm_100a", "sm_103", "sm_120"]  # sm_103f prints as sm_103
    assert concat.ptx_variants == ["compute_100a", "compute_120"]
    assert concat.entries == 6 and concat.compressed == 5  # the sm_90a cubin is stored plain
    lz4 = scan(str(LOCAL / "liblz4.so"))
    assert lz4.compressed == lz4.entries == 3  # flag 0x2000 (LZ4, -compress-mode=speed)
    rdc = scan(str(LOCAL / "librdc.so"))
    assert rdc.sections == [".nv_fatbin", "__nv_relfatbin"]
    assert rdc.sm_variants == ["sm_80", "sm_90"] and rdc.ptx == []  # the device link drops the PTX
    assert rdc.relocatable == 3  # __nv_relfatbin: sm_80, compute_80, sm_90 (cuobjdump -all lists them)
    lto = scan(str(LOCAL / "klto.o"))
    assert lto.sections == ["__nv_relfatbin"] and lto.sm == [80] and lto.lto == [90]


# --- test-side ELF/fatbin helpers, independent of the module under test ----------------------

def _entry_headers(blob: bytes) -> List[bytes]:
    headers = []
    for container in _containers(blob):
        pos = 16
        while pos < len(container):
            _, _, ehsize, size = struct.unpack_from("<HHIQ", container, pos)
            headers.append(container[pos:pos + ehsize])
            pos += ehsize + size
    return headers


class CountingFile(io.RawIOBase):
    """A real file whose reads are counted (the opener tests inject)."""

    def __init__(self, path: str, counter: Dict[str, int]) -> None:
        self._f = open(path, "rb", buffering=0)
        self._counter = counter

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._f.seek(offset, whence)

    def read(self, size: int = -1) -> bytes:
        data = self._f.read(size)
        self._counter["bytes"] += len(data)
        self._counter["reads"] += 1
        return data

    def close(self) -> None:
        self._f.close()
        super().close()


def counting_scan(path: Path) -> Tuple[FatbinScan, Dict[str, int]]:
    counter = {"bytes": 0, "reads": 0}
    result = scan(str(path), opener=lambda p: CountingFile(p, counter))
    return result, counter


# --- header layout facts the module relies on, checked on the real bytes ---------------------

def test_header_layout_of_the_h200_fixture():
    offset, size = _section(PTX90, b".nv_fatbin")
    assert (offset, size) == (0x8E990, 0x29B0)  # ground_truth/README.md
    blob = _fatbin_bytes(PTX90)
    assert blob[:4] == bytes.fromhex("50ed55ba")
    magic, version, hsize, fsize = struct.unpack_from("<IHHQ", blob, 0)
    assert (magic, version, hsize, fsize) == (0xBA55ED50, 1, 16, 0xC40)
    kinds = [(h[0], struct.unpack_from("<I", h, 0x1C)[0], struct.unpack_from("<Q", h, 0x28)[0]) for h in _entry_headers(blob)]
    assert kinds == [(2, 80, 0x11), (2, 90, 0x11), (2, 80, 0x11), (1, 90, 0x8011), (2, 90, 0x11)]


def test_extension_length_rule_matches_every_real_header_size():
    """The rule used to step through -concat member tables gives each plain entry's own size."""
    seen = set()
    for path in [PTX90, SM86, COMPRESSED, LOCAL / "libvariants.so", LOCAL / "libfamily.so", LOCAL / "liblz4.so"]:
        for header in _entry_headers(_fatbin_bytes(path)):
            ehsize = struct.unpack_from("<I", header, 4)[0]
            assert fatbin._extension_size(header, 0) == ehsize, (path.name, header.hex())
            seen.add(ehsize)
    assert {64, 80, 112, 120} <= seen  # plain, PTX, sm_100+ cubins (two extension lengths)


def test_variant_bits_are_not_in_the_cubin_e_flags():
    """Why the 'a' bit is read from the entry header: sm_90 and sm_90a cubins share e_flags."""
    blob = _fatbin_bytes(LOCAL / "libvariants.so")
    pos, seen = 16, {}
    while pos < len(blob):
        kind, _, ehsize, size = struct.unpack_from("<HHIQ", blob, pos)
        arch, = struct.unpack_from("<I", blob, pos + 0x1C)
        flags, = struct.unpack_from("<Q", blob, pos + 0x28)
        payload = blob[pos + ehsize:pos + ehsize + 64]
        if kind == 2 and arch == 90 and payload[:4] == b"\x7fELF":
            seen[bool(flags & 0x100000)] = struct.unpack_from("<I", payload, 0x30)[0]
        pos += ehsize + size
    assert set(seen) == {False, True} and seen[False] == seen[True]


# --- which code runs where: knowledge.gpus.kernel_support on what the reader found ------------------
def runs_on(result, cc):
    support = kernel_support(result.sm_variants or result.sm, result.ptx_variants or result.ptx, f"{cc[0]}.{cc[1]}")
    return support.runs, support.how


JIT = " (JIT-compiled by the driver)"


@pytest.mark.parametrize("cc, ok, how", [
    ((8, 0), True, "sm_80 cubin"),
    ((8, 6), True, "sm_80 cubin"),
    ((8, 9), True, "sm_80 cubin"),
    ((9, 0), True, "sm_90 cubin"),
    ((10, 0), True, "PTX compute_90" + JIT),
    ((12, 0), True, "PTX compute_90" + JIT),
    ((7, 5), False, "no cubin for this major and no PTX at or below it"),
])
def test_runs_on_sm80_sm90_ptx90(cc, ok, how):
    assert runs_on(scan(str(PTX90)), cc) == (ok, how)


@pytest.mark.parametrize("cc, ok", [((8, 6), True), ((8, 9), True), ((8, 0), False), ((9, 0), False), ((12, 0), False)])
def test_runs_on_sm86_only(cc, ok):
    got_ok, how = runs_on(scan(str(SM86)), cc)
    assert got_ok is ok
    assert how == "sm_86 cubin" if ok else "no PTX" in how


@pytest.mark.parametrize("path, cc, ok, how", [
    ("libvariants.so", (9, 0), True, "sm_90 cubin"),
    ("libvariants.so", (10, 0), True, "sm_100a cubin"),
    ("libvariants.so", (10, 3), True, "sm_103a cubin"),
    ("libvariants.so", (12, 1), True, "sm_121a cubin"),
    ("libvariants.so", (11, 0), True, "PTX compute_90" + JIT),  # compute_103a is 10.3-only
    ("libvariants.so", (8, 9), False, None),
    ("libfamily.so", (10, 3), True, "sm_100 cubin"),
    ("libfamily.so", (12, 1), True, "sm_120 cubin"),
    ("libfamily.so", (8, 6), True, "sm_80 cubin"),
    ("libfamily.so", (11, 0), False, None),  # 'f' PTX stays inside its family
    ("liblz4.so", (9, 0), True, "sm_90a cubin"),
    ("liblz4.so", (10, 0), True, "PTX compute_80" + JIT),  # sm_90a runs on 9.0 only
])
def test_runs_on_arch_specific_and_family_code(path, cc, ok, how):
    got_ok, got_how = runs_on(scan(str(LOCAL / path)), cc)
    assert (got_ok, got_how if how else None) == (ok, how)


def test_runs_on_replayed_and_synthetic_scans():
    only_a = FatbinScan(sm=[90], sm_variants=["sm_90a"], ptx=[90], ptx_variants=["compute_90a"])
    assert runs_on(only_a, (9, 0)) == (True, "sm_90a cubin")
    assert runs_on(only_a, (10, 0))[0] is False
    family_ptx = FatbinScan(ptx=[100], ptx_variants=["compute_100f"])
    assert runs_on(family_ptx, (10, 3)) == (True, "PTX compute_100" + JIT)
    assert runs_on(family_ptx, (12, 0))[0] is False
    plain = FatbinScan(sm=[75, 80])  # a replay that kept only the arch list
    assert runs_on(plain, (8, 6)) == (True, "sm_80 cubin")
    replay = FatbinScan.from_json(scan(str(PTX90)).to_json())
    assert runs_on(replay, (10, 0)) == (True, "PTX compute_90" + JIT)


@pytest.mark.parametrize("cc", ["9", "x.0", None, "8.10.1", "", "90"])
def test_kernel_support_rejects_bad_compute_capability(cc):
    support = kernel_support(["sm_80"], ["compute_90"], cc)
    assert support.runs is False and "unknown compute capability" in support.how


def test_runs_on_without_gpu_code():
    assert runs_on(scan("/bin/sh" if os.path.exists("/bin/sh") else sys.executable), (9, 0))[0] is False
    assert runs_on(FatbinScan(status="ok"), (9, 0))[0] is False


# --- JSON -----------------------------------------------------------------------------------

def test_json_round_trip_and_fact_status():
    result = scan(str(LOCAL / "libvariants.so"))
    data = result.to_json()
    assert "bytes_read" not in data and "counts" not in data
    back = FatbinScan.from_json(data)
    assert back.to_json() == data
    assert FatbinScan.from_json("garbage").status == "error"
    assert FatbinScan.from_json({"status": "ok", "sm": ["x"], "entries": "5"}).sm == []
    assert FatbinScan(status="not_elf").fact_status() == "error"
    assert FatbinScan(status="absent").fact_status() == "absent"


# --- whatever a path can be --------------------------------------------------------------------

def test_not_elf_empty_directory_missing(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("hello\n")
    assert (scan(str(text)).status, scan(str(text)).detail) == ("not_elf", "not an ELF file")
    empty = tmp_path / "empty.so"
    empty.write_bytes(b"")
    assert (scan(str(empty)).status, scan(str(empty)).detail) == ("not_elf", "empty file")
    d = scan(str(tmp_path))
    assert d.status == "error" and "is a directory" in d.detail
    missing = scan(str(tmp_path / "nope.so"))
    assert missing.status == "error" and "No such file" in missing.detail
    assert scan("bad\0path").status == "error"


def test_symlink_loop_and_fifo(tmp_path):
    a, b = tmp_path / "a.so", tmp_path / "b.so"
    os.symlink(b, a)
    os.symlink(a, b)
    loop = scan(str(a))
    assert loop.status == "error" and "symbolic links" in loop.detail.lower()
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    piped = scan(str(fifo))  # must not block on open()
    assert piped.status == "error" and "not a regular file" in piped.detail
    link = tmp_path / "link.so"
    os.symlink(PTX90, link)
    assert scan(str(link)).sm == [80, 90]


def _python_for(uid: int) -> Optional[str]:
    for candidate in (sys.executable, "/usr/bin/python3", shutil.which("python3")):
        try:
            if candidate and subprocess.run([candidate, "-c", "pass"], user=uid, group=uid,
                                            stderr=subprocess.DEVNULL, timeout=60).returncode == 0:
                return candidate
        except (OSError, subprocess.SubprocessError):  # e.g. an interpreter under /root
            continue
    return None


def test_unreadable_file(tmp_path):
    """chmod 000. Root reads it anyway, so as root the scan runs in a child process as nobody
    (uid 65534), from a copy of the module and the two it imports, run on their own: the
    stdlib-only script form (gpudoctor/probes/ holding only those three, as python_stack's child does)."""
    if os.geteuid() != 0:
        locked = tmp_path / "locked.so"
        shutil.copy(PTX90, locked)
        locked.chmod(0)
        result = scan(str(locked))
        assert result.status == "no_permission" and "Permission denied" in result.detail
        return
    work = Path(tempfile.mkdtemp(prefix="gpudoctor-fatbin-"))
    try:
        work.chmod(0o755)
        package = work / "gpudoctor" / "probes"
        package.mkdir(parents=True)
        for init in (work / "gpudoctor" / "__init__.py", package / "__init__.py"):
            init.write_text("")
            init.parent.chmod(0o755)
        shutil.copy(Path(fatbin.__file__), package / "fatbin.py")
        shutil.copy(Path(fatbin.__file__).with_name("elf.py"), package / "elf.py")  # the ELF reader it uses
        shutil.copy(Path(fatbin.__file__).with_name("fatbin_result.py"), package / "fatbin_result.py")  # and its result type
        (work / "fatbin_probe.py").write_text("import runpy, sys\nsys.path.insert(0, sys.argv.pop(1))\n"
                                              "runpy.run_module('gpudoctor.probes.fatbin', run_name='__main__')\n")
        locked = work / "locked.so"
        shutil.copy(PTX90, locked)
        locked.chmod(0)
        readable = work / "open.so"
        shutil.copy(PTX90, readable)
        readable.chmod(0o644)
        python = _python_for(65534)
        if python is None:
            pytest.skip("no Python interpreter that uid 65534 may run")
        proc = subprocess.run([python, "-I", str(work / "fatbin_probe.py"), str(work), str(locked), str(readable)],
                              user=65534, group=65534, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              universal_newlines=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        lines = [__import__("json").loads(line) for line in proc.stdout.splitlines()]
        assert lines[0]["status"] == "no_permission" and "Permission denied" in lines[0]["detail"]
        assert lines[1]["status"] == "ok" and lines[1]["sm"] == [80, 90]
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _stdlib_extension() -> Optional[str]:
    found = glob.glob(os.path.join(sysconfig.get_paths()["platstdlib"], "lib-dynload", "_json*.so"))
    return found[0] if found else None


def test_elf_files_without_a_fatbin_are_absent():
    paths = [p for p in ("/bin/ls", sys.executable, _stdlib_extension()) if p and os.path.exists(p)]
    assert paths
    for path in paths:
        result = scan(path)
        assert result.status == "absent", (path, result.detail)
        assert "not a CUDA binary" in result.detail and result.sm == [] and result.entries == 0


def test_big_endian_unknown_class_and_short_header(tmp_path):
    blob = _fatbin_bytes(PTX90)
    big = write_chunks(tmp_path / "big.so", *build_elf([Sec(b".nv_fatbin", blob)], big=True))
    result = scan(str(big))
    assert result.status == "not_supported" and "big-endian" in result.detail
    odd = bytearray(elf_bytes([Sec(b".nv_fatbin", blob)]))
    odd[4] = 3
    (tmp_path / "odd.so").write_bytes(bytes(odd))
    assert scan(str(tmp_path / "odd.so")).status == "error"
    (tmp_path / "short.so").write_bytes(b"\x7fELF\x02\x01\x01")
    assert scan(str(tmp_path / "short.so")).status == "error"


# --- generated ELF files around real fatbin bytes -----------------------------------------------

def test_elf32_and_extended_section_numbering(tmp_path):
    blob = _fatbin_bytes(PTX90)
    reference = scan(str(PTX90)).to_json()
    for name, kw in [("elf32.so", {"is64": False}), ("ext.so", {"extended": True}),
                     ("ext32.so", {"is64": False, "extended": True})]:
        path = write_chunks(tmp_path / name, *build_elf([Sec(b".text", b"\x90" * 100), Sec(b".nv_fatbin", blob)], **kw))
        assert scan(str(path)).to_json() == reference, name


def test_cut_section_name_table_is_an_error_not_absent(tmp_path):
    """Without the names nothing would be found: that must not read as 'not a CUDA binary'."""
    data = bytearray(elf_bytes([Sec(b".nv_fatbin", _fatbin_bytes(SM86))]))
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    strtab = shoff + 2 * 64  # [0] NULL, [1] .nv_fatbin, [2] .shstrtab
    struct.pack_into("<Q", data, strtab + 0x18, len(data) - 4)  # sh_offset: runs past the end
    (tmp_path / "names.so").write_bytes(bytes(data))
    result = scan(str(tmp_path / "names.so"))
    assert result.status == "error" and "section name table" in result.detail


def test_section_without_data_and_empty_section(tmp_path):
    nobits = write_chunks(tmp_path / "dbg.so", *build_elf([Sec(b".nv_fatbin", sh_type=8, size=0x29B0)]))
    result = scan(str(nobits))
    assert result.status == "error" and "SHT_NOBITS" in result.detail
    empty = write_chunks(tmp_path / "empty.so", *build_elf([Sec(b".nv_fatbin", b"")]))
    result = scan(str(empty))
    assert result.status == "error" and "holds no fatbin entries" in result.detail
    zeros = write_chunks(tmp_path / "zeros.so", *build_elf([Sec(b".nv_fatbin", bytes(4096))]))
    result = scan(str(zeros))
    assert result.status == "error" and "no fatbin container" in result.detail


def test_padding_between_containers_is_skipped(tmp_path):
    parts = _containers(_fatbin_bytes(PTX90))
    blob = bytes(24) + parts[0] + bytes(40) + parts[1] + bytes(32)
    path = write_chunks(tmp_path / "pad.so", *build_elf([Sec(b".nv_fatbin", blob)]))
    result = scan(str(path))
    assert result.status == "ok", result.detail
    assert result.sm_variants == ["sm_80", "sm_90"] and result.entries == 5
    assert "skipped 24 bytes" in result.detail and "skipped 40 bytes" in result.detail
    assert "32 zero bytes at the end" in result.detail
    junk = write_chunks(tmp_path / "junk.so", *build_elf([Sec(b".nv_fatbin", parts[0] + b"\xff" * 24 + parts[1])]))
    result = scan(str(junk))
    assert result.status == "ok" and result.entries == 5  # non-zero junk is skipped too ...
    tail = write_chunks(tmp_path / "tail.so", *build_elf([Sec(b".nv_fatbin", parts[0] + parts[1] + b"\xff" * 24)]))
    result = scan(str(tail))
    assert result.status == "error" and "not a fatbin container" in result.detail  # ... but not at the end


def test_corrupt_headers(tmp_path):
    parts = _containers(_fatbin_bytes(PTX90))
    cases = {}
    bad_ehsize = bytearray(parts[0])
    struct.pack_into("<I", bad_ehsize, 16 + 4, 8)  # entry header size < 64
    cases["ehsize"] = bytes(bad_ehsize) + parts[1]
    overrun = bytearray(parts[0])
    struct.pack_into("<Q", overrun, 16 + 8, 1 << 40)  # payload larger than the container
    cases["payload"] = bytes(overrun) + parts[1]
    big_container = bytearray(parts[0])
    struct.pack_into("<Q", big_container, 8, 1 << 50)
    cases["container"] = bytes(big_container)
    old = bytearray(parts[0])
    struct.pack_into("<I", old, 0, 0x1EE55A01)
    cases["old magic"] = bytes(old)
    for name, blob in cases.items():
        path = write_chunks(tmp_path / "c.so", *build_elf([Sec(b".nv_fatbin", blob)]))
        result = scan(str(path))
        assert result.status == "error", (name, result.to_json())
        assert result.detail, name


def test_concatenated_entry_with_a_broken_member_table(tmp_path):
    blob = bytearray(_fatbin_bytes(LOCAL / "libconcat.so"))
    # The first container holds a plain sm_90a entry, then the 0x100 entry: break its count.
    pos = 16
    while struct.unpack_from("<H", blob, pos)[0] != 0x100:
        pos += sum(struct.unpack_from("<IQ", blob, pos + 4))
    struct.pack_into("<I", blob, pos + 0x40, 7)
    path = write_chunks(tmp_path / "concat.so", *build_elf([Sec(b".nv_fatbin", bytes(blob))]))
    result = scan(str(path))
    assert result.status == "error" and "member table not understood" in result.detail
    assert "sm_90a" in result.sm_variants  # what could be read is kept


def test_container_found_through_a_wrapper_record(tmp_path):
    """A fatbin outside .nv_fatbin, reachable only from .nvFatBinSegment (facts.md 6.1)."""
    first, second = _containers(_fatbin_bytes(SM86))
    rodata = b"\0" * 64 + first + b"\0" * 16 + second
    wrappers = b"".join(struct.pack("<IIQQ", 0x466243B1, 1, 0x10000 + off, 0)
                        for off in (64, 64 + len(first) + 16))
    wrappers += struct.pack("<IIQQ", 0x466243B1, 1, 0, 0)  # an object file's unrelocated pointer
    wrappers += struct.pack("<IIQQ", 0x466243B1, 1, 0x10000 + 8, 0)  # points at no container
    path = tmp_path / "w.so"
    path.write_bytes(elf_bytes([Sec(b".rodata", rodata, addr=0x10000), Sec(b".nvFatBinSegment", wrappers, flags=3)]))
    result = scan(str(path))
    assert result.status == "ok", result.detail
    assert result.sm_variants == ["sm_86"] and result.entries == 2 and result.containers == 2
    assert result.sections == [".nvFatBinSegment"]
    # Without a fatbin anywhere, the wrapper section alone does not make a CUDA binary.
    lone = tmp_path / "lone.so"
    lone.write_bytes(elf_bytes([Sec(b".nvFatBinSegment", wrappers[48:], flags=3)]))
    assert scan(str(lone)).status == "absent"


# --- truncation ---------------------------------------------------------------------------------

@pytest.mark.parametrize("fixture", [PTX90, SM86, COMPRESSED, LOCAL / "libconcat.so"], ids=lambda p: p.name)
def test_truncated_copies_of_the_real_files(tmp_path, fixture):
    data = fixture.read_bytes()
    cuts = set(range(0, 80)) | set(range(0, len(data), max(1, len(data) // 150)))
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    cuts |= {shoff - 1, shoff, shoff + 1, shoff + 63, shoff + 64, len(data) - 1}
    target = tmp_path / "cut.so"
    for cut in sorted(c for c in cuts if 0 <= c < len(data)):
        target.write_bytes(data[:cut])
        result = scan(str(target))
        assert result.status in STATUSES
        expected = "not_elf" if cut < 4 else "error"  # fewer than 4 bytes: no ELF magic
        assert result.status == expected, (cut, result.to_json())
    target.write_bytes(data)
    assert scan(str(target)).status == "ok"


@pytest.mark.parametrize("fixture", [PTX90, COMPRESSED, LOCAL / "libvariants.so", LOCAL / "libconcat.so"],
                         ids=lambda p: p.name)
def test_truncated_inside_the_fatbin_keeps_what_was_read(tmp_path, fixture):
    """Section table first, fatbin last: every cut inside the fatbin is a readable ELF."""
    blob = _fatbin_bytes(fixture)
    full = scan(str(fixture))
    data = elf_bytes([Sec(b".nv_fatbin", blob)])
    start = len(data) - len(blob)
    target = tmp_path / "cut.so"
    for cut in range(start, len(data), 8):
        target.write_bytes(data[:cut] + (b"" if cut % 16 else b"\0" * 3))
        result = scan(str(target))
        assert result.status == "error", cut
        assert "truncated" in result.detail or "cut short" in result.detail
        assert set(result.sm_variants) <= set(full.sm_variants)
        assert set(result.ptx_variants) <= set(full.ptx_variants)
        assert result.entries <= full.entries
    target.write_bytes(data)
    assert scan(str(target)).to_json() == full.to_json()


# --- how much is read ---------------------------------------------------------------------------

def test_fixture_scan_reads_only_headers():
    result, counter = counting_scan(PTX90)
    assert result.status == "ok"
    assert counter["bytes"] == result.bytes_read < 4096  # of a 993,272-byte file
    assert counter["reads"] < 40


def test_fixture_extended_to_400_mb_reads_the_same_few_bytes(tmp_path):
    big = tmp_path / "big.so"
    shutil.copy(PTX90, big)
    os.truncate(big, 400 * MIB)  # sparse: no disk used
    result, counter = counting_scan(big)
    small, small_counter = counting_scan(PTX90)
    assert result.to_json() == small.to_json()
    assert counter["bytes"] == small_counter["bytes"] < 4096


def test_libtorch_sized_sparse_file_reads_headers_only(tmp_path):
    """2,400 entries in 480 containers spread over a 460 MB sparse file, like libtorch_cuda.so:
    the scan reads 16 bytes per container and 64 per entry, nothing of the payloads."""
    archs = [(75, 0), (80, 0), (86, 0), (100, 0x100000), (120, 0)]  # 0x100000: the 'a' bit
    payload = 192 * 1024
    # Headers written with seek, payloads left as holes.
    chunks: List[Tuple[int, bytes]] = []
    offset = 0
    section_start = 4096
    for _ in range(480):
        chunks.append((section_start + offset, struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(archs) * (64 + payload))))
        offset += 16
        for arch, flag in archs:
            header = struct.pack("<HHIQIIHHIIIQQQ", 2, 0x0101, 64, payload, 0, 0, 8, 1, arch, 0, 0, 0x11 | flag, 0, 0)
            chunks.append((section_start + offset, header))
            offset += 64 + payload
    elf_chunks, _ = build_elf([Sec(b".nv_fatbin", offset=section_start, size=offset)])
    path = write_chunks(tmp_path / "libtorch_like.so", elf_chunks + chunks, section_start + offset)
    assert os.path.getsize(path) > 450 * 1000 * 1000
    result, counter = counting_scan(path)
    assert result.status == "ok", result.detail
    assert result.entries == 2400 and result.containers == 480
    assert result.sm_variants == ["sm_75", "sm_80", "sm_86", "sm_100a", "sm_120"]
    assert result.counts["sm_100a"] == 480
    assert counter["bytes"] <= 480 * 16 + 2400 * 64 + 4096  # ~161 KB of 461 MB


# --- property tests ------------------------------------------------------------------------------

PROPERTY = settings(max_examples=int(os.environ.get("FATBIN_EXAMPLES", "150")), deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow])
_FIXTURE_BYTES = {p.name: p.read_bytes() for p in [PTX90, SM86, COMPRESSED, LOCAL / "libconcat.so", LOCAL / "libvariants.so"]}
_SMALL_ELF = elf_bytes([Sec(b".nv_fatbin", _fatbin_bytes(PTX90))])


def _scan_bytes(data: bytes) -> FatbinScan:
    handle, name = tempfile.mkstemp(suffix=".so")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        result = scan(name)
    finally:
        os.unlink(name)
    assert isinstance(result, FatbinScan)
    assert result.status in STATUSES
    assert all(isinstance(v, int) for v in result.sm + result.ptx + result.lto)
    assert result.entries >= result.compressed >= 0
    for cc in [(8, 0), (9, 0), (12, 1)]:
        ok, how = runs_on(result, cc)
        assert isinstance(ok, bool) and isinstance(how, str)
    return result


@PROPERTY
@given(st.binary(max_size=4096))
def test_random_bytes_never_raise(data):
    _scan_bytes(data)


@PROPERTY
@given(st.binary(min_size=0, max_size=2048))
def test_random_bytes_behind_an_elf_magic_never_raise(tail):
    _scan_bytes(b"\x7fELF\x02\x01\x01" + bytes(9) + tail)


@PROPERTY
@given(st.sampled_from(sorted(_FIXTURE_BYTES)), st.data())
def test_mutated_real_files_never_raise(name, data):
    blob = bytearray(_FIXTURE_BYTES[name])
    shoff = struct.unpack_from("<Q", blob, 0x28)[0]
    fat_off, fat_size = _section(FIXTURES / "ground_truth" / "h200" / name if name.startswith("libk") else LOCAL / name,
                                 b".nv_fatbin")
    regions = [(0, 64), (shoff, len(blob)), (fat_off, fat_off + fat_size)]
    for _ in range(data.draw(st.integers(1, 12))):
        lo, hi = data.draw(st.sampled_from(regions))
        pos = data.draw(st.integers(lo, max(lo, hi - 1)))
        blob[pos] = data.draw(st.integers(0, 255))
    cut = data.draw(st.one_of(st.none(), st.integers(0, len(blob))))
    _scan_bytes(bytes(blob if cut is None else blob[:cut]))


@PROPERTY
@given(st.data())
def test_mutated_fatbin_in_a_small_elf_never_raises(data):
    blob = bytearray(_SMALL_ELF)
    start = len(blob) - 0x29B0
    for _ in range(data.draw(st.integers(1, 16))):
        pos = data.draw(st.integers(start, len(blob) - 1))
        blob[pos] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        # Grow a size field: a container or entry size of up to 2**64 - 1.
        pos = data.draw(st.integers(start, len(blob) - 8))
        struct.pack_into("<Q", blob, pos, data.draw(st.integers(0, (1 << 64) - 1)))
    _scan_bytes(bytes(blob))


# --- the module itself ---------------------------------------------------------------------------

def _imports(path):
    tree = ast.parse(Path(path).read_text(encoding="utf-8"), feature_version=(3, 8))
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported |= {f"{node.module}.{alias.name}" if node.module == "gpudoctor.probes" else node.module for alias in node.names}
    return imported


def test_module_is_stdlib_only_and_python38_syntax():
    stdlib = {"json", "os", "stat", "struct", "sys", "dataclasses", "typing", "importlib", "importlib.util"}
    # Its gpudoctor imports are the ELF reader and its result type, both stdlib-only (loaded beside it in --python's child).
    siblings = {"gpudoctor.probes.elf", "gpudoctor.probes.fatbin_result"}
    assert _imports(fatbin.__file__) <= stdlib | siblings, _imports(fatbin.__file__)
    assert _imports(Path(fatbin.__file__).with_name("fatbin_result.py")) <= {"typing"}
    # io and os: a plain file is read with os.pread (one system call per read, not two).
    assert _imports(Path(fatbin.__file__).with_name("elf.py")) <= {"io", "os", "struct", "typing"}


def test_module_runs_when_exec_d_without_a_module_object():
    """The probe script may exec() this source: no sys.modules entry must be needed."""
    namespace = {"__name__": "gpudoctor_probe_fatbin"}
    source = Path(fatbin.__file__).read_text(encoding="utf-8")
    exec(compile(source, "fatbin.py", "exec", dont_inherit=True), namespace)  # not this file's __future__
    assert namespace["scan"](str(SM86)).sm == [86]
