"""Every launch rule (GD7xx) on its failing case and on its passing case.

`gpudoctor preflight --snapshot MACHINE -- VENV/bin/vllm serve MODEL …` runs in process (cli.main) on
real files: vLLM trees in a venv layout and model directories with real safetensors files
(tests/fakes/launch_trees.py), and machine snapshots recorded on real H200s or derived from them
(tests/fixtures/snapshots/). GD722 binds a real port on 127.0.0.1 and probes this machine live.
"""

import json
import os
import re
import socket

import pytest

from fakes.launch_trees import dflash_drafter, fake_vllm, small_model

from fakes.preflight_world import A100, A100X2, H200, H200X2, MIXED, RTX, T4, build_world, env_for, outcome, preflight


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return build_world(tmp_path_factory.mktemp("world"))


def serve(world, model, *flags, vllm="vllm"):
    return ["--", str(world[vllm]), "serve", str(world[model]) if model in world else model, *[str(f) for f in flags]]




def launch_findings(doc):
    return [(f["id"], f["severity"], f["subject"]) for f in doc["findings"] if f["area"] == "launch"]


def fails(doc, rule_id):
    o = outcome(doc, rule_id)
    assert o["status"] == "fail", (rule_id, o)
    return o["findings"]


def passes(doc, rule_id):
    o = outcome(doc, rule_id)
    assert o["status"] == "pass", (rule_id, o)


# --- a clean launch has no launch finding ------------------------------------------------------------------
def test_clean_launch_on_a_clean_machine_passes_and_exits_0(world):
    code, doc, _ = preflight(world, "--snapshot", H200, *serve(world, "small", "--max-model-len", "4096", "--port", "8123"))
    assert code == 0 and launch_findings(doc) == []
    statuses = {o["id"]: o["status"] for o in doc["outcomes"] if o["area"] == "launch"}
    assert [i for i, s in statuses.items() if s == "unknown"] == ["GD722"]  # no socket table in the H200 recording
    assert all(s in ("pass", "not_applicable") for i, s in statuses.items() if i != "GD722")


# --- GD701 ------------------------------------------------------------------------------------------------
def test_gd701_bad_json_and_bad_numbers(world):
    _, doc, _ = preflight(world, "--snapshot", H200, *serve(world, "small", "--speculative-config", '{"method": dflash}'))
    (finding,) = fails(doc, "GD701")
    assert "--speculative-config" in finding["message"] and "not valid JSON" in finding["message"]
    _, doc, _ = preflight(world, "--snapshot", H200, *serve(world, "small", "--tensor-parallel-size", "two"))
    assert "not a valid integer" in fails(doc, "GD701")[0]["message"]
    _, doc, _ = preflight(world, "--snapshot", H200, *serve(world, "small", "--speculative-config", '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}'))
    passes(doc, "GD701")


# --- GD702 ------------------------------------------------------------------------------------------------
def test_gd702_unknown_flag_with_suggestion(world):
    _, doc, _ = preflight(world, "--snapshot", H200, *serve(world, "small", "--max-modle-len", "4096", "--tool-call-parser", "hermes"))
    (finding,) = fails(doc, "GD702")
    assert finding["subject"] == "--max-modle-len" and "did you mean --max-model-len?" in finding["message"]
    assert "vLLM 0.19.1.dev42+g2f3f441f8 does not define" in finding["message"]
    # The same command on a vLLM that defines it (--max_model_len spelling, a prefix, --no-… switches) passes.
    _, doc, _ = preflight(world, "--snapshot", H200, *serve(world, "small", "--max_model_len", "4096", "--no-enable-prefix-caching",
                                                            "--tool-call-parser", "hermes", "-tp", "1"))
    passes(doc, "GD702")


def test_gd702_flag_of_a_newer_vllm_on_an_old_one(world):
    _, doc, _ = preflight(world, "--snapshot", H200, *serve(world, "small", "--attention-backend", "FLASH_ATTN", vllm="old_vllm"))
    assert fails(doc, "GD702")[0]["subject"] == "--attention-backend"


