"""GD510-GD514 vLLM build rules: pass, fail, unknown and not-applicable cases.

Real dist-info trees under tmp_path (and a real git checkout for editable installs),
collected by the real probe (probes/vllm_build.py); tests/test_vllm_build.py and
tests/test_advisories.py have the detailed assertions.
"""

from __future__ import annotations

import json

from cases import Case
from fakes.flash_attn_trees import DFLASH_BEFORE_46104, RUNNER_BEFORE_40727, snapshot, torch_site, vllm
from fakes.site_packages import SitePackages
from fakes.vllm_checkout import SHA, install_editable, make_checkout

NEW_RUNNER = {
    "vllm/v1/worker/gpu_model_runner.py": "from vllm.v1.worker.gpu.spec_decode.eagle.eagle3_utils import get_eagle3_aux_layers_from_config\n",
    "vllm/v1/worker/gpu/spec_decode/eagle/eagle3_utils.py": 'layer_ids = [i + 1 for i in (dflash_config.get("target_layer_ids") or [])]\n',
}


def site(*installs, **options):
    def build(tmp):
        packages = SitePackages(tmp / "site-packages")
        for install in installs:
            install(packages, tmp)
        return snapshot(packages.path, **options)
    return build


def torch(**kw):
    return lambda s, tmp: torch_site(s, **kw)


def a_vllm(**kw):
    return lambda s, tmp: vllm(s, **kw)


def from_git(s, tmp):
    info = vllm(s, version="0.11.1rc2.dev123+g2f3f441f8")
    (info / "direct_url.json").write_text(json.dumps({
        "url": "https://github.com/vllm-project/vllm.git",
        "vcs_info": {"vcs": "git", "commit_id": SHA, "requested_revision": "refs/pull/40727/head"}}), encoding="utf-8")


def from_a_local_file(version: str):
    """pip install ./vllm-VERSION-….whl: PEP 610 archive_info with a file:// URL (an offline install)."""
    def install(s, tmp):
        info = vllm(s, version=version)
        (info / "direct_url.json").write_text(json.dumps({
            "url": f"file:///srv/wheels/vllm-{version}-cp38-abi3-manylinux_2_31_x86_64.whl",
            "archive_info": {"hashes": {"sha256": "0" * 64}}}), encoding="utf-8")
    return install


def precompiled_checkout(kernel_change: bool):
    def install(s, tmp):
        checkout = make_checkout(tmp / "vllm")
        install_editable(s, checkout, version="0.23.1rc1.dev901+g2f3f441f8.precompiled")
        if kernel_change:
            (checkout / "csrc" / "ops.cu").write_text("// my kernel change\n", encoding="utf-8")
    return install


