"""GD2 (CUDA, kernels) and GD5 (Python stack, vLLM build) on real vLLM releases as `pip install vllm==X` installs them.

Each release's venv (realenv.closure_venv) holds every wheel of pip's resolution, from the lock in
tests/real/closure/ (tests/real/lock_closure.py writes it): vLLM, the CUDA torch it pins, torchvision,
torchaudio, triton, xformers/flashinfer, the nvidia-* CUDA wheels and the pure-Python rest, each
the real wheel from PyPI, installed ``--no-deps`` with its hash checked. gpudoctor reads their real
metadata, extension files, fatbins and source; nothing is imported. On the GPUs a release
supports, GD2 and GD5 must find no error (a false blocking error on a correct install is the
worst defect); where it does not, the error must say why.

Cost, measured on a 2-core box: the CUDA 13 releases (0.20, 0.33) are installed whole (7-9 GB each,
~1.6 GB of nvidia-* files hard-linked between them); the nvidia-*-cu12 wheels of the CUDA 12 releases
(0.8.5, 0.11) go in as their real dist-info alone (realenv.closure_venv(metadata_only=…): what
GD503 reads, ~3 GB a release not written), so NVIDIA's libraries' GPU code is read on the CUDA 13 lines.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import realenv  # noqa: E402

pytestmark = pytest.mark.real

# Spread over vLLM's history: _C.abi3.so only (0.8.5), + FlashMLA extension (0.11), + _C_stable_libtorch
# (0.20), _C_stable_libtorch without _C plus Blackwell-only _qutlass_C/_deepselect_C (0.33).
# 0.34.0 runs once its closure is locked: `pip install vllm==0.34.0` does not resolve from PyPI today
# (its pin flashinfer-python==0.7.3 is not published), so tests/real/lock_closure.py cannot write it.
RELEASES = ("0.8.5", "0.11.0", "0.20.0", "0.33.0", pytest.param("0.34.0", marks=pytest.mark.skipif(
    not (realenv.CLOSURES / "vllm-0.34.0.txt").is_file(), reason="no closure lock: vllm==0.34.0 does not resolve from PyPI "
    "(flashinfer-python==0.7.3 is not published)")))
NEWEST = "0.33.0"  # the newest release whose closure the Blackwell-only extension checks below were read on
CPU_TORCH = "2.13.0"  # on this machine's local wheel directory; enough for vLLM's own extensions
SUPPORTED = ("A100", "L40S", "H100", "B200")
CUDA12_LINE = {"0.8.5", "0.11.0"}  # torch 2.6.0+cu124, 2.8.0+cu128: their nvidia-*-cu12 wheels as metadata
# GPUs a release's pinned torch has no code for, and the rule that must say so: torch 2.6.0's cu124
# build stops at sm_90 (Blackwell needs CUDA 12.8+).
UNSUPPORTED = {"0.8.5": {"B200": "GD502"}}
KERNEL_RULES = ("GD201", "GD202", "GD502")


def check(python, gpu, select="GD2,GD5", tmp=None):
    env = dict(os.environ, GPUDOCTOR_CACHE_DIR=str(tmp) if tmp else os.environ.get("GPUDOCTOR_CACHE_DIR", ""))
    done = subprocess.run([sys.executable, "-m", "gpudoctor", "check", "--python", str(python), "--gpu", gpu,
                           "--select", select, "--format", "json", "--timeout", "120"], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode in (0, 1), done.stderr
    return {o["id"]: o for o in json.loads(done.stdout)["outcomes"]}


def errors(outcomes, ids=KERNEL_RULES):
    return [(i, f["message"]) for i in ids if i in outcomes for f in outcomes[i]["findings"] if f["severity"] == "error"]


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("scan-cache")


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


# --- a correct install: every wheel `pip install vllm==X` installs (tests/real/closure/) ----------
def all_errors(outcomes):
    return sorted((i, f["message"][:400]) for i, o in outcomes.items() for f in o["findings"] if f["severity"] == "error")


def torch_cuda_major(python) -> int:
    version = python.parent.parent / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages" / "torch" / "version.py"
    text = version.read_text()
    cuda = text.split("cuda: Optional[str] = ", 1)[1].split("\n", 1)[0].strip("'\"")
    return int(cuda.split(".")[0])


def closure_python(version):
    python = realenv.release_venv(version)
    assert (version in CUDA12_LINE) == (torch_cuda_major(python) == 12), version
    return python


@pytest.mark.parametrize("version", RELEASES)
def test_a_correct_install_has_no_error_in_gd2_and_gd5(version, cache_dir):
    """vLLM with the torch it pins and the whole closure pip installs with it: GD2 (kernels, including
    every nvidia-* library's fatbin) and GD5 (torch build, requirements, vLLM's pins) find nothing wrong
    on the GPUs the release supports, and a V100 with a CUDA 13 torch is an error, said as such."""
    python = closure_python(version)
    for gpu in SUPPORTED:
        outcomes = check(python, gpu, "GD2,GD5", cache_dir)
        wrong = UNSUPPORTED.get(version, {}).get(gpu)
        if wrong:
            found = all_errors(outcomes)
            assert found and {i for i, _ in found} == {wrong}, (version, gpu, found)
            continue
        assert all_errors(outcomes) == [], (version, gpu)
        for rule_id in ("GD503", "GD510", "GD501", "GD502", "GD201"):
            assert outcomes[rule_id]["status"] == "pass", (version, gpu, rule_id, outcomes[rule_id])
    outcomes = check(python, "V100", "GD2,GD5", cache_dir)
    found = all_errors(outcomes)
    if torch_cuda_major(python) >= 13:
        # A V100 cannot run a CUDA 13 build: vLLM's required extension, torch and the CUDA libraries say so.
        assert any(i == "GD201" and m.startswith(f"vllm {version} has no code for GPU 0 (V100") for i, m in found), found
        assert any(i == "GD502" and "sm_70" in m for i, m in found), found
        assert any(i == "GD201" and "CUDA library wheels have no code" in m for i, m in found), found
        assert "CUDA 13 removed Maxwell, Pascal and Volta" in outcomes["GD201"]["findings"][0]["fix"]["summary"]
    else:
        assert not [f for f in found if f[0] == "GD502"], found  # a CUDA 12 torch still has sm_70
    if version == NEWEST:
        # The Blackwell-only extensions are named, with where vLLM's source imports them.
        reason = check(python, "H100", "GD201", cache_dir)["GD201"]["reason"]
        assert "vllm._qutlass_C: built for sm_100 only" in reason and "vllm/platforms/cuda.py:26" in reason
        assert "vllm._deepselect_C: vLLM uses it only on a 10.x GPU (is_device_capability_family(100)" in reason
        # flashinfer's nccl-extensions: NCCL EP is built for sm_90+ only, beside its sm_80+ m2n library.
        reason = check(python, "A100", "GD201", cache_dir)["GD201"]["reason"]
        assert "libnccl_ep.so (nccl-extensions): built for sm_90, sm_100, sm_100a, sm_120 only" in reason, reason


@pytest.mark.parametrize("version, torch_dep, vllm_pin", [
    (NEWEST, "nvidia-cudnn-cu13==9.24.0.43", "flashinfer-python==0.7.2.post1"),
    ("0.11.0", "nvidia-cublas-cu12==12.8.4.1", "xformers==0.0.32.post1"),  # nvidia-*-cu12 installed as metadata
])
def test_gd503_and_gd510_still_fire_on_that_install_missing_one_requirement(version, torch_dep, vllm_pin, cache_dir):
    """The same correct venv, copied with hard links, less two wheels pip installed: one torch requires
    (GD503: a stack package's binary requirement) and one vLLM pins (GD510)."""
    source = closure_python(version).parent.parent
    broken = realenv.CACHE / "scratch" / f"closure-missing-{version}-{os.getpid()}"
    shutil.rmtree(broken, ignore_errors=True)
    broken.parent.mkdir(parents=True, exist_ok=True)
    try:
        subprocess.run(["cp", "-al", str(source), str(broken)], check=True)  # links: the original is not touched
        subprocess.run([sys.executable, "-m", "pip", "--python", str(broken / "bin" / "python"), "uninstall", "-q", "-y",
                        torch_dep.split("==")[0], vllm_pin.split("==")[0]], check=True)
        outcomes = check(broken / "bin" / "python", "H100", "GD5", cache_dir)
        found = all_errors(outcomes)
        assert any(i == "GD503" and m.startswith("torch ") and f"{torch_dep} (not installed)" in m for i, m in found), found
        assert any(i == "GD510" and f"{vllm_pin} (not installed)" in m for i, m in found), found
        assert {i for i, _ in found} == {"GD503", "GD510"}, found
    finally:
        shutil.rmtree(broken, ignore_errors=True)
