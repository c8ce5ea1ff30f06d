"""GD9xx: the cluster — nodes that did not answer, version and environment skew between nodes,
GPUs that differ from node to node or do not fit the planned parallelism, Ray's /dev/shm.

These rules read the merged cluster snapshot (gpudoctor/cluster.py: ``cluster.nodes`` plus
every node's facts under ``node.<name>.``), built by ``gpudoctor cluster`` over Ray or by
``gpudoctor check --snapshot a.json --snapshot b.json`` from files. On a single-node
snapshot they are not applicable. The single-node rules run on each node separately.

Skew rules compare the configurable list ``WATCHES`` (rules/cluster_policy.py) and name the node(s)
out of step with the majority; a value a node could not collect is left out of the
comparison, never counted as a difference.
"""

from __future__ import annotations

import shlex
from typing import Dict, List, Optional, Sequence, Tuple

from gpudoctor.cluster import NODE_OK, NODE_TIMEOUT, UNREACHABLE, is_cluster, node_entries, plan, reachable
from gpudoctor.rule import ERROR, SEVERITY_RANK, WARNING, Fail, Fix, NotApplicable, Unknown, rule
from gpudoctor.snapshot import gib
from gpudoctor.visible import gpu_kinds, visible_gpus

from .cluster_policy import NOT_INSTALLED, UNSET, Spread, spreads

SINGLE_NODE = "a single-node snapshot (run `gpudoctor cluster`, or check several --snapshot files)"

# Ray's default object store: 30 % of the memory available when the node starts, capped at
# /dev/shm but never below 10 GB (ray/_private/utils.py resolve_object_store_memory,
# ray_constants DEFAULT_OBJECT_STORE_MEMORY_PROPORTION = 0.3, REQUIRE_SHM_SIZE_THRESHOLD = 10**10).
RAY_OBJECT_STORE_PROPORTION = 0.3
RAY_SHM_FLOOR = 10 ** 10


def on_cluster(snap) -> Optional[NotApplicable]:
    """Every cluster rule's precondition (``applies=``): a snapshot of several nodes."""
    return None if is_cluster(snap) else NotApplicable(SINGLE_NODE)


def _cluster_nodes(snap, minimum: int = 2):
    """(nodes that answered, None) or (None, NotApplicable); for rules that apply ``on_cluster``."""
    nodes = reachable(snap)
    if len(nodes) < minimum:
        return None, NotApplicable(f"{len(nodes)} node(s) answered: nothing to compare")
    return nodes, None


def _names(nodes: Sequence[str]) -> str:
    return ", ".join(nodes)


