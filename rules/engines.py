"""Which inference engines are installed, and what they require: read from their installed metadata.

A helper of the rule areas (not an area: it registers no rule). An engine is a distribution
that serves models (vLLM, SGLang); what it requires is its own ``Requires-Dist``, as pip
installed it (``packages.stack.NAME.requires``), never a list kept here: a rule that would
tell the user to remove a distribution asks ``requirers`` first, since a fix never removes
what an installed engine requires (SGLang 0.5.23 requires ``flash-attn-4>=4.0.0b18`` on every
GPU: https://pypi.org/project/sglang/0.5.23/).
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Optional, Tuple

from gpudoctor.snapshot import dist_key

# Distribution name -> the name users know it by.
ENGINES = {"vllm": "vLLM", "sglang": "SGLang"}
_NAME = re.compile(r"^\s*([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)")


def installed(snap) -> List[Dict[str, Any]]:
    """The engines installed in the environment: [{dist, name, version}], in ENGINES order."""
    dists = snap.value("packages.dists") or {}
    out = []
    for dist, name in ENGINES.items():
        entry = dists.get(dist) if isinstance(dists, dict) else None
        if isinstance(entry, dict) and entry.get("version"):
            out.append({"dist": dist, "name": name, "version": str(entry["version"])})
    return out


def is_installed(snap, dist: str) -> bool:
    return any(e["dist"] == dist for e in installed(snap))


def requirers(snap, dist: str) -> List[Tuple[str, str, str]]:
    """(owner, its version, the requirement) for each stack distribution whose Requires-Dist names
    ``dist`` and applies here (markers evaluated for this interpreter; extras left out)."""
    stack = snap.value("packages.stack") or {}
    marker_env = snap.value("python.marker_env") or {}
    wanted = dist_key(dist)
    out = []
    for owner, entry in sorted(stack.items()) if isinstance(stack, dict) else ():
        if not isinstance(entry, dict) or dist_key(owner) == wanted:
            continue
        for text in entry.get("requires") or []:
            match = _NAME.match(str(text))
            if not match or dist_key(match.group(1)) != wanted:
                continue
            req = _applying(str(text), marker_env)
            if req is not None:
                out.append((owner, str(entry.get("version") or "?"), req))
    return out


# A requirement without a marker or URL: it applies everywhere, and packaging would write it as
# name[extras]specs with the extras and the specifiers sorted. Taken here without importing
# packaging (28 ms and ~30 ms of regex compiling on a cold check, measured on the SGLang 0.5.23
# closure, where GD401 asks for flash-attn-4's requirers on every run).
_SPEC = r"(?:===|~=|==|!=|<=|>=|<|>)\s*[A-Za-z0-9][A-Za-z0-9.*+!_-]*"
_SIMPLE = re.compile(r"^\s*([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)\s*(?:\[\s*([A-Za-z0-9._,\s-]*)\])?\s*"
                     r"(" + _SPEC + r"(?:\s*,\s*" + _SPEC + r")*)?\s*$")


def _simple(text: str) -> Optional[str]:
    match = _SIMPLE.match(text)
    if not match:
        return None
    name, extras, specs = match.groups()
    out = name
    if extras is not None:
        names = sorted({e.strip() for e in extras.split(",") if e.strip()})
        out += f"[{','.join(names)}]" if names else ""
    if specs:
        out += ",".join(sorted(re.sub(r"\s+", "", part) for part in specs.split(",")))
    return out


def _applying(text: str, marker_env: Dict[str, str]) -> Optional[str]:
    """The requirement as packaging writes it, if it applies here (no extra asked for), else None."""
    simple = _simple(text)
    if simple is not None:
        return simple
    from packaging.requirements import InvalidRequirement, Requirement  # only when a rule asks

    try:
        req = Requirement(text)
    except InvalidRequirement:
        return None
    if req.marker is not None:
        try:
            if not req.marker.evaluate(dict(marker_env, extra="")):
                return None
        except Exception:  # an unknown marker variable: not decidable, so not counted as required
            return None
    return str(req)


def label(snap) -> str:
    """'vLLM 0.33.0', 'SGLang 0.5.23', 'vLLM 0.33.0 and SGLang 0.5.23', or '' when none is installed."""
    return " and ".join(f"{e['name']} {e['version']}" for e in installed(snap))
