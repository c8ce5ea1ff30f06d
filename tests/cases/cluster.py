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

# GD909 cluster-rdma-differs: the H200 recordings have no RDMA device; the ports are public
# /sys/class/infiniband readings' shape (state "4: ACTIVE", link_layer InfiniBand / Ethernet for RoCE).
IB = {"mlx5_0": {"1": {"state": "4: ACTIVE", "link_layer": "InfiniBand", "rate": "400 Gb/sec (4X NDR)"}}}
ROCE = {"mlx5_0": {"1": {"state": "4: ACTIVE", "link_layer": "Ethernet", "rate": "200 Gb/sec (4X HDR)"}}}
IB_DOWN = {"mlx5_0": {"1": {"state": "1: DOWN", "link_layer": "InfiniBand", "rate": "10 Gb/sec (4X SDR)"}}}
CASES += [
    Case("no-rdma-anywhere", "GD909", nodes(("a", H200(put("rdma.devices", {}))), ("b", H200(put("rdma.devices", {})))), "not_applicable"),
    Case("ib-on-both", "GD909", nodes(("a", H200(put("rdma.devices", IB))), ("b", H200(put("rdma.devices", IB)))), "pass"),
    Case("ib-down-on-one", "GD909", nodes(("a", H200(put("rdma.devices", IB))), ("b", H200(put("rdma.devices", IB_DOWN)))),
         "fail", "warning", ("InfiniBand on a; none active on b",), subject="b", commands=("ibstat", "NCCL_IB_DISABLE=1")),
    Case("ib-and-roce", "GD909", nodes(("a", H200(put("rdma.devices", IB))), ("b", H200(put("rdma.devices", ROCE))),
                                       ("c", H200(put("rdma.devices", IB)))),
         "fail", "warning", ("InfiniBand on a, c; Ethernet on b",), subject="b"),
    Case("unread-on-one", "GD909", nodes(("a", H200(put("rdma.devices", IB))), ("b", H200(put("rdma.devices", None, "error", "x")))),
         "unknown", message=("not read on b",)),
    Case("single-node", "GD909", lambda tmp: Snapshot.from_json(load("h200.json")), "not_applicable"),
]

# --deep's all-reduce is measured on each node: its numbers differ, the stack does not (GD903).
DEEP = {"outcome": "ok", "world": 2, "transports": ["P2P/CUMEM"], "nccl_version": "2.28.9"}
CASES += [
    Case("deep-measurements-differ", "GD903",
         nodes(("a", H200(put("nccl.allreduce_check", {**DEEP, "busbw_gbps": 268.53}))),
               ("b", H200(put("nccl.allreduce_check", {**DEEP, "busbw_gbps": 267.27})))), "pass"),
]
