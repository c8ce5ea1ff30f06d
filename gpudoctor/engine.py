"""Run rules on a snapshot. Rules are pure; a rule that raises becomes an outcome, never a crash.

One engine for one node or many: ``run_rules`` runs rules on one snapshot; ``run_cluster`` runs
it on a cluster's merged snapshot for the cross-node rules (area ``cluster``) and on each node's
own snapshot for every other rule (the caller hands over the nodes: gpudoctor/cluster.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Dict, List, Optional, Sequence, Tuple

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
from gpudoctor.snapshot import ERROR, Fact, Snapshot


@dataclass
class Result:
    snapshot: Snapshot
    outcomes: List[Outcome]
    debug: List[str] = field(default_factory=list)  # tracebacks of crashed rules, shown with -v
    notes: List[str] = field(default_factory=list)  # said loudly by every renderer (gpudoctor/gates.py)

    @property
    def findings(self) -> List[Finding]:
        """Every finding, those of one cause folded into one (``fold``), worst first."""
        found = fold([f for o in self.outcomes for f in o.findings])
        return sorted(found, key=lambda f: (-SEVERITY_RANK[f.severity], f.rule_id, f.subject))

    def counts(self) -> Dict[str, int]:
        """Findings by severity (one per cause), and the other outcomes by status."""
        counts = {"error": 0, "warning": 0, "info": 0, PASS: 0, UNKNOWN: 0, NOT_APPLICABLE: 0}
        for finding in self.findings:
            counts[finding.severity] += 1
        for outcome in self.outcomes:
            if outcome.status != FAIL:
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


def fold(findings: Sequence[Finding]) -> List[Finding]:
    """One finding per cause: findings with the same ``cause`` key (rules that each see a piece of
    one cause, e.g. GD503 and GD510 for an engine installed with ``pip install --no-deps``, return
    the one statement and fix built for it) are shown as the first of them, worst severity first,
    then by rule ID, naming the others in ``also``; its severity is the group's worst, so the exit
    code is the same as unfolded. Its evidence is each fact once; fix actions of the others are
    kept. Findings without a cause, and each rule's own outcome (JSON, JUnit, explain's
    confirmation), are left as they are."""
    groups: Dict[str, List[Finding]] = {}
    for finding in findings:
        if finding.cause:
            groups.setdefault(finding.cause, []).append(finding)
    out: List[Finding] = []
    for finding in findings:
        if not finding.cause:
            out.append(finding)
            continue
        group = groups.pop(finding.cause, None)
        if not group:
            continue  # folded into an earlier one
        if len(group) == 1:
            out.append(group[0])
            continue
        ordered = sorted(group, key=lambda f: (-SEVERITY_RANK[f.severity], f.rule_id, f.subject))
        first = ordered[0]
        evidence = list({(e.path, repr(e.value)): e for f in ordered for e in f.evidence}.values())
        fix = first.fix
        if fix is not None:
            extra = [a for f in ordered[1:] if f.fix for a in f.fix.actions if a not in fix.actions]
            fix = replace(fix, actions=list(fix.actions) + extra) if extra else fix
        also = [f.label for f in ordered[1:]]
        out.append(replace(first, evidence=evidence, fix=fix, also=list(dict.fromkeys(first.also + also))))
    return out


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
    reading = _Reading(snapshot)
    try:
        raw = meta.func(reading)
    except Exception as exc:  # a broken rule must not take the doctor down
        import traceback  # only for a rule that raised (kept for -v)

        debug.append(f"rule {meta.id} raised:\n{traceback.format_exc()}")
        culprit = _culprit(snapshot, meta, reading.read)
        if culprit is not None:
            return Outcome(meta, UNKNOWN, reason=culprit)
        return Outcome(meta, UNKNOWN, reason=f"rule crashed: {type(exc).__name__}: {str(exc)[:200]} (run with -v)")
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



# --- many nodes ------------------------------------------------------------------------------------
CROSS_NODE_AREA = "cluster"


@dataclass
class ClusterResult:
    """Cross-node rules on the merged snapshot plus single-node rules on each node that answered."""

    snapshot: Snapshot
    cluster: Result  # the rules of area "cluster" on the merged snapshot
    per_node: Dict[str, Result]  # node name -> the other rules on that node's own snapshot
    entries: List[Dict[str, Any]]  # every node: {"name", "status", "detail", …} (gpudoctor/cluster.py)
    debug: List[str] = field(default_factory=list)
    spreads: List[Any] = field(default_factory=list)  # watched values across nodes, for the matrix (rules/cluster_policy.py)
    notes: List[str] = field(default_factory=list)  # said loudly by every renderer, as Result.notes

    @property
    def outcomes(self) -> List[Outcome]:
        """Every outcome: the cross-node rules', then each answering node's."""
        return list(self.cluster.outcomes) + [o for result in self.per_node.values() for o in result.outcomes]

    @property
    def names(self) -> List[str]:
        return [e["name"] for e in self.entries]

    def entry(self, name: str) -> Dict[str, Any]:
        # By an index, rebuilt when the entries change: a scan per call made the renderers'
        # lookups grow with the square of the node count (1,000 nodes: 500,000 comparisons).
        index = self.__dict__.get("_index")
        if index is None or index[0] != len(self.entries):
            by_name: Dict[str, Dict[str, Any]] = {}
            for e in self.entries:
                by_name.setdefault(e["name"], e)
            index = self.__dict__["_index"] = (len(self.entries), by_name)
        return index[1].get(name) or {"name": name, "status": "error"}

    def node_findings(self, name: str) -> List[Finding]:
        """That node's own findings, each labelled with the node (subject ``node`` or ``node: GPU 1``)."""
        result = self.per_node.get(name)
        if result is None:
            return []
        return [replace(f, subject=f"{name}: {f.subject}" if f.subject else name) for f in result.findings]

    @property
    def cluster_findings(self) -> List[Finding]:
        return list(self.cluster.findings)

    @property
    def findings(self) -> List[Finding]:
        found = self.cluster_findings + [f for name in self.names for f in self.node_findings(name)]
        return sorted(found, key=lambda f: (-SEVERITY_RANK[f.severity], f.rule_id, f.subject))

    def counts(self) -> Dict[str, int]:
        total: Dict[str, int] = {}
        for result in [self.cluster] + list(self.per_node.values()):
            for key, value in result.counts().items():
                total[key] = total.get(key, 0) + value
        return total

    def blocking(self, fail_on: str) -> List[Finding]:
        return blocking(self.findings, fail_on)

    def gated(self, fail_on: str) -> bool:
        from gpudoctor.gates import gated

        return gated(self.blocking(fail_on), self.outcomes, fail_on)


