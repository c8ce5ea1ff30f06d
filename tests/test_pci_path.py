"""probes/pci_path.py: ACS read from real configuration-space dumps (pciutils' test data, with lspci's
own decoding as the oracle), and the path above a GPU from a sysfs tree laid out as the kernel does."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from gpudoctor.probes import Context, pci_path
from gpudoctor.snapshot import ok

DUMPS = Path(__file__).resolve().parent / "fixtures" / "pci"


def dump(name: str):
    text = (DUMPS / name).read_text(encoding="utf-8")
    config = bytearray()
    for line in text.splitlines():
        match = re.match(r"^([0-9a-f]+): ((?:[0-9a-f]{2} ?)+)$", line)
        if match:
            assert int(match.group(1), 16) == len(config)
            config += bytes.fromhex(match.group(2))
    said = re.search(r"ACSCtl:\s+(.*)", text).group(1).split()
    return bytes(config), {word[:-1]: word.endswith("+") for word in said}


@pytest.mark.parametrize("name", ["cap-aer-root", "cap-pcie-1"])
def test_acs_control_is_what_lspci_decoded(name):
    config, lspci = dump(name)
    assert len(config) == 4096
    assert pci_path.acs_control(config) == lspci


def test_acs_on_the_haswell_root_port():
    config, _ = dump("cap-aer-root")
    acs = pci_path.acs_control(config)
    assert acs["ReqRedir"] and acs["CmpltRedir"] and acs["SrcValid"] and not acs["DirectTrans"]


def test_256_bytes_are_unreadable_not_off():
    config, lspci = dump("cap-dpc")  # lspci saw ACS (at 0xf24) in the space this dump left out
    assert len(config) == 256 and "SrcValid" in lspci
    assert pci_path.acs_control(config) == "unreadable"


def test_no_acs_capability_is_none():
    config, _ = dump("cap-pcie-1")
    without = bytearray(config)
    without[0x150:0x154] = b"\x00\x00\x01\x16"  # the ACS header's id cleared (0x0000), its next pointer kept
    assert pci_path.acs_control(bytes(without)) is None


def sysfs(tmp_path: Path, chain, configs, group_type="DMA-FQ"):
    devices = tmp_path / "sys" / "devices" / "pci0000:00"
    bus = tmp_path / "sys" / "bus" / "pci" / "devices"
    bus.mkdir(parents=True)
    where = devices
    for bdf in chain:
        where = where / bdf
        where.mkdir(parents=True)
        (where / "config").write_bytes(configs.get(bdf, b"\x00" * 256))
        os.symlink(os.path.relpath(where, bus), bus / bdf)
    group = tmp_path / "sys" / "kernel" / "iommu_groups" / "17"
    group.mkdir(parents=True)
    (group / "type").write_text(group_type + "\n")
    os.symlink(os.path.relpath(group, where), where / "iommu_group")
    (tmp_path / "sys" / "class" / "iommu" / "dmar0").mkdir(parents=True)
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "cmdline").write_text("BOOT_IMAGE=/vmlinuz root=/dev/sda1 intel_iommu=on quiet\n")


def test_the_bridges_above_a_gpu_under_a_switch(tmp_path):
    acs_on, _ = dump("cap-aer-root")
    acs_off, _ = dump("cap-pcie-1")
    sysfs(tmp_path, ["0000:00:02.0", "0000:01:00.0", "0000:02:08.0", "0000:03:00.0"],
          {"0000:00:02.0": acs_off, "0000:01:00.0": acs_off, "0000:02:08.0": acs_on})
    facts = pci_path.collect(Context(root=str(tmp_path)), {"gpu.count": ok(1, "nvml"), "gpu.0.pci_bus_id": ok("00000000:03:00.0", "nvml")})
    path = facts["gpu.0.pci_path"].value
    assert [b["bus"] for b in path["bridges"]] == ["0000:00:02.0", "0000:01:00.0", "0000:02:08.0"]
    assert path["bridges"][2]["acs"]["ReqRedir"] is True and path["bridges"][0]["acs"]["ReqRedir"] is False
    assert (path["iommu_group"], path["iommu_type"]) == ("17", "DMA-FQ")
    assert facts["host.iommu"].value == {"active": True, "units": ["dmar0"], "cmdline": ["intel_iommu=on"]}


def test_no_sysfs_is_absent_not_an_error(tmp_path):
    facts = pci_path.collect(Context(root=str(tmp_path)), {"gpu.count": ok(1, "nvml"), "gpu.0.pci_bus_id": ok("00000000:03:00.0", "nvml")})
    assert facts["gpu.0.pci_path"].status == "absent"
    assert facts["host.iommu"].status == "not_supported"
