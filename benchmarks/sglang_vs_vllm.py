"""`check --python` and `preflight` of an SGLang venv against the same on a vLLM venv, in one run.

Issue 25: checking an SGLang install costs no more than checking a vLLM one. The venvs default
to the real tier's closures (tests/realenv.py release_venv: every wheel `pip install sglang==0.5.23`
/ `pip install vllm==0.33.0` installs, sparse, hard-linked), so both sides hold a full CUDA
stack; --sglang-venv / --vllm-venv name others. Both are judged against the same target
(--gpu H200) so the same rules run.

    python benchmarks/sglang_vs_vllm.py [--runs 7] [--sglang-venv V] [--vllm-venv V] [--json out.json]

Measured per command (fresh processes, bytecode written as users run it), the two engines
interleaved run by run so that a busy machine slows both alike:
- check, warm (scan cache filled) and cold (an empty GPUDOCTOR_CACHE_DIR each run);
- preflight of `sglang serve MODEL --tp 1 --mem-fraction-static 0.85` against
  `vllm serve MODEL --tensor-parallel-size 1 --gpu-memory-utilization 0.85`, warm.
Reported: median wall and CPU time (user + system, children included) and SGLang / vLLM ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))


def once(argv: List[str], env: Dict[str, str]) -> Dict[str, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, env=env)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode not in (0, 1):
        print(f"warning: {' '.join(argv[:6])} … exited {done.returncode}: {done.stderr[-300:]!r}", file=sys.stderr)
    return {"wall_s": wall, "cpu_s": after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime}


def median(samples: List[Dict[str, float]]) -> Dict[str, float]:
    return {"wall_s": round(statistics.median(s["wall_s"] for s in samples), 3),
            "cpu_s": round(statistics.median(s["cpu_s"] for s in samples), 3), "runs": len(samples)}


def tier_venv(engine: str, version: str) -> str:
    sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))
    import realenv

    python = realenv.release_venv(version, engine=engine)
    return str(python.parent.parent)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--sglang-venv", help="default: the real tier's sglang 0.5.23 closure")
    parser.add_argument("--vllm-venv", help="default: the real tier's vllm 0.33.0 closure")
    parser.add_argument("--gpu", default="H200")
    parser.add_argument("--json", metavar="FILE")
    options = parser.parse_args()
    venvs = {"sglang": options.sglang_venv or tier_venv("sglang", "0.5.23"), "vllm": options.vllm_venv or tier_venv("vllm", "0.33.0")}
    pythons = {engine: os.path.join(venv, "bin", "python") for engine, venv in venvs.items()}
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["NO_COLOR"] = "1"
    warm_cache = tempfile.mkdtemp(prefix="gpudoctor-bench-warm-")
    cold_cache = tempfile.mkdtemp(prefix="gpudoctor-bench-cold-")
    gd = [sys.executable, "-m", "gpudoctor"]
    samples: Dict[str, List[Dict[str, float]]] = {}
    try:
        with tempfile.TemporaryDirectory() as model:
            with open(os.path.join(model, "config.json"), "w") as handle:
                json.dump({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "max_position_embeddings": 40960,
                           "num_attention_heads": 32, "num_key_value_heads": 8, "hidden_size": 4096, "num_hidden_layers": 36,
                           "head_dim": 128, "vocab_size": 151936, "torch_dtype": "bfloat16"}, handle)
            commands = {
                "sglang": ["sglang", "serve", model, "--tp", "1", "--mem-fraction-static", "0.85"],
                "vllm": ["vllm", "serve", model, "--tensor-parallel-size", "1", "--gpu-memory-utilization", "0.85"],
            }

            def argv(engine: str, what: str) -> List[str]:
                if what == "preflight":
                    return gd + ["preflight", "--python", pythons[engine], "--gpu", options.gpu, "--"] + commands[engine]
                return gd + ["check", "--python", pythons[engine], "--gpu", options.gpu]

            warm_env = dict(env, GPUDOCTOR_CACHE_DIR=warm_cache)
            cold_env = dict(env, GPUDOCTOR_CACHE_DIR=cold_cache)
            for engine in venvs:  # warm the page cache, the scan cache, the flag cache, bytecode
                for what in ("check", "preflight"):
                    once(argv(engine, what), warm_env)
            for _ in range(options.runs):
                for engine in venvs:
                    samples.setdefault(f"{engine} check warm", []).append(once(argv(engine, "check"), warm_env))
                    samples.setdefault(f"{engine} preflight warm", []).append(once(argv(engine, "preflight"), warm_env))
                    shutil.rmtree(cold_cache, ignore_errors=True)
                    os.makedirs(cold_cache)
                    samples.setdefault(f"{engine} check cold", []).append(once(argv(engine, "check"), cold_env))
    finally:
        shutil.rmtree(warm_cache, ignore_errors=True)
        shutil.rmtree(cold_cache, ignore_errors=True)
    results = {name: median(values) for name, values in samples.items()}
    ratios = {what: {"wall": round(results[f"sglang {what}"]["wall_s"] / results[f"vllm {what}"]["wall_s"], 2),
                     "cpu": round(results[f"sglang {what}"]["cpu_s"] / max(results[f"vllm {what}"]["cpu_s"], 1e-6), 2)}
              for what in ("check warm", "check cold", "preflight warm")}
    for name, numbers in results.items():
        print(f"{name:24s} {numbers['wall_s']:7.3f} s wall  {numbers['cpu_s']:7.3f} s CPU  ({numbers['runs']} runs)")
    for what, ratio in ratios.items():
        print(f"SGLang / vLLM, {what:15s} {ratio['wall']:.2f}x wall, {ratio['cpu']:.2f}x CPU")
    print(f"load average {os.getloadavg()[0]:.1f}; venvs: {venvs}")
    if options.json:
        with open(options.json, "w") as handle:
            json.dump({"results": results, "ratios": ratios, "venvs": venvs, "gpu": options.gpu,
                       "load_average": os.getloadavg()}, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
