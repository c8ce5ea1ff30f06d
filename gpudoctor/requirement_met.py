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
_OPS = r"~=|==|!=|>=|<=|>|<"
_RELEASE = r"\d+(?:\.\d+)*"
_SUFFIX = r"(?:\.post\d+|(?:a|b|rc)\d+)"  # a post-release, or a pre-release (only as >=, below)
_SPEC = rf"(?:{_OPS})\s*{_RELEASE}(?:{_SUFFIX}|\.\*)?"
_SPECS = rf"{_SPEC}(?:\s*,\s*{_SPEC})*"
_REQUIREMENT = re.compile(rf"^\s*({_NAME})\s*(?:\[\s*{_NAME}(?:\s*,\s*{_NAME})*\s*\])?\s*(?:({_SPECS})|\(\s*({_SPECS})\s*\))?\s*(?:;(.*))?$")
_ONE_SPEC = re.compile(rf"({_OPS})\s*({_RELEASE})(?:\.post(\d+)|(a|b|rc)\d+|(\.\*))?")
_MARKER = re.compile(r"^\s*([a-z_]+)\s*(==|!=|>=|<=|>|<)\s*(?:\"([^\"]*)\"|'([^']*)')\s*$")
# Compared as strings by every packaging release (a value that is not a version).
_STRING_KEYS = ("platform_system", "sys_platform", "platform_machine", "os_name", "platform_python_implementation", "implementation_name")
_PLAIN_WORD = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Compared as versions (packaging builds a Specifier from the operator and the value).
_VERSION_KEYS = ("python_version", "python_full_version")
# An installed version: a final release, or its post-release (certifi 2026.10.19.post1), with a local label.
_INSTALLED = re.compile(rf"^({_RELEASE})(?:\.post(\d+))?(?:\+[A-Za-z0-9]+(?:[._-][A-Za-z0-9]+)*)?$")

Installed = Tuple[Tuple[int, ...], int]  # (release, post number or -1): ordered as PEP 440 orders them


def _release(text: str) -> Tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def _strip(release: Tuple[int, ...]) -> Tuple[int, ...]:
    end = len(release)
    while end > 1 and release[end - 1] == 0:
        end -= 1
    return release[:end]


def _spec_holds(op: str, spec: str, wildcard: bool, version: Tuple[int, ...], post: int = -1,
                spec_post: int = -1, spec_pre: bool = False) -> Optional[bool]:
    """PEP 440 for an installed final or post-release (``version``, ``post``; its local label already
    ignored) against ``op spec`` (``spec_post``: the spec's .postN; ``spec_pre``: it names a
    pre-release). None where the answer is not this simple: packaging decides."""
    want = _release(spec)
    if wildcard:
        if op not in ("==", "!="):
            return None  # >=1.* is not valid PEP 440: packaging decides (it refuses it)
        padded = version + (0,) * max(0, len(want) - len(version))
        equal = padded[:len(want)] == want  # a prefix match looks at the release only (1.0.post1 is 1.0.*)
        return equal if op == "==" else not equal
    left, right = _strip(version), _strip(want)
    if spec_pre:
        # A final (or post-) release is above every pre-release of its own release: >=1.0rc1 holds
        # from 1.0 on. The other operators have exceptions around pre- and post-releases.
        return left >= right if op == ">=" else None
    if op == "~=":
        if len(want) < 2 or spec_post >= 0:
            return None  # ~=1 is invalid, ~=1.0.post1 is rare: packaging decides
        prefix = want[:-1]
        padded = version + (0,) * max(0, len(prefix) - len(version))
        return padded[:len(prefix)] == prefix and (left, post) >= (right, -1)
    mine, theirs = (left, post), (right, spec_post)
    if op == ">":
        # Exclusive: >1.0 does not admit 1.0.post1 (a post-release of the version itself), >1.0.post1 admits 1.0.post2.
        return left > right if spec_post < 0 else mine > theirs
    return {"==": mine == theirs, "!=": mine != theirs, ">=": mine >= theirs, "<=": mine <= theirs, "<": mine < theirs}[op]


