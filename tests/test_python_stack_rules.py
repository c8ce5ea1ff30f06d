"""GD5xx (area "vllm", Python stack) on the H200 snapshot plus facts probed from real environments.

Environments are built with fakes/site_packages.SitePackages (real dist-info folders, the real
torch/version.py text, nvcc-built ELF fixtures) and read by the real probe; the facts it
returns are put into the H200 snapshot (real GPU and driver facts) and the rules judge them.
"""

from pathlib import Path

import pytest

from gpudoctor.probes import fatbin, python_stack_collect
from gpudoctor.snapshot import Fact, Snapshot
from helpers import outcome

from fakes.site_packages import FA2_SO, SM80_SM90_PTX90, SM86, TORCH_VERSION_PY, SitePackages, snapshot_of

REPO = Path(__file__).resolve().parent.parent
H200 = REPO / "tests" / "fixtures" / "snapshots" / "h200.json"

# vLLM 0.20.0's pins (research/facts.md §4.2) and torch 2.11.0's CUDA wheel pins as the H200 had them.
VLLM_REQUIRES = ["torch==2.11.0", "torchvision==0.26.0", "torchaudio==2.11.0", "flashinfer-python==0.6.8.post1",
                 'triton==3.6.0; platform_machine == "x86_64"', "transformers>=4.56.0", 'pywin32; sys_platform == "win32"',
                 'xformers; extra == "xformers"']


@pytest.fixture
def site(tmp_path):
    return SitePackages(tmp_path / "site-packages")


# --- GD501 torch-without-cuda ------------------------------------------------------------------
def test_gd501_cpu_torch_on_a_gpu_machine(site):
    site.torch(version_py=TORCH_VERSION_PY.replace("'13.0'", "None").replace("+cu130", "+cpu"), lib=None)
    [finding] = outcome(snapshot_of(site), "GD501").findings
    assert "torch 2.11.0+cpu is a CPU-only build" in finding.message and "1 NVIDIA GPU" in finding.message
    # The driver supports CUDA 13.0: the fix installs the same torch from the cu130 index.
    assert finding.fix.commands[0].endswith("torch==2.11.0 --index-url https://download.pytorch.org/whl/cu130")


def test_gd501_and_gd510_one_cause_one_command(site):
    """vLLM 0.33 pins torch==2.14.0; a CPU torch 2.13.0 is installed: GD501 (no CUDA) and GD510 (pin
    not met) have one cause, so both give the same command, with vLLM's pin and the CUDA index."""
    site.torch(version="2.13.0", version_py=TORCH_VERSION_PY.replace("'13.0'", "None").replace("2.11.0+cu130", "2.13.0+cpu"),
               lib=None)
    site.dist("vllm", "0.33.0", requires=["torch==2.14.0", "torchvision==0.29.0", "torchaudio==2.11.0"])
    site.dist("torchvision", "0.29.0", requires=["torch==2.14.0"])
    site.dist("torchaudio", "2.11.0")
    snap = snapshot_of(site)
    [cpu] = outcome(snap, "GD501").findings
    [pins] = outcome(snap, "GD510").findings
    command = ("-m pip install --force-reinstall torch==2.14.0 torchvision==0.29.0 torchaudio==2.11.0 "
               "--index-url https://download.pytorch.org/whl/cu130")
    assert cpu.fix.commands == [pins.fix.commands[0]] and cpu.fix.commands[0].endswith(command)
    assert "vllm 0.33.0 pins it" in cpu.fix.summary
    assert "the same reinstall fixes GD501" in pins.message


def test_gd501_cuda_torch_passes_and_no_gpu_is_not_applicable(site):
    site.torch()
    assert outcome(snapshot_of(site), "GD501").status == "pass"
    site2 = SitePackages(site.path.parent / "cpu")
    site2.torch(version_py=TORCH_VERSION_PY.replace("'13.0'", "None"), lib=None)
    assert outcome(snapshot_of(site2, gpu__count=0), "GD501").status == "not_applicable"


