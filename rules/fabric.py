"""GD31x: between the GPUs — P2P, NVLink, the NVSwitch fabric, Xid history, NCCL's settings.

Area "gpu" (GPUs & host): these rules judge the facts of probes.nvml_links (gpu.pairs,
gpu.N.nvlink_links), probes.fabric (gpu.N.fabric, fabric.manager), probes.node (node.xid,
net.interfaces, rdma.devices) and NCCL's variables in the ``env`` fact. A machine with one
GPU sees them not applicable; a fact the machine hides makes them unknown, never an error.
"""

from __future__ import annotations

import shlex
from itertools import combinations
from typing import Any, Dict, List, Optional, Sequence, Tuple

from gpudoctor.knowledge import xid as xid_catalog
from gpudoctor.rule import ERROR, WARNING, Fail, Fix, NotApplicable, Unknown, rule
from gpudoctor.visible import visible_gpus

P2P_WORDS = {"OK": "supported", "CNS": "chipset not supported", "GNS": "GPU not supported",
             "TNS": "topology not supported", "DISABLED": "disabled by a driver registry key",
             "NS": "not supported", "U": "unknown"}


def _env(snap) -> Dict[str, str]:
    value = snap.value("env", {}) or {}
    return value if isinstance(value, dict) else {}


def _label(snap, index: int) -> str:
    return f"GPU {index} ({snap.value(f'gpu.{index}.name', '?')})"


def _not_read(snap, path: str):
    """A fact this rule needs is not ok: absent (an older snapshot, no NVML, no kernel log in a
    sandbox) is not applicable with its reason; refused or failed (no_permission, error,
    timeout) is unknown: the machine hides the answer."""
    fact = snap.get(path)
    if fact.status == "absent":
        return NotApplicable(f"{path} was not read here: {fact.detail or 'not collected'}")
    return Unknown(f"needs {path}: {fact.describe()}")


def _planned_group(snap) -> Tuple[List[int], str]:
    """The GPUs that will talk to each other: a vLLM launch's first TP × PP visible GPUs, else all visible."""
    visible = visible_gpus(snap) if snap.get("gpu.count").ok else []
    args = snap.value("launch.args")
    if snap.value("launch.kind") in ("vllm-serve", "vllm-api-server") and isinstance(args, dict):
        def size(flag: str) -> int:
            value = args.get(flag)
            return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 1

        world = size("--tensor-parallel-size") * size("--pipeline-parallel-size")
        if world <= len(visible):
            return visible[:world], f"the {world} GPU(s) of this launch's tensor/pipeline-parallel group"
    return visible, f"the {len(visible)} visible GPU(s)"


def _pair(snap, a: int, b: int) -> Optional[Dict[str, Any]]:
    pairs = snap.value("gpu.pairs") or {}
    entry = pairs.get(f"{min(a, b)}-{max(a, b)}") if isinstance(pairs, dict) else None
    return entry if isinstance(entry, dict) else None


def _p2p_ok(entry: Dict[str, Any]) -> Optional[bool]:
    """True: read and write P2P work; False: NVML says no; None: NVML did not say."""
    p2p = entry.get("p2p") or {}
    states = [str(p2p.get(cap, "")) for cap in ("read", "write")]
    if any(s.startswith("ERR") or not s for s in states):
        return None
    return all(s == "OK" for s in states)


def _best_set(snap, candidates: Sequence[int], size: int) -> Optional[List[int]]:
    """The first ``size`` GPUs of ``candidates`` whose every pair has P2P (small machines: ≤ 8 GPUs)."""
    if len(candidates) > 8:
        return None
    for group in combinations(candidates, size):
        if all(_p2p_ok(_pair(snap, a, b) or {}) for a, b in combinations(group, 2)):
            return list(group)
    return None


