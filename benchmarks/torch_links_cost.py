"""What checking every torch-linked extension costs `gpudoctor check`, warm and cold (issue 26).

Runs `gpudoctor check --format json` as a fresh process: --runs times with a warm scan cache, then
--runs times with an empty one (a new GPUDOCTOR_CACHE_DIR each time; with --drop-caches and root,
the page cache dropped too). Reports the median wall time and peak RSS (ru_maxrss from wait4), and
from the report's own facts what the link check did: torch-linked shared objects checked, symbol
checks read (cold) or taken from the cache (warm), files read, its own elapsed time, and whether
every torch-linked object was checked (no "checked the first N" cut). Then the collect_env
comparison, as benchmarks/check_vs_collect_env.py makes it.

Budget on the H200 (issue 26): warm <= 0.25 s and <= 60 MB, cold <= 0.8 s.

    python benchmarks/torch_links_cost.py [--runs 5] [--python VENV_PYTHON] [--drop-caches] [--json out.json]
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
from typing import Any, Dict, List, Optional

WARM_WALL_S = 0.25
WARM_RSS_MB = 60.0
COLD_WALL_S = 0.8


def once(argv: List[str], env: Dict[str, str]) -> Dict[str, Any]:
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    out = proc.stdout.read() if proc.stdout else b""
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    rc = os.waitstatus_to_exitcode(status) if hasattr(os, "waitstatus_to_exitcode") else status
    links: Dict[str, Any] = {}
    try:
        facts = json.loads(out)["snapshot"]["facts"]
        fact = facts.get("torch.extensions") or {}
        value = fact.get("value") or {}
        stats = value.get("stats") or {}
        items = value.get("extensions") or []
        links = {"status": fact.get("status"), "extensions": len(items), "detail": fact.get("detail"),
                 "every_one_checked": "checked the first" not in str(fact.get("detail") or ""),
                 "broken": sum(1 for e in items if e.get("unresolved") or e.get("versions_missing")
                               or (e.get("symbols") or {}).get("missing_count")),
                 **{k: stats.get(k) for k in ("files_read", "files_cached", "symbol_checks_read", "elapsed_s")}}
    except (ValueError, KeyError, TypeError):
        links = {"status": "unreadable report"}
    return {"wall_s": wall, "rss_mb": usage.ru_maxrss / 1024.0, "rc": rc, "links": links}


def drop_page_cache() -> bool:
    try:
        subprocess.run(["sync"], check=False, timeout=60)
        with open("/proc/sys/vm/drop_caches", "w", encoding="ascii") as handle:
            handle.write("3\n")
        return True
    except OSError:
        return False


def summary(runs: List[Dict[str, Any]]) -> Dict[str, Any]:
    return {"wall_s": round(statistics.median(r["wall_s"] for r in runs), 3),
            "rss_mb": round(statistics.median(r["rss_mb"] for r in runs), 1),
            "runs": len(runs), "links": runs[-1]["links"], "exit_codes": sorted({r["rc"] for r in runs})}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--python", help="the environment to check (check --python); default: this interpreter's")
    parser.add_argument("--drop-caches", action="store_true", help="drop the page cache before each cold run (root)")
    parser.add_argument("--no-collect-env", action="store_true", help="skip the collect_env comparison")
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args()

    check = [sys.executable, "-m", "gpudoctor", "check", "--format", "json"] + (["--python", args.python] if args.python else [])
    scratch = tempfile.mkdtemp(prefix="gd-links-bench-")
    env = {**os.environ, "NO_COLOR": "1", "GPUDOCTOR_CACHE_DIR": os.path.join(scratch, "warm")}
    try:
        once(check, env)  # fills the warm cache
        warm = [once(check, env) for _ in range(args.runs)]
        cold = []
        dropped: Optional[bool] = None
        for i in range(args.runs):
            cold_env = {**env, "GPUDOCTOR_CACHE_DIR": os.path.join(scratch, f"cold-{i}")}
            if args.drop_caches:
                dropped = drop_page_cache()
            cold.append(once(check, cold_env))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    results: Dict[str, Any] = {"warm": summary(warm), "cold": summary(cold), "page_cache_dropped": dropped}
    python = args.python or sys.executable
    if not args.no_collect_env:
        done = [once([python, "-m", "torch.utils.collect_env"], {**os.environ}) for _ in range(max(1, args.runs // 2))]
        if all(r["rc"] == 0 for r in done):
            results["collect_env"] = {"wall_s": round(statistics.median(r["wall_s"] for r in done), 3),
                                      "rss_mb": round(statistics.median(r["rss_mb"] for r in done), 1)}
    for name in ("warm", "cold"):
        r = results[name]
        links = r["links"]
        print(f"{name:<5} {r['wall_s']:.3f} s {r['rss_mb']:.1f} MB (exit {r['exit_codes']}); torch-linked objects "
              f"{links.get('extensions')} checked, every one: {links.get('every_one_checked')}, broken {links.get('broken')}; "
              f"symbol checks read {links.get('symbol_checks_read')}, files read {links.get('files_read')} / cached "
              f"{links.get('files_cached')}, link check {links.get('elapsed_s')} s")
    if "collect_env" in results:
        ce = results["collect_env"]
        print(f"collect_env {ce['wall_s']:.3f} s {ce['rss_mb']:.1f} MB: {ce['wall_s'] / results['warm']['wall_s']:.1f}x the warm check")
    within = (results["warm"]["wall_s"] <= WARM_WALL_S and results["warm"]["rss_mb"] <= WARM_RSS_MB
              and results["cold"]["wall_s"] <= COLD_WALL_S)
    print(f"budget warm {WARM_WALL_S} s / {WARM_RSS_MB:.0f} MB, cold {COLD_WALL_S} s: {'within' if within else 'OVER'}"
          + ("" if dropped is None else f" (page cache dropped: {dropped})"))
    results["within_budget"] = within
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(results, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
