"""GD3xx: the GPUs and the host around them — health, links, modes, visibility, /dev/shm."""

from __future__ import annotations

import re
import shlex

from gpudoctor.rule import ERROR, WARNING, Fail, Fix, NotApplicable, Unknown, rule
from gpudoctor.snapshot import gib, mib
from gpudoctor.visible import resolve, visible_gpus

from .process_view import IN_USE_THRESHOLD, gpu_shares, view

# /dev/shm below this breaks NCCL's shared-memory transport between local GPUs (Docker's
# default is 64 MiB). vLLM's docs ask for --ipc=host or a large --shm-size.
SHM_MINIMUM = 1 << 30

# Product names of data-center GPUs, where persistence mode is expected to be on.
DATA_CENTER = re.compile(r"\b(A100|A30|A40|A10G?|A16|A2|H100|H200|H800|H20|GH200|B100|B200|B300|GB200|GB300|L4|L40S?|L20|T4|V100|P100|P40|Tesla)\b")


def _gpu_label(snap, index: int) -> str:
    return f"GPU {index} ({snap.value(f'gpu.{index}.name', '?')})"


@rule("GD301", "mixed-gpus", severity=WARNING, area="gpu", requires=("gpu.count",))
def mixed_gpus(snap):
    """The visible GPUs are not all the same model or compute capability.

    ## Why
    Tensor and pipeline parallel groups run at the pace of the slowest GPU and split
    memory evenly, so the smaller card decides the KV-cache size. Kernels and attention
    backends are chosen per compute capability; with mixed capabilities vLLM may pick a
    backend one of the GPUs cannot run (FA3 needs 9.x, FP8 needs ≥ 8.9), and binaries
    must carry code for every capability present.

    ## Fix
    Restrict the server to one kind of GPU with `CUDA_VISIBLE_DEVICES`, e.g.
    `export CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=0,1`. The indices are
    nvidia-smi's (PCI bus order); CUDA numbers GPUs fastest first unless
    `CUDA_DEVICE_ORDER=PCI_BUS_ID`, so on mixed GPUs the same index can name another GPU.

    ## References
    - CUDA C++ Programming Guide, "CUDA Environment Variables" (CUDA_DEVICE_ORDER:
      FASTEST_FIRST by default, PCI_BUS_ID).
    - https://docs.nvidia.com/cuda/cuda-programming-guide/05-appendices/environment-variables.html

    ## Severity
    A warning for different models of one compute capability (a TP group runs at the slowest
    one's speed and memory); an error across compute capabilities (kernels built for one may not
    run on the other).
    """
    visible = visible_gpus(snap)
    if len(visible) < 2:
        return NotApplicable(f"{len(visible)} visible GPU")
    kinds = {}
    for index in visible:
        key = (snap.value(f"gpu.{index}.name"), snap.value(f"gpu.{index}.compute_capability"))
        kinds.setdefault(key, []).append(index)
    if len(kinds) < 2:
        return None
    # Suggest the largest group of identical GPUs.
    best = max(kinds.values(), key=len)
    described = "; ".join(f"{name or '?'} (cc {cc or '?'}) on GPU {','.join(map(str, idx))}" for (name, cc), idx in kinds.items())
    ccs = {cc for _, cc in kinds}
    return Fail(
        f"mixed GPUs are visible: {described}",
        [f"gpu.{i}.name" for i in visible] + [f"gpu.{i}.compute_capability" for i in visible],
        # nvidia-smi/NVML number GPUs in PCI bus order, CUDA by default fastest first
        # (CUDA_DEVICE_ORDER=FASTEST_FIRST): on mixed GPUs the same index can name another GPU.
        Fix(
            "Serve on identical GPUs only (the indices are nvidia-smi's, so make CUDA number GPUs the same way).",
            [f"export CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES={','.join(map(str, best))}"],
        ),
        severity=WARNING if len(ccs) == 1 else ERROR,
    )