@rule("GD310", "p2p-unavailable", severity=WARNING, area="gpu", requires=("gpu.count",))
def p2p_unavailable(snap):
    """GPUs that will exchange tensors cannot reach each other peer-to-peer.

    ## Why
    Tensor parallelism moves activations between GPUs at every layer. Where NVML says P2P
    read/write is not supported between two GPUs (`nvidia-smi topo -p2p rw` shows CNS, GNS,
    TNS or NS: GPUs under different CPU sockets on some platforms, a PCIe switch or VM that
    does not allow it), NCCL falls back to copies through host shared memory and vLLM turns
    its custom all-reduce off: serving works but every step is slower. With `preflight`, the
    GPUs judged are the launch's tensor/pipeline-parallel group.

    ## Fix
    Serve on GPUs that have P2P between them (the `CUDA_VISIBLE_DEVICES` shown), or check the
    platform: `nvidia-smi topo -m`, `nvidia-smi topo -p2p rw`, and PCIe ACS / IOMMU settings.

    ## References
    - NVML nvmlDeviceGetP2PStatus / nvmlGpuP2PStatus_t:
      https://docs.nvidia.com/deploy/nvml-api/group__nvmlDeviceQueries.html
    - NCCL troubleshooting (PCI ACS, IOMMU):
      https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html
    - vLLM's log where P2P is missing: "Custom allreduce is disabled because your platform
      lacks GPU P2P capability or P2P test failed" (https://github.com/vllm-project/vllm/issues/4770,
      https://github.com/vllm-project/vllm/issues/4996).
    """
    group, what = _planned_group(snap)
    if len(group) < 2:
        return NotApplicable(f"{len(group)} GPU(s) in {what}: nothing to reach")
    if not snap.get("gpu.pairs").ok:
        return _not_read(snap, "gpu.pairs")
    broken, unread = [], []
    for a, b in combinations(group, 2):
        entry = _pair(snap, a, b)
        verdict = _p2p_ok(entry) if entry else None
        if verdict is None:
            unread.append(f"{a}-{b}")
        elif not verdict:
            p2p = entry["p2p"]  # type: ignore[index]
            broken.append((a, b, P2P_WORDS.get(p2p.get("read"), p2p.get("read")), entry.get("connection")))
    if not broken:
        return Unknown(f"NVML did not answer P2P for GPU pair(s) {', '.join(unread)}") if unread else None
    better = _best_set(snap, visible_gpus(snap), len(group))
    commands = [f"export CUDA_VISIBLE_DEVICES={','.join(map(str, better))}"] if better else []
    pairs = "; ".join(f"GPU {a} and GPU {b}: {why} (link {conn or '?'})" for a, b, why, conn in broken)
    return Fail(
        f"no P2P inside {what}: {pairs}; NCCL copies through host memory and vLLM's custom all-reduce is off",
        ["gpu.pairs"],
        Fix("Use GPUs with P2P between them, or fix the platform (ACS/IOMMU).",
            commands + ["nvidia-smi topo -m", "nvidia-smi topo -p2p rw"]),
    )


@rule("GD311", "nvlink-degraded", severity=WARNING, area="gpu", requires=("gpu.count",))
def nvlink_degraded(snap):
    """An NVLink GPU has links down.

    ## Why
    On NVLink machines NCCL routes tensor-parallel traffic over NVLink; a link that is down
    lowers the bandwidth between the GPUs, and all links down sends the traffic over PCIe.
    Links go down after Xid 74 (NVLink error), with a failing NVSwitch or fabric manager, or
    with hardware faults; a GPU reset or reboot retrains them.

    ## Fix
    Check `nvidia-smi nvlink -s` (each link's speed) and the kernel log for Xid 74; reset the
    GPU (`sudo nvidia-smi -r -i N`) or reboot; on NVSwitch systems check the fabric manager.

    ## References
    - NVML nvmlDeviceGetNvLinkState: https://docs.nvidia.com/deploy/nvml-api/group__NvLink.html
    - Xid 74: https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html
    """
    visible = visible_gpus(snap)
    if len(visible) < 2:
        return NotApplicable(f"{len(visible)} visible GPU: NVLink joins GPUs")
    fails, read = [], 0
    for index in visible:
        fact = snap.get(f"gpu.{index}.nvlink_links")
        if not fact.ok or not isinstance(fact.value, list):
            continue
        read += 1
        links = fact.value
        down = [str(link.get("link")) for link in links if not link.get("active")]
        if not down:
            continue
        up = len(links) - len(down)
        fails.append(Fail(
            f"{_label(snap, index)}: {up} of {len(links)} NVLink links up (down: {', '.join(down)})",
            [f"gpu.{index}.nvlink_links"] + ([f"gpu.{index}.nvlink_counters"] if snap.get(f"gpu.{index}.nvlink_counters").ok else []),
            Fix("Check the links and retrain them with a GPU reset.", ["nvidia-smi nvlink -s -i %d" % index,
                                                                        "sudo dmesg | grep -i 'xid'", f"sudo nvidia-smi -r -i {index}"],
                "disruptive"),
            subject=f"GPU {index}",
        ))
    if not read:
        return NotApplicable("no NVLink on these GPUs (NVML: not supported)")
    return fails or None


