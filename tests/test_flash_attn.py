"""flash-attn inventory (probes/flash_attn.py) and the GD4xx rules, on real site-packages trees.

The trees are built by tests/fakes/flash_attn_trees.py (real dist-info, RECORD with real hashes,
real ELF files); the probe is the real stdlib collector; the rules run through the engine.
Nothing of gpudoctor is mocked.
"""

import os
import shlex
import sys

import pytest

from gpudoctor.probes import flash_attn as probe
from gpudoctor.snapshot import ok
from helpers import findings, outcome
from fakes.flash_attn_trees import (EXT_OLD, ROTARY_GUARDED, TORCHABI, collect, fa2, fa4, sglang, snapshot, torch_site, vllm)
from fakes.site_packages import FA2_SO, SM86, SitePackages

PY = shlex.quote(sys.executable)
CP = "cp%d%d" % sys.version_info[:2]
HOST = {"host__cpus": 16, "host__memory_available": 64 << 30}
# CUDA_HOME with an nvcc of torch's CUDA major (12.x): nothing stops a source build but ninja.
NVCC12 = {"cuda__home": {"path": "/usr/local/cuda-12.8", "nvcc": "/usr/local/cuda-12.8/bin/nvcc", "nvcc_version": "12.8"}}


@pytest.fixture
def site(tmp_path):
    return SitePackages(tmp_path / "site-packages")


# --- the inventory ------------------------------------------------------------------------------
def test_inventory_of_fa2_and_fa4_with_their_clash(site):
    torch_site(site)
    fa2(site)
    fa4(site)  # installed second: its flash_attn/cute files overwrite FA2's copies
    facts = collect([site.path])
    variants = {v["dist"]: v for v in facts["flash_attn.variants"]["value"]}
    assert set(variants) == {"flash-attn", "flash-attn-4"}
    assert variants["flash-attn"]["variant"] == "fa2" and variants["flash-attn-4"]["variant"] == "fa4"
    assert variants["flash-attn"]["top_level"] == ["flash_attn", "flash_attn_2_cuda"]
    assert variants["flash-attn-4"]["top_level"] == ["flash_attn"] and variants["flash-attn-4"]["extensions"] == []
    [ext] = variants["flash-attn"]["extensions"]
    assert ext["module"] == "flash_attn_2_cuda" and ext["path"] == str(site.path / FA2_SO)
    assert ext["elf"]["status"] == "ok"  # the H200 fixture is a real ELF (no torch symbols in it)

    namespace = facts["flash_attn.namespace"]["value"]
    assert namespace["kind"] == "regular" and namespace["ops"] and namespace["cute"] and not namespace["extend_path"]
    assert namespace["owners"]["cute"] == ["flash-attn", "flash-attn-4"] and namespace["owners"]["ops"] == ["flash-attn"]

    [clash] = facts["flash_attn.clashes"]["value"]
    assert clash["dists"] == ["flash-attn", "flash-attn-4"] and clash["count"] == 2
    assert clash["examples"] == ["flash_attn/cute/__init__.py", "flash_attn/cute/interface.py"]
    # The files on disk are flash-attn-4's (installed last): FA2's RECORD hashes no longer match.
    assert clash["on_disk"] == {"flash-attn": 0, "flash-attn-4": 2, "other": 0, "missing": 0, "unchecked": 0}


def test_fa2_installed_after_fa4_wins_the_shared_files(site):
    torch_site(site)
    fa4(site)
    fa2(site)
    [clash] = collect([site.path])["flash_attn.clashes"]["value"]
    assert clash["on_disk"]["flash-attn"] == 2 and clash["on_disk"]["flash-attn-4"] == 0
    snap = snapshot(site.path, gpu="sm_90")
    [finding] = findings(snap, "GD402")
    assert "flash-attn was installed last" in finding.message
    # On Hopper FA4 fits: the fix reinstalls it last, after FA2.
    assert finding.fix.commands[-1].startswith(f"{PY} -m pip install --no-deps --force-reinstall flash-attn-4==4.0.0b36")


def test_local_version_tags_are_parsed():
    assert probe.parse_local_tag("2.8.3+cu12torch2.7cxx11abiTRUE") == {
        "raw": "cu12torch2.7cxx11abiTRUE", "torch": "2.7", "cxx11abi": True, "cuda": "12", "cuda_major": 12}
    tag = probe.parse_local_tag("2.6.3+cu118torch2.0cxx11abiFALSE")
    assert (tag["cuda"], tag["cuda_major"], tag["torch"], tag["cxx11abi"]) == ("11.8", 11, "2.0", False)
    assert probe.parse_local_tag("2.8.3") is None
    assert probe.parse_local_tag("2.8.3+local") == {"raw": "local"}
    assert probe.parse_local_tag("2.7.4+rocm62torch2.5cxx11abiTRUE")["rocm"] == "62"


