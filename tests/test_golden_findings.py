"""Every fail case's findings, rendered as `check` prints them, against tests/golden/findings.txt.

The case table (tests/cases) says what a finding must contain; this says what it looks like, whole:
message, evidence lines, fix commands, as ruff snapshots each rule's diagnostics. A change to a
rule's words, a renderer or a value formatter shows here as a diff to read. After a change that is
meant, refresh the file with

    GPUDOCTOR_UPDATE_GOLDEN=1 python -m pytest -n 0 tests/test_golden_findings.py

and review the diff. Temporary directories a case builds its machine in are written <tmp>; for that
the evidence is neither wrapped nor clipped here (a path cut in two, or cut where the temporary
directory's length puts the cut, could not be replaced).
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import List

from cases import all_cases, run
from gpudoctor.render.text import ASCII, finding_lines, plain
from gpudoctor.snapshot import Snapshot

GOLDEN = Path(__file__).resolve().parent / "golden" / "findings.txt"
HEADER = ("# Every fail case's findings as `gpudoctor check` renders them (tests/test_golden_findings.py).\n"
          "# Refresh: GPUDOCTOR_UPDATE_GOLDEN=1 python -m pytest -n 0 tests/test_golden_findings.py\n")


def recorded_pythons() -> set:
    found = set()
    for path in (Path(__file__).resolve().parent / "fixtures" / "snapshots").glob("*.json"):
        fact = json.loads(path.read_text(encoding="utf-8")).get("facts", {}).get("python.executable")
        if isinstance(fact, dict) and isinstance(fact.get("value"), str):
            found.add(fact["value"])
    return found


def rendered(tmp_path: Path) -> str:
    from gpudoctor.render import values

    unwrapped, values.wrap = values.wrap, lambda text, width=100: [text]
    clipped, values._clip = values._clip, lambda text, limit=0: text
    try:
        return _rendered(tmp_path)
    finally:
        values.wrap, values._clip = unwrapped, clipped


def _rendered(tmp_path: Path) -> str:
    blocks: List[str] = [HEADER]
    for number, case in enumerate(c for c in all_cases() if c.status == "fail"):
        where = tmp_path / f"case{number}"
        where.mkdir()
        data = case.build(where)
        outcome = run(case.rule, data if isinstance(data, Snapshot) else Snapshot.from_json(data))
        text = "".join(plain(finding_lines(finding, ASCII)) for finding in outcome.findings)
        blocks.append(f"\n## {case.rule} {case.name}\n" + text.replace(str(where), "<tmp>"))
    # Directories other case modules make once per run (tempfile.mkdtemp: /tmp/gpudoctor-launch-cases-x1y2z3ab).
    text = "".join(blocks)
    # Interpreters named in fix commands: the test's own, and the recorded machines' (the H200's
    # /opt/torch/.venv/bin/python3, which is also the test's own when the suite runs there).
    for python in sorted({sys.executable, os.path.realpath(sys.executable), *recorded_pythons()}, key=len, reverse=True):
        text = text.replace(python, "<python>")
    text = re.sub(re.escape(tempfile.gettempdir()) + r"/[^/\s,\]\)\}']+", "<tmp>", text)
    for pattern, replacement in LIVE:
        text = re.sub(pattern, replacement, text)
    return text


# What a case takes from the machine at run time is written as a placeholder: the free port and the
# process id of a live listener or server (GD6xx, GD722, GD8xx), other serving processes the smoke
# check happens to see here, timings, and the commits of a git repository made by the test.
LIVE = (
    (r"(127\.0\.0\.1|localhost):\d+", r"\1:<port>"),
    (r"(--port |port |port=|sport = :)\d{4,5}\b", r"\1<port>"),
    (r"\b(PID |pid |pids=\[|inode=)\d+", r"\1<n>"),
    (r"; server processes on this machine: [^\n]*", ""),
    (r"\b(elapsed_s|seconds|took_s)=[\d.]+", r"\1=<s>"),
    (r"\b(deadline_s) = [\d.]+", r"\1 = <s>"),  # the time left of the smoke deadline when the long-context check began
    (r"\b[0-9a-f]{40}\b", "<commit>"),
)


def test_every_fail_case_renders_as_recorded(tmp_path):
    text = rendered(tmp_path)
    if os.environ.get("GPUDOCTOR_UPDATE_GOLDEN"):
        GOLDEN.write_text(text, encoding="utf-8")
    recorded = GOLDEN.read_text(encoding="utf-8") if GOLDEN.exists() else ""
    if text != recorded:
        import difflib

        diff = "".join(list(difflib.unified_diff(recorded.splitlines(True), text.splitlines(True), "recorded", "now"))[:200])
        raise AssertionError("the rendered findings differ from tests/golden/findings.txt "
                             "(GPUDOCTOR_UPDATE_GOLDEN=1 refreshes it after a change that is meant):\n" + diff)
