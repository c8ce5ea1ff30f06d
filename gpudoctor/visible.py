"""CUDA_VISIBLE_DEVICES as the CUDA runtime reads it.

Entries are indices, ``GPU-<uuid>`` (a unique prefix is enough) or ``MIG-<uuid>``. The
runtime stops at the first entry it cannot resolve: everything after it is silently
dropped, which is how a typo hides GPUs. An empty value hides every GPU, and so does a
GPU named twice ("0,0", "0,1,0"): the runtime then enumerates no device at all (measured
on an H200: torch sees 0 GPUs under CUDA_VISIBLE_DEVICES=0,0; torch's own reading of the
variable, ``_parse_visible_devices`` in torch/cuda/__init__.py, says "Repeated ordinal
results in empty set" and, for UUIDs, "Repeated id results in empty set").
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import List, Optional, Sequence, Tuple

# ASCII digits only: str.isdigit() also accepts "²" or "٣", which int() rejects or CUDA never reads.
# At most 18 digits: a longer "index" resolves to no GPU anyway, and int() of 5,000 digits raises.
_INDEX = re.compile(r"-?[0-9]{1,18}")


@dataclass
class Visibility:
    indices: List[int]  # driver indices the process will see, in order
    invalid: List[str] = field(default_factory=list)  # entries the runtime cannot resolve
    dropped: List[str] = field(default_factory=list)  # valid-looking entries after the first invalid one
    duplicates: List[str] = field(default_factory=list)  # entries naming a GPU already named (before any invalid one)


def resolve(value: Optional[str], uuids: Sequence[Optional[str]]) -> Visibility:
    """Which GPUs (driver indices) a CUDA process sees, given the variable and the GPUs' UUIDs."""
    count = len(uuids)
    if value is None:
        return Visibility(list(range(count)))
    entries = [entry.strip() for entry in value.split(",")]
    while len(entries) > 1 and not entries[-1]:
        entries.pop()  # a trailing comma ("0,1,") loses no GPU
    if entries == [""]:
        return Visibility([])
    seen: List[int] = []
    vis = Visibility(seen)
    for position, entry in enumerate(entries):
        index = _lookup(entry, uuids)
        if index is None:
            vis.invalid.append(entry)
            vis.dropped = [e for e in entries[position + 1 :] if e]
            break
        if index in seen:
            vis.duplicates.append(entry)
            continue
        seen.append(index)
    if vis.duplicates:
        vis.indices = []  # a repeated GPU empties the whole set (see the module docstring)
    return vis


def _lookup(entry: str, uuids: Sequence[Optional[str]]) -> Optional[int]:
    if _INDEX.fullmatch(entry):
        number = int(entry)
        return number if 0 <= number < len(uuids) else None
    if entry.startswith("MIG-"):
        return None  # MIG instances are not enumerated here; treated as unresolvable by this check
    if entry.startswith("GPU-"):
        matches = [i for i, uuid in enumerate(uuids) if uuid and uuid.lower().startswith(entry.lower())]
        return matches[0] if len(matches) == 1 else None
    return None


def visible_gpus(snap) -> List[int]:
    """Driver indices a CUDA process on that machine sees (CUDA_VISIBLE_DEVICES of its ``env`` fact applied)."""
    uuids = [snap.value(f"gpu.{i}.uuid") for i in snap.gpu_indices()]
    env = snap.value("env", {}) or {}
    return resolve(env.get("CUDA_VISIBLE_DEVICES") if isinstance(env, dict) else None, uuids).indices


def gpu_kinds(snap) -> List[Tuple[str, str]]:
    """(name, compute capability) of each visible GPU, in order."""
    return [(str(snap.value(f"gpu.{i}.name") or "?"), str(snap.value(f"gpu.{i}.compute_capability") or "?")) for i in visible_gpus(snap)]