def test_nothing_installed_gives_empty_facts_not_errors(site):
    torch_site(site)
    facts = collect([site.path])
    assert facts["flash_attn.variants"] == {"value": [], "status": "ok", "source": "dist-info, RECORD, ELF", "detail": "none installed"}
    assert facts["flash_attn.namespace"]["value"] == {"path": None, "dirs": [], "importable": False}
    assert facts["flash_attn.vllm_builds"]["status"] == "absent"
    assert "flash_attn.build_env" not in facts
    snap = snapshot(site.path)
    for rule_id in ("GD401", "GD402", "GD403", "GD404", "GD405"):
        assert outcome(snap, rule_id).status == "not_applicable", rule_id


def test_vllm_bundled_builds_are_listed(site):
    torch_site(site)
    vllm(site)
    builds = collect([site.path])["flash_attn.vllm_builds"]["value"]
    assert builds["present"] and builds["fa2"] == "_vllm_fa2_C.abi3.so" and builds["fa3"] == "_vllm_fa3_C.abi3.so" and builds["fa4"] == "cute"


# --- GD401 variant vs GPU -------------------------------------------------------------------
def test_gd401_fa4_alone_on_ampere(site):
    torch_site(site)
    fa4(site)
    [finding] = findings(snapshot(site.path, gpu="sm_86", **HOST), "GD401")
    assert finding.severity == "warning" and finding.subject == "flash-attn-4 / GPU 0"
    assert "flash-attn-4 4.0.0b36 is FlashAttention-4" in finding.message and "no installed engine requires it" in finding.message
    assert "vLLM" not in finding.message + finding.fix.summary + " ".join(finding.fix.commands)  # vLLM is not installed
    assert "without FA2 `flash_attn.ops` does not exist (GD403)" in finding.message
    assert finding.fix.commands[0] == f"{PY} -m pip uninstall -y flash-attn-4"
    wheel = f"flash_attn-2.8.3.post1+cu12torch2.7cxx11abiTRUE-{CP}-{CP}-linux_x86_64.whl"
    assert finding.fix.commands[1] == (f"{PY} -m pip install --no-deps --force-reinstall "
                                       f"https://github.com/Dao-AILab/flash-attention/releases/download/v2.8.3.post1/{wheel}"
                                       "  # only if other code needs flash_attn")


def test_gd401_fa4_on_hopper_and_blackwell_passes(site):
    torch_site(site)
    fa4(site)
    for gpu in ("H100", "B200"):
        assert outcome(snapshot(site.path, gpu=gpu), "GD401").status == "pass", gpu


def test_gd401_fa2_below_ampere(site):
    torch_site(site)
    fa2(site)  # its extension (sm_80/sm_90 cubins) is scanned: GD201 reports "no kernel image", once
    snap = snapshot(site.path, gpu="T4")
    assert outcome(snap, "GD401").status == "pass"
    [kernel] = findings(snap, "GD201")
    assert kernel.subject == "flash-attn / GPU 0" and "no kernels below compute capability 8.0" in kernel.fix.summary
    (site.path / FA2_SO).write_bytes(b"not an ELF file")  # GD201 cannot read it: GD401 says it
    [finding] = findings(snapshot(site.path, gpu="T4"), "GD401")
    assert "does not run on GPU 0 (T4, cc 7.5)" in finding.message and "FlashAttention only supports Ampere GPUs or newer." in finding.message
    assert finding.fix.commands == [f"{PY} -m pip uninstall -y flash-attn"]  # no vLLM here: no vLLM backend to name
    vllm(site)
    [finding] = findings(snapshot(site.path, gpu="T4"), "GD401")
    assert finding.fix.commands == [f"{PY} -m pip uninstall -y flash-attn", "vllm serve MODEL --attention-backend TRITON_ATTN  # or FLASHINFER"]
    assert outcome(snapshot(site.path, gpu="A100"), "GD401").status == "pass"


