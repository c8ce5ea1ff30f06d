"""probes/torch_links.py and GD508 on shared objects made by the real compiler and linker.

A "torch" whose libc10.so defines c10 symbols under their real mangled names (C functions with
asm labels: the same .dynsym / .gnu.hash the C++ compiler would write), and extensions that need
them: one built for this torch, one with the other C++ ABI (std::string as ``Ss``), one that
wants a libcudart.so.12 that is not there. The real torch wheel and a real C++ extension are in
tests/real/test_real_torch_links.py.
"""

from __future__ import annotations

import shutil

import pytest

from gpudoctor.knowledge.cxx_symbols import abi_hint, demangle
from gpudoctor.probes import scancache, torch_links

from fakes.site_packages import SitePackages, snapshot_of
from fakes.torch_extensions import CHECK, CPU_TORCH, CXX11, OLD_ABI, cc, extension, extensions_fact, install, libc10
from helpers import findings, outcome

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc to make the ELF files")


@pytest.fixture
def built(tmp_path):
    """(site, torch/lib) with the fake torch installed; extensions are added by each test."""
    site = SitePackages(tmp_path / "site-packages")
    site.torch(version_py=CPU_TORCH, lib=None)
    lib = site.path / "torch" / "lib"
    (lib / "libc10.so").unlink()
    libc10(lib)
    return site, lib


def test_extension_built_for_this_torch_has_nothing_missing(built):
    site, lib = built
    path = install(site, lib, "goodext", "1.0", [CXX11, CHECK])
    value = extensions_fact(site)
    [entry] = value["extensions"]
    assert entry["path"] == path and entry["dist"] == "goodext"
    assert entry["symbols"] == {"status": "ok", "checked": 2, "missing_count": 0, "missing": [], "cxx11_abi": True}
    assert "unresolved" not in entry


def test_other_cxx_abi_is_missing_symbols_and_gd508_fails(built):
    site, lib = built
    install(site, lib, "badext", "0.3+cu128torch2.7cxx11abiFALSE", [OLD_ABI, CHECK], requires=["torch==2.7.0"])
    value = extensions_fact(site)
    [entry] = value["extensions"]
    assert entry["symbols"]["missing"] == [OLD_ABI] and entry["symbols"]["missing_count"] == 1
    assert entry["symbols"]["cxx11_abi"] is True  # CHECK is a __cxx11 symbol; the hint is per symbol
    snap = snapshot_of(site)
    [finding] = findings(snap, "GD508")
    text = finding.message
    assert "badext 0.3+cu128torch2.7cxx11abiFALSE will not load with torch 2.11.0+cpu" in text
    assert "c10::detail::torchInternalAssertFail(…)" in text and OLD_ABI in text
    assert "_GLIBCXX_USE_CXX11_ABI mismatch" in text
    assert "cxx11abiFALSE" in text and "requires torch==2.7.0" in text
    commands = " ".join(finding.fix.commands)
    assert "'badext!=0.3+cu128torch2.7cxx11abiFALSE' torch==2.11.0" in commands
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in commands


def test_missing_cudart_is_found_and_symbols_cached(built, tmp_path, monkeypatch):
    monkeypatch.setenv("GPUDOCTOR_CACHE_DIR", str(tmp_path / "cache"))
    scancache.forget()
    site, lib = built
    # torch's CUDA library loads libcudart.so.13 from the nvidia wheel's directory, through its RPATH
    nvidia = site.path / "nvidia" / "cu13" / "lib"
    nvidia.mkdir(parents=True)
    cc(nvidia / "libcudart.so.13", "void cudaMalloc(void) {}\n", "-Wl,-soname,libcudart.so.13")
    cc(lib / "libtorch_cuda.so", "void tc(void) {}\n", f"-L{nvidia}", "-Wl,--no-as-needed", "-l:libcudart.so.13",
       "-Wl,-rpath,$ORIGIN/../../nvidia/cu13/lib", "-Wl,--disable-new-dtags")
    stub = tmp_path / "stub"
    stub.mkdir()
    cc(stub / "libcudart.so.12", "void cudaMalloc(void) {}\n", "-Wl,-soname,libcudart.so.12")
    install(site, lib, "cu12ext", "2.0", [CXX11], f"-L{stub}", "-Wl,--no-as-needed", "-l:libcudart.so.12")
    value = extensions_fact(site)
    [entry] = value["extensions"]
    assert entry["unresolved"] == ["libcudart.so.12"]
    assert value["stats"]["symbol_checks_read"] == 1
    assert "libcudart.so.13" in value["torch_loads"]
    [finding] = findings(snapshot_of(site), "GD508")
    assert "needs libcudart.so.12, which the loader will not find (torch loads libcudart.so.13)" in finding.message
    assert "--no-build-isolation" in " ".join(finding.fix.commands)  # no torch pin: a rebuild
    scancache.forget()
    again = extensions_fact(site)
    assert again["stats"]["symbol_checks_read"] == 0 and again["stats"]["files_read"] == 0
    assert again["extensions"] == value["extensions"]
    # LD_LIBRARY_PATH names where it is: the loader finds it, so does the check
    monkeypatch.setenv("LD_LIBRARY_PATH", str(stub))
    assert "unresolved" not in extensions_fact(site)["extensions"][0]
    scancache.forget()


