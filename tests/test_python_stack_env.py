"""The Python-stack probe (probes/python_stack_read.py + probes/python_stack.py) on real environments built in tmp dirs.

Each environment is real files: dist-info folders with METADATA and RECORD as pip writes
them, a torch package with the real ``version.py`` text recorded on the H200, and real ELF
files with fatbins (tests/fixtures/ground_truth/h200/libk_*.so, built by nvcc on that
machine; cuobjdump's listing of them is in capture.log) copied in under the names the stack
uses. Nothing of gpudoctor is mocked; the fatbin reader is the real one.

The helpers (``SitePackages``, ``make_venv``) are in tests/fakes/site_packages.py.
"""

import json
import os
import shutil
import subprocess
import time
import sys
from pathlib import Path

import pytest

from gpudoctor.probes import child, fatbin, python_stack_collect, python_stack

from fakes.site_packages import (COMPRESSED, FA2_SO, SM80_SM90_PTX90, SM86, TORCH_VERSION_PY, SitePackages, capture_section,
                                  make_venv, venv_site)


def collect(site, **kwargs):
    return python_stack_collect.collect_plain([str(site)], kwargs.pop("record", "stack"), kwargs.pop("scanner", fatbin.scan))


def values(facts):
    return {path: fact["value"] for path, fact in facts.items()}


@pytest.fixture
def site(tmp_path):
    return SitePackages(tmp_path / "site-packages")


# --- torch ------------------------------------------------------------------------------------
def test_torch_facts_come_from_the_real_version_py(site):
    site.torch()
    facts = collect(site.path)
    assert facts["torch.version"]["value"] == "2.11.0+cu130"
    assert facts["torch.cuda"]["value"] == "13.0"
    assert facts["torch.git_version"]["value"] == "70d99e998b4955e0049d13a98d77ae1b14db1f45"
    assert facts["torch.hip"]["status"] == "absent"
    assert facts["torch.path"]["value"] == str(site.path / "torch")


def test_torch_arch_list_is_the_fatbin_of_libtorch_cuda(site):
    site.torch(lib=SM80_SM90_PTX90)
    arch = collect(site.path)["torch.arch_list"]
    assert arch["status"] == "ok"
    # The same archs cuobjdump listed for this file on the H200 (capture.log, section fatbin).
    listed = [line for line in capture_section("fatbin").splitlines() if "libk_sm80_sm90_ptx90." in line]
    assert sorted({line.split(".")[-2] for line in listed if line.startswith("ELF file")}) == ["sm_80", "sm_90"]
    assert sorted({line.split(".")[-2] for line in listed if line.startswith("PTX file")}) == ["sm_90"]
    assert arch["value"]["sm"] == ["sm_80", "sm_90"]
    assert arch["value"]["ptx"] == ["compute_90"]
    assert arch["value"]["ptx_isa"] == ["9.0"]  # nvcc 13.0 on the H200


def test_cpu_torch_has_no_arch_list(site):
    site.torch(version_py=TORCH_VERSION_PY.replace("'13.0'", "None").replace("+cu130", "+cpu"), lib=None)
    facts = collect(site.path)
    assert facts["torch.cuda"]["status"] == "absent"
    assert facts["torch.arch_list"]["status"] == "absent"
    assert "CPU-only" in facts["torch.arch_list"]["detail"]


@pytest.mark.parametrize("flag, expected", [("1", True), ("0", False)])
def test_torch_abi_from_torch_config_cmake(site, flag, expected):
    site.torch(cmake_abi=flag)
    abi = collect(site.path)["torch.cxx11_abi"]
    assert (abi["status"], abi["value"]) == ("ok", expected)
    assert abi["source"].endswith("TorchConfig.cmake")


CXX = shutil.which("g++")


