"""The cluster-node probe: the machine probes on every node of a Ray cluster.

One task per alive node, pinned there (NodeAffinitySchedulingStrategy, soft=False,
``num_cpus=0`` so a busy cluster still runs it), which imports gpudoctor on that node and
returns ``probes.collect(Context(...)).to_json()`` (``probe_this_node``: the same contract and
the same probes as on one machine). ``ray.wait`` bounds the whole gathering by ``--timeout``:
a node whose task cannot run (dead) is ``unreachable``, one that does not answer in time is
``timeout``, one whose task raised is ``error``; the others' results still come out. Ray is
imported only here, only when ``gpudoctor cluster`` runs over Ray (``pip install
'gpudoctor[ray]'``), and the driver disconnects (``ray.shutdown``) before the command returns.
The nodes' snapshots become one cluster snapshot (gpudoctor/cluster.py, the multi-node model).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import sys
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

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


_REMOTE = None


def _remote(ray):
    global _REMOTE
    if _REMOTE is None:
        _REMOTE = ray.remote(num_cpus=0, max_retries=0)(probe_this_node)
    return _REMOTE


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
               plan: Optional[Dict[str, int]] = None, environ=None):
    """Every alive node's snapshot, gathered by one pinned Ray task per node; the merged Snapshot."""
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
            listing = ray.nodes()
            members, refs = _submit(ray, listing, timeout, port, python)
            _collect(ray, members, refs, timeout)
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
                                                   "elapsed_s": round(time.monotonic() - started, 3)}}
    return cluster.merge([m for m, _ in members], source, plan, meta)


def _submit(ray, listing, timeout: float, port: int, python: Optional[str]):
    from gpudoctor import cluster
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    nodes = [n for n in listing if isinstance(n, dict) and n.get("NodeID")]
    nodes = [n for n in nodes if n.get("Alive") or n.get("DeathReason") not in _GONE_ON_PURPOSE]
    hosts = [cluster.safe_name(str(n.get("NodeManagerHostname") or n.get("NodeManagerAddress") or "node").split(".")[0]) for n in nodes]
    repeated = {h for h in hosts if hosts.count(h) > 1}
    names = cluster.unique_names([f"{h}-{n['NodeID'][:6]}" if h in repeated else h for h, n in zip(hosts, nodes)])
    probe_timeout = max(0.5, min(10.0, timeout * 0.5))
    remote = _remote(ray)
    members: List[Tuple[Any, Dict[str, Any]]] = []
    refs: Dict[Any, int] = {}
    for name, node in zip(names, nodes):
        member = cluster.Member(name, source=f"ray node {node['NodeID']}", address=str(node.get("NodeManagerAddress") or ""),
                                head="node:__internal_head__" in (node.get("Resources") or {}))
        members.append((member, node))
        if not node.get("Alive"):
            member.status = cluster.UNREACHABLE
            reason = node.get("DeathReasonMessage") or "no reason given"
            member.detail = f"Ray marks this node dead ({reason})"
            continue
        try:
            ref = remote.options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node["NodeID"], soft=False),
                name=f"gpudoctor-probe-{name}",
            ).remote(probe_timeout, port, python)
        except Exception as exc:
            member.status, member.detail = cluster.NODE_ERROR, f"could not submit the probe task: {type(exc).__name__}: {exc}"
            continue
        refs[ref] = len(members) - 1
    return members, refs


def _collect(ray, members, refs: Dict[Any, int], timeout: float) -> None:
    from gpudoctor import cluster
    from gpudoctor.snapshot import Snapshot, SnapshotError

    pending = list(refs)
    deadline = time.monotonic() + timeout
    ready: List[Any] = []
    while pending:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        done, pending = ray.wait(pending, num_returns=1, timeout=left)
        ready.extend(done)
    alive = _alive(ray)
    for ref in ready:
        member, node = members[refs[ref]]
        try:
            data = ray.get(ref, timeout=max(1.0, min(30.0, timeout)))
            member.snapshot = Snapshot.from_json(data)
        except SnapshotError as exc:
            member.status, member.detail = cluster.NODE_ERROR, f"its snapshot does not load: {exc}"
        except Exception as exc:
            member.status, member.detail = _failure(exc, node["NodeID"], alive)
    for ref in pending:
        member, node = members[refs[ref]]
        if alive is not None and node["NodeID"] not in alive:
            member.status, member.detail = cluster.UNREACHABLE, f"the node died while it was being checked (no answer within {timeout:g} s)"
        else:
            member.status, member.detail = cluster.NODE_TIMEOUT, f"no answer within {timeout:g} s (the node is alive in Ray but its task did not finish)"
        try:
            ray.cancel(ref, force=True)
        except Exception:
            pass


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
