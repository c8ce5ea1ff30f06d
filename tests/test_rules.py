"""Every driver and GPU rule (GD101–GD104, GD301–GD309): failing and passing cases.

Each case starts from a snapshot recorded on a real H200 (or one derived from it with public
specs, see fixtures/snapshots/derive.py), changes the fewest facts that make the situation,
and runs that one rule through the engine. Facts of NVML failures are made by the real
probe code from real pynvml exceptions; /proc and library files by the real probes reading
real files under a temporary root. A case that expects "fail" fails if the rule is deleted
or returns None; ``test_every_rule_has_a_failing_and_a_passing_case`` keeps the table whole.
"""

from __future__ import annotations

import copy
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

import pytest

from gpudoctor import registry
from gpudoctor.engine import run_rules
from gpudoctor.probes import Context
from gpudoctor.probes import driver as driver_probe
from gpudoctor.probes import gpus as gpus_probe
from gpudoctor.probes.nvml import _error_fact
from gpudoctor.rule import Outcome
from gpudoctor.snapshot import Snapshot

SNAPSHOTS = Path(__file__).parent / "fixtures" / "snapshots"
PUBLIC = Path(__file__).parent / "fixtures" / "ground_truth" / "public"
MIB = 1 << 20
GIB = 1 << 30

H200X2_UUIDS = ("GPU-51cb1330-e3cd-8754-4de9-1759daa5809f", "GPU-486fb5a3-f83f-ba19-e43c-cfb34303ac5f")

Edit = Callable[[Dict[str, Any]], None]


# --- building snapshots -----------------------------------------------------------------------
def load(name: str) -> Dict[str, Any]:
    return json.loads((SNAPSHOTS / name).read_text(encoding="utf-8"))


def build(name: str, *edits: Edit) -> Dict[str, Any]:
    data = load(name)
    for edit in edits:
        edit(data)
    return data


def put(path: str, value: Any, status: str = "ok", detail: str = "") -> Edit:
    """Set one fact, keeping the recorded fact's source."""

    def edit(data: Dict[str, Any]) -> None:
        old = data["facts"].get(path) or {}
        fact = {"value": value, "status": status, "source": old.get("source", "nvml")}
        if detail:
            fact["detail"] = detail
        data["facts"][path] = fact

    return edit


def drop(*prefixes: str) -> Edit:
    def edit(data: Dict[str, Any]) -> None:
        for path in list(data["facts"]):
            if any(path == p or path.startswith(p + ".") for p in prefixes):
                del data["facts"][path]

    return edit


def env(**values: Optional[str]) -> Edit:
    def edit(data: Dict[str, Any]) -> None:
        variables = data["facts"]["env"]["value"]
        for key, value in values.items():
            if value is None:
                variables.pop(key, None)
            else:
                variables[key] = value

    return edit


def merge(facts) -> Edit:
    """Facts made by a real probe (gpudoctor Fact objects) replace the recorded ones."""

    def edit(data: Dict[str, Any]) -> None:
        for path, fact in facts.items():
            data["facts"][path] = fact.to_json()

    return edit


def nvml_init_failed(code: int) -> Edit:
    """What the NVML probe leaves when nvmlInit raises: the real pynvml exception through the
    real ``_error_fact``; every fact NVML would have read is gone."""
    import pynvml

    fact = _error_fact(pynvml.NVMLError(code))

    def edit(data: Dict[str, Any]) -> None:
        drop("gpu", "driver.version", "driver.cuda_max", "driver.nvml_version")(data)
        data["facts"]["driver.nvml"] = fact.to_json()

    return edit


def smi_failed(output: str = "", status: str = "error") -> Edit:
    """The nvidia-smi fallback after NVML failed (probes.nvidia_smi.collect's facts)."""

    def edit(data: Dict[str, Any]) -> None:
        detail = "nvidia-smi exited 9: " + output.splitlines()[0] if output else "nvidia-smi not found on PATH"
        data["facts"]["gpu.count"] = {"value": None, "status": status, "source": "nvidia-smi", "detail": detail}
        if output:
            data["facts"]["driver.nvidia_smi_error"] = {
                "value": output, "status": "ok", "source": "nvidia-smi", "detail": "nvidia-smi exited 9"
            }

    return edit


