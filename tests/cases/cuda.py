"""GD2xx CUDA toolkit and kernel rules: pass, fail, unknown and not-applicable cases.

Toolkit facts come from the real probe (probes/cuda.py) over toolkit trees built under
tmp_path; kernel facts from the real fatbin reader over the H200's compiled .so files.
"""

from __future__ import annotations

from gpudoctor.probes import Context, cuda
from gpudoctor.snapshot import Snapshot, ok

from cases import Case
from fakes.cuda_toolkit import GCC_13, NVCC_12_4, NVCC_13_0, executable, toolkit
from fakes.cuda_snapshots import H200, binary, h200, shadow_snapshot, with_gpu


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


def kernels(scan, dist, version, path, cc="9.0", name="NVIDIA H200", torch_cuda="13.0", **facts):
    """One distribution's real fatbin scan (an H200 fixture binary) on a GPU, for GD201's fix per package."""
    def build(tmp):
        snap = with_gpu(h200(kernels__binaries=[binary(scan, path, dist, path.split("/")[2])],
                             packages__dists={dist: {"name": dist, "version": version, "location": "/x"}}, **facts), cc, name)
        snap.facts["torch.cuda"] = ok(torch_cuda, "test")
        return snap
    return build
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
    # the fix per package: the wheel or index that has the GPU's code, else the rebuild for it
    Case("flash-attn-sm86-only-on-a100", "GD201", kernels("sm86", "flash-attn", "2.8.3", "/x/flash_attn/x.so", "8.0", "NVIDIA A100"),
         "fail", "error", ("flash-attn 2.8.3 has no code for GPU 0 (NVIDIA A100, cc 8.0)",),
         commands=('FLASH_ATTN_CUDA_ARCHS="80" ', "--no-cache-dir --no-deps --force-reinstall flash-attn==2.8.3"), subject="flash-attn / GPU 0"),
    Case("flash-attn-sm80-sm90-on-b200", "GD201", kernels("compressed", "flash-attn", "2.8.3", "/x/flash_attn/x.so", "10.0", "NVIDIA B200"),
         "fail", "error", ("(sm_80, sm_90)",), commands=('FLASH_ATTN_CUDA_ARCHS="100" FLASH_ATTENTION_FORCE_BUILD=TRUE',), subject="flash-attn / GPU 0"),
    Case("flash-attn-ptx-jits-on-b200", "GD201", kernels("sm80_sm90_ptx90", "flash-attn", "2.8.3", "/x/flash_attn/x.so", "10.0", "NVIDIA B200"),
         "pass"),
    Case("flashinfer-jit-cache-from-its-cu130-index", "GD201",
         kernels("sm86", "flashinfer-jit-cache", "0.6.1+cu130", "/x/flashinfer_jit_cache/jit_cache/batch_prefill/m.so"),
         "fail", "error", ("flashinfer-jit-cache 0.6.1+cu130 has no code for GPU 0 (NVIDIA H200, cc 9.0)",),
         commands=("-m pip install --force-reinstall --no-deps flashinfer-jit-cache==0.6.1 --index-url https://flashinfer.ai/whl/cu130",),
         subject="flashinfer-jit-cache / GPU 0"),
    Case("flashinfer-jit-cache-cuda-12.6-rebuilt-for-9.0a", "GD201",
         kernels("sm86", "flashinfer-jit-cache", "0.6.1", "/x/flashinfer_jit_cache/jit_cache/m.so", torch_cuda="12.6"),
         "fail", "error", ("flashinfer-jit-cache 0.6.1 has no code",),
         commands=('FLASHINFER_CUDA_ARCH_LIST="9.0a"', "-m pip uninstall -y flashinfer-jit-cache"), subject="flashinfer-jit-cache / GPU 0"),
    Case("flashinfer-jit-cache-cu128-index-lacks-b300", "GD201",
         kernels("compressed", "flashinfer-jit-cache", "0.6.1", "/x/flashinfer_jit_cache/jit_cache/m.so", "10.3", "NVIDIA B300", "12.8"),
         "fail", "error", ("cc 10.3",), commands=('FLASHINFER_CUDA_ARCH_LIST="10.3a"',), subject="flashinfer-jit-cache / GPU 0"),
    Case("flashinfer-jit-cache-with-sm90-on-h200", "GD201",
         kernels("compressed", "flashinfer-jit-cache", "0.6.1", "/x/flashinfer_jit_cache/jit_cache/m.so"), "pass"),
    Case("flashinfer-python-aot-kernels", "GD201", kernels("sm86", "flashinfer-python", "0.2.5", "/x/flashinfer/_kernels.so"),
         "fail", "error", ("flashinfer-python 0.2.5 has no code",), commands=("--force-reinstall --no-deps flashinfer-python==0.2.5",),
         subject="flashinfer-python / GPU 0"),
    Case("vllm-local-build-goes-back-to-the-release-wheel", "GD201",
         kernels("sm86", "vllm", "0.11.0", "/x/vllm/_C.abi3.so", vllm__build={"origin": "local"}),
         "fail", "error", ("vllm 0.11.0 has no code for GPU 0 (NVIDIA H200, cc 9.0): vllm/_C.abi3.so (sm_86)",),
         commands=("-m pip install --force-reinstall --no-deps vllm==0.11.0", 'TORCH_CUDA_ARCH_LIST="9.0"'), subject="vllm / GPU 0"),
    Case("vllm-index-wheel-rebuilt", "GD201", kernels("sm86", "vllm", "0.11.0", "/x/vllm/_C.abi3.so", vllm__build={"origin": "index"}),
         "fail", "error", ("vllm 0.11.0 has no code",),
         commands=('TORCH_CUDA_ARCH_LIST="9.0" /opt/torch/.venv/bin/python3 -m pip install --no-build-isolation --no-binary vllm --no-deps',),
         subject="vllm / GPU 0"),
    Case("torchvision-from-pytorchs-index", "GD201", kernels("sm86", "torchvision", "0.26.0+cu130", "/x/torchvision/_C.so"),
         "fail", "error", ("torchvision 0.26.0+cu130 has no code",),
         commands=("torchvision==0.26.0 --index-url https://download.pytorch.org/whl/cu130",), subject="torchvision / GPU 0"),
    Case("own-kernels-on-h200", "GD201", kernels("sm86", "team-kernels", "0.3.1", "/x/teamkernels/ops/k.so"),
         "fail", "error", ("team-kernels 0.3.1 has no code for GPU 0 (NVIDIA H200, cc 9.0): teamkernels/ops/k.so (sm_86)",),
         commands=('TORCH_CUDA_ARCH_LIST="9.0" ', "-gencode arch=compute_90,code=sm_90", "arch=compute_90a,code=sm_90a"), subject="team-kernels / GPU 0"),
    Case("own-kernels-on-b200", "GD201", kernels("sm86", "team-kernels", "0.3.1", "/x/teamkernels/ops/k.so", "10.0", "NVIDIA B200"),
         "fail", "error", ("cc 10.0",),
         commands=('TORCH_CUDA_ARCH_LIST="10.0" ', "arch=compute_100,code=sm_100", "arch=compute_100a,code=sm_100a",
                   "arch=compute_100f,code=sm_100f"), subject="team-kernels / GPU 0"),
    # nccl-extensions 0.1.0 (flashinfer-python requires it): libnccl_ep.so sm_90+ only, libnccl_m2n.so sm_80+
    Case("part-built-for-newer-gpus-beside-one-that-runs", "GD201",
         lambda tmp: with_gpu(h200(kernels__binaries=[binary("sm86", "/x/nccl/ep/lib/cu13/libnccl_ep.so", "nccl-extensions", "nccl"),
                                                      binary("sm80_sm90_ptx90", "/x/nccl/m2n/lib/cu13/libnccl_m2n.so", "nccl-extensions", "nccl")]),
                              "8.0", "NVIDIA A100"),
         "pass", message=("libnccl_ep.so (nccl-extensions): built for sm_86 only, all newer than cc 8.0",)),
    Case("every-part-built-for-newer-gpus", "GD201",
         lambda tmp: with_gpu(h200(kernels__binaries=[binary("sm86", "/x/nccl/ep/lib/cu13/libnccl_ep.so", "nccl-extensions", "nccl")]),
                              "8.0", "NVIDIA A100"),
         "fail", "error", ("nccl-extensions has no code for GPU 0 (NVIDIA A100, cc 8.0)",), subject="nccl-extensions / GPU 0"),
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
