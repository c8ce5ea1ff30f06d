"""CUDA_VISIBLE_DEVICES that leaves CUDA 0 GPUs blocks `check` and `preflight` (exit 1), as a process.

Measured on the real 1-GPU H200: under CUDA_VISIBLE_DEVICES=0,0 and under an empty value
torch.cuda.device_count() is 0, so a server launched that way cannot start on the GPU.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
H200 = str(REPO / "tests" / "fixtures" / "snapshots" / "h200.json")  # a clean machine: no finding of its own


def gd(*args, **extra_env):
    environ = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "TERM", "FORCE_COLOR", "CUDA_VISIBLE_DEVICES")}
    environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    environ.update(extra_env)
    proc = subprocess.run([sys.executable, "-m", "gpudoctor", *args], capture_output=True, text=True, encoding="utf-8",
                          env=environ, cwd=str(REPO), stdin=subprocess.DEVNULL, timeout=120)
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    return proc


@pytest.mark.parametrize("value", ["0,0", ""])
def test_preflight_blocks_and_does_not_start_the_command(tmp_path, value):
    marker = tmp_path / "ran"
    proc = gd("preflight", "--snapshot", H200, "--exec", "--", f"CUDA_VISIBLE_DEVICES={value}", "touch", str(marker))
    assert proc.returncode == 1 and not marker.exists()
    assert "GD308" in proc.stdout and "0 devices" in proc.stdout


def test_preflight_with_a_valid_value_starts_the_command(tmp_path):
    marker = tmp_path / "ran"
    proc = gd("preflight", "--snapshot", H200, "--exec", "--", "CUDA_VISIBLE_DEVICES=0", "touch", str(marker))
    assert proc.returncode == 0 and marker.exists()
