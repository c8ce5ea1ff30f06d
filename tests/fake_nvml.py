"""A recorded NVML: a ``pynvml`` module that replays what real H200s answered.

gpudoctor/probes/nvml.py is the only code that talks to NVML, and CI has no GPU. This
module stands in for ``pynvml`` (tests put it in ``sys.modules``; see the ``fake_nvml``
fixture in conftest.py) and answers every call the adapter makes from a *tape*: the
JSON that the capture script printed on the H200 machines (tests/fixtures/ground_truth:
h200/capture.log section ``===== nvml``, h200x2/nvml-multi.json, h200/capture.log
``===== stale-proc``). Nothing of gpudoctor is replaced; the errors, structs and
constants are nvidia-ml-py's own (``NVMLError(3)`` is its ``NVMLError_NotSupported``, with
its message), so the adapter sees the types it sees on a GPU host.

A tape is ``{"driver", "cuda_driver", "nvml", "gpus": [{...}], "init_error"?}`` with the
capture's GPU keys (name, uuid, cc, mem, pci, persistence, compute_mode, mig, ecc,
ecc_uncorrected_volatile, throttle, pcie_gen, pcie_width, pcie_gen_max, remapped_rows,
procs, nvlink_active). A value ``"ERR NVMLError_<Name> …"`` (the capture's own spelling
of a failed call) is raised as that NVML error; a key the tape lacks answers
NotSupported, as NVML does for what a GPU does not have (the 1-GPU H200's NVLink:
tests/fixtures/snapshots/h200.json, recorded there).
"""

from __future__ import annotations

import copy
import json
import types
from pathlib import Path
from typing import Any, Dict, List, Optional

import pynvml as real  # nvidia-ml-py: its errors and structs, never its library

GROUND = Path(__file__).resolve().parent / "fixtures" / "ground_truth"

CODES = {name[len("NVML_ERROR_"):].replace("_", "").lower(): value
         for name, value in vars(real).items() if name.startswith("NVML_ERROR_") and isinstance(value, int)}


def error(name_or_code: Any) -> Exception:
    """nvidia-ml-py's exception for a code or a capture name ("NotSupported", "NVMLError_GpuIsLost")."""
    if isinstance(name_or_code, int):
        return real.NVMLError(name_or_code)
    return real.NVMLError(CODES[str(name_or_code).replace("NVMLError_", "").replace("_", "").lower()])


def _section(text: str, name: str) -> str:
    start = text.index(f"===== {name}\n") + len(f"===== {name}\n")
    end = text.find("\n===== ", start)
    return text[start:] if end < 0 else text[start:end]


def _topo_matrix(text: str) -> Dict[str, Any]:
    """``nvidia-smi topo -m`` as recorded: {"cpu": {gpu: cpulist}, "links": {"0-1": "NV18"}}."""
    rows = [line.split("\t") for line in text.splitlines() if line.startswith("GPU")]
    out: Dict[str, Any] = {"cpu": {}, "links": {}}
    for row in rows:
        cells = [c.strip() for c in row]
        me = int(cells[0][3:])
        count = len(rows)
        for other, cell in enumerate(cells[1:1 + count]):
            if other != me:
                out["links"][f"{min(me, other)}-{max(me, other)}"] = cell
        out["cpu"][me] = cells[1 + count]
    return out


def _affinity_words(cpus: str) -> List[int]:
    """A cpulist ("0-31") as NVML's affinity words (64 bits each)."""
    bits = 0
    for part in cpus.split(","):
        low, _, high = part.partition("-")
        for cpu in range(int(low), int(high or low) + 1):
            bits |= 1 << cpu
    return [(bits >> (64 * w)) & ((1 << 64) - 1) for w in range(16)]


def h200() -> Dict[str, Any]:
    """The 1-GPU H200 (driver 580.159.04), from capture.log's ``===== nvml`` JSON.

    The capture's ``mem`` is ``{}`` (its script read the struct with ``vars()``, the bug the
    adapter's struct_to_dict avoids), so memory comes from nvml-multi.json's reading of the
    same model on the same driver: v1 total/used/free, and v2 as the adapter recorded it on
    the H200 (snapshots/h200.json: used 0, the 615 MiB in use idle is the driver's reserve).
    """
    block = _section((GROUND / "h200" / "capture.log").read_text(encoding="utf-8"), "nvml")
    tape = json.loads(block[block.index("{"): block.rindex("}") + 1])
    multi = h200x2()
    gpu = tape["gpus"][0]
    gpu["mem"] = dict(multi["gpus"][0]["mem"])
    # h200/fabric (the same VM type): nvmlDeviceGetCpuAffinity answered; topo -m "CPU Affinity 0-15".
    gpu["cpu_affinity"] = _affinity_words("0-15")
    return tape


