"""GD2xx (area "cuda") on the H200 snapshot, with the facts each case needs.

The base is tests/fixtures/snapshots/h200.json (recorded on a real H200). Kernel facts are
real fatbin scans of the nvcc-built fixtures (tests/fixtures/ground_truth/h200/libk_*.so);
toolkit facts come from running the real CUDA probe on toolkit trees built in tmp dirs.
Every rule has a failing and a passing case, so removing the rule fails its test.
"""

import os

import pytest

from gpudoctor.knowledge.gpus import kernel_support
from gpudoctor.probes import Context, cuda
from gpudoctor.snapshot import Snapshot, missing, ok
from helpers import outcome

from fakes.cuda_toolkit import GCC_13, NVCC_12_4, NVCC_13_0, executable, toolkit
from fakes.cuda_snapshots import H200, SCANS, binary, h200, shadow_snapshot, with_gpu

# --- which code runs where (one implementation: knowledge.gpus.kernel_support) ---------------
def test_kernel_support_on_the_real_fixtures():
    real = SCANS["sm80_sm90_ptx90"]
    assert kernel_support(real["sm_variants"], real["ptx_variants"], "8.6").how == "sm_80 cubin"
    assert kernel_support(real["sm_variants"], real["ptx_variants"], "12.0").ptx_only
    assert not kernel_support(SCANS["sm86"]["sm_variants"], SCANS["sm86"]["ptx_variants"], "8.0").runs


# --- GD201 kernel-image-missing --------------------------------------------------------------
def test_gd201_names_the_extension_and_its_archs():
    snap = h200(kernels__binaries=[binary("sm86"), binary("sm80_sm90_ptx90", "/x/vllm/_C.abi3.so", "vllm", "vllm")],
                packages__dists={"flash-attn": {"name": "flash-attn", "version": "2.8.3", "location": "/x"}})
    result = outcome(snap, "GD201")
    assert result.status == "fail"
    [finding] = result.findings
    assert finding.subject == "flash-attn / GPU 0"
    assert "flash-attn 2.8.3 has no code for GPU 0 (NVIDIA H200, cc 9.0)" in finding.message
    assert "flash_attn_2_cuda.cpython-312-x86_64-linux-gnu.so (sm_86)" in finding.message
    assert "no kernel image is available" in finding.message
    assert "FLASH_ATTN_CUDA_ARCHS=\"90\"" in finding.fix.commands[0] and "flash-attn==2.8.3" in finding.fix.commands[0]


def test_gd201_passes_with_cubins_or_ptx_for_the_gpu():
    assert outcome(h200(kernels__binaries=[binary("sm80_sm90_ptx90")]), "GD201").status == "pass"
    # cc 12.0 has no cubin here but JIT-compiles compute_90 PTX: runnable (GD202 judges the driver).
    assert outcome(with_gpu(h200(kernels__binaries=[binary("sm80_sm90_ptx90")]), "12.0"), "GD201").status == "pass"
    assert outcome(with_gpu(h200(kernels__binaries=[binary("compressed")]), "12.0"), "GD201").status == "fail"


def test_gd201_fa2_below_ampere_suggests_another_backend():
    snap = with_gpu(h200(kernels__binaries=[binary("compressed")]), "7.5", "Tesla T4")
    [finding] = outcome(snap, "GD201").findings
    assert "no kernels below compute capability 8.0" in finding.fix.summary
    assert any("--attention-backend" in c for c in finding.fix.commands)


def test_gd201_unreadable_binary_is_unknown_not_pass():
    bad = dict(binary("sm86"), scan={"status": "no_permission", "detail": "Permission denied"})
    result = outcome(h200(kernels__binaries=[bad]), "GD201")
    assert result.status == "unknown" and "no_permission" in result.reason


def test_gd201_ignores_torch_which_gd502_judges():
    snap = h200(kernels__binaries=[binary("sm86", "/x/torch/lib/libtorch_cuda.so", "torch", "torch")])
    assert outcome(snap, "GD201").status == "not_applicable"