@pytest.mark.skipif(CXX is None, reason="needs g++ to build a real libc10.so stand-in")
@pytest.mark.parametrize("abi, expected", [("1", True), ("0", False)])
def test_torch_abi_from_libc10_symbols(site, tmp_path, abi, expected):
    """torch ≥ 2.7 writes no ABI flag into its CMake files: read the mangled names of libc10.so."""
    source = tmp_path / "c10.cpp"
    source.write_text('#include <string>\nnamespace c10 { void check(const std::string& s) { (void)s; } }\n', encoding="utf-8")
    site.torch()
    lib = site.path / "torch" / "lib" / "libc10.so"
    subprocess.run([CXX, "-shared", "-fPIC", f"-D_GLIBCXX_USE_CXX11_ABI={abi}", "-o", str(lib), str(source)], check=True, timeout=120)
    abi_fact = collect(site.path)["torch.cxx11_abi"]
    assert (abi_fact["status"], abi_fact["value"]) == ("ok", expected), abi_fact
    assert abi_fact["source"].endswith("libc10.so")


@pytest.mark.skipif(CXX is None, reason="needs g++ to build a real libc10.so stand-in")
def test_torch_abi_from_libc10_is_kept_in_the_scan_cache_until_the_library_changes(site, tmp_path, monkeypatch):
    """libc10's answer is read once per file version: a warm check reads no symbols; libc10.so
    rebuilt with the other ABI (a new file) is read again and gives the other answer."""
    from gpudoctor.probes import python_stack_read

    monkeypatch.setenv("GPUDOCTOR_CACHE_DIR", str(tmp_path / "cache"))
    source = tmp_path / "c10.cpp"
    source.write_text('#include <string>\nnamespace c10 { void check(const std::string& s) { (void)s; } }\n', encoding="utf-8")
    site.torch()
    lib = site.path / "torch" / "lib" / "libc10.so"

    def build(abi):
        lib.unlink()
        subprocess.run([CXX, "-shared", "-fPIC", f"-D_GLIBCXX_USE_CXX11_ABI={abi}", "-o", str(lib), str(source)], check=True, timeout=120)

    reads = []
    real = python_stack_read._libc10_abi
    monkeypatch.setattr(python_stack_read, "_libc10_abi", lambda path: reads.append(path) or real(path))
    build("1")
    assert collect(site.path)["torch.cxx11_abi"]["value"] is True and len(reads) == 1
    assert collect(site.path)["torch.cxx11_abi"]["value"] is True and len(reads) == 1  # from the cache
    build("0")
    assert collect(site.path)["torch.cxx11_abi"]["value"] is False and len(reads) == 2


def test_torch_abi_unreadable_libc10_is_an_error_fact(site):
    site.torch()  # its libc10.so is not an ELF file
    abi = collect(site.path)["torch.cxx11_abi"]
    assert abi["status"] == "error" and "not an ELF" in abi["detail"]


# --- distributions ---------------------------------------------------------------------------
def test_dists_requires_and_compactness(site):
    site.torch(requires=["filelock", 'nvidia-nccl-cu13==2.28.9; platform_system == "Linux"'])
    site.dist("vllm", "0.20.0", requires=["torch==2.11.0", "xgrammar==0.1.21"], files={"vllm/__init__.py": ""})
    site.dist("six", "1.17.0", requires=["never-recorded"], files={"six.py": ""})
    facts = collect(site.path)
    dists = facts["packages.dists"]["value"]
    assert set(dists) == {"torch", "vllm", "six"}
    assert dists["vllm"] == {"name": "vllm", "version": "0.20.0", "location": str(site.path)}
    stack = facts["packages.stack"]["value"]
    assert set(stack) == {"torch", "vllm"}  # six is not part of the inference stack
    assert stack["vllm"]["requires"] == ["torch==2.11.0", "xgrammar==0.1.21"]
    assert stack["torch"]["requires"][1] == 'nvidia-nccl-cu13==2.28.9; platform_system == "Linux"'
    # The long description's "Requires-Dist:" line is body text, not a header.
    assert "not-a-header-here" not in json.dumps(facts)


