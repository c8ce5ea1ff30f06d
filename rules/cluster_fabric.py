"""GD909: the nodes of one deployment do not share an RDMA network (InfiniBand / RoCE).

Area "cluster". Judges each node's ``rdma.devices`` (probes/node.py: /sys/class/infiniband, the
ports' state and link layer) across the nodes that answered; NCCL's settings across nodes are
GD904's (env NCCL_*), the NCCL version GD903's.
"""

from __future__ import annotations

from typing import Dict, List, Tuple

from gpudoctor.rule import WARNING, Fail, Fix, NotApplicable, Unknown, rule

from .cluster import _cluster_nodes, _names, on_cluster
from .fabric import _active_rdma


def _layers(ports: List[str]) -> Tuple[str, ...]:
    """("InfiniBand",) / ("Ethernet",) …: what the node's active ports speak (RoCE is Ethernet)."""
    return tuple(sorted({port.rsplit("(", 1)[-1].rstrip(")") for port in ports}))


@rule("GD909", "cluster-rdma-differs", severity=WARNING, area="cluster", applies=on_cluster)
def cluster_rdma_differs(snap):
    """Active RDMA ports (InfiniBand, RoCE) on some nodes only, or of different kinds.

    ## Why
    NCCL chooses its network on each node: InfiniBand/RoCE (NET/IB) where an RDMA port is active,
    TCP sockets otherwise. Ranks on nodes that chose differently cannot connect over RDMA, so the
    job's inter-node all-reduces fail to connect or run over sockets, an order of magnitude slower;
    ports of different link layers (InfiniBand on some nodes, RoCE on others) cannot talk to each
    other either.

    ## Fix
    Bring the missing ports up (`ibstat`, `ibv_devinfo` on the node named), or, to run over
    sockets on purpose, set `NCCL_IB_DISABLE=1` on every node. `NCCL_DEBUG=INFO` prints which
    network each rank chose ("NET/IB" or "NET/Socket").

    ## References
    - NCCL environment variables, NCCL_IB_DISABLE / NCCL_IB_HCA:
      https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html#nccl-ib-disable
    - NCCL troubleshooting, networking:
      https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html#networking-issues
    """
    nodes, na = _cluster_nodes(snap)
    if na:
        return na
    kinds: Dict[str, Tuple[str, ...]] = {}
    unread: List[str] = []
    ports: Dict[str, List[str]] = {}
    for name, node in nodes:
        fact = node.get("rdma.devices")
        if not fact.ok:
            unread.append(name)
            continue
        ports[name] = _active_rdma(fact.value)
        kinds[name] = _layers(ports[name])
    if not any(kinds.values()):
        if unread:
            return Unknown(f"RDMA devices not read on {_names(unread)}")
        return NotApplicable("no node has an active RDMA port: NCCL uses sockets between all of them")
    groups: Dict[Tuple[str, ...], List[str]] = {}
    for name, key in kinds.items():
        groups.setdefault(key, []).append(name)
    if len(groups) < 2:
        return Unknown(f"RDMA devices not read on {_names(unread)}") if unread else None
    described = "; ".join(f"{' + '.join(key) or 'none active'} on {_names(names)}"
                          for key, names in sorted(groups.items(), key=lambda item: -len(item[1])))
    without = [name for name, key in kinds.items() if not key]
    odd = without or sorted(groups.items(), key=lambda item: len(item[1]))[0][1]
    return Fail(
        f"the nodes do not share an RDMA network ({described}): NCCL's inter-node traffic cannot use it between them",
        [(f"{name}: active RDMA ports", ", ".join(ports[name]) or "none") for name in kinds],
        Fix("Bring the RDMA ports up on the nodes named, or run every node over sockets on purpose.",
            ["ibstat; ibv_devinfo   # on " + _names(odd), "export NCCL_IB_DISABLE=1   # on every node, to use sockets everywhere",
             "NCCL_DEBUG=INFO   # each rank prints NET/IB or NET/Socket"]),
        subject=_names(odd),
    )