# --- GD202 ptx-too-new-for-driver ------------------------------------------------------------
def test_gd202_ptx_only_path_and_old_driver():
    snap = with_gpu(h200(kernels__binaries=[binary("sm80_sm90_ptx90")]), "12.0", "NVIDIA RTX PRO 6000 Blackwell")
    snap.facts["driver.cuda_max"] = ok("12.8", "test")
    snap.facts["driver.version"] = ok("570.124.06", "test")
    [finding] = outcome(snap, "GD202").findings
    assert "PTX compute_90" in finding.message and "needs CUDA 13.0" in finding.message
    assert "unsupported toolchain" in finding.message
    assert "580.65.06" in finding.fix.summary  # CUDA 13.0's own driver (facts.md §1.1)


def test_gd202_passes_with_a_new_enough_driver_or_a_cubin():
    snap = with_gpu(h200(kernels__binaries=[binary("sm80_sm90_ptx90")]), "12.0")
    assert outcome(snap, "GD202").status == "pass"  # the H200's driver is CUDA 13.0
    snap = h200(kernels__binaries=[binary("sm80_sm90_ptx90")])
    snap.facts["driver.cuda_max"] = ok("12.8", "test")
    assert outcome(snap, "GD202").status == "pass"  # cc 9.0 runs the sm_90 cubin, PTX unused


# --- toolkit facts from the real probe on built trees ------------------------------------------
@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "root"
    toolkit(root, "12.4", NVCC_12_4)
    toolkit(root, "13.0", NVCC_13_0)
    bindir = tmp_path / "bin"
    executable(bindir / "gcc", GCC_13)
    return root, bindir


def probed(root, environ, **extra):
    snap = h200(**extra)
    snap.facts.update(cuda.collect(Context(root=str(root), environ=environ)))
    return snap


def test_gd203_nvcc_major_differs_from_torch(tree):
    root, bindir = tree
    snap = probed(root, {"PATH": str(bindir), "CUDA_HOME": str(root / "usr/local/cuda-12.4")})
    [finding] = outcome(snap, "GD203").findings
    assert ("The detected CUDA version (12.4) mismatches the version that was used to compile PyTorch (13.0). "
            "Please make sure to use the same CUDA versions.") in finding.message
    assert finding.fix.commands == [f"export CUDA_HOME={root}/usr/local/cuda-13.0 PATH={root}/usr/local/cuda-13.0/bin:$PATH"]


def test_gd203_same_major_passes(tree):
    root, bindir = tree
    snap = probed(root, {"PATH": str(bindir), "CUDA_HOME": str(root / "usr/local/cuda-13.0")})
    assert outcome(snap, "GD203").status == "pass"


def test_gd204_toolkit_newer_than_driver(tree):
    root, bindir = tree
    snap = probed(root, {"PATH": str(bindir), "CUDA_HOME": str(root / "usr/local/cuda-13.0")})
    snap.facts["driver.cuda_max"] = ok("12.4", "test")
    [finding] = outcome(snap, "GD204").findings
    assert finding.severity == "error" and "CUDA driver version is insufficient" in finding.message
    assert any("cuda-12.4" in c for c in finding.fix.commands)
    snap.facts["driver.cuda_max"] = ok("13.0", "test")
    assert outcome(snap, "GD204").status == "pass"


def test_gd204_same_major_is_a_warning(tree):
    root, bindir = tree
    snap = probed(root, {"PATH": str(bindir), "CUDA_HOME": str(root / "usr/local/cuda-12.4")})
    snap.facts["driver.cuda_max"] = ok("12.2", "test")
    [finding] = outcome(snap, "GD204").findings
    assert finding.severity == "warning" and "unsupported toolchain" in finding.message


