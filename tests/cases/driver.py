"""GD1xx driver rules: pass, fail, unknown and not-applicable cases (see cases/__init__.py)."""

from __future__ import annotations

from cases import PUBLIC, Case, build, drop, h200, kernel_module_from, library_file, no_pynvml, nvml_init_failed, put, smi_failed, snap

# The nvidia-smi fallback's output on a real mismatch (zzzhouuu/truenas-nvidia-drivers#19; the
# kernel module of that machine is public/proc-driver-version/issue__truenas-…-mismatch.txt).
TRUENAS_SMI = "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 580.178"
TRUENAS_PROC = PUBLIC / "proc-driver-version" / "issue__truenas-nvidia-drivers-19__proprietary-580.173.02-nvml-580.178-mismatch.txt"

CASES = [
    # GD101 no-driver
    Case("healthy-h200", "GD101", h200(), "pass"),
    Case(
        "library-not-found", "GD101",
        lambda tmp: build("h200.json", nvml_init_failed(12), smi_failed(status="absent"), kernel_module_from(None, tmp),
                          put("driver.library_path", None, "absent", "libnvidia-ml.so.1 not found in /usr/local/nvidia/lib64 …")),
        "fail", "error", ("no NVIDIA driver", "libnvidia-ml.so.1 was not found"),
        ("driver.nvml", "driver.kernel_module_version", "driver.library_path"), commands=("ubuntu-drivers install", "--gpus all"),
    ),
    Case(
        "driver-not-loaded", "GD101",
        lambda tmp: build("h200.json", nvml_init_failed(9), smi_failed("NVIDIA-SMI has failed because it couldn't communicate "
                                                                          "with the NVIDIA driver."), kernel_module_from(None, tmp)),
        "fail", "error", ("kernel module is not loaded",), ("driver.nvml", "driver.kernel_module_version"),
        commands=("modprobe nvidia", "dmesg"),
    ),
    Case(
        "no-permission", "GD101", h200(nvml_init_failed(4), smi_failed("Failed to initialize NVML: Insufficient Permissions")),
        "fail", "error", ("no permission", "device nodes"), ("driver.nvml",), commands=("ls -l /dev/nvidia*", "usermod -aG video"),
    ),
    Case(
        "gpu-is-lost", "GD101", h200(nvml_init_failed(15)), "fail", "error", ("fell off the bus",), ("driver.nvml",),
        commands=("dmesg | grep -i xid",),
    ),
    Case(
        "unknown-nvml-error-names-the-error", "GD101", h200(nvml_init_failed(999)), "fail", "error",
        ("NVML failed to initialise", "NVML Unknown: Unknown Error"), ("driver.nvml",), commands=("ubuntu-drivers",),
    ),
    # Code 18 is GD102's: GD101 must not report it a second time.
    Case("version-mismatch-is-not-gd101", "GD101", h200(nvml_init_failed(18), smi_failed(TRUENAS_SMI)), "pass"),
    Case(
        "pynvml-missing-but-nvidia-smi-answered", "GD101", h200(no_pynvml()), "fail", "warning",
        ("nvidia-ml-py", "nvidia-smi only"), ("driver.nvml", "gpu.count"), commands=("pip install --force-reinstall nvidia-ml-py",),
    ),
    Case(
        "gpu-probe-timed-out", "GD101",
        h200(drop("driver", "gpu"), put("probe.gpus", None, "timeout", "no answer within 10 s")),
        "unknown", message=("not collected",),
    ),
    Case(
        "replay-under-root", "GD101",
        h200(drop("gpu", "driver.version", "driver.cuda_max", "driver.nvml_version"),
              put("driver.nvml", None, "absent", "live probes are off under --root /tmp/x")),
        "not_applicable", message=("live probes are off",),
    ),
    # GD102 driver-library-mismatch
    Case("healthy-h200", "GD102", h200(), "pass"),
    Case(
        "nvml-code-18", "GD102",
        lambda tmp: build("h200.json", nvml_init_failed(18), smi_failed(), library_file("580.173.02", tmp)),
        "fail", "error", ("kernel module 580.159.04", "user-space driver is 580.173.02"),
        ("driver.kernel_module_version", "driver.library_path", "driver.nvml"), commands=("sudo reboot", "modprobe nvidia", "apt-mark hold"),
    ),
    Case(
        # No NVML at all (nvidia-ml-py missing, nvidia-smi not installed): the version numbers alone show it.
        "kernel-580.159.04-library-580.173.02", "GD102",
        lambda tmp: build("h200.json", no_pynvml(), drop("gpu"), smi_failed(status="absent"), library_file("580.173.02", tmp)),
        "fail", "error", ("580.159.04", "580.173.02"), ("driver.kernel_module_version", "driver.library_path"), commands=("reboot",),
    ),
    Case(
        "nvidia-smi-says-mismatch", "GD102",
        h200(no_pynvml(), drop("gpu"),
              smi_failed("Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 570.124")),
        "fail", "error", ("kernel module 580.159.04", "user-space driver is 570.124"),
        ("driver.kernel_module_version", "driver.nvidia_smi_error"), commands=("reboot",),
    ),
    Case(
        # The real truenas case: its /proc file through the real probe, its nvidia-smi output.
        "truenas-580.173.02-vs-580.178", "GD102",
        lambda tmp: build("h200.json", nvml_init_failed(18), smi_failed(TRUENAS_SMI), drop("driver.library_path"),
                          kernel_module_from(TRUENAS_PROC.read_text(encoding="utf-8"), tmp)),
        "fail", "error", ("kernel module 580.173.02", "user-space driver is 580.178"),
        ("driver.kernel_module_version", "driver.nvidia_smi_error", "driver.nvml"),
    ),
    Case(
        "kernel-module-unknown", "GD102", lambda tmp: build("h200.json", kernel_module_from(None, tmp)),
        "not_applicable", message=("kernel module version unknown",),
    ),
    Case("derived-a100-535-consistent", "GD102", snap("a100.json"), "pass"),
    # GD103 driver-too-old-for-torch
    Case("driver-580-torch-cu130", "GD103", h200(), "pass"),
    Case(
        "driver-470-torch-cu121", "GD103", snap("t4.json", put("torch.version", "2.5.1+cu121"), put("torch.cuda", "12.1")),
        "fail", "error", ("driver 470.141.03", "CUDA ≤ 11.4", "below 525.60.13", "CUDA 12.x", "2.5.1+cu121", "insufficient"),
        ("driver.version", "driver.cuda_max", "torch.version", "torch.cuda"), commands=("ubuntu-drivers install",),
    ),
    Case(
        "driver-535-torch-cu124-minor-version-compatibility", "GD103",
        snap("a100.json", put("torch.version", "2.6.0+cu124"), put("torch.cuda", "12.4")),
        "fail", "warning", ("driver 535.54.03", "older than 550.54.14", "CUDA 12.4", "minor-version compatibility", "PTX"),
        ("driver.version", "torch.cuda"), commands=("ubuntu-drivers install",),
    ),
    Case(
        "driver-535-torch-cu130-suggests-cu121", "GD103", snap("a100.json"),
        "fail", "error", ("below 580.65.06", "CUDA 13.x", "cu130"), ("driver.version", "driver.cuda_max"),
        commands=("https://download.pytorch.org/whl/cu121",),
    ),
    Case("driver-535-torch-cu121", "GD103", snap("a100.json", put("torch.version", "2.5.1+cu121"), put("torch.cuda", "12.1")), "pass"),
    Case(
        "torch-without-cuda", "GD103",
        h200(put("torch.version", "2.11.0+cpu"), put("torch.cuda", None, "absent", "torch was built without CUDA (CPU or ROCm build)")),
        "unknown", message=("torch.cuda", "built without CUDA"),
    ),
    Case("torch-cuda-unreadable", "GD103", h200(put("torch.cuda", "rocm")), "unknown", message=("cannot read torch's CUDA version",)),
    Case("cuda-14-not-in-table", "GD103", h200(put("torch.cuda", "14.0")), "unknown", message=("no driver table for CUDA 14.x",)),
    Case("no-driver", "GD103", h200(nvml_init_failed(12)), "unknown", message=("driver.version",)),
    # GD104 kernel-module-version-unreadable
    Case("healthy-h200", "GD104", h200(), "pass"),
    Case(
        "garbage-proc-line", "GD104",
        lambda tmp: build("h200.json", kernel_module_from("NVRM: \x00\x01 garbage ☃ 5.5\n\xff\xfe\n", tmp)),
        "fail", "warning", ("cannot read the kernel module version", "has no NVRM version line"), ("driver.proc_version",),
        commands=("cat /proc/driver/nvidia/version", "modinfo nvidia"),
    ),
    Case(
        "nvrm-line-without-version", "GD104",
        lambda tmp: build("h200.json", kernel_module_from("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  Release Build\n", tmp)),
        "fail", "warning", ("no NVRM version line",), ("driver.proc_version",),
    ),
    Case(
        "real-proprietary-line", "GD104",
        lambda tmp: build("h200.json", kernel_module_from(TRUENAS_PROC.read_text(encoding="utf-8"), tmp)), "pass",
    ),
    Case("module-not-loaded-is-not-gd104", "GD104", lambda tmp: build("h200.json", kernel_module_from(None, tmp)), "pass"),
]
