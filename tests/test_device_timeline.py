"""scripts/device/child_timeline.py (the H200 cold-start timeline) runs here too: its stamps find
their places in today's python_stack_collect.py (an anchor that moved fails here, not on the device, where time
is scarce), and the steps come back in the order the child takes them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "device" / "child_timeline.py"


def test_the_child_timeline_of_a_check():
    env = dict(os.environ, PYTHONPATH=str(SCRIPT.parent.parent.parent))
    proc = subprocess.run([sys.executable, str(SCRIPT), "--gpu", "sm_90"], capture_output=True, text=True, env=env,
                          timeout=120, cwd=str(SCRIPT.parent))
    assert proc.returncode == 0, proc.stderr
    row = json.loads(proc.stdout.strip().splitlines()[-1])
    steps = list(row["steps_s"])
    expected = ["spawn", "child-up", "modules-loaded", "main", "dists-done", "records-checked", "main-thread-done",
                "scan-joined", "collected", "parent-has-facts", "done"]
    assert [s for s in steps if s in expected] == expected, steps
    assert row["scan_phases_s"]["candidates"] >= 0