# --- GD901 -------------------------------------------------------------------------------------
@rule("GD901", "cluster-node-unreachable", severity=ERROR, area="cluster", applies=on_cluster)
def node_unreachable(snap):
    """A node of the cluster did not answer, so it was not checked.

    ## Why
    vLLM on Ray places one worker per GPU with a placement group over every node: a node
    that is gone (its raylet died, the machine is down, the network is cut) leaves vLLM
    waiting for GPUs that will never come ("Waiting for creating a placement group of
    specs …") or fails a running server. A node that is alive but did not run the doctor's
    task in time is slow or overloaded; one that answered with an error usually lacks
    gpudoctor in its Python environment. Either way, that node's own problems are unknown.

    ## Fix
    Run `ray status` (live nodes and GPUs) and `ray list nodes` on the head. Restart Ray on a
    dead node (`ray start --address=HEAD_IP:6379`) or leave it out of the deployment; for a
    timeout re-run with a longer `--timeout`; for an error install gpudoctor in that node's
    environment (`pip install gpudoctor`) — or use the Slurm/ssh path: `gpudoctor snapshot -o
    NODE.json` on each node, then `gpudoctor check --snapshot a.json --snapshot b.json`.

    ## References
    - vLLM docs, "Parallelism and Scaling" → multi-node deployment: `ray status` to verify that
      Ray sees every node and GPU (docs/serving/parallelism_scaling.md).
    - https://github.com/vllm-project/vllm/issues/26028 ("The number of required GPUs exceeds
      the total number of available GPUs in the placement group" on a multi-node cluster).
    - Ray docs, NodeAffinitySchedulingStrategy(soft=False): a task pinned to a dead node fails
      with TaskUnschedulableError.
    - https://docs.vllm.ai/en/latest/serving/parallelism_scaling/
    """
    fails = []
    for entry in node_entries(snap):
        status = entry["status"]
        if status == NODE_OK:
            continue
        detail = entry.get("detail") or "no detail"
        name = entry["name"]
        evidence = [(f"{name}: status", status), (f"{name}: detail", detail)]
        if entry.get("address"):
            evidence.append((f"{name}: address", entry["address"]))
        if status == UNREACHABLE:
            fails.append(Fail(
                f"node {name} is unreachable: {detail}", evidence,
                Fix("Bring the node back into the Ray cluster, or leave it out of the deployment.",
                    ["ray status", "ray start --address=HEAD_IP:6379  # on that node"]),
                subject=name))
        elif status == NODE_TIMEOUT:
            fails.append(Fail(
                f"node {name} did not answer in time: {detail}", evidence,
                Fix("Re-run with a longer per-node timeout; if it still hangs, read that node's Ray logs.",
                    ["gpudoctor cluster --timeout 120", "ls /tmp/ray/session_latest/logs  # on that node"]),
                subject=name, severity=WARNING))
        else:
            fails.append(Fail(
                f"node {name} answered with an error: {detail}", evidence,
                Fix("Install gpudoctor in that node's Python environment (the one Ray runs), or snapshot it by hand.",
                    ["pip install gpudoctor  # on that node", "gpudoctor snapshot -o NODE.json  # on that node"]),
                subject=name, severity=WARNING))
    return fails


# --- skew helpers ------------------------------------------------------------------------------
def _skew(snap, group: str, fix_for) -> object:
    nodes, na = _cluster_nodes(snap)
    if na:
        return na
    all_spreads = spreads(snap, groups=[group])
    compared = [s for s in all_spreads if len(s.values) >= 2]
    if not compared:
        missing = sorted({f"{node}: {why}" for s in all_spreads for node, why in s.unknown.items()})
        return Unknown(f"no {group} facts to compare across nodes" + (f" ({'; '.join(missing[:4])})" if missing else ""))
    differing = [s for s in compared if s.differs]
    by_odd: Dict[Tuple[str, ...], List[Spread]] = {}
    for spread in differing:
        by_odd.setdefault(tuple(spread.odd()), []).append(spread)
    fails = []
    for odd, items in by_odd.items():
        fails.append(_skew_fail(odd, items, len(nodes), fix_for(odd, items)))
    return fails


def _skew_fail(odd: Tuple[str, ...], items: List[Spread], total: int, fix: Optional[Fix]) -> Fail:
    parts, evidence = [], []
    has_majority = items[0].majority() is not None
    for spread in items:
        major = spread.majority()
        if major is not None:
            odd_values = "; ".join(f"{v} on {_names([n for n in ns if n in odd])}" for v, ns in spread.groups() if v != major)
            others = len(spread.values) - len(odd)
            parts.append(f"{spread.label} {odd_values} (the other {others} node{'s' * (others != 1)}: {major})")
            evidence.extend((f"{node}: {spread.path}", spread.values[node]) for node in odd)
            majority_nodes = [n for n, v in spread.values.items() if v == major]
            evidence.append((f"{majority_nodes[0]} (and the other majority nodes): {spread.path}", major))
        else:
            parts.append(f"{spread.label}: " + "; ".join(f"{v} on {_names(ns)}" for v, ns in spread.groups()))
            evidence.extend((f"{node}: {spread.path}", value) for node, value in spread.values.items())
        for node, why in spread.unknown.items():
            evidence.append((f"{node}: {spread.path}", f"not compared: {why}"))
    severity = max((s.watch.severity for s in items), key=SEVERITY_RANK.__getitem__)
    if has_majority:
        who = _names(odd)
        verb = "differs" if len(odd) == 1 else "differ"
        message = f"{who} {verb} from the rest of the cluster: " + "; ".join(parts)
    else:
        message = f"the {total} nodes disagree with no majority: " + "; ".join(parts)
    return Fail(message, evidence, fix, subject=_names(odd), severity=severity)


