"""GPUs as NVIDIA documents them: product names, compute capabilities and memory, and which
compiled code runs on which compute capability. Data and pure functions (standard library only),
read by probes (the ``nvidia-smi -q -x`` fallback never reports a compute capability, so
``cc_for_name`` fills it), by rules (``kernel_support``: does a binary's SASS/PTX run on this
GPU) and by ``--gpu SPEC`` (gpudoctor/gpu_target.py).

Sources: NVIDIA "CUDA GPU Compute Capability" page (https://developer.nvidia.com/cuda-gpus)
and its "Legacy" companion page; binary compatibility rules from the CUDA Programming Guide
(https://docs.nvidia.com/cuda/cuda-programming-guide/01-introduction/cuda-platform.html: a cubin for sm_XY runs on the same major with an equal or higher minor;
``a`` targets only on that exact cc; ``f`` targets on the family, i.e. the same major;
PTX is JIT-compiled for any cc at or above its arch). Checked against real name/cc pairs from
``nvidia-smi --query-gpu=name,compute_cap`` (shared/fixtures/public/nvidia-smi-csv) and NVML.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

# (regex on the product name, compute capability, family). The first match wins, so the
# more specific names come first ("RTX 4000 SFF Ada" before "Quadro RTX 4000").
NAME_TABLE: Tuple[Tuple[str, str, str], ...] = (
    (r"\bGB10\b|DGX Spark", "12.1", "Blackwell (GB10)"),
    (r"RTX PRO \d{4}|RTX 50[5-9]0", "12.0", "Blackwell (workstation/consumer)"),
    (r"\bG?B300\b", "10.3", "Blackwell Ultra"),
    (r"\bG?B200\b|\bB100\b", "10.0", "Blackwell (data center)"),
    (r"Jetson T[45]000|\bThor\b", "11.0", "Blackwell (Jetson Thor)"),
    (r"\bG?H100\b|\bG?H200\b|\bH800\b|\bH20\b", "9.0", "Hopper"),
    (r"\bL40S?\b|\bL4\b|\bL20\b|RTX \d{4}( SFF)? Ada|RTX 40[5-9]0", "8.9", "Ada Lovelace"),
    (r"\bOrin\b", "8.7", "Ampere (Jetson)"),
    (r"\bA100\b|\bA30\b|\bA800\b", "8.0", "Ampere (GA100)"),
    (r"\bA40\b|\bA10G?\b|\bA16\b|\bA2\b|RTX A\d{4}|RTX 30[5-9]0", "8.6", "Ampere (GA10x)"),
    (r"\bT4\b|RTX 20[5-8]0|TITAN RTX|Quadro RTX [3-8]000|\bT(400|500|600|1000|1200)\b|GTX 16[5-6]0", "7.5", "Turing"),
    (r"Xavier", "7.2", "Volta (Jetson)"),
    (r"V100|TITAN V\b|GV100", "7.0", "Volta"),
    (r"P100|GP100", "6.0", "Pascal"),
    (r"\bP40\b|\bP4\b|GTX 10[5-8]0|GT 1030|Quadro P\d+|TITAN Xp?\b", "6.1", "Pascal"),
)
_COMPILED = tuple((re.compile(pattern, re.I), cc, family) for pattern, cc, family in NAME_TABLE)

# Compute capabilities that exist (the CUDA GPUs page plus the legacy page for 5.x/6.x).
KNOWN_CCS = ("5.0", "5.2", "5.3", "6.0", "6.1", "6.2", "7.0", "7.2", "7.5", "8.0", "8.6", "8.7", "8.9",
             "9.0", "10.0", "10.3", "11.0", "12.0", "12.1")


def cc_for_name(name: Optional[str]) -> Optional[str]:
    """The compute capability ("8.6") of a GPU product name, or None if the table does not know it."""
    if not name:
        return None
    for pattern, cc, _ in _COMPILED:
        if pattern.search(name):
            return cc
    return None


def family_for_cc(cc: str) -> str:
    for _, known, family in NAME_TABLE:
        if known == cc:
            return family
    return ""


# Memory of the products whose name fixes it, in MiB as NVML reports memory.total on real boards
# (H200 143771, H100 SXM 81559, L40S 46068: tests/fixtures/snapshots and shared/fixtures/public
# nvidia-smi output; the others NVIDIA's product pages in GiB, rounded down). A100, A800 and V100
# come in several sizes (VARIANT_MEMORY_MIB); A30/A40 and B200 configurations differ: give the memory
# (`B200-180GB`) or it stays unknown.
TABLE_MEMORY_MIB: Tuple[Tuple[str, int], ...] = (
    (r"\bGH200\b", 97871),
    (r"\bH200\b", 143771),
    (r"\bH100\b.*\bNVL\b", 95830),
    (r"\bH100\b|\bH800\b", 81559),
    (r"\bL40S?\b", 46068),
    (r"\bL4\b", 23034),
    (r"\bA10G?\b", 23028),
    (r"\bT4\b", 15360),
    (r"RTX 4090", 24564),
)


# Products made with more than one memory size, in MiB as NVML reports memory.total, smallest first:
# A100 / A800 40 GB 40960 and 80 GB 81920 (tests/fixtures/snapshots a100x2-40gb.json "NVIDIA
# A100-PCIE-40GB", a100.json "NVIDIA A100-SXM4-80GB"; https://www.nvidia.com/en-us/data-center/a100/),
# V100 16 and 32 GB (https://www.nvidia.com/en-us/data-center/v100/). A bare name (`--gpu A100`)
# is judged with the largest: a fit judged against the smaller would block a correct launch on the
# larger board, the worst kind of error; the assumption is said aloud (variant_memory's words).
VARIANT_MEMORY_MIB: Tuple[Tuple[str, str, Tuple[int, ...]], ...] = (
    (r"\bA100\b", "A100", (40960, 81920)),
    (r"\bA800\b", "A800", (40960, 81920)),
    (r"\bV100S?\b", "V100", (16384, 32768)),
)


def variant_memory(name: str) -> Optional[Tuple[int, str]]:
    """(bytes assumed, what was assumed in words) for a product made with several memory sizes, or None."""
    for pattern, product, sizes in VARIANT_MEMORY_MIB:
        if re.search(pattern, name, re.I):
            gbs = [f"{mib // 1024} GB" for mib in sizes]
            others = " or ".join(gbs[:-1])
            return sizes[-1] * 2**20, (f"judged as the {product} {gbs[-1]} (the {product} is also made with "
                                        f"{others}: --gpu {product}-{gbs[0].replace(' ', '')} judges that one)")
    return None


def table_memory(name: str) -> Optional[int]:
    """Bytes of memory a product name implies, or None when the name does not fix it."""
    for pattern, mib in TABLE_MEMORY_MIB:
        if re.search(pattern, name, re.I):
            return mib * 2**20
    return None


# --- which code runs where ------------------------------------------------------------------
def _cc_tuple(cc: Any) -> Optional[Tuple[int, int]]:
    try:
        major, minor = str(cc).split(".")
        return int(major), int(minor)
    except (ValueError, AttributeError):
        return None


def _split_sm(arch: Any) -> Optional[Tuple[int, int, str]]:
    """``"sm_90a"`` / ``"90"`` / ``90`` → (9, 0, "a")."""
    match = re.match(r"^(?:sm_|compute_)?(\d{2,3})([a-z]?)$", str(arch).strip().lower())
    if not match:
        return None
    number = int(match.group(1))
    return number // 10, number % 10, match.group(2)


@dataclass
class Support:
    runs: bool
    how: str  # "sm_80 cubin", "PTX compute_90 (JIT)", or why not
    ptx_only: bool = False
    ptx_arch: Optional[int] = None


def kernel_support(sm_variants: Iterable[Any], ptx: Iterable[Any], cc: str) -> Support:
    """Whether a binary with these SASS targets and PTX archs has code for compute capability ``cc``.

    ``sm_variants``: "sm_80", "sm_90a", "sm_100f" (or bare ints 80); ``ptx``: "compute_90",
    "compute_120f" (or ints). A cubin runs on the same major and an equal or higher minor; an
    ``a`` cubin only on its exact cc. PTX compute_XY can be JIT-compiled for any cc ≥ X.Y, an
    ``a`` PTX only for that cc, an ``f`` PTX for its family (same major). Whether the driver's
    JIT is new enough is a separate question (rule GD202).
    """
    target = _cc_tuple(cc)
    if target is None:
        return Support(False, f"unknown compute capability {cc!r}")
    best = None
    for arch in sm_variants:
        parsed = _split_sm(arch)
        if parsed is None:
            continue
        major, minor, variant = parsed
        if major != target[0] or minor > target[1]:
            continue
        if variant == "a" and minor != target[1]:
            continue
        if best is None or minor > best[1]:
            best = (major, minor, variant)
    if best is not None:
        return Support(True, f"sm_{best[0]}{best[1]}{best[2]} cubin")
    usable = []
    for arch in ptx:
        parsed = _split_sm(arch)
        if parsed is None:
            continue
        major, minor, variant = parsed
        if variant == "a":
            fits = (major, minor) == target
        elif variant == "f":
            fits = major == target[0] and minor <= target[1]
        else:
            fits = (major, minor) <= target
        if fits:
            usable.append(major * 10 + minor)
    if usable:
        arch = max(usable)
        return Support(True, f"PTX compute_{arch} (JIT-compiled by the driver)", ptx_only=True, ptx_arch=arch)
    return Support(False, "no cubin for this major and no PTX at or below it")


def describe_archs(sm_variants: Sequence[Any], ptx: Sequence[Any]) -> str:
    parts = [str(a) if str(a).startswith("sm_") else f"sm_{a}" for a in sm_variants]
    parts += [f"compute_{_split_sm(a)[0] * 10 + _split_sm(a)[1]}" if _split_sm(a) else str(a) for a in ptx]
    return ", ".join(parts) if parts else "none"


def gpus_to_judge(snap) -> List[Dict[str, Any]]:
    """The distinct GPUs (by compute capability) of a snapshot that kernel checks judge against
    (``snap``: anything with ``gpu_indices()`` and ``value(path)``, a Snapshot)."""
    seen: Dict[str, Dict[str, Any]] = {}
    for index in snap.gpu_indices():
        cc = snap.value(f"gpu.{index}.compute_capability")
        if not cc:
            name = snap.value(f"gpu.{index}.name")
            cc = cc_for_name(name)
        if cc and cc not in seen:
            seen[cc] = {"cc": cc, "index": index, "name": snap.value(f"gpu.{index}.name") or f"GPU {index}"}
    return list(seen.values())