def test_gd702_without_vllm_is_unknown_not_an_error(world, tmp_path):
    code, doc, _ = preflight(world, "--snapshot", H200, "--", "vllm", "serve", str(world["small"]), "--whatever", "1",
                             env=env_for(world, PATH=str(tmp_path)))
    o = outcome(doc, "GD702")
    assert o["status"] == "unknown" and o["reason"].startswith("cannot check flags: vLLM is not installed")
    assert code == 0


# --- GD703 ------------------------------------------------------------------------------------------------
def test_gd703_missing_model_config_not_json_and_truncated_shard(world, tmp_path):
    _, doc, _ = preflight(world, "--snapshot", H200, *serve(world, str(tmp_path / "no-such-model")))
    assert "does not exist" in fails(doc, "GD703")[0]["message"]
    broken = small_model(tmp_path / "broken")
    (broken / "config.json").write_text("{not json", encoding="utf-8")
    _, doc, _ = preflight(world, "--snapshot", H200, *serve(world, str(broken)))
    assert "config.json not valid JSON" in fails(doc, "GD703")[0]["message"]
    cut = small_model(tmp_path / "cut")
    shard = cut / "model.safetensors"
    with open(shard, "r+b") as handle:
        handle.truncate(shard.stat().st_size - 64)
    _, doc, _ = preflight(world, "--snapshot", H200, *serve(world, str(cut)))
    assert "truncated" in fails(doc, "GD703")[0]["message"]
    _, doc, _ = preflight(world, "--snapshot", H200, *serve(world, "small"))
    passes(doc, "GD703")


# --- GD704 ------------------------------------------------------------------------------------------------
def test_gd704_offline_and_not_cached(world, tmp_path):
    argv = ["--snapshot", H200, "--", "HF_HUB_OFFLINE=1", str(world["vllm"]), "serve", "org/not-downloaded"]
    _, doc, _ = preflight(world, *argv)
    (finding,) = fails(doc, "GD704")
    assert "HF offline mode is on" in finding["message"] and "org/not-downloaded" in finding["message"]
    # The same repo id in the cache HF_HOME points at: found, read, and silent.
    commit = "a" * 40
    repo = tmp_path / "hf" / "hub" / "models--org--not-downloaded"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit, encoding="utf-8")
    small_model(repo / "snapshots" / commit)
    _, doc, _ = preflight(world, *argv, env=env_for(world, HF_HOME=str(tmp_path / "hf")))
    passes(doc, "GD704")
    assert doc["snapshot"]["facts"]["model.source"]["value"]["kind"] == "hf_cache"


# --- GD705 ------------------------------------------------------------------------------------------------
def test_gd705_more_parallelism_than_gpus(world):
    _, doc, _ = preflight(world, "--snapshot", H200, *serve(world, "small", "--tensor-parallel-size", "2"))
    assert "2 GPUs needed, 1 visible" in fails(doc, "GD705")[0]["message"]
    _, doc, _ = preflight(world, "--snapshot", H200X2, *serve(world, "small", "--tensor-parallel-size", "2"))
    passes(doc, "GD705")
    # The command's own CUDA_VISIBLE_DEVICES decides what is visible.
    _, doc, _ = preflight(world, "--snapshot", H200X2, "--", "CUDA_VISIBLE_DEVICES=1", str(world["vllm"]), "serve", str(world["small"]), "-tp", "2")
    assert "CUDA_VISIBLE_DEVICES='1'" in fails(doc, "GD705")[0]["message"]


# --- GD706 ------------------------------------------------------------------------------------------------
def test_gd706_heads_not_divisible(world, tmp_path):
    odd = small_model(tmp_path / "odd", num_attention_heads=7, num_key_value_heads=7)
    _, doc, _ = preflight(world, "--snapshot", H200X2, *serve(world, str(odd), "--tensor-parallel-size", "2"))
    (finding,) = fails(doc, "GD706")
    assert finding["message"].startswith("Total number of attention heads (7) must be divisible by tensor parallel size (2).")
    _, doc, _ = preflight(world, "--snapshot", H200X2, *serve(world, "small", "--tensor-parallel-size", "2"))
    passes(doc, "GD706")