def _on(odd: Sequence[str]) -> str:
    return f"  # on {_names(odd)}"


# --- GD902 -------------------------------------------------------------------------------------
def _driver_fix(odd, items) -> Fix:
    return Fix(
        "Install the same NVIDIA driver on every node (one driver branch, one version), then restart Ray there.",
        ["nvidia-smi --query-gpu=driver_version --format=csv,noheader  # on every node"],
        safety="reboot",
    )


@rule("GD902", "cluster-driver-skew", severity=WARNING, area="cluster", applies=on_cluster)
def driver_skew(snap):
    """The NVIDIA driver differs between nodes.

    ## Why
    Each node's driver decides the newest CUDA it can run (`driver.cuda_max`): one image
    that works on the newer nodes can fail on the older one with "CUDA driver version is
    insufficient", and only there. Different driver branches also bring different NCCL
    transports (P2P, CUMEM, NVLS support) and different kernel modules (open vs
    proprietary), so the same collective can take another path or fail on one node. A
    cluster that mixes drivers is usually a node that missed a rollout.

    ## Fix
    Install the same driver version on every node (the fleet's package pin or image) and
    restart Ray on the nodes that changed. `gpudoctor cluster` shows the driver row of the
    matrix; the nodes named here are the ones out of step with the majority.

    ## References
    - NVIDIA CUDA Compatibility guide (minor-version and forward compatibility by driver).
    - vLLM docs, docs/serving/parallelism_scaling.md: every node must provide an identical
      execution environment; container images are recommended to hide host heterogeneity.
    - https://docs.nvidia.com/deploy/cuda-compatibility/
    - https://docs.vllm.ai/en/latest/serving/parallelism_scaling/
    """
    return _skew(snap, "driver", _driver_fix)


# --- GD903 -------------------------------------------------------------------------------------
def _stack_fix(odd, items) -> Fix:
    commands = []
    pins, removals = [], []
    for spread in items:
        if not spread.path.startswith("packages.dists."):
            continue
        major = spread.majority()
        package = spread.watch.what
        if major is None:
            continue
        if major == NOT_INSTALLED:
            removals.append(package)
        else:
            pins.append(f"{package}=={major}")
    if pins:
        commands.append("pip install " + " ".join(shlex.quote(p) for p in pins) + _on(odd))
    if removals:
        commands.append("pip uninstall -y " + " ".join(shlex.quote(p) for p in removals) + _on(odd))
    commands.append("gpudoctor cluster  # again, after aligning the nodes")
    return Fix(
        "Give every node the same Python environment — best one container image for all of them; "
        "otherwise install the majority's versions on the nodes named.",
        commands,
    )


@rule("GD903", "cluster-stack-skew", severity=ERROR, area="cluster", applies=on_cluster)
def stack_skew(snap):
    """Python, torch, CUDA toolkit, vLLM, flash-attn or NCCL differ between nodes.

    ## Why
    vLLM's multi-node guide requires every node to provide an identical execution
    environment, Python packages included. The failures are concrete: NCCL refuses to
    build a communicator across ranks with different NCCL versions ("Mismatched NCCL
    version detected", ncclInvalidUsage) — and torch and vLLM bring NCCL through the
    `nvidia-nccl-cu*` wheels; Ray refuses workers whose Ray or Python version differs from
    the head's ("Version mismatch: The cluster was started with …"); different vLLM
    versions or commits exchange different pickled objects and pick different kernels; a
    flash-attn wheel present on one node only changes the attention backend of its
    pipeline stage.

    ## Fix
    Run the same container image (or the same locked environment) on every node. The
    finding names the nodes out of step with the majority and what differs; `pip install
    PKG==VERSION` on them aligns single packages.

    ## References
    - vLLM docs, docs/serving/parallelism_scaling.md ("Multi-node deployment": ensure every
      node provides an identical execution environment, including the model path and Python
      packages; container images are recommended).
    - NVIDIA/nccl src/init.cc: "Mismatched NCCL version detected : rank %d version %d …"
      returns ncclInvalidUsage.
    - https://github.com/ray-project/ray/issues/1263,
      https://github.com/ray-project/ray/issues/20179 and
      https://github.com/ray-project/ray/issues/50511: "Version mismatch: The cluster was
      started with: Ray … Python …".
    - https://docs.vllm.ai/en/latest/serving/parallelism_scaling/
    """
    return _skew(snap, "stack", _stack_fix)


