"""Models as vLLM finds them, read without loading a weight (gpudoctor/probes/launch/model.py)."""

import json
import os
import struct

import pytest

from gpudoctor.probes.launch import model
from fakes.launch_trees import dense_tensors, qwen36_model, small_model, write_model, write_safetensors


def test_safetensors_header_bytes_and_dtypes(tmp_path):
    path = tmp_path / "x.safetensors"
    data = write_safetensors(path, {"a": ("BF16", [4, 8]), "b": ("F32", [3]), "c": ("F8_E4M3", [16])}, sparse=False)
    assert data == 4 * 8 * 2 + 3 * 4 + 16
    info = model.safetensors_header(str(path))
    assert info == {"bytes": data, "dtypes": {"BF16": 64, "F32": 12, "F8_E4M3": 16}, "tensors": 3}


def test_sparse_big_files_are_read_by_header_only(tmp_path):
    path = tmp_path / "big.safetensors"
    data = write_safetensors(path, {"w": ("BF16", [100_000, 100_000])})
    assert model.safetensors_header(str(path))["bytes"] == data == 20_000_000_000
    assert os.stat(path).st_blocks * 512 < 1 << 20  # a hole: the test wrote kilobytes


@pytest.mark.parametrize("content, problem", [
    (b"", "shorter than 8 bytes"),
    (struct.pack("<Q", 1 << 40) + b"{}", "does not fit in the file"),
    (struct.pack("<Q", 5) + b"nope!", "not valid JSON"),
    (struct.pack("<Q", 2) + b"[]", "not a JSON object"),
    (struct.pack("<Q", 40) + b'{"w": {"dtype": "F32", "shape": [1]}}   ', "no valid data_offsets"),
])
def test_files_that_are_not_safetensors(tmp_path, content, problem):
    path = tmp_path / "bad.safetensors"
    path.write_bytes(content)
    assert problem in model.safetensors_header(str(path))["error"]


def test_truncated_data_is_reported(tmp_path):
    path = tmp_path / "t.safetensors"
    write_safetensors(path, {"w": ("F32", [1024])}, sparse=False)
    with open(path, "r+b") as handle:
        handle.truncate(os.path.getsize(path) - 100)
    info = model.safetensors_header(str(path))
    assert info["error"].startswith("truncated") and info["bytes"] == 4096


def test_sharded_model_with_index(tmp_path):
    folder = qwen36_model(tmp_path / "q")
    weights = model.weights(str(folder))
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    assert weights["bytes"] == index["metadata"]["total_size"] == weights["index_total_size"]
    assert weights["files"] == 2 and weights["missing"] == [] and weights["problems"] == []
    assert weights["dtypes"] == {"BF16": weights["bytes"]} and weights["bytes"] > 45 << 30


def test_missing_shard_falls_back_to_the_index_total_and_says_so(tmp_path):
    folder = qwen36_model(tmp_path / "q")
    (folder / "model-00002-of-00002.safetensors").unlink()
    weights = model.weights(str(folder))
    assert weights["missing"] == ["model-00002-of-00002.safetensors"]
    assert weights["source"].startswith("index metadata.total_size")


def test_bin_weights_by_file_size_and_no_weights(tmp_path):
    (tmp_path / "pytorch_model.bin").write_bytes(b"\0" * 1000)
    assert model.weights(str(tmp_path))["bytes"] == 1000
    empty = tmp_path / "empty"
    empty.mkdir()
    assert model.weights(str(empty))["problems"] == ["no weight files (*.safetensors, *.bin, *.pt, *.gguf)"]


def test_config_fields_of_a_multimodal_config_come_from_text_config(tmp_path):
    folder = qwen36_model(tmp_path / "q")
    info = model.inspect(model.resolve(str(folder), {}))
    cfg = info["config"]
    assert cfg["architectures"] == ["Qwen3_5ForConditionalGeneration"]
    assert (cfg["num_hidden_layers"], cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]) == (64, 5120, 24, 4, 256)
    assert cfg["max_length"] == 262144 and cfg["max_length_key"] == "max_position_embeddings"
    assert cfg["layer_types"] == {"linear_attention": 48, "full_attention": 16}
    assert cfg["torch_dtype"] == "bfloat16" and cfg["rope_scaling"] is None and cfg["quantization"] is None


