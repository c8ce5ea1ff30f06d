"""GD318–GD319 (rules/fabric_deep.py): what ``--deep`` measured between the GPUs.

The child's output was recorded on a lent 2xH200 joined by NVLink (NV18 through the NVSwitch
fabric), driver 580, torch 2.11.0+cu130, NCCL 2.28.9, NCCL_NVLS_ENABLE=0 (fixtures/deep_fabric/):
healthy (P2P 304 GB/s each way, all-reduce via P2P/CUMEM at 268.5 GB/s), with NCCL_P2P_DISABLE=1
(via SHM/direct/direct at 26.2 GB/s), with NCCL_SOCKET_IFNAME=nosuch0 (rank 0's
ncclInvalidUsage, "Bootstrap : no socket interface found"; rank 1 waiting in the rendezvous), and
with CUDA_VISIBLE_DEVICES=0 (one rank).
Each is parsed by the real probes.deep_fabric.parse over the recorded 2xH200 snapshot. Where the
fault needs hardware we lack (PCIe ACS corrupting or stalling peer copies) the healthy recording is
replayed with the one line that fault changes, and the case says so.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Dict, List

from cases import Case, env, merge, put
from cases.fabric import x2
from gpudoctor import runner
from gpudoctor.probes import deep_fabric
from gpudoctor.snapshot import ERROR, NOT_SUPPORTED, Snapshot

# The lent 2xH200's interfaces as its snapshot read them (snapshots/h200x2-deep.json).
NET = put("net.interfaces", {"eth0": "up", "ifb0": "down", "ifb1": "down", "lo": "unknown"})
RECORDED = Path(__file__).resolve().parent.parent / "fixtures" / "deep_fabric"


def recording(name: str) -> List[str]:
    return (RECORDED / f"raw-{name}.jsonl").read_text(encoding="utf-8").splitlines()


def deep(name: str, change: Callable[[List[str]], List[str]] = lambda lines: lines, world: int = 2):
    """The facts probes.deep_fabric.parse makes of a recorded child's output, laid over the snapshot."""

    def edit(data: Dict) -> None:
        snap = Snapshot.from_json(data)
        out = "\n".join(change(recording(name))) + "\n"
        merge(deep_fabric.parse(runner.Completed("ok", 0, out, ""), snap, world, f"the {world} visible GPU(s)"))(data)

    return edit


def not_run(detail: str, status: str = NOT_SUPPORTED):
    return merge(deep_fabric.not_run(detail, status))


def corrupt_copy(lines: List[str]) -> List[str]:
    """ACS redirecting peer writes (hardware we lack): the 1->0 copy arrives with 4096 words wrong."""
    return [line.replace('"pair": [1, 0], "peer_access": true, "wrong": 0', '"pair": [1, 0], "peer_access": true, "wrong": 4096')
            for line in lines]


def stall_copy(at: float) -> Callable[[List[str]], List[str]]:
    """A peer copy that never returns (hardware we lack): the output stops after 1->0 started ``at``
    seconds in; the child's summary comes at its deadline (6.2 s, the healthy run's length)."""

    def change(lines: List[str]) -> List[str]:
        out = []
        for line in lines:
            item = json.loads(line)
            if item.get("start") == [1, 0]:
                out.append(json.dumps({"start": [1, 0], "t": at}))
                continue
            if item.get("pair") == [1, 0]:
                continue
            if "nccl_logs" in item:
                item["p2p_done"] = False
            out.append(json.dumps(item))
        return out

    return change


def wrong_sum(lines: List[str]) -> List[str]:
    """A wrong all-reduce sum (hardware we lack): rank 1 reports 1024 wrong elements before timing."""
    return lines[:-1] + ['{"rank_line": "{\\"rank\\": 1, \\"stage\\": \\"verified\\", \\"wrong\\": 1024, \\"init_s\\": 0.5}"}'] + lines[-1:]


def hung_ranks(lines: List[str]) -> List[str]:
    """The ranks never finish their all-reduce (cut at the deadline): no rank reports being timed."""
    out = []
    for line in lines:
        item = json.loads(line)
        if "rank_line" in item:
            continue
        if "nccl_logs" in item:
            item["late_ranks"] = [0, 1]
        out.append(line if "nccl_logs" not in item else json.dumps(item))
    return out