def test_runpath_with_origin_resolves(built):
    site, lib = built
    rel = site.path / "rpext" / "libs"
    rel.mkdir(parents=True)
    cc(rel / "libhelper.so", "void helper(void) {}\n", "-Wl,-soname,libhelper.so")
    install(site, lib, "rpext", "1.0", [CXX11], f"-L{rel}", "-Wl,--no-as-needed", "-lhelper", "-Wl,-rpath,$ORIGIN/libs", "-Wl,--enable-new-dtags")
    [entry] = extensions_fact(site)["extensions"]
    assert "libhelper.so" in entry["needed"] and "unresolved" not in entry


def test_unreadable_torch_library_gives_no_verdict(built):
    site, lib = built
    install(site, lib, "anyext", "1.0", [OLD_ABI])
    (lib / "libtorch_cpu.so").write_bytes(b"not an ELF file")
    value = extensions_fact(site)
    [entry] = value["extensions"]
    assert entry["symbols"]["status"] == "error" and "libtorch_cpu.so" in entry["symbols"]["detail"]
    result = outcome(snapshot_of(site), "GD508")
    assert result.status == "unknown"


def test_no_torch_linked_extension_is_not_applicable(built):
    site, _ = built
    assert outcome(snapshot_of(site), "GD508").status == "not_applicable"


def test_demangle_and_hints():
    assert demangle(OLD_ABI) == "c10::detail::torchInternalAssertFail(…)"
    assert demangle("_ZTIN3c105ErrorE") == "typeinfo for c10::Error"
    assert demangle("_ZNK2at10TensorBase8data_ptrIfEEPT_v") == "at::TensorBase::data_ptr<…>(…)"
    assert demangle("_ZN3c1010TensorImplC2ENS_8DispatchKeyE") == "c10::TensorImpl::TensorImpl(…)"
    assert demangle("not_mangled") is None
    assert "_GLIBCXX_USE_CXX11_ABI=0" in abi_hint(OLD_ABI, True)
    assert abi_hint(CXX11, True) is None and "_GLIBCXX_USE_CXX11_ABI=1" in abi_hint(CXX11, False)
    assert torch_links._torch_symbol().match(b"_ZNK2at10TensorBase8data_ptrIfEEPT_v")
    assert not torch_links._torch_symbol().match(b"_ZNSt6vectorIiSaIiEE9push_backERKi")


# --- explain: the error text confirmed from these facts ---------------------------------------
def _verdict(text: str, snap) -> tuple:
    from gpudoctor import explain

    [match] = [m for m in explain.diagnose(text).matches if m.signature.role == "cause"]
    result = explain.confirm(match.signature, snap)
    return match.signature.id, result.verdict, [c.rule for c in result.checks if c.kind == explain.CONFIRMED]


def test_explain_confirms_undefined_symbol_where_it_fails(built):
    site, lib = built
    path = install(site, lib, "badext", "0.3", [OLD_ABI])
    text = f"ImportError: {path}: undefined symbol: {OLD_ABI}"
    sig, verdict, by = _verdict(text, snapshot_of(site))
    assert (sig, verdict, by) == ("SIG-torch-extension-undefined-symbol", "confirmed", ["GD508"])


def test_explain_names_the_extension_in_the_error_not_another_that_fails_too(built):
    """Two extensions fail the same way; the error is the second one's: its finding confirms, the
    other is listed as failing too, not as this error's cause (an H200 run confirmed sglang-kernel's
    error with another package's GD508 finding first)."""
    from gpudoctor import explain

    site, lib = built
    install(site, lib, "abiold", "0.1", [OLD_ABI])
    path = install(site, lib, "kernelpkg", "0.4", [OLD_ABI])
    text = f"ImportError: {path}: undefined symbol: {OLD_ABI}"
    [match] = [m for m in explain.diagnose(text).matches if m.signature.role == "cause"]
    result = explain.confirm(match.signature, snapshot_of(site), line=match.text)
    confirmed = [c.text for c in result.checks if c.kind == explain.CONFIRMED]
    assert result.verdict == "confirmed" and len(confirmed) == 1 and confirmed[0].startswith("kernelpkg 0.4 will not load")
    [other] = [c.text for c in result.checks if c.kind != explain.CONFIRMED and c.rule == "GD508"]
    assert other.startswith("also failing, but not the file in this error: abiold 0.1 will not load")
    # without the error's line (a caller that has none), both confirm, as before
    both = explain.confirm(match.signature, snapshot_of(site))
    assert [c.text.split(" ")[0] for c in both.checks if c.kind == explain.CONFIRMED] == ["abiold", "kernelpkg"]