def test_gd401_fa3_off_hopper(site):
    torch_site(site)
    site.dist("flash_attn_3", "3.0.0b1", files={"flash_attn_interface.py": "import flash_attn_3._C\n", "flash_attn_3/__init__.py": "",
                                                 "flash_attn_3/_C.abi3.so": SM86})
    [finding] = findings(snapshot(site.path, gpu="RTX 4090"), "GD401")  # cc 8.9: FA3 here has only sm_86 code, which runs
    assert finding.severity == "warning" and "carries an SM80 path that runs here" in finding.message
    snap = snapshot(site.path, gpu="B200")  # sm_86 code does not run on 10.0: GD201 reports it, once
    assert outcome(snap, "GD401").status == "pass" and [f.subject for f in findings(snap, "GD201")] == ["flash-attn-3 / GPU 0"]
    (site.path / "flash_attn_3" / "_C.abi3.so").write_bytes(b"\x7fELF truncated")  # unreadable for GD201: GD401 says it
    [finding] = findings(snapshot(site.path, gpu="B200"), "GD401")
    assert finding.severity == "error" and "FA3 has no kernels for it" in finding.message
    assert finding.fix.commands[0] == f"{PY} -m pip uninstall -y flash-attn-3"
    assert outcome(snapshot(site.path, gpu="H200"), "GD401").status == "pass"


def test_gd401_without_a_gpu_is_unknown(site):
    torch_site(site)
    fa4(site)
    assert outcome(snapshot(site.path, gpu=None), "GD401").status == "unknown"


# --- GD402 clashes ---------------------------------------------------------------------------
def test_gd402_fa2_and_fa4_on_ampere(site):
    torch_site(site)
    fa2(site)
    fa4(site)
    [finding] = findings(snapshot(site.path, gpu="sm_80", **HOST), "GD402")
    assert finding.subject == "flash-attn + flash-attn-4" and finding.severity == "error"
    assert finding.message.startswith("flash-attn 2.8.3 and flash-attn-4 4.0.0b36 both install 2 files into flash_attn/cute")
    assert "2 match flash-attn-4's RECORD — flash-attn-4 was installed last" in finding.message
    wheel = f"https://github.com/Dao-AILab/flash-attention/releases/download/v2.8.3/flash_attn-2.8.3+cu12torch2.7cxx11abiTRUE-{CP}-{CP}-linux_x86_64.whl"
    assert finding.fix.commands == [
        f"{PY} -m pip uninstall -y flash-attn flash-attn-4  # both: each one's uninstall removes the other's files",
        f"{PY} -m pip install --no-deps --force-reinstall {wheel}",
    ]
    assert "flash-attn-4 is not for this GPU (GD401)" in finding.fix.summary
    sglang(site)  # now an installed engine requires flash-attn-4: the clean reinstall puts it back
    [finding] = findings(snapshot(site.path, gpu="sm_80", **HOST), "GD402")
    assert finding.fix.commands[-1].startswith(f"{PY} -m pip install --no-deps --force-reinstall flash-attn-4==4.0.0b36")
    assert "not for this GPU" not in finding.fix.summary
    assert outcome(snapshot(site.path, gpu="sm_80", **HOST), "GD401").status == "pass"


def test_gd402_fa3_beta_under_fa2_name(site):
    torch_site(site)
    site.dist("flash-attn", "3.0.0b1", files={"flash_attn_interface.py": "", "flash_attn_3_cuda.cpython-311-x86_64-linux-gnu.so": SM86})
    [finding] = findings(snapshot(site.path, gpu="H100"), "GD402")
    assert "flash-attn 3.0.0b1 is FlashAttention-3 (hopper/) built under FA2's distribution name" in finding.message
    assert "flash-attention#1459" in finding.message
    assert finding.fix.commands[0] == f"{PY} -m pip uninstall -y flash-attn"


def test_gd402_no_clash_passes(site):
    torch_site(site)
    fa2(site)
    assert outcome(snapshot(site.path), "GD402").status == "pass"


# --- GD403 flash_attn.ops / flash_attn.cute -------------------------------------------------------
def test_gd403_fa4_alone_and_vllm_unguarded_rotary_import(site):
    torch_site(site)
    fa4(site)
    vllm(site)
    facts = collect([site.path])
    assert facts["flash_attn.namespace"]["value"]["kind"] == "namespace"
    users = facts["flash_attn.dependents"]["value"]
    assert [(u["line"], u["function"], u["guarded"], u["rocm_only"]) for u in users] == [
        (13, "__init__", False, False), (19, "forward_hip", False, True)]
    [finding] = findings(snapshot(site.path), "GD403")
    assert finding.subject == "flash_attn.ops"
    assert finding.message.startswith("vllm 0.20.0 imports flash_attn.ops.triton.rotary unguarded "
                                      "(vllm/model_executor/layers/rotary_embedding/common.py:13, in __init__)")
    assert "a namespace package (no __init__.py: only flash_attn/cute from flash-attn-4 4.0.0b36)" in finding.message
    assert "No module named 'flash_attn.ops'" in finding.message
    assert finding.fix.commands[0] == f"{PY} -m pip uninstall -y flash-attn-4  # vLLM does not need it"


