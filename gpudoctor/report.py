"""The support report: one issue-ready Markdown file (or one JSON document, or a .tar.gz bundle).

Top: the verdict and the blocking findings with their fixes. Then the versions (driver,
CUDA, toolkit, torch, vLLM and where it came from, flash-attn variants), a GPU table, the
processes, the smoke check (``--url``), the end of a log with recognised error signatures
marked (``--log``), the environment, every rule's outcome, and the whole snapshot as JSON
inside ``<details>``.

Facts that other probes add over time are read by prefix (``cuda.``, ``vllm.``,
``flash_attn.``, ``processes.``, ``server.``) rather than by exact shape, so the report
picks them up as they appear and says "not collected" while they do not.

Everything here builds text and data from the snapshot; the caller passes the result
through the one redaction pass (gpudoctor/redact.py) before it leaves the process.
"""

from __future__ import annotations

import io
import os
import tarfile
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from gpudoctor import __version__
from gpudoctor.engine import Result
from gpudoctor.explain import Confirmation, Match, Text, natural_key
from gpudoctor.render.values import show
from gpudoctor.report_sections import (  # noqa: F401  (re-exported: the report's parts, by name)
    _clip, _value, code, env_lines, escape_markdown, fence, gpu_rows, plain, process_sections, table, version_rows,
)
from gpudoctor.rule import AREAS, FAIL, SEVERITY_RANK, Finding
from gpudoctor.snapshot import Fact, Snapshot, captured_at

SCHEMA_VERSION = 1
LOG_LINES = 200  # lines of the log shown in the report
LINE_LIMIT = 500  # characters of one log line shown


# --- the pieces ---------------------------------------------------------------------------
@dataclass
class LogExcerpt:
    path: str
    text: Text  # what was read (the tail of the file)
    lines: List[str]  # the last LOG_LINES of it
    first_number: int  # line number (within what was read) of lines[0]
    marks: Dict[int, List[str]]  # index in ``lines`` -> signature ids seen on that line
    matches: List[Match]  # signatures anywhere in what was read
    confirmations: List[Optional[Confirmation]]

    def to_json(self) -> Dict[str, Any]:
        return {
            "path": self.path,
            "bytes": self.text.size,
            "truncated": self.text.truncated,
            "lines_read": len(self.text.lines),
            "excerpt": [
                {"line": self.first_number + i, "text": _clip(line, LINE_LIMIT), "signatures": self.marks.get(i, [])}
                for i, line in enumerate(self.lines)
            ],
            "signatures": [
                dict(m.to_json(), title=m.signature.title, cause=m.signature.cause, fix=m.signature.fix,
                     commands=list(m.signature.commands), confirmation=c.to_json() if c else None)
                for m, c in zip(self.matches, self.confirmations)
            ],
        }

    def excerpt_text(self) -> str:
        return "\n".join(self.lines) + ("\n" if self.lines else "")


@dataclass
class Smoke:
    requested: bool
    url: Optional[str] = None
    status: str = "not_requested"  # not_requested | ok | unavailable | error
    note: str = ""
    facts: Dict[str, Fact] = field(default_factory=dict)

    def to_json(self) -> Dict[str, Any]:
        return {
            "requested": self.requested,
            "url": self.url,
            "status": self.status,
            "note": self.note,
            "facts": {path: fact.to_json() for path, fact in sorted(self.facts.items())},
        }


@dataclass
class Report:
    result: Result
    fail_on: str
    source: str  # "this machine" or "snapshot FILE"
    generated: str  # when this report was made
    log: Optional[LogExcerpt] = None
    smoke: Smoke = field(default_factory=lambda: Smoke(False))
    captured: str = ""  # when its snapshot was captured ("" : the snapshot records no time)

    @property
    def snapshot(self) -> Snapshot:
        return self.result.snapshot

    @property
    def blocking(self) -> List[Finding]:
        return self.result.blocking(self.fail_on)


