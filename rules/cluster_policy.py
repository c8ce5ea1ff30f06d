"""The cross-node policy of the GD9xx rules: which facts must agree across the nodes of one
vLLM deployment, how much a difference matters, and what is never compared.

``WATCHES`` is the configurable list; ``spreads`` reads every watched value across the nodes
that answered (gpudoctor/cluster.py is the model: ``cluster.nodes`` plus ``node.<name>.<path>``)
and tolerates facts a node does not have: a value a node could not collect is set apart
(``Spread.unknown``), never counted as a difference. rules/cluster.py judges the spreads; the
cluster matrix (gpudoctor/render/matrix.py) shows them, handed over by the command with the
engine's result (``ClusterResult.spreads``), as renderers never import rules.
"""

from __future__ import annotations

import fnmatch
import json
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from gpudoctor.cluster import reachable
from gpudoctor.snapshot import ABSENT, OK, Fact, Snapshot, dist_key


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
    "nccl.allreduce_check", "nccl.allreduce_check.*",  # --deep's measurement on each node (bandwidth, timings)
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
        # The nodes' paths are mostly the same ones: match each distinct path once (1,000 nodes
        # matched 1.2 million paths, 1.2 s, for about a hundred distinct ones).
        every = {p for _, s in nodes for p in s.facts}
        paths = sorted(p for p in every if matches(watch.what, p) and not ignored(p))
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
    # A fleet's nodes share identical facts (cluster.share_facts): each distinct one summarized once.
    texts: Dict[int, Tuple[bool, str]] = {}
    for name, snap in nodes:
        fact = snap.facts.get(path)
        known = texts.get(id(fact))
        comparable, text = known if known is not None else texts.setdefault(id(fact), _fact_value(fact))
        (spread.values if comparable else spread.unknown)[name] = text
    return spread


def _package_spread(watch: Watch, nodes: List[Tuple[str, Snapshot]]) -> Spread:
    key = dist_key(watch.what)
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