def _gpu_of(snap, pci: str) -> Optional[int]:
    """Xid lines name "0000:10:00" (no function) or "0000:10:00.0"; NVML "00000000:10:00.0"."""
    want = pci.lower().split(".")[0][-7:]  # "10:00" with the domain tail: bus:device
    for index in snap.gpu_indices():
        bus = str(snap.value(f"gpu.{index}.pci_bus_id") or "").lower()
        if bus and bus.split(".")[0][-7:] == want:
            return index
    return None


@rule("GD312", "xid-events", severity=WARNING, area="gpu")
def xid_events(snap):
    """The NVIDIA driver logged Xid errors since boot.

    ## Why
    An Xid is the driver's report of a GPU fault in the kernel log. Crashes that look like
    application bugs (illegal memory access, a hung all-reduce, a lost GPU) often have one
    next to them: Xid 79 (the GPU fell off the bus), 48/94/95 (ECC), 74 (NVLink), 119/120
    (GSP). Each code has a recommended action in NVIDIA's Xid catalog; the finding shows it.

    ## Fix
    Follow the action shown for each code; for codes that need a reset, stop the GPU's
    processes and `sudo nvidia-smi -r -i N` (or reboot), then check the GPU again.

    ## References
    - NVIDIA Xid catalog: https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html
    - https://docs.nvidia.com/deploy/xid-errors/index.html
    """
    if not snap.get("node.xid").ok:
        return _not_read(snap, "node.xid")
    events = snap.value("node.xid") or []
    if not events:
        return None
    grouped: Dict[Tuple[Optional[int], int], List[Dict[str, Any]]] = {}
    for event in events:
        if isinstance(event, dict) and isinstance(event.get("code"), int):
            grouped.setdefault((_gpu_of(snap, str(event.get("pci") or "")), event["code"]), []).append(event)
    fails = []
    for (index, code), seen in sorted(grouped.items(), key=lambda item: (item[0][0] is None, item[0][0] or 0, item[0][1])):
        meaning, action = xid_catalog.describe(code)
        last = seen[-1]
        where = _label(snap, index) if index is not None else f"the GPU at {last.get('pci')}"
        when = f", last at {last['seconds']:g} s after boot" if isinstance(last.get("seconds"), (int, float)) else ""
        todo = xid_catalog.ACTION_TEXT.get(action, f"see {xid_catalog.CATALOG_URL}")
        commands = [f"sudo nvidia-smi -r -i {index}"] if action == xid_catalog.RESET_GPU and index is not None else []
        fails.append(Fail(
            f"Xid {code} on {where} ({len(seen)}x{when}): {meaning}. Action: {todo}",
            [("node.xid", f"{last.get('pci')}: {code}, {last.get('text')}")],
            Fix(todo[:1].upper() + todo[1:] + ".", commands + ["sudo dmesg -T | grep -i 'NVRM: Xid'"],
                "disruptive" if commands else "safe"),
            subject=f"GPU {index}" if index is not None else str(last.get("pci")),
        ))
    return fails or None


def _deep_nccl(snap) -> List[Tuple[str, str]]:
    """What --deep's all-reduce showed, as evidence for the rule that names its cause (GD313, GD315)."""
    value = snap.value("nccl.allreduce_check")
    if not snap.get("nccl.allreduce_check").ok or not isinstance(value, dict):
        return []
    if value.get("outcome") == "error":
        said = value.get("nccl_warning") or " ".join(str(value.get("error") or "").split())[:300]
        return [("--deep: the all-reduce failed, NCCL said", said)]
    if value.get("outcome") == "ok":
        return [("--deep: the all-reduce went", f"via {', '.join(value.get('transports') or ['?'])}: "
                                                 f"{value.get('busbw_gbps')} GB/s bus bandwidth")]
    return []