def build(
    snapshot: Snapshot,
    rules: Sequence[Any],
    fail_on: str = "error",
    source: str = "this machine",
    log_path: Optional[str] = None,
    log_lines: int = LOG_LINES,
    smoke: Optional[Smoke] = None,
    confirm: bool = True,
    scrub: Optional[Callable[[str], str]] = None,
) -> Report:
    """Run the rules (after adding the smoke facts to ``snapshot``) and gather what the report shows."""
    from gpudoctor.engine import run_rules
    from gpudoctor.probes import merge

    smoke = smoke or Smoke(False)
    if smoke.facts:
        merge(snapshot, smoke.facts)
    result = run_rules(snapshot, rules)
    log = read_log(log_path, snapshot, log_lines, confirm, scrub) if log_path else None
    return Report(result, fail_on, source, time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), log, smoke,
                  captured_at(snapshot) or "")


def when(report: Report) -> str:
    """The report's time: the snapshot's capture time (`report --snapshot` made later must not stamp
    the current one, issue 31), or the report's own with a word that the snapshot records none."""
    if report.captured:
        return f"captured {report.captured}"
    return f"report made {report.generated}; the snapshot records no capture time"


def read_log(
    path: str, snapshot: Snapshot, lines: int = LOG_LINES, confirm: bool = True, scrub: Optional[Callable[[str], str]] = None
) -> LogExcerpt:
    """The tail of a log, its recognised signatures (confirmed on ``snapshot``). Raises OSError.

    ``scrub`` (the run's redaction pass) is applied to the excerpt as one text before it is
    cut into lines: a private key block spans lines, and each line alone would not look like one.
    """
    from gpudoctor import explain

    text = explain.read_file(path)
    all_lines = text.lines
    shown = all_lines[-lines:] if lines > 0 else []
    if scrub is not None and shown:
        scrubbed = scrub("\n".join(shown)).split("\n")
        # The redaction keeps line counts (a key block becomes a mask and empty lines); if a
        # pattern ever joined two lines, fall back to one line at a time.
        shown = scrubbed if len(scrubbed) == len(shown) else [scrub(line) for line in shown]
    first = len(all_lines) - len(shown) + 1
    matches = explain.match_text(text.text)
    confirmations = [explain.confirm(m.signature, snapshot, details=m.details, line=m.text) if confirm else None for m in matches]
    return LogExcerpt(path, text, shown, first, explain.scan_lines(shown), matches, confirmations)


# --- smoke -------------------------------------------------------------------------------
def run_smoke(url: str, timeout: float, environ: Mapping[str, str], api_key_env: Optional[str] = None,
              progress: Optional[Callable[[str, str], None]] = None) -> Smoke:
    """The smoke probe (``gpudoctor.probes.smoke.collect``) against ``url``; "error" when it cannot run.
    ``progress``: the live line of each step (commands/smoke.ProgressLine), on a terminal."""
    try:
        from gpudoctor.probes import Context, smoke
        from gpudoctor.probes.smoke.session import Options

        options = Options(url=url, timeout=timeout)
        if api_key_env:
            options.api_key, options.api_key_env = environ.get(api_key_env), api_key_env
        facts = smoke.collect(Context(environ=dict(environ), smoke=options, progress=progress))
    except Exception as exc:  # the report must be written even when the smoke check breaks
        return Smoke(True, url, "error", f"smoke check failed: {type(exc).__name__}: {exc}")
    clean = {str(k): v for k, v in facts.items() if isinstance(v, Fact)}
    return Smoke(True, url, "ok", "", clean)


def _n(count: int, word: str) -> str:
    return f"{count} {word}{'s' * (count != 1)}"


def verdict_line(report: Report) -> str:
    from gpudoctor import verdict as judged

    verdict = judged.of(report.result, report.fail_on)
    return f"{verdict.headline} ({', '.join(verdict.count_parts())})."


# --- Markdown ----------------------------------------------------------------------------
ISSUE_LIMIT = 65536  # characters GitHub accepts in an issue body
MARGIN = 4096  # room for the redaction pass (anonymized names can be longer than the originals)
FINDINGS_IN_FULL = 25  # findings shown with evidence and fix (within FINDINGS_BUDGET); the rest one line each
FINDINGS_BUDGET = 20000  # characters of one findings section
ONE_LINE_FINDINGS = 40
MESSAGE_LIMIT = 2000  # characters of a finding's message, of its fix summary, of one fix command
EVIDENCE_LIMIT = 600  # characters of one evidence value in the report
LOG_BUDGET = 16000  # characters of the log excerpt


