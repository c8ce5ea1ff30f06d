"""Formats for CI systems: JUnit XML (one test case per rule) and GitHub workflow annotations.

JUnit: a rule with findings at or above ``--fail-on`` is a failure (message, evidence, fix);
a rule that could not decide is skipped, or a failure under ``--fail-on unknown``; a rule that
does not apply is skipped; findings below the gate pass with their text in system-out. So the
XML's failure count says what the exit code says.

GitHub: ``::error``/``::warning``/``::notice`` workflow commands, one per finding (and one per
area not checked), then the summary line. See
https://docs.github.com/en/actions/reference/workflow-commands-for-github-actions
"""

from __future__ import annotations

import time
from typing import Any, List, Optional, Tuple
from xml.sax.saxutils import escape, quoteattr

from gpudoctor import __version__
from gpudoctor.engine import ClusterResult, Result
from gpudoctor.redact import DEFAULT, Redactor
from gpudoctor.render.values import show
from gpudoctor.rule import FAIL, NOT_APPLICABLE, SEVERITY_RANK, UNKNOWN, area_title

MESSAGE_LIMIT = 1000  # characters of one failure message attribute


def _finding_text(finding) -> str:
    lines = [finding.message]
    for item in finding.evidence:
        lines.append(f"  {item.path} = {show(item.path, item.value)}")
    if finding.fix:
        lines.append(f"fix: {finding.fix.summary}")
        lines.extend(f"  $ {command}" for command in finding.fix.commands)
    lines.append(f"more: gpudoctor explain {finding.rule_id}")
    return "\n".join(lines)


def _clean(text: str) -> str:
    """XML 1.0 cannot carry most control characters, not even escaped."""
    return "".join(ch for ch in text if ch in "\t\n\r" or ord(ch) >= 0x20)


def _cases(result: Result, fail_on: str) -> Tuple[List[str], int, int]:
    """One node's test cases (one per rule), its failures and its skipped cases."""
    blocking = {id(f) for f in result.blocking(fail_on)}
    cases: List[str] = []
    failures = skipped = 0
    for outcome in result.outcomes:
        meta = outcome.rule
        name = quoteattr(_clean(f"{meta.id} {meta.name}"))
        classname = quoteattr(_clean(f"gpudoctor.{meta.area}"))
        head = f'  <testcase classname={classname} name={name} time="0"'
        gated = [f for f in outcome.findings if id(f) in blocking]
        if outcome.status == FAIL and gated:
            failures += 1
            worst = max((f.severity for f in gated), key=SEVERITY_RANK.__getitem__)
            message = "; ".join(f.message for f in gated)
            body = "\n\n".join(_finding_text(f) for f in outcome.findings)
            cases.append(f"{head}>\n    <failure type={quoteattr(worst)} message={quoteattr(_clean(message[:MESSAGE_LIMIT]))}>"
                         f"{escape(_clean(body))}</failure>\n  </testcase>")
        elif outcome.status == FAIL:  # findings below the gate: the case passes, its text is kept
            body = "\n\n".join(_finding_text(f) for f in outcome.findings)
            cases.append(f"{head}>\n    <system-out>{escape(_clean(body))}</system-out>\n  </testcase>")
        elif outcome.status == UNKNOWN and fail_on == UNKNOWN:
            failures += 1
            reason = _clean(f"could not decide: {outcome.reason}")
            cases.append(f"{head}>\n    <failure type=\"unknown\" message={quoteattr(reason[:MESSAGE_LIMIT])}>{escape(reason)}</failure>\n  </testcase>")
        elif outcome.status in (UNKNOWN, NOT_APPLICABLE):
            skipped += 1
            word = "could not decide" if outcome.status == UNKNOWN else "not applicable"
            cases.append(f"{head}>\n    <skipped message={quoteattr(_clean(f'{word}: {outcome.reason}'[:MESSAGE_LIMIT]))}/>\n  </testcase>")
        else:
            cases.append(f"{head}/>")
    return cases, failures, skipped


def _node_suites(result: Any) -> List[Tuple[str, Result]]:
    """(suite label, one node's Result): one for a node; across nodes and each answering node for a cluster."""
    if isinstance(result, ClusterResult):
        return [("across nodes", result.cluster)] + [(f"node {name}", result.per_node[name])
                                                     for name in result.names if name in result.per_node]
    return [("", result)]


def junit(result: Any, fail_on: str, suite: str = "gpudoctor", redactor: Optional[Redactor] = None) -> str:
    """One test suite for a node; for a cluster (engine.ClusterResult) one for the cross-node rules and
    one per node that answered (a node that did not is a cross-node finding)."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
    props = (f'  <properties><property name="gpudoctor.version" value={quoteattr(__version__)}/>'
             f'<property name="fail_on" value={quoteattr(fail_on)}/></properties>')
    suites: List[str] = []
    totals = [0, 0, 0]
    for label, node in _node_suites(result):
        cases, failures, skipped = _cases(node, fail_on)
        totals = [totals[0] + len(node.outcomes), totals[1] + failures, totals[2] + skipped]
        attrs = f'tests="{len(node.outcomes)}" failures="{failures}" errors="0" skipped="{skipped}"'
        name = f"{suite}: {label}" if label else suite
        suites += [f" <testsuite name={quoteattr(_clean(name))} {attrs} timestamp=\"{stamp}\">", props] + cases + [" </testsuite>"]
    attrs = f'tests="{totals[0]}" failures="{totals[1]}" errors="0" skipped="{totals[2]}"'
    text = "\n".join(['<?xml version="1.0" encoding="UTF-8"?>', f"<testsuites name=\"gpudoctor\" {attrs}>"]
                     + suites + ["</testsuites>", ""])
    return (redactor or DEFAULT)(text)


# --- GitHub -----------------------------------------------------------------------------------------------------
def _data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _prop(text: str) -> str:
    return _data(text).replace(":", "%3A").replace(",", "%2C")


LEVEL = {"error": "error", "warning": "warning", "info": "notice"}


def github(result: Any, fail_on: str, file: Optional[str] = None, redactor: Optional[Redactor] = None) -> str:
    """One workflow command per finding (``file=`` when the run had a file to point at), then the
    summary; a cluster's findings carry their node in the title."""
    from gpudoctor import verdict as judged
    from gpudoctor.render.text import plain

    verdict = judged.of(result, fail_on)
    where = f"file={_prop(file)}," if file else ""
    blocking = {id(f) for f in verdict.blocking}
    out: List[str] = []
    for finding in verdict.findings:
        level = LEVEL[finding.severity]
        if id(finding) in blocking and level == "notice":
            level = "warning"
        subject = f" [{finding.subject}]" if finding.subject else ""
        title = _prop(f"{finding.rule_id} {finding.name}{subject}")
        out.append(f"::{level} {where}title={title}::{_data(_finding_text(finding))}")
    for gap in verdict.gaps:
        level = "error" if fail_on == UNKNOWN else "notice"
        title = _prop(f"{area_title(gap.area)}: not checked")
        rules = f"{gap.count} rule" + ("s" if gap.count != 1 else "")  # "1 rules" read wrong (issue 31)
        out.append(f"::{level} {where}title={title}::{_data(f'{rules} could not decide: {gap.line()}')}")
    for note in result.notes:
        out.append(f"::warning {where}title={_prop('gpudoctor')}::{_data(note)}")
    summary = [("Summary: ", ""), (", ".join(verdict.count_parts()), ""), (f" — {verdict.sentence}", "")]
    out.append(plain([summary]).rstrip())
    return (redactor or DEFAULT)("\n".join(out) + "\n")
