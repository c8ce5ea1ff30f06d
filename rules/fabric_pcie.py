"""GD323: PCIe Access Control Services redirecting peer-to-peer traffic between GPUs that use PCIe P2P.

Area "gpu". Judges probes/pci_path.py's facts (gpu.N.pci_path: the bridges above each GPU with
their ACS control bits, and the IOMMU group type; host.iommu) for the GPU pairs of the planned
group that do P2P over PCIe (NVML's P2P read OK, no NVLink). A pair joined by NVLink does not
touch PCIe for peer traffic; ACS registers that need root to read make the rule unknown.
"""

from __future__ import annotations

from itertools import combinations
from typing import Any, Dict, List, Optional

from gpudoctor.rule import WARNING, Fail, Fix, NotApplicable, Unknown, rule

from .fabric import _pair, _planned_group
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