def to_markdown(report: Report, snapshot_note: str = "", limit: int = ISSUE_LIMIT,
                scrub: Optional[Callable[[str], str]] = None) -> str:
    """The issue body, at most ``limit`` characters: sections that do not fit are left out, last first.

    Laid out like vLLM's bug template (the bug, then the environment), the verdict on top.
    ``snapshot_note`` says where the full snapshot went (--bundle, --snapshot-file); the
    snapshot itself is never inlined: on a real machine it alone is past GitHub's limit.
    """
    snap = report.snapshot
    from gpudoctor.gates import not_checked
    from gpudoctor.render.headlines import context

    sections: List[Tuple[str, int, List[str]]] = []  # (name, drop order: higher goes first, lines)
    top: List[str] = [
        "## gpudoctor report",
        "",
        f"_gpudoctor {__version__} · {plain(report.source)} · {plain(when(report))} · {plain(context(snap))}_",
        "",
        "### Verdict",
        "",
        verdict_line(report),
        "",
    ]
    if report.log and report.log.matches:
        top.append("Recognised in the log: " + "; ".join(_signature_summary(m, c) for m, c in zip(report.log.matches, report.log.confirmations)) + ".")
        top.append("")
    gaps = not_checked(report.result.outcomes)
    if gaps:
        top += ["Not checked (rules that could not decide):", ""]
        top += [f"- **{plain(g.title)}**: {g.count} undecided: {plain_paragraph(g.line())}" for g in gaps]
        top.append("")
    sections.append(("verdict", 0, top))
    blocking = report.blocking
    sections.append(("blocking findings", 0, _findings_md(blocking)))
    sections.append(("bug", 0, [
        "### 🐛 Describe the bug",
        "",
        "<!-- What you ran (the exact command), what you expected, and what happened instead. "
        "gpudoctor's findings are above; the environment follows. -->",
        "",
    ]))

    versions = ["### Your current environment", ""]
    versions += table(["component", "version", "fact"], [[plain(r["component"]) if r["component"] else "", code(r["value"]), code(r["fact"])] for r in version_rows(snap)])
    versions.append("")
    sections.append(("versions", 0, versions))

    gpu_md = ["### GPUs", ""]
    gpus = gpu_rows(snap)
    if gpus:
        header = ["#", "name", "cc", "memory", "used", "UUID", "PCIe", "persistence", "MIG", "ECC"]
        rows = [
            [str(g["index"]), code(g["name"]), code(g["compute_capability"]), g["memory_total"], g["memory_used"],
             code(g["uuid"]), code(g["pcie"]), g["persistence_mode"], g["mig_mode"], g["ecc_mode"]]
            for g in gpus
        ]
        gpu_md += table(header, rows)
    else:
        gpu_md.append(f"No GPU was read: `gpu.count` is {code(_value(snap, 'gpu.count'))}.")
    gpu_md.append("")
    sections.append(("GPUs", 1, gpu_md))

    procs = ["### Processes", ""]
    found = process_sections(snap)
    if not found:
        procs += ["Not collected.", ""]
    for title, header, rows, notes in found:
        procs.append(f"**{plain(title)}**" + (": " + plain("; ".join(notes)) if notes else ""))
        procs.append("")
        if header:
            procs += table([plain(h) for h in header], [[code(cell) for cell in row] for row in rows])
            procs.append("")
    sections.append(("processes", 2, procs))

    sections.append(("smoke check", 3, ["### Smoke check", ""] + _smoke_md(report.smoke, snap, report.result)))
    if report.log is not None:
        sections.append(("log excerpt", 2, _log_md(report.log)))

    others = [f for f in report.result.findings if f not in blocking]
    if others:
        sections.append(("other findings", 4, ["### Other findings", ""] + _findings_md(others)))

    env = ["### Environment", "", "Relevant variables only (an allowlist; secret-looking names are never collected).", ""]
    lines = env_lines(snap)
    env += fence("\n".join(_clip(line, LINE_LIMIT) for line in lines) if lines else "(none collected)", "text")
    env.append("")
    sections.append(("environment", 5, env))

    outcomes = report.result.outcomes
    rule_md = [f"<details><summary>All rule outcomes ({len(outcomes)})</summary>", ""]
    rule_md += table(
        ["rule", "name", "outcome", "note"],
        [[o.rule.id, code(o.rule.name), _outcome_word(o), plain(_clip(o.reason or "; ".join(f.message for f in o.findings), 160))]
         for o in outcomes],
    )
    rule_md += ["", "</details>", ""]
    sections.append(("rule outcomes", 6, rule_md))

    where = snapshot_note or ("The full snapshot is not included here (it is past GitHub's limit on a real machine): "
                              "`gpudoctor report --bundle` writes it into the .tar.gz, "
                              "`gpudoctor report --snapshot-file FILE` next to the report.")
    sections.append(("snapshot", 0, [f"_{where}_", ""]))
    return _fit(sections, limit - MARGIN, scrub)


