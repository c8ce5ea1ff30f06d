"""Run rules on a snapshot. Rules are pure; a rule that raises becomes an outcome, never a crash."""

from __future__ import annotations

import traceback
from dataclasses import dataclass, field
from typing import Any, Dict, List, Sequence

from gpudoctor.rule import (
    FAIL,
    NOT_APPLICABLE,
    PASS,
    SEVERITY_RANK,
    UNKNOWN,
    Evidence,
    Fail,
    Finding,
    NotApplicable,
    Outcome,
    Passed,
    RuleMeta,
    Unknown,
)
from gpudoctor.snapshot import Snapshot


@dataclass
class Result:
    snapshot: Snapshot
    outcomes: List[Outcome]
    debug: List[str] = field(default_factory=list)  # tracebacks of crashed rules, shown with -v
    notes: List[str] = field(default_factory=list)  # said loudly by every renderer (gpudoctor/gates.py)

    @property
    def findings(self) -> List[Finding]:
        found = [f for o in self.outcomes for f in o.findings]
        return sorted(found, key=lambda f: (-SEVERITY_RANK[f.severity], f.rule_id, f.subject))

    def counts(self) -> Dict[str, int]:
        counts = {"error": 0, "warning": 0, "info": 0, PASS: 0, UNKNOWN: 0, NOT_APPLICABLE: 0}
        for outcome in self.outcomes:
            if outcome.status == FAIL:
                for finding in outcome.findings:
                    counts[finding.severity] += 1
            else:
                counts[outcome.status] += 1
        return counts

    def blocking(self, fail_on: str) -> List[Finding]:
        return blocking(self.findings, fail_on)

    def gated(self, fail_on: str) -> bool:
        """Exit 1: findings at or above ``fail_on``; with ``unknown`` also a rule that could not decide."""
        from gpudoctor.gates import gated

        return gated(self.blocking(fail_on), self.outcomes, fail_on)


def blocking(findings: Sequence[Finding], fail_on: str) -> List[Finding]:
    """The findings at or above ``fail_on`` (one node's or a cluster's): what makes the exit code 1."""
    floor = SEVERITY_RANK.get(fail_on, SEVERITY_RANK["warning"])  # "unknown" blocks warnings too
    return [f for f in findings if SEVERITY_RANK[f.severity] >= floor]


def run_rules(snapshot: Snapshot, rules: Sequence[RuleMeta]) -> Result:
    result = Result(snapshot, [])
    for meta in rules:
        result.outcomes.append(_run_one(snapshot, meta, result.debug))
    return result


def _run_one(snapshot: Snapshot, meta: RuleMeta, debug: List[str]) -> Outcome:
    for path in meta.requires:
        fact = snapshot.get(path)
        if not fact.ok:
            return Outcome(meta, UNKNOWN, reason=f"needs {path}, which is {fact.describe()}")
    try:
        raw = meta.func(snapshot)
    except Exception as exc:  # a broken rule must not take the doctor down
        debug.append(f"rule {meta.id} raised:\n{traceback.format_exc()}")
        return Outcome(meta, UNKNOWN, reason=f"rule crashed: {type(exc).__name__}: {exc} (run with -v)")
    if raw is None or raw == []:
        return Outcome(meta, PASS)
    if isinstance(raw, Unknown):
        return Outcome(meta, UNKNOWN, reason=raw.reason)
    if isinstance(raw, NotApplicable):
        return Outcome(meta, NOT_APPLICABLE, reason=raw.reason)
    if isinstance(raw, Passed):
        return Outcome(meta, PASS, reason=raw.reason)
    fails = [raw] if isinstance(raw, Fail) else list(raw)
    findings = [_finding(snapshot, meta, fail) for fail in fails]
    return Outcome(meta, FAIL, findings)


def _finding(snapshot: Snapshot, meta: RuleMeta, fail: Fail) -> Finding:
    return Finding(
        rule_id=meta.id,
        name=meta.name,
        severity=fail.severity or meta.severity,
        area=meta.area,
        title=meta.title,
        message=fail.message,
        evidence=[_evidence(snapshot, item) for item in fail.evidence],
        fix=fail.fix,
        subject=fail.subject,
    )


def _evidence(snapshot: Snapshot, item: Any) -> Evidence:
    if isinstance(item, str):
        fact = snapshot.get(item)
        return Evidence(item, fact.value if fact.ok else fact.describe(), fact.status)
    label, value = item
    return Evidence(str(label), value)
