"""How the GPUs reach each other and the CPUs, read in the one NVML pass (probes.nvml calls these).

This module never imports pynvml: probes.nvml hands it the module it loaded (``nv``) and its
``query`` wrapper, so every NVMLError is a fact status and the adapter stays the only
importer. What ``nvidia-smi topo -m`` and ``topo -p2p`` print, as facts:

  gpu.N.numa_node      nvmlDeviceGetNumaNodeId (NotSupported in a VM: the H200's "GPU NUMA ID N/A")
  gpu.N.cpu_affinity   nvmlDeviceGetCpuAffinity as a cpulist ("0-15"), topo -m's "CPU Affinity"
  gpu.N.nvlink_links   per link: {"link", "active", "remote"}: the remote end's PCI bus id
                       (nvmlDeviceGetNvLinkRemotePciInfo), so pairs count their links (topo -m "NV18")
  gpu.N.nvlink_counters  {"speed_mbps", "replay_errors", "recovery_errors", "crc_flit_errors",
                       "crc_data_errors"}: nvidia-smi nvlink -s / -e, one nvmlDeviceGetFieldValues
                       call (the error counts summed over the links); only where NVLink is
  gpu.pairs            {"0-1": {"level", "nvlinks", "connection", "p2p": {"read", "write", "nvlink",
                       "atomics"}}}: nvmlDeviceGetTopologyCommonAncestor and nvmlDeviceGetP2PStatus,
                       spelled as topo -m / topo -p2p spell them (PHB, NV18; OK, CNS, GNS, TNS, NS, U)

NVML reference: https://docs.nvidia.com/deploy/nvml-api/group__nvmlDeviceQueries.html
(nvmlGpuTopologyLevel_t, nvmlGpuP2PStatus_t, nvmlGpuP2PCapsIndex_t).
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional

from gpudoctor.snapshot import NOT_SUPPORTED, Fact, missing, ok

SOURCE = "nvml"

# nvmlGpuTopologyLevel_t -> nvidia-smi topo -m's word for it.
TOPOLOGY_LEVELS = {0: "SAME_BOARD", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
# nvmlGpuP2PStatus_t -> nvidia-smi topo -p2p's legend (4, "disabled by regkey", has no letter there).
P2P_STATUS = {0: "OK", 1: "CNS", 2: "GNS", 3: "TNS", 4: "DISABLED", 5: "NS", 6: "U"}
# nvmlGpuP2PCapsIndex_t
P2P_CAPS = (("read", 0), ("write", 1), ("nvlink", 2), ("atomics", 3))
MAX_CPUS = 1024  # affinity words read: 16 x 64 bits


def cpulist(words: List[int], bits: int = 64) -> str:
    """Affinity bit words as the kernel's cpulist spelling ("0-15,32")."""
    cpus = [w * bits + b for w, word in enumerate(words) for b in range(bits) if int(word) >> b & 1]
    ranges: List[str] = []
    start = prev = None
    for cpu in cpus + [None]:
        if start is not None and cpu == prev + 1:  # type: ignore[operator]
            prev = cpu
            continue
        if start is not None:
            ranges.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = cpu
    return ",".join(ranges)


