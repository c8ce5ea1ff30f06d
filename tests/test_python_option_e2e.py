"""`gpudoctor check --python VENV/bin/python --gpu sm_80 --format json`, end to end.

Real venvs (``python -m venv``) in tmp dirs, populated the way pip lays packages out (see
fakes/site_packages.SitePackages), real ``python -m gpudoctor`` processes, real ELF fixtures
for the CUDA extensions. The doctor runs in this interpreter; the probe runs inside the
venv's interpreter, which has no gpudoctor installed.
"""

import glob
import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import doc_findings as findings, doc_outcome as outcome, gd
from fakes.site_packages import COMPRESSED, FA2_SO, SM80_SM90_PTX90, SM86, TORCH_VERSION_PY, SitePackages, make_venv, venv_site

REPO = Path(__file__).resolve().parent.parent
H200 = REPO / "tests" / "fixtures" / "snapshots" / "h200.json"
VLLM_REQUIRES = ["torch==2.11.0", "torchaudio==2.11.0", 'triton==3.6.0; platform_machine == "x86_64"']


def check_json(python, *extra, prefix=()):
    proc = gd("check", "--python", str(python), "--gpu", "sm_80", "--format", "json", *extra, prefix=prefix)
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def populate(site: SitePackages, torch="2.11.0", fa2_lib=SM86):
    site.torch(version=torch, version_py=TORCH_VERSION_PY.replace("2.11.0", torch), lib=SM80_SM90_PTX90)
    site.dist("torchaudio", "2.11.0", requires=["torch==2.11.0"])  # torchaudio 2.11.0 pins torch 2.11.0
    site.dist("triton", "3.6.0")
    site.dist("vllm", "0.20.0", requires=VLLM_REQUIRES,
              files={"vllm/__init__.py": "", "vllm/_C.abi3.so": COMPRESSED, "vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so": SM80_SM90_PTX90})
    site.dist("flash-attn", "2.8.3", requires=["torch", "einops"], files={"flash_attn/__init__.py": "", FA2_SO: fa2_lib})
    site.dist("einops", "0.8.2", files={"einops/__init__.py": ""})


@pytest.fixture(scope="module")
def broken_venv(tmp_path_factory):
    """vLLM 0.20.0 pinning torch 2.11.0 beside torch 2.10.0, and a flash-attn built for sm_86 only."""
    root = tmp_path_factory.mktemp("broken")
    python = make_venv(root / "venv")
    populate(SitePackages(venv_site(root / "venv")), torch="2.10.0", fa2_lib=SM86)
    return python


def test_broken_environment_end_to_end(broken_venv):
    code, doc = check_json(broken_venv)
    assert code == 1
    facts = doc["snapshot"]["facts"]
    assert facts["python.executable"]["value"] == str(broken_venv)
    assert facts["python.executable"]["source"] == f"sys (--python {broken_venv})"
    assert facts["torch.version"]["value"] == "2.10.0+cu130"
    assert (facts["gpu.0.compute_capability"]["value"], facts["gpu.0.compute_capability"]["source"]) == ("8.0", "--gpu sm_80")

    # flash-attn has only sm_86 cubins: nothing runs on an sm_80 GPU.
    [fa] = findings(doc, "GD201")
    assert fa["subject"] == "flash-attn / GPU 0" and fa["severity"] == "error"
    assert f"{FA2_SO} (sm_86)" in fa["message"] and "no kernel image is available" in fa["message"]

    # vLLM pins torch==2.11.0 (GD510 reports vLLM's binary pins, once); torchaudio pins it too (GD503).
    pins = {f["subject"]: f for f in findings(doc, "GD503")}
    assert "vllm" not in pins and "torchaudio" in pins
    [vllm] = findings(doc, "GD510")
    assert vllm["message"].startswith("vllm 0.20.0 (from a package index (PyPI or a wheel index)) is built against "
                                      "torch==2.11.0 (2.10.0 is installed)")
    assert vllm["fix"]["commands"][0].startswith(f"{broken_venv} -m pip install --force-reinstall torch==2.11.0 ")
    assert "--index-url https://download.pytorch.org/whl/cu" in vllm["fix"]["commands"][0]

    # torch itself has sm_80 code, vLLM's binaries too.
    assert outcome(doc, "GD502")["status"] == "pass"
    binaries = {Path(b["path"]).name: b for b in facts["kernels.binaries"]["value"]}
    assert set(binaries) >= {"libtorch_cuda.so", "_C.abi3.so", "_vllm_fa2_C.abi3.so", FA2_SO}
    assert binaries["_C.abi3.so"]["scan"]["sm_variants"] == ["sm_80", "sm_90"]


