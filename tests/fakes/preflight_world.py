"""A preflight world: fake vLLM installs and real-shaped models in a directory (``build_world``), and
``gpudoctor preflight --format json`` run on a command over a recorded snapshot."""

import io
import json
import os
from pathlib import Path

from gpudoctor import cli
from fakes.launch_trees import dense_tensors, dflash_drafter, fake_vllm, qwen36_model, small_model, write_model

SNAPSHOTS = Path(__file__).resolve().parent.parent / "fixtures" / "snapshots"
H200, H200X2, A100, T4, RTX, MIXED, A100X2 = (str(SNAPSHOTS / n) for n in (
    "h200.json", "h200x2.json", "a100.json", "t4.json", "rtx4090.json", "mixed.json", "a100x2-40gb.json"))


def env_for(world, **extra):
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(world["home"])}
    env.update(extra)
    return env


def preflight(world, *argv, env=None):
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(["preflight", "--format", "json", *argv], environ=env or env_for(world), stdout=out, stderr=err)
    assert "Traceback" not in err.getvalue(), err.getvalue()
    doc = json.loads(out.getvalue()) if out.getvalue().strip() else None
    return code, doc, err.getvalue()


def build_world(root: Path) -> dict:
    """Two vLLM installs (this one and a 0.8.5 of the old layout) and five models under ``root``: what the
    preflight tests serve."""
    w = {"root": root, "home": root / "home"}
    w["home"].mkdir()
    w["vllm"] = fake_vllm(root / "venv")
    w["old_vllm"] = fake_vllm(root / "old-venv", version="0.8.5", layout="old", tool_parsers=("hermes", "llama3_json"),
                              reasoning_parsers=("deepseek_r1",), spec_methods=("ngram", "medusa", "mlp_speculator", "draft_model"),
                              eagle_methods=("eagle",), backends=("FLASH_ATTN", "XFORMERS", "FLASHINFER"), dflash_fixed=None,
                              reads_attention_backend_env=True)
    w["small"] = small_model(root / "models" / "small")
    w["qwen"] = qwen36_model(root / "models" / "Qwen3.6-27B")
    w["drafter"] = dflash_drafter(root / "models" / "Qwen3.6-27B-DFlash")
    # An 8B-class dense model with a 1M-token context: 32 full-attention layers, 8 KV heads of 128.
    w["long"] = write_model(root / "models" / "long-8b", {
        "architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
        "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256, "max_position_embeddings": 1048576,
        "torch_dtype": "bfloat16"}, dense_tensors(32, 4096, 32, 8, 128, 14336, 128256), shards=4)
    return w


def outcome(doc, rule_id):
    (found,) = [o for o in doc["outcomes"] if o["id"] == rule_id]
    return found
