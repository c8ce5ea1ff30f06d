"""Error signatures of a multi-GPU node: GPU peer access, NCCL's CUDA failures, kernel-log Xid lines.

Data in the format described in gpudoctor/knowledge/signatures.py (which joins this tuple after
the others). The Xid signatures take their codes, meanings and NVIDIA's immediate actions from
gpudoctor/knowledge/xid.py, the one table of Xid codes (GD312 reads the same table), and are
confirmed by GD312 only when this machine's kernel log has the same code. Each signature was
written from real texts of its cause (tests/explain_corpus/node_sglang.jsonl, with their threads).
"""

from __future__ import annotations

from typing import Iterable, Tuple

from . import xid

# NVIDIA's catalog groups, by what the operator must do (xid.XIDS holds each code's meaning and action).
FELL_OFF_BUS = (79,)
MEMORY = (48, 63, 64, 94, 95, 140)  # DBE, page retirement / row remapping, contained / uncontained ECC
GSP = (119, 120)
APPLICATION = tuple(sorted(code for code, (_, action) in xid.XIDS.items() if action == xid.RESTART_APP and code not in MEMORY))


def _meanings(codes: Iterable[int]) -> str:
    return "; ".join(f"Xid {code}: {xid.describe(code)[0]}" for code in codes)


def _gd312(codes: Tuple[int, ...]) -> str:
    """GD312 confirms only its findings about these codes ("Xid 79 on GPU 3 …")."""
    return "GD312:^Xid (?:" + "|".join(str(code) for code in codes) + ") on"


_XID_COMMANDS = ["sudo dmesg -T | grep -E 'NVRM: Xid' | tail -20"]

