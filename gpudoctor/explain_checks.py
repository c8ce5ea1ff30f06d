"""Checks that compare the numbers an error text gives with this machine (``detail_check`` of a signature).

A rule sees only the snapshot; some errors carry the number that decides them ("Required: 98304,
Hardware limit: 65536"). A check here gets the match's details and the snapshot and answers with
explain's Check kinds: confirmed only when this machine's own figure shows the cause, not
confirmed when it shows the opposite, could-not-check when a figure is missing.
"""

from __future__ import annotations

from typing import Callable, Dict, List, Optional, Tuple

from gpudoctor.snapshot import Snapshot


# Maximum shared memory one thread block can use (opt-in), in bytes, by compute capability: the
# "Hardware limit" Triton prints (cudaDevAttrMaxSharedMemoryPerBlockOptin). From the CUDA C++
# Programming Guide, "Technical Specifications per Compute Capability"
# (https://docs.nvidia.com/cuda/cuda-c-programming-guide/#features-and-technical-specifications);
# the corpus texts show 65536 on a T4 (7.5), 101376 on an RTX 3090 (8.6), 49152 on Pascal.
SHARED_MEMORY_PER_BLOCK = {
    "6.0": 49152, "6.1": 49152, "6.2": 49152,
    "7.0": 98304, "7.2": 98304, "7.5": 65536,
    "8.0": 166912, "8.6": 101376, "8.7": 166912, "8.9": 101376,
    "9.0": 232448, "10.0": 232448, "12.0": 101376,
}


def _int(value: Optional[str]) -> Optional[int]:
    try:
        return int(str(value).strip()) if value is not None else None
    except ValueError:
        return None


def shared_memory_per_block(details: Dict[str, str], snapshot: Snapshot) -> List[Tuple[str, str]]:
    """(kind, text) pairs: the kernel's need ("required") against each visible GPU's per-block maximum."""
    from gpudoctor.visible import visible_gpus

    required = _int(details.get("required"))
    if required is None:
        return [("could_not_check", "the text does not say how much shared memory the kernel needs")]
    try:
        indices = visible_gpus(snapshot)
    except Exception:  # a hostile snapshot: no GPU list is no answer, never a crash
        indices = []
    if not indices:
        return [("could_not_check", "no GPU is visible here to compare the kernel's need with")]
    short, enough, unknown = [], [], []
    for index in indices[:64]:
        name = str(snapshot.value(f"gpu.{index}.name") or "?")
        cc = str(snapshot.value(f"gpu.{index}.compute_capability") or "?")
        limit = SHARED_MEMORY_PER_BLOCK.get(cc)
        label = f"GPU {index} ({name}, cc {cc})"
        if limit is None:
            unknown.append(label)
        elif limit < required:
            short.append(f"{label} allows {limit}")
        else:
            enough.append(f"{label} allows {limit}")
    if short:
        return [("confirmed", f"the kernel needs {required} bytes of shared memory per block; {'; '.join(short[:4])}")]
    if unknown:
        return [("could_not_check", f"no shared-memory figure for {', '.join(unknown[:4])}")]
    said = _int(details.get("limit"))
    elsewhere = f" (the text's GPU allowed {said})" if said is not None else ""
    return [("not_confirmed", f"every GPU here allows the {required} bytes the kernel needs: {'; '.join(enough[:4])}; "
             f"the error came from a GPU with less{elsewhere}")]


# tokenizers 0.20.0 writes BPE merges as pairs (["a", "b"]) instead of "a b" strings, and older
# releases cannot parse them: "data did not match any variant of untagged enum ModelWrapper"
# (https://github.com/huggingface/swift-transformers/pull/131: "Introduced in tokenizers 0.20.0").
MERGES_AS_PAIRS = (0, 20, 0)


def _version(text: str) -> Optional[Tuple[int, ...]]:
    parts = []
    for piece in str(text).split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit()) if piece[:1].isdigit() else ""
        if not digits:
            break
        parts.append(int(digits[:6]))
    return tuple(parts) if parts else None


def tokenizers_version(details: Dict[str, str], snapshot: Snapshot) -> List[Tuple[str, str]]:
    """The installed tokenizers against the first release that reads merges stored as pairs."""
    dists = snapshot.value("packages.dists")
    entry = dists.get("tokenizers") if isinstance(dists, dict) else None
    if not isinstance(entry, dict) or not entry.get("version"):
        return [("could_not_check", "tokenizers is not installed in the Python environment checked here")]
    installed = str(entry["version"])
    version = _version(installed)
    if version is None:
        return [("could_not_check", f"tokenizers {installed}: not a version gpudoctor can compare")]
    if details.get("enum") != "ModelWrapper":
        return [("could_not_check", f"tokenizers {installed} is installed; which release the file's "
                 f"{details.get('enum') or 'section'} needs is not known here")]
    if version < MERGES_AS_PAIRS:
        return [("confirmed", f"tokenizers {installed} is installed: releases before 0.20.0 cannot read BPE merges "
                 "stored as pairs, the format tokenizers 0.20+ (transformers 4.45+) writes")]
    return [("could_not_check", f"tokenizers {installed} reads merges stored as pairs; the file needs something "
             "else (a newer release, or it is malformed)")]


def symbol_version(details: Dict[str, str], snapshot: Snapshot) -> List[Tuple[str, str]]:
    """The version the loader said is missing against what GD508 read of the torch extensions here
    (probes/dynamic_loader.py): the extension named by "(required by …)" and the library it loads."""
    import os

    version = str(details.get("version") or "")
    required_by = os.path.normpath(details["required_by"]) if details.get("required_by") else None
    value = snapshot.value("torch.extensions")
    items = value.get("extensions") if isinstance(value, dict) else None
    entries = [e for e in items if isinstance(e, dict)] if isinstance(items, list) else []
    for entry in entries:
        for lacking in entry.get("versions_missing") or []:
            if isinstance(lacking, dict) and version in (lacking.get("missing") or []) and (
                    required_by is None or os.path.normpath(str(entry.get("path"))) == required_by):
                newest = f" (its newest is {lacking['newest']})" if lacking.get("newest") else ""
                return [("confirmed", f"{entry.get('path')} needs {version} of {lacking.get('library')}, and "
                         f"{lacking.get('path')}, the one it loads here, does not define it{newest}")]
    if required_by is not None and any(os.path.normpath(str(e.get("path"))) == required_by for e in entries):
        return [("not_confirmed", f"{required_by} is checked here: the libraries it loads define every symbol version it needs")]
    return [("could_not_check", "gpudoctor reads the symbol versions of torch-linked extensions (GD508); "
             + (f"{required_by} is not one of them here" if required_by else "the text does not say which file needs it"))]


CHECKS: Dict[str, Callable[[Dict[str, str], Snapshot], List[Tuple[str, str]]]] = {
    "shared_memory_per_block": shared_memory_per_block,
    "tokenizers_version": tokenizers_version,
    "symbol_version": symbol_version,
}
# How explain names each check in "confirmed by …".
LABELS = {
    "shared_memory_per_block": "the shared memory per block of the GPUs here",
    "tokenizers_version": "the tokenizers installed here",
    "symbol_version": "the symbol versions the torch extensions here need",
}


def run(name: str, details: Dict[str, str], snapshot: Snapshot) -> List[Tuple[str, str]]:
    check = CHECKS.get(name)
    if check is None:
        return [("could_not_check", f"no check {name!r} in this gpudoctor")]
    return check(details, snapshot)
