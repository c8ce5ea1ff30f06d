"""The signature database of ``explain``: the error texts gpudoctor knows (data in
gpudoctor/knowledge/signatures.py), compiled and validated once, with the literals
(``needles``) that let a 4 MiB log be searched in milliseconds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence

_SIG_ID = re.compile(r"^SIG-[a-z0-9]+(?:-[a-z0-9]+)*$")
CONFIRM_SPEC = re.compile(r"^GD(?P<prefix>\d{1,3})(?::(?P<filter>.+))?$")
_KEYS = ("id", "key", "title", "patterns", "cause", "fix", "commands", "sources")
_CAUSE_KEY = re.compile(r"^[a-z0-9]+(?:_[a-z0-9]+)*$")
CAUSE, SYMPTOM = "cause", "symptom"
_GITHUB_REF = re.compile(r"^(?P<repo>[\w.-]+/[\w.-]+)#(?P<number>\d+)$")


class SignatureError(ValueError):
    """The signature database itself is broken (a bad regex, a duplicate id): a bug, caught by the tests."""


# --- the database ------------------------------------------------------------------------
@dataclass
class Signature:
    id: str
    key: str  # the cause, shared by the signatures of one cause (the corpus labels its texts with it)
    title: str
    patterns: List["re.Pattern[str]"]
    cause: str
    fix: str
    commands: List[str]
    sources: List[str]
    confirm_rules: List[str]
    facts: List[str]
    details: List["re.Pattern[str]"] = field(default_factory=list)
    exclude: List["re.Pattern[str]"] = field(default_factory=list)
    superseded_by: List[str] = field(default_factory=list)
    needles: List[Optional[List[str]]] = field(default_factory=list)  # per pattern, see needles()
    role: str = CAUSE  # "symptom": where a program gave up (WorkerProc failed to start), never why
    hint: str = ""  # symptoms: which earlier line names the cause
    other_rules: List[str] = field(default_factory=list)  # rules whose failure is a *different* cause of this text
    cannot_check: str = ""  # why no rule on a machine can confirm this cause (a model repo's files, a request)
    thread_fixes: List[Dict[str, str]] = field(default_factory=list)  # {"fix": what fixed it, "url": the thread}
    detail_check: str = ""  # a check in gpudoctor/explain_checks.py that compares the text's numbers with this machine

    def to_json(self) -> Dict[str, Any]:
        return {
            "id": self.id,
            "key": self.key,
            "role": self.role,
            "title": self.title,
            "patterns": [p.pattern for p in self.patterns],
            "cause": self.cause,
            "fix": self.fix,
            "commands": list(self.commands),
            "sources": list(self.sources),
            "thread_fixes": [dict(item) for item in self.thread_fixes],
            "confirm_rules": list(self.confirm_rules),
            "other_rules": list(self.other_rules),
            "cannot_check": self.cannot_check or None,
        }

    def source_urls(self) -> List[str]:
        return [source_url(source) for source in self.sources]


def source_url(source: str) -> str:
    """``owner/repo#123`` as a link (GitHub redirects /issues/N to /pull/N); anything else as written."""
    m = _GITHUB_REF.match(source.strip())
    return f"https://github.com/{m.group('repo')}/issues/{m.group('number')}" if m else source


_CACHE: Optional[List[Signature]] = None


