"""What a rule is: metadata, outcomes, findings and fixes.

A rule is a plain function of the snapshot, registered with ``@rule``::

    @rule("GD103", "driver-too-old-for-torch", severity=ERROR, area="driver",
          requires=("driver.version", "torch.cuda"))
    def driver_too_old_for_torch(snap):
        \"\"\"The driver is older than torch's CUDA needs.

        ## Why ...
        ## Fix ...
        ## References ...
        \"\"\"
        ...
        return Fail("driver 470 supports CUDA 11.4; torch needs 12.8", evidence=[...], fix=Fix(...))

It returns ``None`` (pass), a ``Fail`` or a list of them, ``Unknown(reason)`` or
``NotApplicable(reason)``. ``requires`` names facts that must be ok; when one is not,
the engine records "unknown" with that fact's reason and does not call the rule.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

ERROR = "error"
WARNING = "warning"
INFO = "info"
SEVERITY_RANK = {INFO: 0, WARNING: 1, ERROR: 2}

# The one severity policy (issue 31): what each severity means, said by `gpudoctor rules` and
# `gpudoctor explain ID`, and held by tests/test_severity_policy.py. A rule's catalogue severity is
# its usual one; a finding takes another only where the rule's "## Severity" section says when.
SEVERITY_POLICY: Dict[str, str] = {
    ERROR: "the server will not start, will crash, or will give wrong results as set up: it blocks (exit 1)",
    WARNING: "it starts, but something is degraded, fragile, or likely to fail later, or a failure that cannot be "
             "confirmed here: it does not block unless --fail-on warning",
    INFO: "worth knowing; nothing to fix now",
}
SEVERITY_NOTE = ("A rule's severity is its usual one; a finding takes another only where the rule's docs say when "
                 "(## Severity in `gpudoctor explain ID`).")

# Areas in display order: (key, title). The hundreds digit of a rule ID names its area.
AREAS: Tuple[Tuple[str, str], ...] = (
    ("internal", "gpudoctor"),
    ("driver", "Driver"),
    ("cuda", "CUDA"),
    ("gpu", "GPUs & host"),
    ("flash_attn", "flash-attn"),
    ("vllm", "Python stack & vLLM"),
    ("processes", "Processes"),
    ("launch", "Launch command"),
    ("server", "Server"),
    ("cluster", "Cluster"),
)
AREA_TITLES = dict(AREAS)
# Areas of installed rule packs (gpudoctor/plugins.py), shown after the built-in ones.
EXTRA_AREAS: Dict[str, str] = {}


def area_title(key: str) -> str:
    return AREA_TITLES.get(key) or EXTRA_AREAS.get(key) or key


def area_order(keys) -> List[str]:
    """The built-in areas in display order, then any other area in the order first seen."""
    present = list(dict.fromkeys(keys))
    return [key for key, _ in AREAS if key in present] + [key for key in present if key not in AREA_TITLES]

ID_PATTERN = re.compile(r"^GD\d{3}$")
NAME_PATTERN = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")

PASS = "pass"
FAIL = "fail"
UNKNOWN = "unknown"
NOT_APPLICABLE = "not_applicable"


@dataclass
class Fix:
    """What to do. Commands are copy-pasteable; gpudoctor never runs them on its own."""

    summary: str
    commands: List[str] = field(default_factory=list)
    safety: str = "safe"  # safe | disruptive | needs_root | reboot
    actions: List[Any] = field(default_factory=list)  # typed actions for `gpudoctor fix` (gpudoctor/fix.py)

    def to_json(self) -> Dict[str, Any]:
        out = {"summary": self.summary, "commands": list(self.commands), "safety": self.safety}
        return {**out, "actions": [a.to_json() for a in self.actions]} if self.actions else out


# Evidence is given as fact paths (the engine looks their values up) or (label, value) pairs.
EvidenceItem = Union[str, Tuple[str, Any]]


@dataclass
class Fail:
    message: str
    evidence: Sequence[EvidenceItem] = ()
    fix: Optional[Fix] = None
    subject: str = ""  # e.g. "GPU 1"; lets one rule report each GPU separately
    severity: Optional[str] = None  # override the rule's default (rarely)
    cause: str = ""  # a key shared by the findings of one cause: shown as one (engine.fold)


@dataclass
class Unknown:
    reason: str


@dataclass
class NotApplicable:
    reason: str


@dataclass
class Passed:
    """A pass that says what it left out and why (e.g. kernels a package loads only on other GPUs)."""

    reason: str


RuleResult = Union[None, Fail, Unknown, NotApplicable, Passed, List[Fail]]


@dataclass
class RuleMeta:
    id: str
    name: str
    severity: str
    area: str
    requires: Tuple[str, ...]
    func: Callable[..., RuleResult]
    doc: str

    @property
    def title(self) -> str:
        return self.doc.strip().splitlines()[0].strip() if self.doc.strip() else self.name

    def section(self, heading: str) -> str:
        """The text under ``## heading`` in the docstring."""
        return doc_sections(self.doc).get(heading.lower(), "")

    def to_json(self) -> Dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "severity": self.severity,
            "area": self.area,
            "title": self.title,
            "requires": list(self.requires),
            "why": self.section("why"),
            "fix": self.section("fix"),
            "references": self.section("references"),
        }