def _socket_ifname_matches(spec: str, names: Sequence[str]) -> List[str]:
    """The interfaces NCCL_SOCKET_IFNAME selects: prefixes, "=" exact names, "^" to exclude."""
    exclude = spec.startswith("^")
    words = [w.strip() for w in spec.lstrip("^").split(",") if w.strip()]

    def hit(name: str) -> bool:
        return any(name == w[1:] if w.startswith("=") else name.startswith(w) for w in words)

    return [n for n in names if hit(n) != exclude]


@rule("GD313", "nccl-socket-ifname-missing", severity=ERROR, area="gpu")
def nccl_socket_ifname_missing(snap):
    """NCCL_SOCKET_IFNAME selects no network interface of this machine.

    ## Why
    NCCL bootstraps every communicator over a TCP socket on the interfaces that
    NCCL_SOCKET_IFNAME selects (a list of name prefixes; `=name` an exact name; a leading `^`
    excludes). When it selects none, NCCL fails at init ("Bootstrap : no socket interface
    found", or an internal error on some versions) and the tensor-parallel server does not start. It is often copied from another machine
    (`eth0` where this one has `ens5`, `ib0` where there is no InfiniBand).

    ## Fix
    Name an interface that exists here (`ls /sys/class/net`), or unset the variable.

    ## References
    - NCCL environment variables, NCCL_SOCKET_IFNAME:
      https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html#nccl-socket-ifname
    - https://github.com/NVIDIA/nccl/issues/1837 (a name that matches no interface: NCCL fails at
      init), https://github.com/marin-community/marin/issues/6940 ("Bootstrap : no socket
      interface found").

    ## Severity
    An error with two or more GPUs (NCCL starts, and fails); a warning with one GPU, where a
    single-rank server may never start NCCL.
    """
    spec = _env(snap).get("NCCL_SOCKET_IFNAME")
    if spec is None:
        return NotApplicable("NCCL_SOCKET_IFNAME is not set")
    if not snap.get("net.interfaces").ok:
        return _not_read(snap, "net.interfaces")
    names = sorted((snap.value("net.interfaces") or {}).keys())
    selected = _socket_ifname_matches(spec, names)
    if selected:
        return None
    gpus = len(visible_gpus(snap)) if snap.get("gpu.count").ok else 0
    usable = [n for n in names if n != "lo"] or names
    return Fail(
        f"NCCL_SOCKET_IFNAME={spec!r} selects none of this machine's interfaces ({', '.join(names) or 'none'}): "
        "NCCL will fail at init (\"no socket interface found\")",
        [("env.NCCL_SOCKET_IFNAME", spec), "net.interfaces", *_deep_nccl(snap)],
        Fix("Name an existing interface, or unset the variable.",
            ([f"export NCCL_SOCKET_IFNAME={shlex.quote(usable[0])}"] if usable else []) + ["unset NCCL_SOCKET_IFNAME", "ls /sys/class/net"]),
        severity=ERROR if gpus >= 2 else WARNING,  # one GPU: a single-rank server may never start NCCL
    )


def _active_rdma(devices: Any) -> List[str]:
    if not isinstance(devices, dict):
        return []
    return [f"{device}/{port} ({(info or {}).get('link_layer') or '?'})" for device, ports in sorted(devices.items())
            if isinstance(ports, dict) for port, info in sorted(ports.items())
            if "ACTIVE" in str((info or {}).get("state") or "").upper()]


@rule("GD314", "nccl-ib-disabled-with-active-ib", severity=WARNING, area="gpu")
def nccl_ib_disabled_with_active_ib(snap):
    """NCCL_IB_DISABLE=1 while this machine has active InfiniBand/RoCE ports.

    ## Why
    With NCCL_IB_DISABLE=1 NCCL never uses the RDMA network and sends inter-node traffic over
    TCP sockets: multi-node tensor or pipeline parallelism then runs at a fraction of the
    fabric's bandwidth. Often left over from a machine without InfiniBand.

    ## Fix
    Unset NCCL_IB_DISABLE (or set it to 0) on machines whose RDMA ports are active.

    ## References
    - NCCL environment variables, NCCL_IB_DISABLE:
      https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html#nccl-ib-disable
    """
    value = _env(snap).get("NCCL_IB_DISABLE")
    if value is None or value.strip() in ("", "0"):
        return NotApplicable("NCCL_IB_DISABLE is not set to 1")
    if not snap.get("rdma.devices").ok:
        return _not_read(snap, "rdma.devices")
    devices = snap.value("rdma.devices")
    if not devices:
        return NotApplicable("no RDMA device on this machine")
    active = _active_rdma(devices)
    if not active:
        return None  # RDMA present but no port up: disabling it changes nothing
    return Fail(
        f"NCCL_IB_DISABLE={value} while RDMA ports are active ({', '.join(active)}): inter-node NCCL traffic goes over TCP",
        [("env.NCCL_IB_DISABLE", value), "rdma.devices"],
        Fix("Let NCCL use the RDMA ports.", ["unset NCCL_IB_DISABLE"]),
    )