def no_pynvml() -> Edit:
    """nvidia-ml-py not installed: what probes.nvml.collect returns."""

    def edit(data: Dict[str, Any]) -> None:
        drop("driver.version", "driver.cuda_max", "driver.nvml_version", "driver.library_path")(data)
        data["facts"]["driver.nvml"] = {
            "value": None, "status": "absent", "source": "nvml", "detail": "pynvml not importable: No module named 'pynvml'"
        }

    return edit


def kernel_module_from(proc_text: Optional[str], tmp: Path) -> Edit:
    """Run the real /proc probe on a real file (or on no file at all) under a temporary root."""
    root = tmp / "root"
    if proc_text is not None:
        path = root / "proc" / "driver" / "nvidia" / "version"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(proc_text.encode("utf-8"))
    root.mkdir(parents=True, exist_ok=True)
    facts = driver_probe.collect(Context(root=str(root), environ={}))

    def edit(data: Dict[str, Any]) -> None:
        drop("driver.kernel_module_type", "driver.kernel_module_version", "driver.proc_version")(data)
        merge(facts)(data)

    return edit


def library_file(version: str, tmp: Path) -> Edit:
    """A real libnvidia-ml.so.1 -> libnvidia-ml.so.VERSION symlink, found by the real probe."""
    lib_dir = tmp / "root" / "usr" / "local" / "nvidia" / "lib64"
    lib_dir.mkdir(parents=True, exist_ok=True)
    (lib_dir / f"libnvidia-ml.so.{version}").write_bytes(b"\x7fELF")
    os.symlink(f"libnvidia-ml.so.{version}", lib_dir / "libnvidia-ml.so.1")
    fact = gpus_probe.find_library(Context(root=str(tmp / "root"), environ={"LD_LIBRARY_PATH": "/usr/local/nvidia/lib64"}))
    assert fact.ok, fact.detail
    return merge({"driver.library_path": fact})


def add_gpu_copy(source: int, index: int, uuid: str, bus: str) -> Edit:
    def edit(data: Dict[str, Any]) -> None:
        facts = data["facts"]
        for path in [p for p in facts if p.startswith(f"gpu.{source}.")]:
            facts[f"gpu.{index}." + path.split(".", 2)[2]] = copy.deepcopy(facts[path])
        facts[f"gpu.{index}.uuid"]["value"] = uuid
        facts[f"gpu.{index}.pci_bus_id"]["value"] = bus
        facts["gpu.count"]["value"] = index + 1

    return edit


# --- running one rule -------------------------------------------------------------------------
def run(rule_id: str, data: Dict[str, Any]) -> Outcome:
    meta = registry.find(rule_id)
    assert meta is not None, f"rule {rule_id} is not registered"
    result = run_rules(Snapshot.from_json(data), [meta])
    assert result.debug == [], result.debug  # the rule did not crash
    return result.outcomes[0]


@dataclass
class Case:
    name: str
    rule: str
    build: Callable[[Path], Dict[str, Any]]
    status: str  # pass | fail | unknown | not_applicable
    severity: Optional[str] = None
    message: Sequence[str] = ()  # substrings of the (single) finding's message, or of the reason
    evidence: Sequence[str] = ()  # fact paths the finding must cite
    subject: str = ""
    commands: Sequence[str] = ()  # substrings that some fix command must contain
    findings: int = 1


def _h200(*edits: Edit) -> Callable[[Path], Dict[str, Any]]:
    return lambda tmp: build("h200.json", *edits)


def _x2(*edits: Edit) -> Callable[[Path], Dict[str, Any]]:
    return lambda tmp: build("h200x2.json", *edits)


def _busy(*edits: Edit) -> Callable[[Path], Dict[str, Any]]:
    return lambda tmp: build("h200x2-busy.json", *edits)


def _snap(name: str, *edits: Edit) -> Callable[[Path], Dict[str, Any]]:
    return lambda tmp: build(name, *edits)


# --- GD1xx: the driver ------------------------------------------------------------------------
# The nvidia-smi fallback's output on a real mismatch (zzzhouuu/truenas-nvidia-drivers#19; the
# kernel module of that machine is public/proc-driver-version/issue__truenas-…-mismatch.txt).
TRUENAS_SMI = "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 580.178"
TRUENAS_PROC = PUBLIC / "proc-driver-version" / "issue__truenas-nvidia-drivers-19__proprietary-580.173.02-nvml-580.178-mismatch.txt"