def run_cluster(snapshot: Snapshot, rules: Sequence[RuleMeta], entries: Sequence[Dict[str, Any]],
                nodes: Sequence[Tuple[str, Snapshot]], spreads: Sequence[Any] = ()) -> ClusterResult:
    """Rules of area ``cluster`` on the merged snapshot; every other rule on each node's own.

    ``entries``: every node of the cluster (gpudoctor.cluster.node_entries); ``nodes``: (name,
    snapshot) of those that answered (gpudoctor.cluster.reachable); ``spreads``: carried for the
    renderers (the cross-node policy's watched values)."""
    cross = [r for r in rules if r.area == CROSS_NODE_AREA]
    single = [r for r in rules if r.area != CROSS_NODE_AREA]
    merged = run_rules(snapshot, cross)
    debug = list(merged.debug)
    per_node: Dict[str, Result] = {}
    for name, snap in nodes:
        per_node[name] = run_rules(snap, single)
        debug.extend(f"[{name}] {text}" for text in per_node[name].debug)
    return ClusterResult(snapshot, merged, per_node, list(entries), debug, list(spreads))

# --- typed facts ---------------------------------------------------------------------------------
# A snapshot is data from another machine or another tool version: a fact can hold a string where
# a rule expects a list. Rather than type-check every read in every rule, the engine records the
# facts a rule read; when the rule raises, it runs it again with the fact it read last marked
# unusable (a rule usually fails right after the read that surprised it), and again, until the
# rule finishes; then it drops the masks that were not needed. The facts left are the ones of an
# unexpected type, and the outcome says so: "unknown: fact X has an unexpected type", never
# "rule crashed". A rule that still raises with everything it read masked has a real bug.
MAX_RETRIES = 24


class _Reading(Snapshot):
    """The snapshot as a rule sees it (some facts masked), remembering which facts it read."""

    def __init__(self, base: Snapshot, masked: Optional[Dict[str, Fact]] = None):
        super().__init__({**base.facts, **masked} if masked else base.facts, base.meta)
        self.read: List[str] = []

    def get(self, path: str) -> Fact:
        self.read.append(path)
        return super().get(path)

    def value(self, path: str, default: Any = None) -> Any:
        self.read.append(path)
        return super().value(path, default)

    def with_prefix(self, prefix: str):
        for path, fact in super().with_prefix(prefix):
            self.read.append(path)
            yield path, fact


def _type_name(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "a number",
            float: "a number", type(None): "null"}.get(type(value), type(value).__name__)


def _masked(fact: Fact) -> Fact:
    return Fact(None, ERROR, fact.source, f"unexpected type: {_type_name(fact.value)}")


def _attempt(snapshot: Snapshot, meta: RuleMeta, masks: List[str]) -> Optional[List[str]]:
    """None when the rule finishes with ``masks`` masked, else the facts it read before raising."""
    view = _Reading(snapshot, {p: _masked(snapshot.facts[p]) for p in masks})
    try:
        meta.func(view)
    except Exception:
        return view.read
    return None


def _culprit(snapshot: Snapshot, meta: RuleMeta, read: List[str]) -> Optional[str]:
    """"fact X has an unexpected type (…)" when masking facts the rule read lets it finish."""
    masks: List[str] = []
    for _ in range(MAX_RETRIES):
        usable = [p for p in reversed(read) if p not in masks and p in snapshot.facts and snapshot.facts[p].ok]
        if not usable:
            return None
        masks.append(usable[0])
        again = _attempt(snapshot, meta, masks)
        if again is None:
            break
        read = again
    else:
        return None
    for path in list(masks[:-1]):  # keep only the masks the rule needs to finish
        trial = [m for m in masks if m != path]
        if _attempt(snapshot, meta, trial) is None:
            masks = trial
    parts = []
    for path in masks[:3]:
        shown = repr(snapshot.facts[path].value)
        parts.append(f"{path} ({_type_name(snapshot.facts[path].value)}: {shown if len(shown) <= 60 else shown[:57] + '...'})")
    more = f" and {len(masks) - 3} more" if len(masks) > 3 else ""
    noun = "fact" if len(masks) == 1 else "facts"
    verb = "has an unexpected type" if len(masks) == 1 else "have unexpected types"
    return f"{noun} {', '.join(parts)}{more} {verb}; the rule cannot judge it"


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
        cause=fail.cause,
    )


def _evidence(snapshot: Snapshot, item: Any) -> Evidence:
    if isinstance(item, str):
        fact = snapshot.get(item)
        return Evidence(item, fact.value if fact.ok else fact.describe(), fact.status)
    label, value = item
    return Evidence(str(label), value)
