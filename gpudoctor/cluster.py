"""A cluster as one Snapshot: several nodes' facts side by side, so cross-node rules stay pure.

Where the nodes' snapshots come from does not matter here: ``gpudoctor cluster`` gathers
them over Ray (gpudoctor/commands/cluster.py runs the probes on every node), the Slurm/ssh
path reads the files ``gpudoctor snapshot`` wrote on each node (``from_files``). Both build
the same structure (``merge``):

- ``cluster.nodes``: a list of ``{"name", "status", "detail", "source", "address", "head",
  "meta"}``, status ``ok`` | ``unreachable`` | ``timeout`` | ``error``;
- ``node.<name>.<path>``: every fact of each node that answered, prefixed with its name;
- ``cluster.plan``: ``{"tensor_parallel_size": N, "pipeline_parallel_size": M}`` when given;
- ``cluster.source``: where the snapshots came from (``ray 10.0.0.1:6379``, ``files``).

Node names contain only ``[A-Za-z0-9_-]`` (never a dot), so ``node.<name>.`` prefixes are
unambiguous. The engine (gpudoctor/engine.py ``run_cluster``) runs single-node rules on each
node's own snapshot (``node_snapshot`` strips the prefix) and rules of the area ``cluster`` on
the merged one; what those compare across nodes and how much a difference matters is their
policy, rules/cluster_policy.py. This module is the model and its I/O only: nothing here touches
the machine or judges a fact (rules, renderers and commands import it).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from gpudoctor.snapshot import Snapshot, SnapshotError, ok

NODES_FACT = "cluster.nodes"
PLAN_FACT = "cluster.plan"
SOURCE_FACT = "cluster.source"
PREFIX = "node."

NODE_OK = "ok"
UNREACHABLE = "unreachable"  # the node is gone (Ray marks it dead, its task could not run there)
NODE_TIMEOUT = "timeout"  # the node is there but did not answer in time
NODE_ERROR = "error"  # the node answered with an error (gpudoctor missing there, a bad file)
NODE_STATUSES = (NODE_OK, UNREACHABLE, NODE_TIMEOUT, NODE_ERROR)

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")


# --- building ---------------------------------------------------------------------------------
@dataclass
class Member:
    """One node of a cluster: its snapshot when it answered, else why not."""

    name: str
    status: str = NODE_OK
    detail: str = ""
    snapshot: Optional[Snapshot] = None
    source: str = ""  # "ray node 3f2a…" or the file it came from
    address: str = ""
    head: bool = False

    def entry(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {"name": self.name, "status": self.status}
        for key in ("detail", "source", "address"):
            if getattr(self, key):
                out[key] = getattr(self, key)
        if self.head:
            out["head"] = True
        if self.snapshot is not None and self.snapshot.meta:
            out["meta"] = dict(self.snapshot.meta)
        return out


def safe_name(text: Any, default: str = "node") -> str:
    """A node name usable in a fact path: letters, digits, ``_`` and ``-`` (dots become ``-``)."""
    name = _UNSAFE.sub("-", str(text or "")).strip("-")[:63]
    return name or default


def unique_names(names: Sequence[str]) -> List[str]:
    """The same names, with ``-2``, ``-3`` … appended where one repeats."""
    seen: Dict[str, int] = {}
    out: List[str] = []
    taken = set()
    for name in names:
        candidate = name
        while candidate in taken:
            seen[name] = seen.get(name, 1) + 1
            candidate = f"{name}-{seen[name]}"
        taken.add(candidate)
        out.append(candidate)
    return out


def merge(members: Sequence[Member], source: str = "", plan: Optional[Dict[str, int]] = None,
          meta: Optional[Dict[str, Any]] = None) -> Snapshot:
    """One Snapshot holding every member's facts under ``node.<name>.`` plus ``cluster.*``."""
    names = [m.name for m in members]
    if len(set(names)) != len(names) or any(safe_name(n) != n for n in names):
        raise ValueError(f"node names must be unique and safe: {names}")
    merged = Snapshot(meta=dict(meta or {}))
    merged.facts[NODES_FACT] = ok([m.entry() for m in members], "gpudoctor", f"{len(members)} nodes")
    merged.facts[SOURCE_FACT] = ok(source or "unknown", "gpudoctor")
    if plan:
        merged.facts[PLAN_FACT] = ok(dict(plan), "command line")
    for member in members:
        if member.snapshot is None:
            continue
        for path, fact in member.snapshot.facts.items():
            merged.facts[f"{PREFIX}{member.name}.{path}"] = fact
    return merged