def test_config_fields_defaults_quantization_rope_and_mla():
    cfg = model.config_fields({"architectures": ["X"], "hidden_size": 4096, "num_attention_heads": 32, "num_hidden_layers": 2,
                               "max_position_embeddings": 32768, "seq_length": 8192, "torch_dtype": "float16",
                               "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768},
                               "quantization_config": {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [128, 128]},
                               "kv_lora_rank": 512, "qk_rope_head_dim": 64, "auto_map": {"AutoModel": "m.X"}})
    assert cfg["num_key_value_heads"] == 32 and cfg["head_dim"] == 128  # defaults: MHA, hidden / heads
    assert (cfg["max_length"], cfg["max_length_key"]) == (8192, "seq_length")  # the smallest length key, as vLLM
    assert cfg["rope_scaling"] == {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}
    assert cfg["quantization"] == {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}
    assert cfg["kv_lora_rank"] == 512 and cfg["auto_map"] is True


def test_modelopt_hf_quant_config(tmp_path):
    folder = small_model(tmp_path / "m")
    (folder / "hf_quant_config.json").write_text(json.dumps({"quantization": {"quant_algo": "FP8"}}), encoding="utf-8")
    assert model.inspect(model.resolve(str(folder), {}))["config"]["quantization"] == {"quant_method": "modelopt", "quant_algo": "FP8"}


def test_config_that_is_not_json(tmp_path):
    folder = small_model(tmp_path / "m")
    (folder / "config.json").write_text('{"architectures": ["LlamaForCausalLM"],\n "hidden_size": 64,,}', encoding="utf-8")
    info = model.inspect(model.resolve(str(folder), {}))
    assert "config" not in info and info["config_problem"].startswith("config.json not valid JSON") and "line 2" in info["config_problem"]


# --- where the model is -------------------------------------------------------------------------------
def hub_snapshot(cache, repo, commit="0123456789abcdef0123456789abcdef01234567", ref="main"):
    repo_dir = cache / ("models--" + repo.replace("/", "--"))
    (repo_dir / "refs").mkdir(parents=True, exist_ok=True)
    (repo_dir / "refs" / ref).write_text(commit, encoding="utf-8")
    return small_model(repo_dir / "snapshots" / commit)


@pytest.mark.parametrize("variable, sub", [("HF_HUB_CACHE", ""), ("HF_HOME", "hub"), ("XDG_CACHE_HOME", "huggingface/hub")])
def test_hub_cache_layout_under_each_variable(tmp_path, variable, sub):
    cache = tmp_path / "c" / sub if sub else tmp_path / "c"
    folder = hub_snapshot(cache, "org/name")
    found = model.resolve("org/name", {variable: str(tmp_path / "c"), "HOME": str(tmp_path / "home")})
    assert found["kind"] == "hf_cache" and found["path"] == str(folder) and found["revision"] == folder.name


def test_home_cache_revision_and_download_dir(tmp_path):
    hub_snapshot(tmp_path / "home" / ".cache" / "huggingface" / "hub", "org/name")
    env = {"HOME": str(tmp_path / "home")}
    assert model.resolve("org/name", env)["kind"] == "hf_cache"
    other = hub_snapshot(tmp_path / "dl", "org/name", commit="f" * 40, ref="v2")
    found = model.resolve("org/name", env, revision="v2", download_dir=str(tmp_path / "dl"))
    assert found["path"] == str(other)
    missing = model.resolve("org/name", env, revision="v3")
    assert missing["kind"] == "hf_remote" and "no snapshot for revision v3" in missing["detail"]


def test_not_cached_local_and_missing(tmp_path):
    env = {"HOME": str(tmp_path), "HF_HUB_OFFLINE": "1"}
    remote = model.resolve("org/other", env)
    assert remote["kind"] == "hf_remote" and remote["offline"] is True
    local = small_model(tmp_path / "local")
    assert model.resolve(str(local), env)["kind"] == "local"
    assert model.resolve("local", env, cwd=str(tmp_path))["path"] == str(local)
    gone = model.resolve(str(tmp_path / "nope"), env)
    assert gone["kind"] == "missing_local" and "no such directory" in gone["detail"]
    assert model.resolve("./relative/typo", env, cwd=str(tmp_path))["kind"] == "missing_local"


@pytest.mark.parametrize("env, offline", [({"HF_HUB_OFFLINE": "1"}, True), ({"TRANSFORMERS_OFFLINE": "yes"}, True),
                                           ({"HF_HUB_OFFLINE": "0"}, False), ({}, False)])
def test_offline_mode(env, offline):
    assert model.is_offline(env) is offline


def test_dense_tensor_bytes_match_the_architecture(tmp_path):
    tensors = dense_tensors(2, 64, 8, 2, 8, 128, 256)
    folder = write_model(tmp_path / "m", {"architectures": ["LlamaForCausalLM"]}, tensors, sparse=False)
    per_layer = (64 * 64 + 2 * 16 * 64 + 64 * 64 + 3 * 128 * 64 + 64) * 2
    assert model.weights(str(folder))["bytes"] == 2 * per_layer + 2 * 256 * 64 * 2 + 64 * 2
