"""The vLLM peer: vLLM 0.33.0's real serving stack over a scripted engine core, on 127.0.0.1.

    peer = VllmPeer("--reasoning-parser", "qwen3").start()   # builds the venv once per cache
    ... gpudoctor smoke --url peer.url ...
    peer.stop()

The venv (real vLLM wheel, CPU torch, vLLM's own non-GPU dependencies) and the tiny model
directory are built once into the test cache (tests/realenv.py); each peer is one
``vllm serve`` process (serve.py) started with the flags a test wants.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Dict, Optional

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import realenv  # noqa: E402

VLLM = "0.33.0"
MODEL_NAME = "Qwen/Qwen3-8B"  # what the peer serves it as: a Qwen3 reasoning model
# Installed from their wheels without dependencies: xgrammar would pull triton (a GPU
# stack), the other two a second torch.
NO_DEPS = ("xgrammar==0.2.8", "apache-tvm-ffi==0.1.11", "compressed-tensors==0.17.0", "depyf==0.20.0")
# vLLM requirements that are GPU kernels or media codecs, never imported by the HTTP front end.
SKIP = ("tilelang", "torchcodec", "pynvvideocodec", "quack-kernels", "tokenspeed-mla", "humming-kernels", "nvtx",
        "fastsafetensors", "instanttensor", "numba", "opencv-python-headless", "mistral-common",
        "xgrammar", "apache-tvm-ffi", "compressed-tensors", "depyf")
START_TIMEOUT_S = 420.0
HEALTHY_FLAGS = ("--reasoning-parser", "qwen3", "--enable-auto-tool-choice", "--tool-call-parser", "hermes",
                 "--speculative-config", '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}',
                 "--enable-per-request-metrics")


class PeerUnavailable(RuntimeError):
    pass


def python() -> Path:
    """The peer venv's interpreter (built once; later calls find it cached)."""
    vllm_wheel = realenv.wheel("vllm", VLLM)
    torch_deps = realenv.requires_dist(realenv.wheel("torch", "2.13.0"))  # sympy, networkx, jinja2, …
    extra = realenv.requires_dist(vllm_wheel, exclude=SKIP) + torch_deps + ["mistral_common>=1.11.6"]
    return realenv.venv_with(f"vllm=={VLLM}", "torch==2.13.0", *NO_DEPS, extra=extra)


def model_dir(py: Path) -> Path:
    """The tiny Qwen3-shaped model directory (model.py), built once with the peer's tokenizers."""
    target = realenv.CACHE / "vllm-peer-model" / "qwen3-peer"
    done = target / ".complete"
    if not done.exists():
        subprocess.run([str(py), str(HERE / "model.py"), str(target)], check=True, timeout=300)
        done.write_text("ok", encoding="utf-8")
    return target


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class VllmPeer:
    def __init__(self, *flags: str, scenario: Optional[Dict] = None, max_model_len: int = 4096):
        self.flags = flags
        self.scenario = scenario or {}
        self.max_model_len = max_model_len
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: Optional[subprocess.Popen] = None
        self.tmp = tempfile.TemporaryDirectory(prefix="vllm-peer-")
        self.ledger = Path(self.tmp.name) / "ledger.json"
        self.log = Path(self.tmp.name) / "server.log"

    def start(self) -> "VllmPeer":
        py = python()
        model = model_dir(py)
        argv = [str(py), str(HERE / "serve.py"), "serve", str(model), "--served-model-name", MODEL_NAME,
                "--host", "127.0.0.1", "--port", str(self.port), "--max-model-len", str(self.max_model_len), *self.flags]
        env = dict(os.environ, VLLM_TARGET_DEVICE="cpu", PEER_SCENARIO=json.dumps(self.scenario),
                   PEER_LEDGER=str(self.ledger), VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1",
                   HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", VLLM_LOGGING_LEVEL="WARNING")
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise PeerUnavailable(f"vllm serve exited with {self.proc.returncode}:\n{self.tail()}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as response:
                    if response.status == 200:
                        return self
            except OSError:
                pass
            time.sleep(0.5)
        self.stop()
        raise PeerUnavailable(f"vllm serve did not become healthy in {START_TIMEOUT_S:g} s:\n{self.tail()}")

    def tail(self, n: int = 4000) -> str:
        try:
            return self.log.read_text(encoding="utf-8", errors="replace")[-n:]
        except OSError:
            return ""

    def counted(self) -> Dict[str, int]:
        """What the scripted engine core drafted and accepted, in total (its own ledger)."""
        return json.loads(self.ledger.read_text(encoding="utf-8"))

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.tmp.cleanup()
