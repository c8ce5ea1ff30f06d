"""Where the engines are when gpudoctor's own environment has none (issue 31: after `pip install
gpudoctor`, `check` judged its own venv and said only "no torch, 10 distributions").

Fact: ``engines.elsewhere`` [{engine, python, how}]: the interpreters of the ``vllm`` / ``sglang``
on PATH and of the serving processes (``processes.serving``), each the ``--python`` to give. Found
by reading scripts' shebangs and command lines, never by running anything.
"""

from __future__ import annotations

import os
import shlex
from typing import Any, Dict, List, Mapping, Optional

from gpudoctor.snapshot import OK, Fact, Snapshot

MAX_PROCESSES = 64  # serving processes looked at (each a shebang read at most)


def collect(snapshot: Snapshot, environ: Mapping[str, str]) -> Optional[Fact]:
    """The fact, or None when gpudoctor's own environment has an engine (or was not read)."""
    installed = snapshot.get("engines.installed")
    if not installed.ok or installed.value:
        return None
    from gpudoctor.probes.launch.vllm_locate import command_python  # not launch.probe: check needs no parser

    env = dict(environ)
    found: List[Dict[str, Any]] = []
    seen = set()

    def add(engine: str, argv: List[str], how: str) -> None:
        try:
            hit = command_python(argv, env)
        except (OSError, ValueError):
            return
        if hit is None:
            return
        python = os.path.realpath(hit[0]) if os.path.isabs(hit[0]) else hit[0]
        if (engine, hit[0]) in seen or (engine, python) in seen:
            return
        seen.update({(engine, hit[0]), (engine, python)})
        found.append({"engine": engine, "python": hit[0], "how": how})

    for pos, proc in enumerate(snapshot.value("processes.serving") or []):
        if pos >= MAX_PROCESSES or not isinstance(proc, dict):
            break
        try:
            argv = shlex.split(str(proc.get("cmdline") or ""))
        except ValueError:
            continue
        engine = "SGLang" if str(proc.get("stack") or "").lower().startswith("sglang") else "vLLM"
        if argv:
            add(engine, argv, f"the serving process PID {proc.get('pid')}")
    for engine, script in (("vLLM", "vllm"), ("SGLang", "sglang")):
        add(engine, [script], f"`{script}` on PATH")
    return Fact(found, OK, "PATH, processes.serving", "" if found else "no vllm or sglang on PATH, no serving process")
