"""Time `gpudoctor check` against `python -m torch.utils.collect_env` on this machine.

Each command runs --runs times as a fresh process; we report the median wall time and
the median peak RSS of the process (ru_maxrss from wait4), then the ratios. Budget on an
H200 host: gpudoctor ≤ 0.25 s and ≤ 60 MB (issues 26 and 34; 0.35 s before).

    python benchmarks/check_vs_collect_env.py --runs 7 [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Dict, List, Optional

BUDGET_WALL_S = 0.25
BUDGET_RSS_MB = 60.0


def measure(argv: List[str], runs: int) -> Optional[Dict[str, float]]:
    walls, rss = [], []
    for _ in range(runs):
        start = time.perf_counter()
        try:
            proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, "NO_COLOR": "1"})
        except OSError:
            return None
        _, status, usage = os.wait4(proc.pid, 0)
        walls.append(time.perf_counter() - start)
        rss.append(usage.ru_maxrss / 1024.0)  # KiB on Linux
        proc.returncode = os.waitstatus_to_exitcode(status) if hasattr(os, "waitstatus_to_exitcode") else status
        if proc.returncode not in (0, 1):
            print(f"warning: {' '.join(argv)} exited {proc.returncode}", file=sys.stderr)
    return {"wall_s": statistics.median(walls), "rss_mb": statistics.median(rss), "runs": runs}


def torch_available(python: str) -> bool:
    probe = "import importlib.util, sys; sys.exit(0 if importlib.util.find_spec('torch') else 1)"
    return subprocess.run([python, "-c", probe]).returncode == 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--python", default=sys.executable, help="interpreter for both commands")
    parser.add_argument("--json", metavar="FILE", help="also write the numbers as JSON")
    args = parser.parse_args()

    results: Dict[str, Optional[Dict[str, float]]] = {
        "python -c pass": measure([args.python, "-c", "pass"], args.runs),
        "gpudoctor check": measure([args.python, "-m", "gpudoctor", "check"], args.runs),
    }
    if torch_available(args.python):
        results["torch collect_env"] = measure([args.python, "-m", "torch.utils.collect_env"], max(3, args.runs // 2))
    else:
        results["torch collect_env"] = None

    print(f"{'command':<20} {'wall (median)':>14} {'peak RSS':>10}")
    for name, numbers in results.items():
        if numbers is None:
            print(f"{name:<20} {'(torch not installed)':>25}")
        else:
            print(f"{name:<20} {numbers['wall_s']:>12.3f} s {numbers['rss_mb']:>7.1f} MB")
    ours, theirs = results["gpudoctor check"], results["torch collect_env"]
    if ours and theirs:
        print(f"ratio collect_env / gpudoctor: wall {theirs['wall_s'] / ours['wall_s']:.1f}x, RSS {theirs['rss_mb'] / ours['rss_mb']:.1f}x")
    if ours:
        within = ours["wall_s"] <= BUDGET_WALL_S and ours["rss_mb"] <= BUDGET_RSS_MB
        print(f"budget {BUDGET_WALL_S} s / {BUDGET_RSS_MB:.0f} MB: {'within' if within else 'OVER'}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(results, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
