"""The one way a probe starts a child interpreter: the Python stack's (python_stack.py) and --deep's
(deep_import_check.py, deep_extensions_load.py, deep_load_check.py, deep_fabric.py).

A child runs a program given with ``-c`` (on its standard input when too long for one argv
string) under ``-I``: no PYTHONPATH, no user site, no current directory on sys.path, so nothing
of the directory the doctor was started from is imported there. The environment's PYTHONPATH is
handed over as an argument (``pythonpath``) and each program puts it back where a normal start
would. Everything else is gpudoctor.runner's: an argv list, never a shell, LC_ALL=C, the whole
process group killed at the limit, output capped. The limit is a share of the run's timeout
(the rest is the doctor's, to read the answer and judge), within a floor and a ceiling, and
never past the overall deadline.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

from gpudoctor import runner

SHARE = 0.8  # of the run's timeout, for one child
ARG_MAX = 120_000  # bytes of program passed with -c; a longer one goes to the child's standard input


@dataclass
class Launched:
    """A started child and the limit it was given (the seconds a timeout message names)."""

    python: str
    started: runner.Started
    limit: float

    def wait(self) -> runner.Completed:
        return self.started.wait()


def limit(timeout: float, floor: float, ceiling: float, share: float = SHARE) -> float:
    """The seconds one child may take: ``share`` of the run's timeout, within [floor, ceiling]."""
    return min(max(timeout * share, floor), ceiling)


def pythonpath(environ: Mapping[str, str]) -> str:
    """The PYTHONPATH a child is given as an argument (-I drops the variable)."""
    return environ.get("PYTHONPATH", "")


def start(python: str, program: str, args: Sequence[str], environ: Mapping[str, str], timeout: float,
          deadline: Optional[float], max_output: int = runner.MAX_OUTPUT, flags: Sequence[str] = ("-I",)) -> Launched:
    """Start ``python flags -c program args...`` for at most ``timeout`` seconds (cut to
    ``deadline``) and return at once; ``.wait()`` gives runner's Completed."""
    if len(program) < ARG_MAX:
        started = runner.start([python, *flags, "-c", program, *args], timeout=timeout, env=environ, deadline=deadline,
                               max_output=max_output)
    else:  # too long for one argv string (Linux MAX_ARG_STRLEN is 128 KiB): on its standard input,
        # never through a file (a read-only or full /tmp, as in a locked-down container, must not cost the probe)
        started = runner.start([python, *flags, "-", *args], timeout=timeout, env=environ, deadline=deadline,
                               max_output=max_output, stdin=program.encode("ascii"))
    return Launched(python, started, timeout)


def run(python: str, program: str, args: Sequence[str], environ: Mapping[str, str], timeout: float,
        deadline: Optional[float], max_output: int = runner.MAX_OUTPUT) -> runner.Completed:
    """``start`` and wait."""
    return start(python, program, args, environ, timeout, deadline, max_output).wait()