def _specs_hold(specs: str, version: Tuple[int, ...], post: int = -1) -> Optional[bool]:
    for part in specs.split(","):
        match = _ONE_SPEC.fullmatch(part.strip())
        if match is None:
            return None
        op, spec, spec_post, pre, wildcard = match.groups()
        held = _spec_holds(op, spec, bool(wildcard), version, post, int(spec_post) if spec_post else -1, bool(pre))
        if held is not True:
            return held
    return True


_QUOTED = re.compile(r"\"[^\"]*\"|'[^']*'")
_TOKENS = re.compile(r"(\(|\)|\band\b|\bor\b)")


def _marker_holds(marker: str, env: Mapping[str, str]) -> Optional[bool]:
    """``A and B or C and D …`` of simple comparisons, with parentheses (``and`` binds tighter, as
    in PEP 508; SGLang 0.5.23 writes ``sys_platform == "linux" and (platform_machine == "aarch64"
    or …)``); None for anything else (``in`` …) or where the comparisons that count decide nothing.
    Quoted values are set aside first, so a parenthesis or a word inside one is never a token."""
    values: list = []

    def keep(match):
        values.append(match.group(0))
        return f"\x00{len(values) - 1}\x00"

    hidden = _QUOTED.sub(keep, marker)
    if '"' in hidden or "'" in hidden:
        return None
    tokens = [t.strip() for t in _TOKENS.split(hidden) if t.strip()]
    tokens = [re.sub(r"\x00(\d+)\x00", lambda m: values[int(m.group(1))], t) for t in tokens]
    result, end = _disjunction(tokens, 0, env)
    return result if end == len(tokens) else None


def _disjunction(tokens: list, at: int, env: Mapping[str, str]) -> Tuple[Optional[bool], int]:
    answers = []
    while True:
        answer, at = _conjunction(tokens, at, env)
        answers.append(answer)
        if at < len(tokens) and tokens[at] == "or":
            at += 1
            continue
        break
    if True in answers:
        return True, at  # what the others would say cannot change it (an invalid marker: GD503 skips it too)
    return (None if None in answers else False), at


def _conjunction(tokens: list, at: int, env: Mapping[str, str]) -> Tuple[Optional[bool], int]:
    answers = []
    while True:
        if at < len(tokens) and tokens[at] == "(":
            answer, at = _disjunction(tokens, at + 1, env)
            if at >= len(tokens) or tokens[at] != ")":
                return None, len(tokens) + 1  # unbalanced: packaging decides
            at += 1
        elif at < len(tokens) and tokens[at] not in ("and", "or", ")"):
            answer, at = _all_hold(tokens[at], env), at + 1
        else:
            return None, len(tokens) + 1
        answers.append(answer)
        if at < len(tokens) and tokens[at] == "and":
            at += 1
            continue
        break
    if False in answers:
        return False, at
    return (None if None in answers else True), at


def _all_hold(conjunction: str, env: Mapping[str, str]) -> Optional[bool]:
    result: Optional[bool] = True
    for clause in re.split(r"\band\b", conjunction):
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


_PRE_INSTALLED = re.compile(rf"^({_RELEASE})(a|b|rc)(\d+)$")
_PRE_SPEC = re.compile(rf"^>=\s*({_RELEASE})(?:(a|b|rc)(\d+))?$")
_PHASE = {"a": 0, "b": 1, "rc": 2}


def _prerelease_holds(specs: str, version: str) -> Optional[bool]:
    """An installed pre-release (flash-attn-4 4.0.0b36, which SGLang 0.5.23 requires as
    ``>=4.0.0b18``) against ``>=`` specifiers alone: PEP 440 orders 4.0.0b18 < 4.0.0b36 < 4.0.0rc1 <
    4.0.0, and GD503 asks packaging with prereleases allowed. True or None (packaging decides)."""
    found = _PRE_INSTALLED.match(version)
    if found is None:
        return None
    mine = (_strip(_release(found.group(1))), _PHASE[found.group(2)], int(found.group(3)))
    for part in specs.split(","):
        spec = _PRE_SPEC.match(part.strip())
        if spec is None:
            return None
        theirs = (_strip(_release(spec.group(1))), _PHASE[spec.group(2)] if spec.group(2) else 3, int(spec.group(3) or 0))
        if not mine >= theirs:
            return None
    return True


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
        return _prerelease_holds(specs, version)
    post = int(found.group(2)) if found.group(2) else -1
    return True if _specs_hold(specs, _release(found.group(1)), post) is True else None