# --- GD707 ------------------------------------------------------------------------------------------------
def test_gd707_mixed_gpus_in_one_tp_group(world):
    _, doc, _ = preflight(world, "--snapshot", MIXED, *serve(world, "small", "--tensor-parallel-size", "2"))
    (finding,) = fails(doc, "GD707")
    assert finding["severity"] == "error" and "A100 80GB PCIe" in finding["message"] and "RTX 4090" in finding["message"]
    # One engine per GPU on the same machine: no mixed group (GD301 still reports the machine).
    _, doc, _ = preflight(world, "--snapshot", MIXED, *serve(world, "small"))
    assert outcome(doc, "GD707")["status"] == "not_applicable"
    _, doc, _ = preflight(world, "--snapshot", H200X2, *serve(world, "small", "-tp", "2"))
    passes(doc, "GD707")


# --- GD708 ------------------------------------------------------------------------------------------------
def test_gd708_predicts_vllms_exact_startup_error(world):
    _, doc, _ = preflight(world, "--snapshot", A100X2, *serve(world, "small", "-tp", "2", "--gpu-memory-utilization", "0.92"))
    (finding,) = fails(doc, "GD708")
    assert finding["subject"] == "GPU 1"
    assert ("ValueError: Free memory on device cuda:1 (35.8/39.41 GiB) on startup is less than desired GPU memory utilization "
            "(0.92, 36.26 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.") in finding["message"]
    assert "held by PID 896" in finding["message"] and "GD601" in finding["message"]
    assert any("--gpu-memory-utilization 0.89" in c for c in finding["fix"]["commands"])
    _, doc, _ = preflight(world, "--snapshot", A100X2, *serve(world, "small", "-tp", "2", "--gpu-memory-utilization", "0.89"))
    passes(doc, "GD708")


def test_gd708_marginal_headroom_is_a_warning(world):
    _, doc, _ = preflight(world, "--snapshot", A100X2, *serve(world, "small", "-tp", "2", "--gpu-memory-utilization", "0.9"))
    (finding,) = fails(doc, "GD708")
    assert finding["severity"] == "warning" and finding["subject"] == "GPU 1"


# --- GD709 ------------------------------------------------------------------------------------------------
def test_gd709_weights_larger_than_the_budget(world):
    _, doc, _ = preflight(world, "--snapshot", RTX, *serve(world, "qwen", "--max-model-len", "8192"))
    (finding,) = fails(doc, "GD709")
    assert "weights need about 45.4 GiB per GPU" in finding["message"] and "21.3 GiB budget" in finding["message"]
    _, doc, _ = preflight(world, "--snapshot", H200, *serve(world, "qwen", "--max-model-len", "8192"))
    passes(doc, "GD709")


def test_gd709_a_gpu_name_without_memory_is_judged_with_its_table_memory_and_says_which(world):
    """issue 31: `--gpu A100` judged memory as "not collected" and passed a model of any size."""
    _, doc, _ = preflight(world, "--gpu", "A100", *serve(world, "qwen", "--max-model-len", "8192"))
    passes(doc, "GD709")  # 45.4 GiB of weights in the 80 GB board's budget
    assert "--gpu A100: judged as the A100 80 GB (the A100 is also made with 40 GB: --gpu A100-40GB judges that one)" in doc["notes"]
    _, doc, _ = preflight(world, "--gpu", "A100-40GB", *serve(world, "qwen", "--max-model-len", "8192"))
    assert "weights need about 45.4 GiB per GPU" in fails(doc, "GD709")[0]["message"]
    assert not any("judged as the" in note for note in doc["notes"])  # the size was given: nothing assumed


# --- GD710 ------------------------------------------------------------------------------------------------
def test_gd710_kv_cache_for_the_full_context(world):
    # 1M tokens × 128 KiB per token = 128 GiB of KV cache next to 15 GiB of weights on a 140 GiB H200:
    # ~109 GiB are left at 0.9 (short by less than the estimate's 20 % margin: a warning), ~95 GiB at 0.8.
    _, doc, _ = preflight(world, "--snapshot", H200, *serve(world, "long", "--gpu-memory-utilization", "0.8"))
    assert fails(doc, "GD710")[0]["severity"] == "error"
    _, doc, _ = preflight(world, "--snapshot", H200, *serve(world, "long"))
    (finding,) = fails(doc, "GD710")
    assert finding["severity"] == "warning" and finding["message"].startswith("estimated: one 1048576-token request")
    assert "128 KiB per token" in finding["message"]
    fit = [c for c in finding["fix"]["commands"] if "--max-model-len" in c and "auto" not in c][0]
    tokens = int(fit.split("--max-model-len ")[1])
    assert 800_000 < tokens < 1_048_576 and tokens % 1024 == 0
    _, doc, _ = preflight(world, "--snapshot", H200, *serve(world, "long", "--max-model-len", str(tokens)))
    passes(doc, "GD710")
    _, doc, _ = preflight(world, "--snapshot", H200, *serve(world, "long", "--max-model-len", "auto"))
    assert outcome(doc, "GD710")["status"] == "not_applicable"


