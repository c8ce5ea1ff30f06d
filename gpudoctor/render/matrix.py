"""A cluster's report: the per-node matrix (nodes × key facts, differing rows marked), then the
findings grouped by node — as terminal lines, one JSON document, or Markdown.

The matrix has fixed rows (driver, GPUs, Python, torch, vLLM, flash-attn, NCCL, /dev/shm …)
plus a row for every watched value that differs between nodes (``ClusterResult.spreads``, the
cross-node policy's values from rules/cluster_policy.py, handed over by the command), so
whatever a skew rule names is also visible in the table.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from gpudoctor import __version__
from gpudoctor.cluster import NODE_OK, SOURCE_FACT, node_snapshot
from gpudoctor.engine import ClusterResult
from gpudoctor.gates import summary_lines
from gpudoctor.render.headlines import context
from gpudoctor.render.text import ASCII, STYLES, UNICODE, Line, area_counts, area_state, finding_lines
from gpudoctor.rule import AREA_TITLES, NOT_APPLICABLE, UNKNOWN
from gpudoctor.snapshot import Snapshot, dist_key, gib
from gpudoctor.visible import gpu_kinds

CELL_WIDTH = 26
LABEL_WIDTH = 26
TABLE_WIDTH = 140
GONE = "—"
FLASH_ATTN = ("flash-attn", "flash-attn-3", "flash-attn-4", "fa4", "vllm-flash-attn")


@dataclass
class Row:
    label: str
    values: Dict[str, str]  # node -> text ("" for a node that did not answer)
    differs: bool
    path: str = ""  # the fact it shows, when it is one

    def to_json(self) -> Dict[str, Any]:
        return {"label": self.label, "path": self.path, "differs": self.differs, "values": dict(self.values)}


def _dist_version(snap: Snapshot, name: str) -> Optional[str]:
    dists = snap.value("packages.dists")
    if not isinstance(dists, dict):
        return None
    dist = dists.get(dist_key(name))
    return str(dist.get("version")) if isinstance(dist, dict) and dist.get("version") else None


def _shown(snap: Snapshot, path: str) -> str:
    fact = snap.facts.get(path)
    if fact is None:
        return "?"
    if fact.ok:
        return "" if fact.value is None else str(fact.value)
    return f"({fact.status})"


def _gpus(snap: Snapshot) -> str:
    if not snap.get("gpu.count").ok:
        return f"({snap.get('gpu.count').status})"
    kinds = Counter(gpu_kinds(snap))
    if not kinds:
        return "none"
    return "; ".join(f"{count} × {name} (cc {cc})" for (name, cc), count in kinds.items())


def _torch(snap: Snapshot) -> str:
    version = snap.value("torch.version")
    if not version:
        return _shown(snap, "torch.version")
    cuda = snap.value("torch.cuda")
    return f"{version}" + (f" (CUDA {cuda})" if cuda else "")


def _toolkit(snap: Snapshot) -> str:
    home = snap.value("cuda.home")
    if isinstance(home, dict) and home.get("version"):
        return str(home["version"])
    return _shown(snap, "cuda.home") if "cuda.home" in snap.facts else "?"


def _package(name: str) -> Callable[[Snapshot], str]:
    def read(snap: Snapshot) -> str:
        if not snap.get("packages.dists").ok:
            return "?"
        return _dist_version(snap, name) or "-"

    return read


def _flash_attn(snap: Snapshot) -> str:
    if not snap.get("packages.dists").ok:
        return "?"
    found = [f"{name} {version}" for name in FLASH_ATTN for version in [_dist_version(snap, name)] if version]
    return ", ".join(found) or "-"


def _nccl(snap: Snapshot) -> str:
    for path in ("nccl.version", "vllm.nccl_version"):
        if snap.value(path):
            return str(snap.value(path))
    dists = snap.value("packages.dists")
    if not isinstance(dists, dict):
        return "?"
    found = [f"{dist.get('version')} ({key})" for key, dist in sorted(dists.items())
             if key.startswith("nvidia-nccl") and isinstance(dist, dict)]
    return ", ".join(found) or "-"


def _shm(snap: Snapshot) -> str:
    value = snap.value("host.shm_total")
    return gib(value) if isinstance(value, (int, float)) else _shown(snap, "host.shm_total")


def _serving(snap: Snapshot) -> str:
    serving = snap.value("processes.serving")
    if not isinstance(serving, list):
        return "?"
    live = [r for r in serving if isinstance(r, dict) and r.get("state") not in ("Z", "X")]
    return str(len(live))


# (label, the paths it covers for "differs" bookkeeping, reader)
FACT_ROWS: Tuple[Tuple[str, Tuple[str, ...], Callable[[Snapshot], str]], ...] = (
    ("OS", ("host.os",), lambda s: _shown(s, "host.os")),
    ("driver", ("driver.version",), lambda s: _shown(s, "driver.version")),
    ("driver max CUDA", ("driver.cuda_max",), lambda s: _shown(s, "driver.cuda_max")),
    ("GPUs (visible)", ("gpu.count",), _gpus),
    ("Python", ("python.version",), lambda s: _shown(s, "python.version")),
    ("torch", ("torch.version", "torch.cuda"), _torch),
    ("CUDA toolkit", ("cuda.home",), _toolkit),
    ("vLLM", ("packages.dists.vllm",), _package("vllm")),
    ("flash-attn", tuple(f"packages.dists.{dist_key(n)}" for n in FLASH_ATTN), _flash_attn),
    ("NCCL (wheel)", ("nccl.version",) + tuple(f"packages.dists.nvidia-nccl-cu{v}" for v in (11, 12, 13)), _nccl),
    ("Ray", ("packages.dists.ray",), _package("ray")),
    ("/dev/shm", ("host.shm_total",), _shm),
    ("serving processes", ("processes.serving",), _serving),
)


def rows(result: ClusterResult) -> List[Row]:
    names = result.names
    snaps = {name: _node(result, name) for name in names}
    ok_names = [n for n in names if result.entry(n)["status"] == NODE_OK]
    out: List[Row] = []

    def cell(name: str, reader: Callable[[Snapshot], str]) -> str:
        if name not in ok_names:
            return ""
        try:
            return reader(snaps[name])
        except Exception as exc:  # a cell is decoration: never fail the report over one
            return f"({type(exc).__name__})"

    entries = {n: result.entry(n) for n in names}
    out.append(Row("status", {n: entries[n]["status"] for n in names}, any(e["status"] != NODE_OK for e in entries.values())))
    if any(e.get("head") for e in entries.values()):
        out.append(Row("role", {n: "head" if entries[n].get("head") else "worker" for n in names}, False))
    if any(e.get("address") for e in entries.values()):
        out.append(Row("address", {n: str(entries[n].get("address") or "") for n in names}, False))
    out.append(Row("gpudoctor", {n: str((entries[n].get("meta") or {}).get("gpudoctor") or "") if n in ok_names else "" for n in names},
                   _differs({n: str((entries[n].get("meta") or {}).get("gpudoctor") or "") for n in ok_names})))
    # A row the cross-node policy watches differs exactly when its spreads do (what the skew rules
    # GD902-GD904 judge: a value a node could not read is not a difference); other rows by their text.
    watched = {spread.path: spread for spread in result.spreads}
    covered = set()
    for label, paths, reader in FACT_ROWS:
        values = {n: cell(n, reader) for n in names}
        judged = [watched[path] for path in paths if path in watched]
        differs = any(s.differs for s in judged) if judged else _differs({n: values[n] for n in ok_names})
        out.append(Row(label, values, differs, paths[0]))
        covered.update(paths)
    for spread in result.spreads:
        if not spread.differs or spread.path in covered:
            continue
        values = {n: spread.values.get(n, "?" if n in ok_names else "") for n in names}
        out.append(Row(spread.label, values, True, spread.path))
    return out


def _differs(values: Dict[str, str]) -> bool:
    known = {v for v in values.values() if v not in ("?", "")}
    return len(known) > 1


def _node(result: ClusterResult, name: str) -> Snapshot:
    return node_snapshot(result.snapshot, name)


def _source(result: ClusterResult) -> str:
    value = result.snapshot.value(SOURCE_FACT)
    return str(value) if value else "?"


def _nodes_line(result: ClusterResult) -> str:
    states = Counter(e["status"] for e in result.entries)
    parts = [f"{states[s]} {s}" for s in ("ok", "unreachable", "timeout", "error") if states.get(s)]
    return f"{len(result.entries)} node{'s' * (len(result.entries) != 1)} via {_source(result)}: " + ", ".join(parts)


# --- terminal -----------------------------------------------------------------------------------
def _cut(text: str, width: int, unicode: bool) -> str:
    text = " ".join(str(text).split())
    if len(text) <= width:
        return text
    return text[: width - 1] + ("…" if unicode else "~")


def _table(result: ClusterResult, unicode: bool) -> List[Line]:
    table = rows(result)
    names = result.names
    mark, gone = ("≠ ", GONE) if unicode else ("* ", "-")
    label_width = min(LABEL_WIDTH, max(len(r.label) for r in table) + 2)
    widths = {n: min(CELL_WIDTH, max([len(n)] + [len(r.values.get(n, "")) for r in table])) for n in names}
    chunks: List[List[str]] = [[]]
    used = label_width + 2
    for name in names:
        if chunks[-1] and used + widths[name] + 2 > TABLE_WIDTH:
            chunks.append([])
            used = label_width + 2
        chunks[-1].append(name)
        used += widths[name] + 2
    lines: List[Line] = []
    for chunk in chunks:
        header = " " * (label_width + 2) + "  ".join(_cut(n, widths[n], unicode).ljust(widths[n]) for n in chunk)
        lines.append([(header.rstrip(), "bold")])
        for row in table:
            cells = []
            for name in chunk:
                text = row.values.get(name, "")
                if result.entry(name)["status"] != NODE_OK and row.label != "status" and row.label not in ("role", "address"):
                    text = gone
                cells.append(_cut(text or "-", widths[name], unicode).ljust(widths[name]))
            prefix = mark if row.differs else "  "
            lines.append([(prefix, "bold yellow" if row.differs else ""),
                          (_cut(row.label, label_width, unicode).ljust(label_width), "yellow" if row.differs else "dim"),
                          ("  ".join(cells).rstrip(), "yellow" if row.differs else "")])
        lines.append([])
    return lines


def build(result: ClusterResult, fail_on: str, verbose: bool = False, unicode: bool = True) -> List[Line]:
    glyphs = UNICODE if unicode else ASCII
    lines: List[Line] = [[(f"gpudoctor {__version__}", "bold"), (f"  cluster of {_nodes_line(result)}", "dim")], []]
    lines.extend(_table(result, unicode))
    cluster_outcomes = result.cluster.outcomes
    cluster_findings = result.cluster_findings
    state = area_state(cluster_outcomes, cluster_findings)
    lines.append([(f"{glyphs[state]} ", STYLES[state]), (f"{'Across nodes':<20}", "bold"), (area_counts(cluster_outcomes), "dim")])
    for finding in cluster_findings:
        lines.extend(finding_lines(finding, glyphs))
    if verbose:
        lines.extend(_quiet_outcomes(cluster_outcomes, glyphs))
    for name in result.names:
        entry = result.entry(name)
        role = " (head)" if entry.get("head") else ""
        if entry["status"] != NODE_OK:
            lines.append([(f"{glyphs['error']} ", STYLES["error"]), (f"Node {name}{role}", "bold"),
                          (f"  {entry['status']}: {entry.get('detail') or 'no detail'}", "")])
            continue
        node_result = result.per_node.get(name)
        findings = node_result.findings if node_result else []
        outcomes = node_result.outcomes if node_result else []
        state = area_state(outcomes, findings)
        lines.append([(f"{glyphs[state]} ", STYLES[state]), (f"Node {name}{role}", "bold"),
                      (f"  {context(node_result.snapshot) if node_result else ''}", "dim"), (f"  {area_counts(outcomes)}", "dim")])
        for finding in findings:
            area = AREA_TITLES.get(finding.area, finding.area)
            lines.extend(finding_lines(finding, glyphs))
            lines[-1] = lines[-1] + [(f"  ({area})", "dim")]
        if verbose:
            lines.extend(_quiet_outcomes(outcomes, glyphs))
    lines.append([])
    # the notes and the areas not checked, then the summary: its verdict stays the last line
    for note in result.notes:
        lines.append([(f"{glyphs['warning']} ", STYLES["warning"]), (note, "bold")])
    for number, text in enumerate(summary_lines(result.outcomes, fail_on)):
        lines.append([(f"{glyphs[UNKNOWN]} " if number == 0 else "", STYLES[UNKNOWN]), (text, "" if number else "bold")])
    lines.append(_summary(result, fail_on))
    return lines


def _quiet_outcomes(outcomes, glyphs) -> List[Line]:
    out: List[Line] = []
    for outcome in outcomes:
        if outcome.status in (UNKNOWN, NOT_APPLICABLE):
            out.append([(f"    {glyphs[outcome.status]} {outcome.rule.id} {outcome.rule.name}: ", STYLES[outcome.status]),
                        (f"{outcome.status.replace('_', ' ')}: {outcome.reason}", "dim")])
    return out


def _summary(result: ClusterResult, fail_on: str) -> Line:
    from gpudoctor import verdict as judged

    verdict = judged.of(result, fail_on)
    ok_nodes = sum(e["status"] == NODE_OK for e in result.entries)
    parts = [f"{ok_nodes}/{len(result.entries)} nodes answered"] + verdict.count_parts()
    return [("Summary: ", "bold"), (", ".join(parts), ""), (f" — {verdict.sentence}", "bold red" if verdict.gated else "bold green")]


# --- Markdown -----------------------------------------------------------------------------------
def _md(text: Any) -> str:
    return str(text).replace("|", "/").replace("\n", " ")


def _md_findings(findings, out: List[str], heading: str = "####") -> None:
    from gpudoctor.render.markdown import finding_lines

    for finding in findings:
        out.extend(finding_lines(finding, heading))


def markdown(result: ClusterResult, fail_on: str = "error", redactor: Any = None) -> str:
    """GitHub-ready Markdown of a whole cluster: verdict, matrix, findings across and per node."""
    from gpudoctor.redact import DEFAULT

    from gpudoctor import verdict as judged

    verdict = judged.of(result, fail_on)
    out: List[str] = [f"## gpudoctor {__version__}: cluster", "", f"_{_md(_nodes_line(result))}_", ""]
    out.append(f"{verdict.title}: {', '.join(verdict.count_parts())} (exit {int(verdict.exit_code)} with --fail-on {fail_on}).")
    out.append("")
    for note in result.notes:
        out += [f"> **Warning:** {note}", ""]
    if verdict.gaps:
        out.append("**Not checked**" + ("" if fail_on == UNKNOWN else " (`--fail-on unknown` makes this exit 1)") + ":")
        out.append("")
        for gap in verdict.gaps:
            out.append(f"- **{gap.title}**: {gap.count} rule{'s' * (gap.count != 1)} undecided: {_md(gap.line())}")
        out.append("")
    names = result.names
    out.append("| | " + " | ".join(_md(n) for n in names) + " |")
    out.append("| --- |" + " --- |" * len(names))
    for row in rows(result):
        label = f"**≠ {_md(row.label)}**" if row.differs else _md(row.label)
        cells = []
        for name in names:
            text = row.values.get(name, "")
            if result.entry(name)["status"] != NODE_OK and row.label not in ("status", "role", "address"):
                text = GONE
            cells.append(_md(text) or "-")
        out.append(f"| {label} | " + " | ".join(cells) + " |")
    out.append("")
    out.append("### Across nodes")
    out.append("")
    if result.cluster_findings:
        _md_findings(result.cluster_findings, out)
    else:
        out.extend(["No cross-node finding.", ""])
    for name in names:
        entry = result.entry(name)
        role = " (head)" if entry.get("head") else ""
        out.append(f"### Node {_md(name)}{role}")
        out.append("")
        if entry["status"] != NODE_OK:
            out.extend([f"**{entry['status']}**: {entry.get('detail') or 'no detail'}", ""])
            continue
        node_result = result.per_node.get(name)
        if node_result is not None:
            out.extend([f"_{_md(context(node_result.snapshot))}_", ""])
        findings = node_result.findings if node_result else []
        if findings:
            _md_findings(findings, out)
        else:
            out.extend(["No finding.", ""])
    out.append("_Every node's facts: `gpudoctor cluster --format json` (member `snapshot`)._")
    return (redactor or DEFAULT)("\n".join(out) + "\n")


def write_text(result: ClusterResult, fail_on: str, verbose: bool, unicode: bool, stream, color: bool, redactor=None) -> None:
    from gpudoctor.render.text import write

    write(build(result, fail_on, verbose, unicode), stream, color, redactor)


__all__: Sequence[str] = ("Row", "rows", "build", "markdown", "write_text")
