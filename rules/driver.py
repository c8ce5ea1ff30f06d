"""GD1xx: the NVIDIA driver — present, loaded, consistent, new enough."""

from __future__ import annotations

import re
from typing import Optional, Tuple

from gpudoctor.rule import ERROR, WARNING, Fail, Fix, NotApplicable, Unknown, rule

# Minimum Linux driver for each CUDA major under minor-version compatibility, and the
# driver each toolkit release shipped with ("Toolkit Driver Version"). Source: CUDA
# Toolkit Release Notes, Table 3 and Table 2; CUDA Compatibility guide, "Minor Version
# Compatibility": https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/index.html and
# https://docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html
MVC_MIN_DRIVER = {11: "450.80.02", 12: "525.60.13", 13: "580.65.06"}
TOOLKIT_DRIVER = {
    "11.8": "520.61.05",
    "12.0": "525.60.13",
    "12.1": "530.30.02",
    "12.2": "535.54.03",
    "12.3": "545.23.06",
    "12.4": "550.54.14",
    "12.5": "555.42.02",
    "12.6": "560.28.03",
    "12.8": "570.26",
    "12.9": "575.51.03",
    "13.0": "580.65.06",
    "13.1": "590.44.01",
    "13.2": "595.45.04",
}

_LIB_VERSION = re.compile(r"libnvidia-ml\.so\.(\d+\.\d+(?:\.\d+)?)$")


def version_tuple(text: str) -> Tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


def library_version(path: Optional[str]) -> Optional[str]:
    match = _LIB_VERSION.search(path or "")
    return match.group(1) if match else None


def _nvml_failure_name(snap) -> Optional[str]:
    fact = snap.get("driver.nvml")
    if fact.ok:
        return None
    if isinstance(fact.value, dict):
        return fact.value.get("name")
    return "Unavailable"


_NO_DRIVER_FIX = Fix(
    "Install the NVIDIA driver (R580 or newer for CUDA 13 wheels). In a container, start it "
    "with the GPU passed through by the NVIDIA Container Toolkit.",
    [
        "sudo ubuntu-drivers install  # or: sudo apt install nvidia-driver-580-server",
        "docker run --gpus all …  # containers: needs nvidia-container-toolkit on the host",
    ],
    "needs_root",
)

_CAUSES = {
    "LibraryNotFound": (
        "no NVIDIA driver: libnvidia-ml.so.1 was not found, so the user-space driver is not installed "
        "(or not mounted into this container)",
        _NO_DRIVER_FIX,
    ),
    "DriverNotLoaded": (
        "the NVIDIA kernel module is not loaded (the user-space driver is installed)",
        Fix(
            "Load the module and look at the kernel log for why it did not load "
            "(Secure Boot refusing an unsigned module, a kernel upgraded without rebuilding DKMS, a GPU fallen off the bus).",
            ["sudo modprobe nvidia && nvidia-smi", "sudo dmesg | grep -iE 'nvrm|nvidia' | tail -20", "dkms status"],
            "needs_root",
        ),
    ),
    "NoPermission": (
        "NVML has no permission to open the GPU device nodes",
        Fix(
            "Give this user access to /dev/nvidia* (usually the video group), or run inside a container "
            "that was started with the GPUs.",
            ["ls -l /dev/nvidia*", "sudo usermod -aG video \"$USER\"  # then log in again"],
            "needs_root",
        ),
    ),
    "GpuIsLost": (
        "a GPU fell off the bus (NVML: GPU is lost)",
        Fix("Reset the GPU or reboot; check the kernel log for Xid 79.", ["sudo dmesg | grep -i xid", "sudo reboot"], "reboot"),
    ),
}