def test_gd710_fp8_kv_cache_halves_the_estimate(world):
    _, doc, _ = preflight(world, "--snapshot", H200, *serve(world, "long", "--kv-cache-dtype", "fp8", "--max-model-len", "900000"))
    passes(doc, "GD710")
    _, doc, _ = preflight(world, "--snapshot", H200, *serve(world, "long", "--max-model-len", "900000"))
    fails(doc, "GD710")


# --- GD711 ------------------------------------------------------------------------------------------------
def test_gd711_bfloat16_on_turing(world):
    _, doc, _ = preflight(world, "--snapshot", T4, *serve(world, "small", "--dtype", "bfloat16"))
    (finding,) = fails(doc, "GD711")
    assert finding["severity"] == "error"
    assert ("Bfloat16 is only supported on GPUs with compute capability of at least 8.0. Your Tesla T4 GPU has compute capability "
            "7.5. You can use float16 instead by explicitly setting the`dtype` flag in CLI, for example: --dtype=half.") in finding["message"]
    _, doc, _ = preflight(world, "--snapshot", T4, *serve(world, "small"))  # auto + a bf16 checkpoint
    assert fails(doc, "GD711")[0]["severity"] == "warning"
    _, doc, _ = preflight(world, "--snapshot", T4, *serve(world, "small", "--dtype", "half"))
    passes(doc, "GD711")
    _, doc, _ = preflight(world, "--snapshot", A100, *serve(world, "small", "--dtype", "bfloat16"))
    passes(doc, "GD711")


# --- GD712 ------------------------------------------------------------------------------------------------
def test_gd712_fp8_on_ampere(world, tmp_path):
    fp8 = small_model(tmp_path / "fp8", quantization_config={"quant_method": "fp8", "activation_scheme": "dynamic"})
    _, doc, _ = preflight(world, "--snapshot", A100, *serve(world, str(fp8)))
    (finding,) = fails(doc, "GD712")
    assert finding["subject"] == "weights" and "FP8 Marlin" in finding["message"]
    _, doc, _ = preflight(world, "--snapshot", A100, *serve(world, "small", "--kv-cache-dtype", "fp8"))
    assert [f["subject"] for f in fails(doc, "GD712")] == ["kv cache"]
    _, doc, _ = preflight(world, "--snapshot", RTX, *serve(world, str(fp8), "--kv-cache-dtype", "fp8"))  # Ada: cc 8.9
    passes(doc, "GD712")


# --- GD713 ------------------------------------------------------------------------------------------------
def test_gd713_quantization_minimum_from_the_installed_vllm(world, tmp_path):
    modelopt = small_model(tmp_path / "modelopt")
    (modelopt / "hf_quant_config.json").write_text(json.dumps({"quantization": {"quant_algo": "FP8"}}), encoding="utf-8")
    _, doc, _ = preflight(world, "--snapshot", A100, *serve(world, str(modelopt)))
    (finding,) = fails(doc, "GD713")
    assert ("The quantization method modelopt is not supported for the current GPU. Minimum capability: 89. Current capability: 80."
            in finding["message"]) and "the installed vLLM's source" in finding["message"]
    _, doc, _ = preflight(world, "--snapshot", H200, *serve(world, str(modelopt)))
    passes(doc, "GD713")
    # The minimum is the installed vLLM's: one that says fp8 needs 8.9 refuses an fp8 checkpoint on an A100.
    strict = fake_vllm(tmp_path / "strict", quant_min={"fp8": 89})
    fp8 = small_model(tmp_path / "fp8", quantization_config={"quant_method": "fp8"})
    _, doc, _ = preflight(world, "--snapshot", A100, "--", str(strict), "serve", str(fp8))
    assert "Minimum capability: 89" in fails(doc, "GD713")[0]["message"]
    _, doc, _ = preflight(world, "--snapshot", A100, *serve(world, str(fp8)))
    passes(doc, "GD713")


