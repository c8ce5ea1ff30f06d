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
unambiguous. Single-node rules run on each node's own snapshot (``node_snapshot`` strips the
prefix); rules of the area ``cluster`` run on the merged one and compare a configurable list
of facts across nodes (``WATCHES``, ``spreads``), tolerating facts a node does not have.
Nothing here touches the machine: rules import this module.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from gpudoctor.snapshot import ABSENT, OK, Fact, Snapshot, SnapshotError, ok
from gpudoctor.visible import visible_gpus

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
    prefix = f"{PREFIX}{name}."
    facts = {path[len(prefix):]: fact for path, fact in snapshot.facts.items() if path.startswith(prefix)}
    meta: Dict[str, Any] = {}
    for entry in node_entries(snapshot):
        if entry["name"] == name and isinstance(entry.get("meta"), dict):
            meta = dict(entry["meta"])
    return Snapshot(facts, meta)


def reachable(snapshot: Snapshot) -> List[Tuple[str, Snapshot]]:
    """(name, snapshot) of every node that answered, in cluster order."""
    return [(e["name"], node_snapshot(snapshot, e["name"])) for e in node_entries(snapshot) if e["status"] == NODE_OK]


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
    loaded: List[Tuple[str, Optional[Snapshot], str]] = []  # (path, snapshot, error)
    for path in paths:
        try:
            loaded.append((path, Snapshot.load(path), ""))
        except SnapshotError as exc:
            loaded.append((path, None, str(exc)))
    expanded: List[Tuple[str, str, Optional[Snapshot], Dict[str, Any]]] = []  # (preferred, fallback, snap, entry)
    for path, snap, error in loaded:
        stem = _stem(path)
        if snap is not None and is_cluster(snap):
            for entry in node_entries(snap):
                node = node_snapshot(snap, entry["name"]) if entry["status"] == NODE_OK else None
                expanded.append((entry["name"], entry["name"], node, dict(entry, source=f"{path}: {entry.get('source') or entry['name']}")))
            continue
        host = snap.value("host.hostname") if snap is not None else None
        entry = {"status": NODE_OK if snap is not None else NODE_ERROR, "detail": error, "source": path}
        expanded.append((safe_name(str(host).split(".")[0]) if isinstance(host, str) and host else "", stem, snap, entry))
    preferred = [p for p, _, _, _ in expanded]
    use_hosts = all(preferred) and len(set(preferred)) == len(preferred)
    names = unique_names([p if use_hosts else f for p, f, _, _ in expanded])
    members = []
    for name, (_, _, snap, entry) in zip(names, expanded):
        if snap is not None and transform is not None:
            transform(snap)
        members.append(Member(name, entry["status"], entry.get("detail", ""), snap if entry["status"] == NODE_OK else None,
                              entry.get("source", ""), entry.get("address", ""), bool(entry.get("head"))))
    return merge(members, "files", plan, {"cluster": {"source": "files", "files": list(paths)}})


def _stem(path: str) -> str:
    base = os.path.basename(path.rstrip("/")) or path
    for suffix in (".snapshot.json", ".json"):
        if base.endswith(suffix) and len(base) > len(suffix):
            base = base[: -len(suffix)]
            break
    return safe_name(base)


# --- comparing facts across nodes ------------------------------------------------------------
@dataclass(frozen=True)
class Watch:
    """One thing compared across nodes.

    ``kind``: ``fact`` (a fact path), ``pattern`` (every top-level fact path matching a glob,
    for facts other probes add: ``cuda.*``, ``vllm.*`` …), ``package`` (a distribution's
    version in ``packages.dists``), ``env`` (environment variables matching a glob).
    ``group`` says which rule judges it; ``severity`` how much a difference matters.
    """

    group: str  # driver | stack | env
    kind: str  # fact | pattern | package | env
    what: str
    severity: str = "warning"
    label: str = ""


