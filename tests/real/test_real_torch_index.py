"""Issue 29's wrong-index bug, on the real vLLM 0.33.0 closure (torch 2.14.0 from PyPI, CUDA 13.0).

`check --python VENV --gpu A100` on a CPU box (no driver: the --gpu case) used to suggest
reinstalling torch from the cu128 index, a tag made up when the driver is unknown. The venv is
the release's real closure copied with hard links, less torchvision (so GD510 asks for vLLM's
torch family): every torch command must name cu130, the CUDA the installed torch was built with.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import realenv  # noqa: E402

pytestmark = pytest.mark.real


def test_torch_commands_name_the_installed_torchs_cuda_not_a_guess(tmp_path):
    source = realenv.release_venv("0.33.0").parent.parent
    broken = realenv.CACHE / "scratch" / f"closure-no-torchvision-{os.getpid()}"
    shutil.rmtree(broken, ignore_errors=True)
    broken.parent.mkdir(parents=True, exist_ok=True)
    try:
        subprocess.run(["cp", "-al", str(source), str(broken)], check=True)  # links: the original is not touched
        subprocess.run([sys.executable, "-m", "pip", "--python", str(broken / "bin" / "python"), "uninstall", "-q", "-y",
                        "torchvision"], check=True)
        env = dict(os.environ, GPUDOCTOR_CACHE_DIR=str(tmp_path))
        done = subprocess.run([sys.executable, "-m", "gpudoctor", "check", "--python", str(broken / "bin" / "python"),
                               "--gpu", "A100", "--select", "GD5", "--format", "json", "--timeout", "120"],
                              capture_output=True, text=True, timeout=300, env=env)
        assert done.returncode == 1, done.stderr
        findings = json.loads(done.stdout)["findings"]
        commands = [c for f in findings for c in (f.get("fix") or {}).get("commands", []) if "download.pytorch.org" in c]
        [gd510] = [f for f in findings if f["id"] == "GD510"]
        assert "torchvision==0.29.0 (not installed)" in gd510["message"]
        assert commands and all("/whl/cu130" in c for c in commands), commands
        assert any("torch==2.14.0 torchvision==0.29.0 torchaudio==2.11.0 --index-url https://download.pytorch.org/whl/cu130" in c
                   for c in commands), commands
        # `fix` plans that very command as a typed action (one source), PyTorch's index replacing the environment's
        plan = subprocess.run([sys.executable, "-m", "gpudoctor", "fix", "--python", str(broken / "bin" / "python"), "--gpu", "A100",
                               "--select", "GD510", "--format", "json", "--timeout", "120"], capture_output=True, text=True, timeout=300, env=env)
        [torch] = [item for item in json.loads(plan.stdout)["plan"] if item["dist"] == "torch"]
        assert torch["command"] in gd510["fix"]["commands"] and torch["kind"] == "install", torch
        assert torch["requirements"] == ["torch==2.14.0", "torchvision==0.29.0", "torchaudio==2.11.0"]
        assert "https://download.pytorch.org/whl/cu130 instead of the environment's index" in torch["index"]
        assert torch["verdict"] == "refused" and "has no pip" in torch["reason"]  # the closure has no pip: fix says so, changes nothing
    finally:
        shutil.rmtree(broken, ignore_errors=True)
