"""GD323: PCIe Access Control Services redirecting peer-to-peer traffic between GPUs that use PCIe P2P.
GD324: a GPU with no active RDMA NIC near enough for NCCL's GPUDirect RDMA (probes/nic_affinity.py).

Area "gpu". Judges probes/pci_path.py's facts (gpu.N.pci_path: the bridges above each GPU with
their ACS control bits, and the IOMMU group type; host.iommu) for the GPU pairs of the planned
group that do P2P over PCIe (NVML's P2P read OK, no NVLink). A pair joined by NVLink does not
touch PCIe for peer traffic; ACS registers that need root to read make the rule unknown.
"""

from __future__ import annotations

from itertools import combinations
from typing import Any, Dict, List, Optional

from gpudoctor.rule import WARNING, Fail, Fix, NotApplicable, Unknown, rule

from .fabric import _active_rdma, _not_read, _pair, _planned_group
from .fabric_deep import p2p_write_verify_failed

REDIRECTING = ("ReqRedir", "CmpltRedir")
TRANSLATING = ("DMA", "DMA-FQ")  # /sys/kernel/iommu_groups/N/type; "identity" is pass-through


def _path(snap, index: int) -> Optional[Dict[str, Any]]:
    fact = snap.get(f"gpu.{index}.pci_path")
    return fact.value if fact.ok and isinstance(fact.value, dict) else None


@rule("GD323", "pcie-acs-redirects-p2p", severity=WARNING, area="gpu", requires=("gpu.count",))
def pcie_acs_redirects_p2p(snap):
    """PCIe ACS redirects peer-to-peer traffic between GPUs that talk over PCIe.

    ## Why
    With Access Control Services request/completion redirection on a bridge between two GPUs,
    their peer-to-peer writes go up to the root complex (and through the IOMMU when it
    translates) instead of across the switch: at best slower, at worst corrupted or stuck, which
    shows as a tensor-parallel hang at the first all-reduce, while NVML still reports P2P "OK".
    The kernel turns ACS on when an IOMMU is enabled. NVLink pairs are not affected.

    ## Fix
    Clear the ACS control register of the bridges named (lasts until reboot; the lasting fix is
    ACS off in the BIOS), and put the IOMMU in pass-through (`iommu=pt`) if it translates.
    `gpudoctor check --deep` then verifies the copies.

    ## References
    - NCCL troubleshooting, PCI Access Control Services (ACS) (`lspci -vvv | grep ACSCtl`, `setpci
      … ECAP_ACS+0x6.w=0000`):
      https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html#pci-access-control-services-acs
    - The register: PCI_EXT_CAP_ID_ACS and PCI_ACS_CTRL in the kernel's include/uapi/linux/pci_regs.h:
      https://github.com/torvalds/linux/blob/master/include/uapi/linux/pci_regs.h
    """
    group, what = _planned_group(snap)
    if len(group) < 2:
        return NotApplicable(f"{len(group)} GPU: no peer-to-peer traffic")
    if not snap.get("gpu.pairs").ok:
        return NotApplicable("gpu.pairs was not read here")
    over_pcie = [(a, b) for a, b in combinations(group, 2) for entry in [_pair(snap, a, b) or {}]
                 if not entry.get("nvlinks") and (entry.get("p2p") or {}).get("read") == "OK"]
    if not over_pcie:
        return NotApplicable(f"no pair of {what} does P2P over PCIe (NVLink, or no P2P)")
    if isinstance(p2p_write_verify_failed(snap), Fail):
        return NotApplicable("--deep found the copies broken: GD318 names that, with this fix")
    redirecting: Dict[str, List[str]] = {}
    unreadable: List[str] = []
    translating: List[str] = []
    for a, b in over_pcie:
        path_a, path_b = _path(snap, a), _path(snap, b)
        if path_a is None or path_b is None:
            return Unknown(f"needs gpu.{a}.pci_path and gpu.{b}.pci_path: "
                           f"{snap.get(f'gpu.{a if path_a is None else b}.pci_path').describe()}")
        buses_a = {bridge["bus"]: bridge for bridge in path_a.get("bridges") or []}
        buses_b = {bridge["bus"]: bridge for bridge in path_b.get("bridges") or []}
        between = [bridges[bus] for bridges in (buses_a, buses_b) for bus in bridges if (bus in buses_a) != (bus in buses_b)]
        for bridge in between:
            acs = bridge.get("acs")
            if acs == "unreadable":
                unreadable.append(bridge["bus"])
            elif isinstance(acs, dict) and any(acs.get(bit) for bit in REDIRECTING):
                on = "+".join(bit for bit in REDIRECTING if acs.get(bit))
                redirecting.setdefault(bridge["bus"], []).append(f"GPU {a}-{b}: {on}")
        translating += [f"GPU {i} ({path.get('iommu_type')})" for i, path in ((a, path_a), (b, path_b))
                        if path.get("iommu_type") in TRANSLATING]
    if not redirecting:
        if unreadable:
            return Unknown(f"the ACS registers of bridge(s) {', '.join(sorted(set(unreadable)))} need root to read: "
                           "run `sudo gpudoctor check`, or `sudo lspci -vvv | grep ACSCtl`")
        return None
    commands = [f"sudo setpci -s {bus} ECAP_ACS+0x6.w=0000" for bus in sorted(redirecting)]
    commands.append("sudo lspci -vvv | grep ACSCtl   # every ReqRedir-/CmpltRedir- now")
    translating = sorted(set(translating))
    if translating:
        commands.append("cat /proc/cmdline   # add iommu=pt to the kernel command line, then reboot")
    commands.append("gpudoctor check --deep   # copies between every GPU pair, verified")
    bridges = "; ".join(f"{bus} ({', '.join(sorted(set(pairs)))})" for bus, pairs in sorted(redirecting.items()))
    return Fail(
        f"PCIe ACS redirects peer traffic on bridge(s) between GPUs that do P2P over PCIe: {bridges}"
        + (f"; the IOMMU translates for {', '.join(translating)}" if translating else "")
        + ": peer copies go through the root complex, slower, and can hang an all-reduce",
        [f"gpu.{i}.pci_path" for i in sorted({g for pair in over_pcie for g in pair})] + ["host.iommu"],
        Fix("Turn ACS redirection off on those bridges (until reboot; the BIOS for good), IOMMU in pass-through.",
            commands, safety="needs_root"),
    )


