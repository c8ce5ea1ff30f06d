"""compare: distribution names compared as PEP 503 normalises them; facts one side did not collect are not differences."""

import json
import os
import subprocess
import sys
from pathlib import Path

from gpudoctor import compare
from gpudoctor.snapshot import Snapshot, dist_key

REPO = Path(__file__).resolve().parent.parent
SNAPSHOTS = REPO / "tests" / "fixtures" / "snapshots"


def gd(*args):
    proc = subprocess.run([sys.executable, "-m", "gpudoctor", *args], capture_output=True, text=True, encoding="utf-8",
                          env=dict(os.environ, PYTHONIOENCODING="utf-8"), cwd=str(REPO), timeout=120)
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    return proc


def test_two_h200_snapshots_from_different_gpudoctor_versions_have_no_difference_that_matters():
    proc = gd("compare", str(SNAPSHOTS / "h200-full.json"), str(SNAPSHOTS / "h200-stale-engine.json"), "--format", "json")
    doc = json.loads(proc.stdout)
    assert doc["matters"] == []  # was 10, all "absent -> (not collected)"
    # exit 1 all the same: B has a stale engine (GD601 pass -> error), a rule regression (issue 28)
    assert proc.returncode == 1 and [r["id"] for r in doc["regressions"]] == ["GD601"]
    assert {d["path"].split(".")[0] for d in doc["one_sided"]} == {"flash_attn", "vllm"}
    names = [d for d in doc["other"] if d["path"].startswith("packages.dists.") and d["path"].endswith(".name")]
    assert all(not d["a"].get("present", True) or not d["b"].get("present", True) for d in names)  # no jinja2 -> Jinja2
    text = gd("compare", str(SNAPSHOTS / "h200-full.json"), str(SNAPSHOTS / "h200-stale-engine.json")).stdout
    assert "Collected on one side only, not compared: " in text and "Jinja2" not in text


def test_pep503():
    assert dist_key("Jinja2") == dist_key("jinja2") == "jinja2"
    assert dist_key("absl_py") == dist_key("absl.py") == dist_key("Absl--Py") == "absl-py"


def test_a_real_difference_in_a_collected_fact_still_matters():
    data = json.loads((SNAPSHOTS / "h200.json").read_text(encoding="utf-8"))
    other = json.loads(json.dumps(data))
    other["facts"]["driver.version"]["value"] = "570.86.15"
    other["facts"]["env"]["value"]["CUDA_VISIBLE_DEVICES"] = "1"  # a key missing on one side of a collected fact
    result = compare.compare(Snapshot.from_json(data), Snapshot.from_json(other))
    paths = [d.path for d in result.matters]
    assert "driver.version" in paths and "env.CUDA_VISIBLE_DEVICES" in paths and not result.one_sided