def test_record_check_finds_missing_modules(site):
    site.dist("vllm", "0.20.0", files={"vllm/__init__.py": "", "vllm/_C.abi3.so": SM80_SM90_PTX90, "vllm/engine.py": ""})
    (site.path / "vllm" / "_C.abi3.so").unlink()
    (site.path / "vllm" / "engine.py").unlink()
    # By default: shared objects and package __init__.py files only (cheap on torch's 6,000 files).
    entry = collect(site.path)["packages.stack"]["value"]["vllm"]
    assert entry["record"] == "ok"
    assert (entry["checked"], entry["missing_count"], entry["missing"]) == (2, 1, ["vllm/_C.abi3.so"])
    # --deep: every module.
    entry = collect(site.path, record="stack-full")["packages.stack"]["value"]["vllm"]
    assert entry["missing_count"] == 2
    assert sorted(entry["missing"]) == ["vllm/_C.abi3.so", "vllm/engine.py"]
    assert entry["checked"] == 3


def test_record_check_skips_bytecode_headers_and_scripts(site):
    site.dist("torch", "2.11.0", files={"torch/__init__.py": ""},
              extra_record=["torch/__pycache__/x.cpython-311.pyc", "torch/include/gone.h", "../../../bin/torchrun"])
    entry = collect(site.path)["packages.stack"]["value"]["torch"]
    assert (entry["checked"], entry["missing_count"]) == (1, 0)


def test_record_paths_with_commas_and_crlf_metadata(site):
    metadata = b"Metadata-Version: 2.1\r\nName: vllm\r\nVersion: 0.20.0\r\nRequires-Dist: torch==2.11.0\r\n\r\nbody\r\n"
    site.dist("vllm", "0.20.0", files={"vllm/__init__.py": "", "vllm/a,b.py": ""}, metadata=metadata)
    (site.path / "vllm" / "a,b.py").unlink()
    entry = collect(site.path, record="stack-full")["packages.stack"]["value"]["vllm"]
    assert entry["missing"] == ["vllm/a,b.py"]
    assert entry["requires"] == ["torch==2.11.0"]


def test_torch_split_libraries_use_the_biggest_fatbin(site):
    """Older torch builds split libtorch_cuda.so into libtorch_cuda_cu.so and libtorch_cuda_cpp.so."""
    site.dist("torch", "1.13.1", files={"torch/version.py": TORCH_VERSION_PY, "torch/lib/libtorch_cuda_cu.so": SM80_SM90_PTX90,
                                        "torch/lib/libtorch_cuda_cpp.so": SM86})
    arch = collect(site.path)["torch.arch_list"]
    assert arch["value"]["library"].endswith("libtorch_cuda_cu.so") and arch["value"]["sm"] == ["sm_80", "sm_90"]


def test_duplicates_in_one_directory_and_across_the_path(site, tmp_path):
    site.dist("torch", "2.11.0", files={"torch/__init__.py": ""})
    stale = site.dist("torch", "2.10.0")  # metadata an interrupted upgrade left behind: the older folder
    os.utime(stale, (1_000_000_000, 1_000_000_000))
    user = SitePackages(tmp_path / "user-site")
    user.dist("transformers", "4.0.0")
    site.dist("transformers", "5.17.0")
    facts = python_stack_collect.collect_plain([str(site.path), str(user.path)], "none", fatbin.scan)
    dupes = facts["packages.duplicates"]["value"]
    assert [c["version"] for c in dupes["torch"]] == ["2.11.0", "2.10.0"]  # the newer install first
    assert facts["packages.dists"]["value"]["torch"]["version"] == "2.11.0"
    assert {c["meta"] for c in dupes["torch"]} == {"torch-2.11.0.dist-info", "torch-2.10.0.dist-info"}
    assert [(c["version"], c["location"]) for c in dupes["transformers"]] == [("5.17.0", str(site.path)), ("4.0.0", str(user.path))]
    # The first one on the path is the one recorded as installed.
    assert facts["packages.dists"]["value"]["transformers"]["version"] == "5.17.0"