def h200x2() -> Dict[str, Any]:
    """The 2-GPU H200 host with NVLink, from nvml-multi.json (fields it lacks answer NotSupported).

    Its ``p2p`` map is nvmlDeviceGetTopologyCommonAncestor (30: host bridge); its ``numa`` null is
    the call failing (NotSupported, as on the 1-GPU H200: h200/fabric). From capture2.log's
    ``topo -m`` (GPU0-GPU1 "NV18", CPU affinity 0-31): P2P read/write/NVLink/atomics answer OK, and
    each active link's remote end is ffff:ff:ff.0 — not the other GPU: its 18 links end at the
    NVSwitch fabric, as NVML read on a lent 2xH200 of the same kind (snapshots/h200x2-deep.json,
    its NVLink remote PCI info and ``topo -p2p rw`` all OK)."""
    raw = json.loads((GROUND / "h200x2" / "nvml-multi.json").read_text(encoding="utf-8"))
    topo = _topo_matrix(_section((GROUND / "h200x2" / "capture2.log").read_text(encoding="utf-8"), "topo"))
    gpus = []
    for gpu in raw["gpus"]:
        used = gpu["mem_used"]
        gpus.append({"name": gpu["name"], "uuid": gpu["uuid"], "cc": gpu["cc"], "pci": gpu["pci"],
                     "nvlink_active": gpu["nvlink_active"],
                     "nvlink_remote": ["ffff:ff:ff.0" if active else None for active in gpu["nvlink_active"]],
                     "cpu_affinity": _affinity_words(topo["cpu"][gpu["index"]]),
                     "mem": {"total": gpu["mem_total"], "used": used, "free": gpu["mem_free"]}})
        if gpu["numa"] is not None:
            gpus[-1]["numa"] = gpu["numa"]
    # The per-link error counters, read by nvmlDeviceGetNvLinkErrorCounter on a lent 2xH200 of the same kind
    # (h200x2-nvswitch/nvlink-errors.json, beside its `nvidia-smi nvlink -e`): its total fields answer NotSupported.
    errors = json.loads((GROUND / "h200x2-nvswitch" / "nvlink-errors.json").read_text(encoding="utf-8"))["gpus"]
    for index, gpu in enumerate(gpus):
        gpu["nvlink_errors"] = {int(link): {int(c): v for c, v in row["errors"].items()}
                                for link, row in errors[str(index)].items() if isinstance(row, dict) and "errors" in row}
    p2p = {pair: {cap: 0 for cap in range(4)} for pair, link in topo["links"].items() if link.startswith("NV")}
    return {"driver": raw["driver"], "cuda_driver": raw["cuda_driver"], "gpus": gpus,
            "topology": dict(raw["p2p"]), "p2p_status": p2p}


def h200_stale_process() -> Dict[str, Any]:
    """The 1-GPU H200 while a stale python3 (PID 641) held 2566 MiB (capture.log ``===== stale-proc``)."""
    tape = h200()
    text = _section((GROUND / "h200" / "capture.log").read_text(encoding="utf-8"), "stale-proc").splitlines()
    pid, used = int(text[2].split()[0]), int(text[2].split()[1])
    mem = dict(zip(("used", "free", "total"), (int(w) for w in text[3].split()[2::2])))
    tape["gpus"][0]["procs"] = [{"pid": pid, "usedGpuMemory": used}]
    tape["gpus"][0]["mem"] = mem
    return tape


class _Handle:
    def __init__(self, index: int) -> None:
        self.index = index


