"""GitHub-ready Markdown: verdict, findings with fixes, the snapshot in a <details> block."""

from __future__ import annotations

from typing import List, Optional

from gpudoctor import __version__
from gpudoctor.engine import Result
from gpudoctor.redact import DEFAULT, Redactor, shown_value
from gpudoctor.render.headlines import context, headline
from gpudoctor.rule import AREAS


def render(result: Result, fail_on: str, redactor: Optional[Redactor] = None) -> str:
    counts = result.counts()
    blocking = result.blocking(fail_on)
    out: List[str] = [f"## gpudoctor {__version__}", "", f"_{context(result.snapshot)}_", ""]
    verdict = "**Blocking findings**" if blocking else "**Nothing blocking**"
    out.append(f"{verdict}: {counts['error']} errors, {counts['warning']} warnings, {counts['pass']} passed, {counts['unknown']} unknown.")
    out.append("")
    out.append("| area | found |")
    out.append("| --- | --- |")
    for area, title in AREAS:
        if any(o.rule.area == area for o in result.outcomes):
            out.append(f"| {title} | {headline(area, result.snapshot).replace('|', '/')} |")
    out.append("")
    for finding in result.findings:
        subject = f" ({finding.subject})" if finding.subject else ""
        out.append(f"### {finding.severity.upper()} {finding.rule_id} {finding.name}{subject}")
        out.append("")
        out.append(finding.message)
        out.append("")
        for item in finding.evidence:
            value = shown_value(item.path, item.value)
            out.append(f"- `{item.path}` = `{value!r}`" if not isinstance(value, str) else f"- `{item.path}` = `{value}`")
        if finding.fix:
            out.append("")
            out.append(f"**Fix:** {finding.fix.summary}")
            if finding.fix.commands:
                out.append("")
                out.append("```sh")
                out.extend(finding.fix.commands)
                out.append("```")
        out.append("")
    out.append("<details><summary>snapshot.json</summary>")
    out.append("")
    out.append("```json")
    out.append(result.snapshot.dumps().rstrip())
    out.append("```")
    out.append("")
    out.append("</details>")
    return (redactor or DEFAULT)("\n".join(out) + "\n")
