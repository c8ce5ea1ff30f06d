"""Driver and GPU rules: the cases that need more than one finding or more than one rule.

The single-finding pass / fail / unknown / not-applicable cases of every rule are tables in
tests/cases/<area>.py, run by tests/test_cases.py.
"""

from __future__ import annotations

from gpudoctor import registry
from gpudoctor.engine import run_rules
from gpudoctor.snapshot import Snapshot

from cases import build, library_file, load, nvml_init_failed, put, run, smi_failed
from cases.driver import TRUENAS_SMI


# --- cases that need more than one finding or more than one rule -----------------------------
def test_code_18_is_reported_once_by_gd102_not_by_gd101(tmp_path):
    data = build("h200.json", nvml_init_failed(18), smi_failed(TRUENAS_SMI), library_file("580.173.02", tmp_path))
    result = run_rules(Snapshot.from_json(data), [registry.find("GD101"), registry.find("GD102")])
    assert [(f.rule_id, f.severity) for f in result.findings] == [("GD102", "error")]


def test_ecc_errors_on_both_gpus_give_one_finding_each():
    outcome = run("GD303", build("h200x2.json", put("gpu.0.ecc_uncorrected_volatile", 1), put("gpu.1.ecc_uncorrected_volatile", 5)))
    assert [(f.subject, f.severity) for f in outcome.findings] == [("GPU 0", "error"), ("GPU 1", "error")]
    assert "5 uncorrectable" in outcome.findings[1].message


def test_remap_failure_is_reported_instead_of_pending_not_as_well():
    outcome = run("GD304", build("h200.json", put("gpu.0.remapped_rows", {"correctable": 0, "uncorrectable": 8, "pending": True, "failure": True})))
    assert len(outcome.findings) == 1
    assert "FAILED" in outcome.findings[0].message and "pending" not in outcome.findings[0].message


def test_pcie_width_and_generation_in_one_finding():
    outcome = run("GD305", build("h200x2-busy.json", put("gpu.0.pcie_width_current", 8), put("gpu.0.pcie_gen_current", 4)))
    assert [f.subject for f in outcome.findings] == ["GPU 0"]
    assert "width x8 of x16 and gen 4 of 5 while busy" in outcome.findings[0].message


def test_busy_h200x2_gpu_0_below_threshold_is_not_reported():
    """PID 896 also holds 518 MiB on GPU 0 (memory_used 527 MiB): under the 1 GiB threshold."""
    data = load("h200x2-busy.json")
    assert data["facts"]["gpu.0.processes"]["value"] == [{"pid": 896, "used_memory": 543162368}]
    assert [f.subject for f in run("GD302", data).findings] == ["GPU 1"]