def module(tape: Dict[str, Any], v2_memory: bool = True, missing: tuple = ()) -> types.ModuleType:
    """A ``pynvml`` replaying ``tape``. ``missing``: function names this binding lacks (an old
    nvidia-ml-py); ``v2_memory`` False: a driver without nvmlDeviceGetMemoryInfo_v2."""
    tape = copy.deepcopy(tape)
    nv = types.ModuleType("pynvml")
    nv.__file__ = real.__file__
    for name, value in vars(real).items():
        if name.startswith(("NVML_", "NVMLError", "c_nvml", "nvmlPciInfo", "nvmlMemory")):
            setattr(nv, name, value)
    nv.calls = []  # type: ignore[attr-defined]
    state = {"init": False}

    def answer(value: Any) -> Any:
        if isinstance(value, str) and value.startswith("ERR "):
            raise error(value.split()[1])
        return value

    def gpu_key(handle: _Handle, key: str) -> Any:
        if not state["init"]:
            raise error("Uninitialized")
        gpu = tape["gpus"][handle.index]
        if key not in gpu:
            raise error("NotSupported")
        return answer(gpu[key])

    def api(fn):
        if fn.__name__ in missing:
            return fn
        setattr(nv, fn.__name__, fn)
        return fn

    @api
    def nvmlInit() -> None:
        nv.calls.append("nvmlInit")
        if tape.get("init_error"):
            raise error(tape["init_error"])
        state["init"] = True

    @api
    def nvmlShutdown() -> None:
        nv.calls.append("nvmlShutdown")
        state["init"] = False

    @api
    def nvmlSystemGetDriverVersion() -> str:
        return answer(tape["driver"])

    @api
    def nvmlSystemGetCudaDriverVersion() -> int:
        return answer(tape["cuda_driver"])

    @api
    def nvmlSystemGetNVMLVersion() -> str:
        if "nvml" not in tape:
            raise error("NotSupported")
        return answer(tape["nvml"])

    @api
    def nvmlDeviceGetCount() -> int:
        return answer(tape.get("count", len(tape["gpus"])))

    @api
    def nvmlDeviceGetHandleByIndex(index: int) -> _Handle:
        answer(tape["gpus"][index].get("handle", "ok"))
        return _Handle(index)

    @api
    def nvmlDeviceGetName(h: _Handle) -> bytes:
        return gpu_key(h, "name").encode()  # older bindings answer bytes: the adapter decodes

    @api
    def nvmlDeviceGetUUID(h: _Handle) -> str:
        return gpu_key(h, "uuid")

    @api
    def nvmlDeviceGetPciInfo(h: _Handle):
        info = real.nvmlPciInfo_t()
        info.busId = gpu_key(h, "pci").encode()
        return info

    @api
    def nvmlDeviceGetCudaComputeCapability(h: _Handle):
        return tuple(gpu_key(h, "cc"))

    @api
    def nvmlDeviceGetMemoryInfo(h: _Handle, version: Optional[int] = None):
        mem = gpu_key(h, "mem")
        if not version:
            return real.c_nvmlMemory_t(total=mem["total"], free=mem["free"], used=mem["used"])
        if not v2_memory:
            raise error("FunctionNotFound")
        held = sum(p.get("usedGpuMemory") or 0 for p in gpu_key(h, "procs")) if "procs" in tape["gpus"][h.index] else 0
        reserved = mem["total"] - mem["free"] - held  # what v2 reports apart: the driver's own reserve
        return real.c_nvmlMemory_v2_t(version=version, total=mem["total"], reserved=reserved, free=mem["free"],
                                      used=mem["total"] - mem["free"] - reserved)

    @api
    def nvmlDeviceGetEccMode(h: _Handle):
        return list(gpu_key(h, "ecc"))

    @api
    def nvmlDeviceGetTotalEccErrors(h: _Handle, kind: int, counter: int) -> int:
        assert (kind, counter) == (real.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, real.NVML_VOLATILE_ECC)
        return gpu_key(h, "ecc_uncorrected_volatile")

    @api
    def nvmlDeviceGetRemappedRows(h: _Handle):
        return tuple(gpu_key(h, "remapped_rows"))

    @api
    def nvmlDeviceGetMigMode(h: _Handle):
        return list(gpu_key(h, "mig"))

    @api
    def nvmlDeviceGetPersistenceMode(h: _Handle) -> int:
        return gpu_key(h, "persistence")

    @api
    def nvmlDeviceGetComputeMode(h: _Handle) -> int:
        return gpu_key(h, "compute_mode")

    @api
    def nvmlDeviceGetCurrentClocksEventReasons(h: _Handle) -> int:
        return gpu_key(h, "throttle")

    @api
    def nvmlDeviceGetCurrentClocksThrottleReasons(h: _Handle) -> int:
        return gpu_key(h, "throttle")

    @api
    def nvmlDeviceGetCurrPcieLinkGeneration(h: _Handle) -> int:
        return gpu_key(h, "pcie_gen")

    @api
    def nvmlDeviceGetGpuMaxPcieLinkGeneration(h: _Handle) -> int:
        return gpu_key(h, "pcie_gen_max")

    @api
    def nvmlDeviceGetMaxPcieLinkGeneration(h: _Handle) -> int:
        return gpu_key(h, "pcie_gen_max")

    @api
    def nvmlDeviceGetCurrPcieLinkWidth(h: _Handle) -> int:
        return gpu_key(h, "pcie_width")

    @api
    def nvmlDeviceGetMaxPcieLinkWidth(h: _Handle) -> int:
        return gpu_key(h, "pcie_width_max") if "pcie_width_max" in tape["gpus"][h.index] else gpu_key(h, "pcie_width")

    @api
    def nvmlDeviceGetFieldValues(h: _Handle, field_ids: List[int]) -> Any:
        """The tape's ``nvlink_fields`` ({field id: value}) in pynvml's own c_nvmlFieldValue_t array;
        a field the tape lacks answers NVML_ERROR_NOT_SUPPORTED (3) in its own slot, as NVML does."""
        recorded = {int(k): v for k, v in gpu_key(h, "nvlink_fields").items()}
        values = (real.c_nvmlFieldValue_t * len(field_ids))()
        for slot, field in enumerate(field_ids):
            values[slot].fieldId = field
            if field in recorded:
                values[slot].nvmlReturn, values[slot].valueType = 0, 3  # NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
                values[slot].value.ullVal = recorded[field]
            else:
                values[slot].nvmlReturn = 3
        return values

    @api
    def nvmlDeviceGetNvLinkErrorCounter(h: _Handle, link: int, counter: int) -> int:
        """The tape's ``nvlink_errors`` ({link: {counter: value}}); NotSupported where it has none."""
        recorded = tape["gpus"][h.index].get("nvlink_errors") or {}
        value = (recorded.get(link) or {}).get(counter)
        if not isinstance(value, int):
            raise error("NotSupported")
        return value

    @api
    def nvmlDeviceGetNvLinkState(h: _Handle, link: int) -> int:
        links = gpu_key(h, "nvlink_active")
        if link >= len(links):
            raise error("InvalidArgument")  # past the GPU's last link
        return answer(links[link])

    @api
    def nvmlDeviceGetNvLinkRemotePciInfo(h: _Handle, link: int):
        info = real.nvmlPciInfo_t()
        remote = gpu_key(h, "nvlink_remote")[link]
        if remote is None:
            raise error("InvalidArgument")
        info.busId = answer(remote).encode()
        return info

    @api
    def nvmlDeviceGetNumaNodeId(h: _Handle) -> int:
        return gpu_key(h, "numa")

    @api
    def nvmlDeviceGetCpuAffinity(h: _Handle, words: int):
        return (real.c_ulonglong * words)(*gpu_key(h, "cpu_affinity")[:words])

    def pair_key(a: _Handle, b: _Handle) -> str:
        if not state["init"]:
            raise error("Uninitialized")
        return f"{min(a.index, b.index)}-{max(a.index, b.index)}"

    @api
    def nvmlDeviceGetTopologyCommonAncestor(a: _Handle, b: _Handle) -> int:
        key = pair_key(a, b)
        if key not in tape.get("topology", {}):
            raise error("NotSupported")  # the 1-GPU H200 (h200/fabric README), and (h, h) there
        return answer(tape["topology"][key])

    @api
    def nvmlDeviceGetP2PStatus(a: _Handle, b: _Handle, index: int) -> int:
        key = pair_key(a, b)
        if a.index == b.index:
            return 5  # NVML_P2P_STATUS_NOT_SUPPORTED: what the 1-GPU H200 answered for (h, h)
        if key not in tape.get("p2p_status", {}):
            raise error("NotSupported")
        return answer(tape["p2p_status"][key][index])

    def processes(h: _Handle, key: str) -> List[Any]:
        out = []
        for proc in gpu_key(h, key):
            obj = real.nvmlFriendlyObject({"pid": proc["pid"], "usedGpuMemory": proc.get("usedGpuMemory")})
            out.append(obj)
        return out

    @api
    def nvmlDeviceGetComputeRunningProcesses(h: _Handle) -> List[Any]:
        return processes(h, "procs")

    @api
    def nvmlDeviceGetGraphicsRunningProcesses(h: _Handle) -> List[Any]:
        return processes(h, "graphics_procs") if "graphics_procs" in tape["gpus"][h.index] else []

    return nv
