"""Is a requirement certainly met? The common cases of PEP 508, decided without `packaging`.

GD503 checks the inference stack's Requires-Dist against what is installed. Importing
``packaging.requirements`` and parsing with it costs 20-30 ms with byte-compiled files and
~0.1 s where they are missing (measured on an H200 host), on every `check`; almost every
requirement there is a name, plain release comparisons and at most a platform or Python
version marker, and almost every one is met. ``satisfied`` answers True only for those
(exactly as packaging would: PEP 440 release comparison, local labels ignored, PEP 508
marker comparison); everything else (None) goes through packaging as before, and so does
every requirement that is not met, so what GD503 reports is unchanged.
"""

from __future__ import annotations

import re
from typing import Dict, Mapping, Optional, Tuple

from gpudoctor.snapshot import dist_key

_NAME = r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?"
_OPS = r"==|!=|>=|<=|>|<"
_RELEASE = r"\d+(?:\.\d+)*"
_SPEC = rf"(?:{_OPS})\s*{_RELEASE}(?:\.\*)?"
_SPECS = rf"{_SPEC}(?:\s*,\s*{_SPEC})*"
_REQUIREMENT = re.compile(rf"^\s*({_NAME})\s*(?:\[\s*{_NAME}(?:\s*,\s*{_NAME})*\s*\])?\s*(?:({_SPECS})|\(\s*({_SPECS})\s*\))?\s*(?:;(.*))?$")
_ONE_SPEC = re.compile(rf"({_OPS})\s*({_RELEASE})(\.\*)?")
_MARKER = re.compile(r"^\s*([a-z_]+)\s*(==|!=|>=|<=|>|<)\s*(?:\"([^\"]*)\"|'([^']*)')\s*$")
# Compared as strings by every packaging release (a value that is not a version).
_STRING_KEYS = ("platform_system", "sys_platform", "platform_machine", "os_name", "platform_python_implementation", "implementation_name")
_PLAIN_WORD = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Compared as versions (packaging builds a Specifier from the operator and the value).
_VERSION_KEYS = ("python_version", "python_full_version")
_INSTALLED = re.compile(rf"^({_RELEASE})(?:\+[A-Za-z0-9]+(?:[._-][A-Za-z0-9]+)*)?$")


def _release(text: str) -> Tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def _strip(release: Tuple[int, ...]) -> Tuple[int, ...]:
    end = len(release)
    while end > 1 and release[end - 1] == 0:
        end -= 1
    return release[:end]


def _spec_holds(op: str, spec: str, wildcard: bool, version: Tuple[int, ...]) -> Optional[bool]:
    """PEP 440 for a plain release ``version`` (its local label already ignored) against ``op spec``."""
    want = _release(spec)
    if wildcard:
        if op not in ("==", "!="):
            return None  # >=1.* is not valid PEP 440: packaging decides (it refuses it)
        padded = version + (0,) * max(0, len(want) - len(version))
        equal = padded[:len(want)] == want
        return equal if op == "==" else not equal
    left, right = _strip(version), _strip(want)
    return {"==": left == right, "!=": left != right, ">=": left >= right, "<=": left <= right,
            ">": left > right, "<": left < right}[op]


def _specs_hold(specs: str, version: Tuple[int, ...]) -> Optional[bool]:
    for part in specs.split(","):
        match = _ONE_SPEC.fullmatch(part.strip())
        if match is None:
            return None
        held = _spec_holds(match.group(1), match.group(2), bool(match.group(3)), version)
        if held is not True:
            return held
    return True


def _marker_holds(marker: str, env: Mapping[str, str]) -> Optional[bool]:
    """``A and B and …`` of simple comparisons; None for anything else (or, parentheses, in …)."""
    if "(" in marker or ")" in marker or re.search(r"\bor\b", marker):
        return None
    result = True
    for clause in re.split(r"\band\b", marker):
        match = _MARKER.match(clause)
        if match is None:
            return None
        key, op, value = match.group(1), match.group(2), match.group(3) if match.group(3) is not None else match.group(4)
        lhs = env.get(key)
        if not isinstance(lhs, str):
            return None  # packaging would fill it from the doctor's own interpreter: let it
        if key in _STRING_KEYS:
            if op not in ("==", "!=") or not _PLAIN_WORD.match(value) or value[:1] in "vV":
                return None
            held = (lhs == value) if op == "==" else (lhs != value)
        elif key in _VERSION_KEYS:
            if not re.fullmatch(_RELEASE, value) or not re.fullmatch(_RELEASE, lhs):
                return None
            held = _spec_holds(op, value, False, _release(lhs))
        else:
            return None
        if held is None:
            return None
        result = result and held
    return result


def satisfied(text: str, installed: Mapping[str, Dict], marker_env: Mapping[str, str]) -> Optional[bool]:
    """True when ``text`` certainly does not apply or is certainly met by ``installed``
    ({normalized name: {"version": …}}) under ``marker_env``; None when packaging must decide."""
    match = _REQUIREMENT.match(text)
    if match is None:
        return None
    name, specs, marker = match.group(1), match.group(2) or match.group(3), match.group(4)
    if marker is not None:
        applies = _marker_holds(marker, marker_env)
        if applies is None:
            return None
        if not applies:
            return True  # a requirement for another platform or Python: nothing to check
    dist = installed.get(dist_key(name)) if isinstance(installed, Mapping) else None
    version = dist.get("version") if isinstance(dist, dict) else None
    if not isinstance(version, str) or not version:
        return None  # not installed: packaging words the finding
    if not specs:
        return True
    found = _INSTALLED.match(version)
    if found is None:
        return None
    return True if _specs_hold(specs, _release(found.group(1))) is True else None
