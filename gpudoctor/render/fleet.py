"""A large cluster's terminal report: the differences per fact and the nodes grouped, odd ones named.

The matrix (gpudoctor/render/matrix.py, one column per node) is unreadable past a dozen nodes:
with 256, the three odd nodes were not named in its first 40 lines. Here the first screen is
the differences, fact by fact, each value with its nodes ("driver 580.95.05 on 250 nodes;
570.86.15 on node017, node044"); then the nodes grouped by their whole stack (every row of the
matrix) and their findings ("252 nodes: identical, 0 findings"), each group's findings shown
once; the nodes that did not answer are named with their reason. The rows, the verdict and the
summary are the matrix's own, so both views say the same thing.
"""

from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

from gpudoctor import __version__
from gpudoctor.cluster import NODE_OK
from gpudoctor.engine import ClusterResult
from gpudoctor.gates import summary_lines
from gpudoctor.render.headlines import context
from gpudoctor.render.matrix import _nodes_line, _quiet_outcomes, _summary
from gpudoctor.render.text import ASCII, STYLES, UNICODE, Line, area_counts, area_state, finding_lines
from gpudoctor.rule import AREA_TITLES, UNKNOWN

NAMES_SHOWN = 8  # nodes named per value or group before "+N more"
MATRIX_UP_TO = 12  # more nodes than this: this view (the matrix fits a screen in a few column blocks)
PER_NODE_ROWS = ("status", "role", "address")  # identify a node, not its stack


def _named(names: Sequence[str], limit: int = NAMES_SHOWN) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" +{len(names) - limit} more" if len(names) > limit else "")


def _spread(values: Dict[str, str]) -> List[Tuple[str, List[str]]]:
    """value -> the nodes holding it, the most common value first (then by first node)."""
    by_value: Dict[str, List[str]] = {}
    for name, value in values.items():
        by_value.setdefault(value or "-", []).append(name)
    return sorted(by_value.items(), key=lambda item: (-len(item[1]), item[1][0]))


def _difference_line(label: str, values: Dict[str, str], mark: str) -> Line:
    groups = _spread(values)
    parts = []
    for number, (value, names) in enumerate(groups):
        where = f"on {len(names)} nodes" if number == 0 and len(names) > 1 else f"on {_named(names)}"
        parts.append(f"{value} {where}")
    return [(mark, "bold yellow"), (f"{label:<20}", "yellow"), ("; ".join(parts), "yellow")]


def _finding_key(finding) -> Tuple[str, str, str, str]:
    return (finding.rule_id, finding.severity, finding.subject, finding.message)


def groups(result: ClusterResult, table) -> List[Tuple[List[str], tuple]]:
    """The answering nodes grouped by their stack (every matrix row but the per-node ones) and
    their findings, the largest group first."""
    stack_rows = [row for row in table if row.label not in PER_NODE_ROWS]
    by_key: Dict[tuple, List[str]] = {}
    for name in result.names:
        if result.entry(name)["status"] != NODE_OK:
            continue
        node_result = result.per_node.get(name)
        findings = tuple(sorted(_finding_key(f) for f in node_result.findings)) if node_result else ()
        key = (tuple(row.values.get(name, "") for row in stack_rows), findings)
        by_key.setdefault(key, []).append(name)
    return sorted(((names, key) for key, names in by_key.items()), key=lambda item: (-len(item[0]), item[0][0]))


def write_text(result: ClusterResult, fail_on: str, verbose: bool, unicode: bool, stream, color: bool, redactor=None) -> None:
    """The cluster's terminal report: the matrix up to MATRIX_UP_TO nodes, this grouped view past it."""
    from gpudoctor.render import matrix
    from gpudoctor.render.text import write

    if len(result.entries) <= MATRIX_UP_TO:
        matrix.write_text(result, fail_on, verbose, unicode, stream, color, redactor)
        return
    write(build(result, fail_on, matrix.rows(result), verbose, unicode), stream, color, redactor)


