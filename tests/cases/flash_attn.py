"""GD4xx flash-attn rules: pass, fail, unknown and not-applicable cases.

Each case installs real-looking distributions (dist-info with RECORD, the H200's compiled
.so files) into a site-packages under tmp_path and runs the real collectors over it
(tests/fakes/flash_attn_trees.py); tests/test_flash_attn.py has the detailed assertions.
"""

from __future__ import annotations

from gpudoctor.snapshot import ok

from cases import Case
from fakes.flash_attn_trees import EXT_OLD, TORCHABI, fa2, fa4, sglang, snapshot, torch_site, vllm
from fakes.site_packages import SitePackages

HOST = {"host__cpus": 16, "host__memory_available": 64 << 30}
NVCC12 = {"cuda__home": {"path": "/usr/local/cuda-12.8", "nvcc": "/usr/local/cuda-12.8/bin/nvcc", "nvcc_version": "12.8"}}
NVCC13 = {"cuda__home": {"path": "/usr/local/cuda-13.0", "nvcc": "/usr/local/cuda-13.0/bin/nvcc", "nvcc_version": "13.0"}}
NO_NINJA = {"ninja": None, "ninja_in_prefix": None, "ninja_dist": None, "prefix": "/venv"}


def site(*installs, gpu="sm_80", build_env=None, **facts):
    """A site-packages with ``installs`` (functions of the SitePackages), collected and judged on ``gpu``.

    The Python version (the wheel tags a fix names) and the build tools (ninja in the interpreter's
    prefix) are the recorded H200's and "none", not the test interpreter's: the H200's own suite
    rendered cp312 and its venv's ninja where this machine renders cp311 and none."""
    facts.setdefault("python__version", "3.12.3")
    build_env = NO_NINJA if build_env is None else build_env

    def build(tmp):
        packages = SitePackages(tmp / "site-packages")
        for install in installs:
            install(packages)
        snap = snapshot(packages.path, gpu=gpu, environ={"PATH": "/nonexistent"}, **facts)
        if build_env is not None:
            snap.facts["flash_attn.build_env"] = ok(build_env, "test")
        return snap
    return build


TORCH = torch_site
TORCH29 = lambda s: torch_site(s, version="2.9.0", cuda="12.8", abi_libs=True)  # noqa: E731
FA2_FOR_27 = lambda s: fa2(s, version="2.8.3+cu12torch2.7cxx11abiTRUE", ext=EXT_OLD)  # noqa: E731

CASES = [
    # GD401 flash-attn-variant-unsupported-gpu
    Case("fa4-on-h100", "GD401", site(TORCH, fa4, gpu="H100"), "pass"),
    # FA4 accepts 8.x with restrictions (no paged KV): degraded, a warning; below 8.0 it cannot run.
    Case("fa4-alone-on-ampere", "GD401", site(TORCH, fa4, gpu="sm_86", **HOST), "fail", "warning",
         ("flash-attn-4 4.0.0b36 is FlashAttention-4", "no installed engine requires it"), subject="flash-attn-4 / GPU 0",
         commands=("pip uninstall -y flash-attn-4",)),
    Case("fa4-alone-on-v100", "GD401", site(TORCH, fa4, gpu="V100", **HOST), "fail", "error",
         ("is below 8.0",), subject="flash-attn-4 / GPU 0", commands=("pip uninstall -y flash-attn-4",)),
    # vLLM never imports these distributions for its attention: the server starts, so never a block.
    Case("fa4-with-vllm-on-ampere", "GD401", site(TORCH, fa4, vllm, gpu="sm_86", **HOST), "fail", "warning",
         ("(vLLM uses FA4 only on cc 9.x-11.x)", "vLLM never uses it here"), subject="flash-attn-4 / GPU 0",
         commands=("pip uninstall -y flash-attn-4",)),
    # SGLang 0.5.23 requires flash-attn-4 everywhere: its dependency, never "uninstall it" (A100, L40S).
    Case("fa4-required-by-sglang-on-a100", "GD401", site(TORCH, fa4, sglang, gpu="A100"), "pass",
         message=("flash-attn-4 4.0.0b36 is required by sglang 0.5.23 (flash-attn-4>=4.0.0b18)",)),
    Case("fa4-required-by-sglang-on-l40s", "GD401", site(TORCH, fa4, sglang, gpu="L40S"), "pass"),
    Case("no-gpu-facts", "GD401", site(TORCH, fa4, gpu=None), "unknown"),
    # GD402 flash-attn-variants-clobber
    Case("fa2-alone", "GD402", site(TORCH, fa2), "pass"),
    Case("fa2-and-fa4-share-flash_attn-cute", "GD402", site(TORCH, fa2, fa4, **HOST), "fail", "error",
         ("both install 2 files into flash_attn/cute",), subject="flash-attn + flash-attn-4",
         commands=("pip uninstall -y flash-attn flash-attn-4",)),
    # GD403 flash-attn-submodule-missing
    Case("fa2-provides-flash_attn-ops", "GD403", site(TORCH, fa2, vllm), "pass"),
    Case("fa4-alone-and-vllm-imports-flash_attn-ops", "GD403", site(TORCH, fa4, vllm), "fail", "error", subject="flash_attn.ops"),
    # GD404 flash-attn-built-for-other-torch
    Case("built-for-this-torch", "GD404",
         site(TORCH29, lambda s: fa2(s, version="2.8.3+cu12torch2.9cxx11abiTRUE", ext=TORCHABI / "ext_good.so")), "pass"),
    Case("built-for-torch-2.7-with-torch-2.9", "GD404", site(TORCH29, FA2_FOR_27, **HOST), "fail", "error",
         ("was built for another torch than torch 2.9.0+cu128",), subject="flash-attn"),
    # GD405 flash-attn-source-build-not-ready
    Case("ninja-and-nvcc-12-ready", "GD405", site(TORCH29, FA2_FOR_27, build_env={"ninja": "/usr/bin/ninja"}, **NVCC12, **HOST),
         "pass"),
    Case("no-ninja-and-nvcc-13-for-torch-cu128", "GD405",
         site(TORCH29, FA2_FOR_27, build_env=NO_NINJA, env={"MAX_JOBS": "32"}, **NVCC13, **HOST), "fail", "error",
         ("ninja is not installed", "differ in major"), commands=("pip install ninja",)),
    Case("nothing-to-build", "GD405", site(TORCH, lambda s: fa2(s, version="2.8.3+cu12torch2.7cxx11abiTRUE")), "not_applicable"),
]
