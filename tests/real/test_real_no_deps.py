"""Issue 31: an engine installed with ``pip install --no-deps``, on real wheels from PyPI.

vLLM 0.33.0 and CPU torch 2.13.0, each installed ``--no-deps`` (``realenv.venv_with``): vLLM misses
75 of its requirements, torch 7 of its own, and vLLM pins torch 2.14.0. Before, `check --gpu H200`
said it as five findings of the Python stack (GD501, GD503 twice, GD508, GD510) with 95 evidence
items over 158 lines and 8 different pip commands; it is one finding of that cause beside GD501
(the CPU torch is a cause of its own), with one fix: torch from the CUDA index vLLM pins, then
`pip install vllm==0.33.0`, which keeps the installed vLLM and installs what it requires.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import realenv  # noqa: E402

pytestmark = pytest.mark.real


def _check(python: Path, tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, GPUDOCTOR_CACHE_DIR=str(tmp_path))
    return subprocess.run([sys.executable, "-m", "gpudoctor", "check", "--python", str(python), "--gpu", "H200",
                           "--timeout", "120", *extra], capture_output=True, text=True, timeout=300, env=env)


def test_a_no_deps_vllm_is_one_finding_of_that_cause_with_one_fix(tmp_path):
    python = realenv.venv_with("vllm==0.33.0", "torch==2.13.0")
    done = _check(python, tmp_path, "--format", "json")
    assert done.returncode == 1, done.stderr
    document = json.loads(done.stdout)
    stack = [f for f in document["findings"] if f["area"] == "vllm"]
    assert sorted(f["id"] for f in stack) == ["GD501", "GD503"], [(f["id"], f["subject"]) for f in stack]
    [cause] = [f for f in stack if f["id"] == "GD503"]
    assert cause["severity"] == "error" and cause["subject"] == "vllm"
    assert cause["message"].startswith("vllm 0.33.0 was installed without its requirements (as `pip install --no-deps` leaves it)")
    assert "torch 2.13.0+cpu (a CPU-only build) is installed where vllm requires torch==2.14.0" in cause["message"]
    assert cause["same_cause"] == ["GD508 extension-built-for-other-torch [vllm]", "GD510 vllm-pins-not-met [vllm]"]
    assert len(cause["evidence"]) == 3
    commands = cause["fix"]["commands"]
    assert len(commands) == 2 and "torch==2.14.0 torchvision==0.29.0 torchaudio==2.11.0 --index-url" in commands[0]
    assert commands[1].endswith("-m pip install vllm==0.33.0  # keeps this vllm; installs what it requires")
    outcomes = {o["id"]: o["status"] for o in document["outcomes"]}
    assert outcomes["GD508"] == outcomes["GD510"] == "fail"  # each rule still fails on its own (JUnit, explain)

    shown = _check(python, tmp_path).stdout
    area = shown.split("Python stack & vLLM", 1)[1].split("\n✓ Processes", 1)[0]
    evidence = [line for line in area.splitlines() if line.startswith("        ") and not line.lstrip().startswith("$")]
    assert len(evidence) <= 12, area  # was 158
    assert "packages.dists." not in area