@rule("GD302", "gpu-memory-in-use", severity=WARNING, area="gpu", requires=("gpu.count",))
def gpu_memory_in_use(snap):
    """GPU memory is already taken by other processes.

    ## Why
    vLLM sizes its KV cache from `--gpu-memory-utilization` × total memory and refuses to
    start when less is free: "Free memory on device cuda:0 (… GiB) on startup is less than
    desired GPU memory utilization". Memory held by a leftover engine, a notebook or
    another tenant is the usual cause.

    ## Fix
    Find the holders (`nvidia-smi --query-compute-apps=pid,process_name,used_memory
    --format=csv`) and stop the stale ones, or lower `--gpu-memory-utilization`.

    ## References
    - https://github.com/vllm-project/vllm/issues/20305,
      https://github.com/vllm-project/vllm/issues/55510,
      https://github.com/vllm-project/vllm/issues/42017.
    - With the process table (rules/processes.py), memory held by stale serving processes
      (GD601), zombies (GD605) or processes not visible here (GD604) is reported there, not
      here: this rule names the live holders, with user and age.
    """
    procs_view = view(snap)
    splits = {s.index: s for s in (gpu_shares(snap, procs_view) or [])}
    fails = []
    for index in visible_gpus(snap):
        used = snap.get(f"gpu.{index}.memory_used")
        total = snap.value(f"gpu.{index}.memory_total")
        if not used.ok:
            continue
        reserved = snap.get(f"gpu.{index}.memory_reserved")
        threshold = IN_USE_THRESHOLD if reserved.ok else IN_USE_THRESHOLD + (1 << 30)
        split = splits.get(index)
        elsewhere = split.reported_elsewhere if split else 0
        if used.value - elsewhere < threshold:
            continue
        procs = split.live if split else (snap.value(f"gpu.{index}.processes") or [])
        pids = [str(p.get("pid")) for p in procs if isinstance(p, dict)]
        holders = f"held by PID {', '.join(pids)}" if pids else "no process visible from here (another container or PID namespace?)"
        if split and pids:
            holders = "held by " + "; ".join(_holder(procs_view, p) for p in procs if isinstance(p, dict))
        if elsewhere:
            holders += f"; {gib(elsewhere)} more is held by stale, zombie or hidden processes (GD601, GD604, GD605)"
        share = f" of {gib(total)}" if total else ""
        fails.append(
            Fail(
                f"{_gpu_label(snap, index)}: {gib(used.value - elsewhere)}{share} already in use, {holders}",
                [f"gpu.{index}.memory_used", f"gpu.{index}.memory_total", f"gpu.{index}.processes"],
                Fix(
                    "Stop the processes that hold the memory if they are stale, or leave room for them.",
                    ["nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv"]
                    + ([f"ps -o pid,user,etime,args -p {','.join(pids)}"] if pids else []),
                ),
                subject=f"GPU {index}",
            )
        )
    return fails


def _holder(procs_view, entry) -> str:
    """'PID 896 (python3, user root, up 5 min, 3.6 GiB)' from the process table."""
    proc = procs_view.procs.get(entry.get("pid"))
    size = f", {gib(entry['used_memory'])}" if isinstance(entry.get("used_memory"), int) else ""
    if proc is None:
        return f"PID {entry.get('pid')}{size}"
    return f"PID {proc.pid} ({proc.title}, user {procs_view.user(proc.uid)}, up {procs_view.age(proc)}{size})" + _server_of(procs_view, proc)


SERVER_NAMES = {"vllm": ("vLLM", 8000), "sglang": ("SGLang", 30000)}  # and their default ports


def _server_of(procs_view, proc) -> str:
    """' — the engine core of the live vLLM server PID 900 (port 8000)' for a child of a running
    server, so that a live server's own memory is not read as a stranger's (issue 31: GD302 named
    the engine core holding 35.5 GiB without the server on port 8000 it belongs to)."""
    if not proc.serving or proc.role == "launcher":
        return ""
    top, seen = proc, {proc.pid}
    while top.ppid in procs_view.procs and procs_view.procs[top.ppid].serving and top.ppid not in seen:
        top = procs_view.procs[top.ppid]
        seen.add(top.pid)
    if top is proc or top.role != "launcher" or top.zombie or not top.record:
        return ""
    name, default = SERVER_NAMES.get(str(top.record.get("stack")), (str(top.record.get("stack") or "serving"), None))
    given = re.search(r"(?:^|\s)--port[= ](\d+)", str(top.record.get("cmdline") or ""))
    port = f" (port {given.group(1)})" if given else f" (port {default} unless set otherwise)" if default else ""
    return f" — the {proc.role.replace('_', ' ')} of the live {name} server PID {top.pid}{port}"