def is_cluster(snapshot: Snapshot) -> bool:
    return NODES_FACT in snapshot.facts


def node_entries(snapshot: Snapshot) -> List[Dict[str, Any]]:
    """The well-formed entries of ``cluster.nodes`` (a hand-edited file may hold others)."""
    value = snapshot.value(NODES_FACT)
    if not isinstance(value, list):
        return []
    out, seen = [], set()
    for entry in value:
        if not isinstance(entry, dict):
            continue
        name, status = entry.get("name"), entry.get("status")
        if not isinstance(name, str) or safe_name(name) != name or name in seen or status not in NODE_STATUSES:
            continue
        seen.add(name)
        out.append(entry)
    return out


def node_snapshot(snapshot: Snapshot, name: str) -> Snapshot:
    """The snapshot of one node, as if it had been taken there (prefix stripped)."""
    return split(snapshot).get(name) or Snapshot({}, {})


def reachable(snapshot: Snapshot) -> List[Tuple[str, Snapshot]]:
    """(name, snapshot) of every node that answered, in cluster order."""
    nodes = split(snapshot)
    return [(e["name"], nodes.get(e["name"]) or Snapshot({}, {})) for e in node_entries(snapshot) if e["status"] == NODE_OK]


# Every cross-node rule and renderer asks for the nodes' snapshots (13 times per node in one
# `check`: a profile of 64 nodes rebuilt 832 of them, each a scan of every node's facts, so the
# cost grew with the square of the node count). The merged facts are split once, in one pass, and
# the split is kept while the same facts dict is asked again (rules see it through views that
# share the dict; a masked view is a new dict, hence a fresh split). The dict is held so its id
# cannot be reused; a size change (facts added or removed) starts over.
_SPLIT: List[Any] = []  # [facts dict, its size, cluster.nodes fact, {name: Snapshot}]


def split(snapshot: Snapshot) -> Dict[str, Snapshot]:
    """Every node's own snapshot (prefix stripped), by name, built in one pass over the facts."""
    facts = snapshot.facts
    nodes_fact = facts.get(NODES_FACT)
    if _SPLIT and _SPLIT[0] is facts and _SPLIT[1] == len(facts) and _SPLIT[2] is nodes_fact:
        return _SPLIT[3]
    by_name: Dict[str, Dict[str, Any]] = {}
    for path, fact in facts.items():
        if not path.startswith(PREFIX):
            continue
        # Names hold no dot: the first dot after the prefix ends the name.
        dot = path.find(".", len(PREFIX))
        if dot < 0:
            continue
        by_name.setdefault(path[len(PREFIX):dot], {})[path[dot + 1:]] = fact
    out: Dict[str, Snapshot] = {}
    entries = node_entries(snapshot)
    for entry in entries:
        meta = dict(entry["meta"]) if isinstance(entry.get("meta"), dict) else {}
        out[entry["name"]] = Snapshot(by_name.get(entry["name"], {}), meta)
    for name, node_facts in by_name.items():  # facts of a node not listed: still reachable by name
        if name not in out:
            out[name] = Snapshot(node_facts, {})
    _SPLIT[:] = [facts, len(facts), nodes_fact, out]
    return out


def plan(snapshot: Snapshot) -> Dict[str, int]:
    value = snapshot.value(PLAN_FACT)
    if not isinstance(value, dict):
        return {}
    return {k: v for k, v in value.items() if isinstance(v, int) and not isinstance(v, bool) and v > 0}


