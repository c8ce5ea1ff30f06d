"""What a gate needs beyond findings: which areas were not checked, and why.

A rule that cannot decide is "unknown". A gate that reports "nothing blocking" while the
rules it was meant to run could not decide is a silent pass, so every renderer names those
areas (without -v) and ``--fail-on unknown`` turns them into exit 1.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Sequence, Tuple

from gpudoctor.exitcodes import FAIL_ON_CHOICES  # noqa: F401  (where the commands read it)
from gpudoctor.rule import NOT_APPLICABLE, UNKNOWN, area_order, area_title

REASON_LIMIT = 160  # characters of one reason in the one-line summaries


@dataclass
class AreaGap:
    """The rules of one area that ended in one status (unknown or not applicable), grouped by reason."""

    area: str
    title: str
    reasons: List[Tuple[str, List[str]]]  # (reason, rule IDs), most rules first

    @property
    def count(self) -> int:
        return sum(len(ids) for _, ids in self.reasons)

    def line(self, limit: int = 3) -> str:
        """``reason (GD702, GD721); other reason (GD706)``, at most ``limit`` reasons."""
        parts = [f"{_clip(reason)} ({_ids(ids)})" for reason, ids in self.reasons[:limit]]
        if len(self.reasons) > limit:
            rest = sum(len(ids) for _, ids in self.reasons[limit:])
            parts.append(f"{rest} more (-v lists them)")
        return "; ".join(parts)

    def to_json(self) -> Dict[str, object]:
        return {"area": self.area, "title": self.title, "count": self.count,
                "reasons": [{"reason": reason, "rules": ids} for reason, ids in self.reasons]}


def gaps(outcomes: Sequence, status: str = UNKNOWN) -> List[AreaGap]:
    """One AreaGap per area that has rules ending in ``status``, in display order."""
    by_area: Dict[str, Dict[str, List[str]]] = {}
    for outcome in outcomes:
        if outcome.status == status:
            reasons = by_area.setdefault(outcome.rule.area, {})
            reasons.setdefault(_first_clause(outcome.reason) or "no reason given", []).append(outcome.rule.id)
    out = []
    for area in area_order(by_area):
        reasons = sorted(by_area[area].items(), key=lambda item: -len(item[1]))
        out.append(AreaGap(area, area_title(area), reasons))
    return out


def not_checked(outcomes: Sequence) -> List[AreaGap]:
    return gaps(outcomes, UNKNOWN)


def not_applicable(outcomes: Sequence) -> List[AreaGap]:
    return gaps(outcomes, NOT_APPLICABLE)


def gated(blocking: Sequence, outcomes: Sequence, fail_on: str) -> bool:
    """Exit 1? Findings at or above ``fail_on``; with ``unknown`` also any rule that could not decide."""
    return bool(blocking) or (fail_on == UNKNOWN and any(o.status == UNKNOWN for o in outcomes))


def summary_lines(outcomes: Sequence, fail_on: str, every: bool = False) -> List[str]:
    """The lines under the summary: each area not (fully) checked, with why; empty when all decided.
    ``every`` (-v): every reason, not the first three and "N more"."""
    found = not_checked(outcomes)
    if not found:
        return []
    hint = "" if fail_on == UNKNOWN else " (--fail-on unknown makes this exit 1)"
    lines = [f"Not checked{hint}:"]
    for gap in found:
        lines.append(f"  {gap.title}: {gap.count} rule{'s' * (gap.count != 1)} undecided: "
                     f"{gap.line(limit=len(gap.reasons)) if every else gap.line()}")
    return lines


def engine_notes(snapshot) -> List[str]:
    """gpudoctor's own environment has no engine: say what was checked, and where the engines are."""
    installed = snapshot.get("engines.installed")
    if not installed.ok or installed.value or "engines.elsewhere" not in snapshot.facts:
        return []
    here = snapshot.value("python.executable") or "gpudoctor's own interpreter"
    found = [e for e in snapshot.value("engines.elsewhere") or [] if isinstance(e, dict)]
    if not found:
        return [f"No inference engine in the environment checked ({here}), and none found on PATH or in a serving process: "
                "point gpudoctor at the one you serve from with `gpudoctor check --python /path/to/venv/bin/python`."]
    lines = [f"No inference engine in the environment checked ({here}: gpudoctor's own); found elsewhere:"]
    lines += [f"  {e.get('engine')} in {e.get('python')} ({e.get('how')}): gpudoctor check --python {e.get('python')}" for e in found[:6]]
    return lines


def gpu_notes(snapshot) -> List[str]:
    """Which memory size `--gpu A100` was judged with (a product made with several), said aloud."""
    assumed = snapshot.meta.get("gpu_assumed")
    return [str(assumed)] if assumed else []


def preflight_notes(snapshot) -> List[str]:
    """A loud note when the launch command's flags could not be checked against any vLLM; for an SGLang
    command, what was checked and what not (printed, not only under -v)."""
    if snapshot.value("launch.kind") == "sglang-serve":
        return _sglang_notes(snapshot)
    if str(snapshot.value("launch.kind") or "").startswith("sglang"):
        return ["An SGLang command that is not a server (`sglang serve`, `python -m sglang.launch_server`): its flags were NOT checked."]
    fact = snapshot.get("launch.vllm")
    if fact.ok or "launch.command" not in snapshot.facts:
        return []
    why = fact.detail or fact.describe()
    return [
        f"The launch command's flags, values and parser names were NOT checked: {why}. "
        "To check them, run preflight where vLLM is installed, or point it at vLLM's environment: "
        "`gpudoctor preflight --python /path/to/venv/bin/python -- vllm serve …` or "
        "`gpudoctor preflight -- /path/to/venv/bin/vllm serve …` (with --snapshot, the command's vLLM is still read on this machine)."
    ]


def _sglang_notes(snapshot) -> List[str]:
    fact = snapshot.get("launch.sglang")
    if not fact.ok:
        why = fact.detail or fact.describe()
        return [f"SGLang server command: its flags were NOT checked: {why}. Point preflight at SGLang's environment: "
                "`gpudoctor preflight --python /path/to/venv/bin/python -- sglang serve …`."]
    info = fact.value if isinstance(fact.value, dict) else {}
    return [f"SGLang server command: flags checked against SGLang {info.get('version') or '?'}'s server arguments "
            f"({info.get('flags', '?')} flags, read from its source), the port, the GPUs its TP × PP × DP layout takes, "
            "the range of --mem-fraction-static, the model (readable, heads against --tp-size, --context-length against its "
            "config) and the drafter's path; memory against the model, the speculative method's settings and parser names "
            "are not checked for SGLang yet."]


def _first_clause(reason: str) -> str:
    return " ".join((reason or "").split())


def _clip(text: str, limit: int = REASON_LIMIT) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _ids(ids: List[str]) -> str:
    return ", ".join(ids) if len(ids) <= 4 else f"{', '.join(ids[:3])} and {len(ids) - 3} more"