FABRIC = (
    {
        "id": "SIG-gpu-peer-access-unsupported",
        "key": "gpu_peer_access_unsupported",
        "title": "The GPUs cannot reach each other's memory (peer access is not supported)",
        "patterns": [
            r"peer access is not supported between these two devices?",
            r"\bcudaErrorPeerAccessUnsupported\b",
            r"(?:Cuda failure|CUDA error) 217\b",
        ],
        "cause": (
            "Peer-to-peer access (one GPU reading another's memory over PCIe or NVLink) is not available between two "
            "GPUs of the tensor-parallel group: GeForce cards (RTX 3090/4090) and many PCIe servers and VMs (GPUs under "
            "different CPU sockets, PCIe ACS or an IOMMU that redirects or blocks peer traffic) do not allow it, while "
            "the engine's custom all-reduce (vLLM, SGLang) or NCCL's P2P transport assumed it. CUDA error 217."
        ),
        "fix": (
            "Turn off what needs P2P: --disable-custom-all-reduce (vLLM and SGLang); for NCCL's own transport "
            "NCCL_P2P_DISABLE=1 in the environment of every worker (with Ray, in the runtime_env). Or serve on GPUs "
            "that have P2P between them (nvidia-smi topo -p2p rw shows OK), or fix the platform's ACS/IOMMU settings."
        ),
        "commands": [
            "nvidia-smi topo -p2p rw",
            "nvidia-smi topo -m",
            "vllm serve MODEL --tensor-parallel-size 2 --disable-custom-all-reduce",
            "python3 -m sglang.launch_server --model-path MODEL --tp 2 --disable-custom-all-reduce",
        ],
        "thread_fixes": [
            {"fix": "maintainer: disable custom all-reduce on this setup (2x T4)", "url": "https://github.com/sgl-project/sglang/issues/552"},
            {"fix": "custom all-reduce must be disabled on RTX 4090s (no peer access)", "url": "https://github.com/sgl-project/sglang/issues/4814"},
            {"fix": "maintainer: RTX 3090s do not support peer access", "url": "https://github.com/efeslab/Nanoflow/issues/22"},
            {"fix": "maintainer: custom all-reduce works only where peer access does; disable use_custom_all_reduce", "url": "https://github.com/NVIDIA/TensorRT-LLM/issues/1588"},
        ],
        "sources": [
            "sgl-project/sglang#552", "sgl-project/sglang#4814", "hiyouga/EasyR1#579", "NVIDIA-NeMo/RL#1683",
            "efeslab/Nanoflow#22", "NVIDIA/TensorRT-LLM#1588",
            "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html",
        ],
        "confirm_rules": ["GD310"],
        "facts": ["gpu.*.name", "gpu.pairs", "env.NCCL_P2P_DISABLE", "env.CUDA_VISIBLE_DEVICES"],
    },
    {
        "id": "SIG-nccl-symbol-missing",
        "key": "nccl_version_mismatch",
        "title": "torch loads an older NCCL than it was built for (undefined symbol: nccl…)",
        "patterns": [r"undefined symbol:?\s*\"?(?P<symbol>(?-i:nccl[A-Z])\w+)", r"undefined symbol:?\s*ncclcommregister\b"],
        "cause": (
            "libtorch_cuda.so (or another binary using NCCL) calls an NCCL function that the libnccl.so.2 loaded first "
            "does not have: a second, older NCCL is found before the one torch requires: the nvidia-nccl wheel of another "
            "CUDA major (cu11 beside cu12, cu12 beside cu13), a system or conda libnccl on LD_LIBRARY_PATH, or an "
            "nvidia-nccl-cuXX pinned below torch's requirement."
        ),
        "fix": (
            "Keep one NCCL, the nvidia-nccl-cuXX version the installed torch requires; remove the other only when no "
            "installed package requires it (pip show -R), and take system or conda NCCL directories off LD_LIBRARY_PATH."
        ),
        "commands": [
            "python3 -m pip list 2>/dev/null | grep -iE '^(torch|nvidia-nccl)'",
            "python3 -m pip show torch | grep -i '^requires'",
            "echo \"$LD_LIBRARY_PATH\"; ldconfig -p | grep libnccl",
        ],
        "thread_fixes": [
            {"fix": "maintainer: nvidia-nccl-cu12 and nvidia-nccl-cu13 were both installed; uninstall nvidia-nccl-cu12", "url": "https://github.com/pytorch/pytorch/issues/186591"},
            {"fix": "maintainer: torch 2.2 beside nvidia-nccl-cu12 2.18 (an older NCCL than torch needs)", "url": "https://github.com/vllm-project/vllm/issues/4195"},
            {"fix": "maintainer: another package provided an incompatible NCCL; remove it (or use torch 2.1.2)", "url": "https://github.com/pytorch/pytorch/issues/119932"},
        ],
        "sources": ["pytorch/pytorch#186591", "vllm-project/vllm#4195", "pytorch/pytorch#119932", "rwth-i6/returnn#1802", "NVIDIA/nccl#1784"],
        "confirm_rules": ["GD503:nccl", "GD504:nccl", "GD207"],
        "facts": ["torch.version", "env.LD_LIBRARY_PATH"],
    },
    {
        "id": "SIG-xid-fell-off-bus",
        "key": "gpu_fell_off_bus",
        "title": "Kernel log: a GPU has fallen off the bus (Xid 79)",
        "patterns": [
            xid.line_pattern(FELL_OFF_BUS),
            r"\bGPU has fallen off the bus\b",
            r"fallen off the bus and is not responding to commands",
        ],
        "cause": (
            f"{_meanings(FELL_OFF_BUS)}. Most often power (a PSU or cable that cannot hold the load), heat, a loose "
            "card, riser or cable, or the platform firmware. Every process on that GPU is lost; nothing in the "
            "software stack caused it."
        ),
        "fix": (
            f"NVIDIA's action: {xid.ACTION_TEXT[xid.RESTART_BM]}. Take the node out of service until then."
        ),
        "commands": _XID_COMMANDS + [
            "sudo lspci -d 10de: -vv | grep -E 'LnkSta:|LnkCap:'",
            "nvidia-smi -q -d TEMPERATURE,POWER  # after the reboot",
        ],
        "thread_fixes": [
            {"fix": "NVIDIA: Xid 79 usually means overheating, too little power or an outdated SBIOS; check temperatures, reseat power connectors and the card, check the PSU",
             "url": "https://github.com/NVIDIA/open-gpu-kernel-modules/issues/507"},
        ],
        "sources": ["NVIDIA/NVSentinel#155", "NVIDIA/open-gpu-kernel-modules#507", xid.CATALOG_URL],
        "confirm_rules": [_gd312(FELL_OFF_BUS), "GD305"],
        "facts": ["gpu.count", "gpu.*.name", "node.xid"],
    },
    {
        "id": "SIG-xid-memory-error",
        "key": "gpu_memory_ecc_error",
        "title": "Kernel log: an uncorrectable GPU memory error (Xid 48, 63, 64, 94, 95, 140)",
        "patterns": [xid.line_pattern(MEMORY)],
        "cause": (
            f"The GPU's memory reported an uncorrectable ECC error or the repair that follows it: {_meanings(MEMORY)}. "
            "A contained error (94) killed only the processes using that memory; the others leave the GPU unusable "
            "or the repair pending until a reset."
        ),
        "fix": (
            "Stop the GPU's processes and reset it (sudo nvidia-smi -r -i N) or reboot: pending row remaps and page "
            "retirements take effect only then. Afterwards nvidia-smi -q -d ECC,ROW_REMAPPER must show no pending "
            "remap and no 'Remapping Failure Occurred: Yes'; a failed remap (Xid 64) or errors that come back mean "
            "the GPU's memory is failing: drain it and contact the vendor."
        ),
        "commands": _XID_COMMANDS + [
            "nvidia-smi -q -d ECC,ROW_REMAPPER | grep -iE 'uncorr|pending|failure'",
            "sudo nvidia-smi -r -i N  # N: the GPU at that PCI address; stop its processes first",
        ],
        "sources": [
            "NVIDIA/gpu-operator#1146", "akash-network/support#244", xid.CATALOG_URL,
            "https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/index.html",
            "https://docs.nvidia.com/deploy/dynamic-page-retirement/visibility.html",
        ],
        "confirm_rules": [_gd312(MEMORY), "GD303", "GD304"],
        "facts": ["gpu.*.name", "gpu.*.ecc_uncorrectable", "node.xid"],
    },
    {
        "id": "SIG-xid-gsp-error",
        "key": "gpu_gsp_error",
        "title": "Kernel log: the GPU's system processor stopped answering (Xid 119, 120)",
        "patterns": [
            xid.line_pattern(GSP),
            r"Timeout (?:after \d+s of )?waiting for RPC (?:response )?from (?:GPU\d+ )?GSP!",
        ],
        "cause": (
            f"{_meanings(GSP)}. The GSP firmware that runs the GPU for the driver stopped answering, so every call to "
            "that GPU (CUDA, nvidia-smi) hangs or fails until it is reset. A driver bug on some releases, or failing "
            "hardware when it repeats on one GPU."
        ),
        "fix": (
            "Reset the GPU (stop its processes, sudo nvidia-smi -r -i N) or reboot; update the driver to the newest "
            "release of its branch (525.105.17 fixed a GSP RPC timeout of the first 525 releases); if it comes back on "
            "the same GPU only, have the GPU checked."
        ),
        "commands": _XID_COMMANDS + ["nvidia-smi --query-gpu=index,pci.bus_id,driver_version --format=csv"],
        "thread_fixes": [
            {"fix": "driver 525.105.17 fixed GSP RPC timeouts (Xid 119) introduced in the first 525 release",
             "url": "https://github.com/NVIDIA/open-gpu-kernel-modules/issues/446"},
        ],
        "sources": ["NVIDIA/open-gpu-kernel-modules#446", "leptonai/gpud#500", xid.CATALOG_URL],
        "confirm_rules": [_gd312(GSP)],
        "facts": ["driver.version", "gpu.*.name", "node.xid"],
    },
    {
        "id": "SIG-xid-application-fault",
        "key": "gpu_application_fault",
        "title": "Kernel log: a GPU fault raised by an application (Xid 13, 31, 43 …)",
        "patterns": [xid.line_pattern(APPLICATION)],
        "cause": (
            f"The driver stopped a process's GPU work after a fault in it: {_meanings(APPLICATION)}. NVIDIA classes "
            "these as application errors: an out-of-range access or illegal instruction in a kernel (the process "
            "usually reports 'an illegal memory access was encountered'); the GPU stays healthy."
        ),
        "fix": (
            f"NVIDIA's action: {xid.ACTION_TEXT[xid.RESTART_APP]}. Find the error the named process printed at that "
            "time; if the same Xid hits one GPU under different applications, run DCGM's diagnostics on it."
        ),
        "commands": _XID_COMMANDS + ["dcgmi diag -r 2  # when it repeats on one GPU only"],
        "sources": ["leptonai/gpud#46", "NVIDIA/open-gpu-kernel-modules#363", "akash-network/support#244", xid.CATALOG_URL],
        "confirm_rules": [_gd312(APPLICATION)],
        "facts": ["gpu.*.name", "node.xid"],
    },
    {
        "id": "SIG-nccl-gdr-disabled-distance",
        "key": "nccl_gdr_nic_too_far",
        "title": "NCCL: GPUDirect RDMA off for a GPU, its NIC too far away on PCIe (distance N > M)",
        "patterns": [
            r"GPU Direct RDMA Disabled for GPU (?P<gpu_bus>[0-9a-fA-F]+) / HCA (?P<hca>\d+) \(distance (?P<distance>\d+) > (?P<limit>\d+)\)",
        ],
        "cause": (
            "NCCL uses GPUDirect RDMA between a GPU and a NIC only when the PCIe path between them is no longer than "
            "NCCL_NET_GDR_LEVEL (PXB by default: under the same PCIe switches). This GPU's NIC is behind the CPU's host "
            "bridge or on the other socket, so its inter-node traffic is copied through host memory: slower "
            "multi-node tensor/pipeline parallelism and KV transfers."
        ),
        "fix": (
            "Give each rank the NIC on its GPU's PCIe switch (nvidia-smi topo -m: PIX or PXB in that NIC's column), or "
            "put a NIC in a slot under those GPUs; NCCL_NET_GDR_LEVEL=SYS forces GDR anyway, usually no faster."
        ),
        "commands": ["nvidia-smi topo -m", "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET <launch> 2>&1 | grep -E 'GPU Direct RDMA|GDRDMA'"],
        "thread_fixes": [
            {"fix": "maintainer: NCCL_NET_GDR_LEVEL=SYS forces it, but GDR matters when GPU and NIC share a PCI switch",
             "url": "https://github.com/NVIDIA/nccl/issues/1151"},
        ],
        "sources": ["NVIDIA/nccl#1151", "NVIDIA/DeepLearningExamples#383", "https://github.com/NVIDIA/nccl/blob/master/src/graph/paths.cc"],
        "confirm_rules": ["GD324"],
        "facts": ["rdma.gpu_affinity", "rdma.devices", "env"],
    },
    {
        "id": "SIG-nccl-gdr-disabled-hca",
        "key": "nccl_gdr_no_peer_memory",
        "title": "NCCL: GPUDirect RDMA off for a NIC (no peer-memory support: nvidia-peermem or DMA-BUF)",
        "patterns": [r"GPU Direct RDMA Disabled for HCA (?P<hca>\d+) '(?P<hca_name>[^']+)'"],
        "cause": (
            "The NIC cannot read or write GPU memory: NCCL found neither the nvidia-peermem kernel module's peer-memory "
            "registration nor DMA-BUF support for it, so every transfer through this NIC is staged in host memory."
        ),
        "fix": (
            "Load nvidia-peermem (built against the installed MLNX_OFED: reinstall the driver after OFED), or use a "
            "kernel, driver and NCCL with DMA-BUF (NCCL_DMABUF_ENABLE=1, open kernel modules); then NCCL's INFO log "
            "says GDRDMA on the inter-node channels."
        ),
        "commands": ["lsmod | grep -E 'nvidia_peermem|ib_core'", "ls /sys/kernel/mm/memory_peers/ 2>/dev/null",
                     "sudo modprobe nvidia-peermem"],
        "sources": ["NVIDIA/nccl#1537", "NVIDIA/nccl#1939"],
        "cannot_check": "whether nvidia-peermem is registered with the RDMA stack is not read by gpudoctor yet",
        "confirm_rules": [],
        "facts": ["rdma.devices", "env"],
    },
    # --- symptoms ---
    {
        "id": "SIG-nccl-unhandled-cuda-error",
        "key": "failure_without_cause",
        "role": "symptom",
        "title": "NCCL: a CUDA call failed (ncclUnhandledCudaError; the CUDA error is on NCCL's own line)",
        "patterns": [
            r"ncclUnhandledCudaError: Call to CUDA function failed",
            r"unhandled cuda error(?: \(run with NCCL_DEBUG=INFO for details\))?, NCCL version",
        ],
        "hint": (
            "NCCL's 'Last error:' line just below, or an earlier 'NCCL WARN Cuda failure N …' / 'NCCL WARN … : N …' "
            "line, names the CUDA error (217 'peer access is not supported': GPU peer-to-peer; 2 'out of memory'); "
            "without it, rerun with NCCL_DEBUG=WARN"
        ),
        "cause": "NCCL reports that a CUDA call it made failed; which call and why is printed by NCCL on its own lines.",
        "fix": "Send the lines from the first 'NCCL WARN' on, or rerun with NCCL_DEBUG=WARN and explain them.",
        "commands": ["NCCL_DEBUG=WARN vllm serve MODEL … 2>&1 | grep -m5 -E 'NCCL WARN|Last error'"],
        "sources": ["pytorch/pytorch#130113", "hiyouga/EasyR1#579"],
        "facts": [],
    },
)