@rule("GD101", "no-driver", severity=ERROR, area="driver")
def no_driver(snap):
    """The NVIDIA driver cannot be reached through NVML.

    ## Why
    Everything above the driver (CUDA, torch, vLLM) fails without it, usually later and
    with a vaguer message ("Found no NVIDIA driver on your system", "Failed to infer
    device type"). NVML's init error names the cause: the user-space library is missing
    (no driver installed, or a container started without the GPUs), the kernel module is
    not loaded, the device nodes are not accessible, or a GPU is lost. The driver/library
    version mismatch has its own rule, GD102.

    ## Fix
    Depends on the cause, which the finding names: install the driver, load the module
    (`sudo modprobe nvidia`, then read `dmesg`), fix `/dev/nvidia*` permissions, or start
    the container with `--gpus all`.

    ## References
    - NVML API, nvmlInit return codes (NVML_ERROR_LIBRARY_NOT_FOUND, DRIVER_NOT_LOADED,
      NO_PERMISSION): https://docs.nvidia.com/deploy/nvml-api
    - vLLM "Failed to infer device type": https://github.com/vllm-project/vllm/issues/12847,
      https://github.com/vllm-project/vllm/issues/13865.
    - https://docs.nvidia.com/deploy/nvml-api/api/group__nvmlInitializationAndCleanup.html

    ## Severity
    An error when no driver answers on a machine that should have GPUs; a warning when the GPUs
    were read anyway (through nvidia-smi) and only gpudoctor's own NVML binding is missing or
    shadowed: the server is not affected.
    """
    if "driver.nvml" not in snap.facts:
        # The GPU probe crashed or timed out before NVML answered (GD001 reports that):
        # nothing says the driver is missing.
        return Unknown("NVML was not queried (driver.nvml was not collected)")
    name = _nvml_failure_name(snap)
    if name is None:
        return None
    if snap.meta.get("gpu_override"):
        # `--gpu A100` on a build machine: the GPU is elsewhere, and so is its driver.
        return NotApplicable(f"checking against --gpu {snap.meta['gpu_override']}, not this machine's driver")
    if name == "LibRmVersionMismatch":
        return None  # GD102 reports it with both versions
    fact = snap.get("driver.nvml")
    if name not in _CAUSES and fact.status == "absent" and "live probes are off" in fact.detail:
        return NotApplicable(fact.detail)
    if name in _CAUSES:
        message, fix = _CAUSES[name]
    elif "pynvml" in fact.detail or "nvidia-ml-py" in fact.detail:
        message = "gpudoctor's NVML binding (nvidia-ml-py) is missing or shadowed, so the driver was read through nvidia-smi only"
        fix = Fix("Reinstall the official NVML binding.", ["python3 -m pip install --force-reinstall nvidia-ml-py"])
        if snap.get("gpu.count").ok:
            return Fail(message, ["driver.nvml", "gpu.count"], fix, severity=WARNING)
    else:
        message, fix = f"NVML failed to initialise: {fact.detail}", _NO_DRIVER_FIX
    return Fail(message, ["driver.nvml", "driver.kernel_module_version", "driver.library_path"], fix)


@rule("GD102", "driver-library-mismatch", severity=ERROR, area="driver")
def driver_library_mismatch(snap):
    """The loaded kernel module and the user-space driver libraries are different versions.

    ## Why
    After a driver package upgrade (often an unattended `apt` upgrade) the new
    libnvidia-ml / libcuda sit beside the old kernel module that is still loaded. NVML
    then refuses to start ("Failed to initialize NVML: Driver/library version mismatch",
    NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18) and every CUDA program fails.

    ## Fix
    Reboot, or reload the modules when nothing uses the GPU:
    `sudo rmmod nvidia_uvm nvidia_drm nvidia_modeset nvidia && sudo modprobe nvidia`.
    Then hold the driver packages so it does not happen again.

    ## References
    - https://github.com/NVIDIA/ubuntu-packaging-nvidia-driver/issues/3,
      https://github.com/lyulyul/shine-cluster/issues/30,
      https://github.com/tinygrad/open-gpu-kernel-modules/issues/47.
    - https://docs.nvidia.com/deploy/cuda-compatibility/
    """
    kernel = snap.get("driver.kernel_module_version")
    lib = library_version(snap.value("driver.library_path"))
    user = snap.value("driver.version") or lib
    smi_error = snap.value("driver.nvidia_smi_error") or ""
    flagged = _nvml_failure_name(snap) == "LibRmVersionMismatch" or "version mismatch" in smi_error.lower()
    if not flagged and kernel.ok and user and version_tuple(kernel.value) != version_tuple(user):
        flagged = True
    if not flagged:
        if not kernel.ok:
            return NotApplicable(f"kernel module version unknown: {kernel.describe()}")
        return None
    evidence = ["driver.kernel_module_version", "driver.library_path", "driver.nvml"]
    if smi_error:
        evidence.append("driver.nvidia_smi_error")
    match = re.search(r"NVML library version:\s*([\d.]+)", smi_error)
    user_text = user or (match.group(1) if match else "another version")
    kernel_text = kernel.value if kernel.ok else "another version"
    return Fail(
        f"kernel module {kernel_text} is loaded but the user-space driver is {user_text}: "
        "NVML and CUDA refuse to start until they match",
        evidence,
        Fix(
            "Reboot (simplest), or unload and reload the NVIDIA modules once no process uses the GPU; "
            "then hold the driver packages against unattended upgrades.",
            [
                "sudo reboot",
                "sudo rmmod nvidia_uvm nvidia_drm nvidia_modeset nvidia && sudo modprobe nvidia  # instead of a reboot",
                "sudo apt-mark hold 'nvidia-*' 'libnvidia-*'",
            ],
            "reboot",
        ),
    )


