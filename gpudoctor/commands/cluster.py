"""gpudoctor cluster: probe every node of a Ray cluster (or read one snapshot file per node),
run the single-node rules on each node and the cross-node rules on all of them.

Over Ray, the nodes are probed by gpudoctor/probes/ray.py (the cluster-node probe: the machine
probes run on every node, in one pinned task each, under ``--timeout``); this module is the
command: its options, the rules and the rendering.

Without Ray (Slurm, ssh): ``gpudoctor snapshot -o $(hostname).json`` on each node, then
``gpudoctor cluster --snapshot a.json --snapshot b.json …`` (or ``gpudoctor check --snapshot
a.json --snapshot b.json …``) runs the same rules on the files.
"""

from __future__ import annotations

from typing import Dict, List, Optional

from gpudoctor.commands.common import IO, SnapshotFiles, Status, UsageError, stream_is_unicode, use_color
from gpudoctor.exitcodes import FAIL_ON_CHOICES

EPILOG = (
    "Over Ray: needs `pip install 'gpudoctor[ray]'` here and gpudoctor installed in every node's Python. "
    "Without Ray (Slurm, ssh): run `gpudoctor snapshot -o NODE.json` on each node, then "
    "`gpudoctor cluster --snapshot a.json --snapshot b.json …` (or the same with `gpudoctor check`). "
    "Exit codes: 0 nothing at or above --fail-on, 1 blocking findings (a node that did not answer is one), "
    "2 usage error (no Ray, no cluster at the address)."
)
FORMATS = ("text", "json", "markdown", "junit", "github")
DEFAULT_TIMEOUT = 60.0  # per node; the CLI's default (not imported from probes.ray: --help stays light)
DEFAULT_CONCURRENCY = 32  # node probes in flight at once (probes.ray.DEFAULT_CONCURRENCY; not imported, as above)


def configure(parser) -> None:
    parser.epilog = EPILOG
    parser.add_argument("-v", "--verbose", "--debug", dest="verbose", action="store_true", help="show unknown rules and tracebacks")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, metavar="S",
                        help=f"per node: how long to wait for its answer, counted from when its probe starts (default {DEFAULT_TIMEOUT:g} s)")
    parser.add_argument("--max-concurrency", type=int, default=DEFAULT_CONCURRENCY, metavar="K",
                        help=f"over Ray: probe at most K nodes at once, the next as one answers (default {DEFAULT_CONCURRENCY}; "
                             "the whole run can take up to nodes/K × --timeout when every node hangs)")
    parser.add_argument("--address", default="auto", metavar="auto|HOST:PORT",
                        help="the Ray cluster (default auto: RAY_ADDRESS, else the cluster started on this machine)")
    parser.add_argument("--snapshot", action=SnapshotFiles, metavar="FILE|DIR",
                        help="instead of Ray, read one snapshot file per node (repeat it, or give a directory or a glob of them; from `gpudoctor snapshot`)")
    parser.add_argument("-tp", "--tensor-parallel-size", type=int, metavar="N", help="the planned tensor parallel size (checked against the GPUs)")
    parser.add_argument("-pp", "--pipeline-parallel-size", type=int, metavar="N", help="the planned pipeline parallel size")
    parser.add_argument("--python", metavar="PY", help="on every node, inspect this interpreter's environment (the venv vLLM lives in)")
    parser.add_argument("--port", type=int, default=8000, metavar="N", help="the serving port to check on every node (default 8000)")
    parser.add_argument("--select", action="append", metavar="IDS", help="only these rules: IDs, prefixes (GD9), names or areas; comma-separated")
    parser.add_argument("--ignore", action="append", metavar="IDS", help="skip these rules (same forms as --select)")
    parser.add_argument("--format", choices=FORMATS, default="text")
    parser.add_argument("--fail-on", choices=FAIL_ON_CHOICES, default="error",
                        help="lowest level that makes the exit code 1 (default: error); unknown: also any rule that could not decide")
    parser.add_argument("--color", choices=("auto", "always", "never"), default="auto")
    parser.add_argument("--anonymize", action="store_true", help="also hash hostnames, user names, home paths and GPU UUIDs in the output")
    parser.add_argument("--save", metavar="FILE", help="also write the merged cluster snapshot (replay: gpudoctor check --snapshot FILE)")


