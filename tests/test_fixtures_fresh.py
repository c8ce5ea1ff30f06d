"""The derived snapshots in tests/fixtures/snapshots/ are exactly what derive.py makes.

derive.py changes a real H200 recording into an A100 / 2× A100-40GB / RTX 4090 / T4 / mixed machine using
public specs only. If derive.py or a recording changes, the committed JSON must be
regenerated (``python3 tests/fixtures/snapshots/derive.py``); this test says so instead of
letting a stale fixture pass for a machine it no longer describes.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from gpudoctor import registry
from gpudoctor.engine import run_rules
from gpudoctor.snapshot import Snapshot

SNAPSHOTS = Path(__file__).parent / "fixtures" / "snapshots"
REGENERATE = "stale fixture: run python3 tests/fixtures/snapshots/derive.py"


def _derive_module():
    spec = importlib.util.spec_from_file_location("gpudoctor_fixture_derive", SNAPSHOTS / "derive.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


DERIVE = _derive_module()
DERIVED = DERIVE.derive_all()


def test_derives_the_five_machines():
    assert sorted(DERIVED) == ["a100.json", "a100x2-40gb.json", "mixed.json", "rtx4090.json", "t4.json"]


@pytest.mark.parametrize("name", sorted(DERIVED))
def test_committed_file_equals_derivation(name):
    path = SNAPSHOTS / name
    assert path.exists(), REGENERATE
    committed = path.read_text(encoding="utf-8")
    assert json.loads(committed) == DERIVED[name], REGENERATE
    assert committed == DERIVE.dumps(DERIVED[name]), REGENERATE + " (formatting differs)"


@pytest.mark.parametrize("name", sorted(DERIVED))
def test_derived_file_is_a_loadable_snapshot_in_gpudoctor_format(name):
    snap = Snapshot.load(str(SNAPSHOTS / name))
    # Byte-identical to what `gpudoctor snapshot` writes, so a diff against a recording is clean.
    assert snap.dumps() == (SNAPSHOTS / name).read_text(encoding="utf-8")
    source = json.loads((SNAPSHOTS / DERIVED[name]["meta"]["derived_from"]).read_text(encoding="utf-8"))
    for key, value in source["meta"].items():
        assert snap.meta[key] == value  # the source's meta is kept
    assert snap.meta["derived"]


@pytest.mark.parametrize("name", sorted(DERIVED))
def test_derived_driver_versions_agree_with_each_other(name):
    snap = Snapshot.load(str(SNAPSHOTS / name))
    version = snap.value("driver.version")
    assert snap.value("driver.kernel_module_version") == version
    assert snap.value("driver.library_path").endswith("libnvidia-ml.so." + version)
    assert version in snap.value("driver.proc_version")
    assert snap.value("driver.nvml_version") == snap.value("driver.cuda_max").split(".")[0] + "." + version
    outcome = run_rules(snap, [registry.find("GD102")]).outcomes[0]
    assert outcome.status == "pass"


@pytest.mark.parametrize("name", sorted(DERIVED))
def test_derived_memory_adds_up(name):
    snap = Snapshot.load(str(SNAPSHOTS / name))
    for i in snap.gpu_indices():
        total, reserved = snap.value(f"gpu.{i}.memory_total"), snap.value(f"gpu.{i}.memory_reserved")
        used, free = snap.value(f"gpu.{i}.memory_used"), snap.value(f"gpu.{i}.memory_free")
        assert total == reserved + used + free


def test_derived_values_are_the_cited_specs():
    mib = 1 << 20
    a100 = Snapshot.load(str(SNAPSHOTS / "a100.json"))
    assert (a100.value("gpu.0.name"), a100.value("gpu.0.compute_capability")) == ("NVIDIA A100-SXM4-80GB", "8.0")
    assert a100.value("gpu.0.memory_total") == 81920 * mib
    assert (a100.value("driver.version"), a100.value("driver.cuda_max")) == ("535.54.03", "12.2")
    assert (a100.value("gpu.0.pcie_gen_max"), a100.value("gpu.0.pcie_width_max")) == (4, 16)

    rtx = Snapshot.load(str(SNAPSHOTS / "rtx4090.json"))
    assert (rtx.value("gpu.0.name"), rtx.value("gpu.0.compute_capability")) == ("NVIDIA GeForce RTX 4090", "8.9")
    assert rtx.value("gpu.0.memory_total") == 24564 * mib
    assert rtx.value("gpu.0.ecc_mode") is False
    assert rtx.get("gpu.0.ecc_uncorrected_volatile").status == "not_supported"
    assert rtx.value("gpu.0.persistence_mode") is False
    assert (rtx.value("gpu.0.pcie_gen_max"), rtx.value("gpu.0.pcie_width_max")) == (4, 16)

    t4 = Snapshot.load(str(SNAPSHOTS / "t4.json"))
    assert (t4.value("gpu.0.name"), t4.value("gpu.0.compute_capability")) == ("Tesla T4", "7.5")
    assert t4.value("gpu.0.memory_total") == 15360 * mib
    assert (t4.value("gpu.0.pcie_gen_max"), t4.value("gpu.0.pcie_width_max")) == (3, 16)
    assert (t4.value("driver.version"), t4.value("driver.cuda_max")) == ("470.141.03", "11.4")
    assert t4.value("driver.kernel_module_type") == "proprietary"
    assert t4.get("gpu.0.remapped_rows").status == "not_supported"

    pair = Snapshot.load(str(SNAPSHOTS / "a100x2-40gb.json"))
    assert pair.value("gpu.count") == 2
    for i in (0, 1):
        assert (pair.value(f"gpu.{i}.name"), pair.value(f"gpu.{i}.compute_capability")) == ("NVIDIA A100-PCIE-40GB", "8.0")
        assert (pair.value(f"gpu.{i}.memory_total"), pair.value(f"gpu.{i}.memory_reserved")) == (40960 * mib, 605 * mib)
        assert pair.get(f"gpu.{i}.nvlink_active").status == "not_supported"
    busy = Snapshot.load(str(SNAPSHOTS / "h200x2-busy.json"))
    assert pair.value("gpu.1.memory_used") == busy.value("gpu.1.memory_used")  # the recorded holder is kept
    assert pair.value("gpu.1.processes") == busy.value("gpu.1.processes")

    mixed = Snapshot.load(str(SNAPSHOTS / "mixed.json"))
    assert mixed.value("gpu.count") == 2
    assert [mixed.value(f"gpu.{i}.compute_capability") for i in (0, 1)] == ["8.0", "8.9"]


# What `gpudoctor check` says about each derived machine with every rule: the derived
# machines are healthy except where meta.derived says a fault is there on purpose.
EXPECTED_FINDINGS = {
    "a100.json": [("GD103", "error")],  # driver 535 under torch cu130
    "t4.json": [("GD103", "error")],  # driver 470 under torch cu130
    "rtx4090.json": [],
    "mixed.json": [("GD301", "error")],  # cc 8.0 next to cc 8.9
    "a100x2-40gb.json": [("GD302", "warning")],  # PID 896 (the recording's) holds 3.6 GiB of GPU 1
}


@pytest.mark.parametrize("name", sorted(EXPECTED_FINDINGS))
def test_full_check_on_derived_machine(name):
    result = run_rules(Snapshot.load(str(SNAPSHOTS / name)), registry.load_rules())
    found = [(f.rule_id, f.severity) for f in result.findings if f.area in ("internal", "driver", "gpu")]
    assert found == EXPECTED_FINDINGS[name]
    unknown = [o.rule.id for o in result.outcomes if o.status == "unknown" and o.rule.area in ("internal", "driver", "gpu")]
    assert unknown == []
