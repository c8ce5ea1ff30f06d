"""The terminal report: one status line per area, details under failures, one summary line.

Built as plain lines of (text, style) segments; styled through rich only when writing to
a colour terminal, so piping to a file or CI log gives plain text and rich is not even
imported.
"""

from __future__ import annotations

from typing import List, Tuple

from gpudoctor.engine import Result
from gpudoctor.render.headlines import context, headline
from gpudoctor import gates
from gpudoctor.rule import NOT_APPLICABLE, PASS, SEVERITY_RANK, UNKNOWN, area_order, area_title

Line = List[Tuple[str, str]]  # (text, rich style)

UNICODE = {"error": "✗", "warning": "!", "info": "i", PASS: "✓", UNKNOWN: "?", NOT_APPLICABLE: "-"}
ASCII = {"error": "x", "warning": "!", "info": "i", PASS: "+", UNKNOWN: "?", NOT_APPLICABLE: "-"}
STYLES = {"error": "bold red", "warning": "yellow", "info": "cyan", PASS: "green", UNKNOWN: "magenta", NOT_APPLICABLE: "dim"}


def build(result: Result, fail_on: str, verbose: bool = False, unicode: bool = True, quiet: bool = False) -> List[Line]:
    """``quiet``: only the findings, the summary and what was not checked (no header, no passing areas)."""
    glyphs = UNICODE if unicode else ASCII
    lines: List[Line] = []
    from gpudoctor import __version__

    if not quiet:
        lines.append([(f"gpudoctor {__version__}", "bold"), (f"  {context(result.snapshot)}", "dim")])
    shown = {}  # rule ID -> its findings as shown: one per cause (engine.fold)
    for finding in result.findings:
        shown.setdefault(finding.rule_id, []).append(finding)
    for area in area_order(o.rule.area for o in result.outcomes):
        outcomes = [o for o in result.outcomes if o.rule.area == area]
        if not verbose and all(o.status == NOT_APPLICABLE for o in outcomes):
            continue  # e.g. the cluster area on one machine, the server area without --smoke
        if quiet and not any(o.findings for o in outcomes):
            continue
        state = area_state(outcomes)
        counts = area_counts(outcomes)
        lines.append(
            [
                (f"{glyphs[state]} ", STYLES[state]),
                (f"{area_title(area):<20}", "bold"),
                (headline(area, result.snapshot), ""),
                (f"  {counts}" if counts else "", "dim"),
            ]
        )
        for outcome in outcomes:
            for finding in sorted(shown.get(outcome.rule.id, []), key=lambda f: (-SEVERITY_RANK[f.severity], f.subject)):
                lines.extend(finding_lines(finding, glyphs))
            if verbose and outcome.status == UNKNOWN:
                lines.append(
                    [
                        (f"    {glyphs[UNKNOWN]} {outcome.rule.id} {outcome.rule.name}: ", STYLES[UNKNOWN]),
                        (f"unknown: {outcome.reason}", "dim"),
                    ]
                )
        if verbose:  # what passed, each rule (with what it measured, when it says), then not applicable
            for outcome in outcomes:
                if outcome.status == PASS:
                    lines.append([(f"    {glyphs[PASS]} {outcome.rule.id} {outcome.rule.name}", STYLES[PASS]),
                                  (f": {outcome.reason}" if outcome.reason else "", "dim")])
            for gap in gates.not_applicable(outcomes):  # one line per area, not one per rule: "no launch command" 23 times is noise
                lines.append([(f"    {glyphs[NOT_APPLICABLE]} {gap.count} not applicable: ", STYLES[NOT_APPLICABLE]),
                              (gap.line(limit=len(gap.reasons)), "dim")])
    if lines:
        lines.append([])
    lines.extend(summary_block(result, fail_on, glyphs, every=verbose))
    return lines


def summary_block(result: Result, fail_on: str, glyphs=UNICODE, every: bool = False) -> List[Line]:
    """The summary line, then the loud notes and the areas not checked (never only under -v)."""
    out: List[Line] = [_summary(result, fail_on)]
    for note in result.notes:
        out.append([(f"{glyphs['warning']} ", STYLES["warning"]), (note, "bold")])
    for number, text in enumerate(gates.summary_lines(result.outcomes, fail_on, every)):
        out.append([(f"{glyphs[UNKNOWN]} " if number == 0 else "", STYLES[UNKNOWN]), (text, "" if number else "bold")])
    return out


