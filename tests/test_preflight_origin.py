"""The origin story, replayed: Qwen3.6-27B + a DFlash drafter on a 2× A100-40GB box where the last
launch left a process holding 3.6 GiB of GPU 1.

Machine: tests/fixtures/snapshots/a100x2-40gb.json (derived from the real h200x2-busy recording;
PID 896 is that recording's real holder). Model: a Qwen3.6-27B-like config (64 layers, every
fourth full attention, 4 KV heads of 256, 262144-token context) with sparse safetensors shards
whose headers describe 48.7 GB of bf16 weights; drafter: DFlash, target_layer_ids
[1, 17, 33, 49, 63], block size 16. vLLM: a 0.19.1 development build that has DFlash, the
qwen3_coder tool parser and the DFlash fixes.

A careful engineer expects exactly two things: the stale 3.6 GiB on GPU 1 (GD302) and, because
of it, vLLM refusing to start on cuda:1 at --gpu-memory-utilization 0.92 (GD708, with vLLM's own
message and this machine's numbers). The 64-layer target takes layer ids up to 63, the weights
(24.4 GiB per GPU with TP 2, plus the drafter) and a 131072-token KV cache fit the budget, bf16
and FLASH_ATTN run on cc 8.0, and this vLLM has dflash, qwen3_coder and qwen3: nothing else.
"""

import io
import json
import os
from pathlib import Path

import pytest

from gpudoctor import cli
from fakes.launch_trees import dflash_drafter, fake_vllm, qwen36_model

SNAPSHOT = Path(__file__).resolve().parent / "fixtures" / "snapshots" / "a100x2-40gb.json"
FREE_MESSAGE = ("Free memory on device cuda:1 (35.8/39.41 GiB) on startup is less than desired GPU memory utilization "
                "(0.92, 36.26 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.")


@pytest.fixture(scope="module")
def box(tmp_path_factory):
    root = tmp_path_factory.mktemp("origin")
    models = root / "models"
    b = {"root": root, "vllm": fake_vllm(root / "venv", version="0.19.1.dev157+g8e1f3c2d4"),
         "model": qwen36_model(models / "Qwen3.6-27B"), "drafter": dflash_drafter(models / "Qwen3.6-27B-DFlash")}
    b["spec"] = json.dumps({"method": "dflash", "model": str(b["drafter"]), "num_speculative_tokens": 15})
    b["argv"] = [str(b["vllm"]), "serve", str(b["model"]), "--served-model-name", "qwen3.6-27b", "--tensor-parallel-size", "2",
                 "--max-model-len", "131072", "--gpu-memory-utilization", "0.92", "--speculative-config", b["spec"],
                 "--attention-backend", "flash_attn", "--enable-auto-tool-choice", "--tool-call-parser", "qwen3_coder",
                 "--reasoning-parser", "qwen3", "--host", "0.0.0.0", "--port", "8000"]
    return b


def run(*argv, fmt="json", env=None):
    out, err = io.StringIO(), io.StringIO()
    environ = {"PATH": os.environ.get("PATH", ""), "HOME": "/nonexistent-home"}
    environ.update(env or {})
    code = cli.main(["preflight", "--format", fmt, *argv], environ=environ, stdout=out, stderr=err)
    assert "Traceback" not in err.getvalue(), err.getvalue()
    return code, out.getvalue()


def findings(doc):
    return sorted((f["id"], f["severity"], f["subject"]) for f in doc["findings"])


