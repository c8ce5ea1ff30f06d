"""CI formats: JUnit XML a JUnit parser reads, with the right counts; GitHub workflow annotations."""

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from gpudoctor import registry

REPO = Path(__file__).resolve().parent.parent
SNAPSHOTS = REPO / "tests" / "fixtures" / "snapshots"
STALE = str(SNAPSHOTS / "h200-stale-engine.json")  # GD601 error, GD302 warning, 5 unknown


def gd(*args):
    environ = dict(os.environ, PYTHONIOENCODING="utf-8", PYTHONPATH=str(REPO), GPUDOCTOR_HUB="0")  # never the real Hub
    proc = subprocess.run([sys.executable, "-m", "gpudoctor", *args], capture_output=True, text=True, encoding="utf-8",
                          env=environ, cwd=str(REPO), stdin=subprocess.DEVNULL, timeout=120)
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    return proc


def cases(root):
    return {case.get("name").split()[0]: case for case in root.iter("testcase")}


def test_junit_one_case_per_rule_failures_carry_message_and_fix():
    proc = gd("check", "--snapshot", STALE, "--format", "junit")
    assert proc.returncode == 1
    root = ET.fromstring(proc.stdout)
    suite = root.find("testsuite")
    by_id = cases(root)
    assert sorted(by_id) == [m.id for m in registry.load_rules()]  # one test case per rule
    failures = [c for c in root.iter("testcase") if c.find("failure") is not None]
    skipped = [c for c in root.iter("testcase") if c.find("skipped") is not None]
    assert [c.get("name") for c in failures] == ["GD601 stale-serving-process"]  # the warning does not fail the gate
    assert suite.get("tests") == str(len(by_id)) and suite.get("failures") == "1" and suite.get("errors") == "0"
    assert suite.get("skipped") == str(len(skipped)) and root.get("failures") == "1"
    failure = by_id["GD601"].find("failure")
    assert failure.get("type") == "error" and "stale vLLM engine core" in failure.get("message")
    assert "fix: Stop the stale processes" in failure.text and "$ kill -TERM 1147" in failure.text
    assert "GD302 gpu-memory-in-use" in by_id["GD302"].get("name") and "already in use" in by_id["GD302"].find("system-out").text
    assert by_id["GD401"].find("skipped").get("message").startswith("could not decide: needs flash_attn.variants")
    assert by_id["GD101"].get("classname") == "gpudoctor.driver" and len(by_id["GD101"]) == 0  # passed


def test_junit_counts_follow_the_gate():
    root = ET.fromstring(gd("check", "--snapshot", STALE, "--format", "junit", "--fail-on", "warning").stdout)
    assert root.get("failures") == "2"
    proc = gd("check", "--snapshot", STALE, "--format", "junit", "--fail-on", "unknown")
    root = ET.fromstring(proc.stdout)
    unknown = [c for c in root.iter("testcase") if c.find("failure") is not None and c.find("failure").get("type") == "unknown"]
    # GD508 among them: this snapshot predates torch.extensions (not collected)
    assert len(unknown) == 6 and root.get("failures") == "8" and proc.returncode == 1


def test_junit_from_preflight_parses(tmp_path):
    proc = gd("preflight", "--snapshot", STALE, "--format", "junit", "--", "vllm", "serve", "m", "--bogus-flag")
    root = ET.fromstring(proc.stdout)
    assert root.find("testsuite").get("name") == "gpudoctor preflight"


def test_github_annotations():
    proc = gd("check", "--snapshot", STALE, "--format", "github")
    lines = proc.stdout.splitlines()
    assert proc.returncode == 1
    error = next(line for line in lines if line.startswith("::error "))
    assert error.startswith("::error file=") and "title=GD601 stale-serving-process [PID 1147]::" in error
    assert "%0Afix: Stop the stale processes" in error and "\n" not in error
    assert any(line.startswith("::warning ") and "GD302" in line for line in lines)
    assert any(line.startswith("::notice ") and "flash-attn%3A not checked" in line for line in lines)
    assert lines[-1].startswith("Summary: 1 error, 1 warning")


def test_github_notice_counts_one_rule_in_the_singular():
    """issue 31: `--format github` printed "1 rules could not decide"."""
    lines = gd("check", "--snapshot", STALE, "--format", "github").stdout.splitlines()
    notices = [line for line in lines if line.startswith("::notice ")]
    assert any("::1 rule could not decide: " in line for line in notices), notices
    assert not any("::1 rules " in line for line in notices)
    assert any("::5 rules could not decide: " in line for line in notices), notices


def test_github_annotation_escaping():
    from gpudoctor.render.ci import _data, _prop

    assert _data("50% a\nb\r") == "50%25 a%0Ab%0D"
    assert _prop("a:b,c") == "a%3Ab%2Cc"
