"""The NVML adapter: the only module that imports pynvml.

Every call goes through ``_query`` so an NVMLError becomes a fact status
(not_supported, no_permission, error) instead of an exception; one GPU failing does not
hide the others. Handles never reach the snapshot. The caller (probes.gpus) runs this in a
daemon thread under the global deadline, so a hung driver cannot hang the doctor.

Facts written (all with source "nvml"):
  driver.nvml                 ok with value "ok", or the init failure (value: {"code", "name"})
  driver.version              "580.159.04"
  driver.cuda_max             "13.0"  (nvmlSystemGetCudaDriverVersion, major*1000 + minor*10)
  driver.nvml_version         "13.580.159.04"
  driver.library_path         real path of the libnvidia-ml that was loaded (from /proc/self/maps)
  gpu.count
  gpu.N.{name, uuid, pci_bus_id, compute_capability, memory_total, memory_used, memory_free,
         memory_reserved, ecc_mode, ecc_uncorrected_volatile, remapped_rows, mig_mode,
         persistence_mode, compute_mode, throttle_reasons, pcie_gen_current, pcie_gen_max,
         pcie_width_current, pcie_width_max, nvlink_active, processes}
  gpu.N.numa_node, gpu.N.cpu_affinity, gpu.N.nvlink_links, and gpu.pairs (P2P status and
  topology level of every GPU pair): probes.nvml_links, NVML only (the nvidia-smi fallback
  does not write them; the rules that read them say unknown)
  (processes: compute "C" and graphics "G" processes as {pid, used_memory, type})
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional

from gpudoctor.snapshot import ABSENT, ERROR, NO_PERMISSION, NOT_SUPPORTED, TIMEOUT, Fact, missing, ok

SOURCE = "nvml"

# NVML return codes (nvml.h) we map to meaning; names match pynvml's NVMLError_* classes.
ERROR_NAMES = {
    1: "Uninitialized",
    2: "InvalidArgument",
    3: "NotSupported",
    4: "NoPermission",
    9: "DriverNotLoaded",
    10: "Timeout",
    12: "LibraryNotFound",
    13: "FunctionNotFound",
    15: "GpuIsLost",
    16: "ResetRequired",
    17: "OperatingSystem",
    18: "LibRmVersionMismatch",
    999: "Unknown",
}

COMPUTE_MODES = {0: "Default", 1: "Exclusive_Thread", 2: "Prohibited", 3: "Exclusive_Process"}

# nvmlClocksEventReason* bit masks (nvml.h); names as nvidia-smi prints them, snake_cased.
THROTTLE_REASONS = (
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
)


def _status_for(code: int) -> str:
    if code == 3:
        return NOT_SUPPORTED
    if code == 4:
        return NO_PERMISSION
    if code == 10:
        return TIMEOUT
    if code == 13:
        return NOT_SUPPORTED  # the installed driver is too old for this call
    return ERROR


def _error_fact(exc: Exception) -> Fact:
    code = getattr(exc, "value", None)
    if isinstance(code, int):
        name = ERROR_NAMES.get(code, f"error {code}")
        return missing(_status_for(code), f"NVML {name}: {exc}", SOURCE, value={"code": code, "name": name})
    return missing(ERROR, f"{type(exc).__name__}: {exc}", SOURCE)


def _query(fn: Callable[..., Any], *args: Any, convert: Callable[[Any], Any] = lambda v: v) -> Fact:
    try:
        raw = fn(*args)
    except Exception as exc:  # NVMLError and anything ctypes may raise
        return _error_fact(exc)
    try:
        return ok(convert(_decode(raw)), SOURCE)
    except Exception as exc:
        return missing(ERROR, f"unexpected NVML answer {raw!r}: {exc}", SOURCE)


def _decode(value: Any) -> Any:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def struct_to_dict(struct: Any) -> Dict[str, Any]:
    """ctypes structs: read ``_fields_`` (``vars()`` of NVML's memory struct is empty)."""
    return {name: _decode(getattr(struct, name)) for name, *_ in getattr(struct, "_fields_", ())}


def cuda_version_string(encoded: int) -> str:
    return f"{encoded // 1000}.{(encoded % 1000) // 10}"


def loaded_library_path(maps_path: str = "/proc/self/maps") -> Optional[str]:
    try:
        with open(maps_path, encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if "libnvidia-ml.so" in line:
                    return line.split(None, 5)[-1].strip()
    except OSError:
        return None
    return None


def collect() -> Dict[str, Fact]:
    """Read everything NVML knows. Returns only driver.nvml when NVML cannot start."""
    try:
        from gpudoctor.probes import codecache

        pynvml = codecache.import_module("pynvml")  # `import pynvml`, its compiled code kept where no .pyc can be
    except Exception as exc:
        return {"driver.nvml": missing(ABSENT, f"pynvml not importable: {exc}", SOURCE)}
    if not hasattr(pynvml, "nvmlDeviceGetCudaComputeCapability"):
        # The deprecated PyPI "pynvml" or a stray module shadows nvidia-ml-py.
        return {"driver.nvml": missing(ERROR, f"{getattr(pynvml, '__file__', '?')} is not nvidia-ml-py", SOURCE)}
    try:
        pynvml.nvmlInit()
    except Exception as exc:
        return {"driver.nvml": _error_fact(exc)}
    try:
        return _read_all(pynvml)
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


def _read_all(nv: Any) -> Dict[str, Fact]:
    facts: Dict[str, Fact] = {"driver.nvml": ok("ok", SOURCE)}
    facts["driver.version"] = _query(nv.nvmlSystemGetDriverVersion)
    facts["driver.cuda_max"] = _query(nv.nvmlSystemGetCudaDriverVersion, convert=cuda_version_string)
    facts["driver.nvml_version"] = _query(nv.nvmlSystemGetNVMLVersion)
    path = loaded_library_path()
    facts["driver.library_path"] = ok(path, "/proc/self/maps") if path else missing(ABSENT, "not in /proc/self/maps")
    count = _query(nv.nvmlDeviceGetCount)
    facts["gpu.count"] = count
    for index in range(count.value if count.ok else 0):
        facts.update(_read_gpu(nv, index))
    if count.ok:
        facts["gpu.pairs"] = _pairs(nv, count.value, facts)
    return facts


def _pairs(nv: Any, count: int, facts: Dict[str, Fact]) -> Fact:
    """P2P status and topology of every GPU pair (probes.nvml_links), on the handles of this pass."""
    from gpudoctor.probes import nvml_links

    handles = {}
    for index in range(count):
        handle = _query(nv.nvmlDeviceGetHandleByIndex, index)
        if handle.ok:
            handles[index] = handle.value
    buses = {i: facts[f"gpu.{i}.pci_bus_id"].value if facts.get(f"gpu.{i}.pci_bus_id", missing(ERROR, "")).ok else None for i in handles}
    links = {i: facts[f"gpu.{i}.nvlink_links"] for i in handles if f"gpu.{i}.nvlink_links" in facts}
    return nvml_links.pair_fact(nv, handles, buses, links, _query)


def _read_gpu(nv: Any, index: int) -> Dict[str, Fact]:
    prefix = f"gpu.{index}."
    handle_fact = _query(nv.nvmlDeviceGetHandleByIndex, index)
    if not handle_fact.ok:
        return {prefix + "name": handle_fact}
    h = handle_fact.value
    f: Dict[str, Fact] = {}
    f["name"] = _query(nv.nvmlDeviceGetName, h)
    f["uuid"] = _query(nv.nvmlDeviceGetUUID, h)
    f["pci_bus_id"] = _query(nv.nvmlDeviceGetPciInfo, h, convert=lambda p: _decode(p.busId))
    f["compute_capability"] = _query(nv.nvmlDeviceGetCudaComputeCapability, h, convert=lambda cc: f"{cc[0]}.{cc[1]}")
    f.update(_memory(nv, h))
    f["ecc_mode"] = _query(nv.nvmlDeviceGetEccMode, h, convert=lambda modes: bool(modes[0]))
    f["ecc_uncorrected_volatile"] = _query(
        nv.nvmlDeviceGetTotalEccErrors, h, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_VOLATILE_ECC, convert=int
    )
    f["remapped_rows"] = _query(
        nv.nvmlDeviceGetRemappedRows,
        h,
        convert=lambda r: {"correctable": r[0], "uncorrectable": r[1], "pending": bool(r[2]), "failure": bool(r[3])},
    )
    f["mig_mode"] = _query(nv.nvmlDeviceGetMigMode, h, convert=lambda modes: bool(modes[0]))
    f["persistence_mode"] = _query(nv.nvmlDeviceGetPersistenceMode, h, convert=bool)
    f["compute_mode"] = _query(nv.nvmlDeviceGetComputeMode, h, convert=lambda m: COMPUTE_MODES.get(m, str(m)))
    reasons_fn = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or nv.nvmlDeviceGetCurrentClocksThrottleReasons
    f["throttle_reasons"] = _query(reasons_fn, h, convert=lambda mask: [n for bit, n in THROTTLE_REASONS if mask & bit])
    f["pcie_gen_current"] = _query(nv.nvmlDeviceGetCurrPcieLinkGeneration, h, convert=int)
    gen_max = getattr(nv, "nvmlDeviceGetGpuMaxPcieLinkGeneration", None) or nv.nvmlDeviceGetMaxPcieLinkGeneration
    f["pcie_gen_max"] = _query(gen_max, h, convert=int)
    f["pcie_width_current"] = _query(nv.nvmlDeviceGetCurrPcieLinkWidth, h, convert=int)
    f["pcie_width_max"] = _query(nv.nvmlDeviceGetMaxPcieLinkWidth, h, convert=int)
    f["nvlink_active"] = _nvlink(nv, h)
    from gpudoctor.probes import nvml_links

    f.update(nvml_links.gpu_facts(nv, h, _query))  # NUMA node, CPU affinity, NVLink links and their remote ends
    f["processes"] = _all_processes(nv, h)
    return {prefix + key: fact for key, fact in f.items()}


def _memory(nv: Any, h: Any) -> Dict[str, Fact]:
    """v2 separates memory the driver reserves (about 0.6 GiB on an H200) from memory in use."""
    names = ("memory_total", "memory_used", "memory_free", "memory_reserved")
    version = getattr(nv, "nvmlMemory_v2", None)
    info = _query(nv.nvmlDeviceGetMemoryInfo, h, version, convert=struct_to_dict) if version else None
    if info is None or not info.ok:
        info = _query(nv.nvmlDeviceGetMemoryInfo, h, convert=struct_to_dict)
    if not info.ok:
        return {name: info for name in names}
    memory = info.value
    out = {name: ok(int(memory[name.split("_")[1]]), SOURCE) for name in names[:3]}
    out["memory_reserved"] = (
        ok(int(memory["reserved"]), SOURCE) if "reserved" in memory else missing(NOT_SUPPORTED, "NVML memory v1 only", SOURCE)
    )
    return out


def _nvlink(nv: Any, h: Any) -> Fact:
    """Number of active NVLink links; not_supported on GPUs without NVLink."""
    active: List[int] = []
    first_error: Optional[Fact] = None
    for link in range(getattr(nv, "NVML_NVLINK_MAX_LINKS", 18)):
        state = _query(nv.nvmlDeviceGetNvLinkState, h, link)
        if not state.ok:
            first_error = first_error or state
            break
        if state.value:
            active.append(link)
    if not active and first_error is not None:
        return first_error if first_error.status != ERROR else missing(NOT_SUPPORTED, first_error.detail, SOURCE)
    return ok(len(active), SOURCE)


def _all_processes(nv: Any, h: Any) -> Fact:
    """Compute processes (type "C"), plus graphics ones ("G", e.g. Xorg; "C+G" when both), as nvidia-smi lists them."""
    compute = _query(nv.nvmlDeviceGetComputeRunningProcesses, h, convert=lambda procs: _processes(procs, "C"))
    if not compute.ok:
        return compute
    graphics = _query(nv.nvmlDeviceGetGraphicsRunningProcesses, h, convert=lambda procs: _processes(procs, "G"))
    merged = {entry["pid"]: entry for entry in compute.value}
    for entry in graphics.value if graphics.ok else []:
        if entry["pid"] in merged:
            merged[entry["pid"]]["type"] = "C+G"
        else:
            merged[entry["pid"]] = entry
    return ok(list(merged.values()), SOURCE)


def _processes(procs: Any, kind: str) -> List[Dict[str, Any]]:
    out = []
    for proc in procs:
        used = getattr(proc, "usedGpuMemory", None)
        # NVML reports "not available" (e.g. no permission in a container) as a huge sentinel.
        out.append({"pid": int(proc.pid), "used_memory": int(used) if isinstance(used, int) and used < 1 << 62 else None, "type": kind})
    return out


# --- the GPU fabric state, read in a child -------------------------------------------------------
# nvmlDeviceGetGpuFabricInfoV through pynvml killed the calling Python with SIGSEGV on the real
# H200 (driver 580.159.04; ground_truth/h200/fabric). So the doctor never calls it: probes.fabric
# runs ``python -m gpudoctor.probes.nvml fabric`` under the deadline, and a crash there costs only
# this fact. nvmlGpuFabricState_t: 0 not supported, 1 not started, 2 in progress, 3 completed.
FABRIC_STATES = {0: "not_supported", 1: "not_started", 2: "in_progress", 3: "completed"}


def read_fabric() -> Dict[str, Any]:
    """{index: {"state", "status" (nvmlReturn_t of the registration), "clique"} or {"error": name}}."""
    import ctypes

    from gpudoctor.probes import codecache

    nv = codecache.import_module("pynvml")
    nv.nvmlInit()
    try:
        out: Dict[str, Any] = {}
        for index in range(nv.nvmlDeviceGetCount()):
            handle = nv.nvmlDeviceGetHandleByIndex(index)
            info = nv.c_nvmlGpuFabricInfo_t()
            try:
                # pynvml hands the struct to C as given: pass a pointer (the version-less v1 call).
                nv.nvmlDeviceGetGpuFabricInfo(handle, ctypes.byref(info))
            except Exception as exc:
                code = getattr(exc, "value", None)
                out[str(index)] = {"error": ERROR_NAMES.get(code, str(code)) if isinstance(code, int) else str(exc)}
                continue
            out[str(index)] = {"state": FABRIC_STATES.get(int(info.state), str(info.state)), "status": int(info.status),
                               "status_name": "Success" if int(info.status) == 0 else ERROR_NAMES.get(int(info.status), str(info.status)),
                               "clique": int(info.cliqueId)}
        return out
    finally:
        try:
            nv.nvmlShutdown()
        except Exception:
            pass


if __name__ == "__main__":  # the child of probes.fabric
    import json
    import sys

    if sys.argv[1:] == ["fabric"]:
        print(json.dumps(read_fabric()))
