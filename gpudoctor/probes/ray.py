"""The cluster-node probe: the machine probes on every node of a Ray cluster.

One task per alive node, pinned there (NodeAffinitySchedulingStrategy, soft=False,
``num_cpus=0`` so a busy cluster still runs it), which imports gpudoctor on that node and
returns ``probes.collect(Context(...)).to_json()`` (``probe_this_node``: the same contract and
the same probes as on one machine). At most ``--max-concurrency`` tasks are in flight at once
(a fleet of 1,000 nodes is not asked all at once: the driver, the GCS and a shared file system
under the nodes' imports each see at most K); the next node's task is sent as one finishes.
Each node has ``--timeout`` seconds from when its own task was sent, so a node that waited
in the queue is not timed out for the others' slowness, and ``ray.wait`` over the tasks in
flight takes each answer as it comes, so a slow node never holds up the others (only its slot,
until its deadline). A node whose task cannot run (dead) is ``unreachable``, one that does not
answer in time is ``timeout`` (its task cancelled), one whose task raised is ``error``; the
others' results still come out. Ray is imported only here, only when ``gpudoctor cluster``
runs over Ray (``pip install 'gpudoctor[ray]'``), and the driver disconnects
(``ray.shutdown``) before the command returns. The nodes' snapshots become one cluster
snapshot (gpudoctor/cluster.py, the multi-node model).
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import socket
import sys
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

DEFAULT_CONCURRENCY = 32  # node probes in flight at once (the CLI's --max-concurrency default)
RAY_MISSING = "gpudoctor cluster needs Ray: pip install 'gpudoctor[ray]' (or use --snapshot FILE per node)"


class ClusterError(Exception):
    """Ray is missing or no cluster answers: one line for the user, exit 2."""


def import_ray():
    try:
        import ray  # the optional extra: gpudoctor[ray]
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # noqa: F401
    except ImportError:
        raise ClusterError(RAY_MISSING) from None
    except Exception as exc:  # a broken Ray install must not become a traceback
        raise ClusterError(f"Ray is installed but cannot be imported ({type(exc).__name__}: {exc}); {RAY_MISSING}") from None
    return ray


def probe_this_node(timeout: float, port: int, python: Optional[str]) -> Dict[str, Any]:
    """Runs on a Ray node (the task's body): this node's snapshot as JSON."""
    began = time.time()  # the node's clock: when this task's body ran, in the snapshot's meta
    from gpudoctor import __version__
    from gpudoctor.probes import Context, collect

    options: Dict[str, Any] = {"environ": _node_environ(), "timeout": timeout, "port": port}
    fields = getattr(Context, "__dataclass_fields__", {})
    if python and "python" in fields:
        options["python"] = python
    options = {k: v for k, v in options.items() if k in fields}
    snapshot = collect(Context(**options))
    snapshot.meta["gpudoctor"] = __version__
    try:
        import ray

        snapshot.meta["ray_node_id"] = ray.get_runtime_context().get_node_id()
    except Exception:
        pass
    snapshot.meta["ray_task"] = {"started": round(began, 3), "ended": round(time.time(), 3)}
    return snapshot.to_json()


def _node_environ() -> Dict[str, str]:
    """The node's environment as its Ray worker got it, with the GPU selection Ray made for this
    task undone (a task with no GPUs may get CUDA_VISIBLE_DEVICES="" from older Rays)."""
    environ = dict(os.environ)
    try:
        import ray._private.worker as ray_worker

        original = getattr(ray_worker.global_worker, "original_visible_accelerator_ids", None) or {}
        if "GPU" in original:
            ids = original["GPU"]
            if ids is None:
                environ.pop("CUDA_VISIBLE_DEVICES", None)
            else:
                environ["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in ids)
    except Exception:
        pass
    return environ


_REMOTE: Optional[Tuple[Any, Any]] = None  # (the ray module, the remote function made with it)


def _remote(ray):
    global _REMOTE
    if _REMOTE is None or _REMOTE[0] is not ray:
        _REMOTE = (ray, ray.remote(num_cpus=0, max_retries=0)(probe_this_node))
    return _REMOTE[1]


def _bootstrap(address: str, environ) -> Tuple[str, str]:
    """(HOST:PORT to check, where it came from) for ``--address``; "auto" as Ray resolves it."""
    if address in ("", "auto"):
        from_env = (environ or {}).get("RAY_ADDRESS", "")
        if from_env and from_env != "auto":
            return from_env, "RAY_ADDRESS"
        found = _current_cluster()
        if not found:
            raise ClusterError("no running Ray cluster found (RAY_ADDRESS is not set and Ray was not started on this machine); "
                               "start one (`ray start --head`) or pass --address HOST:PORT")
        return found, "the Ray cluster started on this machine"
    return address, "--address"


RAY_ADDRESS_FILE = "/tmp/ray/ray_current_cluster"


def _current_cluster() -> Optional[str]:
    """The address Ray wrote when a cluster was started on this machine (what ray.init("auto") reads)."""
    import stat

    try:  # /tmp is everyone's: a FIFO put there would block Ray's own plain open() of it, and ours
        if not stat.S_ISREG(os.stat(RAY_ADDRESS_FILE).st_mode):
            return None
    except OSError:
        pass
    for module in ("ray._private.utils", "ray._common.utils"):
        try:
            found = __import__(module, fromlist=["read_ray_address"]).read_ray_address()
        except Exception:
            continue
        return found or None
    from gpudoctor import bounded

    try:
        return bounded.read_head(RAY_ADDRESS_FILE, 4096, "Ray address file").decode("utf-8", "replace").strip() or None
    except (OSError, ValueError):
        return None


def _split(address: str) -> Tuple[str, int]:
    text = address.split("://", 1)[-1].rstrip("/")
    host, sep, port = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not (0 < int(port) < 65536):
        raise ClusterError(f"--address must be auto or HOST:PORT, not {address!r}")
    return host, int(port)


def _reachable(address: str, where: str, timeout: float) -> None:
    host, port = _split(address)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except OSError as exc:
        raise ClusterError(f"no Ray cluster answers at {address} ({where}): {exc.strerror or exc}") from None


def _connect(ray, address: str, timeout: float) -> None:
    """ray.init in a daemon thread: a GCS that accepts TCP but never answers must not hang us."""
    box: Dict[str, Any] = {}

    def connect() -> None:
        try:
            ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False, namespace="gpudoctor")
            box["ok"] = True
        except BaseException as exc:  # noqa: B902 -- reported below, in the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=connect, name="gpudoctor-ray-init", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise ClusterError(f"Ray did not connect to {address} within {timeout:g} s")
    if "error" in box:
        exc = box["error"]
        first = (str(exc).strip().splitlines() or [""])[0]
        raise ClusterError(f"cannot connect to the Ray cluster at {address}: {type(exc).__name__}: {first}")


# Ray's NodeDeathInfo reasons (gcs.proto): 1 expected termination, 3 preempted, 4 idle drain
# are nodes taken away on purpose; 0 (unspecified) and 2 (unexpected termination) are failures.
_GONE_ON_PURPOSE = {1, 3, 4, "EXPECTED_TERMINATION", "AUTOSCALER_DRAIN_PREEMPTED", "AUTOSCALER_DRAIN_IDLE"}


def gather_ray(address: str = "auto", timeout: float = 60.0, port: int = 8000, python: Optional[str] = None,
               plan: Optional[Dict[str, int]] = None, environ=None, max_concurrency: int = DEFAULT_CONCURRENCY):
    """Every alive node's snapshot, gathered by one pinned Ray task per node, at most
    ``max_concurrency`` at once, each under ``timeout`` from its own start; the merged Snapshot."""
    from gpudoctor import __version__
    from gpudoctor import cluster

    started = time.monotonic()
    ray = import_ray()
    connected_here = not ray.is_initialized()
    target = address
    # Ray's driver prints the cluster's error messages ("(raylet) Raylet is terminated …" when a
    # node dies mid-run) to sys.stdout from a thread of its own: on stdout they would break the
    # JSON (or JUnit) report written there, so while Ray is connected they go to stderr.
    with contextlib.redirect_stdout(sys.stderr):
        if connected_here:
            target, where = _bootstrap(address, environ if environ is not None else os.environ)
            _reachable(target, where, min(5.0, timeout))
            _connect(ray, address if address not in ("", "auto") else "auto", max(10.0, timeout))
        try:
            members, todo = _members(ray.nodes())
            _probe(ray, members, todo, timeout, max(1, int(max_concurrency)), port, python)
        except ClusterError:
            raise
        except Exception as exc:  # Ray itself failing mid-way: one line, not a traceback
            first = (str(exc).strip().splitlines() or [""])[0]
            raise ClusterError(f"Ray failed while checking the cluster: {type(exc).__name__}: {first[:300]}") from None
        finally:
            if connected_here:
                try:
                    ray.shutdown()
                except Exception:
                    pass
    source = f"ray {address if address not in ('', 'auto') else target}"
    meta = {"gpudoctor": __version__, "cluster": {"source": "ray", "address": source[4:],
                                                   "elapsed_s": round(time.monotonic() - started, 3),
                                                   "max_concurrency": max(1, int(max_concurrency))}}
    return cluster.merge([m for m, _ in members], source, plan, meta)


def _members(listing) -> Tuple[List[Tuple[Any, Dict[str, Any]]], List[int]]:
    """(member, its Ray node) for every node Ray lists (dead ones already marked unreachable),
    and the indexes of those to probe, in Ray's order."""
    from gpudoctor import cluster

    nodes = [n for n in listing if isinstance(n, dict) and n.get("NodeID")]
    nodes = [n for n in nodes if n.get("Alive") or n.get("DeathReason") not in _GONE_ON_PURPOSE]
    hosts = [cluster.safe_name(str(n.get("NodeManagerHostname") or n.get("NodeManagerAddress") or "node").split(".")[0]) for n in nodes]
    repeated = {h for h in hosts if hosts.count(h) > 1}
    names = cluster.unique_names([f"{h}-{n['NodeID'][:6]}" if h in repeated else h for h, n in zip(hosts, nodes)])
    members: List[Tuple[Any, Dict[str, Any]]] = []
    todo: List[int] = []
    for name, node in zip(names, nodes):
        member = cluster.Member(name, source=f"ray node {node['NodeID']}", address=str(node.get("NodeManagerAddress") or ""),
                                head="node:__internal_head__" in (node.get("Resources") or {}))
        if node.get("Alive"):
            todo.append(len(members))
        else:
            member.status = cluster.UNREACHABLE
            member.detail = f"Ray marks this node dead ({node.get('DeathReasonMessage') or 'no reason given'})"
        members.append((member, node))
    return members, todo


def _probe(ray, members, todo: List[int], timeout: float, limit: int, port: int, python: Optional[str]) -> None:
    """A window of at most ``limit`` tasks in flight: each node's task is sent when a slot is free
    and given ``timeout`` from then; an answer (or a deadline passed) frees its slot for the next.
    Failures and timeouts are named at the end, against one fresh list of the alive nodes (a node
    killed mid-run fails its task before Ray has declared it dead)."""
    from gpudoctor import cluster
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    probe_timeout = max(0.5, min(10.0, timeout * 0.5))
    remote = _remote(ray)
    queue = collections.deque(todo)
    flying: Dict[Any, Tuple[int, float]] = {}  # task -> (its member, its deadline)
    failed: List[Tuple[int, BaseException]] = []
    late: List[int] = []
    while queue or flying:
        while queue and len(flying) < limit:
            index = queue.popleft()
            member, node = members[index]
            try:
                ref = remote.options(
                    scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node["NodeID"], soft=False),
                    name=f"gpudoctor-probe-{member.name}",
                ).remote(probe_timeout, port, python)
            except Exception as exc:
                member.status, member.detail = cluster.NODE_ERROR, f"could not submit the probe task: {type(exc).__name__}: {exc}"
                continue
            flying[ref] = (index, time.monotonic() + timeout)
        if not flying:
            break
        soonest = min(deadline for _, deadline in flying.values())
        done, _ = ray.wait(list(flying), num_returns=1, timeout=max(0.0, soonest - time.monotonic()))
        for ref in done:
            index, _ = flying.pop(ref)
            error = _answer(ray, ref, members[index][0], timeout)
            if error is not None:
                failed.append((index, error))
        now = time.monotonic()
        for ref in [r for r, (_, deadline) in flying.items() if deadline <= now]:
            index, _ = flying.pop(ref)
            late.append(index)
            try:  # frees the node's worker; the slot is free either way
                ray.cancel(ref, force=True)
            except Exception:
                pass
    alive = _alive(ray) if failed or late else None
    for index, error in failed:
        member, node = members[index]
        member.status, member.detail = _failure(error, node["NodeID"], alive)
    for index in late:
        member, node = members[index]
        if alive is not None and node["NodeID"] not in alive:
            member.status, member.detail = cluster.UNREACHABLE, f"the node died while it was being checked (no answer within {timeout:g} s)"
        else:
            member.status, member.detail = (cluster.NODE_TIMEOUT, f"no answer within {timeout:g} s of its probe's start "
                                                                  "(the node is alive in Ray but its task did not finish)")