def test_explain_torchvision_ops_confirmed_by_its_own_finding(built):
    site, lib = built
    install(site, lib, "torchvision", "0.27.0", [OLD_ABI], requires=["torch==2.12.0"])
    sig, verdict, by = _verdict("RuntimeError: operator torchvision::nms does not exist", snapshot_of(site))
    assert sig == "SIG-torchvision-ops-missing" and verdict == "confirmed" and "GD508" in by


def test_explain_torchvision_not_confirmed_by_another_extension(built):
    site, lib = built
    install(site, lib, "otherext", "1.0", [OLD_ABI])
    install(site, lib, "torchvision", "0.26.0", [CXX11], requires=["torch==2.11.0"])
    _, verdict, by = _verdict("RuntimeError: operator torchvision::nms does not exist", snapshot_of(site))
    assert verdict != "confirmed" and by == []


def test_names_of_torch_libraries_and_versioned_libraries():
    assert torch_links.torch_library("libc10.so") and torch_links.torch_library("libtorch_cuda.so")
    assert torch_links.torch_library("libshm.so") and not torch_links.torch_library("libcudart.so.12")
    assert not torch_links.torch_library("libtorchaudio_ffmpeg") and not torch_links.torch_library("libc.so.6")
    assert not torch_links.torch_library("libtorchcodec_core4.so") and not torch_links.torch_library("libtorchaudio.so")
    assert torch_links.torch_library("libc10_cuda.so") and torch_links.torch_library("libtorch_cuda_linalg.so")
    assert torch_links.versioned("/x/nvidia/cublas/lib/libcublas.so.13") and torch_links.versioned("/x/libnccl.so.2.21.5")
    assert not torch_links.versioned("/x/vllm/_C.abi3.so") and not torch_links.versioned("/x/y.so.d/_C.so")


def test_torch_symbol_defined_by_its_own_library_beside_it_is_not_missing(built):
    site, lib = built
    beside = site.path / "helperext" / "libs"
    beside.mkdir(parents=True)
    cc(beside / "libhelper.so", f'void h(void) __asm__("{OLD_ABI}");\nvoid h(void) {{}}\n', "-Wl,-soname,libhelper.so")
    install(site, lib, "helperext", "1.0", [OLD_ABI, CXX11], f"-L{beside}", "-Wl,--no-as-needed", "-lhelper",
            "-Wl,-rpath,$ORIGIN/libs")
    [entry] = extensions_fact(site)["extensions"]
    assert entry["symbols"]["missing_count"] == 0 and entry["symbols"]["checked"] == 2


# --- --deep: each torch extension loaded in a child after import torch ---------------------------
TORCH_INIT = """import ctypes, os
__version__ = "2.11.0+cpu"
# what the real torch does first: its libraries into the process, found by soname afterwards
ctypes.CDLL(os.path.join(os.path.dirname(__file__), "lib", "libc10.so"), mode=ctypes.RTLD_GLOBAL)
"""


def deep_snapshot(site):
    import types

    from gpudoctor.probes import deep_extensions_load

    (site.path / "torch" / "__init__.py").write_text(TORCH_INIT, encoding="utf-8")
    snap = snapshot_of(site)
    ctx = types.SimpleNamespace(python=None, live=True, timeout=30.0, environ={"PYTHONPATH": str(site.path)}, deadline=None)
    fact = deep_extensions_load.load(snap, ctx)["torch.extensions_load"]
    snap.facts["torch.extensions_load"] = fact
    return snap, fact


def test_deep_quotes_the_loader_for_the_other_abi_and_loads_the_right_one(built):
    site, lib = built
    bad = install(site, lib, "badext", "0.3", [OLD_ABI])
    good = install(site, lib, "goodext", "1.0", [CXX11])
    snap, fact = deep_snapshot(site)
    assert fact.status == "ok" and fact.value["torch"] == {"status": "ok", "version": "2.11.0+cpu"}
    by_path = {e["path"]: e for e in fact.value["extensions"]}
    assert by_path[good]["status"] == "ok"
    assert by_path[bad]["status"] == "error" and by_path[bad]["undefined_symbol"] == OLD_ABI
    assert f"undefined symbol: {OLD_ABI}" in by_path[bad]["error"]
    [finding] = findings(snap, "GD508")
    assert finding.subject == "badext" and finding.severity == "error"
    assert f'--deep confirms: loading _C.cpython-311-x86_64-linux-gnu.so after import torch fails with "{bad}: undefined symbol: {OLD_ABI}"' \
        in finding.message


