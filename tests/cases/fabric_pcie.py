"""GD323 (rules/fabric_pcie.py): ACS on the PCIe bridges between GPUs that do P2P over PCIe.

The recorded 2xH200 (NV18 through NVSwitches) with its pair turned into a PCIe pair under one
switch (PXB, P2P OK, no NVLink), and the bridges' configuration space taken from pciutils' test
dumps (fixtures/pci: a Haswell-E root port with ACS redirection on, a QuickPath root port with
it off, a switch port dumped in 256 bytes), laid out as a sysfs tree and read by the real
probes.pci_path. PCIe topologies with a switch are hardware we lack; the registers are real.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Dict, List

from cases import Case, env, merge, put
from cases.fabric import h200, x2, x4
from gpudoctor.probes import Context, nic_affinity, node, pci_path
from gpudoctor.snapshot import ok

DUMPS = Path(__file__).resolve().parent.parent / "fixtures" / "pci"
PCIE_PAIR = put("gpu.pairs", {"0-1": {"level": "PXB", "nvlinks": 0, "connection": "PXB",
                                      "p2p": {"read": "OK", "write": "OK", "nvlink": "NS", "atomics": "OK"}}})
ROOT, UP, DOWN0, DOWN1 = "0000:00:02.0", "0000:01:00.0", "0000:02:08.0", "0000:02:10.0"
GPU0, GPU1 = "0000:03:00.0", "0000:04:00.0"


def config(name: str) -> bytes:
    out = bytearray()
    for line in (DUMPS / name).read_text(encoding="utf-8").splitlines():
        head, _, rest = line.partition(": ")
        if rest and all(c in "0123456789abcdef" for c in head):
            out += bytes.fromhex(rest)
    return bytes(out)


ON, OFF, SHORT = (lambda: config("cap-aer-root")), (lambda: config("cap-pcie-1")), (lambda: config("cap-dpc"))


def switch(tmp: Path, configs: Dict[str, bytes], iommu: str = "DMA-FQ") -> Dict[str, object]:
    """Two GPUs under one PCIe switch (root port -> upstream port -> a downstream port each), as sysfs."""
    bus = tmp / "sys" / "bus" / "pci" / "devices"
    bus.mkdir(parents=True)
    top = tmp / "sys" / "devices" / "pci0000:00"
    for chain in ([ROOT, UP, DOWN0, GPU0], [ROOT, UP, DOWN1, GPU1]):
        where = top
        for bdf in chain:
            where = where / bdf
            if not where.exists():
                where.mkdir(parents=True)
                (where / "config").write_bytes(configs.get(bdf, OFF()))
                os.symlink(os.path.relpath(where, bus), bus / bdf)
        group = tmp / "sys" / "kernel" / "iommu_groups" / chain[-1][5:7]
        group.mkdir(parents=True)
        (group / "type").write_text(iommu + "\n")
        os.symlink(os.path.relpath(group, where), where / "iommu_group")
    (tmp / "sys" / "class" / "iommu" / "dmar0").mkdir(parents=True)
    facts = {"gpu.count": ok(2, "nvml"), "gpu.0.pci_bus_id": ok("00000000:03:00.0", "nvml"), "gpu.1.pci_bus_id": ok("00000000:04:00.0", "nvml")}
    return pci_path.collect(Context(root=str(tmp)), facts)


def pcie(configs=None, iommu: str = "DMA-FQ", *edits):
    def make(tmp: Path):
        data = x2(PCIE_PAIR, *edits)(tmp)
        merge(switch(tmp / "sysfs", {k: v() for k, v in (configs or {}).items()}, iommu))(data)
        return data

    return make


def broken_copy(data) -> None:
    merge({"gpu.p2p_check": ok({"gpus": [0, 1], "pairs": {"0->1": {"peer_access": True, "verified": False, "wrong_words": 4096},
                                                              "1->0": {"peer_access": True, "verified": True, "wrong_words": 0}}},
                               "torch + NCCL in a child (--deep)")})(data)


# GD324: four GPUs, two per CPU socket, each pair under its socket's PCIe switch (root port -> upstream
# port -> a downstream port per device), and RDMA NICs placed on a socket's switch or its own root port.
SOCKETS = ((0, "00", "01", "02", "03"), (1, "80", "81", "82", "83"))  # numa node, host bus, switch buses
GPU_BUS = {0: "0000:00:06.0", 1: "0000:00:07.0", 2: "0000:80:06.0", 3: "0000:80:07.0"}  # x4's recorded and added GPUs


def rdma_tree(tmp: Path, nics: Dict[str, str], state: str = "4: ACTIVE", numa: bool = True) -> Path:
    """nics: {name: "0" (on socket 0's switch) | "1" | "0-root" (its own root port on socket 0)}."""
    root = tmp / "rdma-root"
    bus = root / "sys" / "bus" / "pci" / "devices"
    bus.mkdir(parents=True)

    def device(path: Path, node_id: int) -> None:
        path.mkdir(parents=True, exist_ok=True)
        if numa:
            (path / "numa_node").write_text(f"{node_id}\n")
        if not (bus / path.name).exists():
            os.symlink(os.path.relpath(path, bus), bus / path.name)

    for node_id, host, up, down, below in SOCKETS:
        switch = root / "sys" / "devices" / f"pci0000:{host}" / f"0000:{host}:01.0" / f"0000:{up}:00.0"
        for slot, gpu in enumerate(g for g in GPU_BUS if g // 2 == node_id):
            device(switch / f"0000:{down}:0{slot}.0" / GPU_BUS[gpu], node_id)
        for name, where in nics.items():
            if where == str(node_id):
                path = switch / f"0000:{down}:1f.0" / f"0000:{below}:00.{sorted(nics).index(name)}"
            elif where == f"{node_id}-root":
                path = root / "sys" / "devices" / f"pci0000:{host}" / f"0000:{host}:03.0" / f"0000:{below}:10.0"
            else:
                continue
            device(path, node_id)
            ports = root / "sys" / "class" / "infiniband" / name / "ports" / "1"
            ports.mkdir(parents=True)
            for key, value in (("state", state), ("link_layer", "InfiniBand"), ("rate", "400 Gb/sec (4X NDR)")):
                (ports / key).write_text(value + "\n")
            os.symlink(os.path.relpath(path, ports.parent.parent), ports.parent.parent / "device")
    return root


def rdma(nics: Dict[str, str], *edits, state: str = "4: ACTIVE", numa: bool = True):
    def make(tmp: Path):
        data = x4()(tmp)
        ctx = Context(root=str(rdma_tree(tmp, nics, state, numa)), environ={})
        facts = {"gpu.count": ok(4, "nvml"), **{f"gpu.{i}.pci_bus_id": ok("0000" + bdf, "nvml") for i, bdf in GPU_BUS.items()}}
        merge({"rdma.devices": node.rdma(ctx), **nic_affinity.collect(ctx, facts)})(data)
        for edit in edits:
            edit(data)
        return data

    return make


CASES: List[Case] = [
    Case("nvlink-pair-recorded", "GD323", x2(), "not_applicable", message=("no pair",)),
    Case("one-gpu", "GD323", h200(), "not_applicable", message=("1 GPU",)),
    Case("acs-off-under-a-switch", "GD323", pcie(), "pass"),
    Case("acs-on-the-shared-root-port-only", "GD323", pcie({ROOT: ON, UP: ON}), "pass"),
    Case(
        "acs-redirect-on-a-downstream-port", "GD323", pcie({DOWN1: ON}), "fail", "warning",
        (f"{DOWN1} (GPU 0-1: ReqRedir+CmpltRedir)", "the IOMMU translates for GPU 0 (DMA-FQ), GPU 1 (DMA-FQ)"),
        ("gpu.0.pci_path", "gpu.1.pci_path"), commands=(f"sudo setpci -s {DOWN1} ECAP_ACS+0x6.w=0000", "iommu=pt"),
    ),
    Case("iommu-pass-through", "GD323", pcie({DOWN0: ON}, "identity"), "fail", "warning", (f"{DOWN0} (GPU 0-1",),
         commands=(f"sudo setpci -s {DOWN0}",)),
    Case("registers-need-root", "GD323", pcie({DOWN0: SHORT, DOWN1: SHORT}), "unknown", message=("need root",)),
    Case("deep-found-it-broken", "GD323", pcie({DOWN1: ON}, "DMA-FQ", broken_copy), "not_applicable", message=("GD318",)),
    Case("no-sysfs", "GD323", x2(PCIE_PAIR), "unknown", message=("gpu.0.pci_path",)),
    Case("no-rdma-nic-recorded", "GD324", x2(), "not_applicable", message=("no active InfiniBand",)),
    Case("a-nic-on-each-sockets-switch", "GD324", rdma({"mlx5_0": "0", "mlx5_1": "1"}), "pass"),
    Case(
        "one-nic-on-the-other-socket", "GD324", rdma({"mlx5_0": "0"}), "fail", "warning",
        ("2 of the 4 visible GPU(s) have no active RDMA NIC within PXB (its default)",
         "GPU 2 (nearest active NIC mlx5_0: SYS); GPU 3 (nearest active NIC mlx5_0: SYS)"),
        ("rdma.gpu_affinity", "rdma.devices"), commands=("nvidia-smi topo -m",),
    ),
    Case("one-nic-on-its-own-root-port", "GD324", rdma({"mlx5_0": "0-root", "mlx5_1": "1"}), "fail", "warning",
         ("GPU 0 (nearest active NIC mlx5_0: PHB); GPU 1 (nearest active NIC mlx5_0: PHB)",)),
    Case("gdr-level-raised-to-sys", "GD324", rdma({"mlx5_0": "0"}, env(NCCL_NET_GDR_LEVEL="SYS")), "pass"),
    Case("gdr-level-a-number", "GD324", rdma({"mlx5_0": "0"}, env(NCCL_NET_GDR_LEVEL="5")), "unknown", message=("'5'",)),
    Case("no-numa-node-known", "GD324", rdma({"mlx5_0": "0"}, numa=False), "fail", "warning", ("mlx5_0: NODE|SYS",)),
    Case("ports-down", "GD324", rdma({"mlx5_0": "0"}, state="1: DOWN"), "not_applicable", message=("no active",)),
    Case("affinity-not-in-this-snapshot", "GD324", rdma({"mlx5_0": "0"}, put("rdma.gpu_affinity", None, "absent", "an older snapshot")),
         "not_applicable", message=("rdma.gpu_affinity was not read here",)),
    Case("affinity-refused", "GD324", rdma({"mlx5_0": "0"}, put("rdma.gpu_affinity", None, "no_permission", "sysfs hidden")), "unknown",
         message=("needs rdma.gpu_affinity",)),
]
