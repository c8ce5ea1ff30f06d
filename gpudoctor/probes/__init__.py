"""Probes: the only code that touches the machine.

One contract for every source of facts: a probe is ``collect(ctx) -> {path: Fact}``, a
function of one ``Context`` (what to look at: the filesystem root, the environment, the
deadline, and for the sources a command names, the launch command or the server to check).
It records raw facts (a failure is a fact with a status and a reason, never an exception);
rules judge them. The sources:

- the machine and its Python environment: ``default_probes()`` (host, driver, GPUs, the
  Python stack, processes, CUDA, --deep), run concurrently in daemon threads under one
  global deadline by ``start()``/``collect()``, so a hung NVML call or a stuck subprocess
  cannot hang the doctor: a probe that misses the deadline is recorded as ``probe.<name>``
  with status timeout, one that raises as status error (traceback kept for -v);
- the launch command: ``probes.launch.collect(ctx)`` reads ``ctx.command``;
- a running server: ``probes.smoke.collect(ctx)`` checks ``ctx.smoke`` (its own deadline);
- every node of a Ray cluster: ``probes.ray``, which runs ``collect()`` on each node.

Facts of several probes meet in one place, ``merge()``.
"""

from __future__ import annotations

import importlib
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from gpudoctor import runner
from gpudoctor.snapshot import ERROR, OK, TIMEOUT, Fact, Snapshot, capture_stamp

Probe = Callable[["Context"], Dict[str, Fact]]


@dataclass
class Context:
    root: str = "/"  # filesystem probes resolve paths under it (tests use fake roots)
    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    timeout: float = 10.0
    debug: List[str] = field(default_factory=list)
    port: int = 8000  # the serving port whose listeners probes.processes reports
    python: Optional[str] = None  # --python: probe that interpreter's environment (probes.python_stack)
    deep: bool = False  # --deep: also import the stack's extensions in a child interpreter (probes.deep_import_check)
    # time.monotonic() when the probes must be done; while they run, the cut-off for every subprocess
    # they start (pass it as runner.run(..., deadline=ctx.deadline)). Set by the command, else by start().
    deadline: Optional[float] = None
    cwd: Optional[str] = None  # where relative paths of the launch command resolve (probes.launch)
    command: Any = None  # the launch command, a probes.launch.probe.Command (probes.launch)
    smoke: Any = None  # the server to check, a probes.smoke.session.Options (probes.smoke)
    progress: Optional[Callable[[str, str], None]] = None  # where the smoke check reports its steps
    # What a probe began before its thread ran, by probe name (python_stack.launch: its child interpreter).
    started: Dict[str, Any] = field(default_factory=dict)

    @property
    def live(self) -> bool:
        """Live sources (NVML, subprocesses) only make sense on the real root."""
        return os.path.realpath(self.root) == "/"

    def path(self, *parts: str) -> str:
        return os.path.join(self.root, *[p.lstrip("/") for p in parts])

    def read_text(self, *parts: str, limit: int = 1 << 20) -> Optional[str]:
        try:
            with open(self.path(*parts), "rb") as handle:
                return handle.read(limit).decode("utf-8", "replace")
        except OSError:
            return None


# (fact prefix, module under gpudoctor/probes/); the snapshot lists them in this order.
DEFAULT_PROBES = (("host", "host"), ("driver", "driver"), ("gpus", "gpus"), ("python", "python_stack"), ("processes", "processes"),
                  ("cuda", "cuda"), ("node", "node"), ("deep", "deep_import_check"))
# Started first, one after the other, each as soon as its module is imported: the longest waits
# of a check. python: a child interpreter (the kernel scan of a cold disk, in --python's or the
# doctor's own environment), which its module's ``launch(ctx)`` starts before the other probes'
# imports take the GIL; gpus: NVML's initialisation (~0.1 s on an H200 host, in C, off the GIL).
FIRST = ("python", "gpus")


def _lazy(module: str) -> Probe:
    """The module's ``collect``, imported when ``Running`` starts this probe (``preload``): the
    python probe's thread starts before the other six probes' modules (pynvml, the kernel
    scan's readers …) are imported."""
    def collect(ctx: "Context") -> Dict[str, Fact]:
        return preload().collect(ctx)

    def preload():
        return importlib.import_module(f"gpudoctor.probes.{module}")

    def launch(ctx: "Context") -> None:
        begin = getattr(preload(), "launch", None)
        if begin is not None:
            begin(ctx)

    collect.__qualname__ = collect.__name__ = f"{module}.collect"
    collect.preload = preload  # type: ignore[attr-defined]
    collect.launch = launch  # type: ignore[attr-defined]
    return collect


def default_probes() -> List[Tuple[str, Probe]]:
    return [(name, _lazy(module)) for name, module in DEFAULT_PROBES]


