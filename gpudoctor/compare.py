"""What differs between two snapshots (two machines, or one machine before and after).

The facts are flattened (``env`` becomes ``env.CUDA_VISIBLE_DEVICES`` …, a dict value
``gpu.0.remapped_rows`` becomes ``gpu.0.remapped_rows.pending`` …) and compared by value
and status. Differences are sorted by how much they matter for running an inference
server: the driver, CUDA, torch, vLLM, flash-attn, the GPU models and a few environment
variables first (``IMPORTANT``); everything else after; measurements that change from one
second to the next (probe timings, free and used memory, the processes holding a GPU) are
set aside as noise (``NOISE``).
"""

from __future__ import annotations

import fnmatch
import json
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from gpudoctor.explain import natural_key
from gpudoctor.redact import MASK, is_secret_name
from gpudoctor.snapshot import Fact, Snapshot, dist_key

# Ordered: the position is the importance (0 first). "*" matches within one path segment.
IMPORTANT: Tuple[str, ...] = (
    "driver.version",
    "driver.kernel_module_version",
    "driver.cuda_max",
    "driver.nvml",
    "driver.kernel_module_type",
    "driver.library_path",
    "cuda.*",
    "torch.version",
    "torch.cuda",
    "torch.*",
    "vllm.*",
    "flash_attn.*",
    "gpu.count",
    "gpu.*.name",
    "gpu.*.compute_capability",
    "env.CUDA_VISIBLE_DEVICES",
    "env.NVIDIA_VISIBLE_DEVICES",
    "env.CUDA_HOME",
    "env.CUDA_PATH",
    "env.LD_LIBRARY_PATH",
    "env.TORCH_CUDA_ARCH_LIST",
    "env.VLLM_*",
    "env.NCCL_*",
    "env.CUDA_*",
    "env.PYTORCH_*",
    "env.TORCH_*",
    "env.FLASH_ATTN*",
    "python.version",
)

# Set aside: they change between two runs on the same machine.
NOISE: Tuple[str, ...] = (
    "probe.*",
    "meta.*",
    "*.memory_free",
    "*.memory_used",
    "host.memory_available",
    "gpu.*.throttle_reasons",
    "gpu.*.pcie_gen_current",
    "gpu.*.processes",
    "gpu.*.processes.*",
    "gpu.*.temperature*",
    "gpu.*.power*",
    "gpu.*.clock*",
    "gpu.*.utilization*",
    "processes.*",
    "*.elapsed*",
    "packages.*.checked",  # how many RECORD files the probe checked: its budget, not the machine
    "packages.*.*.checked",
    "*.took*",
    # gpudoctor's own bookkeeping: how its kernel scan went (timings, cache) and where its child
    # interpreter looked for modules; the installed files and the environment are compared elsewhere
    "kernels.scan",
    "kernels.scan.*",
    "python.sys_path",
)

# Keys inside a fact's values that are gpudoctor's bookkeeping (a scan's timing per binary): left out
# before two values are compared, so `kernels.binaries` differs only when the binaries do.
BOOKKEEPING_KEYS = frozenset({"elapsed_s"})

ADDED = "added"
REMOVED = "removed"
CHANGED = "changed"


@dataclass
class Side:
    """One side of a difference: a value, or the status that says why there is none."""

    present: bool
    status: str = "ok"
    value: Any = None
    detail: str = ""

    def display(self, limit: int = 120, absent: str = "(not collected)") -> str:
        if not self.present:
            return absent
        if self.status != "ok":
            text = self.status + (f" ({self.detail})" if self.detail else "")
        elif isinstance(self.value, str):
            text = self.value if self.value else '""'
        else:
            text = json.dumps(self.value, sort_keys=True, default=str, ensure_ascii=False)
        return text if len(text) <= limit else text[: limit - 1] + "…"

    def to_json(self) -> Dict[str, Any]:
        if not self.present:
            return {"present": False}
        out: Dict[str, Any] = {"present": True, "status": self.status, "value": self.value}
        if self.detail:
            out["detail"] = self.detail
        return out


@dataclass
class Difference:
    path: str
    kind: str  # added | removed | changed
    a: Side
    b: Side
    rank: int  # index in IMPORTANT; len(IMPORTANT) for the rest

    @property
    def matters(self) -> bool:
        return self.rank < len(IMPORTANT)

    def to_json(self) -> Dict[str, Any]:
        return {"path": self.path, "kind": self.kind, "matters": self.matters, "a": self.a.to_json(), "b": self.b.to_json()}


