"""Time `gpudoctor fix --format json` (the plan) against `gpudoctor check` on one venv, and the
safe apply's overhead beyond pip's own work (issue 29).

A throwaway venv (``python -m venv``, with pip) gets a locally built flash-attn-4 wheel
(FlashAttention-4's flash_attn/cute files; on ``--gpu A100`` GD401 plans its uninstall); with
``--venv`` an existing one is used for the plan timing only. Each command runs ``--runs`` times
as a fresh process; reported: the median wall time of each and the difference (target: the plan
within check + 0.2 s). Then ``--runs`` times each: a bare ``PY -m pip uninstall -y flash-attn-4``
(reinstalled between runs) against gpudoctor's apply (the check in the venv's interpreter, the
import baseline, the stash, pip, the verification, dropping the stash).

    python benchmarks/fix_plan_vs_check.py [--venv PATH] [--gpu A100] [--runs 5] [--json out.json]
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Dict, List

REPO = Path(__file__).resolve().parent.parent
FILES = {
    "flash_attn/cute/__init__.py": '"""FlashAttention-4 (CuTe DSL)."""\n',
    "flash_attn/cute/interface.py": "def flash_attn_func(*args):\n    pass\n",
}


def fa4_wheel(where: Path) -> Path:
    info = "flash_attn_4-4.0.0b36.dist-info"
    contents = dict(FILES)
    contents[f"{info}/METADATA"] = "Metadata-Version: 2.1\nName: flash-attn-4\nVersion: 4.0.0b36\n"
    contents[f"{info}/WHEEL"] = "Wheel-Version: 1.0\nGenerator: bench\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    rows = []
    for path, text in contents.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        rows.append(f"{path},sha256={digest},{len(text.encode())}")
    contents[f"{info}/RECORD"] = "\n".join(rows + [f"{info}/RECORD,,"]) + "\n"
    wheel = where / "flash_attn_4-4.0.0b36-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in contents.items():
            archive.writestr(path, text)
    return wheel


def wall(argv: List[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=str(REPO))
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--venv")
    parser.add_argument("--gpu", default="A100")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="gd-fix-bench-"))
    venv = Path(args.venv) if args.venv else scratch / "venv"
    python = str(venv / "bin" / "python")
    wheel = fa4_wheel(scratch)
    if not args.venv:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
    install = [python, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--force-reinstall", str(wheel)]
    subprocess.run(install, check=True, capture_output=True)
    me = [sys.executable, "-m", "gpudoctor"]
    common = ["--python", python, "--gpu", args.gpu]
    wall(me + ["check"] + common)  # warm the scan cache and the page cache once
    check = [wall(me + ["check"] + common + ["--format", "json"]) for _ in range(args.runs)]
    plan = [wall(me + ["fix"] + common + ["--format", "json"]) for _ in range(args.runs)]
    out: Dict[str, float] = {"check_s": statistics.median(check), "plan_s": statistics.median(plan)}
    out["plan_minus_check_s"] = out["plan_s"] - out["check_s"]
    if not args.venv:
        sys.path.insert(0, str(REPO))
        from gpudoctor import actions, runner, stack_fix

        bare, safe = [], []
        for _ in range(args.runs):
            subprocess.run(install, check=True, capture_output=True)
            bare.append(wall([python, "-m", "pip", "uninstall", "-y", "flash-attn-4"]))
            subprocess.run(install, check=True, capture_output=True)
            action = actions.StackAction("uninstall", "flash-attn-4", "4.0.0b36", python, "GD401", "bench")
            start = time.perf_counter()
            seen = stack_fix.check(action, runner.run)
            result = stack_fix.apply(action, seen.state or {}, runner.run)
            safe.append(time.perf_counter() - start)
            assert result.status == stack_fix.DONE, result.detail
        out.update(pip_uninstall_s=statistics.median(bare), safe_apply_s=statistics.median(safe))
        out["apply_overhead_s"] = out["safe_apply_s"] - out["pip_uninstall_s"]
    for key, value in out.items():
        print(f"{key:>20}: {value:.3f}")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    subprocess.run(["rm", "-rf", str(scratch)])
    return 0


if __name__ == "__main__":
    os.environ.setdefault("NO_COLOR", "1")
    sys.exit(main())