# --- GD904 -------------------------------------------------------------------------------------
def _env_fix(odd, items) -> Fix:
    commands = []
    for spread in items:
        major = spread.majority()
        var = spread.path.split(".", 1)[1]
        if major is None:
            continue
        commands.append((f"unset {var}" if major == UNSET else f"export {var}={shlex.quote(major)}") + _on(odd) + ", before `ray start`")
    commands.append("ray stop && ray start --address=HEAD_IP:6379" + _on(odd))
    return Fix(
        "Set the same NCCL_*/VLLM_* variables on every node before `ray start` (or in every container's -e flags).",
        commands,
        safety="disruptive",
    )


@rule("GD904", "cluster-env-skew", severity=WARNING, area="cluster", applies=on_cluster)
def env_skew(snap):
    """NCCL, vLLM or CUDA environment variables differ between nodes.

    ## Why
    Ray workers inherit the environment of the node's `ray start`, not of your shell on the
    head: a variable exported on one node only (NCCL_SOCKET_IFNAME, NCCL_IB_HCA,
    NCCL_P2P_DISABLE, VLLM_ATTENTION_BACKEND, CUDA_DEVICE_ORDER …) changes only that node's
    workers. vLLM copies some prefixes (VLLM_, NCCL_, HF_ …) from the driver to the Ray
    workers, but only the variables set on the driver: one set on a worker node alone still
    applies there. NCCL picks interfaces and transports per process, so a rank with other
    NCCL settings can hang the whole collective, and a debug variable left on one node slows
    or floods only that node. VLLM_HOST_IP is meant to differ and is not compared.

    ## Fix
    Export the same values on every node before `ray start` (vLLM's run_cluster.sh passes
    them as `-e NAME=value` to every container), then restart Ray on the nodes named.

    ## References
    - vLLM examples/online_serving/run_cluster.sh (per-node `-e` variables; each node its own
      VLLM_HOST_IP) and docs/serving/parallelism_scaling.md ("NCCL_IB_HCA=mlx5" for
      InfiniBand).
    - vllm/ray/ray_env.py get_env_vars_to_copy (driver → Ray worker copy of VLLM_/NCCL_/HF_ …
      variables set on the driver).
    - NCCL docs, "Environment Variables" (NCCL_SOCKET_IFNAME, NCCL_IB_HCA, NCCL_P2P_DISABLE).
    - https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html
    """
    return _skew(snap, "env", _env_fix)


# --- GD905 -------------------------------------------------------------------------------------
def _gpu_nodes(nodes) -> Tuple[Dict[str, List[Tuple[str, str]]], List[str], List[str]]:
    """(kinds per node with GPUs, CPU-only nodes, nodes whose GPUs are unknown)."""
    kinds, cpu_only, unknown = {}, [], []
    for name, node in nodes:
        if not node.get("gpu.count").ok:
            if node.get("gpu.count").status in ("absent", "not_supported"):
                cpu_only.append(name)
            else:
                unknown.append(name)
            continue
        found = gpu_kinds(node)
        if found:
            kinds[name] = found
        else:
            cpu_only.append(name)
    return kinds, cpu_only, unknown