@dataclass
class Comparison:
    matters: List[Difference] = field(default_factory=list)
    other: List[Difference] = field(default_factory=list)
    noise: List[Difference] = field(default_factory=list)
    same: int = 0  # paths present on both sides and equal
    # Facts only one side collected (an older gpudoctor, a probe that did not run there): not a
    # difference between the machines, so never one that matters; listed apart.
    one_sided: List[Difference] = field(default_factory=list)

    @property
    def differences(self) -> List[Difference]:
        return self.matters + self.other


def _matches(pattern: str, path: str) -> bool:
    """Dotted glob: ``*`` matches within one segment; a leading ``*.`` any prefix; a trailing ``.*`` any suffix."""
    parts, want = path.split("."), pattern.split(".")
    if want[0] == "*" and len(want) > 1 and not (want[-1] == "*" and len(want) == 2):
        tail = want[1:]
        return len(parts) > len(tail) and all(fnmatch.fnmatchcase(p, w) for p, w in zip(parts[-len(tail):], tail))
    if want[-1] == "*" and len(want) <= len(parts):
        # "cuda.*" covers cuda.nvcc and cuda.nvcc.version alike
        return all(fnmatch.fnmatchcase(p, w) for p, w in zip(parts, want[:-1]))
    return len(parts) == len(want) and all(fnmatch.fnmatchcase(p, w) for p, w in zip(parts, want))


def rank(path: str) -> int:
    for position, pattern in enumerate(IMPORTANT):
        if _matches(pattern, path):
            return position
    return len(IMPORTANT)


def is_noise(path: str) -> bool:
    return any(_matches(pattern, path) for pattern in NOISE)


def flatten(snapshot: Snapshot) -> Dict[str, Side]:
    """path -> Side. Ok dict values become one entry per key; secret-named keys are masked.

    Under ``packages.`` distribution names are compared as PEP 503 normalises them (``Jinja2``
    and ``jinja2``, ``absl_py`` and ``absl-py`` are one distribution)."""
    out: Dict[str, Side] = {}
    for path, fact in snapshot.facts.items():
        if path.startswith("packages.") and fact.ok:
            fact = Fact(_normalized_names(fact.value), fact.status, fact.source, fact.detail)
        _flatten_fact(path, fact, out)
    return out


def _normalized_names(value: Any) -> Any:
    if isinstance(value, dict):
        return {dist_key(k) if isinstance(k, str) else k: _normalized_names(v) if k not in ("name", "dist") else
                (dist_key(v) if isinstance(v, str) else v) for k, v in value.items()}
    if isinstance(value, list):
        return [_normalized_names(item) for item in value]
    return value


def _flatten_fact(path: str, fact: Fact, out: Dict[str, Side]) -> None:
    if fact.ok and isinstance(fact.value, dict) and fact.value:
        _flatten_value(path, fact.value, out)
    else:
        value = MASK if fact.ok and is_secret_name(path.rsplit(".", 1)[-1]) and fact.value else _without_bookkeeping(fact.value)
        out[path] = Side(True, fact.status, value, fact.detail if not fact.ok else "")


def _without_bookkeeping(value: Any) -> Any:
    """A list's items without gpudoctor's own timings (BOOKKEEPING_KEYS), at any depth."""
    if isinstance(value, dict):
        return {k: _without_bookkeeping(v) for k, v in value.items() if k not in BOOKKEEPING_KEYS}
    if isinstance(value, list):
        return [_without_bookkeeping(item) for item in value]
    return value


def _flatten_value(path: str, value: Dict[str, Any], out: Dict[str, Side]) -> None:
    for key, item in value.items():
        child = f"{path}.{key}"
        if is_secret_name(str(key)) and item not in (None, ""):
            out[child] = Side(True, "ok", MASK)
        elif isinstance(item, dict) and item:
            _flatten_value(child, item, out)
        else:
            out[child] = Side(True, "ok", _without_bookkeeping(item))


def _same(a: Side, b: Side) -> bool:
    if a.status != b.status:
        return False
    return a.status != "ok" or a.value == b.value