def test_the_origin_story_gives_the_expected_findings_and_nothing_else(box):
    code, out = run("--snapshot", str(SNAPSHOT), "--", *box["argv"])
    doc = json.loads(out)
    assert code == 1
    assert findings(doc) == [("GD302", "warning", "GPU 1"), ("GD708", "error", "GPU 1")]
    (gd708,) = [f for f in doc["findings"] if f["id"] == "GD708"]
    assert FREE_MESSAGE in gd708["message"] and "held by PID 896 (3.6 GiB)" in gd708["message"]
    launch = {o["id"]: o for o in doc["outcomes"] if o["area"] == "launch"}
    # Judged and fine, not skipped: flags, model, memory, capability, speculative decoding, parsers.
    for rule_id in ("GD701", "GD702", "GD703", "GD705", "GD706", "GD707", "GD709", "GD710", "GD711", "GD712", "GD713",
                    "GD714", "GD716", "GD717", "GD718", "GD720", "GD721", "GD723"):
        assert launch[rule_id]["status"] == "pass", (rule_id, launch[rule_id])
    # The recording has no socket table: the port is unknown, said so. The DFlash fixes are there
    # (or, without gpudoctor/knowledge/advisories.py, it cannot tell).
    assert launch["GD722"]["status"] == "unknown"
    assert launch["GD719"]["status"] in ("pass", "unknown") and not launch["GD719"]["findings"]
    facts = doc["snapshot"]["facts"]
    assert facts["drafter.config"]["value"]["dflash_config"]["target_layer_ids"] == [1, 17, 33, 49, 63]
    assert facts["model.config"]["value"]["num_hidden_layers"] == 64


def test_the_origin_story_text_report(box):
    code, out = run("--snapshot", str(SNAPSHOT), "--", *box["argv"], fmt="text")
    assert code == 1
    assert "✗ Launch command" in out and "spec dflash" in out and "vLLM 0.19.1.dev157+g8e1f3c2d4" in out
    assert FREE_MESSAGE in out.replace("\n", " ")
    assert "--gpu-memory-utilization 0.89" in out  # the suggested value that fits
    assert "Summary: 1 error, 1 warning" in out


def test_the_same_command_from_the_launch_script(box, tmp_path):
    script = tmp_path / "serve-qwen.sh"
    script.write_text("#!/bin/bash\nset -e\nexport CUDA_VISIBLE_DEVICES=0,1\nMODEL=" + str(box["model"]) + "\n"
                      + "exec " + box["argv"][0] + ' serve "$MODEL" \\\n'
                      + " \\\n".join("  " + a if not a.startswith("{") else "  '" + a + "'" for a in box["argv"][3:]) + "\n",
                      encoding="utf-8")
    code, out = run("--snapshot", str(SNAPSHOT), "--from-file", str(script))
    doc = json.loads(out)
    assert code == 1 and findings(doc) == [("GD302", "warning", "GPU 1"), ("GD708", "error", "GPU 1")]
    assert doc["snapshot"]["facts"]["launch.command"]["source"].endswith("serve-qwen.sh:5")
    assert doc["snapshot"]["facts"]["env"]["value"]["CUDA_VISIBLE_DEVICES"] == "0,1"


def test_after_the_stale_process_is_gone_the_launch_passes(box, tmp_path):
    """The same box once PID 896 is stopped (memory as on GPU 0): the gate opens."""
    data = json.loads(SNAPSHOT.read_text(encoding="utf-8"))
    facts = data["facts"]
    facts["gpu.1.memory_used"]["value"] = facts["gpu.0.memory_used"]["value"]
    facts["gpu.1.memory_free"]["value"] = facts["gpu.0.memory_free"]["value"]
    facts["gpu.1.processes"]["value"] = []
    clean = tmp_path / "clean.json"
    clean.write_text(json.dumps(data), encoding="utf-8")
    code, out = run("--snapshot", str(clean), "--", *box["argv"])
    doc = json.loads(out)
    assert code == 0 and findings(doc) == []


def test_an_older_vllm_lacks_dflash_and_qwen3_coder(box, tmp_path):
    """The same command on an older vLLM (0.10-era: no dflash method, no qwen3_coder parser)."""
    older = fake_vllm(tmp_path / "venv", version="0.10.1.1", tool_parsers=("hermes", "llama3_json"), reasoning_parsers=("deepseek_r1", "qwen3"),
                      eagle_methods=("eagle", "eagle3"), dflash_fixed=None)
    argv = [str(older)] + box["argv"][1:]
    code, out = run("--snapshot", str(SNAPSHOT), "--", *argv)
    doc = json.loads(out)
    assert code == 1
    assert findings(doc) == [("GD302", "warning", "GPU 1"), ("GD708", "error", "GPU 1"), ("GD716", "error", ""),
                             ("GD721", "error", "--tool-call-parser")]