def test_non_utf8_metadata_is_a_fact_with_a_reason(site):
    site.dist("brokenpkg", "1.0", metadata=b"Metadata-Version: 2.1\nName: brokenpkg\nVersion: 1.0\nAuthor: Jos\xe9\n\n")
    site.dist("vllm", "0.20.0")
    assert collect(site.path)["packages.unreadable"]["value"] == []  # outside the stack: read with --deep only
    facts = collect(site.path, record="stack-full")
    bad = facts["packages.unreadable"]["value"]
    assert len(bad) == 1 and bad[0]["status"] == "error"
    assert "not UTF-8" in bad[0]["detail"] and "0xe9" in bad[0]["detail"]
    # Still listed, with the name and version its headers (read as Latin-1) give.
    assert facts["packages.dists"]["value"]["brokenpkg"]["version"] == "1.0"
    assert facts["packages.dists"]["value"]["vllm"]["version"] == "0.20.0"


def test_missing_metadata_and_garbage(site):
    info = site.dist("ghost", "1.0")
    (info / "METADATA").unlink()
    site.dist("nover", "1.0", metadata=b"\x00\x01garbage without headers")
    bad = {Path(item["path"]).name: item for item in collect(site.path, record="stack-full")["packages.unreadable"]["value"]}
    assert "No such file" in bad["ghost-1.0.dist-info"]["detail"]
    assert "no Version header" in bad["nover-1.0.dist-info"]["detail"]


def test_symlink_loops_in_site_packages(site):
    site.dist("vllm", "0.20.0", files={"vllm/__init__.py": ""}, extra_record=["vllm/loop/_C.so"])
    os.symlink("loop", site.path / "vllm" / "loop")  # vllm/loop -> itself
    os.symlink("spin-1.0.dist-info", site.path / "spin-1.0.dist-info")  # a dist-info that is its own link
    os.symlink("flashinfer", site.path / "flashinfer")  # a package dir that loops
    facts = collect(site.path)
    bad = facts["packages.unreadable"]["value"]
    assert [(Path(b["path"]).name, b["detail"]) for b in bad] == [("spin-1.0.dist-info", "symlink loop")]
    assert facts["packages.stack"]["value"]["vllm"]["missing"] == ["vllm/loop/_C.so (symlink loop)"]
    assert facts["kernels.binaries"]["status"] == "ok"


def test_unreadable_path_entry(tmp_path):
    facts = python_stack_collect.collect_plain([str(tmp_path / "does-not-exist"), str(tmp_path / "a-file")], "stack", fatbin.scan)
    assert facts["packages.dists"]["value"] == {}
    (tmp_path / "a-file").write_text("x")
    facts = python_stack_collect.collect_plain([str(tmp_path / "a-file")], "stack", fatbin.scan)
    assert facts["packages.unreadable"]["value"] == []


# --- kernels --------------------------------------------------------------------------------
def test_every_cuda_binary_on_the_path_is_found_owned_and_scanned(site):
    site.torch(lib=SM80_SM90_PTX90)
    site.dist("vllm", "0.20.0", files={"vllm/__init__.py": "", "vllm/_C.abi3.so": COMPRESSED,
                                        "vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so": SM80_SM90_PTX90,
                                        "vllm/model_executor/deep/er/down.so": SM86})
    site.dist("flash-attn", "2.8.3", files={FA2_SO: SM86, "flash_attn/__init__.py": ""})
    site.dist("six", "1.17.0", files={"six_ext.so": SM86})  # not an inference-stack package: scanned too
    site.dist("hostonly", "1.0", files={"hostonly/_impl.so": Path(sys.executable).resolve()})  # ELF, no GPU code
    binaries = {Path(b["path"]).name: b for b in collect(site.path)["kernels.binaries"]["value"]}
    assert set(binaries) == {"libtorch_cuda.so", "libc10_cuda.so", "_C.abi3.so", "_vllm_fa2_C.abi3.so", FA2_SO,
                             "down.so", "six_ext.so"}
    assert binaries[FA2_SO]["dist"] == "flash-attn"
    assert binaries["_C.abi3.so"]["dist"] == "vllm" and binaries["down.so"]["dist"] == "vllm"
    assert binaries["six_ext.so"]["dist"] == "six" and binaries["six_ext.so"]["owner"] == "RECORD"
    assert binaries[FA2_SO]["scan"]["sm_variants"] == ["sm_86"]
    assert binaries[FA2_SO]["scan"]["ptx_variants"] == []
    assert binaries["_C.abi3.so"]["scan"]["compressed"] > 0
    assert binaries["_vllm_fa2_C.abi3.so"]["scan"]["ptx"] == [90]
    assert all(isinstance(b["elapsed_s"], float) for b in binaries.values())


