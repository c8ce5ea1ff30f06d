"""SGLang as `pip install sglang==X` installs it: a correct install gives 0 errors on the GPUs it supports.

The venv (realenv.release_venv(X, engine="sglang")) holds every wheel of pip's resolution, from the
lock in tests/real/closure/sglang-X.txt (tests/real/lock_closure.py sglang==X writes it): SGLang,
the torch it pins (2.14.1, CUDA 13.0), sglang-kernel, flash-attn-4 (which SGLang 0.5.23 requires),
flashinfer, the nvidia-* CUDA wheels and the pure-Python rest, each the real wheel from PyPI,
installed ``--no-deps`` with its hash checked. gpudoctor reads their metadata, extension files,
fatbins and source; nothing is imported.

The table this checks, release x GPU -> errors of GD2 (kernels), GD4 (flash-attn) and GD5 (the
Python stack): 0 on A100, L40S, H100, H200, B200; on a V100 the true error (sglang-kernel's
sm100/common_ops, which its loader picks there, torch and the CUDA 13 libraries have no sm_70 code).
Measured (sglang 0.5.23 closure, 207 distributions): A100 0, L40S 0, H100 0, H200 0, B200 0 errors;
V100 7 (GD201: the CUDA 13 library wheels, nccl-extensions, sglang-kernel, torchaudio, torchcodec,
torchvision; GD502: torch).

Two older releases whose pins differ (torch 2.11.0 cu130, as vLLM 0.20.0 pins it, so the tier
shares its wheels; sglang-kernel 0.4.5 / 0.4.2.post2; flashinfer 0.6.15.post1 / 0.6.11.post1;
flash-attn-4 4.0.0b19 / 4.0.0b15; torchao 0.17.0): 0.5.17 (211 wheels) and 0.5.12 (190), both
A100 0, L40S 0, H100 0, H200 0, B200 0; V100 5 each (GD201: CUDA 13 libraries, sglang-kernel,
torchaudio, torchvision; GD502: torch). Before torchao's own GPU gate was read
(probes/sglang_kernels.py capability_gates), A100 and L40S had 1 false error each: torchao's
_C_mxfp8 (sm_100 only), which torchao uses only behind is_sm_at_least_100(). Their cold cost
beside a warm cache: 0.75 GB (0.5.17) + 0.90 GB (0.5.12) downloaded, 59 new wheels (the largest:
sglang-kernel 383 + 322 MB, flashinfer-cubin 361 MB); each venv built in ~35 s (hard links).
Releases looked at and left out: 0.5.20 and 0.5.22 (their cuda-tile==1.6.0rc5 pin is not on PyPI),
0.5.3 (flashinfer_python==0.4.0rc3 neither), 0.5.10 (torch 2.9.1, 2.36 GB more).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import realenv  # noqa: E402

pytestmark = pytest.mark.real

RELEASES = ("0.5.23", "0.5.17", "0.5.12")
# sglang-kernel as each release pins it (tests/real/closure/sglang-X.txt).
KERNEL = {"0.5.23": "0.4.10", "0.5.17": "0.4.5", "0.5.12": "0.4.2.post2"}
SUPPORTED = ("A100", "L40S", "H100", "H200", "B200")
SELECT = "GD2,GD4,GD5"


def check(python, gpu, select=SELECT, tmp=None):
    env = dict(os.environ, GPUDOCTOR_CACHE_DIR=str(tmp) if tmp else os.environ.get("GPUDOCTOR_CACHE_DIR", ""))
    done = subprocess.run([sys.executable, "-m", "gpudoctor", "check", "--python", str(python), "--gpu", gpu,
                           "--select", select, "--format", "json"], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode in (0, 1), done.stderr
    return {o["id"]: o for o in json.loads(done.stdout)["outcomes"]}


def all_errors(outcomes):
    return sorted((i, f["message"][:400]) for i, o in outcomes.items() for f in o["findings"] if f["severity"] == "error")


def snapshot(python):
    done = subprocess.run([sys.executable, "-m", "gpudoctor", "snapshot", "--python", str(python)], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)["facts"]


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("scan-cache")


@pytest.mark.parametrize("version", RELEASES)
def test_a_correct_sglang_install_has_no_error_on_the_gpus_it_supports(version, cache_dir):
    python = realenv.release_venv(version, engine="sglang")
    for gpu in SUPPORTED:
        outcomes = check(python, gpu, tmp=cache_dir)
        assert all_errors(outcomes) == [], (version, gpu)
        assert outcomes["GD201"]["status"] == "pass", (version, gpu, outcomes["GD201"])
        # flash-attn-4 is SGLang's own requirement: never "uninstall it", on any GPU.
        assert outcomes["GD401"]["status"] == "pass", (version, gpu, outcomes["GD401"])
        assert "is required by sglang" in outcomes["GD401"]["reason"]
        for rule_id in ("GD503", "GD502"):
            assert outcomes[rule_id]["status"] == "pass", (version, gpu, rule_id, outcomes[rule_id])
    if version in ("0.5.17", "0.5.12"):
        # torchao 0.17 (their pin) ships _C_mxfp8 with sm_100 code only; its Python uses it only on cc >= 10.0.
        facts = snapshot(python)
        [(path, gate)] = [(k, v) for k, v in facts["sglang.capability_gates"]["value"].items() if "_C_mxfp8" in k]
        assert gate == {"min_sm": 100, "gate": "is_sm_at_least_100()", "name": "_mxfp8_cuda_kernels_available",
                        "site": "torchao/prototype/mx_formats/kernels.py:1010"}, gate
        return
    # What sgl_kernel does not load on a B200 is named with where its source says so.
    reason = check(python, "B200", "GD201", cache_dir)["GD201"]["reason"]
    assert "sgl_kernel.flash_ops: used only on cc 8.x and 9.x (is_fa3_supported() at sgl_kernel/flash_attn.py:16)" in reason
    assert "sgl_kernel.infllm_ops: built for sm_80, sm_90, sm_120a only, a subset of common_ops.abi3.so (sm100/)" in reason
    # DeepEP (sgl-deep-ep: sm_90 and newer) is imported by SGLang only under try/except: an optional backend on an A100.
    reason = check(python, "A100", "GD201", cache_dir)["GD201"]["reason"]
    assert ("deep_ep (sgl-deep-ep): SGLang imports it only under try/except "
            "(sglang/srt/layers/moe/token_dispatcher/deepep.py:54, sglang/srt/layers/moe/token_dispatcher/deepep_v2.py:42)") in reason


@pytest.mark.parametrize("version", RELEASES)
def test_a_v100_gets_the_true_error(version, cache_dir):
    python = realenv.release_venv(version, engine="sglang")
    outcomes = check(python, "V100", tmp=cache_dir)
    found = all_errors(outcomes)
    assert any(i == "GD201" and m.startswith(f"sglang-kernel {KERNEL[version]} has no code for GPU 0 (V100")
               and "sm90/" not in m and "flash_ops" not in m for i, m in found), found
    assert any(i == "GD502" and "sm_70" in m for i, m in found), found
    assert not [f for f in found if f[0] == "GD401"], found  # FA4 is SGLang's dependency, not the cause