# --- the Slurm / ssh path: one snapshot file per node ----------------------------------------
def from_files(paths: Sequence[str], plan: Optional[Dict[str, int]] = None,
               transform: Optional[Callable[[Snapshot], None]] = None) -> Snapshot:
    """Build a cluster from snapshot files (``gpudoctor snapshot -o NODE.json`` on each node).

    A node is named by its snapshot's ``host.hostname`` when every file has a distinct one,
    else by the file name without ``.json``. A file that cannot be read or is not a
    snapshot becomes a node in status ``error`` (the rest of the report still comes out);
    a file that is itself a cluster snapshot contributes its nodes.
    """
    expanded: List[Tuple[str, str, Optional[Snapshot], Dict[str, Any]]] = []  # (preferred, fallback, snap, entry)
    pool: Dict[str, List[Any]] = {}

    def shared(node: Optional[Snapshot]) -> Optional[Snapshot]:
        # Each node's facts are shared as soon as it is read, so a fleet of one stack never holds
        # more than one copy of them plus the node being read (all of them read first, then
        # shared: 1,000 H200 snapshots peaked at 221 MB, ~0.2 MB a node).
        if node is not None:
            if transform is not None:
                transform(node)
            share_facts(node, pool)
        return node

    for path in paths:
        stem = _stem(path)
        try:
            snap: Optional[Snapshot] = Snapshot.load(path)
            error = ""
        except SnapshotError as exc:
            snap, error = None, str(exc)
        if snap is not None and is_cluster(snap):
            for entry in node_entries(snap):
                node = shared(node_snapshot(snap, entry["name"])) if entry["status"] == NODE_OK else None
                expanded.append((entry["name"], entry["name"], node, dict(entry, source=f"{path}: {entry.get('source') or entry['name']}")))
            continue
        host = snap.value("host.hostname") if snap is not None else None
        entry = {"status": NODE_OK if snap is not None else NODE_ERROR, "detail": error, "source": path}
        expanded.append((safe_name(str(host).split(".")[0]) if isinstance(host, str) and host else "", stem, shared(snap), entry))
    preferred = [p for p, _, _, _ in expanded]
    use_hosts = all(preferred) and len(set(preferred)) == len(preferred)
    names = unique_names([p if use_hosts else f for p, f, _, _ in expanded])
    members = []
    for name, (_, _, snap, entry) in zip(names, expanded):
        members.append(Member(name, entry["status"], entry.get("detail", ""), snap if entry["status"] == NODE_OK else None,
                              entry.get("source", ""), entry.get("address", ""), bool(entry.get("head"))))
    return merge(members, "files", plan, {"cluster": {"source": "files", "files": list(paths)}})


def share_facts(snapshot: Snapshot, pool: Dict[str, List[Any]], tries: int = 4) -> None:
    """Replace each fact of ``snapshot`` equal to one an earlier node held at the same path by that
    one, so a fleet holds identical facts once: 1,000 copies of a node cost about one node's memory,
    and the JSON report (render/fleet_json.py) finds them shared by identity. Each fact is compared
    with the last ``tries`` distinct facts seen at its path only, so a path that differs on every
    node (a host name) costs a few comparisons a node, not one per earlier node. Facts are never
    changed in place (rules are pure, ``--gpu`` replaces them), so sharing them is safe."""
    facts = snapshot.facts
    for path, fact in facts.items():
        seen = pool.get(path)
        if seen is None:
            pool[path] = [fact]
            continue
        for known in reversed(seen[-tries:]):
            if known == fact:
                facts[path] = known
                break
        else:
            seen.append(fact)


def expand_paths(paths: Sequence[str]) -> List[str]:
    """``--snapshot`` arguments as files: a directory gives its ``*.json`` files, a glob pattern
    (``snaps/node*.json``) its matches, each sorted; anything else, and a directory or pattern that
    matches nothing, stays as given (the loader then says why it cannot be read). A file is listed
    once even when two arguments name it."""
    import glob

    out: List[str] = []
    for path in paths:
        if os.path.isdir(path):
            found = sorted(os.path.join(path, name) for name in os.listdir(path)
                           if name.endswith(".json") and os.path.isfile(os.path.join(path, name)))
        elif not os.path.exists(path) and glob.has_magic(path):
            found = sorted(p for p in glob.glob(path) if os.path.isfile(p))
        else:
            found = []
        out.extend(found or [path])
    seen = set()
    return [p for p in out if not (p in seen or seen.add(p))]


def _stem(path: str) -> str:
    base = os.path.basename(path.rstrip("/")) or path
    for suffix in (".snapshot.json", ".json"):
        if base.endswith(suffix) and len(base) > len(suffix):
            base = base[: -len(suffix)]
            break
    return safe_name(base)