@rule("GD303", "ecc-uncorrectable-errors", severity=ERROR, area="gpu", requires=("gpu.count",))
def ecc_uncorrectable_errors(snap):
    """A GPU has uncorrectable ECC errors since the last reset.

    ## Why
    Uncorrectable (double-bit) ECC errors corrupt data; the driver kills the affected
    context (Xid 48/63/94) and a job on that GPU can crash or silently return wrong
    results until the GPU is reset and the bad memory retired or remapped.

    ## Fix
    Drain the GPU, reset it (`sudo nvidia-smi -r -i N`) or reboot, then watch the counters
    (`nvidia-smi -q -d ECC,ROW_REMAPPER`). Errors that come back mean a hardware RMA.

    ## References
    - NVIDIA GPU Memory Error Management guide
      (https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt).
    - NVML nvmlDeviceGetTotalEccErrors (NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC).
    - https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/
    """
    fails = []
    for index in snap.gpu_indices():
        count = snap.value(f"gpu.{index}.ecc_uncorrected_volatile")
        if isinstance(count, int) and count > 0:
            fails.append(
                Fail(
                    f"{_gpu_label(snap, index)} reports {count} uncorrectable ECC error(s) since the last reset",
                    [f"gpu.{index}.ecc_uncorrected_volatile", f"gpu.{index}.ecc_mode"],
                    _reset_fix(index),
                    subject=f"GPU {index}",
                )
            )
    return fails


def _reset_fix(index: int) -> Fix:
    return Fix(
        "Stop the work on this GPU, reset it (or reboot), then check the counters again.",
        [f"sudo nvidia-smi -r -i {index}  # or: sudo reboot", f"nvidia-smi -q -d ECC,ROW_REMAPPER -i {index}"],
        "disruptive",
    )


@rule("GD304", "row-remap-pending", severity=ERROR, area="gpu", requires=("gpu.count",))
def row_remap_pending(snap):
    """A GPU has a memory row remapping pending or failed.

    ## Why
    On A100/H100-class GPUs, memory rows with uncorrectable errors are remapped to spare
    rows, but only at the next GPU reset: until then the bad row stays in service.
    A failed remapping means the spare rows ran out: the GPU needs replacing.

    ## Fix
    Pending: reset the GPU or reboot. Failure: take the GPU out of service and RMA it.

    ## References
    - NVIDIA GPU Memory Error Management guide, "Row Remapping".
    - NVML nvmlDeviceGetRemappedRows (isPending, failureOccurred).
    - https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/
    """
    fails = []
    for index in snap.gpu_indices():
        rows = snap.value(f"gpu.{index}.remapped_rows")
        if not isinstance(rows, dict):
            continue
        if rows.get("failure"):
            fails.append(
                Fail(
                    f"{_gpu_label(snap, index)}: row remapping FAILED (no spare rows left); the GPU needs an RMA",
                    [f"gpu.{index}.remapped_rows"],
                    Fix("Take the GPU out of service and contact the vendor.", [f"nvidia-smi -q -d ROW_REMAPPER -i {index}"], "disruptive"),
                    subject=f"GPU {index}",
                )
            )
        elif rows.get("pending"):
            fails.append(
                Fail(
                    f"{_gpu_label(snap, index)}: a row remapping is pending; it takes effect only after a GPU reset",
                    [f"gpu.{index}.remapped_rows"],
                    _reset_fix(index),
                    subject=f"GPU {index}",
                )
            )
    return fails


@rule("GD305", "pcie-link-degraded", severity=WARNING, area="gpu", requires=("gpu.count",))
def pcie_link_degraded(snap):
    """A GPU's PCIe link runs narrower or slower than it can.

    ## Why
    Weight loading, host↔device copies and PCIe-only multi-GPU traffic slow down in
    proportion. A narrower link than the maximum (x8 instead of x16) points at a badly
    seated card, a riser or a BIOS lane setting. A lower generation is normal while the
    GPU idles (it saves power), so gpudoctor only flags it on a busy GPU.

    ## Fix
    Check `nvidia-smi -q -d PCIE` under load; reseat the card, check the slot and riser,
    and the BIOS PCIe settings.

    ## References
    - NVML nvmlDeviceGetCurrPcieLinkWidth / GetMaxPcieLinkWidth / GetCurrPcieLinkGeneration /
      GetGpuMaxPcieLinkGeneration; clocks-event reason "GPU idle".
    - https://docs.nvidia.com/deploy/nvml-api/
    """
    fails = []
    for index in snap.gpu_indices():
        width, width_max = snap.value(f"gpu.{index}.pcie_width_current"), snap.value(f"gpu.{index}.pcie_width_max")
        gen, gen_max = snap.value(f"gpu.{index}.pcie_gen_current"), snap.value(f"gpu.{index}.pcie_gen_max")
        reasons = snap.get(f"gpu.{index}.throttle_reasons")
        # A low generation is normal at idle; when we cannot tell whether it idles, say nothing.
        busy = reasons.ok and "gpu_idle" not in (reasons.value or [])
        problems = []
        if isinstance(width, int) and isinstance(width_max, int) and 0 < width < width_max:
            problems.append(f"width x{width} of x{width_max}")
        if isinstance(gen, int) and isinstance(gen_max, int) and gen < gen_max and busy:
            problems.append(f"gen {gen} of {gen_max} while busy")
        if problems:
            fails.append(
                Fail(
                    f"{_gpu_label(snap, index)}: PCIe link at {' and '.join(problems)}",
                    [f"gpu.{index}.pcie_width_current", f"gpu.{index}.pcie_width_max", f"gpu.{index}.pcie_gen_current", f"gpu.{index}.pcie_gen_max"],
                    Fix("Check the link under load, then the slot, riser and BIOS.", [f"nvidia-smi -q -d PCIE -i {index}"]),
                    subject=f"GPU {index}",
                )
            )
    return fails


