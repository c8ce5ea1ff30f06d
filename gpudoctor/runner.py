"""The one way gpudoctor runs a program: argv list, timeout, LC_ALL=C, never a shell."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence


@dataclass
class Completed:
    status: str  # ok | absent | timeout | error (snapshot statuses)
    returncode: Optional[int] = None
    stdout: str = ""
    stderr: str = ""
    detail: str = ""


def run(argv: Sequence[str], timeout: float = 5.0, env: Optional[Mapping[str, str]] = None) -> Completed:
    exe = shutil.which(argv[0], path=(env or os.environ).get("PATH")) if os.sep not in argv[0] else argv[0]
    if not exe:
        return Completed("absent", detail=f"{argv[0]} not found on PATH")
    child_env = dict(env if env is not None else os.environ)
    child_env["LC_ALL"] = "C"
    try:
        proc = subprocess.run(
            [exe, *argv[1:]],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=timeout,
            env=child_env,
        )
    except subprocess.TimeoutExpired:
        return Completed("timeout", detail=f"{argv[0]} did not answer within {timeout:g} s")
    except OSError as exc:
        return Completed("error", detail=f"cannot run {argv[0]}: {exc.strerror or exc}")
    out = proc.stdout.decode("utf-8", "replace")
    err = proc.stderr.decode("utf-8", "replace")
    if proc.returncode != 0:
        first = (out.strip() or err.strip()).splitlines()[:1]
        detail = f"{argv[0]} exited {proc.returncode}" + (f": {first[0]}" if first else "")
        return Completed("error", proc.returncode, out, err, detail)
    return Completed("ok", 0, out, err)