def compare(a: Snapshot, b: Snapshot) -> Comparison:
    left, right = flatten(a), flatten(b)
    result = Comparison()
    for path in sorted(set(left) | set(right), key=natural_key):
        la, rb = left.get(path), right.get(path)
        if la is not None and rb is not None and _same(la, rb):
            result.same += 1
            continue
        kind = ADDED if la is None else REMOVED if rb is None else CHANGED
        diff = Difference(path, kind, la or Side(False), rb or Side(False), rank(path))
        if is_noise(path):
            result.noise.append(diff)
        elif _not_collected(path, la, rb, a, b):
            result.one_sided.append(diff)
        elif diff.matters:
            result.matters.append(diff)
        else:
            result.other.append(diff)
    result.matters.sort(key=lambda d: (d.rank, natural_key(d.path)))
    return result


def _not_collected(path: str, la: Optional[Side], rb: Optional[Side], a: Snapshot, b: Snapshot) -> bool:
    """One snapshot lacks the fact altogether and the other's says nothing (absent, not run, empty):
    an older gpudoctor or a probe that did not run there, not a difference between the machines.
    A value on one side only (vLLM 0.11.0 here, nothing there; a second GPU) still counts."""
    if la is not None and rb is not None:
        return False
    missing, present = (a, rb) if la is None else (b, la)
    if _fact_of(path, missing) is not None:
        return False  # a key missing inside a fact both collected (an unset variable): a difference
    return present is None or present.status != "ok" or present.value in (None, "", [], {}, False)


def _fact_of(path: str, snapshot: Snapshot) -> Optional[str]:
    """The fact a flattened path belongs to (``env`` for ``env.CUDA_HOME``), None when the snapshot lacks it."""
    parts = path.split(".")
    for end in range(len(parts), 0, -1):
        if ".".join(parts[:end]) in snapshot.facts:
            return ".".join(parts[:end])
    return None


def summary(snapshot: Snapshot) -> str:
    """One line naming a snapshot's machine: GPUs, driver, torch."""
    from collections import Counter

    parts = []
    names = Counter(str(snapshot.value(f"gpu.{i}.name", "?")) for i in snapshot.gpu_indices())
    if names:
        parts.append(", ".join(f"{count} × {name}" for name, count in names.items()))
    if snapshot.value("driver.version"):
        parts.append(f"driver {snapshot.value('driver.version')}")
    if snapshot.value("torch.version"):
        parts.append(f"torch {snapshot.value('torch.version')}")
    return ", ".join(parts) or "no GPU facts"


@dataclass
class OutcomeChange:
    rule: str
    name: str
    a: str
    b: str
    message: str
    regression: bool = False  # B fails at or above --fail-on where A did not fail as badly

    def to_json(self) -> Dict[str, Any]:
        return {"id": self.rule, "name": self.name, "a": self.a, "b": self.b, "message": self.message,
                "regression": self.regression}


def outcome_changes(a: Snapshot, b: Snapshot, rules: Optional[list] = None, fail_on: str = "error") -> List[OutcomeChange]:
    """Rules whose verdict differs between the two machines (a severity, or pass / unknown / n/a),
    both snapshots judged by the same rules; regressions first."""
    from gpudoctor import registry
    from gpudoctor.engine import run_rules

    rules = rules if rules is not None else registry.load_rules()
    left, right = run_rules(a, rules), run_rules(b, rules)
    changes = []
    for oa, ob in zip(left.outcomes, right.outcomes):
        va, vb = _verdict(oa), _verdict(ob)
        if va != vb:
            if ob.findings:
                message = "B: " + ob.findings[0].message
            elif oa.findings:
                message = "A: " + oa.findings[0].message
            else:
                message = f"B: {ob.reason}" if ob.reason else f"A: {oa.reason}" if oa.reason else ""
            changes.append(OutcomeChange(oa.rule.id, oa.rule.name, va, vb, message, _regressed(va, vb, fail_on)))
    return sorted(changes, key=lambda c: not c.regression)


def _regressed(a: str, b: str, fail_on: str) -> bool:
    """B fails at or above ``fail_on`` (the gate check uses) and worse than A."""
    from gpudoctor.rule import SEVERITY_RANK

    floor = SEVERITY_RANK.get(fail_on, SEVERITY_RANK["warning"])
    worse = SEVERITY_RANK.get(b, -1) > SEVERITY_RANK.get(a, -1)
    return b in SEVERITY_RANK and SEVERITY_RANK[b] >= floor and worse


def _verdict(outcome) -> str:
    if outcome.findings:
        from gpudoctor.rule import SEVERITY_RANK

        return max((f.severity for f in outcome.findings), key=SEVERITY_RANK.__getitem__)
    return outcome.status.replace("_", " ")
