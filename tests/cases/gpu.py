"""GD3xx GPU rules: pass, fail, unknown and not-applicable cases (see cases/__init__.py)."""

from __future__ import annotations

from cases import H200X2_UUIDS, MIB, Case, add_gpu_copy, busy, drop, env, h200, put, snap, x2

CASES = [
    # GD301 mixed-gpus
    Case("two-identical-h200", "GD301", x2(), "pass"),
    Case("one-gpu", "GD301", h200(), "not_applicable", message=("1 visible GPU",)),
    Case(
        "names-differ-same-cc", "GD301", x2(put("gpu.1.name", "NVIDIA H100 80GB HBM3")),
        "fail", "warning", ("NVIDIA H200 (cc 9.0) on GPU 0", "NVIDIA H100 80GB HBM3 (cc 9.0) on GPU 1"),
        ("gpu.0.name", "gpu.1.name", "gpu.0.compute_capability", "gpu.1.compute_capability"),
        commands=("CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=0",),
    ),
    Case(
        "a100-and-rtx4090", "GD301", snap("mixed.json"),
        "fail", "error", ("NVIDIA A100 80GB PCIe (cc 8.0) on GPU 0", "NVIDIA GeForce RTX 4090 (cc 8.9) on GPU 1"),
        ("gpu.0.compute_capability", "gpu.1.compute_capability"), commands=("CUDA_VISIBLE_DEVICES=0",),
    ),
    Case(
        "suggests-the-larger-identical-group", "GD301",
        snap("mixed.json", add_gpu_copy(1, 2, "GPU-486fb5a3-0000-0000-0000-000000000002", "00000000:00:08.0")),
        "fail", "error", ("RTX 4090 (cc 8.9) on GPU 1,2",), ("gpu.2.name",), commands=("CUDA_VISIBLE_DEVICES=1,2",),
    ),
    Case(
        "visible-devices-restrict-to-identical-pair", "GD301",
        snap("mixed.json", add_gpu_copy(1, 2, "GPU-486fb5a3-0000-0000-0000-000000000002", "00000000:00:08.0"),
              env(CUDA_VISIBLE_DEVICES="1,2")),
        "pass",
    ),
    Case("visible-devices-one-gpu-of-mixed", "GD301", snap("mixed.json", env(CUDA_VISIBLE_DEVICES="1")),
         "not_applicable", message=("1 visible GPU",)),
    Case("visible-devices-by-uuid", "GD301", snap("mixed.json", env(CUDA_VISIBLE_DEVICES=H200X2_UUIDS[0][:12])),
         "not_applicable", message=("1 visible GPU",)),
    # GD302 gpu-memory-in-use
    Case("idle-h200", "GD302", h200(), "pass"),
    Case(
        "real-torch-process-on-gpu-1", "GD302", busy(),
        "fail", "warning", ("GPU 1 (NVIDIA H200)", "3.6 GiB of 140.4 GiB", "PID 896"),
        ("gpu.1.memory_used", "gpu.1.memory_total", "gpu.1.processes"), "GPU 1",
        commands=("--query-compute-apps=pid,process_name,used_memory", "ps -o pid,user,etime,args -p 896"),
    ),
    Case("busy-gpu-hidden-by-visible-devices", "GD302", busy(env(CUDA_VISIBLE_DEVICES="0")), "pass"),
    Case(
        # NVML memory v1 counts the driver's reservation as used: 0.6 GiB on an idle H200
        # (ground_truth/h200x2/nvml-multi.json mem_used).
        "v1-memory-idle", "GD302",
        h200(put("gpu.0.memory_used", 644939776), put("gpu.0.memory_reserved", None, "not_supported", "NVML memory v1 only")),
        "pass",
    ),
    Case(
        # v1 reading with a real 2 GiB torch tensor held (ground_truth/h200/capture.log, stale-proc).
        "v1-memory-with-stale-process", "GD302",
        h200(put("gpu.0.memory_used", 3344826368), put("gpu.0.memory_reserved", None, "not_supported", "NVML memory v1 only"),
              put("gpu.0.processes", [{"pid": 641, "used_memory": 2690646016}])),
        "fail", "warning", ("3.1 GiB", "PID 641"), ("gpu.0.memory_used",), "GPU 0", commands=("-p 641",),
    ),
    Case(
        "holder-in-another-container", "GD302", busy(put("gpu.1.processes", [])),
        "fail", "warning", ("no process visible from here",), ("gpu.1.processes",), "GPU 1",
        commands=("--query-compute-apps",),
    ),
    # GD303 ecc-uncorrectable-errors
    Case("no-errors", "GD303", x2(), "pass"),
    Case("ecc-off-rtx4090", "GD303", snap("rtx4090.json"), "pass"),
    Case(
        "two-uncorrectable-on-gpu-1", "GD303", x2(put("gpu.1.ecc_uncorrected_volatile", 2)),
        "fail", "error", ("GPU 1 (NVIDIA H200) reports 2 uncorrectable ECC error(s)",),
        ("gpu.1.ecc_uncorrected_volatile", "gpu.1.ecc_mode"), "GPU 1",
        commands=("nvidia-smi -r -i 1", "nvidia-smi -q -d ECC,ROW_REMAPPER -i 1"),
    ),
    # GD304 row-remap-pending
    Case("no-remaps", "GD304", h200(), "pass"),
    Case("turing-has-no-row-remapper", "GD304", snap("t4.json"), "pass"),
    Case(
        "pending", "GD304",
        h200(put("gpu.0.remapped_rows", {"correctable": 0, "uncorrectable": 1, "pending": True, "failure": False})),
        "fail", "error", ("GPU 0 (NVIDIA H200)", "pending", "after a GPU reset"), ("gpu.0.remapped_rows",), "GPU 0",
        commands=("nvidia-smi -r -i 0",),
    ),
    Case(
        "failure", "GD304",
        h200(put("gpu.0.remapped_rows", {"correctable": 0, "uncorrectable": 8, "pending": True, "failure": True})),
        "fail", "error", ("row remapping FAILED", "RMA"), ("gpu.0.remapped_rows",), "GPU 0",
        commands=("nvidia-smi -q -d ROW_REMAPPER -i 0",),
    ),
    # GD305 pcie-link-degraded
    Case("gen5-x16", "GD305", h200(), "pass"),
    Case(
        "x8-of-x16", "GD305", h200(put("gpu.0.pcie_width_current", 8)),
        "fail", "warning", ("PCIe link at width x8 of x16",),
        ("gpu.0.pcie_width_current", "gpu.0.pcie_width_max"), "GPU 0", commands=("nvidia-smi -q -d PCIE -i 0",),
    ),
    Case("gen1-of-5-while-idle", "GD305", h200(put("gpu.0.pcie_gen_current", 1)), "pass"),
    Case(
        "gen3-of-5-while-busy", "GD305", busy(put("gpu.1.pcie_gen_current", 3)),
        "fail", "warning", ("GPU 1 (NVIDIA H200): PCIe link at gen 3 of 5 while busy",),
        ("gpu.1.pcie_gen_current", "gpu.1.pcie_gen_max"), "GPU 1", commands=("nvidia-smi -q -d PCIE -i 1",),
    ),
    Case("busy-at-full-speed", "GD305", busy(), "pass"),
    # GD306 persistence-mode-off
    Case("on", "GD306", h200(), "pass"),
    Case(
        "off-on-h200", "GD306", h200(put("gpu.0.persistence_mode", False)),
        "fail", "warning", ("GPU 0 (NVIDIA H200): persistence mode is off",), ("gpu.0.persistence_mode",), "GPU 0",
        commands=("systemctl enable --now nvidia-persistenced", "nvidia-smi -pm 1"),
    ),
    Case("off-on-rtx4090-consumer-card", "GD306", snap("rtx4090.json"), "pass"),
    Case("off-on-tesla-t4", "GD306", snap("t4.json", put("gpu.0.persistence_mode", False)),
         "fail", "warning", ("Tesla T4",), ("gpu.0.persistence_mode",), "GPU 0"),
    Case("mixed-only-the-a100-counts", "GD306", snap("mixed.json", put("gpu.0.persistence_mode", False)),
         "fail", "warning", ("A100 80GB PCIe",), ("gpu.0.persistence_mode",), "GPU 0"),
    # GD307 compute-mode-blocks
    Case("default", "GD307", busy(), "pass"),
    Case(
        "exclusive-process-taken", "GD307", busy(put("gpu.1.compute_mode", "Exclusive_Process")),
        "fail", "error", ("GPU 1 (NVIDIA H200) is Exclusive_Process and already used by PID 896", "device busy or unavailable"),
        ("gpu.1.compute_mode", "gpu.1.processes"), "GPU 1", commands=("nvidia-smi -i 1 -c DEFAULT",),
    ),
    Case("exclusive-process-free", "GD307", x2(put("gpu.1.compute_mode", "Exclusive_Process")), "pass"),
    Case(
        "prohibited", "GD307", h200(put("gpu.0.compute_mode", "Prohibited")),
        "fail", "error", ("prohibits all CUDA contexts",), ("gpu.0.compute_mode",), "GPU 0", commands=("nvidia-smi -i 0 -c DEFAULT",),
    ),
    Case("exclusive-gpu-not-visible", "GD307",
         busy(put("gpu.1.compute_mode", "Exclusive_Process"), env(CUDA_VISIBLE_DEVICES="0")), "pass"),
    # GD308 cuda-visible-devices-invalid
    Case("not-set", "GD308", x2(), "not_applicable", message=("not set",)),
    Case("both-gpus", "GD308", x2(env(CUDA_VISIBLE_DEVICES="0,1")), "pass"),
    Case(
        "0,4,1-on-two-gpus", "GD308", x2(env(CUDA_VISIBLE_DEVICES="0,4,1")),
        "fail", "error", ("'4' is not a GPU here", "ignores what follows it too (1)", "will see 1 GPU(s)"),
        ("env.CUDA_VISIBLE_DEVICES", "gpu.count"), commands=("export CUDA_VISIBLE_DEVICES=0,1", "nvidia-smi -L"),
    ),
    Case(
        "empty", "GD308", x2(env(CUDA_VISIBLE_DEVICES="")),
        "fail", "error", ("empty", "see no GPU (0 devices)"), ("env.CUDA_VISIBLE_DEVICES",), commands=("CUDA_VISIBLE_DEVICES=0,1",),
    ),
    Case(
        # Measured on the 1-GPU H200: torch.cuda.device_count() is 0 under CUDA_VISIBLE_DEVICES=0,0.
        "duplicate-on-one-gpu", "GD308", h200(env(CUDA_VISIBLE_DEVICES="0,0")),
        "fail", "error", ("names a GPU twice (0)", "0 devices"), ("env.CUDA_VISIBLE_DEVICES",), commands=("CUDA_VISIBLE_DEVICES=0",),
    ),
    Case(
        "duplicate-uuid", "GD308", x2(env(CUDA_VISIBLE_DEVICES=f"{H200X2_UUIDS[1]},{H200X2_UUIDS[1]}")),
        "fail", "error", ("names a GPU twice", "0 devices"), ("env.CUDA_VISIBLE_DEVICES",),
    ),
    Case("duplicate-after-invalid-is-not-read", "GD308", x2(env(CUDA_VISIBLE_DEVICES="0,9,0")),
         "fail", "error", ("'9' is not a GPU here", "will see 1 GPU(s)"), ("env.CUDA_VISIBLE_DEVICES",)),
    Case("uuid-prefix", "GD308", x2(env(CUDA_VISIBLE_DEVICES=H200X2_UUIDS[1][:12])), "pass"),
    Case("full-uuids", "GD308", x2(env(CUDA_VISIBLE_DEVICES=",".join(reversed(H200X2_UUIDS)))), "pass"),
    Case(
        "unknown-uuid", "GD308", x2(env(CUDA_VISIBLE_DEVICES="GPU-ffffffff")),
        "fail", "error", ("'GPU-ffffffff' is not a GPU here", "0 GPU(s)"), ("env.CUDA_VISIBLE_DEVICES",),
    ),
    Case(
        "duplicate", "GD308", x2(env(CUDA_VISIBLE_DEVICES="0,0")),
        "fail", "error", ("'0,0'", "names a GPU twice (0)", "sees no GPU at all"), ("env.CUDA_VISIBLE_DEVICES",),
    ),
    Case("mig-instance", "GD308", x2(env(CUDA_VISIBLE_DEVICES="MIG-4b5f1a4e-8f8c-5b2a-9a1e-000000000000")),
         "unknown", message=("MIG",)),
    Case("uuids-not-read", "GD308", x2(env(CUDA_VISIBLE_DEVICES=H200X2_UUIDS[0]), drop("gpu.0.uuid", "gpu.1.uuid")),
         "unknown", message=("UUIDs were not read",)),
    # GD309 dev-shm-too-small
    Case("two-gpus-256-gib", "GD309", x2(), "pass"),
    Case(
        "docker-default-64-mib-two-gpus", "GD309", x2(put("host.shm_total", 64 * MIB)),
        "fail", "warning", ("/dev/shm is 64 MiB with 2 GPUs visible",), ("host.shm_total", "gpu.count", "host.container"),
        commands=("--ipc=host", "--shm-size=16g"),
    ),
    Case("64-mib-one-gpu", "GD309", h200(put("host.shm_total", 64 * MIB)), "not_applicable", message=("1 visible GPU",)),
    Case("64-mib-two-gpus-one-visible", "GD309", x2(put("host.shm_total", 64 * MIB), env(CUDA_VISIBLE_DEVICES="1")),
         "not_applicable", message=("1 visible GPU",)),
    Case("shm-unreadable", "GD309", x2(put("host.shm_total", None, "error", "statvfs failed")), "unknown", message=("host.shm_total",)),
]