def test_healthy_environment_has_no_stack_findings(tmp_path):
    python = make_venv(tmp_path / "venv")
    populate(SitePackages(venv_site(tmp_path / "venv")), torch="2.11.0", fa2_lib=SM80_SM90_PTX90)
    _, doc = check_json(python)
    for rule_id in ("GD201", "GD502", "GD503", "GD504", "GD505", "GD506", "GD507"):
        assert outcome(doc, rule_id)["status"] in ("pass", "not_applicable"), (rule_id, outcome(doc, rule_id))
    # The same venv judged for a Blackwell GPU: vLLM's _C (sm_80/sm_90 cubins, no PTX) has no kernel
    # for it; flash-attn's library carries compute_90 PTX, which the driver can JIT for sm_120.
    proc = gd("check", "--python", str(python), "--gpu", "RTX 5090", "--format", "json")
    [finding] = findings(json.loads(proc.stdout), "GD201")
    assert finding["subject"] == "vllm / GPU 0" and "_C.abi3.so (sm_80, sm_90)" in finding["message"]


def _interpreters():
    found = []
    for minor in (8, 12, 13):
        candidates = glob.glob(os.path.expanduser(f"~/.pyenv/versions/3.{minor}.*/bin/python3.{minor}")) + [shutil.which(f"python3.{minor}") or ""]
        for path in candidates:
            if path and subprocess.run([path, "-c", "pass"], capture_output=True).returncode == 0:
                found.append(path)
                break
    return found


