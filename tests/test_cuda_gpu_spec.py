"""gpudoctor.gpu_target: --gpu SPEC parsing, product name -> compute capability, the snapshot override.

The name table is checked against pairs real tools printed: NVML (H200 capture), and
``nvidia-smi --query-gpu=name,compute_cap`` outputs from public repositories
(shared/fixtures/public/nvidia-smi-csv: RTX 2080 SUPER 7.5, RTX 4080 SUPER 8.9, H100 80GB HBM3
9.0, H200 9.0, L40S 8.9), plus the product names of every public nvidia-smi XML fixture with
the capability NVIDIA's compute-capability page gives for it.
"""

import glob
from pathlib import Path

import pytest

from gpudoctor.gpu_target import SpecError, cc_for_name, override_snapshot, parse_spec
from gpudoctor.probes import nvidia_smi
from gpudoctor.snapshot import Snapshot

REPO = Path(__file__).resolve().parent.parent
PUBLIC_XML = REPO / "tests" / "fixtures" / "ground_truth" / "public" / "nvidia-smi-xml"

# (name as printed, compute_cap as printed) by nvidia-smi --query-gpu / NVML on real machines.
MEASURED = [
    ("NVIDIA GeForce RTX 2080 SUPER", "7.5"),
    ("NVIDIA GeForce RTX 4080 SUPER", "8.9"),
    ("NVIDIA H100 80GB HBM3", "9.0"),
    ("NVIDIA H200", "9.0"),
    ("NVIDIA L40S", "8.9"),
]

# Product names of the public XML fixtures -> cc per developer.nvidia.com/cuda-gpus (+ legacy page).
XML_NAMES = {
    "GeForce GTX 1050": "6.1", "GeForce RTX 2080 Ti": "7.5", "GeForce GTX 1060 6GB": "6.1",
    "GeForce GTX 1650 SUPER": "7.5", "GeForce GT 730": None, "Quadro P2200": "6.1", "GeForce GTX 1050 Ti": "6.1",
    "NVIDIA RTX A5000 Laptop GPU": "8.6", "NVIDIA A100-SXM4-40GB": "8.0", "NVIDIA GeForce RTX 2080": "7.5",
    "NVIDIA GeForce RTX 3060 Laptop GPU": "8.6", "NVIDIA GeForce RTX 4090": "8.9", "Tesla P100-PCIE-16GB": "6.0",
    "GRID K520": None, "NVIDIA GeForce RTX 3090": "8.6", "NVIDIA A100-SXM4-80GB": "8.0", "NVIDIA A10G": "8.6",
    "NVIDIA GeForce RTX 2070": "7.5", "NVIDIA RTX A5000": "8.6", "NVIDIA GeForce GT 1030": "6.1",
    "GeForce GTX 1070 Ti": "6.1", "Graphics Device": None,
    "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition": "12.0", "Quadro P2000": "6.1", "Quadro P400": "6.1",
    "NVIDIA GeForce RTX 3060": "8.6", "NVIDIA GeForce RTX 3080": "8.6", "NVIDIA RTX 4000 SFF Ada Generation": "8.9",
    "Tesla T4": "7.5", "GRID P4-1Q": "6.1", "NVIDIA H200": "9.0",
}


@pytest.mark.parametrize("name, cc", MEASURED)
def test_names_agree_with_what_real_tools_printed(name, cc):
    assert cc_for_name(name) == cc


def test_every_public_xml_gpu_gets_its_documented_cc():
    seen = set()
    for path in sorted(glob.glob(str(PUBLIC_XML / "*.xml"))):
        facts = nvidia_smi.parse_xml(Path(path).read_text(encoding="utf-8", errors="replace"))
        for index in range(facts["gpu.count"].value or 0):
            name = facts[f"gpu.{index}.name"].value
            seen.add(name)
            fact = facts[f"gpu.{index}.compute_capability"]
            assert (fact.value if fact.ok else None) == XML_NAMES[name], name
            if fact.ok:
                assert fact.source == "nvidia-smi+name table"
    assert len(seen) >= 25


@pytest.mark.parametrize("name, cc", [
    ("Quadro RTX 4000", "7.5"), ("NVIDIA RTX 6000 Ada Generation", "8.9"), ("NVIDIA RTX A6000", "8.6"),
    ("NVIDIA GeForce RTX 5090", "12.0"), ("NVIDIA B200", "10.0"), ("NVIDIA GB300", "10.3"), ("NVIDIA GH200 480GB", "9.0"),
    ("Tesla V100-SXM2-32GB", "7.0"), ("NVIDIA L4", "8.9"), ("NVIDIA A30", "8.0"), ("NVIDIA GB10", "12.1"),
    ("NVIDIA H20", "9.0"), ("NVIDIA A2", "8.6"), ("", None), (None, None),
])
def test_other_products(name, cc):
    assert cc_for_name(name) == cc


@pytest.mark.parametrize("spec, cc, variant", [
    ("sm_80", "8.0", ""), ("SM_86", "8.6", ""), ("sm90a", "9.0", "a"), ("compute_120", "12.0", ""), ("sm_100f", "10.0", "f"),
    ("8.6", "8.6", ""), ("12.0", "12.0", ""), ("86", "8.6", ""), ("120", "12.0", ""),
    ("A100", "8.0", ""), ("H100", "9.0", ""), ("RTX 4090", "8.9", ""), ("nvidia geforce rtx 3090", "8.6", ""),
])
def test_parse_spec(spec, cc, variant):
    parsed = parse_spec(spec)
    assert (parsed.cc, parsed.variant) == (cc, variant)


@pytest.mark.parametrize("spec", ["", "sm_99", "9.9", "banana", "RTX 9999", "sm_", "1.0"])
def test_bad_specs_say_what_works(spec):
    with pytest.raises(SpecError) as err:
        parse_spec(spec)
    assert "sm_80" in str(err.value) or "known:" in str(err.value)


def test_override_replaces_the_gpus_and_keeps_the_driver():
    snap = Snapshot.load(str(REPO / "tests" / "fixtures" / "snapshots" / "h200x2.json"))
    override_snapshot(snap, parse_spec("A100"), "A100")
    assert snap.value("gpu.count") == 1
    assert (snap.value("gpu.0.name"), snap.value("gpu.0.compute_capability")) == ("A100", "8.0")
    assert snap.get("gpu.0.compute_capability").source == "--gpu A100"
    assert not [p for p in snap.facts if p.startswith("gpu.1.")]
    assert snap.get("gpu.0.uuid").status == "absent"
    assert snap.value("driver.version") == "580.159.04"
    assert snap.meta["gpu_override"] == "A100"


def test_no_driver_is_not_a_finding_when_checking_for_another_gpu():
    """An image built on a CPU box for an A100 fleet: the missing driver here is expected."""
    import io
    import json

    from gpudoctor.cli import main

    out = io.StringIO()
    main(["check", "--gpu", "A100", "--format", "json", "--select", "GD101"], None, out, io.StringIO())
    [outcome] = json.loads(out.getvalue())["outcomes"]
    live = io.StringIO()
    main(["check", "--format", "json", "--select", "GD101"], None, live, io.StringIO())
    [without] = json.loads(live.getvalue())["outcomes"]
    if without["status"] == "fail":  # this machine has no driver (CI): with --gpu it is not applicable
        assert outcome["status"] == "not_applicable" and "--gpu A100" in outcome["reason"]
    else:
        assert outcome["status"] == without["status"]