# --- GD502 torch-arch-list-misses-gpu ---------------------------------------------------------
def test_gd502_torch_without_code_for_the_gpu(site):
    site.torch(lib=SM86)  # a libtorch_cuda.so with sm_86 cubins only
    [finding] = outcome(snapshot_of(site), "GD502").findings
    assert "has GPU code for sm_86" in finding.message and "is sm_90" in finding.message
    assert "is not compatible with the current PyTorch installation" in finding.message


def test_gd502_old_gpu_gets_the_cu126_index(site):
    site.torch(lib=SM80_SM90_PTX90)
    snap = snapshot_of(site, gpu__0__compute_capability="6.0", gpu__0__name="Tesla P100-PCIE-16GB")
    [finding] = outcome(snap, "GD502").findings
    assert "whl/cu126" in finding.fix.commands[0]


def test_gd502_passes_when_the_gpu_is_covered(site):
    site.torch(lib=SM80_SM90_PTX90)
    assert outcome(snapshot_of(site), "GD502").status == "pass"
    # PTX compute_90 JIT-compiles for a Blackwell GPU: covered (GD202 judges the driver's JIT).
    assert outcome(snapshot_of(site, gpu__0__compute_capability="12.0"), "GD502").status == "pass"


# --- GD503 requirement-not-satisfied ------------------------------------------------------------
def test_gd503_vllm_pins_another_torch(site):
    site.torch(version="2.10.0", version_py=TORCH_VERSION_PY.replace("2.11.0", "2.10.0"))
    site.dist("vllm", "0.20.0", requires=VLLM_REQUIRES)
    site.dist("torchvision", "0.26.0", requires=["torch==2.11.0"])
    site.dist("torchaudio", "2.11.0")
    site.dist("flashinfer-python", "0.6.8.post1")
    site.dist("triton", "3.6.0")
    site.dist("transformers", "5.17.0")
    findings = {f.subject: f for f in outcome(snapshot_of(site), "GD503").findings}
    assert set(findings) == {"torchvision"}  # vLLM's own torch pin is GD510's, reported once (tests/test_vllm_build.py)
    [vllm] = outcome(snapshot_of(site), "GD510").findings
    assert vllm.severity == "error"
    assert vllm.message.startswith("vllm 0.20.0 (") and "is built against torch==2.11.0 (2.10.0 is installed)" in vllm.message
    # One torch command for GD501/GD510: vLLM's torch-family pins and the driver's CUDA index.
    assert vllm.fix.commands[0].endswith("-m pip install --force-reinstall torch==2.11.0 torchvision==0.26.0 torchaudio==2.11.0 "
                                         "--index-url https://download.pytorch.org/whl/cu130")


def test_gd503_missing_requirement_and_pure_python_mismatch(site):
    site.torch()  # 2.11.0 (from version.py) satisfies ==2.11.0 despite +cu130
    site.dist("vllm", "0.20.0", requires=["torch==2.11.0", "xgrammar==0.1.21"])
    site.dist("transformers", "5.17.0", requires=["tokenizers>=0.22,<0.23", "huggingface-hub>=1.0"])
    site.dist("tokenizers", "0.21.0")
    site.dist("huggingface-hub", "1.33.0")
    findings = {f.subject: f for f in outcome(snapshot_of(site), "GD503").findings}
    assert findings["vllm"].message == "vllm 0.20.0 requires xgrammar==0.1.21 (not installed)"
    assert findings["transformers"].severity == "warning"  # tokenizers: pure-Python side of the stack
    assert "tokenizers<0.23,>=0.22, 0.21.0 is installed" in findings["transformers"].message


def test_gd503_markers_are_evaluated_for_the_target(site):
    site.torch()
    site.dist("vllm", "0.20.0", requires=['pywin32; sys_platform == "win32"', 'xformers; extra == "xformers"', "torch==2.11.0"])
    assert outcome(snapshot_of(site), "GD503").status == "pass"
    # The same requirement judged for a Windows interpreter is unmet.
    env = dict(snapshot_of(site).value("python.marker_env"), sys_platform="win32")
    assert outcome(snapshot_of(site, python__marker_env=env), "GD503").status == "fail"


