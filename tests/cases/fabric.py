"""GD310–GD316 (rules/fabric.py): between the GPUs. Cases start from the recorded machines:

- the 2×H200 (snapshots/h200x2.json) with the facts the NVML adapter reads when it replays that
  machine's NVML tape (fake_nvml.h200x2: nvml-multi.json and capture2.log's topo -m, NV18);
- the 1-GPU H200 (snapshots/h200.json) with its own tape (no NVLink, no pair);
- the real /dev/kmsg of the H200 (ground_truth/h200/fabric/kmsg.txt, no Xid) read by the real
  node probe, with Xid lines from public reports appended for the failing cases;
- the fabric child's answer parsed by the real probes.fabric.parse.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Callable, Dict

import fake_nvml
from cases import Case, build, env, merge, put
from gpudoctor import runner
from gpudoctor.probes import Context
from gpudoctor.probes import fabric as fabric_probe
from gpudoctor.probes import node, nvml
from gpudoctor.snapshot import ok

GROUND = Path(__file__).resolve().parent.parent / "fixtures" / "ground_truth"
KMSG = (GROUND / "h200" / "fabric" / "kmsg.txt").read_text(encoding="utf-8").splitlines()[1:]  # the command line aside
TOPOLOGY = ("numa_node", "cpu_affinity", "nvlink_links")

# Real Xid lines from public reports (kernel-log text after the "kernel: " prefix).
XID_79 = "NVRM: Xid (PCI:0000:00:07): 79, pid=0, GPU has fallen off the bus."  # gist ZackMattor/34b6e600… (bus changed to GPU 1's)
XID_63 = "NVRM: Xid (PCI:0000:00:06): 63, pid=1896, Row Remapper: New row marked for remapping, reset gpu to activate."  # stas00/ml-engineering debug.md
XID_UNKNOWN_GPU = "NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off the bus."  # NVIDIA/open-gpu-kernel-modules#1151


def replayed(tape: Dict[str, Any]) -> Dict[str, Any]:
    """The facts probes.nvml reads from a recorded tape: the pair and link ones only (UUIDs differ by session)."""
    saved = sys.modules.get("pynvml")
    sys.modules["pynvml"] = fake_nvml.module(tape)
    try:
        facts = nvml.collect()
    finally:
        if saved is None:
            sys.modules.pop("pynvml", None)
        else:
            sys.modules["pynvml"] = saved
    return {p: f for p, f in facts.items() if p == "gpu.pairs" or p.split(".")[-1] in TOPOLOGY}


def machine(snapshot: str, tape_of: Callable[[], Dict[str, Any]], *edits, tape_edit=None, kmsg=None, fabric=None, grown=()):
    def make(tmp: Path) -> Dict[str, Any]:
        tape = tape_of()
        if tape_edit:
            tape_edit(tape)
        data = build(snapshot, *grown)  # GPUs added to the recording before the tape's facts are laid over it
        merge(replayed(tape))(data)
        root = tmp / "root"
        (root / "dev").mkdir(parents=True, exist_ok=True)
        (root / "dev" / "kmsg").write_text("\n".join(KMSG + [f"3,{9000 + i},{61_000_000 + i},-;{line}" for i, line in enumerate(kmsg or [])]) + "\n",
                                           encoding="utf-8")
        merge(node.collect(Context(root=str(root), environ={})))(data)
        if fabric is not None:
            merge(fabric)(data)
        for edit in edits:
            edit(data)
        return data

    return make


def x2(*edits, **kw):
    return machine("h200x2.json", fake_nvml.h200x2, *edits, **kw)


def x4(*edits, **kw):
    """The 2xH200 recording with GPUs 2 and 3 added under a second socket (four_gpus_two_sockets)."""
    from cases import add_gpu_copy

    grown = (add_gpu_copy(0, 2, "GPU-51cb1330-e3cd-8754-4de9-000000000002", "00000000:80:06.0"),
             add_gpu_copy(1, 3, "GPU-486fb5a3-f83f-ba19-e43c-000000000003", "00000000:80:07.0"))
    return machine("h200x2.json", fake_nvml.h200x2, *edits, tape_edit=four_gpus_two_sockets, grown=grown, **kw)


def h200(*edits, **kw):
    return machine("h200.json", fake_nvml.h200, *edits, **kw)


def no_p2p(tape: Dict[str, Any]) -> None:
    """The 2 GPUs without NVLink and with P2P refused: NVML's TNS (topology not supported)."""
    tape["p2p_status"]["0-1"] = {0: 3, 1: 3, 2: 5, 3: 3}
    for gpu in tape["gpus"]:
        gpu["nvlink_active"] = [0] * 18


