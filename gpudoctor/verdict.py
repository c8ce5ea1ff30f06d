"""The verdict of one run, for one node or a cluster: what blocks, what could not be decided, the one
sentence that says so and the exit code. Every renderer and every command reads these from here, so
the words a user reads and the exit code they get cannot disagree (issue 28: a report said "Nothing
blocking" and exited 1; a cluster check dropped ``--fail-on unknown``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Sequence

from gpudoctor.engine import blocking as blocking_findings
from gpudoctor.exitcodes import ExitCode
from gpudoctor.gates import AreaGap, not_checked
from gpudoctor.rule import PASS, UNKNOWN, Finding, Outcome


@dataclass
class Verdict:
    fail_on: str
    outcomes: List[Outcome]  # every outcome judged (a cluster: across nodes, then each node's)
    findings: List[Finding]  # worst first (a cluster's labelled with their node)
    counts: Dict[str, int]
    blocking: List[Finding]  # the findings at or above fail_on
    gaps: List[AreaGap]  # the areas whose rules could not decide, with why

    @property
    def undecided(self) -> int:
        return sum(o.status == UNKNOWN for o in self.outcomes)

    @property
    def gated(self) -> bool:
        """Exit 1: findings at or above ``fail_on``; with ``unknown`` also a rule that could not decide."""
        return bool(self.blocking) or (self.fail_on == UNKNOWN and self.undecided > 0)

    @property
    def exit_code(self) -> int:
        return ExitCode.FINDINGS if self.gated else ExitCode.OK

    @property
    def why(self) -> str:
        """Why it blocks, or ``nothing blocking``: the one clause every renderer uses."""
        if self.blocking:
            return f"blocking (at or above {self.fail_on})"
        if self.gated:
            return "blocking (--fail-on unknown: some rules could not decide)"
        return "nothing blocking"

    @property
    def sentence(self) -> str:
        """``nothing blocking: exit 0`` / ``blocking (at or above error): exit 1`` / …"""
        return f"{self.why}: exit {int(self.exit_code)}"

    @property
    def headline(self) -> str:
        """The bold verdict of a Markdown page (an issue, a report)."""
        if self.blocking:
            count = len(self.blocking)
            return f"**Blocking: {count} finding{'s' * (count != 1)} at or above {self.fail_on}**"
        if self.gated:
            return f"**Blocking: {self.undecided} rule{'s' * (self.undecided != 1)} could not decide (--fail-on unknown)**"
        return "**Nothing blocking**"

    @property
    def title(self) -> str:
        """The short bold verdict above a Markdown page's table."""
        return "**Blocking findings**" if self.gated else "**Nothing blocking**"

    def count_parts(self) -> List[str]:
        """``2 errors, 0 warnings, 15 passed, 33 unknown`` (info only when there is some)."""
        counts = self.counts
        parts = [_n(counts.get("error", 0), "error"), _n(counts.get("warning", 0), "warning"),
                 f"{counts.get(PASS, 0)} passed", f"{counts.get(UNKNOWN, 0)} unknown"]
        if counts.get("info"):
            parts.insert(2, f"{counts['info']} info")
        return parts


def of(result: Any, fail_on: str) -> Verdict:
    """The verdict of an engine result: one node's (engine.Result) or a cluster's (engine.ClusterResult)."""
    outcomes = list(result.outcomes)
    findings = list(result.findings)
    return Verdict(fail_on, outcomes, findings, result.counts(), blocking_findings(findings, fail_on), not_checked(outcomes))


def _n(count: int, word: str) -> str:
    return f"{count} {word}{'s' * (count != 1)}"


__all__: Sequence[str] = ("Verdict", "of")
