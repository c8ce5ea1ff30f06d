"""GD9xx cluster rules: pass, fail and not-applicable cases.

A case is a merged cluster snapshot (gpudoctor.cluster.merge) of node snapshots recorded on
real machines, with the fewest facts changed; tests/test_cluster.py has the command paths.
"""

from __future__ import annotations

import copy
from typing import Any, Dict, Optional

from gpudoctor import cluster
from gpudoctor.snapshot import Snapshot

from cases import Case, load, put

# The NCCL, vLLM and Ray versions the stack rule compares (the H200 recordings have none).
STACK = {key: {"name": key, "version": version, "location": "/venv/lib/python3.12/site-packages"}
         for key, version in (("vllm", "0.11.0"), ("nvidia-nccl-cu13", "2.28.9"), ("ray", "2.60.0"))}


def node(name: str, *edits) -> Dict[str, Any]:
    data = copy.deepcopy(load(name))
    for edit in edits:
        edit(data)
    return data


def nodes(*members, plan: Optional[Dict[str, int]] = None, unreachable: str = ""):
    """``nodes(("a", node("h200.json")), ("b", node(...)))``: the merged cluster snapshot."""
    def build(tmp):
        parts = [cluster.Member(name, snapshot=Snapshot.from_json(copy.deepcopy(data))) for name, data in members]
        if unreachable:
            parts.append(cluster.Member(unreachable, cluster.UNREACHABLE, "Ray marks this node dead (health check failed)"))
        return cluster.merge(parts, "test", plan)
    return build


H200 = lambda *edits: node("h200.json", *edits)  # noqa: E731
X2 = lambda *edits: node("h200x2.json", *edits)  # noqa: E731
SAME = nodes(("a", H200()), ("b", H200()))

CASES = [
    Case("one-node-is-not-a-cluster", "GD901", lambda tmp: Snapshot.from_json(load("h200.json")), "not_applicable"),
    # GD901 cluster-node-unreachable
    Case("two-nodes-answered", "GD901", SAME, "pass"),
    Case("a-node-ray-marks-dead", "GD901", nodes(("a", H200()), unreachable="b"), "fail", "error", ("health check failed",),
         subject="b"),
    # GD902 cluster-driver-skew
    Case("same-driver", "GD902", SAME, "pass"),
    Case("580.159.04-and-580.95.05", "GD902", nodes(("a", H200()), ("b", H200()), ("c", H200(put("driver.version", "580.95.05")))),
         "fail", "warning", ("580.95.05",), subject="c"),
    # GD903 cluster-stack-skew
    Case("same-stack", "GD903", nodes(("a", H200(put("packages.dists", STACK))), ("b", H200(put("packages.dists", STACK)))), "pass"),
    Case("torch-2.10-on-one-of-three", "GD903",
         nodes(("a", H200()), ("b", H200()), ("c", H200(put("torch.version", "2.10.0+cu129")))), "fail", "error",
         ("2.10.0+cu129",), subject="c"),
    # GD904 cluster-env-skew
    Case("same-environment", "GD904", SAME, "pass"),
    Case("nccl-socket-ifname-on-one-node", "GD904",
         nodes(("a", H200()), ("b", H200()), ("c", H200(lambda d: d["facts"]["env"]["value"].update(NCCL_SOCKET_IFNAME="eth9")))),
         "fail", "warning", ("NCCL_SOCKET_IFNAME eth9 on c",), subject="c"),
    # GD905 cluster-gpu-models-differ
    Case("all-h200", "GD905", SAME, "pass"),
    Case("h200-and-a100", "GD905", nodes(("h200", H200()), ("a100", node("a100.json"))), "fail", "error",
         ("NVIDIA H200 (cc 9.0) on h200", "(cc 8.0) on a100"), subject="h200, a100"),
    # GD906 cluster-gpu-counts-differ
    Case("two-and-two", "GD906", nodes(("a", X2()), ("b", X2())), "pass"),
    Case("two-two-and-one", "GD906", nodes(("two-a", X2()), ("two-b", X2()), ("one", H200())), "fail", "warning",
         ("visible GPUs per node differ: 2 on two-a, two-b; 1 on one",), subject="one"),
    # GD907 cluster-parallel-plan-does-not-fit
    Case("no-plan-given", "GD907", nodes(("a", X2()), ("b", X2())), "not_applicable"),
    Case("tp2-pp2-on-2x2", "GD907", nodes(("a", X2()), ("b", X2()), plan={"tensor_parallel_size": 2, "pipeline_parallel_size": 2}),
         "pass"),
    Case("tp2-pp3-on-2x2", "GD907", nodes(("a", X2()), ("b", X2()), plan={"tensor_parallel_size": 2, "pipeline_parallel_size": 3}),
         "fail", "error", ("needs 6 GPUs, the nodes that answered have 4",)),
    # GD908 cluster-shm-too-small-for-ray
    Case("big-dev-shm", "GD908", SAME, "pass"),
    Case("64-mib-dev-shm-on-one-node", "GD908", nodes(("big", H200()), ("small", H200(put("host.shm_total", 64 << 20)))),
         "fail", "warning", ("/dev/shm on small is 0.1 GiB", "needs 9.3 GiB"), subject="small"),
]
