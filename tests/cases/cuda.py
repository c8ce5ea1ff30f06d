"""GD2xx CUDA toolkit and kernel rules: pass, fail, unknown and not-applicable cases.

Toolkit facts come from the real probe (probes/cuda.py) over toolkit trees built under
tmp_path; kernel facts from the real fatbin reader over the H200's compiled .so files.
"""

from __future__ import annotations

from gpudoctor.probes import Context, cuda
from gpudoctor.snapshot import Snapshot, ok

from cases import Case
from test_cuda_probe import GCC_13, NVCC_12_4, NVCC_13_0, executable, toolkit
from test_cuda_rules import H200, binary, h200, shadow_snapshot, with_gpu


def _tree(tmp):
    root = tmp / "root"
    toolkit(root, "12.4", NVCC_12_4)
    toolkit(root, "13.0", NVCC_13_0)
    bindir = tmp / "bin"
    executable(bindir / "gcc", GCC_13)
    return root, bindir


def probed(environ, cuda_max=None, empty=False):
    """The H200 snapshot with the toolkit facts of a built tree; ``environ`` may name {root} and {bin}."""
    def build(tmp):
        root, bindir = _tree(tmp)
        env = {k: v.format(root=root, bin=bindir) for k, v in environ.items()}
        snap = h200()
        snap.facts.update(cuda.collect(Context(root=str(tmp / "empty" if empty else root), environ=env)))
        if cuda_max:
            snap.facts["driver.cuda_max"] = ok(cuda_max, "test")
        return snap
    return build


def shadowed(libs, wheels):
    return lambda tmp: shadow_snapshot(tmp, libs, wheels)


def gcc(cuda_version, kind, version):
    return lambda tmp: h200(cuda__home={"path": "/usr/local/cuda", "nvcc_version": cuda_version, "nvcc": "/usr/local/cuda/bin/nvcc"},
                            cuda__gcc=[{"via": ["CC"], "command": kind, "path": f"/usr/bin/{kind}", "kind": kind, "version": version}])


def replay(rule_edit=None):
    def build(tmp):
        snap = Snapshot.load(str(H200))
        if rule_edit:
            rule_edit(snap)
        return snap
    return build


def _old_driver_blackwell(tmp):
    snap = with_gpu(h200(kernels__binaries=[binary("sm80_sm90_ptx90")]), "12.0", "NVIDIA RTX PRO 6000 Blackwell")
    snap.facts["driver.cuda_max"] = ok("12.8", "test")
    snap.facts["driver.version"] = ok("570.124.06", "test")
    return snap


def _h200_cuda_12_8(tmp):
    snap = h200(kernels__binaries=[binary("sm80_sm90_ptx90")])
    snap.facts["driver.cuda_max"] = ok("12.8", "test")
    return snap


NO_PERMISSION = dict(binary("sm86"), scan={"status": "no_permission", "detail": "Permission denied"})
K13 = "{root}/usr/local/cuda-13.0"
K12 = "{root}/usr/local/cuda-12.4"