def test_gd403_guarded_import_or_fa2_present_passes(site, tmp_path):
    torch_site(site)
    fa4(site)
    vllm(site, rotary=ROTARY_GUARDED)
    assert outcome(snapshot(site.path), "GD403").status == "pass"
    other = SitePackages(tmp_path / "other")
    torch_site(other)
    fa2(other)
    fa4(other)
    vllm(other)
    assert outcome(snapshot(other.path), "GD403").status == "pass"  # FA2 provides flash_attn.ops


def test_gd403_fa4_cute_removed_by_uninstalling_fa2(site):
    torch_site(site)
    fa2(site)
    fa4(site)
    # `pip uninstall flash-attn` removes every file FA2's RECORD lists, flash_attn/cute included.
    for rel in ("flash_attn/cute/__init__.py", "flash_attn/cute/interface.py", "flash_attn/__init__.py"):
        os.unlink(site.path / rel)
    snap = snapshot(site.path)
    [finding] = [f for f in findings(snap, "GD403") if f.subject == "flash_attn.cute"]
    assert "flash-attn-4 4.0.0b36 is installed but flash_attn/cute is not importable" in finding.message
    assert finding.fix.commands == [f"{PY} -m pip install --force-reinstall --no-deps flash-attn-4==4.0.0b36"]
    # Reported once: GD505 leaves flash-attn-4's missing files to GD403 (flash-attn's are still GD505's).
    assert [f.subject for f in findings(snap, "GD505")] == ["flash-attn"]


def test_gd403_fa2_init_without_extend_path_hides_fa4_elsewhere(tmp_path):
    venv = SitePackages(tmp_path / "venv-site")
    user = SitePackages(tmp_path / "user-site")
    torch_site(venv)
    fa2(venv)
    fa4(user)
    for rel in ("flash_attn/cute/__init__.py", "flash_attn/cute/interface.py"):
        os.unlink(venv.path / rel)  # a FA2 build without its own cute copy (main's exclude)
    snap = snapshot([venv.path, user.path])
    namespace = snap.value("flash_attn.namespace")
    assert namespace["dirs"] == [str(venv.path / "flash_attn"), str(user.path / "flash_attn")] and not namespace["cute"]
    [finding] = [f for f in findings(snap, "GD403") if f.subject == "flash_attn.cute"]
    assert "has no extend_path, so Python never looks at the other flash_attn directory" in finding.message
    # With the co-existence fix (flash-attention#2331) the other directory counts.
    (venv.path / "flash_attn" / "__init__.py").write_text(
        "from pkgutil import extend_path\n__path__ = extend_path(__path__, __name__)\n", encoding="utf-8")
    assert outcome(snapshot([venv.path, user.path]), "GD403").status == "pass"


# --- GD404 built for another torch -----------------------------------------------------------------
def test_gd404_fa2_built_for_torch_27_with_torch_29(site):
    torch_site(site, version="2.9.0", cuda="12.8", abi_libs=True)
    fa2(site, version="2.8.3+cu12torch2.7cxx11abiTRUE", ext=EXT_OLD)
    snap = snapshot(site.path, gpu="sm_80", **HOST)
    [finding] = findings(snap, "GD404")
    assert finding.severity == "error" and finding.subject == "flash-attn"
    assert finding.message.startswith(
        "flash-attn 2.8.3+cu12torch2.7cxx11abiTRUE was built for another torch than torch 2.9.0+cu128: "
        "its wheel tag +cu12torch2.7cxx11abiTRUE says torch 2.7, torch 2.9.0+cu128 is installed; "
        f"{FA2_SO} needs 1 c10 symbol(s) the installed torch does not export (e.g. _ZN3c104cuda9SetDeviceEa)")
    wanted = f"flash_attn-2.8.3+cu12torch2.9cxx11abiTRUE-{CP}-{CP}-linux_x86_64.whl"
    assert finding.fix.summary.startswith(f"No prebuilt flash-attn wheel matches this torch ({wanted}): no release gpudoctor knows has it: "
                                          "the v2.8.3.post1 release has wheels for torch 2.4, 2.5, 2.6, 2.7, 2.8")
    assert finding.fix.commands[-1] == f'MAX_JOBS=7 FLASH_ATTN_CUDA_ARCHS="80" {PY} -m pip install --no-build-isolation --no-cache-dir flash-attn==2.8.3'


