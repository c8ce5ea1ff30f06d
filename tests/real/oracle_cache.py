"""An engine oracle's answers, computed once in a throw-away parser venv and kept in the test cache.

    answers = oracle_cache.answers("sglang-values", "0.5.23", ORACLE, lambda python: ...)

The key is the oracle's kind, the release and a digest of the code that makes the answers (change
that code and they are computed again); ``compute`` gets the parser venv's python
(realenv.parser_venv: the engine's closure less its GPU stack, with CPU torch), which is discarded
after, whatever happens. A concurrent run writes a whole file or none (rename)."""

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, List

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import realenv  # noqa: E402

CPU_TORCH = "2.13.0"


RECORDED = Path(__file__).resolve().parent.parent / "fixtures" / "oracle"


def recorded(kind: str, version: str, digest: str) -> Any:
    """Answers recorded on a GPU host for a release whose parser cannot be imported here
    (tests/fixtures/oracle/ENGINE-VERSION.json, made by scripts/device/sglang_oracle.sh), or None
    when none is kept for that release. A recording of another digest (the oracle's code changed
    since) is an error: it must be recorded again, never silently computed from something else."""
    path = RECORDED / f"{kind.split('-')[0]}-{version}.json"
    if not path.is_file():
        return None
    entries = [e for e in json.loads(path.read_text()) if e.get("kind") == kind and e.get("version") == version]
    if not entries:
        return None
    [entry] = entries
    if entry.get("digest") != digest:
        raise AssertionError(f"{path.name}: the {kind} oracle was recorded for code {entry.get('digest')}, and is now {digest}: "
                             "record it again on the H200 (scripts/device/sglang_oracle.sh)")
    return entry["answers"]


def answers(kind: str, version: str, code: str, compute: Callable[[Path], Any], engine: str = "sglang") -> Any:
    digest = hashlib.sha256(code.encode()).hexdigest()[:12]
    kept = recorded(kind, version, digest)
    if kept is not None:
        return kept
    cache = realenv.CACHE / "oracle" / f"{kind}-{version}-{digest}.json"
    if cache.exists():
        return json.loads(cache.read_text())
    python = realenv.parser_venv(version, engine=engine, torch=CPU_TORCH)
    try:
        result = compute(python)
    finally:
        realenv.discard(python)
    cache.parent.mkdir(parents=True, exist_ok=True)
    partial = cache.with_suffix(f".{os.getpid()}.part")
    partial.write_text(json.dumps(result))
    partial.replace(cache)
    return result


def run(python: Path, script: str, *args: str) -> Any:
    """The JSON the script prints last, run in ``python`` (asserting it exits 0)."""
    done = subprocess.run([str(python), "-c", script, *args], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    lines: List[str] = done.stdout.strip().splitlines()
    return json.loads(lines[-1])