def _fit(sections: List[Tuple[str, int, List[str]]], budget: int, scrub: Optional[Callable[[str], str]]) -> str:
    texts = [(name, drop, (scrub or (lambda t: t))("\n".join(lines) + "\n")) for name, drop, lines in sections]
    left_out: List[str] = []
    while sum(len(t) for _, _, t in texts) > budget:
        droppable = [(drop, k) for k, (_, drop, _) in enumerate(texts) if drop > 0]
        if not droppable:
            break
        _, k = max(droppable)
        left_out.append(texts[k][0])
        del texts[k]
    body = "".join(t for _, _, t in texts)
    if left_out:
        body += (f"\n_Left out to fit GitHub's {ISSUE_LIMIT:,}-character issue limit: {', '.join(left_out)} "
                 "(`gpudoctor report --bundle` has everything)._\n")
    if len(body) > budget:  # only the top sections are left and they are still too long: cut at a line
        cut = body.rfind("\n", 0, budget - 200)
        body = _close_fences(body[: max(cut, 0)]) + "\n\n_… cut here to fit GitHub's issue limit; the bundle has everything._\n"
    return body


def _close_fences(text: str) -> str:
    """Close a fenced block or <details> left open by a cut."""
    fence_open = None
    for line in text.split("\n"):
        stripped = line.strip()
        if stripped.startswith("```"):
            ticks = stripped[: len(stripped) - len(stripped.lstrip("`"))]
            if fence_open is None:
                fence_open = ticks
            elif stripped == fence_open or (stripped.startswith(fence_open) and not stripped.strip("`")):
                fence_open = None
    if fence_open:
        text += "\n" + fence_open
    if text.count("<details>") > text.count("</details>"):
        text += "\n\n</details>"
    return text


def _findings_md(findings: Sequence[Finding], budget: int = FINDINGS_BUDGET) -> List[str]:
    """Findings in full (evidence, fix) while they fit in ``budget`` characters, then one line each."""
    out: List[str] = []
    used = 0
    shown = 0
    for finding in findings[:FINDINGS_IN_FULL]:
        block = _finding_md(finding)
        size = sum(len(line) + 1 for line in block)
        if shown and used + size > budget:
            break
        out.extend(block)
        used += size
        shown += 1
    rest = findings[shown:]
    if rest:
        out += [f"{len(rest)} more:", ""]
        out += [f"- {finding.severity.upper()} {finding.rule_id} {finding.name}"
                + (f" ({plain(_clip(finding.subject, 80))})" if finding.subject else "") + f": {plain_paragraph(_clip(finding.message, 160))}"
                for finding in rest[:ONE_LINE_FINDINGS]]
        if len(rest) > ONE_LINE_FINDINGS:
            out.append(f"- … and {len(rest) - ONE_LINE_FINDINGS} more (`gpudoctor check --format json` lists them all)")
        out.append("")
    return out