def test_the_torch_link_check_runs_while_the_scan_reads_the_headers(site, monkeypatch, tmp_path):
    """The link check needs the shared objects, not their fatbin headers: it starts once the scan
    has them all (with their file keys) and runs while the scan reads headers (cold, both wait on
    the disk). Here the scanner waits until the link check has run: one after the other, it would
    wait for ever (and give up after 10 s)."""
    import threading

    from gpudoctor.probes import torch_links

    monkeypatch.setenv("GPUDOCTOR_CACHE_DIR", str(tmp_path / "cache"))  # nothing scanned yet
    site.torch(lib=SM80_SM90_PTX90)
    site.dist("six", "1.17.0", files={"six_ext.so": SM86})
    link_check_ran = threading.Event()
    real_links = torch_links.collect
    given = []

    def links(items, *args, **kwargs):
        given.extend(items)
        link_check_ran.set()
        return real_links(items, *args, **kwargs)

    waits = []

    def scanner(path):
        waits.append(link_check_ran.wait(10))
        return fatbin.scan(path)

    monkeypatch.setattr(torch_links, "collect", links)
    facts = collect(site.path, scanner=scanner)
    assert waits and all(waits)
    assert {Path(item["path"]).name for item in given} >= {"six_ext.so", "libtorch_cuda.so"}
    assert all(isinstance(item["key"], list) for item in given)  # each with the key it was looked up by
    assert facts["torch.extensions"]["status"] == "ok"


def test_editable_install_binaries_are_found(site, tmp_path):
    source = tmp_path / "src" / "vllm"
    (source / "vllm_flash_attn").mkdir(parents=True)
    shutil.copyfile(SM86, source / "_C.abi3.so")
    site.dist("vllm", "0.21.0.dev1+g123.precompiled")
    (site.path / "__editable___vllm_0_21_0_finder.py").write_text(
        f"MAPPING = {{'vllm': {str(source)!r}}}\nNAMESPACES = {{}}\n", encoding="utf-8")
    facts = collect(site.path)
    assert facts["packages.editable"]["value"] == {"vllm": str(source)}
    assert [b["path"] for b in facts["kernels.binaries"]["value"]] == [str(source / "_C.abi3.so")]


def test_unreadable_binary_is_a_scan_status(site):
    site.dist("flash-attn", "2.8.3", files={FA2_SO: b"\x7fELF truncated"})
    [binary] = collect(site.path)["kernels.binaries"]["value"]
    assert binary["scan"]["status"] == "error" and binary["scan"]["detail"]


# --- the probe, in-process and in another interpreter -----------------------------------------
def test_script_form_runs_in_another_interpreter_with_the_same_answer(site, tmp_path):
    site.torch()
    site.dist("flash-attn", "2.8.3", files={FA2_SO: SM86})
    python = make_venv(tmp_path / "venv")
    target = SitePackages(venv_site(tmp_path / "venv"))
    target.torch()
    target.dist("flash-attn", "2.8.3", files={FA2_SO: SM86})
    facts = python_stack.collect_other(str(python), dict(os.environ, PYTHONPATH=""), timeout=60)
    assert facts["python.executable"].value == str(python)
    assert facts["python.prefix"].value == str(tmp_path / "venv")
    here = collect(site.path)
    for path in ("torch.version", "torch.cuda", "torch.arch_list", "torch.git_version"):
        got = facts[path].value
        want = here[path]["value"]
        if isinstance(want, dict):
            want = {k: v for k, v in want.items() if k != "library"}
            got = {k: v for k, v in got.items() if k != "library"}
        assert got == want, path
    scans = {Path(b["path"]).name: b["scan"] for b in facts["kernels.binaries"].value}
    assert scans[FA2_SO]["sm_variants"] == ["sm_86"]