CASES = [
    # GD101 no-driver
    Case("healthy-h200", "GD101", _h200(), "pass"),
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
        "no-permission", "GD101", _h200(nvml_init_failed(4), smi_failed("Failed to initialize NVML: Insufficient Permissions")),
        "fail", "error", ("no permission", "device nodes"), ("driver.nvml",), commands=("ls -l /dev/nvidia*", "usermod -aG video"),
    ),
    Case(
        "gpu-is-lost", "GD101", _h200(nvml_init_failed(15)), "fail", "error", ("fell off the bus",), ("driver.nvml",),
        commands=("dmesg | grep -i xid",),
    ),
    Case(
        "unknown-nvml-error-names-the-error", "GD101", _h200(nvml_init_failed(999)), "fail", "error",
        ("NVML failed to initialise", "NVML Unknown: Unknown Error"), ("driver.nvml",), commands=("ubuntu-drivers",),
    ),
    # Code 18 is GD102's: GD101 must not report it a second time.
    Case("version-mismatch-is-not-gd101", "GD101", _h200(nvml_init_failed(18), smi_failed(TRUENAS_SMI)), "pass"),
    Case(
        "pynvml-missing-but-nvidia-smi-answered", "GD101", _h200(no_pynvml()), "fail", "warning",
        ("nvidia-ml-py", "nvidia-smi only"), ("driver.nvml", "gpu.count"), commands=("pip install --force-reinstall nvidia-ml-py",),
    ),
    Case(
        "gpu-probe-timed-out", "GD101",
        _h200(drop("driver", "gpu"), put("probe.gpus", None, "timeout", "no answer within 10 s")),
        "unknown", message=("not collected",),
    ),
    Case(
        "replay-under-root", "GD101",
        _h200(drop("gpu", "driver.version", "driver.cuda_max", "driver.nvml_version"),
              put("driver.nvml", None, "absent", "live probes are off under --root /tmp/x")),
        "not_applicable", message=("live probes are off",),
    ),
    # GD102 driver-library-mismatch
    Case("healthy-h200", "GD102", _h200(), "pass"),
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
        _h200(no_pynvml(), drop("gpu"),
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
    Case("derived-a100-535-consistent", "GD102", _snap("a100.json"), "pass"),
    # GD103 driver-too-old-for-torch
    Case("driver-580-torch-cu130", "GD103", _h200(), "pass"),
    Case(
        "driver-470-torch-cu121", "GD103", _snap("t4.json", put("torch.version", "2.5.1+cu121"), put("torch.cuda", "12.1")),
        "fail", "error", ("driver 470.141.03", "CUDA ≤ 11.4", "below 525.60.13", "CUDA 12.x", "2.5.1+cu121", "insufficient"),
        ("driver.version", "driver.cuda_max", "torch.version", "torch.cuda"), commands=("ubuntu-drivers install",),
    ),
    Case(
        "driver-535-torch-cu124-minor-version-compatibility", "GD103",
        _snap("a100.json", put("torch.version", "2.6.0+cu124"), put("torch.cuda", "12.4")),
        "fail", "warning", ("driver 535.54.03", "older than 550.54.14", "CUDA 12.4", "minor-version compatibility", "PTX"),
        ("driver.version", "torch.cuda"), commands=("ubuntu-drivers install",),
    ),
    Case(
        "driver-535-torch-cu130-suggests-cu121", "GD103", _snap("a100.json"),
        "fail", "error", ("below 580.65.06", "CUDA 13.x", "cu130"), ("driver.version", "driver.cuda_max"),
        commands=("https://download.pytorch.org/whl/cu121",),
    ),
    Case("driver-535-torch-cu121", "GD103", _snap("a100.json", put("torch.version", "2.5.1+cu121"), put("torch.cuda", "12.1")), "pass"),
    Case(
        "torch-without-cuda", "GD103",
        _h200(put("torch.version", "2.11.0+cpu"), put("torch.cuda", None, "absent", "torch was built without CUDA (CPU or ROCm build)")),
        "unknown", message=("torch.cuda", "built without CUDA"),
    ),
    Case("torch-cuda-unreadable", "GD103", _h200(put("torch.cuda", "rocm")), "unknown", message=("cannot read torch's CUDA version",)),
    Case("cuda-14-not-in-table", "GD103", _h200(put("torch.cuda", "14.0")), "unknown", message=("no driver table for CUDA 14.x",)),
    Case("no-driver", "GD103", _h200(nvml_init_failed(12)), "unknown", message=("driver.version",)),
    # GD104 kernel-module-version-unreadable
    Case("healthy-h200", "GD104", _h200(), "pass"),
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
    # GD301 mixed-gpus
    Case("two-identical-h200", "GD301", _x2(), "pass"),
    Case("one-gpu", "GD301", _h200(), "not_applicable", message=("1 visible GPU",)),
    Case(
        "names-differ-same-cc", "GD301", _x2(put("gpu.1.name", "NVIDIA H100 80GB HBM3")),
        "fail", "warning", ("NVIDIA H200 (cc 9.0) on GPU 0", "NVIDIA H100 80GB HBM3 (cc 9.0) on GPU 1"),
        ("gpu.0.name", "gpu.1.name", "gpu.0.compute_capability", "gpu.1.compute_capability"),
        commands=("CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=0",),
    ),
    Case(
        "a100-and-rtx4090", "GD301", _snap("mixed.json"),
        "fail", "error", ("NVIDIA A100 80GB PCIe (cc 8.0) on GPU 0", "NVIDIA GeForce RTX 4090 (cc 8.9) on GPU 1"),
        ("gpu.0.compute_capability", "gpu.1.compute_capability"), commands=("CUDA_VISIBLE_DEVICES=0",),
    ),
    Case(
        "suggests-the-larger-identical-group", "GD301",
        _snap("mixed.json", add_gpu_copy(1, 2, "GPU-486fb5a3-0000-0000-0000-000000000002", "00000000:00:08.0")),
        "fail", "error", ("RTX 4090 (cc 8.9) on GPU 1,2",), ("gpu.2.name",), commands=("CUDA_VISIBLE_DEVICES=1,2",),
    ),
    Case(
        "visible-devices-restrict-to-identical-pair", "GD301",
        _snap("mixed.json", add_gpu_copy(1, 2, "GPU-486fb5a3-0000-0000-0000-000000000002", "00000000:00:08.0"),
              env(CUDA_VISIBLE_DEVICES="1,2")),
        "pass",
    ),
    Case("visible-devices-one-gpu-of-mixed", "GD301", _snap("mixed.json", env(CUDA_VISIBLE_DEVICES="1")),
         "not_applicable", message=("1 visible GPU",)),
    Case("visible-devices-by-uuid", "GD301", _snap("mixed.json", env(CUDA_VISIBLE_DEVICES=H200X2_UUIDS[0][:12])),
         "not_applicable", message=("1 visible GPU",)),
    # GD302 gpu-memory-in-use
    Case("idle-h200", "GD302", _h200(), "pass"),
    Case(
        "real-torch-process-on-gpu-1", "GD302", _busy(),
        "fail", "warning", ("GPU 1 (NVIDIA H200)", "3.6 GiB of 140.4 GiB", "PID 896"),
        ("gpu.1.memory_used", "gpu.1.memory_total", "gpu.1.processes"), "GPU 1",
        commands=("--query-compute-apps=pid,process_name,used_memory", "ps -o pid,user,etime,args -p 896"),
    ),
    Case("busy-gpu-hidden-by-visible-devices", "GD302", _busy(env(CUDA_VISIBLE_DEVICES="0")), "pass"),
    Case(
        # NVML memory v1 counts the driver's reservation as used: 0.6 GiB on an idle H200
        # (ground_truth/h200x2/nvml-multi.json mem_used).
        "v1-memory-idle", "GD302",
        _h200(put("gpu.0.memory_used", 644939776), put("gpu.0.memory_reserved", None, "not_supported", "NVML memory v1 only")),
        "pass",
    ),
    Case(
        # v1 reading with a real 2 GiB torch tensor held (ground_truth/h200/capture.log, stale-proc).
        "v1-memory-with-stale-process", "GD302",
        _h200(put("gpu.0.memory_used", 3344826368), put("gpu.0.memory_reserved", None, "not_supported", "NVML memory v1 only"),
              put("gpu.0.processes", [{"pid": 641, "used_memory": 2690646016}])),
        "fail", "warning", ("3.1 GiB", "PID 641"), ("gpu.0.memory_used",), "GPU 0", commands=("-p 641",),
    ),
    Case(
        "holder-in-another-container", "GD302", _busy(put("gpu.1.processes", [])),
        "fail", "warning", ("no process visible from here",), ("gpu.1.processes",), "GPU 1",
        commands=("--query-compute-apps",),
    ),
    # GD303 ecc-uncorrectable-errors
    Case("no-errors", "GD303", _x2(), "pass"),
    Case("ecc-off-rtx4090", "GD303", _snap("rtx4090.json"), "pass"),
    Case(
        "two-uncorrectable-on-gpu-1", "GD303", _x2(put("gpu.1.ecc_uncorrected_volatile", 2)),
        "fail", "error", ("GPU 1 (NVIDIA H200) reports 2 uncorrectable ECC error(s)",),
        ("gpu.1.ecc_uncorrected_volatile", "gpu.1.ecc_mode"), "GPU 1",
        commands=("nvidia-smi -r -i 1", "nvidia-smi -q -d ECC,ROW_REMAPPER -i 1"),
    ),
    # GD304 row-remap-pending
    Case("no-remaps", "GD304", _h200(), "pass"),
    Case("turing-has-no-row-remapper", "GD304", _snap("t4.json"), "pass"),
    Case(
        "pending", "GD304",
        _h200(put("gpu.0.remapped_rows", {"correctable": 0, "uncorrectable": 1, "pending": True, "failure": False})),
        "fail", "error", ("GPU 0 (NVIDIA H200)", "pending", "after a GPU reset"), ("gpu.0.remapped_rows",), "GPU 0",
        commands=("nvidia-smi -r -i 0",),
    ),
    Case(
        "failure", "GD304",
        _h200(put("gpu.0.remapped_rows", {"correctable": 0, "uncorrectable": 8, "pending": True, "failure": True})),
        "fail", "error", ("row remapping FAILED", "RMA"), ("gpu.0.remapped_rows",), "GPU 0",
        commands=("nvidia-smi -q -d ROW_REMAPPER -i 0",),
    ),
    # GD305 pcie-link-degraded
    Case("gen5-x16", "GD305", _h200(), "pass"),
    Case(
        "x8-of-x16", "GD305", _h200(put("gpu.0.pcie_width_current", 8)),
        "fail", "warning", ("PCIe link at width x8 of x16",),
        ("gpu.0.pcie_width_current", "gpu.0.pcie_width_max"), "GPU 0", commands=("nvidia-smi -q -d PCIE -i 0",),
    ),
    Case("gen1-of-5-while-idle", "GD305", _h200(put("gpu.0.pcie_gen_current", 1)), "pass"),
    Case(
        "gen3-of-5-while-busy", "GD305", _busy(put("gpu.1.pcie_gen_current", 3)),
        "fail", "warning", ("GPU 1 (NVIDIA H200): PCIe link at gen 3 of 5 while busy",),
        ("gpu.1.pcie_gen_current", "gpu.1.pcie_gen_max"), "GPU 1", commands=("nvidia-smi -q -d PCIE -i 1",),
    ),
    Case("busy-at-full-speed", "GD305", _busy(), "pass"),
    # GD306 persistence-mode-off
    Case("on", "GD306", _h200(), "pass"),
    Case(
        "off-on-h200", "GD306", _h200(put("gpu.0.persistence_mode", False)),
        "fail", "warning", ("GPU 0 (NVIDIA H200): persistence mode is off",), ("gpu.0.persistence_mode",), "GPU 0",
        commands=("systemctl enable --now nvidia-persistenced", "nvidia-smi -pm 1"),
    ),
    Case("off-on-rtx4090-consumer-card", "GD306", _snap("rtx4090.json"), "pass"),
    Case("off-on-tesla-t4", "GD306", _snap("t4.json", put("gpu.0.persistence_mode", False)),
         "fail", "warning", ("Tesla T4",), ("gpu.0.persistence_mode",), "GPU 0"),
    Case("mixed-only-the-a100-counts", "GD306", _snap("mixed.json", put("gpu.0.persistence_mode", False)),
         "fail", "warning", ("A100 80GB PCIe",), ("gpu.0.persistence_mode",), "GPU 0"),
    # GD307 compute-mode-blocks
    Case("default", "GD307", _busy(), "pass"),
    Case(
        "exclusive-process-taken", "GD307", _busy(put("gpu.1.compute_mode", "Exclusive_Process")),
        "fail", "error", ("GPU 1 (NVIDIA H200) is Exclusive_Process and already used by PID 896", "device busy or unavailable"),
        ("gpu.1.compute_mode", "gpu.1.processes"), "GPU 1", commands=("nvidia-smi -i 1 -c DEFAULT",),
    ),
    Case("exclusive-process-free", "GD307", _x2(put("gpu.1.compute_mode", "Exclusive_Process")), "pass"),
    Case(
        "prohibited", "GD307", _h200(put("gpu.0.compute_mode", "Prohibited")),
        "fail", "error", ("prohibits all CUDA contexts",), ("gpu.0.compute_mode",), "GPU 0", commands=("nvidia-smi -i 0 -c DEFAULT",),
    ),
    Case("exclusive-gpu-not-visible", "GD307",
         _busy(put("gpu.1.compute_mode", "Exclusive_Process"), env(CUDA_VISIBLE_DEVICES="0")), "pass"),
    # GD308 cuda-visible-devices-invalid
    Case("not-set", "GD308", _x2(), "not_applicable", message=("not set",)),
    Case("both-gpus", "GD308", _x2(env(CUDA_VISIBLE_DEVICES="0,1")), "pass"),
    Case(
        "0,4,1-on-two-gpus", "GD308", _x2(env(CUDA_VISIBLE_DEVICES="0,4,1")),
        "fail", "error", ("'4' is not a GPU here", "ignores what follows it too (1)", "will see 1 GPU(s)"),
        ("env.CUDA_VISIBLE_DEVICES", "gpu.count"), commands=("export CUDA_VISIBLE_DEVICES=0,1", "nvidia-smi -L"),
    ),
    Case(
        "empty", "GD308", _x2(env(CUDA_VISIBLE_DEVICES="")),
        "fail", "warning", ("empty", "no GPU is visible"), ("env.CUDA_VISIBLE_DEVICES",), commands=("CUDA_VISIBLE_DEVICES=0,1",),
    ),
    Case("uuid-prefix", "GD308", _x2(env(CUDA_VISIBLE_DEVICES=H200X2_UUIDS[1][:12])), "pass"),
    Case("full-uuids", "GD308", _x2(env(CUDA_VISIBLE_DEVICES=",".join(reversed(H200X2_UUIDS)))), "pass"),
    Case(
        "unknown-uuid", "GD308", _x2(env(CUDA_VISIBLE_DEVICES="GPU-ffffffff")),
        "fail", "error", ("'GPU-ffffffff' is not a GPU here", "0 GPU(s)"), ("env.CUDA_VISIBLE_DEVICES",),
    ),
    Case(
        "duplicate", "GD308", _x2(env(CUDA_VISIBLE_DEVICES="0,0")),
        "fail", "warning", ("'0,0'", "names a GPU twice (0)"), ("env.CUDA_VISIBLE_DEVICES",),
    ),
    Case("mig-instance", "GD308", _x2(env(CUDA_VISIBLE_DEVICES="MIG-4b5f1a4e-8f8c-5b2a-9a1e-000000000000")),
         "unknown", message=("MIG",)),
    Case("uuids-not-read", "GD308", _x2(env(CUDA_VISIBLE_DEVICES=H200X2_UUIDS[0]), drop("gpu.0.uuid", "gpu.1.uuid")),
         "unknown", message=("UUIDs were not read",)),
    # GD309 dev-shm-too-small
    Case("two-gpus-256-gib", "GD309", _x2(), "pass"),
    Case(
        "docker-default-64-mib-two-gpus", "GD309", _x2(put("host.shm_total", 64 * MIB)),
        "fail", "warning", ("/dev/shm is 64 MiB with 2 GPUs visible",), ("host.shm_total", "gpu.count", "host.container"),
        commands=("--ipc=host", "--shm-size=16g"),
    ),
    Case("64-mib-one-gpu", "GD309", _h200(put("host.shm_total", 64 * MIB)), "not_applicable", message=("1 visible GPU",)),
    Case("64-mib-two-gpus-one-visible", "GD309", _x2(put("host.shm_total", 64 * MIB), env(CUDA_VISIBLE_DEVICES="1")),
         "not_applicable", message=("1 visible GPU",)),
    Case("shm-unreadable", "GD309", _x2(put("host.shm_total", None, "error", "statvfs failed")), "unknown", message=("host.shm_total",)),
]


