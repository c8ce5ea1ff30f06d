"""Issue 14 audit: every file gpudoctor reads from a place a user (or anyone, /tmp) controls goes
through gpudoctor.bounded, so a FIFO there cannot block it and a device cannot feed it forever.

Each test puts a real FIFO (no writer ever) where one reader used a plain open(): a plain open of
a FIFO blocks until a writer comes, i.e. forever. The call runs in a daemon thread so the old code
fails the test instead of hanging the suite; the limit is generous, returning is the behaviour.
"""

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

from gpudoctor import bounded, config, plugins
from gpudoctor.probes import cuda
from gpudoctor.probes import ray as ray_probe
from gpudoctor.probes.launch import model, vllm_index, vllm_source

REPO = Path(__file__).resolve().parent.parent


def returns(call, seconds: float = 20.0):
    """The value of ``call()``, which must return (not block) within ``seconds``."""
    out = []

    def work():
        try:
            out.append((call(), None))
        except Exception as exc:  # re-raised in the test's thread
            out.append((None, exc))

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    thread.join(seconds)
    assert out, f"{call} blocked (a plain open() of a FIFO waits for a writer forever)"
    value, error = out[0]
    if error is not None:
        raise error
    return value


def fifo(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)
    return path


def test_read_head_refuses_fifos_and_devices_and_reads_files(tmp_path):
    pipe = fifo(tmp_path / "pipe")
    for path in (pipe, "/dev/zero", tmp_path):
        try:
            returns(lambda: bounded.read_head(str(path), 100))
        except bounded.InputError as exc:
            assert "not a regular file" in str(exc)
        else:
            raise AssertionError(f"{path} was read")
    (tmp_path / "f").write_bytes(b"x" * 5000)
    assert bounded.read_head(str(tmp_path / "f"), 100) == b"x" * 100


def test_a_fifo_named_model_safetensors_does_not_block_preflight(tmp_path):
    """The model directory is the user's (--model): preflight reads its safetensors headers in the main thread."""
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                                                       "max_position_embeddings": 4096, "hidden_size": 4096,
                                                       "num_attention_heads": 32, "num_hidden_layers": 32}))
    fifo(tmp_path / "model.safetensors")
    proc = subprocess.run([sys.executable, "-m", "gpudoctor", "preflight", "--format", "json", "--", "vllm", "serve", str(tmp_path)],
                          capture_output=True, text=True, cwd=str(REPO), stdin=subprocess.DEVNULL, timeout=60)
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    weights = json.loads(proc.stdout)["snapshot"]["facts"]["model.weights"]
    assert weights["status"] == "error" and "FIFO" in weights["detail"], weights


def test_safetensors_header_of_a_fifo_is_an_error():
    assert "not a regular file" in returns(lambda: model.safetensors_header("/dev/zero"))["error"]


def test_a_fifo_as_a_hub_cache_ref_does_not_block(tmp_path):
    repo = tmp_path / "hub" / "models--org--name"
    (repo / "snapshots").mkdir(parents=True)
    fifo(repo / "refs" / "main")
    found = returns(lambda: model.resolve("org/name", {"HF_HUB_CACHE": str(tmp_path / "hub")}))
    assert found.get("revision") is None


def test_a_fifo_in_a_vllm_tree_does_not_block_reading_its_source(tmp_path):
    pipe = fifo(tmp_path / "vllm" / "engine" / "arg_utils.py")
    assert returns(lambda: vllm_source.read(str(pipe))) is None
    assert returns(lambda: vllm_index._read(str(pipe))) is None


def test_a_fifo_entry_points_txt_does_not_block_loading_the_rules(tmp_path):
    fifo(tmp_path / "gpudoctor_evil-1.0.dist-info" / "entry_points.txt")
    assert returns(lambda: plugins._entry_points([str(tmp_path)])) == []


def test_a_fifo_version_txt_in_cuda_home_does_not_block_the_cuda_probe(tmp_path):
    fifo(tmp_path / "version.txt")
    assert returns(lambda: cuda.toolkit_version_file(str(tmp_path))) is None


def test_a_fifo_at_rays_address_file_does_not_block_cluster(tmp_path, monkeypatch):
    """/tmp/ray/ray_current_cluster is in /tmp: anyone may put a FIFO there, and Ray's own reader would block too."""
    monkeypatch.setattr(ray_probe, "RAY_ADDRESS_FILE", str(fifo(tmp_path / "ray_current_cluster")))
    assert returns(ray_probe._current_cluster) is None


def test_a_fifo_config_file_is_a_config_error(tmp_path):
    pipe = fifo(tmp_path / "gpudoctor.toml")
    try:
        returns(lambda: config._load(str(pipe)))
    except config.ConfigError as exc:
        assert "FIFO" in str(exc)
    else:
        raise AssertionError("a FIFO was read as a config file")