def _gpu_groups(snap, key):
    """((kinds per GPU node, CPU-only nodes, {key(kinds): nodes}), None), or (None, the outcome)
    when fewer than two nodes with GPUs answered."""
    nodes, na = _cluster_nodes(snap)
    if na:
        return None, na
    kinds, cpu_only, unknown = _gpu_nodes(nodes)
    if len(kinds) < 2:
        if unknown:
            return None, Unknown(f"GPUs not read on {_names(unknown)}")
        return None, NotApplicable(f"{len(kinds)} node(s) with GPUs")
    groups: Dict[object, List[str]] = {}
    for name, found in kinds.items():
        groups.setdefault(key(found), []).append(name)
    return (kinds, cpu_only, groups), None


@rule("GD905", "cluster-gpu-models-differ", severity=WARNING, area="cluster", applies=on_cluster)
def gpu_models_differ(snap):
    """The nodes have different GPU models or compute capabilities.

    ## Why
    Tensor- and pipeline-parallel ranks run in lockstep: the slowest GPU sets the pace of
    all of them, and vLLM sizes the KV cache from the smallest GPU memory. Attention
    backends and kernels are chosen per compute capability (FA3 needs 9.x, FP8 ≥ 8.9,
    FA4 targets 10.x), so a pipeline stage on an older GPU can need a backend the others do
    not use, and the binaries must carry code for every capability in the cluster.

    ## Fix
    Serve one model on nodes with the same GPU model; put other GPUs in a separate
    deployment (or restrict each node with CUDA_VISIBLE_DEVICES before `ray start`).

    ## References
    - vLLM docs, docs/serving/parallelism_scaling.md ("container images … hide host
      heterogeneity"; TP = GPUs per node, PP = number of nodes).
    - https://docs.vllm.ai/en/latest/serving/parallelism_scaling/

    ## Severity
    A warning when the nodes' GPU models differ within one compute capability; an error when
    compute capabilities differ (one build of the kernels may not run on every node).
    """
    found, outcome = _gpu_groups(snap, lambda k: tuple(sorted(set(k))))
    if outcome:
        return outcome
    kinds, _, groups = found
    if len(groups) < 2:
        return None
    ordered = sorted(groups.items(), key=lambda item: -len(item[1]))
    described = "; ".join(
        f"{' + '.join(f'{n} (cc {cc})' for n, cc in key)} on {_names(names)}" for key, names in ordered
    )
    majority = ordered[0][1] if len(ordered[0][1]) > len(ordered[1][1]) else []
    odd = [n for n in kinds if n not in majority]
    ccs = {cc for key in groups for _, cc in key}
    evidence = [(f"{name}: GPUs", ", ".join(f"{n} (cc {cc})" for n, cc in kinds[name])) for name in kinds]
    return Fail(
        f"GPU models differ across nodes: {described}",
        evidence,
        Fix("Serve on nodes with identical GPUs; give the other GPUs their own deployment.",
            ["nvidia-smi --query-gpu=name,compute_cap --format=csv  # on every node"]),
        subject=_names(odd),
        severity=ERROR if len(ccs) > 1 else WARNING,
    )


# --- GD906 -------------------------------------------------------------------------------------
@rule("GD906", "cluster-gpu-counts-differ", severity=WARNING, area="cluster", applies=on_cluster)
def gpu_counts_differ(snap):
    """The GPU nodes offer different numbers of GPUs.

    ## Why
    vLLM's recipe for several nodes is tensor parallel size = GPUs per node and pipeline
    parallel size = number of nodes. With uneven nodes one of them cannot hold a whole
    tensor-parallel group (its TP traffic then crosses the network on every layer) or
    some GPUs stay idle. The count that matters is what a CUDA process sees: the GPUs the
    driver lists, narrowed by CUDA_VISIBLE_DEVICES at `ray start`. Nodes without GPUs (a
    CPU-only head) are not counted.

    ## Fix
    Give every GPU node the same number of visible GPUs (CUDA_VISIBLE_DEVICES or
    `ray start --num-gpus N`), or plan with `--tensor-parallel-size` ≤ the smallest node;
    pass the planned sizes to `gpudoctor cluster` to have the plan checked (GD907).

    ## References
    - vLLM docs, docs/serving/parallelism_scaling.md ("Set tensor_parallel_size to the number
      of GPUs per node and pipeline_parallel_size to the number of nodes").
    - Ray docs, "Accelerator support" (`ray start --num-gpus`, CUDA_VISIBLE_DEVICES).
    - https://docs.vllm.ai/en/latest/serving/parallelism_scaling/
    """
    found, outcome = _gpu_groups(snap, len)
    if outcome:
        return outcome
    kinds, cpu_only, groups = found
    counts = {name: len(k) for name, k in kinds.items()}
    if len(groups) < 2:
        return None
    ordered = sorted(groups.items(), key=lambda item: (-len(item[1]), -item[0]))
    majority = ordered[0][1] if len(ordered[0][1]) > len(ordered[1][1]) else []
    odd = [n for n in counts if n not in majority]
    described = "; ".join(f"{count} on {_names(names)}" for count, names in ordered)
    note = f" ({_names(cpu_only)} without GPUs, not counted)" if cpu_only else ""
    return Fail(
        f"visible GPUs per node differ: {described}{note}",
        [(f"{name}: visible GPUs", count) for name, count in counts.items()],
        Fix("Make every GPU node offer the same number of GPUs, or keep --tensor-parallel-size ≤ the smallest node.",
            ["ray status  # GPUs per node as Ray sees them"]),
        subject=_names(odd),
    )