def gpu_facts(nv: Any, h: Any, query: Callable[..., Fact]) -> Dict[str, Fact]:
    """The per-GPU facts above (keys without the ``gpu.N.`` prefix)."""
    f: Dict[str, Fact] = {}
    f["numa_node"] = query(nv.nvmlDeviceGetNumaNodeId, h, convert=int) if hasattr(nv, "nvmlDeviceGetNumaNodeId") else \
        missing(NOT_SUPPORTED, "this nvidia-ml-py has no nvmlDeviceGetNumaNodeId", SOURCE)
    f["cpu_affinity"] = query(nv.nvmlDeviceGetCpuAffinity, h, MAX_CPUS // 64, convert=lambda words: cpulist(list(words)))
    f["nvlink_links"] = _links(nv, h, query)
    if f["nvlink_links"].ok and f["nvlink_links"].value:
        f["nvlink_counters"] = _counters(nv, h, query)
    return f


# nvmlDeviceGetFieldValues in one call: what ``nvidia-smi nvlink -s`` (speed) and ``nvlink -e``
# (error counters, summed over the links) print. Fields a driver does not know answer per field.
COUNTER_FIELDS = (("speed_mbps", "NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON"),
                  ("replay_errors", "NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL"),
                  ("recovery_errors", "NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL"),
                  ("crc_flit_errors", "NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL"),
                  ("crc_data_errors", "NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL"))
_VALUE_MEMBERS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal"}  # nvmlValueType_t


def _counters(nv: Any, h: Any, query: Callable[..., Fact]) -> Fact:
    known = [(name, getattr(nv, constant)) for name, constant in COUNTER_FIELDS if hasattr(nv, constant)]
    if not known or not hasattr(nv, "nvmlDeviceGetFieldValues"):
        return missing(NOT_SUPPORTED, "this nvidia-ml-py has no NVLink field values", SOURCE)

    def convert(values: Any) -> Dict[str, Any]:
        out: Dict[str, Any] = {}
        for (name, _), value in zip(known, values):
            if getattr(value, "nvmlReturn", 1) != 0:
                continue  # NotSupported for this field on this GPU/driver
            member = _VALUE_MEMBERS.get(int(getattr(value, "valueType", 3)), "ullVal")
            out[name] = getattr(value.value, member)
        return out

    fact = query(nv.nvmlDeviceGetFieldValues, h, [field for _, field in known], convert=convert)
    if (fact.ok and not fact.value) or fact.status == NOT_SUPPORTED:
        return _per_link(nv, h, query)
    return fact


# nvmlNvLinkErrorCounter_t: NVML_NVLINK_ERROR_DL_REPLAY, _DL_RECOVERY, _DL_CRC_FLIT: the three `nvidia-smi nvlink -e`
# prints per link (Replay, Recovery, CRC). _DL_CRC_DATA and _DL_ECC_DATA count on the healthy 2xH200 (2-24 a link)
# while nvidia-smi shows no CRC error there: not read.
ERROR_COUNTERS = (("replay_errors", 0), ("recovery_errors", 1), ("crc_flit_errors", 2))


def _per_link(nv: Any, h: Any, query: Callable[..., Fact]) -> Fact:
    """The error counters summed over the active links, asked link by link (nvmlDeviceGetNvLinkErrorCounter):
    what ``nvidia-smi nvlink -e`` prints where the device-wide total fields answer NotSupported (the
    2xH200 with NVSwitches, driver 580: every *_COUNT_TOTAL field NotSupported, `nvlink -e` still reads)."""
    ask = getattr(nv, "nvmlDeviceGetNvLinkErrorCounter", None)
    if ask is None:
        return missing(NOT_SUPPORTED, "NVML answered none of the NVLink total fields, and this nvidia-ml-py has no per-link counters", SOURCE)
    totals: Dict[str, int] = {}
    links = 0
    for link in range(getattr(nv, "NVML_NVLINK_MAX_LINKS", 18)):
        state = query(nv.nvmlDeviceGetNvLinkState, h, link)
        if not state.ok:
            break
        if not state.value:
            continue
        links += 1
        for name, counter in ERROR_COUNTERS:
            value = query(ask, h, link, counter, convert=int)
            if value.ok:
                totals[name] = totals.get(name, 0) + value.value
    if not totals:
        return missing(NOT_SUPPORTED, "NVML answered neither the NVLink total fields nor the per-link error counters", SOURCE)
    return ok(dict(totals, links_read=links), SOURCE, "summed over the active links (per-link error counters)")


def _links(nv: Any, h: Any, query: Callable[..., Fact]) -> Fact:
    links: List[Dict[str, Any]] = []
    for link in range(getattr(nv, "NVML_NVLINK_MAX_LINKS", 18)):
        state = query(nv.nvmlDeviceGetNvLinkState, h, link)
        if not state.ok:
            if not links:  # the first link already fails: no NVLink here (the 1-GPU H200: NotSupported)
                return state if state.status == NOT_SUPPORTED else missing(NOT_SUPPORTED, state.detail, SOURCE, value=state.value)
            break  # past the GPU's last link
        remote: Optional[str] = None
        if state.value:
            pci = query(nv.nvmlDeviceGetNvLinkRemotePciInfo, h, link, convert=lambda p: _bus(p.busId))
            remote = pci.value if pci.ok else None
        links.append({"link": link, "active": bool(state.value), "remote": remote})
    return ok(links, SOURCE)


def _bus(raw: Any) -> str:
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    return normal_bus_id(text)


def normal_bus_id(text: str) -> str:
    """"00000000:00:07.0" and "0000:00:07.0" name one device: keep the last 12 characters, lower case."""
    return text.strip().lower()[-12:]


def pair_fact(nv: Any, handles: Dict[int, Any], buses: Dict[int, Optional[str]], links: Dict[int, Fact],
              query: Callable[..., Fact]) -> Fact:
    """Every pair of GPUs: topology level, NVLink count, P2P status per capability."""
    indices = sorted(handles)
    gpu_buses = {normal_bus_id(bus) for bus in buses.values() if bus}
    pairs: Dict[str, Dict[str, Any]] = {}
    for position, a in enumerate(indices):
        for b in indices[position + 1:]:
            pairs[f"{a}-{b}"] = _pair(nv, handles[a], handles[b], buses.get(b), links.get(a), query)
            _through_switch(pairs[f"{a}-{b}"], links.get(a), links.get(b), gpu_buses)
    detail = "" if len(indices) > 1 else f"{len(indices)} GPU: no pair"
    return ok(pairs, SOURCE, detail)


def _pair(nv: Any, ha: Any, hb: Any, bus_b: Optional[str], links_a: Optional[Fact], query: Callable[..., Fact]) -> Dict[str, Any]:
    level = query(nv.nvmlDeviceGetTopologyCommonAncestor, ha, hb, convert=lambda v: TOPOLOGY_LEVELS.get(int(v), str(v)))
    p2p: Dict[str, str] = {}
    for name, index in P2P_CAPS:
        status = query(nv.nvmlDeviceGetP2PStatus, ha, hb, index, convert=lambda v: P2P_STATUS.get(int(v), str(v)))
        p2p[name] = status.value if status.ok else f"ERR {status.detail}"
    nvlinks: Optional[int] = None
    if links_a is not None and links_a.ok and bus_b:
        nvlinks = sum(1 for link in links_a.value if link["active"] and link["remote"] == normal_bus_id(bus_b))
    connection = f"NV{nvlinks}" if nvlinks else (level.value if level.ok else None)
    return {"level": level.value if level.ok else f"ERR {level.detail}", "nvlinks": nvlinks, "connection": connection, "p2p": p2p}


def _switch_links(links: Optional[Fact], gpu_buses: set) -> int:
    """Active links whose far end is no GPU of this machine: an NVSwitch (on the lent 2xH200 VM NVML
    names it ffff:ff:ff.0), or a GPU hidden from this machine."""
    if links is None or not links.ok:
        return 0
    return sum(1 for link in links.value if link["active"] and link["remote"] and link["remote"] not in gpu_buses)


def _through_switch(entry: Dict[str, Any], links_a: Optional[Fact], links_b: Optional[Fact], gpu_buses: set) -> None:
    """GPUs joined through NVSwitches have no link to each other: NVML's P2P says NVLink works, and
    ``nvidia-smi topo -m`` prints NV# with # the links each GPU has into the fabric (NV18 on the
    real 2xH200 whose 18 links all end at ffff:ff:ff.0, while the common ancestor is PHB)."""
    if entry.get("nvlinks") or entry["p2p"].get("nvlink") != "OK":
        return
    count = min(_switch_links(links_a, gpu_buses), _switch_links(links_b, gpu_buses))
    if count:
        entry.update(nvlinks=count, connection=f"NV{count}", nvswitch=True)
