"""smoke's reading of SGLang's /metrics against the text SGLang's own collector writes.

SGLang's HTTP server cannot be run here over a scripted scheduler the way vLLM's front end is
(tests/vllm_peer/): its tokenizer manager talks to the scheduler and detokenizer processes
over ZMQ with pickled request objects, and ServerArgs asks the machine for its GPU while it is
built. Its metrics collector, though, is plain Python over prometheus_client: in a CPU venv of
sglang 0.5.23 (realenv.parser_venv) the test drives ``TokenizerMetricsCollector`` as the
tokenizer manager does for two finished speculative requests, and keeps prometheus_client's
exposition text before and after. gpudoctor's parser (probes/smoke/metrics.py) must read from
it exactly what was fed: verify passes, generated tokens, TTFT, and tokens/s from SGLang's
per-token inter-token histogram. The texts are computed once per oracle and kept in the cache.
"""

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import realenv  # noqa: E402

from gpudoctor.probes.smoke import metrics as prom  # noqa: E402

pytestmark = pytest.mark.real

VERSION = "0.5.23"
COLLECTOR = r'''
import importlib.abc, importlib.machinery, json, sys, types

class _Whatever(type):
    def __getattr__(cls, name):  # InterpolationMode.NEAREST_EXACT and the like: a placeholder, never called
        if name.startswith("__"):
            raise AttributeError(name)
        return cls


class _Anything(types.ModuleType):
    """torchvision stands in: the collector's module imports SGLang's model configs, which import
    torchvision at import time, and the CPU venv has none (realenv leaves the CUDA-built one out).
    Nothing of it is called here: the collector is plain Python over prometheus_client."""
    __path__ = []
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Whatever(name, (), {"__init__": lambda self, *a, **k: None, "__call__": lambda self, *a, **k: None})

class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path=None, target=None):
        if name == "torchvision" or name.startswith("torchvision."):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None
    def create_module(self, spec):
        return _Anything(spec.name)
    def exec_module(self, module):
        module.__version__ = "0.0.0"

try:
    import torchvision  # noqa: F401
except ImportError:
    sys.meta_path.insert(0, _Finder())
from prometheus_client import REGISTRY, generate_latest
from sglang.srt.observability.metrics_collector import TokenizerMetricsCollector

labels = {"model_name": "Qwen/Qwen3-8B"}
collector = TokenizerMetricsCollector(server_args=None, labels=labels)
before = generate_latest(REGISTRY).decode()
# request 1: streamed, TTFT 0.040 s, then 40 tokens over 12 verify passes (3-4 tokens each, 0.012 s a pass)
collector.observe_time_to_first_token(labels, 0.040, stream=True)
for tokens in [4, 3, 4, 3, 4, 3, 4, 3, 4, 3, 3]:
    collector.observe_inter_token_latency(labels, 0.012, tokens)
collector.observe_one_finished_request(labels, 21, 39 + 1, 0, 0.2, False, spec_verify_ct=12, is_streaming=True)
# request 2: not streamed, TTFT 0.060 s, 30 tokens over 10 verify passes
collector.observe_time_to_first_token(labels, 0.060, stream=False)
for tokens in [3, 3, 3, 3, 3, 3, 3, 3, 3, 2]:
    collector.observe_inter_token_latency(labels, 0.012, tokens)
collector.observe_one_finished_request(labels, 21, 29 + 1, 0, 0.2, False, spec_verify_ct=10, is_streaming=False)
print(json.dumps({"before": before, "after": generate_latest(REGISTRY).decode()}))
'''


def collector_texts():
    digest = hashlib.sha256(COLLECTOR.encode()).hexdigest()[:12]
    cache = realenv.CACHE / "oracle" / f"sglang-metrics-{VERSION}-{digest}.json"
    if cache.exists():
        return json.loads(cache.read_text())
    python = realenv.parser_venv(VERSION, engine="sglang", torch="2.13.0")
    try:
        done = subprocess.run([str(python), "-c", COLLECTOR], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        texts = json.loads(done.stdout.strip().splitlines()[-1])
    finally:
        realenv.discard(python)
    cache.parent.mkdir(parents=True, exist_ok=True)
    partial = cache.with_suffix(f".{os.getpid()}.part")
    partial.write_text(json.dumps(texts))
    partial.replace(cache)
    return texts


def test_smoke_reads_what_sglangs_own_collector_writes():
    texts = collector_texts()
    before, bad_before = prom.parse(texts["before"])
    after, bad_after = prom.parse(texts["after"])
    assert bad_before == bad_after == 0
    # speculative decoding: 22 verify passes made 70 tokens (SGLang's accept length, bonus token included)
    delta = prom.spec_delta(prom.spec_counters(before), prom.spec_counters(after))
    assert delta["scheme"] == "sglang" and delta["drafts"] == 22 and delta["generated_tokens"] == 70
    assert delta["mean_acceptance_length"] == pytest.approx(70 / 22, abs=1e-4)
    # timings: TTFT over both requests; tokens/s from the per-token inter-token histogram
    timing = prom.timing_delta(prom.request_timing(before), prom.request_timing(after))
    assert timing["scheme"] == "sglang" and timing["requests"] == 2
    assert timing["ttft_ms"] == pytest.approx(50.0, abs=0.01)
    passes, tokens = 11 + 10, 39 + 29
    assert timing["decode_tokens_per_s"] == pytest.approx(tokens / (passes * 0.012), rel=1e-3)
    assert "steps" not in timing  # SGLang counts that histogram per token, not per step