CASES = [
    # GD510 vllm-pins-not-met
    # `pip install --no-deps vllm` over another torch: the one cause GD503 states (rules/requirements.py), said here too.
    Case("no-deps-over-torch-2.10", "GD510",
         site(torch(version="2.10.0", cuda="13.0"), a_vllm(version="0.20.0", requires=["torch==2.11.0", "regex", "psutil", "numpy"])),
         "fail", "error", ("vllm 0.20.0 was installed without its requirements", "torch 2.10.0 is installed where vllm requires torch==2.11.0"),
         subject="vllm", commands=("--index-url https://download.pytorch.org/whl/cu130", "-m pip install vllm==0.20.0")),
    Case("torch-2.11-as-pinned", "GD510", site(torch(version="2.11.0", cuda="13.0"), a_vllm(version="0.20.0", requires=["torch==2.11.0"])),
         "pass"),
    Case("torch-2.10-under-vllm-0.20", "GD510",
         site(torch(version="2.10.0", cuda="13.0"), a_vllm(version="0.20.0", requires=["torch==2.11.0"])), "fail", "error",
         ("is built against torch==2.11.0 (2.10.0 is installed)",), subject="vllm", commands=("pip install --force-reinstall torch==2.11.0 --index-url https://download.pytorch.org/whl/cu130",)),
    # --gpu on a machine without a driver: the index is the CUDA vLLM was built for (+cu129), not the torch's nor a guess.
    Case("torch-cu130-under-vllm-built-for-cu129", "GD510",
         site(torch(version="2.10.0", cuda="13.0"), a_vllm(version="0.20.0+cu129", requires=["torch==2.11.0"])), "fail", "error",
         ("is built against torch==2.11.0 (2.10.0 is installed)",), subject="vllm",
         commands=("torch==2.11.0 --index-url https://download.pytorch.org/whl/cu129",)),
    Case("torch-cu128-under-vllm-0.20-no-driver", "GD510",
         site(torch(version="2.10.0", cuda="12.8"), a_vllm(version="0.20.0", requires=["torch==2.11.0", "torchvision==0.26.0"])),
         "fail", "error", ("torchvision==0.26.0 (not installed)",), subject="vllm",
         commands=("torch==2.11.0 torchvision==0.26.0 --index-url https://download.pytorch.org/whl/cu128",)),
    # GD511 vllm-development-build
    Case("pypi-release", "GD511", site(torch(), a_vllm(version="0.10.0")), "pass"),
    Case("release-wheel-from-a-local-file", "GD511", site(torch(), from_a_local_file("0.10.0")), "pass"),
    Case("nightly-wheel-from-a-local-file", "GD511", site(torch(), from_a_local_file("0.11.1rc2.dev123+g2f3f441f8")), "fail", "info",
         ("is from an archive file:///srv/wheels/",), subject="vllm"),
    Case("git-install-of-a-pull-request", "GD511", site(torch(), from_git), "fail", "info",
         ("is from git https://github.com/vllm-project/vllm.git @ refs/pull/40727/head",), subject="vllm"),
    # GD512 vllm-env-var-ignored
    Case("env-var-still-read", "GD512",
         site(torch(), a_vllm(version="0.13.0", envs='environment_variables = {"VLLM_ATTENTION_BACKEND": lambda: None}\n'),
              environ={"PATH": "", "VLLM_ATTENTION_BACKEND": "FLASH_ATTN"}), "pass"),
    Case("vllm-attention-backend-no-longer-read", "GD512",
         site(torch(), a_vllm(version="0.26.0"), environ={"PATH": "", "VLLM_ATTENTION_BACKEND": "FLASH_ATTN"},
              env={"VLLM_ATTENTION_BACKEND": "FLASH_ATTN"}), "fail", "warning",
         ("VLLM_ATTENTION_BACKEND=FLASH_ATTN is set, but this vLLM's vllm/envs.py does not read it",),
         subject="VLLM_ATTENTION_BACKEND", commands=("unset VLLM_ATTENTION_BACKEND",)),
    # GD513 vllm-precompiled-kernels-stale
    Case("precompiled-clean-checkout", "GD513", site(torch(), precompiled_checkout(False)), "pass"),
    Case("precompiled-with-a-kernel-change", "GD513", site(torch(), precompiled_checkout(True)), "fail", "warning",
         ("precompiled build, but the checkout modifies kernel sources (csrc/ops.cu)",), subject="vllm"),
    # GD514 vllm-known-fix-missing
    Case("vllm-0.33-has-the-dflash-fixes", "GD514", site(torch(), a_vllm(version="0.33.0", extra_files=NEW_RUNNER)), "pass"),
    Case("vllm-0.19-lacks-both-dflash-fixes", "GD514",
         site(torch(), a_vllm(version="0.19.0", runner=RUNNER_BEFORE_40727, dflash=DFLASH_BEFORE_46104)), "fail", "info",
         ("If you use dflash",), subject="ADV-dflash-aux-layer-offset", findings=2),
    Case("refactored-source", "GD514", site(torch(), a_vllm(version="0.99.0", runner="# the function moved somewhere new\n")), "unknown"),
    Case("no-vllm", "GD514", site(torch()), "not_applicable"),
]