def link_down(tape: Dict[str, Any]) -> None:
    tape["gpus"][1]["nvlink_active"][7] = 0


def four_gpus_two_sockets(tape: Dict[str, Any]) -> None:
    """The 2xH200 tape grown to 4 PCIe GPUs: 0,1 under one socket (PHB), 2,3 under the other (SYS to 0,1).
    The levels are NVML's topology enum as topo -m spells it; the GPUs are copies of the recorded ones."""
    import copy

    no_p2p(tape)
    for index, bus in ((2, "00000000:80:06.0"), (3, "00000000:80:07.0")):
        gpu = copy.deepcopy(tape["gpus"][index - 2])
        gpu["uuid"], gpu["pci"] = gpu["uuid"][:-4] + f"000{index}", bus
        gpu["nvlink_remote"] = [None] * 18
        tape["gpus"].append(gpu)
    tape["topology"] = {"0-1": 30, "2-3": 30, "0-2": 50, "0-3": 50, "1-2": 50, "1-3": 50}
    tape["p2p_status"] = {pair: {cap: 0 if level == 30 else 3 for cap in range(4)} for pair, level in tape["topology"].items()}


def fabric_answer(states: Dict[str, Dict[str, Any]], returncode: int = 0):
    return fabric_probe.parse(runner.Completed("ok", returncode, json.dumps(states)))


COMPLETED = {"state": "completed", "status": 0, "status_name": "Success", "clique": 0}  # public HGX H100 -q: "Completed / Success"
NOT_STARTED = {"state": "not_started", "status": 0, "status_name": "Success", "clique": 0}
NO_FM = {"fabric.manager": ok({"installed": False, "running": False}, "/proc")}
SEGFAULT = fabric_probe.parse(runner.Completed("error", -11, "", "", "killed by signal 11"))
LAUNCH_TP2 = (put("launch.kind", "vllm-serve"), put("launch.args", {"--tensor-parallel-size": 2}))

