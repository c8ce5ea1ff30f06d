"""``--gpu SPEC``: check an environment against a GPU that is not present.

- ``parse_spec`` reads ``[N x]GPU[-MEM]`` (``sm_80``, ``8.6``, ``86``, ``A100``, ``H100``,
  ``"RTX 4090"``, ``2xH100-80GB``) and ``override_snapshot`` puts those GPUs into a snapshot.

The tables (names, compute capabilities, memory) and which code runs where are knowledge:
gpudoctor/knowledge/gpus.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from gpudoctor.knowledge.gpus import KNOWN_CCS, cc_for_name, family_for_cc, table_memory, variant_memory

EXAMPLES = "sm_80, sm_90a, 8.6, 86, A100, H100, \"RTX 4090\", 2xH100-80GB, 8xA100-40GB"


@dataclass
class GpuSpec:
    cc: str  # "8.0"
    name: str  # what to call it in findings
    variant: str = ""  # "a" or "f" when the spec named an arch-specific target (sm_90a)
    count: int = 1  # `2xH100`: GPUs in the target machine
    memory: Optional[int] = None  # bytes per GPU (`-80GB`, or the product's table memory)
    assumed: str = ""  # which memory size was assumed for a product made with several (`A100`), in words

    @property
    def sm(self) -> int:
        major, minor = self.cc.split(".")
        return int(major) * 10 + int(minor)


class SpecError(ValueError):
    pass


_ARCH = re.compile(r"^(?:sm|compute)_?(\d{2,3})([af]?)$", re.I)
_DOTTED = re.compile(r"^(\d{1,2})\.(\d)$")
_NUMBER = re.compile(r"^(\d{2,3})$")


_COUNT = re.compile(r"^(\d{1,3})\s*[x×*]\s*(.+)$", re.I)
_MEMORY = re.compile(r"^(.*?)[\s_-]+(\d{1,4}(?:\.\d+)?)\s*(G|GB|GiB|T|TB|TiB)$", re.I)
MAX_COUNT = 1024


def parse_spec(text: str) -> GpuSpec:
    """``[N x]GPU[-MEM]``: ``2xH100-80GB``, ``8xA100-40GB``, ``"A100 80GB"``, ``H200`` (its table
    memory), ``sm_80`` / ``compute_90a`` / ``8.6`` / ``86`` → GpuSpec; SpecError otherwise."""
    spec = (text or "").strip()
    if not spec:
        raise SpecError(f"--gpu needs a GPU: {EXAMPLES}")
    count = 1
    counted = _COUNT.match(spec)
    if counted:
        count = int(counted.group(1))
        if not 1 <= count <= MAX_COUNT:
            raise SpecError(f"--gpu {text!r}: the GPU count must be between 1 and {MAX_COUNT}")
        spec = counted.group(2).strip()
    memory = None
    sized = _MEMORY.match(spec)
    if sized and sized.group(1).strip():
        amount = float(sized.group(2)) * (1024 if sized.group(3).upper().startswith("T") else 1)
        if not 1 <= amount <= 4096:
            raise SpecError(f"--gpu {text!r}: {sized.group(2)}{sized.group(3)} is not a GPU's memory")
        memory = int(amount * 2**30)
        spec = sized.group(1).strip()
    found = _parse_one(spec)
    found.count = count
    found.memory = memory if memory is not None else table_memory(found.name)
    if found.memory is None:  # `--gpu A100`: judged as one of its sizes, and said so (issue 31)
        variant = variant_memory(found.name)
        if variant is not None:
            found.memory, found.assumed = variant[0], f"--gpu {text.strip()}: {variant[1]}"
    return found


def _parse_one(spec: str) -> GpuSpec:
    match = _ARCH.match(spec) or _NUMBER.match(spec)
    if match:
        number = int(match.group(1))
        cc = f"{number // 10}.{number % 10}"
        variant = match.group(2).lower() if match.re is _ARCH else ""
    else:
        dotted = _DOTTED.match(spec)
        if dotted:
            cc, variant = f"{int(dotted.group(1))}.{dotted.group(2)}", ""
        else:
            found = cc_for_name(spec)
            if found is None:
                raise SpecError(f"--gpu {spec!r}: unknown GPU; give a compute capability or a product name ({EXAMPLES})")
            return GpuSpec(found, spec, "")
    if cc not in KNOWN_CCS:
        raise SpecError(f"--gpu {spec!r}: no NVIDIA GPU has compute capability {cc} (known: {', '.join(KNOWN_CCS)})")
    family = family_for_cc(cc)
    return GpuSpec(cc, f"a GPU with cc {cc}" + (f" ({family})" if family else ""), variant)


def override_snapshot(snapshot, spec: GpuSpec, text: str) -> None:
    """Replace the snapshot's GPUs by ``spec.count`` synthetic GPUs of ``spec`` (source "--gpu"),
    with their memory when the spec gives or implies it.

    Driver facts stay as they were (absent on a CPU build box); rules that judge kernels and
    arch lists then judge against this GPU.
    """
    from gpudoctor.snapshot import ok

    for path in [p for p in snapshot.facts if p.startswith("gpu.")]:
        del snapshot.facts[path]
    source = f"--gpu {text}"
    snapshot.facts["gpu.count"] = ok(spec.count, source)
    for index in range(spec.count):
        snapshot.facts[f"gpu.{index}.name"] = ok(spec.name, source)
        snapshot.facts[f"gpu.{index}.compute_capability"] = ok(spec.cc, source)
        if spec.memory is not None:
            # The target machine's GPUs, idle: all of the memory free, no other processes.
            snapshot.facts[f"gpu.{index}.memory_total"] = ok(spec.memory, source, spec.assumed)
            snapshot.facts[f"gpu.{index}.memory_free"] = ok(spec.memory, source, "assumed idle")
            snapshot.facts[f"gpu.{index}.memory_used"] = ok(0, source, "assumed idle")
            snapshot.facts[f"gpu.{index}.memory_reserved"] = ok(0, source, "assumed idle")
            snapshot.facts[f"gpu.{index}.processes"] = ok([], source, "assumed idle")
    snapshot.meta["gpu_override"] = text
    if spec.assumed:
        snapshot.meta["gpu_assumed"] = spec.assumed