# --- the command --------------------------------------------------------------------------------
def run(args, io: IO) -> int:
    from gpudoctor.commands.common import MAX_TIMEOUT, selected_rules
    from gpudoctor.commands.pipeline import Request

    request = Request.from_args(args)
    rules = selected_rules(request)
    sizes = _plan(request)
    if request.snapshots:
        if request.python:
            raise UsageError("--python inspects interpreters on the nodes; it cannot be combined with --snapshot")
        snapshot = files_snapshot(list(request.snapshots), sizes)
    else:
        if not (0 < request.timeout <= MAX_TIMEOUT):  # also refuses nan and inf
            raise UsageError(f"--timeout must be a number of seconds between 0 and {MAX_TIMEOUT:g}")
        if request.max_concurrency < 1:
            raise UsageError("--max-concurrency must be at least 1")
        from gpudoctor.probes.ray import ClusterError, gather_ray

        status = Status(io.stderr, io.environ)
        status.say(f"gpudoctor: asking every node of the Ray cluster at {request.address or 'auto'} … "
                   f"(up to {request.timeout:g} s a node, {request.max_concurrency} at a time)")
        try:
            snapshot = gather_ray(request.address, request.timeout, port=request.port, python=request.python, plan=sizes,
                                  environ=io.environ, max_concurrency=request.max_concurrency)
        except ClusterError as exc:
            raise UsageError(str(exc)) from None
        finally:
            status.clear()
    return report(snapshot, rules, request, io)


def check_snapshots(request, io: IO, rules) -> int:
    """``gpudoctor check --snapshot a.json --snapshot b.json …``: the same rules and output as cluster."""
    if request.python:
        raise UsageError("--python inspects an interpreter on this machine; it cannot be combined with --snapshot")
    if request.smoke:
        raise UsageError("--smoke checks one server; it cannot be combined with several --snapshot files")
    transform = None
    if request.gpu:
        from gpudoctor.commands.common import gpu_option
        from gpudoctor.gpu_target import override_snapshot

        spec = gpu_option(request)
        transform = lambda snap: override_snapshot(snap, spec, request.gpu)  # noqa: E731
    return report(files_snapshot(list(request.snapshots), None, transform), rules, request, io)


def files_snapshot(paths: List[str], sizes: Optional[Dict[str, int]], transform=None):
    from gpudoctor import cluster

    snapshot = cluster.from_files(paths, sizes, transform)
    if not cluster.reachable(snapshot):
        details = "; ".join(e.get("detail", "") for e in cluster.node_entries(snapshot))
        raise UsageError(f"no snapshot file could be read: {details}")
    return snapshot


def _plan(request) -> Dict[str, int]:
    sizes = {}
    for key, value in (("tensor_parallel_size", request.tensor_parallel_size), ("pipeline_parallel_size", request.pipeline_parallel_size)):
        if value is None:
            continue
        if value < 1:
            raise UsageError(f"--{key.replace('_', '-')} must be at least 1")
        sizes[key] = value
    return sizes


def evaluate(snapshot, rules):
    """The engine on a cluster snapshot (gpudoctor/commands/pipeline.py)."""
    from gpudoctor.commands.pipeline import evaluate_cluster

    return evaluate_cluster(snapshot, rules)


def report(snapshot, rules, request, io: IO) -> int:
    """Run the rules on a cluster snapshot, render it in the request's format, return the exit code.
    Every format of check and cluster: text, json, markdown, junit, github."""
    from gpudoctor import cluster
    from gpudoctor.redact import Identities, Redactor
    from gpudoctor.render import matrix

    result = evaluate(snapshot, rules)
    if request.verbose:
        for text in result.debug:
            io.stderr.write(text + "\n")
    redactor = Redactor()
    if request.anonymize:
        hosts = [snap.value("host.hostname") or "" for _, snap in cluster.reachable(snapshot)] + result.names
        users = [snap.value("host.user") or "" for _, snap in cluster.reachable(snapshot)]
        users += [io.environ.get("USER", ""), io.environ.get("LOGNAME", "")]
        redactor = Redactor(anonymize=True, identities=Identities.from_snapshot(None, hosts, users))
    save = request.save
    if save:
        from gpudoctor.commands.common import write_private

        write_private(save, redactor(snapshot.dumps()))
        io.stderr.write(f"gpudoctor: cluster snapshot written to {save} ({len(result.entries)} nodes)\n")
    fmt, fail_on = request.format, request.fail_on
    if fmt == "json":
        from gpudoctor.render import fleet_json, json_out

        io.stdout.write(json_out.dumps(fleet_json.document(result, fail_on, redactor), redactor))
    elif fmt == "markdown":
        io.stdout.write(matrix.markdown(result, fail_on, redactor))
    elif fmt == "junit":
        from gpudoctor.render import ci

        io.stdout.write(ci.junit(result, fail_on, f"gpudoctor {request.command}", redactor))
    elif fmt == "github":
        from gpudoctor.render import ci

        io.stdout.write(ci.github(result, fail_on, None, redactor))
    else:
        from gpudoctor.render import fleet

        fleet.write_text(result, fail_on, request.verbose, stream_is_unicode(io.stdout), io.stdout,
                          use_color(request.color, io.stdout, io.environ), redactor)
    from gpudoctor import verdict

    return verdict.of(result, fail_on).exit_code