def test_gd404_names_the_existing_wheel_for_torch_28(site):
    torch_site(site, version="2.8.0", cuda="12.8", cmake_abi=0)  # a pre-CXX11-ABI torch build
    fa2(site, version="2.8.3+cu12torch2.7cxx11abiTRUE")
    [finding] = findings(snapshot(site.path), "GD404")
    assert "its wheel tag says cxx11abiTRUE, torch uses the pre-CXX11 ABI" in finding.message
    wheel = f"flash_attn-2.8.3+cu12torch2.8cxx11abiFALSE-{CP}-{CP}-linux_x86_64.whl"
    assert finding.fix.summary == f"Install the prebuilt wheel for this torch/CUDA/Python/ABI: {wheel}."
    assert finding.fix.commands == [f"{PY} -m pip install --no-deps --force-reinstall "
                                    f"https://github.com/Dao-AILab/flash-attention/releases/download/v2.8.3/{wheel}"]


def test_gd404_cuda_major_from_the_tag_and_from_libcudart(site):
    torch_site(site, version="2.9.0", cuda="13.0", abi_libs=True)
    fa2(site, version="2.8.3", ext=TORCHABI / "ext_good.so")  # a source build: no tag, but NEEDED libcudart.so.12
    [finding] = findings(snapshot(site.path), "GD404")
    assert f"{FA2_SO} needs libcudart.so.12, torch uses CUDA 13.0" in finding.message


def test_gd404_matching_build_passes(site):
    torch_site(site, version="2.9.0", cuda="12.8", abi_libs=True)
    fa2(site, version="2.8.3+cu12torch2.9cxx11abiTRUE", ext=TORCHABI / "ext_good.so")
    assert outcome(snapshot(site.path), "GD404").status == "pass"


# --- GD405 source-build preflight --------------------------------------------------------------------
def test_gd405_no_ninja_and_no_matching_nvcc(site):
    torch_site(site, version="2.9.0", cuda="12.8", abi_libs=True)
    fa2(site, version="2.8.3+cu12torch2.7cxx11abiTRUE", ext=EXT_OLD)
    home13 = {"path": "/usr/local/cuda-13.0", "nvcc": "/usr/local/cuda-13.0/bin/nvcc", "nvcc_version": "13.0"}
    snap = snapshot(site.path, environ={"PATH": "/nonexistent"}, cuda__home=home13, env={"MAX_JOBS": "32"}, **HOST)
    # The probe also looks in sys.prefix/bin, which is this machine's (/usr/bin/ninja on a GPU host
    # running the suite in its system Python): pin it to "no ninja anywhere".
    snap.facts["flash_attn.build_env"] = ok(dict(snap.value("flash_attn.build_env"), ninja_in_prefix=None, ninja_dist=None), "test")
    [finding] = findings(snap, "GD405")
    assert finding.severity == "error"  # the nvcc major mismatch stops the build
    assert "ninja is not installed: the build runs serially and takes hours" in finding.message
    assert "nvcc 13.0 (/usr/local/cuda-13.0) and torch's CUDA 12.8 differ in major" in finding.message
    assert "MAX_JOBS=32 with 64 GiB of memory available" in finding.message and "(MAX_JOBS=7 fits)" in finding.message
    assert finding.fix.commands[:3] == [f"{PY} -m pip install ninja",
                                        "export CUDA_HOME=/usr/local/cuda-12.8 PATH=/usr/local/cuda-12.8/bin:$PATH  # a toolkit of torch's CUDA major",
                                        "export MAX_JOBS=7"]
    assert finding.fix.commands[-1].endswith("-m pip install --no-build-isolation --no-cache-dir flash-attn==2.8.3")


def test_gd405_ninja_only_in_the_venv_bin(site, tmp_path):
    torch_site(site, version="2.9.0", cuda="12.8", abi_libs=True)
    fa2(site, version="2.8.3+cu12torch2.7cxx11abiTRUE", ext=EXT_OLD)
    snap = snapshot(site.path, environ={"PATH": "/nonexistent"}, **NVCC12, **HOST)
    build = dict(snap.value("flash_attn.build_env"), ninja_in_prefix=str(tmp_path / "venv" / "bin" / "ninja"))
    snap.facts["flash_attn.build_env"] = ok(build, "test")
    [finding] = findings(snap, "GD405")
    assert finding.severity == "warning" and "is in " in finding.message and "but not on PATH" in finding.message
    assert finding.fix.commands[0] == f"export PATH={tmp_path / 'venv' / 'bin'}:$PATH"


