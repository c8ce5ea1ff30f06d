"""Runs every area's case table (tests/cases/<area>.py) and guards that the tables are whole.

The guard reads the registry: a registered rule without a passing and a failing case here
fails CI, whoever added it and in whatever area.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cases import Case, all_cases, check
from gpudoctor import registry

CASES = all_cases()


@pytest.mark.parametrize("case", CASES, ids=[f"{c.rule}-{c.name}" for c in CASES])
def test_rule(case: Case, tmp_path: Path):
    check(case, tmp_path)


def test_every_registered_rule_has_a_failing_and_a_passing_case():
    catalogue = {meta.id for meta in registry.load_rules()}
    tabled = {rule_id for rule_id in catalogue if {"pass", "fail"} <= {c.status for c in CASES if c.rule == rule_id}}
    missing = sorted(catalogue - tabled)
    assert not missing, f"rules without a pass and a fail case in tests/cases/<area>.py: {missing} (see tests/cases/__init__.py)"


def test_cases_name_registered_rules_and_known_outcomes():
    catalogue = {meta.id for meta in registry.load_rules()}
    assert not sorted({c.rule for c in CASES} - catalogue)
    assert {c.status for c in CASES} <= {"pass", "fail", "unknown", "not_applicable"}
    names = [(c.rule, c.name) for c in CASES]
    assert len(names) == len(set(names)), "two cases of one rule share a name (the test id)"


def test_the_evidence_check_refuses_a_fact_no_probe_produces():
    """The check above can fail: evidence the engine builds from a misspelt fact path (it reads as
    absent "not collected") is refused; real facts, labelled values and facts a probe produces on
    other machines pass."""
    from cases import cites_a_real_fact, load
    from gpudoctor.engine import _evidence
    from gpudoctor.snapshot import Snapshot

    snap = Snapshot.from_json(load("h200.json"))
    assert cites_a_real_fact(_evidence(snap, "gpu.0.name"), snap)
    assert cites_a_real_fact(_evidence(snap, ("TP × PP", 4)), snap)
    assert cites_a_real_fact(_evidence(snap, "env.CUDA_VISIBLE_DEVICES"), snap)
    del snap.facts["driver.library_path"]  # NVML could not start: the probe wrote no library path
    assert cites_a_real_fact(_evidence(snap, "driver.library_path"), snap)
    assert not cites_a_real_fact(_evidence(snap, "driver.verison"), snap)
    assert not cites_a_real_fact(_evidence(snap, "gpu.0.nmae"), snap)
    assert not cites_a_real_fact(_evidence(snap, ("gpu.1.name", "H100")), snap)  # labelled like a fact it is not
