"""A cluster's JSON report, schema_version 2: every node kept, each identical thing stored once.

Schema 1 repeated every node's facts, outcomes and findings in full (1,000 copies of one H200
snapshot: 12.4 s, 1,029 MB, mostly the same lines); here the distinct facts, findings and outcomes
are tables (``shared``) and each node refers to them by index, so the document grows with the
differences between nodes, not with their number. The layout (README "A cluster", JSON)::

    {"schema_version": 2, "kind": "gpudoctor.cluster", "tool", "source", "fail_on", "blocking",
     "summary", "not_checked", "notes",
     "shared": {"facts": [fact…], "findings": [finding…], "outcomes": [outcome…],
                "outcome_lists": [[i…]…]},
     "common_facts": [[path, i]…],   # the fact most answering nodes hold at path: shared.facts[i]
     "nodes": [{"name", "status", "detail"?, "source"?, "address"?, "head"?, "gpudoctor", "summary",
                "facts": [[path, i | null]…],   # where it differs from common_facts (null: it lacks path)
                "findings": [i…],   # its own findings, in order: shared.findings[i]
                "outcomes": k}],    # its outcomes: shared.outcomes[i] for i in shared.outcome_lists[k]
     "across_nodes": {"findings": [finding…], "outcomes": [outcome…]},   # the cross-node rules'
     "finding_groups": [{"finding": i, "nodes": [name…]}],   # each distinct node finding, its nodes
     "matrix": {"columns": [name…], "rows": [{"label", "path", "differs",
                                             "groups": [{"value": text, "nodes": [name…]}]}]},
     "cluster_facts": {path: fact}}   # cluster.nodes, cluster.source, cluster.plan

A node's facts are ``common_facts`` laid under its own ``facts`` (``node_facts`` below does it);
a replayable merged snapshot is ``--save FILE``. Paths and indexes are pairs, not keys and values:
redaction masks the value of a secret-looking key (``launch.api_key``), and an index is no secret. Values shown next to a secret-looking fact path
are masked when the table is built (the path is not beside the value in the table), each distinct
fact redacted once through gpudoctor/redact.py; the whole document then goes through the run's
redactor as every output does.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any, Dict, List, Optional, Tuple

from gpudoctor import __version__
from gpudoctor.cluster import NODE_OK, PREFIX, split
from gpudoctor.engine import ClusterResult
from gpudoctor.redact import DEFAULT, Redactor

SCHEMA_VERSION = 2


class _Table:
    """Distinct JSON objects, each once; ``index`` gives an object's place. Objects that are the
    same Python object (facts shared by cluster.from_files) are looked up by identity first, so
    only distinct ones are serialized for their key."""

    def __init__(self, prepare=None) -> None:
        self.items: List[Any] = []
        self._by_key: Dict[Any, int] = {}
        self._by_id: Dict[Tuple[int, Any], int] = {}
        self._keep: List[Any] = []  # the objects looked up by id: held so no id is reused
        self._prepare = prepare

    def index(self, obj: Any, to_json, flavour: Any = None, key: Any = None) -> int:
        """``key``: a cheaper identity than the serialized JSON, when the caller has one."""
        known = self._by_id.get((id(obj), flavour))
        if known is not None:
            return known
        data = None
        if key is None:
            data = to_json(obj)
            key = json.dumps(data, sort_keys=True, default=str)
        found = self._by_key.get((flavour, key))
        if found is None:
            data = to_json(obj) if data is None else data
            found = self._by_key[(flavour, key)] = len(self.items)
            self.items.append(self._prepare(data, flavour) if self._prepare else data)
        self._by_id[(id(obj), flavour)] = found
        self._keep.append(obj)
        return found


def node_facts(document: Dict[str, Any], name: str) -> Dict[str, Any]:
    """One node's facts ({path: fact}) out of a schema-2 document, as its own snapshot held them."""
    facts = document["shared"]["facts"]
    node = next(n for n in document["nodes"] if n["name"] == name)
    if node.get("status") != NODE_OK:
        return {}
    refs = dict(document["common_facts"])
    refs.update(dict(node.get("facts") or []))
    return {path: facts[i] for path, i in sorted(refs.items()) if i is not None}


