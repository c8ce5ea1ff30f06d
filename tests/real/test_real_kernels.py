"""Kernel rules on real vLLM releases from PyPI: no false "no kernel image" on the GPUs a release supports.

Each vLLM wheel is installed ``--no-deps`` into a cached venv (tests/realenv.py) — its real
extension files, real fatbins and real source are what gpudoctor reads; nothing is imported.
Which extension vLLM needs on every GPU and which only on some is read from that source
(probes/vllm_kernels.py), so these tests fail if that reading breaks on a release layout.
The newest release is also checked with the CUDA torch it pins (GD502 reads libtorch_cuda.so).
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

# Spread over vLLM's history: _C.abi3.so only (0.8.5), + FlashMLA extension (0.11), + _C_stable_libtorch
# (0.20), _C_stable_libtorch without _C plus Blackwell-only _qutlass_C/_deepselect_C (0.33).
RELEASES = ("0.8.5", "0.11.0", "0.20.0", "0.33.0")
NEWEST = RELEASES[-1]
CPU_TORCH = "2.13.0"  # on this machine's local wheel directory; enough for vLLM's own extensions
SUPPORTED = ("A100", "L40S", "H100", "B200")
KERNEL_RULES = ("GD201", "GD202", "GD502")


def check(python, gpu, select="GD2,GD5", tmp=None):
    env = dict(os.environ, GPUDOCTOR_CACHE_DIR=str(tmp) if tmp else os.environ.get("GPUDOCTOR_CACHE_DIR", ""))
    done = subprocess.run([sys.executable, "-m", "gpudoctor", "check", "--python", str(python), "--gpu", gpu,
                           "--select", select, "--format", "json"], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode in (0, 1), done.stderr
    return {o["id"]: o for o in json.loads(done.stdout)["outcomes"]}


def errors(outcomes, ids=KERNEL_RULES):
    return [(i, f["message"]) for i in ids if i in outcomes for f in outcomes[i]["findings"] if f["severity"] == "error"]


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("scan-cache")


@pytest.mark.parametrize("version", RELEASES)
def test_no_kernel_error_on_the_gpus_a_release_supports(version, cache_dir):
    python = realenv.venv_with(f"vllm=={version}", f"torch=={CPU_TORCH}")
    for gpu in SUPPORTED:
        outcomes = check(python, gpu, "GD2", cache_dir)
        assert outcomes["GD201"]["status"] == "pass", (version, gpu, errors(outcomes))
        assert errors(outcomes) == [], (version, gpu)


def test_newest_release_with_its_pinned_cuda_torch(cache_dir):
    torch = realenv.pinned(realenv.wheel("vllm", NEWEST), "torch")
    assert torch, "vLLM pins torch exactly"
    python = realenv.venv_with(f"vllm=={NEWEST}", f"torch=={torch}")
    for gpu in SUPPORTED:
        outcomes = check(python, gpu, "GD2,GD5", cache_dir)
        assert errors(outcomes) == [], gpu
        assert outcomes["GD502"]["status"] == "pass", gpu
    # The Blackwell-only extensions are named, with where vLLM's source imports them.
    reason = check(python, "H100", "GD201", cache_dir)["GD201"]["reason"]
    assert "vllm._qutlass_C: built for sm_100 only" in reason and "vllm/platforms/cuda.py:26" in reason
    assert "vllm._deepselect_C: vLLM uses it only on a 10.x GPU (is_device_capability_family(100)" in reason
    # A V100 cannot run a CUDA 13 build: vLLM's required extension and torch say so.
    outcomes = check(python, "V100", "GD2,GD5", cache_dir)
    found = errors(outcomes)
    assert any(i == "GD201" and "_C_stable_libtorch.abi3.so" in m and "V100" in m for i, m in found), found
    assert any(i == "GD502" and "sm_70" in m for i, m in found), found
    assert "CUDA 13 removed Maxwell, Pascal and Volta" in outcomes["GD201"]["findings"][0]["fix"]["summary"]


def test_newest_release_deep_loads_the_extension_on_disk(cache_dir):
    """--deep finds _C_stable_libtorch (no _C.abi3.so in 0.33) and records what loading it says."""
    python = realenv.venv_with(f"vllm=={NEWEST}", f"torch=={CPU_TORCH}")
    env = dict(os.environ, GPUDOCTOR_CACHE_DIR=str(cache_dir))
    done = subprocess.run([sys.executable, "-m", "gpudoctor", "snapshot", "--python", str(python), "--deep"],
                          capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    fact = json.loads(done.stdout)["facts"]["vllm.import_check"]
    assert fact["status"] == "ok", fact
    modules = [e["module"] for e in fact["value"]["extensions"]]
    assert modules[0] == "vllm._C_stable_libtorch" and "vllm._qutlass_C" in modules
    assert all(e["status"] in ("ok", "error") for e in fact["value"]["extensions"])
