"""Gates never pass silently: undecided areas show `?`, are named without -v, and --fail-on unknown fails on them."""

import json
import os
import subprocess
import sys
from pathlib import Path

from markdown_it import MarkdownIt

REPO = Path(__file__).resolve().parent.parent
H200 = str(REPO / "tests" / "fixtures" / "snapshots" / "h200-full.json")
# The README's CI recipe, with two typos in it, on a runner where vLLM is not installed.
RECIPE = ["vllm", "serve", "Qwen/Qwen3-8B", "--gpu-memory-utilizaton", "0.95", "--tool-call-parser", "qwen3_coderr"]


def gd(*args):
    # PATH without a vllm executable and an interpreter without vllm: the CI runner of the recipe
    environ = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "TERM", "FORCE_COLOR")}
    environ.update(PATH=os.path.dirname(sys.executable) + os.pathsep + "/usr/bin:/bin", PYTHONIOENCODING="utf-8",
                   PYTHONPATH=str(REPO), GPUDOCTOR_HUB="0")  # never the real Hub
    proc = subprocess.run([sys.executable, "-m", "gpudoctor", *args], capture_output=True, text=True, encoding="utf-8",
                          env=environ, cwd=str(REPO), stdin=subprocess.DEVNULL, timeout=120)
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    return proc


def test_ci_recipe_without_vllm_fails_with_fail_on_unknown_and_names_what_was_not_checked():
    proc = gd("preflight", "--snapshot", H200, "--format", "markdown", "--fail-on", "unknown", "--", *RECIPE)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    out = proc.stdout
    assert "**Blocking findings**" in out
    assert "flags, values and parser names were NOT checked" in out  # loud, and says how to make it check
    assert "--python /path/to/venv/bin/python" in out
    not_checked = out[out.index("**Not checked**"):].split("\n\n")[1]
    assert "**Launch command**" in not_checked and "GD702" in not_checked
    assert "| ? | Launch command |" in out and "| ✓ | Launch command |" not in out
    tokens = MarkdownIt("commonmark").enable("table").parse(out)
    assert any(t.type == "table_open" for t in tokens) and any(t.type == "blockquote_open" for t in tokens)


def test_ci_recipe_default_gate_exits_0_but_says_so_loudly_in_text():
    proc = gd("preflight", "--snapshot", H200, "--color", "never", "--", *RECIPE)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    launch = next(line for line in lines if "Launch command" in line and "vllm serve" in line)
    assert launch.startswith("? "), launch  # never a ✓ on an area whose rules could not decide
    summary = lines.index(next(line for line in lines if line.startswith("Summary: ")))
    below = "\n".join(lines[summary:])
    # 9 launch rules (GD708 too, since what an uninstalled vLLM does with GPU memory is not known: issue 27),
    # and GD508: this snapshot predates torch.extensions (not collected)
    assert "10 unknown" in lines[summary] and "nothing blocking: exit 0" in lines[summary]
    assert "NOT checked" in below and "Not checked (--fail-on unknown makes this exit 1):" in below
    assert "Launch command: 9 rules undecided:" in below


def test_json_lists_not_checked_areas_and_the_gate():
    proc = gd("preflight", "--snapshot", H200, "--format", "json", "--fail-on", "unknown", "--", *RECIPE)
    doc = json.loads(proc.stdout)
    assert proc.returncode == 1 and doc["blocking"] is True
    gap = next(g for g in doc["not_checked"] if g["area"] == "launch")
    assert gap["count"] == sum(len(r["rules"]) for r in gap["reasons"])
    assert doc["summary"]["unknown"] == sum(g["count"] for g in doc["not_checked"])  # GD508 too: torch.extensions not collected
    assert any("vLLM is not installed" in n for n in doc["notes"])


def test_verbose_lists_not_applicable_rules_as_one_line_per_area():
    proc = gd("check", "--snapshot", H200, "-v", "--color", "never")
    na_lines = [line for line in proc.stdout.splitlines() if "not applicable" in line]
    assert 1 <= len(na_lines) <= 10, na_lines  # was one line per rule: 40 on a healthy H200
    launch = next(line for line in na_lines if "no launch command" in line)
    assert launch.lstrip().startswith("- 24 not applicable:"), launch  # GD701-GD724


def test_area_state_prefers_unknown_over_pass():
    from gpudoctor.render.text import area_state
    from gpudoctor.rule import PASS, UNKNOWN, Outcome, RuleMeta

    meta = RuleMeta("GD999", "x", "error", "launch", (), lambda s: None, "")
    assert area_state([Outcome(meta, PASS), Outcome(meta, UNKNOWN, reason="r")]) == UNKNOWN
    assert area_state([Outcome(meta, PASS)]) == PASS