@pytest.mark.parametrize("base", _interpreters() or [pytest.param(None, marks=pytest.mark.skip(reason="no other Python here"))])
def test_other_python_versions_run_the_probe(tmp_path, base):
    """The probe is Python 3.8-compatible: run it in venvs of other interpreters (3.8 is the floor)."""
    subprocess.run([base, "-m", "venv", "--without-pip", str(tmp_path / "venv")], check=True, timeout=120)
    python = tmp_path / "venv" / "bin" / "python"
    version = subprocess.run([str(python), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    site = SitePackages(tmp_path / "venv" / "lib" / f"python{version}" / "site-packages")
    populate(site, torch="2.10.0", fa2_lib=SM86)
    _, doc = check_json(python)
    assert doc["snapshot"]["facts"]["python.version"]["value"].startswith(version)
    assert [f["subject"] for f in findings(doc, "GD201")] == ["flash-attn / GPU 0"]
    assert [f["subject"] for f in findings(doc, "GD503")] == ["torchaudio"]
    assert [f["subject"] for f in findings(doc, "GD510")] == ["vllm"]
    # the flash-attn and vLLM collectors ran in that interpreter too
    facts = doc["snapshot"]["facts"]
    assert [v["dist"] for v in facts["flash_attn.variants"]["value"]] == ["flash-attn"]
    assert facts["vllm.build"]["value"]["origin"] == "index"


def test_bad_input_in_the_environment_never_crashes(tmp_path):
    python = make_venv(tmp_path / "venv")
    site = SitePackages(venv_site(tmp_path / "venv"))
    populate(site, torch="2.11.0", fa2_lib=SM80_SM90_PTX90)
    site.dist("brokenpkg", "1.0", metadata=b"Metadata-Version: 2.1\nName: brokenpkg\nVersion: 1.0\nAuthor: Jos\xe9\n\n")
    os.symlink("loop", site.path / "loop")
    os.symlink("ghost-1.0.dist-info", site.path / "ghost-1.0.dist-info")
    (site.path / "vllm" / "vllm_flash_attn" / "_vllm_fa3_C.abi3.so").write_bytes(b"\x7fELF\x02\x01\x01" + b"\0" * 9)  # a cut ELF
    with open(site.path / "vllm-0.20.0.dist-info" / "RECORD", "a", encoding="utf-8") as record:
        record.write("vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so,,16\n")  # as pip would have listed it
    _, doc = check_json(python, "--deep")  # --deep reads the METADATA of packages outside the stack too
    unreadable = {Path(u["path"]).name: u for u in doc["snapshot"]["facts"]["packages.unreadable"]["value"]}
    assert "not UTF-8" in unreadable["brokenpkg-1.0.dist-info"]["detail"]
    assert unreadable["ghost-1.0.dist-info"]["detail"] == "symlink loop"
    assert len(findings(doc, "GD506")) == 2
    scans = {Path(b["path"]).name: b["scan"] for b in doc["snapshot"]["facts"]["kernels.binaries"]["value"]}
    assert scans["_vllm_fa3_C.abi3.so"]["status"] == "error"


def _unprivileged_prefix():
    """As root, file modes do not stop reads; run the doctor in a user namespace where they do.

    `unshare -U` keeps our uid but drops the capability to override permissions on files whose
    owner is not mapped into the namespace, so a mode-000 file owned by root is unreadable
    there, as it is for any normal user. Not root: modes apply anyway.
    """
    if os.geteuid() != 0:
        return ()
    unshare = shutil.which("unshare")
    if unshare and subprocess.run([unshare, "-U", "true"], capture_output=True).returncode == 0:
        return (unshare, "-U")
    return None


def test_permission_denied_becomes_facts_with_a_reason(tmp_path):
    prefix = _unprivileged_prefix()
    if prefix is None:
        pytest.skip("running as root without user namespaces: permissions cannot be denied to us")
    python = make_venv(tmp_path / "venv")
    site = SitePackages(venv_site(tmp_path / "venv"))
    populate(site, torch="2.11.0", fa2_lib=SM86)
    secret = site.dist("secretpkg", "1.0")
    (secret / "METADATA").chmod(0)
    (site.path / FA2_SO).chmod(0)
    try:
        _, doc = check_json(python, "--deep", prefix=prefix)  # --deep: METADATA outside the stack too
    finally:
        (secret / "METADATA").chmod(stat.S_IRUSR | stat.S_IWUSR)
        (site.path / FA2_SO).chmod(stat.S_IRUSR | stat.S_IWUSR)
    facts = doc["snapshot"]["facts"]
    [denied] = [u for u in facts["packages.unreadable"]["value"] if u["path"].endswith("secretpkg-1.0.dist-info")]
    assert denied["status"] == "no_permission" and "Permission denied" in denied["detail"]
    scans = {Path(b["path"]).name: b["scan"] for b in facts["kernels.binaries"]["value"]}
    assert scans[FA2_SO]["status"] == "no_permission"
    # flash-attn cannot be judged: the rule says unknown (with the reason) instead of passing.
    assert outcome(doc, "GD201")["status"] == "unknown" and "no_permission" in outcome(doc, "GD201")["reason"]


def test_an_interpreter_that_hangs_is_cut_off(tmp_path):
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\nexec sleep 60\n", encoding="utf-8")
    fake.chmod(0o755)
    proc = gd("check", "--python", str(fake), "--gpu", "A100", "--format", "json", "--timeout", "4", timeout=60)
    doc = json.loads(proc.stdout)  # 4 s: --timeout counts from the process start (start-up can take 1-2 s under load)
    assert doc["snapshot"]["facts"]["python.executable"]["status"] == "timeout"
    [finding] = findings(doc, "GD507")
    assert "did not answer within" in finding["message"]


def test_not_a_python_interpreter(tmp_path):
    proc = gd("check", "--python", "/bin/true", "--gpu", "A100", "--format", "json")
    [finding] = findings(json.loads(proc.stdout), "GD507")
    assert "printed nothing" in finding["message"]


@pytest.mark.parametrize("args, message", [
    (["--python", "/nonexistent/bin/python"], "no such file"),
    (["--python", "/"], "is a directory"),
    (["--gpu", "banana"], "unknown GPU"),
    (["--gpu", "sm_99"], "no NVIDIA GPU has compute capability 9.9"),
    (["--snapshot", str(H200), "--python", sys.executable], "cannot be combined with --snapshot"),
])
def test_usage_errors_exit_2(args, message):
    proc = gd("check", *args)
    assert proc.returncode == 2
    assert message in proc.stderr and proc.stderr.startswith("gpudoctor: error:")


def test_gpu_option_on_a_replayed_snapshot():
    proc = gd("check", "--snapshot", str(H200), "--gpu", "RTX 4090", "--format", "json")
    doc = json.loads(proc.stdout)
    facts = doc["snapshot"]["facts"]
    assert (facts["gpu.0.name"]["value"], facts["gpu.0.compute_capability"]["value"]) == ("RTX 4090", "8.9")
    assert facts["driver.version"]["value"] == "580.159.04"  # the real driver facts stay
    assert doc["snapshot"]["meta"]["gpu_override"] == "RTX 4090"


def test_snapshot_command_takes_python_and_gpu(broken_venv, tmp_path):
    out = tmp_path / "s.json"
    proc = gd("snapshot", "--python", str(broken_venv), "--gpu", "8.6", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    facts = json.loads(out.read_text(encoding="utf-8"))["facts"]
    assert facts["gpu.0.compute_capability"]["value"] == "8.6"
    assert facts["packages.stack"]["value"]["vllm"]["requires"] == VLLM_REQUIRES
    # Replaying it reproduces the findings: the sm_86 flash-attn runs on 8.6, the pin is still wrong.
    doc = json.loads(gd("check", "--snapshot", str(out), "--format", "json").stdout)
    assert findings(doc, "GD201") == []
    assert [f["subject"] for f in findings(doc, "GD503")] == ["torchaudio"]
    assert [f["subject"] for f in findings(doc, "GD510")] == ["vllm"]
    # the flash-attn and vLLM collectors ran in that interpreter too
    facts = doc["snapshot"]["facts"]
    assert [v["dist"] for v in facts["flash_attn.variants"]["value"]] == ["flash-attn"]
    assert facts["vllm.build"]["value"]["origin"] == "index"