@pytest.mark.parametrize("case", CASES, ids=[f"{c.rule}-{c.name}" for c in CASES])
def test_rule(case: Case, tmp_path: Path):
    outcome = run(case.rule, case.build(tmp_path))
    assert outcome.status == case.status, (outcome.reason, [f.message for f in outcome.findings])
    if case.status != "fail":
        assert outcome.findings == []
        for part in case.message:
            assert part in outcome.reason
        return
    assert len(outcome.findings) == case.findings, [f.message for f in outcome.findings]
    finding = outcome.findings[0]
    assert finding.severity == case.severity
    assert finding.rule_id == case.rule
    for part in case.message:
        assert part in finding.message, finding.message
    cited = [e.path for e in finding.evidence]
    for path in case.evidence:
        assert path in cited, cited
    for item in finding.evidence:  # evidence names facts that are really in the snapshot (or labelled values)
        assert item.path.startswith("env.") or item.status in ("ok", "absent", "error", "not_supported", "no_permission", "timeout")
    assert finding.subject == case.subject
    assert finding.fix is not None and finding.fix.summary
    assert finding.fix.commands, "a finding must come with commands to run"
    for part in case.commands:
        assert any(part in command for command in finding.fix.commands), finding.fix.commands


RULES_UNDER_TEST = [f"GD{n}" for n in (101, 102, 103, 104, 301, 302, 303, 304, 305, 306, 307, 308, 309)]


