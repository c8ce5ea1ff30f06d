"""GPUs and the user-space driver: NVML first, ``nvidia-smi -q -x`` when NVML is unusable."""

from __future__ import annotations

import glob
import os
from typing import Dict

from gpudoctor.snapshot import ABSENT, Fact, missing, ok

# Where distributions and container runtimes put libnvidia-ml (used when NVML could not load it).
LIBRARY_DIRS = (
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
    "/lib",
    "/usr/local/nvidia/lib64",
    "/usr/lib/wsl/lib",
)


def collect(ctx) -> Dict[str, Fact]:
    if not ctx.live:
        facts = {"driver.nvml": missing(ABSENT, f"live probes are off under --root {ctx.root}", "nvml")}
    else:
        from gpudoctor.probes import nvml

        facts = nvml.collect()
        if facts["driver.nvml"].ok:
            from gpudoctor.probes import fabric

            facts.update(fabric.collect(ctx, facts))  # NVSwitch machines only: a child, never this process
    if not facts["driver.nvml"].ok:
        if ctx.live:
            from gpudoctor.probes import nvidia_smi

            facts.update(nvidia_smi.collect(ctx))
        facts.setdefault("driver.library_path", find_library(ctx))
    if ctx.live:
        from gpudoctor.probes import nic_affinity, pci_path

        facts.update(pci_path.collect(ctx, facts))  # sysfs only: the bridges above each GPU, the IOMMU
        facts.update(nic_affinity.collect(ctx, facts))  # sysfs only: the PCIe path from each GPU to each RDMA NIC
    return facts


def find_library(ctx) -> Fact:
    """The real file behind libnvidia-ml.so.1; its name carries the user-space driver version."""
    dirs = [d for d in ctx.environ.get("LD_LIBRARY_PATH", "").split(":") if d] + list(LIBRARY_DIRS)
    for directory in dirs:
        for candidate in glob.glob(os.path.join(ctx.path(directory), "libnvidia-ml.so.1")):
            return ok(os.path.realpath(candidate), "filesystem")
    return missing(ABSENT, "libnvidia-ml.so.1 not found in " + ", ".join(dirs[:4]) + " …", "filesystem")
