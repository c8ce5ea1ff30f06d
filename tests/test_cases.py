"""Runs every area's case table (tests/cases/<area>.py) and guards that the tables are whole.

The guard reads the registry: a rule that is registered and has no passing and no failing
case here fails CI, whoever added it. ``NOT_YET_TABLED`` lists the rules whose tests predate
the tables (they are tested in the area's own test module, not yet as table rows); it may
only shrink: a rule in it that gains both cases, or is no longer registered, fails the guard
too, so the list stays true.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cases import Case, all_cases, check
from gpudoctor import registry

CASES = all_cases()

NOT_YET_TABLED = frozenset(
    "GD701 GD702 GD703 GD704 GD705 GD706 GD707 GD708 GD709 GD710 GD711 "
    "GD712 GD713 GD714 GD715 GD716 GD717 GD718 GD719 GD720 GD721 GD722 GD723".split()
)


@pytest.mark.parametrize("case", CASES, ids=[f"{c.rule}-{c.name}" for c in CASES])
def test_rule(case: Case, tmp_path: Path):
    check(case, tmp_path)


def test_every_registered_rule_has_a_failing_and_a_passing_case():
    catalogue = {meta.id for meta in registry.load_rules()}
    tabled = {rule_id for rule_id in catalogue if {"pass", "fail"} <= {c.status for c in CASES if c.rule == rule_id}}
    missing = sorted(catalogue - tabled - NOT_YET_TABLED)
    assert not missing, f"rules without a pass and a fail case in tests/cases/<area>.py: {missing} (see tests/cases/__init__.py)"
    stale = sorted(NOT_YET_TABLED & tabled) + sorted(NOT_YET_TABLED - catalogue)
    assert not stale, f"remove {stale} from NOT_YET_TABLED: tabled now, or no longer registered"


def test_cases_name_registered_rules_and_known_outcomes():
    catalogue = {meta.id for meta in registry.load_rules()}
    assert not sorted({c.rule for c in CASES} - catalogue)
    assert {c.status for c in CASES} <= {"pass", "fail", "unknown", "not_applicable"}
    names = [(c.rule, c.name) for c in CASES]
    assert len(names) == len(set(names)), "two cases of one rule share a name (the test id)"
