"""Which RDMA NIC each GPU is near: the PCIe path between them, in the words of `nvidia-smi topo -m`.

NCCL uses GPUDirect RDMA between a GPU and a NIC only when the path between them is no longer
than NCCL_NET_GDR_LEVEL, PXB by default (src/graph/paths.cc, ``ncclTopoCheckGdr``); a GPU whose
nearest NIC is further away sends its inter-node traffic through host memory ("GPU Direct RDMA
Disabled for GPU … (distance N > M)" in NCCL's INFO log). Read from sysfs, no root needed:

  rdma.gpu_affinity  {"nics": {name: {"pci": bus id, "numa": node | null}},
                      "gpus": {"N": {"pci", "numa", "levels": {nic: level}, "nearest": [nics], "level": level}}}

Levels, nearest first: PIX (at most one PCIe switch between them), PXB (several switches, no host
bridge), PHB (through the host bridge they share), NODE (across host bridges of one NUMA node),
SYS (across NUMA nodes); "NODE|SYS" when a NUMA node is unknown. A switch's upstream port and its
downstream ports are counted as the one switch they are, as nvidia-smi counts them: the device
path /sys/devices/pciDDDD:BB/<root port>/<switch up>/<switch down>/<device>.
"""

from __future__ import annotations

import os
import re
from typing import Any, Dict, List, Mapping, Optional, Tuple

from gpudoctor.probes.nvml_links import normal_bus_id
from gpudoctor.snapshot import ABSENT, Fact, missing, ok

SOURCE = "/sys/class/infiniband, /sys/bus/pci"
LEVELS = ("PIX", "PXB", "PHB", "NODE", "SYS")
MAX_NICS = 64
_BDF = re.compile(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")
_HOST_BRIDGE = re.compile(r"pci[0-9a-f]{4}:[0-9a-f]{2}")


def collect(ctx, facts: Mapping[str, Fact]) -> Dict[str, Fact]:
    count = facts.get("gpu.count")
    if count is None or not count.ok or not isinstance(count.value, int) or count.value < 1:
        return {}
    base = ctx.path("/sys/class/infiniband")
    try:
        names = sorted(os.listdir(base))[:MAX_NICS]
    except OSError:
        return {"rdma.gpu_affinity": missing(ABSENT, "no /sys/class/infiniband: no RDMA device", SOURCE)}
    nics: Dict[str, Dict[str, Any]] = {}
    places: Dict[str, Tuple[str, List[str], Optional[int]]] = {}
    for name in names:
        place = _place(os.path.join(base, name, "device"))
        if place is not None:
            places[name] = place
            nics[name] = {"pci": place[1][-1], "numa": place[2]}
    if not nics:
        return {"rdma.gpu_affinity": missing(ABSENT, "no RDMA device with a PCI function under /sys/class/infiniband", SOURCE)}
    gpus: Dict[str, Dict[str, Any]] = {}
    for index in range(count.value):
        bus = facts.get(f"gpu.{index}.pci_bus_id")
        if bus is None or not bus.ok or not isinstance(bus.value, str):
            continue
        place = _place(ctx.path("/sys/bus/pci/devices", normal_bus_id(bus.value)))
        if place is None:
            continue
        levels = {nic: level(place, where) for nic, where in places.items()}
        best = min(levels.values(), key=rank)
        gpus[str(index)] = {"pci": place[1][-1], "numa": place[2], "levels": levels, "level": best,
                            "nearest": sorted(nic for nic, lvl in levels.items() if lvl == best)}
    if not gpus:
        return {"rdma.gpu_affinity": missing(ABSENT, "no GPU's PCI function found under /sys/bus/pci/devices", SOURCE)}
    return {"rdma.gpu_affinity": ok({"nics": nics, "gpus": gpus}, SOURCE)}


def _place(device: str) -> Optional[Tuple[str, List[str], Optional[int]]]:
    """(host bridge, the bus ids from the root port down to the device, NUMA node) of a sysfs device link."""
    if not os.path.exists(device):
        return None
    parts = os.path.realpath(device).split(os.sep)
    hosts = [i for i, part in enumerate(parts) if _HOST_BRIDGE.fullmatch(part)]
    if not hosts:
        return None
    chain = [part for part in parts[hosts[-1] + 1:] if _BDF.fullmatch(part)]
    if not chain:
        return None
    try:
        with open(os.path.join(device, "numa_node"), encoding="ascii") as handle:
            numa: Optional[int] = int(handle.read().strip())
    except (OSError, ValueError):
        numa = None
    return parts[hosts[-1]], chain, (numa if numa is not None and numa >= 0 else None)


def _switches(chain: List[str]) -> List[str]:
    """The bridges above a device, a switch counted once: the root port, then each switch's upstream port."""
    bridges = chain[:-1]
    return bridges[:1] + bridges[1::2]


def level(a: Tuple[str, List[str], Optional[int]], b: Tuple[str, List[str], Optional[int]]) -> str:
    """The PCIe path between two devices placed by ``_place``."""
    if a[0] != b[0]:
        if a[2] is None or b[2] is None:
            return "NODE|SYS"
        return "NODE" if a[2] == b[2] else "SYS"
    above_a, above_b = _switches(a[1]), _switches(b[1])
    shared = 0
    while shared < min(len(above_a), len(above_b)) and above_a[shared] == above_b[shared]:
        shared += 1
    if shared == 0:
        return "PHB"
    crossed = (len(above_a) - shared) + (len(above_b) - shared) + 1
    return "PIX" if crossed == 1 else "PXB"


def rank(name: str) -> int:
    """Nearest first; NODE|SYS as far as SYS."""
    return LEVELS.index(name) if name in LEVELS else len(LEVELS) - 1