# --- GD714 ------------------------------------------------------------------------------------------------
def test_gd714_attention_backend_versus_capability(world):
    _, doc, _ = preflight(world, "--snapshot", T4, *serve(world, "small", "--dtype", "half", "--attention-backend", "FLASH_ATTN"))
    assert "needs compute capability 8.0+; GPU 0 (Tesla T4) is 7.5" in fails(doc, "GD714")[0]["message"]
    _, doc, _ = preflight(world, "--snapshot", A100, *serve(world, "small", "--attention-config.flash_attn_version", "3",
                                                             "--attention-config.backend", "FLASH_ATTN"))
    assert "9.0–9.9" in fails(doc, "GD714")[0]["message"]
    _, doc, _ = preflight(world, "--snapshot", A100, *serve(world, "small", "--attention-backend", "flash_attn"))
    passes(doc, "GD714")


def test_gd714_unknown_backend_and_ignored_environment_variable(world):
    _, doc, _ = preflight(world, "--snapshot", A100, *serve(world, "small", "--attention-backend", "XFORMERS"))
    assert "has no such backend" in fails(doc, "GD714")[0]["message"]
    _, doc, _ = preflight(world, "--snapshot", A100, "--", "VLLM_ATTENTION_BACKEND=FLASHINFER", str(world["vllm"]), "serve", str(world["small"]))
    (finding,) = fails(doc, "GD714")
    assert finding["severity"] == "warning" and "is ignored by vLLM 0.19" in finding["message"]
    # An old vLLM still reads the variable: then it is the backend, and FLASHINFER runs on an A100.
    _, doc, _ = preflight(world, "--snapshot", A100, "--", "VLLM_ATTENTION_BACKEND=FLASHINFER", str(world["old_vllm"]), "serve", str(world["small"]))
    passes(doc, "GD714")


# --- GD715 ------------------------------------------------------------------------------------------------
def test_gd715_max_model_len_beyond_the_context(world, tmp_path):
    _, doc, _ = preflight(world, "--snapshot", H200, *serve(world, "small", "--max-model-len", "8192"))
    (finding,) = fails(doc, "GD715")
    assert "User-specified max_model_len (8192) is greater than the derived max_model_len (max_position_embeddings=4096" in finding["message"]
    _, doc, _ = preflight(world, "--snapshot", H200, *serve(world, "small", "--max-model-len", "4096"))
    passes(doc, "GD715")
    yarn = small_model(tmp_path / "yarn", rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096})
    _, doc, _ = preflight(world, "--snapshot", H200, *serve(world, str(yarn), "--max-model-len", "16384"))
    passes(doc, "GD715")
    _, doc, _ = preflight(world, "--snapshot", H200, "--", "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1", str(world["vllm"]), "serve",
                          str(world["small"]), "--max-model-len", "8192")
    assert fails(doc, "GD715")[0]["severity"] == "warning"


# --- GD716, GD717, GD718, GD720 -------------------------------------------------------------------------------
def spec(world, drafter=None, **extra):
    config = {"method": "dflash", "model": str(drafter or world["drafter"]), "num_speculative_tokens": 15}
    config.update(extra)
    return json.dumps({k: v for k, v in config.items() if v is not None})


def test_gd716_speculative_method_unknown_to_this_vllm(world):
    _, doc, _ = preflight(world, "--snapshot", H200, *serve(world, "qwen", "--max-model-len", "8192", "--speculative-config", spec(world), vllm="old_vllm"))
    (finding,) = fails(doc, "GD716")
    assert "has no speculative method 'dflash'" in finding["message"] and "vLLM 0.8.5" in finding["message"]
    _, doc, _ = preflight(world, "--snapshot", H200, *serve(world, "qwen", "--max-model-len", "8192", "--speculative-config", spec(world)))
    passes(doc, "GD716")
    _, doc, _ = preflight(world, "--snapshot", H200, *serve(world, "qwen", "--speculative-config", '{"num_speculative_tokens": 3}'))
    assert "neither `method` nor `model`" in fails(doc, "GD716")[0]["message"]