@rule("GD306", "persistence-mode-off", severity=WARNING, area="gpu", requires=("gpu.count",))
def persistence_mode_off(snap):
    """Persistence mode is off on a data-center GPU.

    ## Why
    Without persistence (or the nvidia-persistenced daemon) the driver tears the GPU state
    down whenever no client is attached: every process start pays seconds of
    re-initialisation, and ECC/clock settings can be lost between jobs. NVIDIA recommends
    it on servers.

    ## Fix
    `sudo systemctl enable --now nvidia-persistenced` (preferred), or
    `sudo nvidia-smi -pm 1`.

    ## References
    - NVIDIA Driver Persistence documentation
      (https://docs.nvidia.com/deploy/driver-persistence).
    - https://docs.nvidia.com/deploy/driver-persistence/
    """
    fails = []
    for index in snap.gpu_indices():
        name = snap.value(f"gpu.{index}.name") or ""
        mode = snap.get(f"gpu.{index}.persistence_mode")
        if mode.ok and mode.value is False and DATA_CENTER.search(name):
            fails.append(
                Fail(
                    f"{_gpu_label(snap, index)}: persistence mode is off",
                    [f"gpu.{index}.persistence_mode"],
                    Fix(
                        "Turn on the persistence daemon.",
                        ["sudo systemctl enable --now nvidia-persistenced", "sudo nvidia-smi -pm 1  # without the daemon"],
                        "needs_root",
                    ),
                    subject=f"GPU {index}",
                )
            )
    return fails


@rule("GD307", "compute-mode-blocks", severity=ERROR, area="gpu", requires=("gpu.count",))
def compute_mode_blocks(snap):
    """A GPU's compute mode will refuse a new process.

    ## Why
    In Exclusive_Process mode a GPU accepts one CUDA context at a time: while another
    process holds it, the next one fails with "CUDA-capable device(s) is/are busy or
    unavailable". In Prohibited mode it accepts none.

    ## Fix
    Stop the process that holds the GPU, or set the default mode:
    `sudo nvidia-smi -i N -c DEFAULT`.

    ## References
    - nvidia-smi(1), "Compute mode"; NVML nvmlDeviceGetComputeMode.
    - https://docs.nvidia.com/deploy/nvidia-smi/
    """
    fails = []
    for index in visible_gpus(snap):
        mode = snap.value(f"gpu.{index}.compute_mode")
        procs = snap.value(f"gpu.{index}.processes") or []
        if mode == "Prohibited" or (mode in ("Exclusive_Process", "Exclusive_Thread") and procs):
            why = "prohibits all CUDA contexts" if mode == "Prohibited" else f"is {mode} and already used by PID {', '.join(str(p.get('pid')) for p in procs)}"
            fails.append(
                Fail(
                    f"{_gpu_label(snap, index)} {why}: a new CUDA process will get \"device busy or unavailable\"",
                    [f"gpu.{index}.compute_mode", f"gpu.{index}.processes"],
                    Fix("Free the GPU or reset its compute mode.", [f"sudo nvidia-smi -i {index} -c DEFAULT"], "needs_root"),
                    subject=f"GPU {index}",
                )
            )
    return fails