@rule("GD315", "nccl-p2p-disabled-on-nvlink", severity=WARNING, area="gpu")
def nccl_p2p_disabled_on_nvlink(snap):
    """NCCL_P2P_DISABLE=1 on GPUs joined by NVLink.

    ## Why
    NCCL_P2P_DISABLE=1 stops NCCL from using NVLink and PCIe peer-to-peer between GPUs: the
    traffic goes through host shared memory instead, several times slower than NVLink. It is a
    workaround for broken P2P on PCIe machines and is often left set where NVLink works.

    ## Fix
    Unset NCCL_P2P_DISABLE on NVLink machines (`nvidia-smi topo -m` shows NV#).

    ## References
    - NCCL environment variables, NCCL_P2P_DISABLE:
      https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html#nccl-p2p-disable
    """
    value = _env(snap).get("NCCL_P2P_DISABLE")
    if value is None or value.strip() in ("", "0"):
        return NotApplicable("NCCL_P2P_DISABLE is not set to 1")
    visible = visible_gpus(snap)
    if len(visible) < 2:
        return NotApplicable(f"{len(visible)} visible GPU: no GPU-to-GPU traffic")
    if not snap.get("gpu.pairs").ok:
        return _not_read(snap, "gpu.pairs")
    linked = [f"GPU {a}-{b} ({entry.get('connection')})" for a, b in combinations(visible, 2)
              for entry in [_pair(snap, a, b) or {}] if entry.get("nvlinks")]
    if not linked:
        return None
    return Fail(
        f"NCCL_P2P_DISABLE={value} on GPUs joined by NVLink ({', '.join(linked)}): NCCL copies through host memory instead",
        [("env.NCCL_P2P_DISABLE", value), "gpu.pairs", *_deep_nccl(snap)],
        Fix("Let NCCL use NVLink.", ["unset NCCL_P2P_DISABLE", "nvidia-smi topo -m"]),
    )


@rule("GD316", "fabric-not-ready", severity=ERROR, area="gpu", requires=("gpu.count",))
def fabric_not_ready(snap):
    """The NVSwitch fabric has not registered the GPUs: CUDA will fail with error 802.

    ## Why
    On HGX/NVSwitch machines the fabric manager must register every GPU with the NVLink
    fabric before CUDA can use it. Until then (state not started / in progress, or a
    registration that failed) every CUDA program fails at its first call with error 802
    "system not yet initialized" (cudaErrorSystemNotReady), which torch reports as "CUDA
    unknown error" or "No CUDA GPUs are available".

    ## Fix
    Start (and enable) the fabric manager whose version matches the driver, then wait for
    registration: `sudo systemctl enable --now nvidia-fabricmanager`,
    `nvidia-smi -q | grep -A3 Fabric` (State: Completed, Status: Success).

    ## References
    - Fabric Manager user guide: https://docs.nvidia.com/datacenter/tesla/fabric-manager-user-guide/index.html
    - NVML nvmlDeviceGetGpuFabricInfo / nvmlGpuFabricState_t: https://docs.nvidia.com/deploy/nvml-api/
    - https://github.com/pytorch/pytorch/issues/35710, https://github.com/huggingface/huggingface_hub/issues/4128,
      https://github.com/aws-samples/aws-deep-learning-ami-ubuntu-dcv-desktop/issues/33 (error 802
      on A100/H100/H200 machines without a running fabric manager).
    """
    reason = snap.get("fabric.reason")
    states = {i: snap.get(f"gpu.{i}.fabric") for i in visible_gpus(snap)}
    read = {i: f.value for i, f in states.items() if f.ok and isinstance(f.value, dict)}
    if not read:
        if reason.status == "not_supported":
            return NotApplicable(reason.detail)
        if any(f.status == "not_supported" for f in states.values()):
            return NotApplicable("NVML: no fabric on these GPUs (fabric info not supported)")
        if reason.status == "absent":
            return NotApplicable(f"the fabric state was not read here: {reason.detail or 'not collected'}")
        return Unknown(reason.describe())
    bad = {i: info for i, info in read.items()
           if info.get("state") in ("not_started", "in_progress") or (info.get("state") == "completed" and info.get("status") not in (0, None))}
    if not bad:
        return None
    manager = snap.value("fabric.manager") or {}
    why = ("the fabric manager is not running" if manager.get("installed") else "the fabric manager is not installed") \
        if isinstance(manager, dict) and manager and not manager.get("running") else "registration is not complete"
    described = "; ".join(f"GPU {i}: {info.get('state')}" + (f" ({info.get('status_name')})" if info.get("status") else "")
                          for i, info in sorted(bad.items()))
    return Fail(
        f"the NVSwitch fabric has not registered {len(bad)} GPU(s) ({described}); {why}: "
        "CUDA calls will fail with error 802 \"system not yet initialized\"",
        [f"gpu.{i}.fabric" for i in sorted(bad)] + ["fabric.manager"],
        Fix("Start the fabric manager (same version as the driver) and wait for registration.",
            ["sudo systemctl enable --now nvidia-fabricmanager", "systemctl status nvidia-fabricmanager",
             "nvidia-smi -q | grep -A3 Fabric"], "needs_root"),
    )