def test_pythonpath_is_honoured_under_isolated_mode(tmp_path):
    python = make_venv(tmp_path / "venv")
    extra = SitePackages(tmp_path / "extra")
    extra.dist("vllm", "0.20.0")
    facts = python_stack.collect_other(str(python), dict(os.environ, PYTHONPATH=str(extra.path)), timeout=60)
    assert facts["packages.dists"].value["vllm"]["location"] == str(extra.path)
    assert facts["python.sys_path"].value[0] == str(extra.path)


def test_the_bootstrap_is_ascii_and_compiles():
    program = python_stack.bootstrap()
    assert program.isascii()  # under LC_ALL=C an old interpreter decodes argv as ASCII
    compile(program, "<bootstrap>", "exec")


def test_user_site_is_added_back_outside_venvs(tmp_path):
    """`-I` drops ~/.local; a normal start of a system interpreter has it, before site-packages."""
    if sys.prefix != sys.base_prefix:
        pytest.skip("the test interpreter is a venv")
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    user = SitePackages(tmp_path / ".local" / "lib" / f"python{version}" / "site-packages")
    user.dist("userpkg", "1.0")
    env = dict(os.environ, HOME=str(tmp_path), PYTHONPATH="")
    env.pop("PYTHONNOUSERSITE", None)
    facts = python_stack.collect_other(sys.executable, env, timeout=60)
    paths = facts["python.sys_path"].value
    assert paths.index(str(user.path)) < min(i for i, p in enumerate(paths) if p.endswith("site-packages") and p != str(user.path))
    assert facts["packages.dists"].value["userpkg"]["location"] == str(user.path)
    facts = python_stack.collect_other(sys.executable, dict(env, PYTHONNOUSERSITE="1"), timeout=60)
    assert "userpkg" not in facts["packages.dists"].value


def test_long_description_is_never_decoded(site):
    """A multi-byte character across a read boundary in the body is not a METADATA error."""
    body = ("x" * 16380 + "—" * 10 + "\xe9").encode("utf-8")
    site.dist("vllm", "0.20.0", metadata=b"Metadata-Version: 2.1\nName: vllm\nVersion: 0.20.0\n\n" + body)
    site.dist("dangling", "1.0")
    shutil.rmtree(site.path / "dangling-1.0.dist-info")
    os.symlink("gone-1.0.dist-info", site.path / "dangling-1.0.dist-info")
    facts = collect(site.path)
    assert facts["packages.dists"]["value"]["vllm"]["version"] == "0.20.0"
    assert [(Path(u["path"]).name, u["detail"]) for u in facts["packages.unreadable"]["value"]] == [
        ("dangling-1.0.dist-info", "No such file or directory")]


def test_a_program_too_long_for_argv_goes_to_the_childs_stdin_not_to_a_file(monkeypatch, tmp_path):
    """Where gpudoctor's modules are no plain files (a zip), the bootstrap carries their sources
    (~320 kB), longer than one argv string may be; it reaches the child on its standard input, so
    a temp directory that cannot be written (a read-only container) costs nothing."""
    import tempfile

    python = make_venv(tmp_path / "venv")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "no-such-dir"))
    monkeypatch.setattr(python_stack, "_source_file", lambda module: None)
    monkeypatch.setenv("GPUDOCTOR_CACHE_DIR", str(tmp_path / "cache"))  # nothing compiled yet: the carried sources are
    assert len(python_stack.bootstrap({})) > child.ARG_MAX
    facts = python_stack.collect_other(str(python), dict(os.environ, PYTHONPATH=""), timeout=60)
    assert facts["python.executable"].value == str(python) and facts["kernels.scan"].ok
    assert not (tmp_path / "no-such-dir").exists()