def test_gd717_drafter_missing_or_broken(world, tmp_path):
    _, doc, _ = preflight(world, "--snapshot", H200, *serve(world, "qwen", "--speculative-config", spec(world, tmp_path / "no-drafter")))
    assert "does not exist" in fails(doc, "GD717")[0]["message"]
    broken = dflash_drafter(tmp_path / "broken")
    (broken / "config.json").write_text('{"architectures": ', encoding="utf-8")
    _, doc, _ = preflight(world, "--snapshot", H200, *serve(world, "qwen", "--speculative-config", spec(world, broken)))
    assert "config.json not valid JSON" in fails(doc, "GD717")[0]["message"]
    _, doc, _ = preflight(world, "--snapshot", H200, *serve(world, "qwen", "--speculative-config", spec(world)))
    passes(doc, "GD717")


@pytest.mark.parametrize("ids, subject, severity", [
    ([1, 17, 33, 49, 64], "range", "error"),  # 64 layers: 0…63
    ([-1, 17, 33, 49, 63], "range", "error"),
    ([1, 17, 17, 49, 63], "duplicates", "error"),
    ([17, 1, 33, 49, 63], "order", "warning"),
])
def test_gd718_target_layer_ids(world, tmp_path, ids, subject, severity):
    drafter = dflash_drafter(tmp_path / "d", target_layer_ids=ids)
    _, doc, _ = preflight(world, "--snapshot", H200, *serve(world, "qwen", "--speculative-config", spec(world, drafter)))
    (finding,) = fails(doc, "GD718")
    assert (finding["subject"], finding["severity"]) == (subject, severity)


def test_gd718_valid_ids_and_a_drafter_for_another_target(world, tmp_path):
    _, doc, _ = preflight(world, "--snapshot", H200, *serve(world, "qwen", "--speculative-config", spec(world)))
    passes(doc, "GD718")
    other = dflash_drafter(tmp_path / "other", target_hidden_size=4096, num_target_layers=36)
    _, doc, _ = preflight(world, "--snapshot", H200, *serve(world, "qwen", "--speculative-config", spec(world, other)))
    assert sorted(f["subject"] for f in fails(doc, "GD718")) == ["hidden size", "target"]


@pytest.mark.parametrize("tokens, severity", [(0, "error"), ("5", "error"), (20, "warning")])
def test_gd720_num_speculative_tokens(world, tokens, severity):
    _, doc, _ = preflight(world, "--snapshot", H200, *serve(world, "qwen", "--speculative-config", spec(world, num_speculative_tokens=tokens)))
    assert fails(doc, "GD720")[0]["severity"] == severity


def test_gd720_block_size_minus_one_passes(world):
    _, doc, _ = preflight(world, "--snapshot", H200, *serve(world, "qwen", "--speculative-config", spec(world, num_speculative_tokens=15)))
    passes(doc, "GD720")


# --- GD719 ------------------------------------------------------------------------------------------------
def test_gd719_known_fix_missing_in_the_commands_vllm(world, tmp_path):
    pytest.importorskip("gpudoctor.knowledge.advisories")
    pytest.importorskip("gpudoctor.probes.vllm_build")
    unfixed = fake_vllm(tmp_path / "branch", dflash_fixed=False)
    _, doc, _ = preflight(world, "--snapshot", H200, "--", str(unfixed), "serve", str(world["qwen"]), "--speculative-config", spec(world))
    findings = fails(doc, "GD719")
    assert any("PR #40727" in f["message"] for f in findings)
    _, doc, _ = preflight(world, "--snapshot", H200, *serve(world, "qwen", "--speculative-config", spec(world)))
    assert outcome(doc, "GD719")["status"] in ("pass", "unknown")
    assert not any("40727" in f["message"] for f in outcome(doc, "GD719")["findings"])


# --- GD721 ------------------------------------------------------------------------------------------------
def test_gd721_tool_parser_missing_in_an_older_vllm(world):
    _, doc, _ = preflight(world, "--snapshot", H200, *serve(world, "small", "--enable-auto-tool-choice", "--tool-call-parser", "qwen3_coder",
                                                            vllm="old_vllm"))
    (finding,) = fails(doc, "GD721")
    assert finding["subject"] == "--tool-call-parser" and "vLLM 0.8.5 has no such parser" in finding["message"]
    _, doc, _ = preflight(world, "--snapshot", H200, *serve(world, "small", "--enable-auto-tool-choice", "--tool-call-parser", "qwen3_coder",
                                                            "--reasoning-parser", "qwen3"))
    passes(doc, "GD721")