def _crosses_sockets(entry: Dict[str, Any]) -> bool:
    return entry.get("level") == "SYS" and not entry.get("nvlinks")


@rule("GD317", "tp-group-crosses-sockets", severity=WARNING, area="gpu")
def tp_group_crosses_sockets(snap):
    """The launch's tensor-parallel group spans CPU sockets while closer GPUs are free.

    ## Why
    Between GPUs under different CPU sockets (`nvidia-smi topo -m` shows SYS) and without
    NVLink, every all-reduce crosses the sockets' interconnect (QPI/UPI, xGMI), the slowest
    path of the machine, and P2P is often unavailable there. When the machine has enough GPUs
    under one socket, the same command runs faster on those.

    ## Fix
    Run the command on the GPUs shown (`CUDA_VISIBLE_DEVICES` in front of it, with
    `CUDA_DEVICE_ORDER=PCI_BUS_ID` so the indices are nvidia-smi's).

    ## References
    - `nvidia-smi topo -m` legend (SYS: "traversing PCIe as well as the SMP interconnect between NUMA nodes").
    - NVML nvmlDeviceGetTopologyCommonAncestor (NVML_TOPOLOGY_SYSTEM):
      https://docs.nvidia.com/deploy/nvml-api/group__nvmlDeviceQueries.html
    """
    if snap.value("launch.kind") not in ("vllm-serve", "vllm-api-server"):
        return NotApplicable("no vLLM launch command (preflight -- vllm serve …)")
    group, what = _planned_group(snap)
    if len(group) < 2 or "group" not in what:
        return NotApplicable(f"{len(group)} GPU(s) per engine")
    if not snap.get("gpu.pairs").ok:
        return _not_read(snap, "gpu.pairs")
    crossing = [(a, b) for a, b in combinations(group, 2) if _crosses_sockets(_pair(snap, a, b) or {})]
    if not crossing:
        return None
    visible = visible_gpus(snap)
    better = None
    if len(visible) <= 8:
        for candidate in combinations(visible, len(group)):
            if not any(_crosses_sockets(_pair(snap, a, b) or {}) for a, b in combinations(candidate, 2)):
                better = list(candidate)
                break
    if better is None:
        return None  # no closer set exists: nothing better to run on
    pairs = ", ".join(f"GPU {a}-{b}" for a, b in crossing)
    return Fail(
        f"{what} crosses CPU sockets ({pairs}: SYS, no NVLink); GPU {','.join(map(str, better))} are under one socket",
        ["gpu.pairs"],
        Fix("Run the engine on GPUs under one socket.",
            [f"CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES={','.join(map(str, better))} vllm serve …", "nvidia-smi topo -m"]),
    )