def test_every_rule_has_a_failing_and_a_passing_case():
    catalogue = {m.id for m in registry.load_rules() if m.area in ("driver", "gpu")}
    assert catalogue == set(RULES_UNDER_TEST), "a driver/gpu rule was added or removed: add its cases here"
    for rule_id in RULES_UNDER_TEST:
        statuses = {c.status for c in CASES if c.rule == rule_id}
        assert {"fail", "pass"} <= statuses, rule_id


# --- cases that need more than one finding or more than one rule -----------------------------
def test_code_18_is_reported_once_by_gd102_not_by_gd101(tmp_path):
    data = build("h200.json", nvml_init_failed(18), smi_failed(TRUENAS_SMI), library_file("580.173.02", tmp_path))
    result = run_rules(Snapshot.from_json(data), [registry.find("GD101"), registry.find("GD102")])
    assert [(f.rule_id, f.severity) for f in result.findings] == [("GD102", "error")]


def test_ecc_errors_on_both_gpus_give_one_finding_each():
    outcome = run("GD303", build("h200x2.json", put("gpu.0.ecc_uncorrected_volatile", 1), put("gpu.1.ecc_uncorrected_volatile", 5)))
    assert [(f.subject, f.severity) for f in outcome.findings] == [("GPU 0", "error"), ("GPU 1", "error")]
    assert "5 uncorrectable" in outcome.findings[1].message


def test_remap_failure_is_reported_instead_of_pending_not_as_well():
    outcome = run("GD304", build("h200.json", put("gpu.0.remapped_rows", {"correctable": 0, "uncorrectable": 8, "pending": True, "failure": True})))
    assert len(outcome.findings) == 1
    assert "FAILED" in outcome.findings[0].message and "pending" not in outcome.findings[0].message


def test_pcie_width_and_generation_in_one_finding():
    outcome = run("GD305", build("h200x2-busy.json", put("gpu.0.pcie_width_current", 8), put("gpu.0.pcie_gen_current", 4)))
    assert [f.subject for f in outcome.findings] == ["GPU 0"]
    assert "width x8 of x16 and gen 4 of 5 while busy" in outcome.findings[0].message


def test_busy_h200x2_gpu_0_below_threshold_is_not_reported():
    """PID 896 also holds 518 MiB on GPU 0 (memory_used 527 MiB): under the 1 GiB threshold."""
    data = load("h200x2-busy.json")
    assert data["facts"]["gpu.0.processes"]["value"] == [{"pid": 896, "used_memory": 543162368}]
    assert [f.subject for f in run("GD302", data).findings] == ["GPU 1"]