@pytest.mark.parametrize("cuda_version, compiler, status", [
    ("12.9", ("gcc", "15.2.0"), "fail"),   # 12.9 accepts gcc 14 at most (facts.md §5.2)
    ("12.9", ("gcc", "14.2.0"), "pass"),
    ("13.0", ("gcc", "13.3.0"), "pass"),   # the H200: nvcc 13.0, gcc 13.3
    ("12.4", ("clang", "18.1.3"), "fail"),  # 12.4 accepts clang 17 at most
    ("12.7", ("gcc", "14.1.0"), "unknown"),  # no 12.7 release; 12.6 says 13, 12.8 says 14
    ("13.2", ("gcc", "15.1.0"), "pass"),   # 13.0 and 13.5 disagree (15, 16), but 15 is fine for both
])
def test_gd205_host_compiler_limits(cuda_version, compiler, status):
    kind, version = compiler
    snap = h200(cuda__home={"path": "/usr/local/cuda", "nvcc_version": cuda_version, "nvcc": "/usr/local/cuda/bin/nvcc"},
                cuda__gcc=[{"via": ["CC"], "command": kind, "path": f"/usr/bin/{kind}", "kind": kind, "version": version}])
    result = outcome(snap, "GD205")
    assert result.status == status, result.reason
    if status == "fail":
        assert "unsupported" in result.findings[0].message
        assert result.findings[0].fix.commands[1].startswith("export CC=")


def test_gd205_with_the_probed_h200_shape(tree):
    root, bindir = tree
    executable(bindir / "gcc", "gcc (GCC) 15.3.0\n")
    snap = probed(root, {"PATH": str(bindir), "CUDA_HOME": str(root / "usr/local/cuda-12.4")})
    [finding] = outcome(snap, "GD205").findings
    assert "gcc 15.3.0" in finding.message and "accepts gcc 13 at most" in finding.message


def test_gd206_cuda_home_points_nowhere(tree):
    root, bindir = tree
    snap = probed(root, {"PATH": str(bindir), "CUDA_HOME": "/opt/cuda-11.8"})
    [finding] = outcome(snap, "GD206").findings
    assert "CUDA_HOME=/opt/cuda-11.8 does not exist" in finding.message
    assert "cuda-13.0" in finding.fix.commands[0]  # torch's CUDA major, from the toolkits found


def test_gd206_cuda_home_and_path_nvcc_disagree(tree):
    root, bindir = tree
    snap = probed(root, {"PATH": f"{root}/usr/local/cuda-13.0/bin:{bindir}", "CUDA_HOME": str(root / "usr/local/cuda-12.4")})
    [finding] = outcome(snap, "GD206").findings
    assert "nvcc 12.4.99" in finding.message and "13.0.88" in finding.message


def test_gd206_no_home_but_versioned_toolkits(tree):
    root, bindir = tree  # no /usr/local/cuda link, no nvcc on PATH, no CUDA_HOME
    [finding] = outcome(probed(root, {"PATH": str(bindir)}), "GD206").findings
    assert "CUDA was not found on the system" in finding.message


def test_gd206_wrapper_nvcc_gives_a_home_without_headers(tree):
    root, bindir = tree
    os.symlink("cuda-13.0", root / "usr" / "local" / "cuda")
    executable(root / "usr" / "local" / "bin" / "nvcc", NVCC_13_0)
    [finding] = outcome(probed(root, {"PATH": f"{root}/usr/local/bin:{bindir}"}), "GD206").findings
    assert f"CUDA_HOME={root}/usr/local (nvcc on PATH)" in finding.message and "no include/cuda_runtime_api.h" in finding.message


def test_gd206_consistent_setup_passes(tree):
    root, bindir = tree
    kit = root / "usr/local/cuda-13.0"
    assert outcome(probed(root, {"PATH": f"{kit}/bin:{bindir}", "CUDA_HOME": str(kit)}), "GD206").status == "pass"
    assert outcome(probed(root.parent / "empty", {"PATH": str(bindir)}), "GD206").status == "not_applicable"


def test_gd207_older_nvjitlink_shadows_the_wheel(tmp_path):
    """pytorch/pytorch#111469: LD_LIBRARY_PATH=/usr/local/cuda-12.1/lib64 with torch cu124."""
    snap = shadow_snapshot(tmp_path, [("libnvJitLink.so.12.1.105", "libnvJitLink.so.12")], {"nvidia-nvjitlink-cu12": "12.4.127"})
    [finding] = outcome(snap, "GD207").findings
    assert finding.severity == "error" and "libnvJitLink.so.12 (12.1.105)" in finding.message
    assert "nvidia-nvjitlink-cu12 12.4.127" in finding.message and "undefined symbol" in finding.message


