"""The steps every command shares: gather the facts (overlays included), judge them, one verdict.

Commands only (tests/test_layering.py: it reads the machine through the probes).

``gather`` steps put facts into a Snapshot only through ``probes.merge``; ``judge`` runs the rules
on a node or a cluster and returns the result with its Verdict (gpudoctor/verdict.py). A command
that takes a step from here cannot answer differently from another command taking the same step
(issue 28: ``explain --launch`` read the command without its ``NAME=value`` assignments, which
``preflight`` lays over the environment).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple

if TYPE_CHECKING:  # imported when a verdict is made: `check` spawns its Python child before the rules' modules load
    from gpudoctor.verdict import Verdict


@dataclass(frozen=True)
class Request:
    """What the user asked for, read once from the parsed command line (config files already
    applied, gpudoctor/config.py) into one typed value: every option a step reads, each command's
    absent ones at their defaults. Steps read it and never rewrite it: a changed view is a new
    Request (``dataclasses.replace``), as preflight's interpreter and port taken from the command."""

    command: str = "check"
    root: str = "/"
    timeout: float = 10.0
    python: Optional[str] = None  # --python: the interpreter whose environment is inspected
    deep: bool = False
    gpu: Optional[str] = None  # --gpu SPEC as typed (common.gpu_option parses it)
    port: Optional[int] = 8000  # None: preflight's "the command's --port, else 8000"
    snapshot: Optional[str] = None  # the first --snapshot file
    snapshots: Tuple[str, ...] = ()  # every --snapshot file (several: one per node)
    select: Optional[Tuple[str, ...]] = None
    ignore: Optional[Tuple[str, ...]] = None
    format: str = "text"
    fail_on: str = "error"
    color: str = "auto"
    quiet: bool = False
    verbose: bool = False
    anonymize: bool = False
    smoke: Optional[str] = None  # check --smoke [URL]
    from_file: Optional[str] = None  # preflight --from-file
    launch: Optional[str] = None  # explain --launch CMD
    save: Optional[str] = None  # cluster --save
    address: str = "auto"  # cluster --address
    max_concurrency: int = 32  # cluster --max-concurrency: node probes in flight at once over Ray
    tensor_parallel_size: Optional[int] = None
    pipeline_parallel_size: Optional[int] = None
    # The server smoke check (``smoke``, ``check --smoke``, ``report --url``): smoke's own options, at
    # its defaults for the commands that do not take them.
    url: Optional[str] = None
    model: Optional[str] = None
    api_key_env: Optional[str] = None  # the NAME of the variable holding the key, never the key
    concurrency: int = 4
    expect_spec: bool = False
    max_tokens: int = 128
    long: bool = False
    long_timeout: float = 300.0

    @classmethod
    def from_args(cls, args: Any) -> "Request":
        """The one place the parsed arguments are read."""
        given = vars(args)
        values = {f.name: given[f.name] for f in fields(cls) if f.name in given}
        for name in ("select", "ignore"):
            if values.get(name) is not None:
                values[name] = tuple(values[name])
        snapshot = values.get("snapshot")
        if snapshot or given.get("snapshots"):
            from gpudoctor.cluster import expand_paths

            # A directory or a glob of snapshots (one file per node: the fleet path) is its files.
            files = expand_paths(given.get("snapshots") or [snapshot])
            values["snapshots"], values["snapshot"] = tuple(files), files[0]
        else:
            values["snapshots"] = ()
        return cls(**values)


@dataclass
class LaunchRead:
    """The launch command as the launch probe read it: its facts and what the probe had to say."""

    command: Any  # probes.launch.probe.Command
    facts: Dict[str, Any]
    debug: List[str] = field(default_factory=list)

    @property
    def port(self) -> Optional[int]:
        """The port the command will listen on (its ``--port``), None when it does not say."""
        fact = self.facts.get("launch.port")
        value = fact.value.get("port") if fact is not None and fact.ok and isinstance(fact.value, dict) else None
        return value if isinstance(value, int) else None


def read_launch(command, environ: Dict[str, str], timeout: float, python: Optional[str]) -> LaunchRead:
    """Run the launch probe on ``command`` (a probes.launch.probe.Command): files only, nothing imported.
    The deadline starts now; the probes after it share it."""
    from gpudoctor import runner
    from gpudoctor.probes import Context
    from gpudoctor.probes import launch as launch_probe

    ctx = Context(environ=dict(environ), timeout=timeout, python=python, command=command, cwd=os.getcwd(),
                  deadline=runner.work_deadline(timeout))
    facts = launch_probe.collect(ctx)
    return LaunchRead(command, facts, ctx.debug)


def overlay_launch(snapshot, launch: LaunchRead) -> None:
    """Lay the launch command over a machine's snapshot: its ``NAME=value`` assignments over the
    environment fact (the server will see them), then its own facts."""
    from gpudoctor.probes import merge
    from gpudoctor.probes.launch.probe import env_facts

    merge(snapshot, env_facts(launch.command), launch.facts)


def judge(snapshot, rules: Sequence, fail_on: str) -> Tuple[Any, Verdict]:
    """The rules on a snapshot: one node's (engine.Result), or a cluster's (engine.ClusterResult: the
    cross-node rules on the merged snapshot, the others on each node's own); and its Verdict."""
    from gpudoctor import verdict
    from gpudoctor.cluster import is_cluster

    if is_cluster(snapshot):
        result = evaluate_cluster(snapshot, rules)
    else:
        from gpudoctor.engine import run_rules

        result = run_rules(snapshot, rules)
    return result, verdict.of(result, fail_on)


def evaluate_cluster(snapshot, rules: Sequence):
    """The engine on a cluster snapshot, with the cross-node policy's watched values for the matrix."""
    from gpudoctor import cluster
    from gpudoctor.engine import run_cluster
    from gpudoctor_rules.cluster_policy import spreads

    return run_cluster(snapshot, rules, cluster.node_entries(snapshot), cluster.reachable(snapshot), spreads(snapshot))
