"""gpudoctor compare: the H200 snapshot against modified copies names exactly what changed,
the differences that matter first, noise set aside."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpudoctor import compare
from gpudoctor.snapshot import Snapshot

REPO = Path(__file__).resolve().parent.parent
SNAPSHOTS = REPO / "tests" / "fixtures" / "snapshots"
H200 = SNAPSHOTS / "h200.json"
BUSY = SNAPSHOTS / "h200x2-busy.json"


def base() -> dict:
    return json.loads(H200.read_text(encoding="utf-8"))


def modified() -> dict:
    """The H200 with a driver downgrade, another torch, a CUDA_VISIBLE_DEVICES, a kernel upgrade and noise."""
    data = base()
    facts = data["facts"]
    facts["driver.version"]["value"] = "570.124.06"
    facts["torch.version"]["value"] = "2.9.0+cu128"
    facts["torch.cuda"]["value"] = "12.8"
    facts["gpu.0.compute_capability"]["value"] = "8.0"
    facts["env"]["value"]["CUDA_VISIBLE_DEVICES"] = "0"
    del facts["env"]["value"]["TORCH_CUDA_ARCH_LIST"]
    facts["host.kernel"]["value"] = "6.8.0-45-generic"
    facts["gpu.0.remapped_rows"]["value"]["correctable"] = 3
    facts["vllm.version"] = {"status": "ok", "source": "importlib.metadata", "value": "0.11.0"}
    # noise: these change between two runs on the same machine
    facts["gpu.0.memory_used"]["value"] = 123 << 20
    facts["gpu.0.memory_free"]["value"] -= 123 << 20
    facts["host.memory_available"]["value"] -= 1 << 30
    facts["probe.gpus"]["value"] = 0.5
    facts["gpu.0.processes"]["value"] = [{"pid": 77, "used_memory": 123 << 20}]
    facts["gpu.0.throttle_reasons"]["value"] = []
    data["meta"]["elapsed_s"] = 9.9
    return data


MATTERS = [  # in the order of importance
    "driver.version",
    "torch.version",
    "torch.cuda",
    "vllm.version",
    "gpu.0.compute_capability",
    "env.CUDA_VISIBLE_DEVICES",
    "env.TORCH_CUDA_ARCH_LIST",
]
OTHER = ["gpu.0.remapped_rows.correctable", "host.kernel"]
NOISE = ["gpu.0.memory_free", "gpu.0.memory_used", "gpu.0.processes", "gpu.0.throttle_reasons", "host.memory_available", "probe.gpus"]


def test_names_exactly_the_changed_facts_important_first():
    result = compare.compare(Snapshot.from_json(base()), Snapshot.from_json(modified()))
    assert [d.path for d in result.matters] == MATTERS
    assert [d.path for d in result.other] == OTHER
    assert sorted(d.path for d in result.noise) == sorted(NOISE)
    kinds = {d.path: d.kind for d in result.differences}
    assert kinds["vllm.version"] == "added" and kinds["env.CUDA_VISIBLE_DEVICES"] == "added"
    assert kinds["env.TORCH_CUDA_ARCH_LIST"] == "removed" and kinds["driver.version"] == "changed"
    driver = result.matters[0]
    assert (driver.a.value, driver.b.value) == ("580.159.04", "570.124.06")


def test_identical_snapshots_have_no_difference():
    result = compare.compare(Snapshot.from_json(base()), Snapshot.from_json(base()))
    assert result.differences == [] and result.noise == [] and result.same > 40


def test_status_changes_count_even_without_a_value():
    data = base()
    data["facts"]["torch.version"] = {"status": "absent", "source": "torch/version.py", "detail": "torch is not installed", "value": None}
    result = compare.compare(Snapshot.from_json(base()), Snapshot.from_json(data))
    (diff,) = result.matters
    assert diff.path == "torch.version" and diff.b.display() == "absent (torch is not installed)"


def test_secret_named_values_are_masked_before_anything_is_shown():
    data = base()
    data["facts"]["env"]["value"]["HF_TOKEN"] = "hf_ShouldNeverBeShownAbcdefghijk1234"
    data["facts"]["env"]["value"]["VLLM_API_KEY"] = "plainkeyvalue99"
    result = compare.compare(Snapshot.from_json(base()), Snapshot.from_json(data))
    shown = {d.path: d.b.display() for d in result.differences}
    assert shown["env.HF_TOKEN"] == "***" and shown["env.VLLM_API_KEY"] == "***"


def test_two_real_machines():
    result = compare.compare(Snapshot.load(str(H200)), Snapshot.load(str(BUSY)))
    matters = [d.path for d in result.matters]
    assert matters[:3] == ["gpu.count", "gpu.1.name", "gpu.1.compute_capability"]
    assert "gpu.0.uuid" in [d.path for d in result.other]
    assert all(not compare.is_noise(d.path) for d in result.differences)


@pytest.mark.parametrize(
    "path, important",
    [("driver.version", True), ("cuda.nvcc.version", True), ("flash_attn.fa4.version", True), ("gpu.7.name", True),
     ("env.NCCL_P2P_DISABLE", True), ("env.VLLM_USE_V1", True), ("host.kernel", False), ("gpu.0.uuid", False), ("env.PATH", False)],
)
def test_importance(path, important):
    assert (compare.rank(path) < len(compare.IMPORTANT)) is important


def gd(*args):
    proc = subprocess.run([sys.executable, "-m", "gpudoctor", *args], capture_output=True, text=True, encoding="utf-8",
                          env=dict(os.environ, PYTHONIOENCODING="utf-8"), cwd=str(REPO), timeout=120)
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    return proc


def test_cli_text_and_exit_code(tmp_path):
    b = tmp_path / "b.json"
    b.write_text(json.dumps(modified()), encoding="utf-8")
    proc = gd("compare", str(H200), str(b))
    assert proc.returncode == 1, proc.stderr
    out = proc.stdout
    section = out.split("Differences that matter (7):\n", 1)[1].split("\n\n", 1)[0]
    assert [line.split()[0] for line in section.splitlines()] == MATTERS
    assert "driver.version" in section and "580.159.04  ->  570.124.06" in section
    assert "env.CUDA_VISIBLE_DEVICES" in section and "(unset)  ->  0" in section
    assert "Other differences (2):" in out and "Set aside as noise: 6" in out
    # the rules tell what the differences do: B's driver no longer matches its kernel module
    assert "GD102 driver-library-mismatch: pass -> error" in out
    verbose = gd("compare", str(H200), str(b), "-v")
    assert "Noise (not counted) (6):" in verbose.stdout and "probe.gpus" in verbose.stdout


def test_cli_json(tmp_path):
    b = tmp_path / "b.json"
    b.write_text(json.dumps(modified()), encoding="utf-8")
    doc = json.loads(gd("compare", str(H200), str(b), "--format", "json").stdout)
    assert doc["kind"] == "gpudoctor.compare" and doc["same"] is False
    assert [d["path"] for d in doc["matters"]] == MATTERS
    assert [d["path"] for d in doc["other"]] == OTHER
    assert {c["id"] for c in doc["rule_outcomes"]} >= {"GD102", "GD308"}


def test_cli_same_and_minor_only_exit_0(tmp_path):
    assert gd("compare", str(H200), str(H200)).returncode == 0
    minor = base()
    minor["facts"]["host.kernel"]["value"] = "6.1.0"
    minor["facts"]["probe.host"]["value"] = 3.0
    b = tmp_path / "minor.json"
    b.write_text(json.dumps(minor), encoding="utf-8")
    proc = gd("compare", str(H200), str(b))
    assert proc.returncode == 0 and "none that matters: exit 0" in proc.stdout


def test_cli_accepts_check_and_report_json(tmp_path):
    check = tmp_path / "check.json"
    check.write_text(gd("check", "--snapshot", str(H200), "--format", "json").stdout, encoding="utf-8")
    report = tmp_path / "report.json"
    report.write_text(gd("report", "--snapshot", str(BUSY), "--format", "json").stdout, encoding="utf-8")
    proc = gd("compare", str(check), str(report))
    assert proc.returncode == 1 and "gpu.count" in proc.stdout


@pytest.mark.parametrize("content", [None, b"", b"\x00\xff\xfe binary", b"[1, 2]", b'{"schema_version": 1}', b"{not json"])
def test_cli_bad_input_is_a_usage_error(tmp_path, content):
    path = tmp_path / "bad.json"
    if content is not None:
        path.write_bytes(content)
    proc = gd("compare", str(H200), str(path))
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("gpudoctor: error: ") and len(proc.stderr.splitlines()) == 1
