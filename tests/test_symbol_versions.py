"""Symbol versions (probes/dynamic_loader.py) and GD508 on shared objects made here by gcc and ld.

An extension that links torch and was built with a newer toolchain than this system's asks its
libraries for versions they do not define. Made for real: the extension is linked against a stub
library whose soname is ``libstdc++.so.6`` (or ``libc.so.6``) and whose version script defines
``GLIBCXX_3.4.99`` (``GLIBC_2.99``), so its ``.gnu.version_r`` asks that of ``libstdc++.so.6``; at
load time the loader maps the system's libstdc++ and refuses it with its own words, which the
test reads from a real ``dlopen`` in a child. The same extension asking only for versions the
system defines loads, and gives no finding.
"""

from __future__ import annotations

import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from gpudoctor.probes import dynamic_loader, elf

from fakes.site_packages import snapshot_of
from fakes.site_packages import SitePackages
from fakes.torch_extensions import CPU_TORCH, CXX11, cc, extensions_fact, libc10
from helpers import findings, outcome

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc to make the ELF files")

SYSTEM_LIBSTDCXX = "/usr/lib/x86_64-linux-gnu/libstdc++.so.6"


@pytest.fixture
def built(tmp_path):
    """(site, torch/lib): the fake torch of test_torch_links, whose libc10.so the real compiler made."""
    site = SitePackages(tmp_path / "site-packages")
    site.torch(version_py=CPU_TORCH, lib=None)
    lib = site.path / "torch" / "lib"
    (lib / "libc10.so").unlink()
    libc10(lib)
    return site, lib


def stub(directory: Path, soname: str, version: str) -> Path:
    """A library named ``soname`` whose one function carries symbol version ``version``."""
    directory.mkdir(parents=True, exist_ok=True)
    script = directory / f"{soname}.map"
    script.write_text(f"{version} {{ global: gd_stub_{version.replace('.', '_')}; local: *; }};\n", encoding="utf-8")
    return cc(directory / soname, f"void gd_stub_{version.replace('.', '_')}(void) {{}}\n", f"-Wl,-soname,{soname}",
              f"-Wl,--version-script={script}")


def install_versioned(site, lib: Path, name: str, soname: str, version: str, tmp: Path) -> str:
    """An extension that links torch's libc10 and calls one function of ``soname`` at ``version``."""
    stubs = tmp / f"stub-{name}"
    library = stub(stubs, soname, version)
    rel = f"{name}/_C.cpython-311-x86_64-linux-gnu.so"
    scratch = site.path.parent / f"{name}.so"
    fn = f"gd_stub_{version.replace('.', '_')}"
    decls = f'extern void u0(void) __asm__("{CXX11}");\nextern void {fn}(void);\n'
    cc(scratch, decls + f"void call(void) {{ u0(); {fn}(); }}\n", f"-L{lib}", "-Wl,--no-as-needed", "-lc10", str(library))
    site.dist(name, "1.0", requires=["torch"], files={rel: scratch, f"{name}/__init__.py": ""})
    return str(site.path / rel)


def real_load(lib: Path, path: str) -> subprocess.CompletedProcess:
    """dlopen in a child, torch's libc10 loaded first (as import torch would): the loader's own words."""
    code = ("import ctypes, sys\nctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)\n"
            "ctypes.CDLL(sys.argv[2], mode=2)\nprint('loaded')\n")
    return subprocess.run([sys.executable, "-c", code, str(lib / "libc10.so"), path], capture_output=True, text=True, timeout=60)


@pytest.mark.skipif(not Path(SYSTEM_LIBSTDCXX).exists(), reason="needs the system's libstdc++")
def test_newer_glibcxx_than_the_system_has_is_found_and_the_loader_agrees(built, tmp_path):
    site, lib = built
    path = install_versioned(site, lib, "newgcc", "libstdc++.so.6", "GLIBCXX_3.4.99", tmp_path)
    loaded = real_load(lib, path)
    assert loaded.returncode != 0 and f"version `GLIBCXX_3.4.99' not found (required by {path})" in loaded.stderr
    [entry] = extensions_fact(site)["extensions"]
    [lacking] = entry["versions_missing"]
    assert lacking["library"] == "libstdc++.so.6" and lacking["missing"] == ["GLIBCXX_3.4.99"]
    assert lacking["newest"].startswith("GLIBCXX_3.4.") and lacking["newest"] != "GLIBCXX_3.4.99"
    [finding] = findings(snapshot_of(site), "GD508")
    assert f"version `GLIBCXX_3.4.99' not found (required by {path})" in finding.message
    assert "newgcc 1.0 will not load" in finding.message and "newer GCC" in finding.fix.summary
    assert "libstdcxx-ng" in " ".join(finding.fix.commands)


def test_newer_glibc_than_the_system_has_is_found(built, tmp_path):
    site, lib = built
    path = install_versioned(site, lib, "newglibc", "libc.so.6", "GLIBC_2.99", tmp_path)
    loaded = real_load(lib, path)
    assert loaded.returncode != 0 and "version `GLIBC_2.99' not found" in loaded.stderr
    [finding] = findings(snapshot_of(site), "GD508")
    assert "GLIBC_2.99 of libc.so.6" in finding.message and "glibc" in finding.fix.summary


def test_versions_the_system_defines_give_no_finding(built, tmp_path):
    site, lib = built
    # GLIBCXX_3.4 is libstdc++'s first version: every libstdc++.so.6 defines it
    path = install_versioned(site, lib, "oldgcc", "libstdc++.so.6", "GLIBCXX_3.4", tmp_path)
    loaded = real_load(lib, path)
    # the stub's symbol is not in the real libstdc++: the loader gets past the version check and
    # stops at that symbol — the version check itself passed
    assert "version `" not in loaded.stderr and "gd_stub_GLIBCXX_3_4" in loaded.stderr
    [entry] = extensions_fact(site)["extensions"]
    assert "versions_missing" not in entry
    assert outcome(snapshot_of(site), "GD508").status == "pass"


