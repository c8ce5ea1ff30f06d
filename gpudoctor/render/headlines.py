"""One short line per area saying what was found, shown next to the area's status glyph."""

from __future__ import annotations

from collections import Counter
from typing import Callable, Dict

from gpudoctor.snapshot import Snapshot, gib


def driver(snap: Snapshot) -> str:
    version = snap.value("driver.version")
    if not version:
        nvml = snap.get("driver.nvml")
        return f"no driver reachable ({nvml.detail or nvml.status})"
    parts = [version]
    if snap.value("driver.cuda_max"):
        parts.append(f"CUDA ≤ {snap.value('driver.cuda_max')}")
    if snap.value("driver.kernel_module_type"):
        parts.append(f"{snap.value('driver.kernel_module_type')} kernel module")
    source = snap.get("driver.version").source
    if source and source != "nvml":
        parts.append(f"via {source}")
    return ", ".join(parts)


def gpu(snap: Snapshot) -> str:
    if not snap.get("gpu.count").ok:
        return "no GPUs read"
    names = Counter(
        f"{snap.value(f'gpu.{i}.name', '?')} (cc {snap.value(f'gpu.{i}.compute_capability', '?')}, "
        f"{gib(snap.value(f'gpu.{i}.memory_total'))})"
        for i in snap.gpu_indices()
    )
    if not names:
        return "0 GPUs"
    return "; ".join(f"{count} × {name}" for name, count in names.items())


def internal(snap: Snapshot) -> str:
    elapsed = snap.meta.get("elapsed_s")
    return f"probes took {elapsed:.2f} s" if isinstance(elapsed, (int, float)) else "replayed snapshot"


def context(snap: Snapshot) -> str:
    """The line above the areas: where this ran and the stack it found."""
    parts = []
    if snap.value("host.os"):
        parts.append(str(snap.value("host.os")))
    if snap.value("python.version"):
        parts.append(f"Python {snap.value('python.version')}")
    torch = snap.value("torch.version")
    if torch:
        cuda = snap.value("torch.cuda")
        parts.append(f"torch {torch}" + (f" (CUDA {cuda})" if cuda else " (no CUDA)"))
    elif snap.get("torch.version").status == "absent":
        parts.append("no torch")
    return " · ".join(parts)


HEADLINES: Dict[str, Callable[[Snapshot], str]] = {"driver": driver, "gpu": gpu, "internal": internal}


def headline(area: str, snap: Snapshot) -> str:
    func = HEADLINES.get(area)
    if func is None:
        return ""
    try:
        return func(snap)
    except Exception as exc:  # a headline is decoration; never fail the run over it
        return f"({type(exc).__name__})"
