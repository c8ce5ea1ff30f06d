"""Time `gpudoctor check --python VENV/bin/python` against `VENV/bin/python -m torch.utils.collect_env`.

The use the issue names: one gpudoctor (this interpreter) inspecting the venv vLLM/torch lives
in, every CUDA binary on that venv's path scanned (probes/kernel_scan.py), against what people
run today. Each command runs --runs times as a fresh process; reported: median wall time and
median peak RSS (ru_maxrss from wait4) of each, the ratio, and gpudoctor cold (empty scan
cache: every binary's headers read) and warm (scan cache filled). Target: ≥ 10× faster than
collect_env on a venv with CPU torch (issue 13).

    python benchmarks/check_python_vs_collect_env.py --venv /path/to/venv [--runs 7] [--json out.json] [--byte-compile]

How gpudoctor is installed matters: a pip install byte-compiles it; an editable install under
PYTHONDONTWRITEBYTECODE=1 (this repo's dev machines) leaves every module to be compiled on
every run (~0.1 s). The output says which it measured; --byte-compile compiles the package
first (python -m compileall, as pip's install step does) so an editable checkout measures what
users run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List


def once(argv: List[str], env: Dict[str, str]) -> Dict[str, float]:
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    code = os.waitstatus_to_exitcode(status) if hasattr(os, "waitstatus_to_exitcode") else status
    if code not in (0, 1):
        print(f"warning: {' '.join(argv)} exited {code}", file=sys.stderr)
    # CPU time (user + sys, the child's reaped children included): steadier than wall on a busy box.
    return {"wall_s": wall, "rss_mb": usage.ru_maxrss / 1024.0, "cpu_s": usage.ru_utime + usage.ru_stime}


def summary(samples: List[Dict[str, float]]) -> Dict[str, float]:
    return {"wall_s": round(statistics.median(s["wall_s"] for s in samples), 4),
            "rss_mb": round(statistics.median(s["rss_mb"] for s in samples), 1),
            "cpu_s": round(statistics.median(s["cpu_s"] for s in samples), 4),
            "runs": len(samples), "all_wall_s": [round(s["wall_s"], 4) for s in samples]}


def package_dirs() -> List[str]:
    import importlib.util

    dirs = []
    for name in ("gpudoctor", "gpudoctor_rules"):
        spec = importlib.util.find_spec(name)  # finds, does not import
        if spec is not None and spec.submodule_search_locations:
            dirs.extend(spec.submodule_search_locations)
    return dirs


def bytecode_count():
    """(.py files of gpudoctor with a current .pyc, .py files)."""
    import importlib.util

    compiled = sources = 0
    for root in package_dirs():
        for directory, _, names in os.walk(root):
            for name in names:
                if name.endswith(".py"):
                    sources += 1
                    compiled += os.path.exists(importlib.util.cache_from_source(os.path.join(directory, name)))
    return compiled, sources


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--venv", required=True, help="a venv with torch (CPU torch is enough)")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--json", metavar="FILE")
    parser.add_argument("--byte-compile", action="store_true", help="compile gpudoctor's modules first, as pip install does")
    args = parser.parse_args()
    if args.byte_compile:
        subprocess.run([sys.executable, "-m", "compileall", "-q"] + package_dirs(), check=False, stdout=subprocess.DEVNULL)
    compiled, sources = bytecode_count()
    python = os.path.join(args.venv, "bin", "python")
    cache = tempfile.mkdtemp(prefix="gpudoctor-bench-cache-")
    env = {**os.environ, "NO_COLOR": "1", "GPUDOCTOR_CACHE_DIR": cache}
    check = [sys.executable, "-m", "gpudoctor", "check", "--python", python]
    try:
        cold = []
        for _ in range(max(3, args.runs // 2)):
            shutil.rmtree(cache, ignore_errors=True)
            cold.append(once(check, env))
        warm = [once(check, env) for _ in range(args.runs)]
        collect = [once([python, "-m", "torch.utils.collect_env"], env) for _ in range(max(3, args.runs // 2))]
        snap = subprocess.run([sys.executable, "-m", "gpudoctor", "snapshot", "--python", python],
                              capture_output=True, text=True, env=env, timeout=120)
        facts = json.loads(snap.stdout)["facts"] if snap.returncode == 0 else {}
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    results = {
        "gpudoctor check --python (warm scan cache)": summary(warm),
        "gpudoctor check --python (cold scan cache)": summary(cold),
        "torch collect_env": summary(collect),
    }
    ratio_warm = results["torch collect_env"]["wall_s"] / results["gpudoctor check --python (warm scan cache)"]["wall_s"]
    ratio_cold = results["torch collect_env"]["wall_s"] / results["gpudoctor check --python (cold scan cache)"]["wall_s"]
    ratio_cpu = results["torch collect_env"]["cpu_s"] / results["gpudoctor check --python (warm scan cache)"]["cpu_s"]
    scan = (facts.get("kernels.scan") or {}).get("value") or {}
    out = {"venv": args.venv, "gpudoctor_modules_with_pyc": f"{compiled}/{sources}", "results": results, "speedup_warm": round(ratio_warm, 1), "speedup_cold": round(ratio_cold, 1), "speedup_cpu_warm": round(ratio_cpu, 1),
           "target_speedup": 10, "shared_objects_scanned": scan.get("shared_objects"),
           "cuda_binaries": scan.get("cuda_binaries"), "load_average": os.getloadavg()}
    for name, numbers in results.items():
        print(f"{name:46s} {numbers['wall_s']:7.3f} s wall  {numbers['cpu_s']:7.3f} s CPU  {numbers['rss_mb']:7.1f} MB  ({numbers['runs']} runs)")
    print(f"collect_env / check: {ratio_warm:.1f}x warm, {ratio_cold:.1f}x cold, {ratio_cpu:.1f}x in CPU time (target >= 10x); "
          f"{scan.get('shared_objects')} shared objects, {scan.get('cuda_binaries')} CUDA binaries; load {os.getloadavg()[0]:.1f}; "
          f"gpudoctor modules with a .pyc: {compiled}/{sources}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(out, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