def document(result: ClusterResult, fail_on: str, redactor: Optional[Redactor] = None) -> Dict[str, Any]:
    from gpudoctor import verdict as judged
    from gpudoctor.render.matrix import rows

    redactor = redactor or DEFAULT
    facts = _Table(lambda data, secret: redactor.fact(data, secret))
    findings, outcomes, outcome_lists = _Table(), _Table(), _Table()
    snapshots = split(result.snapshot)
    answered = [n for n in result.names if result.entry(n)["status"] == NODE_OK and n in snapshots]

    # Each node's facts as indexes, then the most common index per path is the common layer.
    refs: Dict[str, Dict[str, int]] = {}
    secret: Dict[str, bool] = {}
    for name in answered:
        own = refs[name] = {}
        for path, fact in snapshots[name].facts.items():
            flag = secret.get(path)
            if flag is None:
                flag = secret[path] = redactor.secret_path(path)
            own[path] = facts.index(fact, _fact_json, flag)
    common = _common(refs, len(answered))

    nodes, groups = [], {}  # groups: finding index -> node names
    for name in result.names:
        entry = {k: v for k, v in result.entry(name).items() if k != "meta"}
        entry["gpudoctor"] = (result.entry(name).get("meta") or {}).get("gpudoctor")
        node_result = result.per_node.get(name)
        entry["summary"] = node_result.counts() if node_result else None
        if name in refs:
            own = refs[name]
            differs: Dict[str, Optional[int]] = {p: i for p, i in own.items() if common.get(p) != i}
            differs.update({p: None for p in common if p not in own})
            entry["facts"] = [[path, i] for path, i in sorted(differs.items())]
        if node_result is not None:
            entry["findings"] = [findings.index(f, _to_json) for f in node_result.findings]
            # Nodes of one stack have the same outcomes: the node names its list (one index), the
            # list names its outcomes, so 1,000 nodes do not write 1,000 lists of ~100 indexes.
            own_outcomes = tuple(outcomes.index(o, _to_json, key=_outcome_key(o)) for o in node_result.outcomes)
            entry["outcomes"] = outcome_lists.index(own_outcomes, list, key=own_outcomes)
            for i in entry["findings"]:
                groups.setdefault(i, []).append(name)
        nodes.append(entry)

    verdict = judged.of(result, fail_on)
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": "gpudoctor.cluster",
        "tool": {"name": "gpudoctor", "version": __version__},
        "source": str(result.snapshot.value("cluster.source") or "?"),
        "fail_on": fail_on,
        "blocking": verdict.gated,
        "summary": verdict.counts,
        "not_checked": [gap.to_json() for gap in verdict.gaps],
        "notes": list(result.notes),
        "shared": {"facts": facts.items, "findings": findings.items, "outcomes": outcomes.items,
                   "outcome_lists": outcome_lists.items},
        "common_facts": [[path, i] for path, i in sorted(common.items())],
        "nodes": nodes,
        "across_nodes": {"findings": [f.to_json() for f in result.cluster_findings],
                         "outcomes": [o.to_json() for o in result.cluster.outcomes]},
        "finding_groups": [{"finding": i, "nodes": names} for i, names in groups.items()],
        "matrix": {"columns": result.names, "rows": [_row(row) for row in rows(result)]},
        "cluster_facts": {path: fact.to_json() for path, fact in sorted(result.snapshot.facts.items())
                          if not path.startswith(PREFIX)},
    }


def _fact_json(fact: Any) -> Dict[str, Any]:
    return fact.to_json()


def _to_json(obj: Any) -> Dict[str, Any]:
    return obj.to_json()


def _outcome_key(outcome: Any) -> Any:
    """What an outcome's JSON holds, without writing it: its rule, status and reason; its findings
    (rare: most outcomes pass or do not apply) serialized."""
    found = json.dumps([f.to_json() for f in outcome.findings], sort_keys=True, default=str) if outcome.findings else ""
    return (outcome.rule.id, outcome.rule.name, outcome.rule.area, outcome.status, outcome.reason, found)


def _common(refs: Dict[str, Dict[str, int]], answered: int) -> Dict[str, int]:
    """Per path, the fact index most nodes hold (at least half of them, so a path few nodes have
    stays in theirs)."""
    counts = Counter(pair for own in refs.values() for pair in own.items())
    best: Dict[str, Tuple[int, int]] = {}  # path -> (count, index)
    for (path, i), count in counts.items():
        if count > best.get(path, (0, 0))[0]:
            best[path] = (count, i)
    return {path: i for path, (count, i) in best.items() if 2 * count >= answered}


def _row(row: Any) -> Dict[str, Any]:
    """A matrix row as its distinct values, each with its nodes, the most common first."""
    by_value: Dict[str, List[str]] = {}
    for name, text in row.values.items():
        by_value.setdefault(text, []).append(name)
    groups = sorted(by_value.items(), key=lambda item: -len(item[1]))
    return {"label": row.label, "path": row.path, "differs": row.differs,
            "groups": [{"value": value, "nodes": names} for value, names in groups]}
