"""One verdict for every command (issue 28): five places where two commands, or two paths of one
command, gave the user different answers about the same snapshot. Each test ran red before the fix.

Snapshots are the ones recorded on real H200 machines (tests/fixtures/snapshots).
"""

from __future__ import annotations

import io
import json
import xml.etree.ElementTree as ET
from pathlib import Path

from gpudoctor.cli import main

SNAPSHOTS = Path(__file__).resolve().parent / "fixtures" / "snapshots"
H200 = str(SNAPSHOTS / "h200.json")
H200X2 = str(SNAPSHOTS / "h200x2.json")


def cli(*argv: str):
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), environ={"NO_COLOR": "1"}, stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def llama(tmp_path: Path) -> Path:
    model = tmp_path / "llama"
    model.mkdir()
    config = {"architectures": ["LlamaForCausalLM"], "max_position_embeddings": 8192, "num_attention_heads": 32,
              "num_key_value_heads": 8, "hidden_size": 4096, "num_hidden_layers": 32, "torch_dtype": "bfloat16",
              "vocab_size": 128256}
    (model / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return model


# (a) check of several snapshots printed the text matrix whatever --format said
def test_several_snapshots_junit_is_junit_xml():
    code, out, err = cli("check", "--snapshot", H200, "--snapshot", H200X2, "--format", "junit", "--fail-on", "warning")
    root = ET.fromstring(out)  # raises on the text matrix
    assert root.tag == "testsuites"
    suites = [s.get("name") for s in root.iter("testsuite")]
    assert any("h200x2" in (name or "") for name in suites), suites
    failures = int(root.get("failures"))
    assert (failures > 0) == (code == 1)


def test_several_snapshots_github_is_workflow_commands():
    code, out, err = cli("check", "--snapshot", H200, "--snapshot", H200X2, "--format", "github")
    lines = out.splitlines()
    assert lines and all(line.startswith("::") for line in lines[:-1]), out[:400]
    assert "exit " in lines[-1]


# (b) --fail-on unknown was dropped for several snapshots: exit 0 with undecided rules
def test_fail_on_unknown_gates_several_snapshots_as_it_gates_one():
    one, _, _ = cli("check", "--snapshot", H200, "--fail-on", "unknown")
    two, out, _ = cli("check", "--snapshot", H200, "--snapshot", H200, "--fail-on", "unknown")
    assert one == 1
    assert two == 1
    assert "nothing blocking" not in out
    code, out, _ = cli("check", "--snapshot", H200, "--snapshot", H200, "--fail-on", "unknown", "--format", "json")
    assert code == 1 and json.loads(out)["blocking"] is True


# (c) report --fail-on unknown wrote "Nothing blocking" and exited 1
def test_report_says_what_its_exit_code_says():
    code, out, _ = cli("report", "--snapshot", H200, "--fail-on", "unknown")
    assert code == 1
    assert "Nothing blocking" not in out
    code, out, _ = cli("report", "--snapshot", H200)
    assert code == 0 and "Nothing blocking" in out


# (d) explain --launch skipped the command's NAME=value assignments that preflight lays over the env
def test_explain_launch_and_preflight_agree_on_one_command(tmp_path):
    command = f"CUDA_VISIBLE_DEVICES=0 vllm serve {llama(tmp_path)} --tensor-parallel-size 2"
    code, out, _ = cli("preflight", "--snapshot", H200X2, "--format", "json", "--select", "GD705", "--", *command.split())
    (preflight,) = [o for o in json.loads(out)["outcomes"] if o["id"] == "GD705"]
    assert preflight["status"] == "fail" and code == 1
    code, out, _ = cli("explain", "RuntimeError: CUDA error: invalid device ordinal", "--snapshot", H200X2,
                       "--launch", command, "--format", "json")
    (match,) = json.loads(out)["matches"]
    checks = {c["rule"]: c["kind"] for c in match["confirmation"]["checks"]}
    assert checks.get("GD705") == "confirmed", match["confirmation"]


# (e) compare listed a rule going pass -> error, then said "none that matters: exit 0"
def test_compare_leads_with_rule_regressions_and_exits_1_on_them():
    code, out, _ = cli("compare", str(SNAPSHOTS / "h200-after-fix.json"), str(SNAPSHOTS / "h200-stale-engine.json"))
    assert code == 1
    body = out.split("\n\n", 1)[1]
    assert body.startswith("Rule regressions"), out
    assert "GD601 stale-serving-process: pass -> error" in body.split("\n\n", 1)[0]
    assert "none that matters" not in out
    # the other way round the same rule is fixed: an improvement, not a reason to fail
    code, out, _ = cli("compare", str(SNAPSHOTS / "h200-stale-engine.json"), str(SNAPSHOTS / "h200-after-fix.json"))
    assert "GD601 stale-serving-process: error -> pass" in out
    assert "Rule regressions" not in out


def test_compare_json_carries_the_regressions():
    code, out, _ = cli("compare", str(SNAPSHOTS / "h200-after-fix.json"), str(SNAPSHOTS / "h200-stale-engine.json"), "--format", "json")
    doc = json.loads(out)
    assert code == 1
    assert [r["id"] for r in doc["regressions"]] == ["GD601"]


def test_compare_leaves_gpudoctors_own_bookkeeping_out():
    """Scan timings inside kernels.binaries, RECORD-check counts and sys.path are gpudoctor's own
    bookkeeping, not the machine: the same machine before and after a stale engine is no 'difference'."""
    code, out, _ = cli("compare", str(SNAPSHOTS / "h200-full.json"), str(SNAPSHOTS / "h200-stale-engine.json"))
    differences = out.split("Rule regressions", 1)[0] + out.split("Other differences", 1)[-1].split("\n\n", 1)[0]
    for bookkeeping in ("kernels.binaries", ".checked", "python.sys_path", "elapsed"):
        assert bookkeeping not in differences, (bookkeeping, out)
    assert code == 1  # GD601 pass -> error (and GD302 pass -> warning)