CASES = [
    # GD310 p2p-unavailable
    Case("nv18-pair", "GD310", x2(), "pass"),
    Case("one-gpu", "GD310", h200(), "not_applicable", message=("1 GPU(s)",)),
    Case("two-gpus-one-visible", "GD310", x2(env(CUDA_VISIBLE_DEVICES="1"), tape_edit=no_p2p), "not_applicable"),
    Case(
        "pcie-pair-without-p2p", "GD310", x2(tape_edit=no_p2p),
        "fail", "warning", ("GPU 0 and GPU 1: topology not supported (link PHB)", "the 2 visible GPU(s)", "custom all-reduce is off"),
        ("gpu.pairs",), commands=("nvidia-smi topo -p2p rw",),
    ),
    Case(
        "preflight-tp2-group", "GD310", x2(*LAUNCH_TP2, tape_edit=no_p2p),
        "fail", "warning", ("tensor/pipeline-parallel group",), ("gpu.pairs",),
    ),
    Case("p2p-not-answered", "GD310", x2(put("gpu.pairs", {"0-1": {"p2p": {"read": "ERR NVML Unknown", "write": "OK"}}})),
         "unknown", message=("did not answer P2P",)),
    Case("pairs-not-read", "GD310", x2(put("gpu.pairs", None, "error", "probe timed out")), "unknown"),
    # GD311 nvlink-degraded
    Case("all-18-links-up", "GD311", x2(), "pass"),
    Case("one-gpu-no-nvlink", "GD311", h200(), "not_applicable", message=("1 visible GPU",)),
    Case("pcie-only", "GD311", x2(put("gpu.0.nvlink_links", None, "not_supported", "NVML NotSupported"),
                                  put("gpu.1.nvlink_links", None, "not_supported", "NVML NotSupported")), "not_applicable"),
    Case(
        "link-7-down-on-gpu-1", "GD311", x2(tape_edit=link_down),
        "fail", "warning", ("GPU 1 (NVIDIA H200): 17 of 18 NVLink links up (down: 7)",), ("gpu.1.nvlink_links",), "GPU 1",
        commands=("nvidia-smi nvlink -s -i 1",),
    ),
    # GD312 xid-events
    Case("healthy-h200-kernel-log", "GD312", h200(), "pass"),
    Case(
        "fallen-off-the-bus", "GD312", x2(kmsg=[XID_79, XID_79]),
        "fail", "warning", ("Xid 79 on GPU 1 (NVIDIA H200) (2x", "fallen off the bus", "reboot the machine"), ("node.xid",), "GPU 1",
    ),
    Case(
        "row-remap-needs-reset", "GD312", h200(kmsg=[XID_63]),
        "fail", "warning", ("Xid 63 on GPU 0", "reset the GPU"), ("node.xid",), "GPU 0", commands=("sudo nvidia-smi -r -i 0",),
    ),
    Case("gpu-not-on-this-machine-view", "GD312", h200(kmsg=[XID_UNKNOWN_GPU]),
         "fail", "warning", ("the GPU at 0000:2b:00",), ("node.xid",), "0000:2b:00"),
    Case("kernel-log-restricted", "GD312",
         h200(put("node.xid", None, "no_permission", "/dev/kmsg: permission denied (kernel.dmesg_restrict=1)")),
         "unknown", message=("dmesg_restrict=1",)),
    # GD313 nccl-socket-ifname-missing (the recorded machine's interfaces replaced by this host's real ones in its run)
    Case("not-set", "GD313", x2(put("net.interfaces", {"eth0": "up", "lo": "unknown"})), "not_applicable"),
    Case("names-eth", "GD313", x2(put("net.interfaces", {"eth0": "up", "lo": "unknown"}), env(NCCL_SOCKET_IFNAME="eth")), "pass"),
    Case("exact-and-exclude", "GD313", x2(put("net.interfaces", {"eth0": "up", "lo": "unknown"}), env(NCCL_SOCKET_IFNAME="^docker,lo")), "pass"),
    Case(
        "ib0-on-a-machine-without-ib", "GD313", x2(put("net.interfaces", {"eth0": "up", "lo": "unknown"}), env(NCCL_SOCKET_IFNAME="ib0")),
        "fail", "error", ("NCCL_SOCKET_IFNAME='ib0' selects none", "eth0, lo"), ("env.NCCL_SOCKET_IFNAME", "net.interfaces"),
        commands=("export NCCL_SOCKET_IFNAME=eth0",),
    ),
    Case("exact-name-missing-one-gpu", "GD313", h200(put("net.interfaces", {"eth0": "up", "lo": "unknown"}), env(NCCL_SOCKET_IFNAME="=eth1")),
         "fail", "warning", ("'=eth1' selects none",)),
    Case("interfaces-unreadable", "GD313", x2(put("net.interfaces", None, "error", "/sys/class/net: Permission denied"),
                                              env(NCCL_SOCKET_IFNAME="eth0")), "unknown"),
    # GD314 nccl-ib-disabled-with-active-ib
    Case("no-rdma-recorded-h200", "GD314", h200(env(NCCL_IB_DISABLE="1")), "not_applicable", message=("no RDMA device",)),
    Case("ib-up-not-disabled", "GD314",
         x2(put("rdma.devices", {"mlx5_0": {"1": {"state": "4: ACTIVE", "link_layer": "InfiniBand", "rate": "400 Gb/sec (4X NDR)"}}})),
         "not_applicable", message=("not set to 1",)),
    Case("ib-down-and-disabled", "GD314",
         x2(put("rdma.devices", {"mlx5_0": {"1": {"state": "1: DOWN", "link_layer": "InfiniBand", "rate": None}}}), env(NCCL_IB_DISABLE="1")),
         "pass"),
    Case(
        "ib-active-and-disabled", "GD314",
        x2(put("rdma.devices", {"mlx5_0": {"1": {"state": "4: ACTIVE", "link_layer": "InfiniBand", "rate": "400 Gb/sec (4X NDR)"}}}),
           env(NCCL_IB_DISABLE="1")),
        "fail", "warning", ("NCCL_IB_DISABLE=1", "mlx5_0/1 (InfiniBand)"), ("env.NCCL_IB_DISABLE", "rdma.devices"),
        commands=("unset NCCL_IB_DISABLE",),
    ),
    Case("pass-when-ib-active-disable-0", "GD314",
         x2(put("rdma.devices", {"mlx5_0": {"1": {"state": "4: ACTIVE", "link_layer": "InfiniBand", "rate": None}}}), env(NCCL_IB_DISABLE="0")),
         "not_applicable"),
    # GD315 nccl-p2p-disabled-on-nvlink
    Case("p2p-disable-on-pcie-pair", "GD315", x2(env(NCCL_P2P_DISABLE="1"), tape_edit=no_p2p), "pass"),
    Case("not-set", "GD315", x2(), "not_applicable"),
    Case("one-gpu", "GD315", h200(env(NCCL_P2P_DISABLE="1")), "not_applicable", message=("1 visible GPU",)),
    Case(
        "p2p-disabled-on-nv18", "GD315", x2(env(NCCL_P2P_DISABLE="1")),
        "fail", "warning", ("NCCL_P2P_DISABLE=1 on GPUs joined by NVLink (GPU 0-1 (NV18))",), ("env.NCCL_P2P_DISABLE", "gpu.pairs"),
    ),
    # GD317 tp-group-crosses-sockets
    Case("no-launch", "GD317", x2(), "not_applicable", message=("no vLLM launch",)),
    Case("tp2-on-nv18", "GD317", x2(*LAUNCH_TP2), "pass"),
    Case("tp2-under-one-socket", "GD317", x4(*LAUNCH_TP2, env(CUDA_VISIBLE_DEVICES="2,3")), "pass"),
    Case(
        "tp2-across-sockets", "GD317", x4(*LAUNCH_TP2, env(CUDA_VISIBLE_DEVICES="1,2,3")),
        "fail", "warning", ("crosses CPU sockets (GPU 1-2: SYS, no NVLink)", "GPU 2,3 are under one socket"), ("gpu.pairs",),
        commands=("CUDA_VISIBLE_DEVICES=2,3",),
    ),
    Case("tp4-has-no-better-set", "GD317", x4(put("launch.kind", "vllm-serve"), put("launch.args", {"--tensor-parallel-size": 4})), "pass"),
    # GD316 fabric-not-ready
    Case("registered", "GD316", x2(fabric={**fabric_answer({"0": COMPLETED, "1": COMPLETED})}), "pass"),
    Case("one-gpu-no-child", "GD316", h200(fabric=fabric_probe.collect(Context(), {"gpu.count": ok(1, "nvml")})),
         "not_applicable", message=("1 GPU",)),
    Case(
        "not-started-without-fabric-manager", "GD316", x2(fabric={**fabric_answer({"0": NOT_STARTED, "1": COMPLETED}), **NO_FM}),
        "fail", "error", ("has not registered 1 GPU(s) (GPU 0: not_started)", "not installed", "error 802"), ("gpu.0.fabric",),
        commands=("sudo systemctl enable --now nvidia-fabricmanager",),
    ),
    Case("fabric-call-crashed-its-reader", "GD316", x2(fabric=SEGFAULT), "unknown", message=("signal 11",)),
    Case("nvml-says-not-supported", "GD316", x2(fabric=fabric_answer({"0": {"error": "NotSupported"}, "1": {"error": "NotSupported"}})),
         "not_applicable"),
]