def test_the_loaders_reading_of_version_sections(tmp_path):
    """Weak requirements are not refused; a library without version definitions satisfies any."""
    library = stub(tmp_path / "lib", "libgdv.so.1", "GDV_2.0")
    defined = dynamic_loader.defined_versions(str(library))
    assert defined == {"status": "ok", "defined": ["GDV_2.0"]}
    plain = cc(tmp_path / "libplain.so", "void plain(void) {}\n", "-Wl,-soname,libplain.so")
    assert dynamic_loader.defined_versions(str(plain))["versioned"] is False
    user = cc(tmp_path / "user.so", "extern void gd_stub_GDV_2_0(void);\nvoid f(void) { gd_stub_GDV_2_0(); }\n", str(library))
    sections = elf.sections(str(user), (b".gnu.version_r", b".dynstr"), 1 << 20)
    needed = dynamic_loader.needed_from_sections(sections)
    assert needed == {"libgdv.so.1": ["GDV_2.0"]}

    class Cache(dict):
        def get(self, kind, path, key):  # type: ignore[override]
            return None

        def put(self, kind, path, key, value):
            pass

    definitions = dynamic_loader.Definitions(Cache(), lambda p: [1])
    asked = {"libgdv.so.1": ["GDV_3.0"]}
    assert dynamic_loader.missing_versions(asked, {"libgdv.so.1": [str(library)]}, definitions)[0]["missing"] == ["GDV_3.0"]
    assert dynamic_loader.missing_versions(asked, {"libgdv.so.1": [str(plain)]}, definitions) == []
    # one candidate the loader might pick defines it: no verdict against the other
    newer = stub(tmp_path / "newer", "libgdv.so.1", "GDV_3.0")
    assert dynamic_loader.missing_versions(asked, {"libgdv.so.1": [str(library), str(newer)]}, definitions) == []
    assert dynamic_loader.missing_versions(asked, {"libgdv.so.1": [str(tmp_path / "absent.so")]}, definitions) == []
    # VER_FLG_WEAK (2) on a requirement: parsed out
    raw = bytearray(sections[b".gnu.version_r"])
    patched = _weaken(raw, sections[b".dynstr"], b"GDV_2.0")
    assert "libgdv.so.1" not in dynamic_loader.parse_needed(bytes(patched), sections[b".dynstr"])


def _weaken(verneed: bytearray, strtab: bytes, name: bytes) -> bytearray:
    offset = 0
    while True:
        _v, count, _file, aux, nxt = struct.unpack_from("<HHIII", verneed, offset)
        at = offset + aux
        for _ in range(count):
            _h, flags, _o, vname, vnext = struct.unpack_from("<IHHII", verneed, at)
            if strtab[vname:vname + len(name)] == name:
                struct.pack_into("<H", verneed, at + 4, flags | 2)
                return verneed
            at += vnext
        if not nxt:
            return verneed
        offset += nxt


def test_newest():
    assert dynamic_loader.newest(["GLIBCXX_3.4", "GLIBCXX_3.4.30", "GLIBCXX_3.4.9", "CXXABI_1.3"], "GLIBCXX_3.4.32") == "GLIBCXX_3.4.30"
    assert dynamic_loader.newest(["GLIBC_2.2.5", "GLIBC_2.36", "GLIBC_PRIVATE"], "GLIBC_2.38") == "GLIBC_2.36"
    assert dynamic_loader.newest([], "GLIBC_2.38") is None


# --- explain: the loader's words confirmed (or not) from what GD508 read --------------------------
def _explained(text: str, snap) -> tuple:
    from gpudoctor import explain

    [match] = [m for m in explain.diagnose(text).matches if m.signature.role == "cause"]
    result = explain.confirm(match.signature, snap, details=match.details)
    return match.signature.id, result.verdict, [c.text for c in result.checks if c.kind == explain.CONFIRMED]


@pytest.mark.skipif(not Path(SYSTEM_LIBSTDCXX).exists(), reason="needs the system's libstdc++")
def test_explain_confirms_the_missing_version_where_it_is_missing(built, tmp_path):
    site, lib = built
    bad = install_versioned(site, lib, "newgcc", "libstdc++.so.6", "GLIBCXX_3.4.99", tmp_path)
    good = install_versioned(site, lib, "oldgcc", "libstdc++.so.6", "GLIBCXX_3.4", tmp_path)
    snap = snapshot_of(site)
    error = real_load(lib, bad).stderr.strip().splitlines()[-1]  # the loader's own line
    sig, verdict, said = _explained(error, snap)
    assert (sig, verdict) == ("SIG-libstdcxx-too-old", "confirmed") and bad in said[0] and "GLIBCXX_3.4.99" in said[0]
    # the same words about the extension whose libraries define what it needs: not this machine's problem
    sig, verdict, _ = _explained(f"OSError: /usr/lib/x86_64-linux-gnu/libstdc++.so.6: version `GLIBCXX_3.4.99' not found "
                                 f"(required by {good})", snap)
    assert verdict == "not_confirmed"
    # a module gpudoctor does not read: it says so, and does not deny it
    sig, verdict, _ = _explained("ImportError: /lib64/libstdc++.so.6: version `GLIBCXX_3.4.20' not found "
                                 "(required by /opt/x/_youtokentome_cython.so)", snap)
    assert verdict == "could_not_check"
