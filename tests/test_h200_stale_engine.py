"""A real stale vLLM-like engine core on a real H200, before and after `gpudoctor fix --yes`.

Recorded by scripts/gpu_process_check.sh on a lent H200: a torch process holding 2 GiB,
double-forked so PID 1 adopted it and titled ``VLLM::EngineCore``, beside a live torch
process (1 GiB, parent alive) that must be left alone. The CSV files are what
``nvidia-smi --query-compute-apps`` / ``--query-gpu=memory.used`` printed at the same moments.
"""

import csv
import io
import json
from pathlib import Path

from gpudoctor.cli import main

HERE = Path(__file__).parent / "fixtures"
SNAPSHOTS = HERE / "snapshots"
TRUTH = HERE / "ground_truth" / "h200-stale-engine"
MIB = 1 << 20


def _compute_apps(name: str) -> dict:
    with open(TRUTH / name, newline="") as handle:
        rows = list(csv.reader(handle, skipinitialspace=True))[1:]
    return {int(pid): (process, int(memory.split()[0])) for pid, process, memory in rows}


def _memory_used_mib(name: str) -> int:
    return int((TRUTH / name).read_text().split(",")[1])


def _check(snapshot: str) -> dict:
    out = io.StringIO()
    main(["check", "--snapshot", str(SNAPSHOTS / snapshot), "--format", "json"], {}, out, io.StringIO())
    return json.loads(out.getvalue())


def test_nvml_readings_equal_nvidia_smi_at_the_same_moment():
    apps = _compute_apps("compute-apps-before.csv")
    facts = json.loads((SNAPSHOTS / "h200-stale-engine.json").read_text())["facts"]
    listed = {p["pid"]: p["used_memory"] for p in facts["gpu.0.processes"]["value"]}
    assert {pid: size // MIB for pid, size in listed.items()} == {pid: mib for pid, (_, mib) in apps.items()}
    # nvidia-smi's memory.used is NVML v2's "used": the driver's reservation is counted apart.
    assert abs(facts["gpu.0.memory_used"]["value"] / MIB - _memory_used_mib("memory-before.csv")) < 1


def test_the_stale_engine_is_named_with_its_title_memory_and_a_stop_action():
    apps = _compute_apps("compute-apps-before.csv")
    stale_pid = next(pid for pid, (name, _) in apps.items() if name == "VLLM::EngineCore")
    doc = _check("h200-stale-engine.json")
    stale = [f for f in doc["findings"] if f["id"] == "GD601"]
    assert len(stale) == 1 and stale[0]["severity"] == "error"
    assert stale[0]["subject"] == f"PID {stale_pid}"
    assert "VLLM::EngineCore" in stale[0]["message"] and "2.5 GiB" in stale[0]["message"]
    assert [a["pid"] for a in stale[0]["fix"]["actions"]] == [stale_pid]
    # The live holder is reported by GD302 and gets no stop action.
    live = [f for f in doc["findings"] if f["id"] == "GD302"]
    live_pid = next(pid for pid in apps if pid != stale_pid)
    assert len(live) == 1 and f"PID {live_pid}" in live[0]["message"] and not live[0]["fix"].get("actions")
    assert doc["blocking"] is True


def test_after_fix_the_engine_is_gone_and_its_memory_freed():
    after = _compute_apps("compute-apps-after.csv")
    before = _compute_apps("compute-apps-before.csv")
    freed = _memory_used_mib("memory-before.csv") - _memory_used_mib("memory-after.csv")
    stale_pid = next(pid for pid, (name, _) in before.items() if name == "VLLM::EngineCore")
    assert stale_pid not in after and freed >= before[stale_pid][1] - 2
    doc = _check("h200-after-fix.json")
    assert [f["id"] for f in doc["findings"] if f["area"] == "processes"] == []
    assert doc["blocking"] is False