# The configurable list: what must agree across the nodes of one vLLM deployment.
WATCHES: Tuple[Watch, ...] = (
    Watch("driver", "fact", "driver.version"),
    Watch("driver", "fact", "driver.cuda_max"),
    Watch("driver", "fact", "driver.kernel_module_type"),
    Watch("stack", "fact", "python.version", "error"),
    Watch("stack", "fact", "torch.version", "error"),
    Watch("stack", "fact", "torch.cuda", "error"),
    Watch("stack", "pattern", "cuda.*"),  # toolkit facts (probes/cuda.py): CUDA_HOME, nvcc, toolkits
    Watch("stack", "pattern", "vllm.*", "error"),  # vLLM version / commit facts
    Watch("stack", "pattern", "flash_attn.*", "error"),  # flash-attn variant facts
    Watch("stack", "pattern", "nccl.*", "error"),  # NCCL version facts
    Watch("stack", "package", "vllm", "error"),
    Watch("stack", "package", "flash-attn", "error"),
    Watch("stack", "package", "flash-attn-3", "error"),
    Watch("stack", "package", "flash-attn-4", "error"),
    Watch("stack", "package", "fa4", "error"),
    Watch("stack", "package", "vllm-flash-attn", "error"),
    Watch("stack", "package", "nvidia-nccl-cu11", "error"),
    Watch("stack", "package", "nvidia-nccl-cu12", "error"),
    Watch("stack", "package", "nvidia-nccl-cu13", "error"),
    Watch("stack", "package", "ray", "error"),
    Watch("stack", "package", "flashinfer-python"),
    Watch("stack", "package", "xformers"),
    Watch("stack", "package", "triton"),
    Watch("stack", "package", "transformers"),
    Watch("env", "env", "NCCL_*"),
    Watch("env", "env", "VLLM_*"),
    Watch("env", "env", "TORCH_NCCL_*"),
    Watch("env", "env", "CUDA_DEVICE_ORDER"),
    Watch("env", "env", "PYTORCH_CUDA_ALLOC_CONF"),
)
# Never compared: values that legitimately differ from node to node.
IGNORED: Tuple[str, ...] = (
    "*.path", "*.paths", "*.realpath", "*.location", "*.executable", "*.prefix", "*.source", "*.sources",
    "*.dir", "*.binaries", "*.files", "cuda.gcc", "probe.*",
    "env.VLLM_HOST_IP",  # unique per node by design (vLLM's run_cluster.sh: -e VLLM_HOST_IP=<node ip>)
)
UNSET = "(unset)"
NOT_INSTALLED = "(not installed)"


@dataclass
class Spread:
    """One watched value across the nodes that answered."""

    label: str
    path: str  # evidence path inside a node snapshot ("torch.version", "env.NCCL_DEBUG", "packages.dists.vllm")
    watch: Watch
    values: Dict[str, str] = field(default_factory=dict)  # node -> value shown
    unknown: Dict[str, str] = field(default_factory=dict)  # node -> why it could not be compared

    @property
    def differs(self) -> bool:
        return len(set(self.values.values())) > 1

    def groups(self) -> List[Tuple[str, List[str]]]:
        """(value, nodes) from the most common value down; ties keep cluster order."""
        order: Dict[str, List[str]] = {}
        for node, value in self.values.items():
            order.setdefault(value, []).append(node)
        return sorted(order.items(), key=lambda item: -len(item[1]))

    def majority(self) -> Optional[str]:
        groups = self.groups()
        if len(groups) == 1 or (len(groups) > 1 and len(groups[0][1]) > len(groups[1][1])):
            return groups[0][0]
        return None

    def odd(self) -> List[str]:
        """The nodes out of step: those without the majority value (every node when there is none)."""
        major = self.majority()
        return [node for node, value in self.values.items() if major is None or value != major]


def matches(pattern: str, path: str) -> bool:
    return fnmatch.fnmatchcase(path, pattern)


def ignored(path: str) -> bool:
    return any(matches(pattern, path) for pattern in IGNORED)


def summarize(value: Any) -> str:
    """A short comparable text for a fact value: versions of dicts that carry one, JSON else."""
    if isinstance(value, dict):
        if "version" in value and not isinstance(value["version"], (dict, list)):
            extra = value.get("commit") or value.get("git") or ""
            return str(value["version"]) + (f" ({extra})" if isinstance(extra, str) and extra else "")
        return json.dumps(value, sort_keys=True, default=str, ensure_ascii=False)
    if isinstance(value, list):
        parts = [summarize(item) for item in value]
        if all(isinstance(item, dict) and "version" in item for item in value):
            parts = sorted(set(parts))
        return "[" + ", ".join(parts) + "]"
    if isinstance(value, str):
        return value
    return json.dumps(value, default=str)


def _fact_value(fact: Optional[Fact]) -> Tuple[bool, str]:
    """(comparable, text). Absent is a value (torch missing on one node is the point); errors are not."""
    if fact is None:
        return False, "not collected"
    if fact.status == OK:
        return True, summarize(fact.value)
    if fact.status == ABSENT:
        return True, "(absent)"
    return False, fact.describe()


def _dists(snap: Snapshot) -> Optional[Dict[str, Any]]:
    fact = snap.facts.get("packages.dists")
    if fact is None or not fact.ok or not isinstance(fact.value, dict):
        return None
    return fact.value


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def spreads(snapshot: Snapshot, watches: Sequence[Watch] = WATCHES, groups: Iterable[str] = ()) -> List[Spread]:
    """Every watched value across the nodes that answered (differing or not), in watch order."""
    wanted = set(groups)
    nodes = reachable(snapshot)
    out: List[Spread] = []
    seen_paths = set()
    for watch in watches:
        if wanted and watch.group not in wanted:
            continue
        for spread in _expand(watch, nodes):
            if spread.path in seen_paths or ignored(spread.path):
                continue
            seen_paths.add(spread.path)
            if spread.values or spread.unknown:
                out.append(spread)
    return out


def _expand(watch: Watch, nodes: List[Tuple[str, Snapshot]]) -> List[Spread]:
    if watch.kind == "fact":
        paths = [watch.what] if any(watch.what in s.facts for _, s in nodes) else []
        return [_fact_spread(watch, path, nodes) for path in paths]
    if watch.kind == "pattern":
        paths = sorted({p for _, s in nodes for p in s.facts if matches(watch.what, p) and not ignored(p)})
        return [_fact_spread(watch, path, nodes) for path in paths]
    if watch.kind == "package":
        return [_package_spread(watch, nodes)]
    if watch.kind == "env":
        names = set()
        for _, snap in nodes:
            env = snap.value("env")
            if isinstance(env, dict):
                names.update(n for n in env if matches(watch.what, n))
        return [_env_spread(watch, name, nodes) for name in sorted(names)]
    return []