@rule("GD103", "driver-too-old-for-torch", severity=ERROR, area="driver", requires=("driver.version", "torch.cuda"))
def driver_too_old_for_torch(snap):
    """The driver is too old for the CUDA version torch was built with.

    ## Why
    A torch wheel built for CUDA X.Y needs at least the minor-version-compatibility floor
    of CUDA X (R450 for 11.x, 525.60.13 for 12.x, R580 for 13.x); below it CUDA fails to
    start: "CUDA driver version is insufficient for CUDA runtime version". Above the floor
    but below the driver that shipped with X.Y, it runs with a limited feature set, and
    PTX built by the newer toolkit cannot be JIT-compiled ("the provided PTX was compiled
    with an unsupported toolchain").

    ## Fix
    Upgrade the driver, or install the torch build that matches the driver's CUDA (the
    "CUDA Version" in the nvidia-smi banner), e.g.
    `pip install torch --index-url https://download.pytorch.org/whl/cu128`.

    ## References
    - CUDA Toolkit Release Notes, Table 3 (toolkit driver versions) and the CUDA Compatibility
      guide, minor version compatibility
    - https://github.com/vllm-project/vllm/issues/4940,
      https://github.com/vllm-project/vllm/issues/31700.
    - https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/index.html
    - https://docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html

    ## Severity
    An error when the driver is older than the minimum of torch's CUDA major (no kernel runs); a
    warning when it is only older than that CUDA release's own driver: torch runs through minor-
    version compatibility and only kernels shipped as newer PTX fail.
    """
    driver = snap.value("driver.version")
    torch_cuda = str(snap.value("torch.cuda"))
    try:
        major = int(torch_cuda.split(".")[0])
    except ValueError:
        return Unknown(f"cannot read torch's CUDA version {torch_cuda!r}")
    floor = MVC_MIN_DRIVER.get(major)
    if floor is None:
        return Unknown(f"no driver table for CUDA {major}.x (update gpudoctor)")
    short = "cu" + torch_cuda.replace(".", "")[:3]
    driver_cuda = snap.value("driver.cuda_max")
    downgrade = _torch_index_for(driver_cuda)
    commands = ["sudo ubuntu-drivers install  # or your distribution's driver package, R580+ for CUDA 13"]
    if downgrade:
        commands.append(f"python3 -m pip install --force-reinstall torch --index-url https://download.pytorch.org/whl/{downgrade}")
    evidence = ["driver.version", "driver.cuda_max", "torch.version", "torch.cuda"]
    if version_tuple(driver) < version_tuple(floor):
        return Fail(
            f"driver {driver} (CUDA ≤ {driver_cuda or '?'}) is below {floor}, the minimum for CUDA {major}.x; "
            f"torch {snap.value('torch.version')} ({short}) will fail with "
            "\"CUDA driver version is insufficient for CUDA runtime version\"",
            evidence,
            Fix("Upgrade the driver, or install a torch built for the CUDA this driver supports.", commands, "needs_root"),
        )
    shipped = TOOLKIT_DRIVER.get(".".join(torch_cuda.split(".")[:2]))
    if shipped and version_tuple(driver) < version_tuple(shipped):
        return Fail(
            f"driver {driver} is older than {shipped}, the driver of CUDA {torch_cuda}; torch runs through "
            "minor-version compatibility, but kernels shipped only as newer PTX fail to JIT "
            "(\"the provided PTX was compiled with an unsupported toolchain\")",
            evidence,
            Fix("Upgrade the driver to the CUDA release's own driver or newer.", commands[:1], "needs_root"),
            severity=WARNING,
        )
    return None


def _torch_index_for(driver_cuda: Optional[str]) -> Optional[str]:
    """The newest PyTorch wheel index (cuXYZ) a driver that supports CUDA ``driver_cuda`` can run."""
    if not driver_cuda:
        return None
    indexes = ("cu118", "cu121", "cu124", "cu126", "cu128", "cu129", "cu130")
    limit = version_tuple(driver_cuda)[:2]
    # Prefer a build no newer than the driver's CUDA; failing that, one of the same major,
    # which runs through minor-version compatibility (cu118 on an R470 driver, CUDA 11.4).
    fitting = [i for i in indexes if (int(i[2:4]), int(i[4:])) <= limit]
    same_major = [i for i in indexes if int(i[2:4]) == limit[0]]
    candidates = fitting or same_major
    return candidates[-1] if candidates else None


@rule("GD104", "kernel-module-version-unreadable", severity=WARNING, area="driver")
def kernel_module_version_unreadable(snap):
    """/proc/driver/nvidia/version exists but does not say which driver is loaded.

    ## Why
    The kernel module's version is how a driver/library mismatch (GD102) is caught
    before anything fails. A file that exists but has no `NVRM version:` line means a
    driver that prints an unknown format, a broken module, or a container that mounts
    something else at that path; gpudoctor cannot check the mismatch then.

    ## Fix
    Look at the file and at the module: `cat /proc/driver/nvidia/version`,
    `modinfo nvidia | head`, `cat /sys/module/nvidia/version`. Please report the text to
    gpudoctor if it comes from a real driver.

    ## References
    - https://github.com/NVIDIA/open-gpu-kernel-modules
    """
    fact = snap.get("driver.kernel_module_version")
    if fact.status != "error":
        return None
    return Fail(
        f"cannot read the kernel module version: {fact.detail}",
        ["driver.proc_version"],
        Fix("Inspect the module by hand.", ["cat /proc/driver/nvidia/version", "cat /sys/module/nvidia/version", "modinfo nvidia | head -5"]),
    )