def build(result: ClusterResult, fail_on: str, table, verbose: bool = False, unicode: bool = True) -> List[Line]:
    """The grouped report; ``table``: the matrix rows (gpudoctor.render.matrix.rows)."""
    glyphs = UNICODE if unicode else ASCII
    mark = "≠ " if unicode else "* "
    lines: List[Line] = [[(f"gpudoctor {__version__}", "bold"), (f"  cluster of {_nodes_line(result)}", "dim")], []]
    down = [name for name in result.names if result.entry(name)["status"] != NODE_OK]
    for name in down:
        entry = result.entry(name)
        lines.append([(f"{glyphs['error']} ", STYLES["error"]), (f"Node {name}", "bold"),
                      (f"  {entry['status']}: {entry.get('detail') or 'no detail'}", "")])
    ok_names = [n for n in result.names if n not in set(down)]
    differing = [row for row in table if row.label not in PER_NODE_ROWS and row.differs]
    if differing:
        lines.append([("Differences", "bold"), (f"  ({len(differing)} of {len(table)} facts differ across {len(ok_names)} answering nodes)", "dim")])
        for row in differing:
            lines.append(_difference_line(row.label, {n: row.values.get(n, "") for n in ok_names}, mark))
    same = [row for row in table if row.label not in PER_NODE_ROWS and not row.differs and ok_names]
    if same:
        text = "; ".join(f"{row.label} {row.values.get(ok_names[0]) or '-'}" for row in same)
        lines.append([("  ", ""), ("Same on every node: ", "dim"), (text, "dim")])
    lines.append([])
    cluster_outcomes, cluster_findings = result.cluster.outcomes, result.cluster_findings
    state = area_state(cluster_outcomes, cluster_findings)
    lines.append([(f"{glyphs[state]} ", STYLES[state]), (f"{'Across nodes':<20}", "bold"), (area_counts(cluster_outcomes), "dim")])
    for finding in cluster_findings:
        lines.extend(finding_lines(finding, glyphs))
    if verbose:
        lines.extend(_quiet_outcomes(cluster_outcomes, glyphs))
    lines.extend(_group_lines(result, table, differing, glyphs, verbose))
    lines.append([])
    for note in result.notes:
        lines.append([(f"{glyphs['warning']} ", STYLES["warning"]), (note, "bold")])
    for number, text in enumerate(summary_lines(result.outcomes, fail_on)):
        lines.append([(f"{glyphs[UNKNOWN]} " if number == 0 else "", STYLES[UNKNOWN]), (text, "" if number else "bold")])
    lines.append(_summary(result, fail_on))
    return lines


def _group_lines(result: ClusterResult, table, differing, glyphs, verbose: bool) -> List[Line]:
    lines: List[Line] = []
    grouped = groups(result, table)
    majority = grouped[0][0] if grouped else []
    for names, _ in grouped:
        node_result = result.per_node.get(names[0])  # every node of a group has the same findings
        findings = node_result.findings if node_result else []
        outcomes = node_result.outcomes if node_result else []
        state = area_state(outcomes, findings)
        count = f"{len(names)} node{'s' * (len(names) != 1)}"
        # What sets the group apart: its values of the differing facts where the largest group's differ.
        apart = [f"{row.label} {row.values.get(names[0]) or '-'}" for row in differing
                 if majority and row.values.get(names[0]) != row.values.get(majority[0])]
        if len(grouped) == 1:
            what = "identical"
        elif names is majority:
            what = "the most common stack"
        else:
            what = "; ".join(apart) or "same stack, other findings"
        lines.append([(f"{glyphs[state]} ", STYLES[state]),
                      (f"{count}: {what}, {len(findings)} finding{'s' * (len(findings) != 1)}", "bold"),
                      (f"  {_named(names)}", "dim"),
                      (f"  {context(node_result.snapshot) if node_result else ''}", "dim")])
        for finding in findings:
            area = AREA_TITLES.get(finding.area, finding.area)
            lines.extend(finding_lines(finding, glyphs))
            lines[-1] = lines[-1] + [(f"  ({area})", "dim")]
        if verbose:
            lines.extend(_quiet_outcomes(outcomes, glyphs))
    return lines