def test_pth_files_give_the_path_a_normal_start_gives_without_running_their_imports(tmp_path):
    """The child starts with -S and runs site.main() itself (python_stack.SITE_FLAGS): the path lines of
    the venv's .pth files are on the path, and so is what an "import" line adds to sys.path; a line
    that only imports a module (numba-cuda's redirector, coverage's hook) is not run: here one that
    would sleep 30 s and one that raises."""
    python = make_venv(tmp_path / "venv")
    site = venv_site(tmp_path / "venv")
    (tmp_path / "extra").mkdir()
    (tmp_path / "added").mkdir()
    (site / "a_path.pth").write_text(f"# a comment\n{tmp_path / 'extra'}\n{tmp_path / 'missing'}\n")
    (site / "b_adds.pth").write_text(f"import sys; sys.path.append({str(tmp_path / 'added')!r})\n")
    normal = json.loads(subprocess.run([str(python), "-I", "-c", "import sys, json; print(json.dumps(sys.path))"],
                                       capture_output=True, text=True, timeout=60).stdout)
    (site / "c_slow.pth").write_text("import time; time.sleep(30)\n")
    (site / "d_broken.pth").write_text("import module_that_is_not_there\n")
    started = time.monotonic()
    facts = python_stack.collect_other(str(python), dict(os.environ, PYTHONPATH=""), timeout=20)
    assert time.monotonic() - started < 15, "a .pth import line was run"
    assert facts["python.sys_path"].value == list(dict.fromkeys(p for p in normal if p))  # (site runs an import line once per visit of its directory)
    assert str(tmp_path / "extra") in facts["python.sys_path"].value and str(tmp_path / "added") in facts["python.sys_path"].value
    assert facts["kernels.scan"].ok


def test_the_program_names_the_doctors_files_and_the_child_compiles_them_only_when_not_cached(tmp_path, monkeypatch):
    """The bootstrap names each module's file and the key of its compiled code (~8 kB, on the command
    line): a child with an empty code cache reads and compiles the files; a file that is not the one
    the key names (changed while the check ran) is refused, never run."""
    program = python_stack.bootstrap({"GPUDOCTOR_CACHE_DIR": str(tmp_path / "cache")})
    assert len(program) < child.ARG_MAX
    monkeypatch.setattr(python_stack, "seed_code", lambda environ: None)  # the child alone fills the cache
    python = make_venv(tmp_path / "venv")
    env = dict(os.environ, PYTHONPATH="", GPUDOCTOR_CACHE_DIR=str(tmp_path / "cache"))
    facts = python_stack.collect_other(str(python), env, timeout=60)
    assert facts["python.executable"].value == str(python) and facts["kernels.scan"].ok
    compiled = {path.name.split("-")[0] for path in (tmp_path / "cache" / "probe-code").glob("*.bin")}
    assert {"gpudoctor.probes.elf", "gpudoctor.probes.python_stack_collect"} <= compiled  # those it ran
    assert compiled <= {module.__name__ for module in python_stack.CHILD_MODULES}

    copy = tmp_path / "pkg" / "elf.py"
    copy.parent.mkdir()
    copy.write_text(python_stack._source(python_stack.elf) + "# changed\n", encoding="utf-8")
    real = python_stack._source_file
    monkeypatch.setattr(python_stack, "_source_file", lambda module: str(copy) if module is python_stack.elf else real(module))
    facts = python_stack.collect_other(str(python), dict(env, GPUDOCTOR_CACHE_DIR=str(tmp_path / "empty")), timeout=60)
    assert facts["python.executable"].status == "error"
    assert f"gpudoctor's file {copy} changed while it ran" in facts["python.executable"].detail
