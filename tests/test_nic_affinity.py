"""probes/nic_affinity.py's PCIe levels, on device paths laid out the way sysfs names them.

nvidia-smi topo -m's words (PIX: at most one switch between them, PXB: several, PHB: the host
bridge, NODE: across host bridges of one NUMA node, SYS: across NUMA nodes), a switch's upstream
and downstream ports counted as the one switch. The rule's cases (tests/cases/fabric_pcie.py,
GD324) run the probe on whole sysfs trees."""

from gpudoctor.probes.nic_affinity import level, rank

RP, UP1, DN1A, DN1B, UP2, DN2A, DN2B = "0000:00:01.0", "0000:01:00.0", "0000:02:00.0", "0000:02:01.0", "0000:03:00.0", "0000:04:00.0", "0000:04:01.0"


def at(*chain, host="pci0000:00", numa=0):
    return host, list(chain), numa


def test_one_switch_between_them_is_pix():
    assert level(at(RP, UP1, DN1A, "gpu"), at(RP, UP1, DN1B, "nic")) == "PIX"
    assert level(at(RP, "gpu"), at(RP, "nic")) == "PIX"  # both on one root port


def test_two_levels_of_switches_or_a_switch_and_its_root_port_is_pxb():
    # DGX A100: GPU and NIC under the same first-level switch, each behind its own second-level one
    assert level(at(RP, UP1, DN1A, UP2, DN2A, "gpu"), at(RP, UP1, DN1B, "0000:05:00.0", "0000:06:00.0", "nic")) == "PXB"
    assert level(at(RP, UP1, DN1A, "gpu"), at(RP, "nic")) == "PXB"


def test_root_ports_of_one_host_bridge_is_phb_and_host_bridges_by_numa_node():
    assert level(at(RP, UP1, DN1A, "gpu"), at("0000:00:03.0", "nic")) == "PHB"
    assert level(at(RP, "gpu"), at("0000:40:01.0", "nic", host="pci0000:40", numa=0)) == "NODE"
    assert level(at(RP, "gpu"), at("0000:80:01.0", "nic", host="pci0000:80", numa=1)) == "SYS"
    assert level(at(RP, "gpu"), at("0000:80:01.0", "nic", host="pci0000:80", numa=None)) == "NODE|SYS"


def test_order():
    assert [rank(x) for x in ("PIX", "PXB", "PHB", "NODE", "SYS", "NODE|SYS")] == [0, 1, 2, 3, 4, 4]
