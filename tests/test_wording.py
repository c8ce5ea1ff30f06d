"""Words that mislead (issue 31, item 7): each defect a user met, as the CLI prints it on recorded fixtures."""

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SNAPSHOTS = REPO / "tests" / "fixtures" / "snapshots"
H200 = str(SNAPSHOTS / "h200.json")


def gd(*args, env=None):
    proc = subprocess.run([sys.executable, "-m", "gpudoctor", *args], capture_output=True, text=True, encoding="utf-8",
                          env=dict(os.environ, PYTHONIOENCODING="utf-8", GPUDOCTOR_HUB="0", **(env or {})), cwd=str(REPO), timeout=120)
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    return proc


def findings(*args, env=None):
    proc = gd(*args, env=env)
    return json.loads(proc.stdout)["findings"]


def test_gd705_shows_the_visible_gpus_as_a_count_not_an_index():
    """"2 GPUs needed, 1 visible" came with the evidence "visible GPUs = 0": the index list [0] read as none."""
    (finding,) = findings("preflight", "--snapshot", H200, "--select", "GD705", "--format", "json",
                          "--", "vllm", "serve", "Qwen/Qwen3-8B", "-tp", "2")
    assert "2 GPUs needed, 1 visible" in finding["message"]
    text = gd("preflight", "--snapshot", H200, "--select", "GD705", "--", "vllm", "serve", "Qwen/Qwen3-8B", "-tp", "2").stdout
    assert "visible GPUs = 1 (index 0)" in text and "visible GPUs = 0" not in text


def test_the_tp_fix_edits_the_flag_the_user_typed():
    """`-tp 3 --tensor-parallel-size 2` came back as a fix that kept `-tp 3`; `-tp 3` alone got a second flag."""
    def fix_of(*argv):
        (finding,) = findings("preflight", "--snapshot", H200, "--select", "GD705", "--format", "json", "--", *argv)
        return finding["fix"]["commands"][0]

    assert fix_of("vllm", "serve", "Qwen/Qwen3-8B", "-tp", "3", "--port", "8000") == "vllm serve Qwen/Qwen3-8B -tp 1 --port 8000"
    assert fix_of("vllm", "serve", "Qwen/Qwen3-8B", "-tp", "3", "--tensor-parallel-size", "2") == \
        "vllm serve Qwen/Qwen3-8B --tensor-parallel-size 1"
    assert fix_of("vllm", "serve", "Qwen/Qwen3-8B", "--tensor_parallel_size=2", "-tp", "3") == "vllm serve Qwen/Qwen3-8B -tp 1"


def test_gd701_a_bad_integer_is_not_about_json_quoting():
    """`--tensor-parallel-size two` was told to quote JSON, with int()'s own "invalid literal for int() with base 10"."""
    (finding,) = findings("preflight", "--snapshot", H200, "--select", "GD701", "--format", "json",
                          "--", "vllm", "serve", "Qwen/Qwen3-8B", "--tensor-parallel-size", "two")
    assert "--tensor-parallel-size 'two': not a valid integer;" in finding["message"]
    assert "invalid literal" not in finding["message"]
    assert finding["fix"]["summary"] == "Give --tensor-parallel-size a valid integer."
    (finding,) = findings("preflight", "--snapshot", H200, "--select", "GD701", "--format", "json",
                          "--", "vllm", "serve", "Qwen/Qwen3-8B", "--speculative-config", "{method: ngram}")
    assert "JSON in single quotes" in finding["fix"]["summary"]  # a JSON flag still gets the quoting advice
