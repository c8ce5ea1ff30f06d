"""The PCIe path above each GPU: the bridges' Access Control Services (ACS), and the IOMMU.

With ACS redirection on a bridge between two GPUs, or an IOMMU translating their addresses,
peer-to-peer traffic goes up to the root complex: slower at best, corrupted or stuck at worst,
while NVML still reports P2P "OK" (NCCL's troubleshooting: "IO virtualization … can interfere
with GPU Direct by redirecting all PCI point-to-point traffic to the CPU root complex, causing a
significant performance reduction or even a hang"). Read from sysfs, no root needed except for
the ACS registers:

  gpu.N.pci_path   {"bridges": [{"bus", "acs": {"SrcValid": bool, …} | null (no ACS capability)
                    | "unreadable"}], "iommu_group": "12" | null, "iommu_type": "DMA-FQ" | …}
                   The bridges from the root port down to the GPU, as the device's sysfs path
                   names them (/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/…).
  host.iommu       {"active": bool, "units": [names in /sys/class/iommu], "cmdline": [iommu=…,
                    intel_iommu=…, amd_iommu=…]}

The ACS control register lives in PCIe extended configuration space (offset 0x100 and up), which
the kernel shows only to root: another user reads 256 bytes of ``config`` and the bridge's ACS
is "unreadable" (never guessed). Decoding follows include/uapi/linux/pci_regs.h
(PCI_EXT_CAP_ID_ACS 0x0D, PCI_ACS_CTRL at +6, SV/TB/RR/CR/UF/EC/DT bits 0-6), the same
register ``lspci -vvv`` prints as "ACSCtl:" (checked against pciutils' own test dumps).
"""

from __future__ import annotations

import os
import re
import struct
from typing import Any, Dict, List, Mapping, Optional, Union

from gpudoctor.probes.nvml_links import normal_bus_id
from gpudoctor.snapshot import ABSENT, NOT_SUPPORTED, Fact, missing, ok

SOURCE = "/sys/bus/pci, /sys/kernel/iommu_groups"
ACS_BITS = ("SrcValid", "TransBlk", "ReqRedir", "CmpltRedir", "UpstreamFwd", "EgressCtrl", "DirectTrans")
_ACS_ID = 0x000D
_BDF = re.compile(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")
_CMDLINE = re.compile(r"^(iommu|intel_iommu|amd_iommu|iommu\.passthrough|iommu\.strict)=")


def acs_control(config: bytes) -> Union[Dict[str, bool], None, str]:
    """The ACS control bits of one device's config space; None without an ACS capability,
    "unreadable" when the extended space is not there to read (not root, or a conventional PCI device)."""
    if len(config) <= 0x100:
        return "unreadable"
    offset, seen = 0x100, set()
    while 0x100 <= offset <= len(config) - 8 and offset not in seen:
        seen.add(offset)
        header = struct.unpack_from("<I", config, offset)[0]
        if header in (0, 0xFFFFFFFF):
            return None
        if header & 0xFFFF == _ACS_ID:
            control = struct.unpack_from("<H", config, offset + 6)[0]
            return {name: bool(control >> bit & 1) for bit, name in enumerate(ACS_BITS)}
        offset = header >> 20 & 0xFFC
    return None


def collect(ctx, facts: Mapping[str, Fact]) -> Dict[str, Fact]:
    count = facts.get("gpu.count")
    if count is None or not count.ok or not isinstance(count.value, int):
        return {}
    out: Dict[str, Fact] = {"host.iommu": _iommu(ctx)}
    for index in range(count.value):
        bus = facts.get(f"gpu.{index}.pci_bus_id")
        if bus is None or not bus.ok or not isinstance(bus.value, str):
            continue
        out[f"gpu.{index}.pci_path"] = gpu_path(ctx, normal_bus_id(bus.value))
    return out


def gpu_path(ctx, bdf: str) -> Fact:
    device = ctx.path("/sys/bus/pci/devices", bdf)
    if not os.path.exists(device):
        return missing(ABSENT, f"{device} does not exist (no PCI sysfs here: a container without /sys, or another OS)", SOURCE)
    real = os.path.realpath(device)
    chain = [part for part in real.split(os.sep) if _BDF.fullmatch(part)]
    bridges: List[Dict[str, Any]] = []
    for bridge in chain[:-1]:
        try:
            with open(ctx.path("/sys/bus/pci/devices", bridge, "config"), "rb") as handle:
                config = handle.read(4096)
        except OSError as exc:
            bridges.append({"bus": bridge, "acs": "unreadable", "why": exc.strerror or str(exc)})
            continue
        bridges.append({"bus": bridge, "acs": acs_control(config)})
    group: Optional[str] = None
    kind: Optional[str] = None
    try:
        group = os.path.basename(os.readlink(os.path.join(device, "iommu_group")))
    except OSError:
        pass
    if group is not None:
        kind = (ctx.read_text("/sys/kernel/iommu_groups", group, "type", limit=64) or "").strip() or None
    return ok({"bridges": bridges, "iommu_group": group, "iommu_type": kind}, SOURCE,
              "" if bridges else "no bridge above this GPU (a VM's root bus, or the GPU on a root port's bus)")


def _iommu(ctx) -> Fact:
    try:
        units = sorted(os.listdir(ctx.path("/sys/class/iommu")))
    except OSError:
        units = []
    cmdline = [token for token in (ctx.read_text("/proc/cmdline", limit=8192) or "").split() if _CMDLINE.match(token)]
    if not units and not os.path.isdir(ctx.path("/sys/kernel/iommu_groups")):
        return missing(NOT_SUPPORTED, "no /sys/class/iommu or /sys/kernel/iommu_groups here", SOURCE)
    return ok({"active": bool(units), "units": units[:16], "cmdline": cmdline}, SOURCE)