class Running:
    """Probes started in their threads; ``finish()`` waits for them (up to the deadline)."""

    def __init__(self, ctx: Context, probes: List[Tuple[str, Probe]]):
        self.ctx = ctx
        self.results: Dict[str, Tuple[str, object]] = {}
        self.threads = [(name, threading.Thread(target=self._work, args=(name, probe), name=f"probe-{name}", daemon=True))
                        for name, probe in probes]
        self._given = ctx.deadline
        # The FIRST probes one by one (each imported, launched and started before the next is
        # imported), then the others' modules imported together and their threads started.
        names = [name for name, _ in probes]
        early = [[names.index(name)] for name in FIRST if name in names]
        rest = [i for i in range(len(probes)) if [i] not in early]
        self._clock()
        for group in early + [rest]:
            for i in group:  # their modules are imported here, in this thread, before their threads start
                preload = getattr(probes[i][1], "preload", None)
                if preload is not None:
                    preload()
            self._clock()  # imports are not part of any probe's time (nor of a library caller's timeout)
            for i in group:
                if group is not rest:
                    self._launch(*probes[i])
                self.threads[i][1].start()

    def _launch(self, name: str, probe: Probe) -> None:
        """The probe's ``launch(ctx)``, here in the caller's thread (a failure: its thread does the work)."""
        launch = getattr(probe, "launch", None)
        if launch is None:
            return
        try:
            launch(self.ctx)
        except Exception:
            import traceback

            self.ctx.started.pop(name, None)
            self.ctx.debug.append(f"probe {name}: launch raised:\n{traceback.format_exc()}")

    def _clock(self) -> None:
        self.started = time.monotonic()
        # ctx.deadline given: the command's (runner.work_deadline, from the process start: start-up and
        # these imports count, as the person waiting counts them). None: a library caller; its timeout
        # starts when the probes can run, after the imports.
        if self._given is not None:
            self.until = self._given
        else:
            self.until = self.started + self.ctx.timeout
        # Every subprocess a probe runs is cut a little before the join, so a cut-off subprocess still
        # becomes the probe's own fact ("nvidia-smi did not answer within 1.3 s"), not "probe gpus: no
        # answer"; 0.5 s: at load 15 on 2 cores a thread woken at the cut-off needs a few hundred ms.
        self.ctx.deadline = self.until - min(0.5, self.ctx.timeout * 0.1)

    def _work(self, name: str, probe: Probe) -> None:
        t0 = time.monotonic()
        try:
            self.results[name] = ("ok", (probe(self.ctx), time.monotonic() - t0))
        except Exception as exc:  # a probe must never take the doctor down
            import traceback  # only for a probe that raised (its traceback is kept for -v)

            self.ctx.debug.append(f"probe {name} raised:\n{traceback.format_exc()}")
            self.results[name] = ("error", f"{type(exc).__name__}: {exc}")

    def finish(self) -> Snapshot:
        ctx = self.ctx
        snapshot = Snapshot(meta={"root": ctx.root})
        for name, thread in self.threads:
            while True:  # in slices: a Ctrl-C swallowed where it landed is still seen (runner.check_interrupt)
                left = self.until - time.monotonic()
                thread.join(min(0.25, max(0.0, left)))
                runner.check_interrupt()
                if left <= 0 or not thread.is_alive():
                    break
            outcome = self.results.get(name)
            if outcome is None:
                snapshot.facts[f"probe.{name}"] = Fact(None, TIMEOUT, "gpudoctor", f"no answer within {ctx.timeout:g} s")
            elif outcome[0] == "error":
                snapshot.facts[f"probe.{name}"] = Fact(None, ERROR, "gpudoctor", str(outcome[1]))
            else:
                facts, elapsed = outcome[1]  # type: ignore[misc]
                merge(snapshot, facts)
                snapshot.facts[f"probe.{name}"] = Fact(round(elapsed, 4), OK, "gpudoctor")
        snapshot.meta["elapsed_s"] = round(time.monotonic() - self.started, 4)
        snapshot.meta["captured_at"] = capture_stamp()
        return snapshot


# Facts that several sources add to rather than replace: a mapping whose entries a later source
# extends (its entries win), e.g. the environment of the machine and the launch command's
# ``NAME=value`` assignments that preflight lays over it.
ADDITIVE = ("env",)


def merge(snapshot: Snapshot, *sources: Mapping[str, Fact]) -> Snapshot:
    """Lay the facts of each source over ``snapshot``, in order: the one place facts of different
    probes meet. The rule for a path two sources both give: the later source wins (the more
    specific one: the launch command over the machine, the server over the launch command),
    except for an ``ADDITIVE`` mapping, which the later ok fact extends (its sources joined)."""
    for facts in sources:
        for path, fact in facts.items():
            old = snapshot.facts.get(path)
            if path in ADDITIVE and old is not None and fact.ok and isinstance(fact.value, dict):
                value = dict(old.value) if old.ok and isinstance(old.value, dict) else {}
                value.update(fact.value)
                fact = Fact(value, OK, (old.source + " + " if old.ok and old.source else "") + fact.source, fact.detail)
            snapshot.facts[path] = fact
    return snapshot


def start(ctx: Optional[Context] = None, probes: Optional[List[Tuple[str, Probe]]] = None) -> Running:
    """Start every probe in its own daemon thread and return at once."""
    ctx = ctx or Context()
    return Running(ctx, probes if probes is not None else default_probes())


def collect(ctx: Optional[Context] = None, probes: Optional[List[Tuple[str, Probe]]] = None) -> Snapshot:
    """Run the probes and wait for them: the snapshot of this machine."""
    return start(ctx, probes).finish()