def _outcome_word(outcome) -> str:
    if outcome.status == FAIL:
        return max((f.severity for f in outcome.findings), key=SEVERITY_RANK.__getitem__)
    return outcome.status.replace("_", " ")


def _finding_md(finding: Finding) -> List[str]:
    subject = f" ({plain(finding.subject)})" if finding.subject else ""
    out = [f"#### {finding.severity.upper()} {finding.rule_id} {finding.name}{_clip(subject, 120)}", "",
           plain_paragraph(_clip(finding.message, MESSAGE_LIMIT)), ""]
    for item in finding.evidence[:12]:
        out.append(f"- {code(_clip(item.path, 120))} = {code(_clip(show(item.path, item.value), EVIDENCE_LIMIT))}")
    if finding.evidence:
        out.append("")
    if finding.also:
        out += ["**Same cause:** " + ", ".join(code(_clip(label, 120)) for label in finding.also), ""]
    if finding.fix:
        out += [f"**Fix:** {plain_paragraph(_clip(finding.fix.summary, MESSAGE_LIMIT))}", ""]
        if finding.fix.commands:
            out += fence("\n".join(_clip(command, MESSAGE_LIMIT) for command in finding.fix.commands[:12]), "sh")
            out.append("")
    out += [f"More: `gpudoctor explain {finding.rule_id}`", ""]
    return out


def plain_paragraph(text: str) -> str:
    """A paragraph of our own prose, shown as written: a value in it can neither open a tag nor
    turn into emphasis or a link (escape_markdown)."""
    return escape_markdown(text)


def _signature_summary(m: Match, conf: Optional[Confirmation]) -> str:
    text = f"**{m.signature.id}** (line {m.line})"
    if conf is None:
        return text
    if conf.verdict == "confirmed":
        ids = sorted({c.rule for c in conf.of_kind("confirmed")})
        return text + f", confirmed here by {', '.join(ids)}"
    words = {"not_confirmed": ", not confirmed on this machine", "different_cause": ", not this cause here (a different cause found)"}
    return text + words.get(conf.verdict, ", could not be checked here")


def _smoke_md(smoke: Smoke, snap: Snapshot, result: Result) -> List[str]:
    """The step table `gpudoctor smoke` prints (one row a step: ✓/✗, verdict, what was measured), then
    the raw facts folded away for whoever debugs the server (issue 31: the section was the facts table)."""
    from gpudoctor.render.smoke import GLYPHS, rows as smoke_rows

    if not smoke.requested:
        return ["Not run (`gpudoctor report --url URL` runs it against a server).", ""]
    if smoke.status != "ok":
        return [plain_paragraph(smoke.note or smoke.status), ""]
    steps = [[GLYPHS[row["verdict"]][0], plain(row["check"]), plain(row["verdict"]), plain(_clip(str(row["measured"] or ""), 200)),
              code(row["rule"])] for row in smoke_rows(result)]
    out = [f"Against {code(smoke.url)}:", ""]
    out += table(["", "step", "verdict", "measured", "rule"], steps) if steps else ["(no step was judged)"]
    paths = sorted((p for p in snap.facts if p.startswith(("server.", "smoke."))), key=natural_key)
    facts = []
    for p in paths:
        fact = snap.get(p)
        shown = _value(snap, p) if fact.ok else (fact.detail or "")
        facts.append([code(p), code(fact.status), code(shown)])
    if facts:
        out += ["", "<details><summary>the server facts</summary>", ""] + table(["fact", "status", "value"], facts) + ["", "</details>"]
    return out + [""]


