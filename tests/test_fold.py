"""One finding per cause (engine.fold): rules that each see a piece of one cause are shown as one.

The cause here is real in shape: an engine installed with ``pip install --no-deps`` beside another
torch (issue 31: three GD503s, a GD510 and a GD508 with about a hundred evidence lines and four pip
commands). tests/real/test_real_no_deps.py measures it on real wheels.
"""

from __future__ import annotations

import json
from pathlib import Path

from cases.vllm_build import a_vllm, site, torch
from gpudoctor import registry, verdict
from gpudoctor.engine import fold, run_rules
from gpudoctor.render import json_out, text
from gpudoctor.rule import Evidence, Finding, Fix
from gpudoctor.snapshot import Snapshot

NO_DEPS = site(torch(version="2.10.0", cuda="13.0"),
               a_vllm(version="0.20.0", requires=["torch==2.11.0", "regex", "psutil", "numpy", "fastapi"]))


def _finding(rule_id, severity="warning", cause="", evidence=(), actions=(), subject=""):
    return Finding(rule_id, "name-" + rule_id.lower(), severity, "vllm", "t", f"message of {rule_id}",
                   [Evidence(p, v) for p, v in evidence], Fix("do it", ["cmd"], actions=list(actions)), subject, cause)


def test_findings_of_one_cause_are_one_with_the_worst_severity_and_each_fact_once():
    found = [_finding("GD510", "error", "c", [("a", 1), ("b", 2)], actions=["x"]),
             _finding("GD503", "warning", "c", [("a", 1), ("c", 3)], actions=["y"], subject="vllm"),
             _finding("GD504", "warning")]
    shown = fold(found)
    assert [f.rule_id for f in shown] == ["GD510", "GD504"]
    first = shown[0]
    assert first.severity == "error" and first.also == ["GD503 name-gd503 [vllm]"]
    assert [(e.path, e.value) for e in first.evidence] == [("a", 1), ("b", 2), ("c", 3)]
    assert first.fix is not None and first.fix.actions == ["x", "y"]  # `gpudoctor fix` loses no action
    assert found[0].also == [] and len(found[0].evidence) == 2  # the rules' own findings are left as they are


def test_findings_without_a_cause_or_alone_in_theirs_are_unchanged():
    found = [_finding("GD503", cause="c"), _finding("GD504"), _finding("GD505")]
    assert fold(found) == found


def _no_deps_result(tmp_path: Path):
    built = NO_DEPS(tmp_path)
    snap = built if isinstance(built, Snapshot) else Snapshot.from_json(built)
    rules = [meta for meta in registry.load_rules() if meta.id in ("GD503", "GD510")]
    return run_rules(snap, rules)


def test_an_engine_installed_with_no_deps_is_one_finding_with_one_fix(tmp_path: Path):
    result = _no_deps_result(tmp_path)
    assert [o.status for o in result.outcomes] == ["fail", "fail"]  # each rule still fails on its own
    shown = result.findings
    assert len(shown) == 1, [f.label for f in shown]
    finding = shown[0]
    assert finding.rule_id == "GD503" and finding.severity == "error" and finding.also == ["GD510 vllm-pins-not-met [vllm]"]
    assert "vllm 0.20.0 was installed without its requirements" in finding.message
    assert finding.fix is not None and finding.fix.commands[-1].endswith("-m pip install vllm==0.20.0  # keeps this vllm; installs what it requires")
    assert result.counts()["error"] == 1
    assert verdict.of(result, "error").exit_code == 1  # folding never lowers the exit code

    lines = text.plain(text.build(result, "error"))
    assert lines.count("GD503 requirement-not-satisfied") == 1 and "GD510 vllm-pins-not-met [vllm]: " not in lines
    assert "same cause: GD510 vllm-pins-not-met [vllm]" in lines
    assert "Summary: 1 error," in lines

    doc = json.loads(json_out.dumps(json_out.document(result, "error")))
    assert len(doc["findings"]) == 1 and doc["findings"][0]["same_cause"] == ["GD510 vllm-pins-not-met [vllm]"]
    assert {o["id"]: o["status"] for o in doc["outcomes"]} == {"GD503": "fail", "GD510": "fail"}


def test_the_evidence_is_what_people_read_not_a_line_per_package(tmp_path: Path):
    finding = _no_deps_result(tmp_path).findings[0]
    assert [e.path for e in finding.evidence] == ["not installed, required by vllm", "installed, another version than required"]
    assert finding.evidence[0].value == ["regex", "psutil", "numpy", "fastapi"]
    assert finding.evidence[1].value == ["torch 2.10.0 (vllm requires torch==2.11.0)"]