CASES = [
    # GD201 kernel-image-missing
    Case("sm80-sm90-cubins-on-h200", "GD201", lambda tmp: h200(kernels__binaries=[binary("sm80_sm90_ptx90")]), "pass"),
    Case("sm86-only-flash-attn-on-h200", "GD201",
         lambda tmp: h200(kernels__binaries=[binary("sm86")],
                          packages__dists={"flash-attn": {"name": "flash-attn", "version": "2.8.3", "location": "/x"}}),
         "fail", "error", ("flash-attn 2.8.3 has no code for GPU 0 (NVIDIA H200, cc 9.0)", "no kernel image is available"),
         subject="flash-attn / GPU 0", commands=("FLASH_ATTN_CUDA_ARCHS",)),
    Case("unreadable-binary", "GD201", lambda tmp: h200(kernels__binaries=[NO_PERMISSION]), "unknown", message=("no_permission",)),
    Case("torch-is-gd502s", "GD201",
         lambda tmp: h200(kernels__binaries=[binary("sm86", "/x/torch/lib/libtorch_cuda.so", "torch", "torch")]), "not_applicable"),
    # GD202 ptx-too-new-for-driver
    Case("cuda-13-driver-jits-compute-90", "GD202",
         lambda tmp: with_gpu(h200(kernels__binaries=[binary("sm80_sm90_ptx90")]), "12.0"), "pass"),
    Case("cubin-used-ptx-irrelevant", "GD202", _h200_cuda_12_8, "pass"),
    Case("ptx-only-on-blackwell-with-cuda-12.8-driver", "GD202", _old_driver_blackwell, "fail", "error",
         ("PTX compute_90", "needs CUDA 13.0", "unsupported toolchain"), subject="flash_attn_2_cuda.cpython-312-x86_64-linux-gnu.so / GPU 0"),
    Case("no-kernel-facts", "GD202", replay(), "unknown"),
    # GD203 nvcc-torch-cuda-mismatch
    Case("nvcc-13.0-torch-13.0", "GD203", probed({"PATH": "{bin}", "CUDA_HOME": K13}), "pass"),
    Case("nvcc-12.4-torch-13.0", "GD203", probed({"PATH": "{bin}", "CUDA_HOME": K12}), "fail", "warning",
         ("The detected CUDA version (12.4) mismatches the version that was used to compile PyTorch (13.0).",),
         commands=("cuda-13.0",)),
    Case("no-toolkit-facts", "GD203", replay(), "unknown"),
    # GD204 toolkit-newer-than-driver
    Case("toolkit-13.0-driver-13.0", "GD204", probed({"PATH": "{bin}", "CUDA_HOME": K13}, cuda_max="13.0"), "pass"),
    Case("toolkit-13.0-driver-12.4", "GD204", probed({"PATH": "{bin}", "CUDA_HOME": K13}, cuda_max="12.4"), "fail", "error",
         ("CUDA driver version is insufficient",), commands=("cuda-12.4",)),
    Case("toolkit-12.4-driver-12.2-same-major", "GD204", probed({"PATH": "{bin}", "CUDA_HOME": K12}, cuda_max="12.2"), "fail",
         "warning", ("unsupported toolchain",)),
    # GD205 host-compiler-too-new
    Case("nvcc-13.0-gcc-13.3-the-h200", "GD205", gcc("13.0", "gcc", "13.3.0"), "pass"),
    Case("nvcc-12.9-gcc-15", "GD205", gcc("12.9", "gcc", "15.2.0"), "fail", "warning", message=("unsupported",), subject="CC",
         commands=("export CC=",)),
    Case("nvcc-12.7-no-such-release", "GD205", gcc("12.7", "gcc", "14.1.0"), "unknown"),
    # GD206 cuda-home-mismatch
    Case("home-and-path-agree", "GD206", probed({"PATH": K13 + "/bin:{bin}", "CUDA_HOME": K13}), "pass"),
    Case("cuda-home-points-nowhere", "GD206", probed({"PATH": "{bin}", "CUDA_HOME": "/opt/cuda-11.8"}), "fail", "warning",
         message=("CUDA_HOME=/opt/cuda-11.8 does not exist",), commands=("cuda-13.0",)),
    Case("no-toolkit-at-all", "GD206", probed({"PATH": "{bin}"}, empty=True), "not_applicable"),
    # GD207 ld-library-path-shadows
    Case("same-version-or-other-soname", "GD207",
         shadowed([("libnvJitLink.so.12.4.127", "libnvJitLink.so.12"), ("libcudart.so.12.1.105", "libcudart.so.12")],
                  {"nvidia-nvjitlink-cu12": "12.4.127", "nvidia-cuda-runtime": "13.0.96"}), "pass"),
    Case("older-nvjitlink-shadows-the-wheel", "GD207",
         shadowed([("libnvJitLink.so.12.1.105", "libnvJitLink.so.12")], {"nvidia-nvjitlink-cu12": "12.4.127"}), "fail", "error",
         ("libnvJitLink.so.12 (12.1.105)", "nvidia-nvjitlink-cu12 12.4.127", "undefined symbol"), subject="libnvJitLink.so.12"),
    Case("newer-nccl", "GD207", shadowed([("libnccl.so.2.29.1", "libnccl.so.2")], {"nvidia-nccl-cu13": "2.28.9"}), "fail", "warning", subject="libnccl.so.2"),
    Case("no-library-facts", "GD207", replay(), "unknown"),
]
