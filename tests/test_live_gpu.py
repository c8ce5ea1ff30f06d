"""On a machine with a real NVIDIA GPU: the NVML probe and the nvidia-smi fallback must agree.

Skipped where NVML cannot start (CI has no GPU); run on the lent H200s (see
scripts/capture_gpu_fixture.sh), where it is the proof that both probe paths read the
same truth.
"""

import os

import pytest

from gpudoctor.probes import Context, collect, nvidia_smi, nvml

LIVE = nvml.collect()
pytestmark = pytest.mark.skipif(not LIVE["driver.nvml"].ok, reason=f"no NVML here: {LIVE['driver.nvml'].detail}")

# Fields both paths must report identically (memory_used moves with other tenants; skipped).
SAME = ("name", "uuid", "pci_bus_id", "memory_total", "ecc_mode", "ecc_uncorrected_volatile", "mig_mode",
        "persistence_mode", "compute_mode", "pcie_width_max", "pcie_gen_max")


def test_nvml_and_nvidia_smi_agree():
    smi = nvidia_smi.collect(Context())
    assert smi["gpu.count"].ok, smi["gpu.count"].detail
    assert smi["gpu.count"].value == LIVE["gpu.count"].value
    assert smi["driver.version"].value == LIVE["driver.version"].value
    assert smi["driver.cuda_max"].value == LIVE["driver.cuda_max"].value
    for index in range(LIVE["gpu.count"].value):
        for key in SAME:
            path = f"gpu.{index}.{key}"
            if LIVE[path].ok and smi[path].ok:
                assert LIVE[path].value == smi[path].value, path


def test_live_snapshot_is_complete():
    snap = collect(Context())
    assert snap.get("probe.gpus").ok and snap.get("probe.driver").ok
    assert snap.value("driver.kernel_module_version") == snap.value("driver.version")
    assert snap.value("driver.library_path", "").endswith(snap.value("driver.version"))
    for index in snap.gpu_indices():
        for key in ("name", "uuid", "compute_capability", "memory_total", "memory_used", "pcie_gen_max"):
            assert snap.get(f"gpu.{index}.{key}").ok, key
    assert os.path.basename(snap.value("driver.library_path")).startswith("libnvidia-ml.so.")