def test_gd207_same_version_or_other_soname_passes(tmp_path):
    snap = shadow_snapshot(tmp_path, [("libnvJitLink.so.12.4.127", "libnvJitLink.so.12"), ("libcudart.so.12.1.105", "libcudart.so.12")],
                           {"nvidia-nvjitlink-cu12": "12.4.127", "nvidia-cuda-runtime": "13.0.96"})
    assert outcome(snap, "GD207").status == "pass"


def test_gd207_newer_nccl_is_a_warning(tmp_path):
    snap = shadow_snapshot(tmp_path, [("libnccl.so.2.29.1", "libnccl.so.2")], {"nvidia-nccl-cu13": "2.28.9"})
    [finding] = outcome(snap, "GD207").findings
    assert finding.severity == "warning"


def test_cuda_rules_need_their_facts():
    """A replay of a snapshot without toolkit facts says unknown, never pass."""
    snap = Snapshot.load(str(H200))
    for rule_id in ("GD201", "GD202", "GD203", "GD204", "GD205", "GD206", "GD207"):
        assert outcome(snap, rule_id).status == "unknown", rule_id
    snap.facts["kernels.binaries"] = missing("timeout", "no answer", "fatbin")
    assert "timeout" in outcome(snap, "GD201").reason


def test_gd201_arch_scoped_libraries_are_judged_only_where_they_are_used():
    """What vLLM loads where comes from its source (vllm.extensions, probes/vllm_kernels.py):
    FA3 (sm_90a only, imported under try) and FA2 (sm_80+) are subsets of the required _C."""
    fa3 = dict(binary("sm86", "/x/vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so", "vllm", "vllm"),
               scan=dict(SCANS["sm86"], sm_variants=["sm_90a"], sm=[90]))
    fa2 = binary("sm80_sm90_ptx90", "/x/vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so", "vllm", "vllm")
    core = dict(binary("compressed", "/x/vllm/_C.abi3.so", "vllm", "vllm"),
                scan=dict(SCANS["compressed"], sm_variants=["sm_75", "sm_80", "sm_90"], sm=[75, 80, 90]))
    guarded = [{"where": "vllm_flash_attn/flash_attn_interface.py:14", "how": "import", "guard": "try at line 13"}]
    exts = ok({"root": "/x/vllm", "extensions": [
        {"module": "vllm._C", "path": core["path"], "role": "required", "imports": [{"where": "platforms/cuda.py:18", "how": "import"}], "gates": []},
        {"module": "vllm.vllm_flash_attn._vllm_fa2_C", "path": fa2["path"], "role": "optional", "imports": guarded, "gates": []},
        {"module": "vllm.vllm_flash_attn._vllm_fa3_C", "path": fa3["path"], "role": "optional", "imports": guarded, "gates": []},
    ]}, "test")
    t4 = with_gpu(h200(kernels__binaries=[fa3, fa2, core], vllm__extensions=exts), "7.5", "Tesla T4")
    result = outcome(t4, "GD201")
    assert result.status == "pass" and "vllm.vllm_flash_attn._vllm_fa3_C: built for sm_90a only" in result.reason
    a100 = with_gpu(h200(kernels__binaries=[fa3, fa2, core], vllm__extensions=exts), "8.0", "A100")
    assert outcome(a100, "GD201").status == "pass"
    # The required extension without the GPU's code is an error, whatever the optional ones do.
    l40 = with_gpu(h200(kernels__binaries=[fa3, fa2, dict(core, scan=SCANS["sm86"])], vllm__extensions=exts), "8.0", "A100")
    [finding] = outcome(l40, "GD201").findings
    assert "_C.abi3.so (sm_86)" in finding.message and "_vllm_fa" not in finding.message
    # Without the fact (a replayed old snapshot), an FA3 library of sm_90a only is still judged
    # on the Hopper GPUs alone, and without its code there it is reported.
    assert outcome(with_gpu(h200(kernels__binaries=[fa3]), "8.0", "A100"), "GD201").status == "pass"
    fa3_without_90 = dict(fa3, scan=dict(SCANS["sm86"]))
    [finding] = outcome(h200(kernels__binaries=[fa3_without_90]), "GD201").findings
    assert "_vllm_fa3_C.abi3.so (sm_86)" in finding.message
