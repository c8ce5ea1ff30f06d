"""GitHub-ready Markdown: verdict, findings with fixes, the snapshot in a <details> block."""

from __future__ import annotations

from typing import List, Optional

from gpudoctor import __version__
from gpudoctor.engine import Result
from gpudoctor.redact import DEFAULT, Redactor
from gpudoctor.render.values import show
from gpudoctor.render.headlines import context, headline
from gpudoctor.gates import not_checked
from gpudoctor.rule import NOT_APPLICABLE, PASS, UNKNOWN, Finding, area_order, area_title


def _cell(text: str) -> str:
    return str(text).replace("|", "/").replace("<", "&lt;").replace(">", "&gt;").replace("\n", " ") or "—"


LIMIT = 65536 - 4096  # GitHub's body limit, less room for the redaction pass
GLYPHS = {"error": "✗", "warning": "!", "info": "i", PASS: "✓", UNKNOWN: "?", NOT_APPLICABLE: "–"}


def finding_lines(finding: Finding, heading: str = "###") -> List[str]:
    """One finding as Markdown: heading, what was seen, the evidence, the fix (one node's report
    and the cluster's, render/matrix.py, both write findings with it)."""
    from gpudoctor.report import code

    subject = f" ({finding.subject})" if finding.subject else ""
    out = [f"{heading} {finding.severity.upper()} {finding.rule_id} {finding.name}{subject}", "", finding.message, ""]
    for item in finding.evidence:
        out.append(f"- {code(item.path)} = {code(show(item.path, item.value))}")
    if finding.also:
        out += ["", "**Same cause:** " + ", ".join(code(label) for label in finding.also)]
    if finding.fix:
        out += ["", f"**Fix:** {finding.fix.summary}"]
        if finding.fix.commands:
            out += ["", "```sh", *finding.fix.commands, "```"]
    out.append("")
    return out


def render(result: Result, fail_on: str, redactor: Optional[Redactor] = None) -> str:
    from gpudoctor.render.text import area_state

    from gpudoctor import verdict as judged

    verdict = judged.of(result, fail_on)
    out: List[str] = [f"## gpudoctor {__version__}", "", f"_{context(result.snapshot)}_", ""]
    out.append(f"{verdict.title}: {', '.join(verdict.count_parts())} (exit {int(verdict.exit_code)} with --fail-on {fail_on}).")
    out.append("")
    for note in result.notes:
        out += [f"> **Warning:** {note}", ""]
    gaps = not_checked(result.outcomes)
    if gaps:
        out.append("**Not checked**" + ("" if fail_on == UNKNOWN else " (`--fail-on unknown` makes this exit 1)") + ":")
        out.append("")
        for gap in gaps:
            out.append(f"- **{gap.title}**: {gap.count} rule{'s' * (gap.count != 1)} undecided: {_cell(gap.line())}")
        out.append("")
    out.append("| | area | found |")
    out.append("| --- | --- | --- |")
    for area in area_order(o.rule.area for o in result.outcomes):
        state = area_state([o for o in result.outcomes if o.rule.area == area])
        out.append(f"| {GLYPHS[state]} | {area_title(area)} | {_cell(headline(area, result.snapshot))} |")
    out.append("")
    for finding in result.findings:
        out.extend(finding_lines(finding))
    body = "\n".join(out) + "\n"
    snapshot = result.snapshot.dumps().rstrip()
    if len(body) + len(snapshot) < LIMIT:  # GitHub refuses a comment or issue body past 65,536
        body += "<details><summary>snapshot.json</summary>\n\n```json\n" + snapshot + "\n```\n\n</details>\n"
    else:
        body += (f"_The snapshot ({len(snapshot):,} characters) is left out to stay under GitHub's {LIMIT:,}-character "
                 "limit: `gpudoctor snapshot -o FILE` saves it, `gpudoctor report --bundle` packs it._\n")
    return (redactor or DEFAULT)(body)
