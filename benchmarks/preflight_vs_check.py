"""Warm `gpudoctor preflight --python VENV -- vllm serve MODEL` against warm `gpudoctor check --python VENV`.

Preflight does what check does plus the launch command: the engine's flag definitions are read
from its source (cached on disk, keyed by the files read: probes/launch/vllm_args_cache.py for
vLLM, probes/launch/sglang_args_cache.py for SGLang), the model's config. Target (issue 28):
warm preflight costs no more than warm check + 0.1 s.

    python benchmarks/preflight_vs_check.py --venv /path/to/venv-with-vllm [--runs 9]
    python benchmarks/preflight_vs_check.py --venv /path/to/venv-with-sglang --engine sglang

Each command runs once to warm the caches, then --runs times as a fresh process (bytecode
written: PYTHONDONTWRITEBYTECODE is dropped, as users run it). Reported: median wall time and
median CPU time (user + system of the process and its children: the kernel scan's child).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List


def measure(argv: List[str], runs: int, env: Dict[str, str]) -> Dict[str, float]:
    subprocess.run(argv, capture_output=True, env=env)  # warm: page cache, scan cache, flag cache, bytecode
    walls, cpus = [], []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run(argv, capture_output=True, env=env)
        walls.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return {"wall_s": round(statistics.median(walls), 3), "cpu_s": round(statistics.median(cpus), 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--venv", required=True, help="a venv with vLLM installed (pip install --no-deps vllm==…)")
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--engine", choices=("vllm", "sglang"), default="vllm", help="whose serve command preflight reads")
    options = parser.parse_args()
    python = os.path.join(options.venv, "bin", "python")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    with tempfile.TemporaryDirectory() as model:
        with open(os.path.join(model, "config.json"), "w") as handle:
            json.dump({"architectures": ["LlamaForCausalLM"], "max_position_embeddings": 8192, "num_attention_heads": 32,
                       "num_key_value_heads": 8, "hidden_size": 4096, "num_hidden_layers": 32, "torch_dtype": "bfloat16"}, handle)
        gd = [sys.executable, "-m", "gpudoctor"]
        check = measure(gd + ["check", "--python", python], options.runs, env)
        serve = ["vllm", "serve", model] if options.engine == "vllm" else ["sglang", "serve", "--model-path", model]
        preflight = measure(gd + ["preflight", "--python", python, "--"] + serve, options.runs, env)
    print(json.dumps({"check": check, "preflight": preflight,
                      "extra_wall_s": round(preflight["wall_s"] - check["wall_s"], 3),
                      "extra_cpu_s": round(preflight["cpu_s"] - check["cpu_s"], 3),
                      "ratio_wall": round(preflight["wall_s"] / check["wall_s"], 2)}, indent=1))


if __name__ == "__main__":
    main()