# --- GD504 duplicate-distribution ------------------------------------------------------------------
def test_gd504_stale_dist_info_beside_the_real_one(site):
    import os

    site.torch()
    stale = site.dist("torch", "2.9.0")
    os.utime(stale, (1_000_000_000, 1_000_000_000))
    [finding] = outcome(snapshot_of(site), "GD504").findings
    assert finding.severity == "error"  # part of the stack, two versions
    assert "torch is installed 2 times: 2.11.0 in" in finding.message and "(imported)" in finding.message
    assert finding.fix.commands[0].startswith(f"rm -rf {site.path}/torch-2.9.0.dist-info")


def test_gd504_single_installs_pass(site):
    site.torch()
    assert outcome(snapshot_of(site), "GD504").status == "pass"


def test_gd504_across_the_path_only_for_the_stack(tmp_path):
    """A user-site torch shadowing the venv's is reported; a second six (a distro package) is not."""
    venv, user = SitePackages(tmp_path / "venv"), SitePackages(tmp_path / "user")
    venv.torch()
    venv.dist("six", "1.17.0")
    user.dist("torch", "2.9.0")
    user.dist("six", "1.16.0")
    snap = Snapshot.load(str(H200))
    plain = python_stack_collect.collect_plain([str(venv.path), str(user.path)], "stack", fatbin.scan)
    snap.facts.update({path: Fact.from_json(data) for path, data in plain.items()})
    assert set(plain["packages.duplicates"]["value"]) == {"torch", "six"}
    [finding] = outcome(snap, "GD504").findings
    assert finding.subject == "torch" and f"2.9.0 in {user.path}" in finding.message
    assert finding.fix.commands[0].endswith("-m pip uninstall -y torch  # repeat until pip says it is not installed")


# --- GD505 distribution-files-missing ---------------------------------------------------------------
def test_gd505_missing_shared_object(site):
    site.dist("flash-attn", "2.8.3", files={FA2_SO: SM86, "flash_attn/__init__.py": "", "flash_attn/ops/__init__.py": ""})
    (site.path / FA2_SO).unlink()
    [finding] = outcome(snapshot_of(site), "GD505").findings
    # Checked by default: the shared object and the top-level package (not flash_attn/ops/__init__.py).
    assert f"flash-attn 2.8.3: 1 of the 2 files checked against its RECORD are missing ({FA2_SO})" == finding.message
    assert finding.fix.commands[0].endswith("--force-reinstall --no-deps flash-attn==2.8.3")


def test_gd505_complete_install_passes(site):
    site.dist("flash-attn", "2.8.3", files={FA2_SO: SM86})
    assert outcome(snapshot_of(site), "GD505").status == "pass"


# --- GD506 / GD507 ------------------------------------------------------------------------------------
def test_gd506_non_utf8_metadata(site):
    site.dist("brokenpkg", "1.0", metadata=b"Metadata-Version: 2.1\nName: brokenpkg\nVersion: 1.0\nSummary: caf\xe9\n\n")
    # Outside the inference stack, METADATA is read with --deep ("stack-full").
    assert outcome(snapshot_of(site), "GD506").status == "pass"
    [finding] = outcome(snapshot_of(site, record="stack-full"), "GD506").findings
    assert "METADATA is not UTF-8" in finding.message
    assert outcome(snapshot_of(SitePackages(site.path.parent / "clean")), "GD506").status == "pass"


def test_gd507_interpreter_that_cannot_be_inspected(site):
    broken = Fact(None, "timeout", "--python /venv/bin/python", "/venv/bin/python did not answer within 8 s")
    snap = snapshot_of(site, python__requested="/venv/bin/python", python__executable=broken)
    [finding] = outcome(snap, "GD507").findings
    assert "cannot inspect /venv/bin/python: /venv/bin/python did not answer within 8 s" == finding.message
    assert outcome(snapshot_of(site), "GD507").status == "not_applicable"
    assert outcome(snapshot_of(site, python__requested="/venv/bin/python"), "GD507").status == "pass"