def load_signatures(data: Optional[Sequence[Dict[str, Any]]] = None) -> List[Signature]:
    """Compile and validate the database (``data`` defaults to gpudoctor.knowledge.signatures)."""
    global _CACHE
    default = data is None
    if default and _CACHE is not None:
        return list(_CACHE)
    if data is None:
        from gpudoctor.knowledge.signatures import SIGNATURES

        data = SIGNATURES
    out: List[Signature] = []
    seen = set()
    for entry in data:
        missing = [key for key in _KEYS if not entry.get(key)]
        if missing:
            raise SignatureError(f"signature {entry.get('id')!r} lacks {', '.join(missing)}")
        sig_id = entry["id"]
        if not _SIG_ID.match(sig_id) or sig_id in seen:
            raise SignatureError(f"bad or duplicate signature id {sig_id!r}")
        seen.add(sig_id)
        if not _CAUSE_KEY.match(entry["key"]):
            raise SignatureError(f"{sig_id}: key {entry['key']!r} is not a lowercase_words cause key")
        role = entry.get("role", CAUSE)
        if role not in (CAUSE, SYMPTOM) or (role == SYMPTOM and not entry.get("hint")):
            raise SignatureError(f"{sig_id}: role must be cause or symptom (a symptom needs a hint)")
        if role == CAUSE and not entry.get("confirm_rules") and not entry.get("cannot_check"):
            raise SignatureError(f"{sig_id}: lacks confirm_rules (or cannot_check: why no rule can confirm it)")
        for item in entry.get("thread_fixes", ()):
            if not (isinstance(item, dict) and item.get("fix") and str(item.get("url", "")).startswith("https://")):
                raise SignatureError(f"{sig_id}: a thread fix needs fix text and the thread's https:// url")
        if entry.get("detail_check"):
            from gpudoctor.explain_checks import CHECKS

            if entry["detail_check"] not in CHECKS:
                raise SignatureError(f"{sig_id}: detail_check {entry['detail_check']!r} is not in gpudoctor/explain_checks.py")
        for spec in list(entry.get("confirm_rules", ())) + list(entry.get("other_rules", ())):
            if not CONFIRM_SPEC.match(spec):
                raise SignatureError(f"{sig_id}: confirm_rules entry {spec!r} is not GDnnn, GDn or GDn:filter")
        try:
            out.append(
                Signature(
                    id=sig_id,
                    key=entry["key"],
                    title=entry["title"],
                    patterns=[re.compile(p, re.I) for p in entry["patterns"]],
                    cause=entry["cause"],
                    fix=entry["fix"],
                    commands=list(entry["commands"]),
                    sources=list(entry["sources"]),
                    confirm_rules=list(entry.get("confirm_rules", ())),
                    facts=list(entry.get("facts", ())),
                    details=[re.compile(p, re.I) for p in entry.get("details", ())],
                    exclude=[re.compile(p, re.I) for p in entry.get("exclude", ())],
                    superseded_by=list(entry.get("superseded_by", ())),
                    needles=[needles(p) for p in entry["patterns"]],
                    role=role,
                    hint=entry.get("hint", ""),
                    other_rules=list(entry.get("other_rules", ())),
                    cannot_check=entry.get("cannot_check", ""),
                    thread_fixes=[dict(item) for item in entry.get("thread_fixes", ())],
                    detail_check=str(entry.get("detail_check", "")),
                )
            )
        except re.error as exc:
            raise SignatureError(f"{sig_id}: bad regular expression: {exc}") from None
    known = {sig.id for sig in out}
    for sig in out:
        unknown = [s for s in sig.superseded_by if s not in known]
        if unknown:
            raise SignatureError(f"{sig.id}: superseded_by names unknown {', '.join(unknown)}")
    if default:
        _CACHE = out
    return list(out)


def needles(pattern: str) -> Optional[List[str]]:
    """Lowercase literals, one per top-level alternative, that a match of ``pattern`` contains.

    Searching a 4 MiB log with every regex costs seconds; ``literal in text.lower()`` costs
    milliseconds, so a pattern only runs where one of its literals occurs. None when some
    alternative has no literal of 4+ characters (the pattern then always runs).
    """
    out = []
    for part in _top_level_alternatives(pattern):
        best = max(_literal_runs(part), key=len, default="")
        if len(best) < 4:
            return None
        out.append(best.lower())
    return out


def _top_level_alternatives(pattern: str) -> List[str]:
    parts, current, depth, in_class, i = [], "", 0, False, 0
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            current += pattern[i : i + 2]
            i += 2
            continue
        if in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "|" and depth == 0:
            parts.append(current)
            current, i = "", i + 1
            continue
        current += char
        i += 1
    return parts + [current]


def _literal_runs(part: str) -> List[str]:
    """Runs of literal characters that every match contains (groups and classes break runs)."""
    runs, run, i, depth, in_class = [], "", 0, 0, False
    while i < len(part):
        char = part[i]
        if char == "\\" and i + 1 < len(part):
            escaped = part[i + 1]
            i += 2
            if depth or in_class:
                continue
            if escaped.isalnum():  # \s \d \b \w ...: a class, not a literal
                runs.append(run)
                run = ""
            else:
                run += escaped
            continue
        i += 1
        if in_class:
            in_class = char != "]"
            continue
        if depth:  # inside a group: it may be optional or alternated, nothing in it is required
            depth += (char == "(") - (char == ")")
            continue
        if char in "?*{":  # the character before is optional or repeated: not required as it stands
            runs.append(run[:-1])
            run = ""
            if char == "{":
                while i < len(part) and part[i - 1] != "}":
                    i += 1
            continue
        if char in "+.^$|)":
            runs.append(run)
            run = ""
            continue
        if char in "[(":
            runs.append(run)
            run = ""
            in_class, depth = char == "[", int(char == "(")
            continue
        run += char
    runs.append(run)
    return runs


def find_signature(key: str) -> Optional[Signature]:
    for sig in load_signatures():
        if sig.id.lower() == key.strip().lower():
            return sig
    return None
