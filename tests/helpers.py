"""Helpers shared by the test modules: run one rule, read a rendered document.

Plain functions, imported by name (``from helpers import outcome``); the fixtures every test
can use are in conftest.py. A helper used by two test files belongs here, not in a copy.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List

from gpudoctor import registry
from gpudoctor.engine import run_rules
from gpudoctor.rule import Outcome
from gpudoctor.snapshot import Snapshot


REPO = Path(__file__).resolve().parent.parent


def gd(*args: str, prefix=(), timeout: float = 120) -> "subprocess.CompletedProcess[str]":
    """``python -m gpudoctor ARGS`` in a fresh process (this interpreter, the repository as its working
    directory, no PYTHONPATH or NO_COLOR of the test run); a traceback in its output fails the test."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "NO_COLOR")}
    env["PYTHONIOENCODING"] = "utf-8"
    proc = subprocess.run(
        [*prefix, sys.executable, "-m", "gpudoctor", *args],
        capture_output=True, text=True, encoding="utf-8", env=env, cwd=str(REPO), stdin=subprocess.DEVNULL, timeout=timeout,
    )
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    return proc


def private_env(**variables: str) -> Dict[str, str]:
    """A small environment for a check (``variables``) that still holds the session's scan cache
    (conftest): never the user's ~/.cache."""
    return dict(variables, GPUDOCTOR_CACHE_DIR=os.environ["GPUDOCTOR_CACHE_DIR"])


def outcome(snap: Snapshot, rule_id: str) -> Outcome:
    """The outcome of one rule (by ID or name) on a snapshot."""
    meta = registry.find(rule_id)
    assert meta is not None, rule_id
    return run_rules(snap, [meta]).outcomes[0]


def findings(snap: Snapshot, rule_id: str) -> list:
    return outcome(snap, rule_id).findings


def doc_outcome(doc: Dict[str, Any], rule_id: str) -> Dict[str, Any]:
    """The one outcome of ``rule_id`` in a JSON document (``--format json``)."""
    (found,) = [o for o in doc["outcomes"] if o["id"] == rule_id]
    return found


def doc_findings(doc: Dict[str, Any], rule_id: str) -> List[Dict[str, Any]]:
    return [f for f in doc["findings"] if f["id"] == rule_id]


def script(directory: Path, name: str, body: str) -> Path:
    """An executable /bin/sh script standing in for a program (nvidia-smi, nvcc, a python)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return path


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(") ")[-1][:1] != "Z"
    except OSError:
        return False


def reaped(pid: int, grace: float = 2.0) -> bool:
    """A child of this process that is gone: waited for, not even a zombie left. forks.py gives a killed
    fork REAP_S (50 ms) to be reaped and never blocks longer; on a loaded machine (2 cores, the suite's
    workers) the kernel may take longer to finish it, and it is then left a zombie. So a fork that dies
    within ``grace`` counts (reaped here); one still running after it does not."""
    import time

    give_up = time.monotonic() + grace
    while True:
        try:
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return True  # it was dead, left unreaped: the 50 ms window passed under load
        except ChildProcessError:
            return True
        if time.monotonic() >= give_up:
            return False
        time.sleep(0.01)


# --- what a source file imports (the layering and registry tests) -------------------------------
def _package_of(path, root):
    """The package a file belongs to (what a relative import is relative to)."""
    parts = list(path.relative_to(root).parts[:-1])
    if parts and parts[0] == "rules":
        parts[0] = "gpudoctor_rules"
    return parts


def imports(path, root=REPO):
    """Every module name a file imports: import statements anywhere (functions too),
    relative imports resolved, and importlib.import_module / __import__ with literal names."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = _package_of(path, root)
                base = base[: len(base) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                found.add(node.args[0].value)
    return found
