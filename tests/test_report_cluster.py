"""`gpudoctor report` for a cluster: one report covering every node (issue 9, the Slurm/ssh path)."""

import io
import json
import os
import stat
from pathlib import Path

from gpudoctor.cli import main

SNAPSHOTS = Path(__file__).parent / "fixtures" / "snapshots"


def _report(*args):
    out, err = io.StringIO(), io.StringIO()
    code = main(["report", *args], {}, out, err)
    return code, out.getvalue(), err.getvalue()


def test_one_markdown_report_covers_every_node():
    code, text, err = _report("--snapshot", str(SNAPSHOTS / "h200.json"), "--snapshot", str(SNAPSHOTS / "a100.json"))
    assert code == 1, err  # the A100 node's driver is too old for its torch (GD103): blocking
    assert "| | h200 | a100 |" in text
    assert "GD905 cluster-gpu-models-differ" in text and "GD902 cluster-driver-skew" in text
    assert "GD103" in text  # a single-node rule, reported for its node
    assert "<details><summary>cluster snapshot.json</summary>" in text


def test_json_and_owner_only_file(tmp_path):
    target = tmp_path / "cluster.json"
    code, _, err = _report("--snapshot", str(SNAPSHOTS / "h200.json"), "--snapshot", str(SNAPSHOTS / "h200x2.json"),
                           "--format", "json", "-o", str(target))
    assert code == 0, err
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o600
    doc = json.loads(target.read_text())
    assert doc["blocking"] is False
    assert {node["name"] for node in doc["nodes"]} == {"h200", "h200x2"}


def test_log_and_bundle_are_for_one_machine():
    code, _, err = _report("--snapshot", str(SNAPSHOTS / "h200.json"), "--snapshot", str(SNAPSHOTS / "a100.json"), "--bundle")
    assert code == 2 and "one machine" in err