NCCL_GDR_DEFAULT = "PXB"  # src/graph/paths.cc, ncclTopoCheckGdr: netGdrLevel = PATH_PXB
_NCCL_RANK = {"LOC": 0, "PIX": 1, "PXB": 2, "PHB": 3, "NODE": 3, "SYS": 4, "NODE|SYS": 4}  # nvidia-smi's NODE is NCCL's PHB


@rule("GD324", "gpu-far-from-rdma-nic", severity=WARNING, area="gpu", requires=("gpu.count",))
def gpu_far_from_rdma_nic(snap):
    """A GPU with no RDMA NIC near enough for GPUDirect RDMA: its inter-node traffic goes through host memory.

    ## Why
    NCCL lets a NIC read and write a GPU's memory directly (GPUDirect RDMA) only when the PCIe
    path between them is no longer than NCCL_NET_GDR_LEVEL, PXB by default: under the same PCIe
    switches. A GPU whose nearest active NIC is behind the CPU's host bridge (PHB, NODE) or on the
    other CPU socket (SYS) has every inter-node transfer copied through host memory first
    (NCCL's INFO log: "GPU Direct RDMA Disabled for GPU … (distance N > M)"): multi-node tensor
    or pipeline parallelism and disaggregated prefill/decode transfers run well below the
    fabric's bandwidth. Raising NCCL_NET_GDR_LEVEL to SYS turns GDR on across the sockets, which
    is usually slower still; the fix is the NIC next to the GPU.

    ## Fix
    Use the NIC next to each GPU (each rank's GPU and NIC on one PCIe switch: `nvidia-smi topo -m`
    shows PIX or PXB in the NIC's column), or put a NIC in a slot under the GPUs' switches.
    Confirm with NCCL_DEBUG=INFO that the inter-node channels say GDRDMA.

    ## References
    - NCCL's GDR distance check, ``ncclTopoCheckGdr`` (default PATH_PXB):
      https://github.com/NVIDIA/nccl/blob/master/src/graph/paths.cc
    - NCCL_NET_GDR_LEVEL: https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html#nccl-net-gdr-level-formerly-nccl-ib-gdr-level
    - The levels, as `nvidia-smi topo -m` prints them (X, PIX, PXB, PHB, NODE, SYS):
      https://docs.nvidia.com/deploy/nvidia-smi/index.html
    """
    if not snap.get("rdma.devices").ok:
        return _not_read(snap, "rdma.devices")
    active = _active_rdma(snap.value("rdma.devices"))
    if not active:
        return NotApplicable("no active InfiniBand/RoCE port: no GPUDirect RDMA to lose")
    affinity = snap.get("rdma.gpu_affinity")
    if not affinity.ok or not isinstance(affinity.value, dict):
        return _not_read(snap, "rdma.gpu_affinity")
    env = snap.value("env") or {}
    limit = str(env.get("NCCL_NET_GDR_LEVEL") or NCCL_GDR_DEFAULT).strip().upper() if isinstance(env, dict) else NCCL_GDR_DEFAULT
    if limit not in _NCCL_RANK:
        return Unknown(f"NCCL_NET_GDR_LEVEL={limit!r}: not a level gpudoctor reads (LOC, PIX, PXB, PHB, SYS)")
    ports = {name.split("/")[0] for name in active}
    group, what = _planned_group(snap)
    gpus = affinity.value.get("gpus") or {}
    far = []
    for index in group:
        entry = gpus.get(str(index))
        if not isinstance(entry, dict):
            continue
        levels = {nic: lvl for nic, lvl in (entry.get("levels") or {}).items() if nic in ports}
        if not levels:
            continue
        best = min(levels.values(), key=lambda lvl: _NCCL_RANK.get(lvl, 4))
        if _NCCL_RANK.get(best, 4) > _NCCL_RANK[limit]:
            nearest = sorted(nic for nic, lvl in levels.items() if lvl == best)
            far.append(f"GPU {index} (nearest active NIC {', '.join(nearest)}: {best})")
    if not far:
        return None
    said = "its default" if "NCCL_NET_GDR_LEVEL" not in env else "NCCL_NET_GDR_LEVEL"
    return Fail(
        f"{len(far)} of {what} have no active RDMA NIC within {limit} ({said}), so NCCL turns GPUDirect RDMA off "
        f"for them and stages their inter-node traffic through host memory: {'; '.join(far)}",
        ["rdma.gpu_affinity", "rdma.devices"] + (["env"] if said != "its default" else []),
        Fix("Give each rank the NIC on its GPU's PCIe switch (PIX/PXB in `nvidia-smi topo -m`), or move a NIC under "
            "those GPUs' switches; NCCL_NET_GDR_LEVEL=SYS forces GDR across the sockets, usually slower still.",
            ["nvidia-smi topo -m   # the NIC columns: PIX or PXB next to each GPU that sends across nodes",
             "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET <your launch> 2>&1 | grep -E 'GPU Direct RDMA|GDRDMA'"],
            safety="read_only"),
    )