# --- GD907 -------------------------------------------------------------------------------------
@rule("GD907", "cluster-parallel-plan-does-not-fit", severity=ERROR, area="cluster", applies=on_cluster)
def parallel_plan_does_not_fit(snap):
    """The planned tensor × pipeline parallel sizes do not fit the cluster's GPUs.

    ## Why
    vLLM needs tensor_parallel_size × pipeline_parallel_size GPUs. With Ray it asks for a
    placement group of that many GPU bundles; when the cluster has fewer, it logs "The
    number of required GPUs exceeds the total number of available GPUs in the placement
    group" and waits ("Waiting for creating a placement group of specs …") instead of
    starting. When there are enough GPUs but no node can hold a whole tensor-parallel
    group, TP's all-reduce crosses the network on every layer: vLLM's guidance is TP = GPUs
    per node, PP = number of nodes.

    ## Fix
    Lower the sizes to what the nodes that answered offer, bring the missing nodes back,
    or set `--tensor-parallel-size` to the GPUs per node and `--pipeline-parallel-size` to
    the number of nodes.

    ## References
    - vLLM docs, docs/serving/parallelism_scaling.md (TP per node, PP across nodes).
    - https://github.com/vllm-project/vllm/issues/26028 (placement-group error on a multi-node
      cluster); vLLM vllm/v1/executor/ray_utils.py (placement group of world_size GPU bundles).
    - https://docs.vllm.ai/en/latest/serving/parallelism_scaling/
    """
    sizes = plan(snap)
    if not sizes:
        return NotApplicable("no --tensor-parallel-size / --pipeline-parallel-size given")
    tp = sizes.get("tensor_parallel_size", 1)
    pp = sizes.get("pipeline_parallel_size", 1)
    world = tp * pp
    nodes = reachable(snap)
    counts, unknown = {}, []
    for name, node in nodes:
        if node.get("gpu.count").ok:
            counts[name] = len(visible_gpus(node))
        elif node.get("gpu.count").status in ("absent", "not_supported"):
            counts[name] = 0
        else:
            unknown.append(name)
    total = sum(counts.values())
    missing = [e["name"] for e in node_entries(snap) if e["status"] != NODE_OK]
    evidence = [("plan", f"tensor_parallel_size={tp}, pipeline_parallel_size={pp} ({world} GPUs)")]
    evidence += [(f"{name}: visible GPUs", count) for name, count in counts.items()]
    where = ", ".join(f"{name} {count}" for name, count in counts.items())
    if total < world:
        if unknown:
            return Unknown(f"{total} GPUs counted, {world} needed; GPUs not read on {_names(unknown)}")
        gone = f"; not counted: {_names(missing)} (did not answer)" if missing else ""
        return Fail(
            f"TP {tp} × PP {pp} needs {world} GPUs, the nodes that answered have {total} ({where}){gone}: "
            "vLLM would wait for a placement group that cannot be created",
            evidence,
            Fix("Lower the parallel sizes or add GPUs/nodes.",
                [f"vllm serve MODEL --tensor-parallel-size {max(1, min(tp, max(counts.values(), default=1)))} "
                 f"--pipeline-parallel-size {max(1, min(pp, sum(1 for c in counts.values() if c)))}  # sizes that fit, if the model fits"]),
        )
    whole_groups = sum(count // tp for count in counts.values())
    if whole_groups < pp:
        largest = max(counts.values(), default=0)
        return Fail(
            f"no placement keeps each tensor-parallel group of {tp} GPUs on one node ({where}): "
            f"{whole_groups} of {pp} groups fit within a node, the others' all-reduce would cross the network on every layer",
            evidence,
            Fix("Set TP to the GPUs per node and PP to the number of nodes.",
                [f"vllm serve MODEL --tensor-parallel-size {largest or 1} --pipeline-parallel-size {max(1, world // (largest or 1))}"]),
            severity=WARNING,
        )
    return None


# --- GD908 -------------------------------------------------------------------------------------
@rule("GD908", "cluster-shm-too-small-for-ray", severity=WARNING, area="cluster", applies=on_cluster)
def shm_too_small_for_ray(snap):
    """A node's /dev/shm is too small for Ray's object store.

    ## Why
    Ray keeps its object store (every `ray.put`, every large task argument, the tensors
    vLLM's Ray executor passes around) in /dev/shm. Its default size is 30 % of the memory
    available when the node starts, and Ray lowers it to fit /dev/shm only down to 10 GB;
    below that Ray puts the store in /tmp ("The object store is using /tmp instead of
    /dev/shm because /dev/shm has only N bytes available. This will harm performance!")
    or refuses to start with a larger explicit store. Docker's default /dev/shm is 64 MiB.
    On a multi-node cluster it is usually the one container started without
    `--shm-size`/`--ipc=host`.

    ## Fix
    Start the container with `--ipc=host` or a large `--shm-size` (vLLM's run_cluster.sh
    passes `--shm-size 10.24g`); in Kubernetes mount an `emptyDir` with `medium: Memory`
    at /dev/shm.

    ## References
    - ray/_private/services.py (object store directory: /dev/shm unless too small, then /tmp
      with the warning above) and ray/_private/utils.py resolve_object_store_memory (30 % of
      available memory, 10 GB floor on the /dev/shm cap).
    - https://github.com/ray-project/ray/issues/11953 ("[docker] auto-populate shared memory
      size").
    - vLLM examples/online_serving/run_cluster.sh (`--shm-size 10.24g`) and
      docs/serving/parallelism_scaling.md (`--ipc=host`, `--shm-size=16G`).
    - https://docs.vllm.ai/en/latest/serving/parallelism_scaling/
    """
    nodes, na = _cluster_nodes(snap)
    if na:
        return na
    fails, unknown = [], []
    for name, node in nodes:
        shm = node.value("host.shm_total")
        memory = node.value("host.memory_available") or node.value("host.memory_total")
        if not isinstance(shm, int) or not isinstance(memory, int):
            unknown.append(name)
            continue
        needed = min(int(memory * RAY_OBJECT_STORE_PROPORTION), RAY_SHM_FLOOR)
        if shm < needed:
            fails.append(Fail(
                f"/dev/shm on {name} is {gib(shm)}; Ray's default object store there needs {gib(needed)} "
                "(30 % of available memory, up to 10 GB) and would fall back to /tmp",
                [(f"{name}: host.shm_total", shm), (f"{name}: host.memory_available", memory),
                 (f"{name}: host.container", node.value("host.container"))],
                Fix("Give that node's container a large /dev/shm.",
                    ["docker run --ipc=host …  # or: docker run --shm-size=16g …", "df -h /dev/shm" + _on([name])]),
                subject=name))
    if not fails and unknown and len(unknown) == len(nodes):
        return Unknown(f"/dev/shm or memory not read on {_names(unknown)}")
    return fails
