"""The plan against `check`, and the safe apply's overhead, on a real repair (issue 29).

The environment is the real vLLM 0.33.0 closure of the test tier (tests/realenv.py: `pip install
vllm==0.33.0`'s 180-odd wheels, sparse), copied with hard links and given pip, with lark 1.2.1
where vLLM pins lark==1.2.2: GD503 plans `PY -m pip install lark==1.2.2` (from PyPI, through this
machine's pip configuration). Each command runs ``--runs`` times as a fresh process:

- ``check_s`` / ``plan_s``: `gpudoctor check --python PY --format json` and `gpudoctor fix --python
  PY --format json --no-resolve` (no network: the plan is the rules plus one `dist_state` read per
  action); ``plan_sized_s``: the same plan with each change resolved by pip (`--dry-run --report`)
  and its downloads sized (a HEAD and Range reads of the wheel's directory), as `fix` shows it;
- ``pip_s``: the bare `PY -m pip install lark==1.2.2` (lark 1.2.1 put back between runs);
- ``safe_apply_s``: gpudoctor's check (the interpreter asked again, pip's version, the pip-process
  scan) + resolve (`pip install --dry-run --report`) + stash + pip + verification, with
  ``resolve_s`` timed on its own; ``apply_overhead_s`` = safe_apply_s − pip_s.

    python benchmarks/fix_real_repair.py [--runs 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "tests" / "real"))


def wall(argv: List[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=str(REPO))
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json")
    args = parser.parse_args()
    import realenv
    from test_real_fix import writable_copy

    from gpudoctor import actions, runner, stack_fix, stack_install

    python = writable_copy(realenv.release_venv("0.33.0"), "bench")
    py = str(python)
    old = [py, "-m", "pip", "install", "-q", "--no-deps", "lark==1.2.1"]
    try:
        subprocess.run(old, check=True, capture_output=True)
        me = [sys.executable, "-m", "gpudoctor"]
        common = ["--python", py, "--format", "json", "--timeout", "120"]
        wall(me + ["check"] + common)  # warm the scan cache and the page cache once
        check = [wall(me + ["check"] + common) for _ in range(args.runs)]
        plan = [wall(me + ["fix", "--no-resolve"] + common) for _ in range(args.runs)]
        sized = [wall(me + ["fix"] + common) for _ in range(args.runs)]
        out: Dict[str, float] = {"check_s": statistics.median(check), "plan_s": statistics.median(plan),
                                 "plan_sized_s": statistics.median(sized)}
        out["plan_minus_check_s"] = out["plan_s"] - out["check_s"]
        out["sizes_s"] = out["plan_sized_s"] - out["plan_s"]
        bare, safe, resolve = [], [], []
        action = actions.StackAction("install", "lark", "1.2.1", py, "GD503", "bench", ("lark==1.2.2",))
        for _ in range(args.runs):
            subprocess.run(old, check=True, capture_output=True)
            bare.append(wall([py, "-m", "pip", "install", "-q", "lark==1.2.2"]))
            subprocess.run(old, check=True, capture_output=True)
            start = time.perf_counter()
            stack_install.resolve(action, runner.run)
            resolve.append(time.perf_counter() - start)
            start = time.perf_counter()
            seen = stack_install.check(action, runner.run)
            result = stack_install.apply(action, seen.state or {}, runner.run)
            safe.append(time.perf_counter() - start)
            assert result.status == stack_fix.DONE, result.detail
        out.update(pip_s=statistics.median(bare), safe_apply_s=statistics.median(safe), resolve_s=statistics.median(resolve))
        out["apply_overhead_s"] = out["safe_apply_s"] - out["pip_s"]
        out["overhead_without_resolve_s"] = out["apply_overhead_s"] - out["resolve_s"]
    finally:
        shutil.rmtree(python.parent.parent, ignore_errors=True)
    for key, value in out.items():
        print(f"{key:>28}: {value:.3f}")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("NO_COLOR", "1")
    sys.exit(main())