def area_state(outcomes, findings=None) -> str:
    """The worst severity found, else unknown (a rule could not decide: never a silent ✓), pass, not applicable.

    Shared with render/matrix.py."""
    findings = [f for o in outcomes for f in o.findings] if findings is None else findings
    if findings:
        return max((f.severity for f in findings), key=SEVERITY_RANK.__getitem__)
    if any(o.status == UNKNOWN for o in outcomes):
        return UNKNOWN
    if any(o.status == PASS for o in outcomes):
        return PASS
    return NOT_APPLICABLE


def area_counts(outcomes) -> str:
    passed = sum(o.status == PASS for o in outcomes)
    unknown = sum(o.status == UNKNOWN for o in outcomes)
    parts = [f"{passed}/{len(outcomes)} passed"]
    if unknown:
        parts.append(f"{unknown} unknown")
    return "(" + ", ".join(parts) + ")"


def finding_lines(finding, glyphs, show_subject: bool = True) -> List[Line]:
    style = STYLES[finding.severity]
    subject = f" [{finding.subject}]" if finding.subject and show_subject else ""
    out: List[Line] = [
        [(f"    {glyphs[finding.severity]} {finding.rule_id} {finding.name}{subject}: ", style), (finding.message, "")]
    ]
    from gpudoctor.render.values import show, wrap

    for item in finding.evidence:
        label = f"        {item.path} = "
        pieces = wrap(show(item.path, item.value), max(40, 110 - len(label)))
        out.append([(label, "dim"), (pieces[0], "")])
        out.extend([[(" " * len(label), ""), (piece, "")] for piece in pieces[1:]])
    if finding.also:
        out.append([("      same cause: ", "bold"), (", ".join(finding.also), "")])
    if finding.fix:
        out.append([("      fix: ", "bold"), (finding.fix.summary, "")])
        for command in finding.fix.commands:
            out.append([("        $ ", "dim"), (command, "cyan")])
    out.append([(f"      more: gpudoctor explain {finding.rule_id}", "dim")])
    return out


def _summary(result: Result, fail_on: str) -> Line:
    from gpudoctor import verdict as judged

    verdict = judged.of(result, fail_on)
    return [("Summary: ", "bold"), (", ".join(verdict.count_parts()), ""),
            (f" — {verdict.sentence}", "bold red" if verdict.gated else "bold green")]


def _n(count: int, word: str) -> str:
    return f"{count} {word}{'s' * (count != 1)}"


# Control characters a value carries (a kernel file with NUL bytes, a process title with an ESC
# sequence) are shown escaped, never sent to the terminal: C0 but tab and newline, DEL, and C1.
_CONTROL = {code: f"\\x{code:02x}" for code in [*range(0x00, 0x09), *range(0x0b, 0x20), 0x7f, *range(0x80, 0xa0)]}


def printable(text: str) -> str:
    return text.translate(_CONTROL)


def plain(lines: List[Line]) -> str:
    return "\n".join(printable("".join(text for text, _ in line)).rstrip() for line in lines) + "\n"


def write(lines: List[Line], stream, color: bool, redactor=None) -> None:
    """Write to a stream through the redaction pass; with colour through rich (imported only then)."""
    from gpudoctor.redact import DEFAULT

    redact = redactor or DEFAULT
    if not color:
        stream.write(redact(plain(lines)))
        return
    try:
        from rich.console import Console
        from rich.text import Text
    except ImportError:  # rich is optional in practice (a stripped image): plain text, never a crash
        stream.write(redact(plain(lines)))
        return

    # Colour was decided by the caller (--color, NO_COLOR, isatty): make rich follow that
    # decision instead of its own (it drops colour on a pipe, under NO_COLOR and TERM=dumb).
    console = Console(file=stream, highlight=False, soft_wrap=True, force_terminal=True, color_system="standard", no_color=False)
    for line in lines:
        text = Text()
        line = [(printable(segment), style) for segment, style in line]
        whole = "".join(segment for segment, _ in line)
        scrubbed = redact(whole)
        if scrubbed != whole:
            # A secret can span segments ("HF_TOKEN = " | "hf_…"): redact the line as one text
            # and give up its colours rather than a piece of the secret.
            text.append(scrubbed)
        else:
            for segment, style in line:
                text.append(segment, style=style or None)
        console.print(text)