@rule("GD308", "cuda-visible-devices-invalid", severity=ERROR, area="gpu", requires=("gpu.count",))
def cuda_visible_devices_invalid(snap):
    """CUDA_VISIBLE_DEVICES names GPUs that do not exist.

    ## Why
    The CUDA runtime reads the list left to right and stops at the first entry it cannot
    resolve, silently dropping everything after it: `CUDA_VISIBLE_DEVICES=0,4,1` on a
    4-GPU machine gives one GPU, not two. An empty value hides every GPU, and so does a GPU
    named twice: `CUDA_VISIBLE_DEVICES=0,0` gives 0 devices, not one (measured on an H200:
    torch.cuda.device_count() is 0). The program then reports "no CUDA GPUs are available"
    or falls back to CPU, so both block `check` and `preflight`.

    ## Fix
    Set it to indices below the GPU count or to GPU UUIDs from `nvidia-smi -L`.

    ## References
    - CUDA C++ Programming Guide, "CUDA Environment Variables" (CUDA_VISIBLE_DEVICES).
    - https://docs.nvidia.com/cuda/cuda-programming-guide/05-appendices/environment-variables.html
      ("If the variable is set to an empty string, no GPU devices are visible").
    - torch's reading of the variable, which mirrors the runtime's: "Repeated ordinal results
      in empty set", `_parse_visible_devices` in
      https://github.com/pytorch/pytorch/blob/main/torch/cuda/__init__.py
    """
    env = snap.value("env", {}) or {}
    value = env.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return NotApplicable("CUDA_VISIBLE_DEVICES is not set")
    if any(e.strip().startswith("MIG-") for e in value.split(",")):
        return Unknown("CUDA_VISIBLE_DEVICES names MIG instances, which gpudoctor does not enumerate")
    indices = snap.gpu_indices()
    uuids = [snap.value(f"gpu.{i}.uuid") for i in indices]
    if any(u is None for u in uuids) and any(e.strip().startswith("GPU-") for e in value.split(",")):
        return Unknown("GPU UUIDs were not read, cannot resolve UUID entries")
    vis = resolve(value, uuids)
    valid = ",".join(str(i) for i in range(len(indices)))
    fix = Fix(
        f"Name existing GPUs only (this machine has {len(indices)}: {valid or 'none'}).",
        [f"export CUDA_VISIBLE_DEVICES={shlex.quote(valid)}" if valid else "unset CUDA_VISIBLE_DEVICES", "nvidia-smi -L"],
    )
    evidence = [("env.CUDA_VISIBLE_DEVICES", value), "gpu.count"]
    if vis.invalid:
        dropped = f"; CUDA ignores what follows it too ({', '.join(vis.dropped)})" if vis.dropped else ""
        return Fail(
            f"CUDA_VISIBLE_DEVICES={value!r}: {vis.invalid[0]!r} is not a GPU here{dropped}; "
            f"the process will see {len(vis.indices)} GPU(s)",
            evidence,
            fix,
        )
    if vis.duplicates:
        return Fail(
            f"CUDA_VISIBLE_DEVICES={value!r} names a GPU twice ({', '.join(vis.duplicates)}): "
            "CUDA then sees no GPU at all (0 devices)",
            evidence,
            fix,
        )
    if not vis.indices and indices:
        return Fail("CUDA_VISIBLE_DEVICES is empty: CUDA programs see no GPU (0 devices)", evidence, fix)
    return None


@rule("GD309", "dev-shm-too-small", severity=WARNING, area="gpu", requires=("host.shm_total",))
def dev_shm_too_small(snap):
    """/dev/shm is too small for serving on several GPUs.

    ## Why
    NCCL moves data between local GPUs through shared memory segments in /dev/shm, and
    vLLM's workers exchange inputs through a shared-memory ring buffer. Docker gives a
    container 64 MiB by default; with tensor parallelism NCCL then fails with
    "Error while creating shared memory segment /dev/shm/nccl-…" / "unhandled system error".

    ## Fix
    Start the container with `--ipc=host` (what vLLM's docs use) or `--shm-size=16g`; in
    Kubernetes mount an `emptyDir` with `medium: Memory` at /dev/shm.

    ## References
    - https://github.com/vllm-project/vllm/issues/1710,
      https://github.com/vllm-project/vllm/issues/6574;
      https://github.com/NVIDIA/nccl-tests/issues/166.
    """
    total = snap.value("host.shm_total")
    gpus = len(visible_gpus(snap)) if snap.get("gpu.count").ok else 0
    if gpus < 2:
        return NotApplicable(f"{gpus} visible GPU: NCCL's shared memory is not used")
    if total >= SHM_MINIMUM:
        return None
    return Fail(
        f"/dev/shm is {mib(total)} with {gpus} GPUs visible; NCCL and vLLM's workers need more (1 GiB at least)",
        ["host.shm_total", "gpu.count", "host.container"],
        Fix(
            "Give the container more shared memory.",
            ["docker run --ipc=host …  # or: docker run --shm-size=16g …", "df -h /dev/shm"],
        ),
    )