def _answer(ray, ref, member, timeout: float) -> Optional[BaseException]:
    """A finished task's snapshot into its member; the task's exception when it raised."""
    from gpudoctor import cluster
    from gpudoctor.snapshot import Snapshot, SnapshotError

    try:
        data = ray.get(ref, timeout=max(1.0, min(30.0, timeout)))
        member.snapshot = Snapshot.from_json(data)
    except SnapshotError as exc:
        member.status, member.detail = cluster.NODE_ERROR, f"its snapshot does not load: {exc}"
    except Exception as exc:
        return exc
    return None


def _alive(ray) -> Optional[set]:
    try:
        return {n["NodeID"] for n in ray.nodes() if n.get("Alive")}
    except Exception:
        return None


def _failure(exc: BaseException, node_id: str, alive: Optional[set]) -> Tuple[str, str]:
    from gpudoctor import cluster

    kind = type(exc).__name__
    text = str(exc).strip()
    if kind in ("TaskUnschedulableError", "NodeDiedError", "OwnerDiedError") or (alive is not None and node_id not in alive):
        first = text.splitlines()[0] if text else kind
        return cluster.UNREACHABLE, f"{kind}: {first[:300]}"
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    last = lines[-1] if lines else kind
    if "No module named 'gpudoctor" in text:
        return cluster.NODE_ERROR, f"gpudoctor is not installed in that node's Python ({last[:200]})"
    return cluster.NODE_ERROR, f"{kind}: {last[:300]}"