def doc_sections(doc: str) -> Dict[str, str]:
    sections: Dict[str, str] = {}
    current = None
    lines: List[str] = []
    for line in _dedent(doc).splitlines():
        if line.startswith("## "):
            if current:
                sections[current] = "\n".join(lines).strip()
            current, lines = line[3:].strip().lower(), []
        elif current:
            lines.append(line)
    if current:
        sections[current] = "\n".join(lines).strip()
    return sections


def _dedent(doc: str) -> str:
    """inspect.cleandoc without importing inspect (it costs more than all the rules)."""
    lines = (doc or "").expandtabs().splitlines()
    indents = [len(line) - len(line.lstrip()) for line in lines[1:] if line.strip()]
    margin = min(indents) if indents else 0
    cleaned = [lines[0].strip()] + [line[margin:].rstrip() for line in lines[1:]] if lines else []
    while cleaned and not cleaned[-1]:
        cleaned.pop()
    while cleaned and not cleaned[0]:
        cleaned.pop(0)
    return "\n".join(cleaned)


# Filled by the @rule decorator as rule modules are imported (see registry.load_rules).
_REGISTERED: List[RuleMeta] = []


def rule(
    id: str,
    name: str,
    *,
    severity: str,
    area: str,
    requires: Sequence[str] = (),
    applies: Optional[Callable[[Any], Optional[NotApplicable]]] = None,
) -> Callable[[Callable[..., RuleResult]], Callable[..., RuleResult]]:
    """Register a rule. ``applies(snap)``: the precondition several rules share (a launch command of a
    vLLM server), asked once the ``requires`` facts are there and before the rule's own code: a
    NotApplicable (reported as the rule's own would be) or None (the rule runs). The registered
    function is the guarded one, so calling a rule directly asks it too."""

    def register(func: Callable[..., RuleResult]) -> Callable[..., RuleResult]:
        run = func if applies is None else _guarded(func, applies)
        meta = RuleMeta(id, name, severity, area, tuple(requires), run, _dedent(func.__doc__ or ""))
        _REGISTERED.append(meta)
        run.meta = meta  # type: ignore[attr-defined]
        return run

    return register


def _guarded(func: Callable[..., RuleResult], applies: Callable[[Any], Optional[NotApplicable]]) -> Callable[..., RuleResult]:
    def run(snap: Any) -> RuleResult:
        skip = applies(snap)
        return skip if skip is not None else func(snap)

    run.__name__, run.__qualname__, run.__doc__ = func.__name__, func.__qualname__, func.__doc__
    run.__module__ = func.__module__
    run.__wrapped__ = func  # type: ignore[attr-defined]
    return run


@dataclass
class Evidence:
    path: str
    value: Any
    status: str = "ok"

    def to_json(self) -> Dict[str, Any]:
        return {"path": self.path, "value": self.value, "status": self.status}


@dataclass
class Finding:
    rule_id: str
    name: str
    severity: str
    area: str
    title: str
    message: str
    evidence: List[Evidence]
    fix: Optional[Fix]
    subject: str = ""
    cause: str = ""  # see Fail.cause
    also: List[str] = field(default_factory=list)  # the findings of the same cause folded into this one

    @property
    def label(self) -> str:
        """``GD503 requirement-not-satisfied [torch]``: how a folded finding is named."""
        return f"{self.rule_id} {self.name}" + (f" [{self.subject}]" if self.subject else "")

    def to_json(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {
            "id": self.rule_id,
            "name": self.name,
            "severity": self.severity,
            "area": self.area,
            "title": self.title,
            "subject": self.subject,
            "message": self.message,
            "evidence": [item.to_json() for item in self.evidence],
            "fix": self.fix.to_json() if self.fix else None,
        }
        if self.cause:
            out["cause"] = self.cause
        if self.also:
            out["same_cause"] = list(self.also)
        return out


@dataclass
class Outcome:
    """What one rule concluded: pass, fail (with findings), unknown or not_applicable."""

    rule: RuleMeta
    status: str
    findings: List[Finding] = field(default_factory=list)
    reason: str = ""

    def to_json(self) -> Dict[str, Any]:
        return {
            "id": self.rule.id,
            "name": self.rule.name,
            "area": self.rule.area,
            "status": self.status,
            "reason": self.reason,
            "findings": [finding.to_json() for finding in self.findings],
        }