def _fact_spread(watch: Watch, path: str, nodes: List[Tuple[str, Snapshot]]) -> Spread:
    spread = Spread(watch.label or path, path, watch)
    for name, snap in nodes:
        comparable, text = _fact_value(snap.facts.get(path))
        (spread.values if comparable else spread.unknown)[name] = text
    return spread


def _package_spread(watch: Watch, nodes: List[Tuple[str, Snapshot]]) -> Spread:
    key = normalize(watch.what)
    spread = Spread(watch.label or f"{watch.what} (package)", f"packages.dists.{key}", watch)
    for name, snap in nodes:
        dists = _dists(snap)
        if dists is None:
            spread.unknown[name] = snap.get("packages.dists").describe()
            continue
        dist = dists.get(key)
        version = dist.get("version") if isinstance(dist, dict) else None
        spread.values[name] = str(version) if version else NOT_INSTALLED
    if all(v == NOT_INSTALLED for v in spread.values.values()):
        spread.values.clear()  # installed nowhere: nothing to compare, nothing to show
        spread.unknown.clear()
    return spread


def _env_spread(watch: Watch, var: str, nodes: List[Tuple[str, Snapshot]]) -> Spread:
    spread = Spread(watch.label or var, f"env.{var}", watch)
    for name, snap in nodes:
        fact = snap.facts.get("env")
        if fact is None or not fact.ok or not isinstance(fact.value, dict):
            spread.unknown[name] = fact.describe() if fact is not None else "not collected"
            continue
        value = fact.value.get(var)
        spread.values[name] = UNSET if value is None else str(value)
    return spread


# --- GPUs per node ----------------------------------------------------------------------------
# visible_gpus (imported above from gpudoctor.visible): driver indices a CUDA process on that node sees.


def gpu_kinds(snap: Snapshot) -> List[Tuple[str, str]]:
    """(name, compute capability) of each visible GPU, in order."""
    return [(str(snap.value(f"gpu.{i}.name") or "?"), str(snap.value(f"gpu.{i}.compute_capability") or "?")) for i in visible_gpus(snap)]


# --- running the rules on a cluster ----------------------------------------------------------
@dataclass
class ClusterResult:
    """Cross-node rules on the merged snapshot plus single-node rules on each node that answered."""

    snapshot: Snapshot
    cluster: Any  # engine.Result of the rules of area "cluster"
    per_node: Dict[str, Any]  # node name -> engine.Result of the other rules on that node
    entries: List[Dict[str, Any]]
    debug: List[str] = field(default_factory=list)

    @property
    def names(self) -> List[str]:
        return [e["name"] for e in self.entries]

    def entry(self, name: str) -> Dict[str, Any]:
        return next((e for e in self.entries if e["name"] == name), {"name": name, "status": NODE_ERROR})

    def node_findings(self, name: str) -> List[Any]:
        """That node's own findings, each labelled with the node (subject ``node`` or ``node: GPU 1``)."""
        result = self.per_node.get(name)
        if result is None:
            return []
        return [replace(f, subject=f"{name}: {f.subject}" if f.subject else name) for f in result.findings]

    @property
    def cluster_findings(self) -> List[Any]:
        return list(self.cluster.findings)

    @property
    def findings(self) -> List[Any]:
        from gpudoctor.rule import SEVERITY_RANK

        found = self.cluster_findings + [f for name in self.names for f in self.node_findings(name)]
        return sorted(found, key=lambda f: (-SEVERITY_RANK[f.severity], f.rule_id, f.subject))

    def counts(self) -> Dict[str, int]:
        total: Dict[str, int] = {}
        for result in [self.cluster] + list(self.per_node.values()):
            for key, value in result.counts().items():
                total[key] = total.get(key, 0) + value
        return total

    def blocking(self, fail_on: str) -> List[Any]:
        from gpudoctor.engine import blocking

        return blocking(self.findings, fail_on)


CLUSTER_AREA = "cluster"


def run(snapshot: Snapshot, rules: Sequence[Any]) -> ClusterResult:
    """Rules of area ``cluster`` on the merged snapshot; every other rule on each node's own."""
    from gpudoctor.engine import run_rules

    cluster_rules = [r for r in rules if r.area == CLUSTER_AREA]
    node_rules = [r for r in rules if r.area != CLUSTER_AREA]
    entries = node_entries(snapshot)
    cluster = run_rules(snapshot, cluster_rules)
    debug = list(cluster.debug)
    per_node: Dict[str, Any] = {}
    for name, snap in reachable(snapshot):
        per_node[name] = run_rules(snap, node_rules)
        debug.extend(f"[{name}] {text}" for text in per_node[name].debug)
    return ClusterResult(snapshot, cluster, per_node, entries, debug)