def test_gd721_reasoning_parser_auto_tool_choice_alone_and_plugins(world):
    _, doc, _ = preflight(world, "--snapshot", H200, *serve(world, "small", "--reasoning-parser", "qwen3", vllm="old_vllm"))
    assert fails(doc, "GD721")[0]["subject"] == "--reasoning-parser"
    _, doc, _ = preflight(world, "--snapshot", H200, *serve(world, "small", "--enable-auto-tool-choice"))
    assert "requires --tool-call-parser" in fails(doc, "GD721")[0]["message"]
    _, doc, _ = preflight(world, "--snapshot", H200, *serve(world, "small", "--tool-call-parser", "mine", "--tool-parser-plugin", "/x/p.py"))
    assert fails(doc, "GD721")[0]["severity"] == "warning"


# --- GD722: a real bound port ---------------------------------------------------------------------------
def test_gd722_port_taken_on_this_machine(world):
    holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    port = holder.getsockname()[1]
    try:
        _, doc, _ = preflight(world, "--timeout", "20", *serve(world, "small", "--host", "127.0.0.1", "--port", str(port)))
        (finding,) = fails(doc, "GD722")
        # This process holds it; a process it is starting at that moment (the probes' children, between
        # their fork and exec) can hold a copy for a few microseconds and be named too.
        assert re.search(rf"port {port} is taken \(127\.0\.0\.1:{port} by PID {os.getpid()}(, \d+)*\)", finding["message"]), finding
        assert doc["snapshot"]["facts"]["processes.port"]["value"]["port"] == port  # preflight probed the command's port
        _, doc, _ = preflight(world, "--timeout", "20", *serve(world, "small", "--host", "localhost", "--port", str(port)))
        fails(doc, "GD722")
        _, doc, _ = preflight(world, "--timeout", "20", *serve(world, "small", "--port", str(port)))  # all interfaces
        fails(doc, "GD722")
        _, doc, _ = preflight(world, "--timeout", "20", *serve(world, "small", "--host", "127.0.0.2", "--port", str(port)))
        passes(doc, "GD722")  # another address: bind() succeeds, as it does here
        other = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        other.bind(("127.0.0.2", port))
        other.close()
    finally:
        holder.close()
    _, doc, _ = preflight(world, "--timeout", "20", *serve(world, "small", "--host", "127.0.0.1", "--port", str(port)))
    passes(doc, "GD722")


# --- GD723 ------------------------------------------------------------------------------------------------
def test_gd723_custom_architecture_needs_trust_remote_code(world, tmp_path):
    custom = small_model(tmp_path / "custom", architectures=["AcmeForCausalLM"], auto_map={"AutoModelForCausalLM": "modeling_acme.AcmeForCausalLM"})
    _, doc, _ = preflight(world, "--snapshot", H200, *serve(world, str(custom)))
    (finding,) = fails(doc, "GD723")
    assert "AcmeForCausalLM" in finding["message"] and "--trust-remote-code" in finding["message"]
    _, doc, _ = preflight(world, "--snapshot", H200, *serve(world, str(custom), "--trust-remote-code"))
    passes(doc, "GD723")
    _, doc, _ = preflight(world, "--snapshot", H200, *serve(world, "small"))
    passes(doc, "GD723")


def test_gd721_a_typo_gets_did_you_mean_not_another_vllm(world):
    """issue 31: --tool-call-parser qwen3_coderr was answered "a vLLM that has qwen3_coderr"."""
    _, doc, _ = preflight(world, "--snapshot", H200, *serve(world, "small", "--enable-auto-tool-choice", "--tool-call-parser", "qwen3_coderr"))
    (finding,) = fails(doc, "GD721")
    assert "did you mean qwen3_coder?" in finding["message"]
    assert finding["fix"]["summary"].startswith("Did you mean qwen3_coder?") and "a vLLM that has" not in finding["fix"]["summary"]
    assert finding["fix"]["commands"][0].endswith("--tool-call-parser qwen3_coder")