def _log_md(log: LogExcerpt) -> List[str]:
    name = os.path.basename(log.path) or log.path
    if name.isdigit():  # /dev/fd/63 from --log <(journalctl …)
        name = log.path
    read = _n(len(log.text.lines), "line") + " read"
    if log.text.truncated:
        read += f", the last {log.text.read_mib():.1f} MiB of {log.text.size / 1048576:.1f} MiB"
    shown = "The last line" if len(log.lines) == 1 else f"The last {len(log.lines)} lines"
    out = [f"### Log: {plain(name)}", "", f"{shown} ({read}); lines marked `>>` match a known error signature.", ""]
    for m, conf in zip(log.matches, log.confirmations):
        sig = m.signature
        out.append(f"- **{sig.id}**: {plain_paragraph(sig.title)} (line {m.line}" + (f", {m.count} lines" if m.count > 1 else "") + ")")
        out.append(f"  - cause: {plain_paragraph(sig.cause)}")
        out.append(f"  - fix: {plain_paragraph(sig.fix)} (`gpudoctor explain {sig.id}`)")
        if conf is not None:
            for check in conf.of_kind("confirmed"):
                out.append(f"  - confirmed by {check.rule} {check.name}: {plain_paragraph(check.text)}")
            if conf.verdict != "confirmed":
                for check in conf.of_kind("different_cause"):
                    out.append(f"  - different cause found by {check.rule} {check.name}: {plain_paragraph(check.text)}")
                words = {"not_confirmed": "not confirmed on this machine", "different_cause": "not this cause on this machine"}
                out.append(f"  - {words.get(conf.verdict, 'could not be checked on this machine')}")
    if log.matches:
        out.append("")
    width = len(str(log.first_number + max(len(log.lines) - 1, 0)))
    numbered = []
    for i, line in enumerate(log.lines):
        mark = ">>" if i in log.marks else "  "
        tail = f"   <- {', '.join(log.marks[i])}" if i in log.marks else ""
        numbered.append(f"{mark} {log.first_number + i:>{width}}  {_clip(line, LINE_LIMIT)}{tail}")
    kept, used = [], 0
    for line in reversed(numbered):  # the end of a log is where it failed: keep that within the budget
        used += len(line) + 1
        if used > LOG_BUDGET and kept:
            break
        kept.append(line)
    kept.reverse()
    if len(kept) < len(numbered):
        out += [f"Only the last {len(kept)} of those lines fit here; the bundle has {len(numbered)}.", ""]
    out += fence("\n".join(kept) if kept else "(empty)", "text")
    return out + [""]


# --- JSON --------------------------------------------------------------------------------
def to_json(report: Report) -> Dict[str, Any]:
    snap = report.snapshot
    result = report.result
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": "gpudoctor.report",
        "tool": {"name": "gpudoctor", "version": __version__},
        "generated": report.generated,
        "captured": report.captured or None,
        "source": report.source,
        "verdict": {
            "blocking": bool(report.blocking),
            "fail_on": report.fail_on,
            "summary": result.counts(),
            "text": verdict_line(report).replace("**", ""),
        },
        "blocking_findings": [f.to_json() for f in report.blocking],
        "findings": [f.to_json() for f in result.findings],
        "versions": version_rows(snap),
        "gpus": gpu_rows(snap),
        "processes": {
            "gpu": [dict(p, gpu=i) for i in snap.gpu_indices() for p in (snap.value(f"gpu.{i}.processes") or []) if isinstance(p, dict)],
            "facts": {path: fact.to_json() for path, fact in snap.with_prefix("processes.")},
        },
        "smoke": report.smoke.to_json(),
        "log": report.log.to_json() if report.log else None,
        "env": snap.value("env") if isinstance(snap.value("env"), dict) else {},
        "outcomes": [o.to_json() for o in result.outcomes],
        "areas": [title for key, title in AREAS if any(o.rule.area == key for o in result.outcomes)],
        "snapshot": snap.to_json(),
    }


# --- the bundle --------------------------------------------------------------------------
def write_bundle(path: str, members: Sequence[Tuple[str, str]], top: str = "gpudoctor-report") -> None:
    """A .tar.gz only its owner can read; members are 0600, owned by uid 0 with no user names."""
    buffer = io.BytesIO()
    now = int(time.time())
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, text in members:
            data = text.encode("utf-8", "replace")
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size, info.mode, info.mtime = len(data), 0o600, now
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(data))
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "wb") as handle:
            fd = -1
            handle.write(buffer.getvalue())
    finally:
        if fd >= 0:
            os.close(fd)