def test_gd405_arch_list_leaving_out_the_gpu(site):
    torch_site(site, version="2.9.0", cuda="12.8", abi_libs=True)
    fa2(site, version="2.8.3+cu12torch2.7cxx11abiTRUE", ext=EXT_OLD)
    snap = snapshot(site.path, gpu="A10", environ={"PATH": os.defpath}, env={"FLASH_ATTN_CUDA_ARCHS": "90;100"}, **NVCC12, **HOST)
    snap.facts["flash_attn.build_env"] = ok({"ninja": "/usr/bin/ninja"}, "test")
    [finding] = findings(snap, "GD405")
    assert finding.severity == "error" and "FLASH_ATTN_CUDA_ARCHS=90;100 leaves out 80" in finding.message


def test_gd405_passes_when_ready_or_a_wheel_exists(site, tmp_path):
    torch_site(site, version="2.9.0", cuda="12.8", abi_libs=True)
    fa2(site, version="2.8.3+cu12torch2.7cxx11abiTRUE", ext=EXT_OLD)
    snap = snapshot(site.path, **NVCC12, **HOST)
    snap.facts["flash_attn.build_env"] = ok({"ninja": "/usr/bin/ninja"}, "test")
    assert outcome(snap, "GD405").status == "pass"
    other = SitePackages(tmp_path / "other")
    torch_site(other, version="2.8.0", cuda="12.8")
    fa2(other, version="2.8.3+cu12torch2.7cxx11abiTRUE")
    assert outcome(snapshot(other.path, environ={"PATH": "/nonexistent"}), "GD405").status == "pass"  # the v2.8.3 wheel exists
    fine = SitePackages(tmp_path / "fine")
    torch_site(fine)
    fa2(fine, version="2.8.3+cu12torch2.7cxx11abiTRUE")
    assert outcome(snapshot(fine.path), "GD405").status == "not_applicable"


# --- bad input -----------------------------------------------------------------------------------
def test_broken_files_never_crash_the_inventory(site):
    torch_site(site)
    info = fa2(site)
    (info / "RECORD").write_bytes(b'\xff\xfe"not,csv\n"\n\x00\x00garbage,,,\nflash_attn/cute/interface.py\n'
                                  + FA2_SO.encode() + b",sha256=x,1\n../../../bin/x,,\n/abs/path,,\n")
    (site.path / FA2_SO).write_bytes(b"\x7fELF\x02\x01truncated")
    info4 = fa4(site)
    (info4 / "RECORD").unlink()
    facts = collect([site.path])
    variants = {v["dist"]: v for v in facts["flash_attn.variants"]["value"]}
    assert variants["flash-attn-4"]["record"] is False
    [ext] = variants["flash-attn"]["extensions"]
    assert ext["elf"]["status"] == "error"
    assert facts["flash_attn.clashes"]["value"] == []
    snap = snapshot(site.path)
    for rule_id in ("GD401", "GD402", "GD403", "GD404", "GD405"):
        assert outcome(snap, rule_id).status in ("pass", "fail", "not_applicable", "unknown"), rule_id
        assert "crashed" not in outcome(snap, rule_id).reason


def test_a_collector_that_raises_becomes_error_facts(site):
    from gpudoctor.probes import python_stack_collect

    torch_site(site)

    def boom(ctx):
        raise RuntimeError("bad day")

    boom.__module__ = probe.__name__
    facts = python_stack_collect.collect_plain([str(site.path)], "stack", None, [boom])
    assert facts["flash_attn.variants"]["status"] == "error" and "RuntimeError: bad day" in facts["flash_attn.variants"]["detail"]
    assert facts["torch.version"]["status"] == "ok"


# --- explain -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("rule_id", ["GD401", "GD402", "GD403", "GD404", "GD405"])
def test_explain_prints_why_fix_and_sources(rule_id):
    import subprocess

    proc = subprocess.run([sys.executable, "-m", "gpudoctor", "explain", rule_id], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"{rule_id} flash-attn-")
    for heading in ("## Why", "## Fix", "## References"):
        assert heading in proc.stdout
    assert "https://" in proc.stdout.split("## References")[1]  # public sources, not research notes
