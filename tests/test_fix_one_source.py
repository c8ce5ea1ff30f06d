"""Issue 29: every stack finding's fix text and the action behind it are one thing.

Every failing case of every area's table (tests/cases/) is run; for each finding that carries a
typed stack action (gpudoctor/actions.py ``StackAction``), the command the user reads under "fix:"
(the text renderer's ``$`` line, and ``fix.commands`` in JSON) must split, as a shell splits it
(a trailing ``# comment`` is the shell's to drop), into exactly the argv ``gpudoctor fix`` runs,
name the checked environment's own interpreter, and be a stack rule's. The rules
with stack actions are listed here and checked both ways against the tables: a rule that starts
carrying actions, or one that stops, changes this list.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any, Dict, List, Tuple

from cases import all_cases, run

from gpudoctor.actions import StackAction
from gpudoctor.render.text import ASCII, finding_lines, plain
from gpudoctor.snapshot import Snapshot

# GD401 uninstalls flash-attn-4 the GPU cannot use; GD501 installs torch for the GPU; GD503 installs an
# engine's missing or other-version requirements; GD508 replaces an extension built for another torch;
# GD510 aligns torch (and vLLM's other binary pins) with vLLM's pins
STACK_RULES = {"GD401", "GD501", "GD503", "GD508", "GD510"}


def stack_findings(tmp_path: Path) -> List[Tuple[str, Any, Snapshot]]:
    found = []
    for number, case in enumerate(c for c in all_cases() if c.status == "fail"):
        where = tmp_path / str(number)
        where.mkdir()
        data = case.build(where)
        snapshot = data if isinstance(data, Snapshot) else Snapshot.from_json(data)
        for finding in run(case.rule, snapshot).findings:
            if finding.fix and any(isinstance(a, StackAction) for a in finding.fix.actions):
                found.append((f"{case.rule} {case.name}", finding, snapshot))
    return found


def test_every_stack_actions_command_is_the_command_its_finding_shows(tmp_path):
    found = stack_findings(tmp_path)
    rules: Dict[str, int] = {}
    for label, finding, snapshot in found:
        shown = plain(finding_lines(finding, ASCII))
        as_json = finding.to_json()["fix"]
        for action in (a for a in finding.fix.actions if isinstance(a, StackAction)):
            same = [c for c in finding.fix.commands if shlex.split(c, comments=True) == action.argv]
            assert same, f"{label}: the action runs {action.argv}, the finding shows {finding.fix.commands}"
            assert f"        $ {same[0]}" in shown.splitlines(), f"{label}: not rendered as shown in JSON"
            assert action.command in [a["command"] for a in as_json["actions"]] and same[0] in as_json["commands"]
            assert action.python == snapshot.value("python.executable"), label  # the checked environment's own pip
            assert action.rule in STACK_RULES, label  # GD510's no-deps cause carries GD503's action: one cause, one action
            assert action.argv[1:3] == ["-m", "pip"] and action.argv[3] in ("install", "uninstall"), label
            rules[finding.rule_id] = rules.get(finding.rule_id, 0) + 1
    assert set(rules) == STACK_RULES, f"rules with stack actions in the case tables: {sorted(rules)}"
    assert sum(rules.values()) >= 12, rules  # every case that plans a change, not one per rule


def test_the_check_above_can_fail():
    """A finding whose shown command differs from its action's argv by one word is caught."""
    action = StackAction("install", "lark", "1.2.1", "/v/bin/python", "GD503", "why", ("lark==1.2.2",))
    assert shlex.split(f"{action.command}  # keeps vllm", comments=True) == action.argv
    assert shlex.split("/v/bin/python -m pip install lark==1.2.1", comments=True) != action.argv
    assert shlex.split("/v/bin/python -m pip install -U lark==1.2.2", comments=True) != action.argv