def test_deep_load_that_succeeds_turns_the_static_finding_into_a_warning(built):
    site, lib = built
    path = install(site, lib, "lazyext", "1.0", [OLD_ABI])
    snap, fact = deep_snapshot(site)
    # the static check says OLD_ABI is missing; pretend the loader found it (a symbol another library gave it)
    fact.value["extensions"] = [{"path": path, "status": "ok"}]
    [finding] = findings(snap, "GD508")
    assert finding.severity == "warning" and "--deep: _C.cpython-311-x86_64-linux-gnu.so does load after import torch" in finding.message


def test_a_library_outside_the_torch_stack_that_is_absent_is_not_reported(built, tmp_path):
    """torchcodec ships a core library per FFmpeg major and loads the one whose FFmpeg is there."""
    site, lib = built
    stub = tmp_path / "ffmpeg"
    stub.mkdir()
    cc(stub / "libavcodec.so.58", "void av(void) {}\n", "-Wl,-soname,libavcodec.so.58")
    install(site, lib, "codec", "0.17.0", [CXX11], f"-L{stub}", "-Wl,--no-as-needed", "-l:libavcodec.so.58")
    [entry] = extensions_fact(site)["extensions"]
    assert "libavcodec.so.58" in entry["needed"] and "unresolved" not in entry
    assert outcome(snapshot_of(site), "GD508").status == "pass"


def test_a_bundle_of_builds_per_torch_release_is_judged_by_the_one_for_this_torch(built):
    """torch-c-dlpack-ext ships libtorch_c_dlpack_addon_torch24 … torch29 and loads the one for its torch."""
    site, lib = built
    files = {}
    for tag, symbols in (("torch24", [OLD_ABI]), ("torch29", [OLD_ABI]), ("torch211", [CXX11])):
        scratch = site.path.parent / f"addon_{tag}.so"
        extension(scratch, symbols, lib)
        files[f"dlpack_addon/libaddon_{tag}-cpu.so"] = scratch
    site.dist("dlpack-addon", "0.1.5", files=files)
    assert len(extensions_fact(site)["extensions"]) == 3
    assert outcome(snapshot_of(site), "GD508").status == "pass"  # torch 2.11: only the torch211 build is loaded
    scratch = site.path.parent / "addon_broken.so"
    extension(scratch, [OLD_ABI], lib)
    (site.path / "dlpack_addon" / "libaddon_torch211-cpu.so").write_bytes(scratch.read_bytes())
    [finding] = findings(snapshot_of(site), "GD508")
    assert "libaddon_torch211-cpu.so needs 1 torch symbol" in finding.message


def test_a_first_run_reads_ahead_in_threads_and_finds_the_same(built, tmp_path, monkeypatch):
    """A first run (nothing cached) reads the dynamic sections in threads and asks for the symbol
    tables early: the facts are the ones read one file after the other."""
    monkeypatch.setenv("GPUDOCTOR_CACHE_DIR", str(tmp_path / "cache"))
    site, lib = built
    install(site, lib, "goodext", "1.0", [CXX11, CHECK])
    install(site, lib, "badext", "0.3", [OLD_ABI, CHECK])
    from gpudoctor.probes import coldstart
    threaded, hinted = [], []
    each, hint = coldstart.each_in_threads, torch_links._hint_symbol_tables
    monkeypatch.setattr(coldstart, "each_in_threads", lambda work, paths, threads=8: threaded.extend(paths) or each(work, paths, 2))
    monkeypatch.setattr(torch_links, "_hint_symbol_tables", lambda path: hinted.append(path) or hint(path))
    monkeypatch.setattr(torch_links, "PARALLEL_FROM", 10 ** 9)
    scancache.forget()
    one_by_one = extensions_fact(site)
    assert threaded == [] and hinted == []
    monkeypatch.setattr(torch_links, "PARALLEL_FROM", 1)
    scancache.forget()
    shutil.rmtree(tmp_path / "cache")
    ahead = extensions_fact(site)
    assert sorted(str(p).rsplit("/", 1)[-1] for p in hinted) == sorted(e["path"].rsplit("/", 1)[-1] for e in one_by_one["extensions"])
    assert any(p.endswith("libc10.so") for p in threaded)  # torch's own libraries too
    assert ahead["extensions"] == one_by_one["extensions"] and ahead["torch_loads"] == one_by_one["torch_loads"]
    assert ahead["stats"]["files_read"] == one_by_one["stats"]["files_read"]
    scancache.forget()