CASES = [
    # GD318 p2p-write-verify-failed
    Case("healthy-nv18", "GD318", x2(deep("healthy")), "pass", message=("0->1 304.2 GB/s",)),
    Case("without-deep", "GD318", x2(not_run("not run (use --deep …)")), "not_applicable", message=("use --deep",)),
    Case("one-gpu", "GD318", x2(not_run("not applicable: 1 GPU, no pair to test")), "not_applicable", message=("1 GPU",)),
    Case("torch-import-failed", "GD318", x2(not_run("import torch failed in the child: ImportError: libcudart.so.13", ERROR)),
         "unknown", message=("import torch failed",)),
    Case("copy-corrupted", "GD318", x2(deep("healthy", corrupt_copy)), "fail", "error",
         ("GPU 1->0: 4096 of the copied words differ", "will hang or return garbage"), ("gpu.p2p_check",),
         commands=("NCCL_P2P_DISABLE=1", "--disable-custom-all-reduce", "iommu=pt")),
    Case("copy-stalled", "GD318", x2(deep("healthy", stall_copy(2.8))), "fail", "error",
         ("GPU 1->0: the copy did not finish in 3.41 s",), ("gpu.p2p_check",)),
    Case("deadline-cut-a-copy", "GD318", x2(deep("healthy", stall_copy(6.1))), "unknown", message=("longer --timeout",)),
    # GD319 nccl-allreduce-failed
    Case("healthy-p2p-cumem", "GD319", x2(deep("healthy")), "pass", message=("via P2P/CUMEM: 268.53 GB/s",)),
    Case("without-deep", "GD319", x2(not_run("not run (use --deep …)")), "not_applicable"),
    Case("p2p-disabled-is-gd315s", "GD319", x2(deep("p2p-disable"), env(NCCL_P2P_DISABLE="1")), "not_applicable",
         message=("GD315",)),
    Case("shm-without-a-setting-we-know", "GD319", x2(deep("p2p-disable"), env(NCCL_P2P_LEVEL="LOC")), "fail", "warning",
         ("went through SHM/direct/direct (26.21 GB/s bus bandwidth) although NVML reports P2P",), ("nccl.allreduce_check",)),
    Case("ifname-missing-is-gd313s", "GD319", x2(deep("ifname-missing"), NET, env(NCCL_SOCKET_IFNAME="nosuch0")), "not_applicable",
         message=("GD313",)),
    Case("nccl-error-quoted", "GD319", x2(deep("ifname-missing"), NET, env(NCCL_SOCKET_IFNAME="eth0")), "fail", "error",
         ("ncclInvalidUsage", "Bootstrap : no socket interface found"), ("nccl.allreduce_check",)),
    Case("wrong-sum", "GD319", x2(deep("healthy", wrong_sum)), "fail", "error", ("returned a wrong sum",),
         ("nccl.allreduce_check",), commands=("NCCL_P2P_DISABLE=1",)),
    Case("hung-is-unknown", "GD319", x2(deep("healthy", hung_ranks)), "unknown", message=("--timeout 60",)),
    Case("one-rank", "GD319", x2(deep("one-gpu", world=1)), "pass", message=("one GPU", "NCCL 2.28.9")),  # CUDA_VISIBLE_DEVICES=0 there
    # the causes' own rules carry what --deep saw
    Case("deep-evidence", "GD313", x2(deep("ifname-missing"), NET, env(NCCL_SOCKET_IFNAME="nosuch0")), "fail", "error",
         ("selects none of this machine's interfaces",), ("env.NCCL_SOCKET_IFNAME", "--deep: the all-reduce failed, NCCL said")),
    Case("deep-evidence", "GD315", x2(deep("p2p-disable"), env(NCCL_P2P_DISABLE="1")), "fail", "warning",
         ("GPU 0-1 (NV18)",), ("env.NCCL_P2P_DISABLE", "--deep: the all-reduce went")),
]
