"""GD705-GD707: tensor / pipeline / data parallelism against the visible GPUs and the model."""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

from gpudoctor.rule import ERROR, WARNING, Fail, Fix, NotApplicable, Unknown, rule
from .common import _applies, _applies_server, _command_with, _config, _group, _int, _is_sglang, _parallel, _tp_flag, _visible, gib

@rule("GD705", "parallel-size-exceeds-gpus", severity=ERROR, area="launch")
def parallel_size_exceeds_gpus(snap):
    """Tensor × pipeline (× local data) parallel size needs more GPUs than are visible.

    ## Why
    Each engine needs TP × PP GPUs and each local data-parallel rank another set. With fewer
    visible GPUs the multiprocessing executor fails while creating workers (or Ray waits for a
    placement group that never comes). `CUDA_VISIBLE_DEVICES` — in the environment or in front
    of the command — decides what is visible, not what the machine has.

    ## Fix
    Lower `--tensor-parallel-size` / `--pipeline-parallel-size` / `--data-parallel-size` to
    fit, or make more GPUs visible.

    ## References
    - vLLM docs, "Distributed inference and serving" (TP × PP GPUs per engine).
    - CUDA C++ Programming Guide, "CUDA Environment Variables" (CUDA_VISIBLE_DEVICES).
    - https://docs.vllm.ai/en/latest/serving/parallelism_scaling/
    - https://docs.nvidia.com/cuda/cuda-programming-guide/05-appendices/environment-variables.html
    - SGLang: https://github.com/sgl-project/sglang/blob/main/python/sglang/srt/entrypoints/engine.py
      (`_calculate_rank_ranges`: a scheduler's GPU is base_gpu_id + (pp_rank % pp_per_node) ×
      tp_per_node + (tp_rank % tp_per_node) × gpu_id_step) and
      python/sglang/srt/managers/data_parallel_controller.py (each data-parallel replica starts
      tp × pp × gpu_id_step GPUs further); attention DP (`--attn-dp-size`, or the deprecated
      `--dp-size N --enable-dp-attention`) runs inside the TP group's GPUs.
    """
    if snap.value("launch.kind") == "sglang-serve":
        return _sglang_gpus(snap)
    skip = _applies(snap)
    if skip:
        return skip
    visible = _visible(snap)
    if visible is None:
        return Unknown(f"no GPU facts ({snap.get('gpu.count').describe()})")
    tp, pp, dp = _parallel(snap)
    need = tp * pp * dp
    if need <= len(visible):
        return None
    env = (snap.value("env") or {}).get("CUDA_VISIBLE_DEVICES")
    seen = f" (CUDA_VISIBLE_DEVICES={env!r})" if env is not None else ""
    fit = max(1, len(visible))
    return Fail(
        f"TP {tp} × PP {pp}" + (f" × DP {dp}" if dp > 1 else "") + f" = {need} GPUs needed, {len(visible)} visible{seen}",
        [("launch.args.--tensor-parallel-size", tp), ("launch.args.--pipeline-parallel-size", pp), "gpu.count",
         ("visible GPUs", _counted(visible))],
        Fix("Fit the parallel sizes to the visible GPUs, or make more GPUs visible.",
            [_command_with(snap, "--tensor-parallel-size", _largest_divisor_tp(snap, fit))]),
    )


def _sglang_gpus(snap):
    """GD705 for `sglang serve`: the highest GPU index its schedulers take against the visible GPUs
    (probes/launch/sglang_args.py parallel_layout)."""
    layout = snap.value("launch.sglang_parallel")
    if not isinstance(layout, dict):
        return Unknown(f"the command's parallel layout was not read ({snap.get('launch.sglang_parallel').describe()})")
    if layout.get("gpus") is None:
        return Unknown(f"not judged: {layout.get('why') or 'the layout is not known'}")
    visible = _visible(snap)
    if visible is None:
        return Unknown(f"no GPU facts ({snap.get('gpu.count').describe()})")
    highest = int(layout["highest"])
    if highest < len(visible):
        return None
    tp, pp, dp = layout["tp_size"], layout["pp_size"], layout["dp_size"]
    parts = f"TP {tp} × PP {pp}" + (f" × DP {dp}" if dp > 1 else "") + (f" over {layout['nnodes']} nodes" if layout["nnodes"] > 1 else "")
    offset = ""
    if layout["base_gpu_id"] or layout["gpu_id_step"] != 1:
        offset = f", from GPU {layout['base_gpu_id']} in steps of {layout['gpu_id_step']}"
    env = (snap.value("env") or {}).get("CUDA_VISIBLE_DEVICES")
    seen = f" (CUDA_VISIBLE_DEVICES={env!r})" if env is not None else ""
    fit = max(1, len(visible) // max(1, dp * pp))
    return Fail(
        f"{parts} = {layout['gpus']} GPUs{offset}: SGLang's schedulers would use GPU index {highest}, "
        f"and {len(visible)} are visible{seen}",
        [("launch.sglang_parallel", {k: layout[k] for k in ("tp_size", "pp_size", "dp_size", "attn_dp_size", "nnodes",
                                                             "base_gpu_id", "gpu_id_step")}), "gpu.count",
         ("visible GPUs", _counted(visible))],
        Fix("Fit the parallel sizes to the visible GPUs, or make more GPUs visible.", [_command_with(snap, "--tp-size", fit)]),
    )


def _counted(indices: List[int]) -> str:
    """``1 (index 0)``: the visible GPUs as a count with their indices (a bare ``0`` read as "no GPU")."""
    if not indices:
        return "0"
    return f"{len(indices)} (ind{'ex' if len(indices) == 1 else 'ices'} {', '.join(str(i) for i in indices)})"


def _largest_divisor_tp(snap, gpus: int) -> int:
    heads = _int((_config(snap) or {}).get("num_attention_heads"))
    for tp in range(gpus, 0, -1):
        if heads is None or heads % tp == 0:
            return tp
    return 1


@rule("GD706", "tensor-parallel-does-not-divide-model", severity=ERROR, area="launch", applies=_applies_server)
def tensor_parallel_does_not_divide_model(snap):
    """The tensor-parallel size does not divide the model's attention heads (or PP its layers).

    ## Why
    vLLM shards attention heads evenly across the TP group and refuses otherwise:
    "Total number of attention heads (N) must be divisible by tensor parallel size (T)." KV
    heads must divide by TP, or TP by the KV heads (they are then replicated); pipeline
    parallelism needs at least one layer per stage.

    ## Fix
    Pick a TP size that divides the head count (the closest that fits is suggested).

    SGLang shards the same way (its `QKVParallelLinear`, KV heads replicated when TP exceeds
    them) through `divide()`, and stops while building the first attention layer with
    "AssertionError: N is not divisible by T" (`ensure_divisibility`).

    ## References
    - vLLM `ModelConfig.verify_with_parallel_config` (vllm/config/model.py) and
      `QKVParallelLinear` (KV-head replication).
    - https://docs.vllm.ai/en/latest/serving/parallelism_scaling/
    - SGLang: python/sglang/srt/layers/linear.py (QKVParallelLinear) and
      python/sglang/srt/utils/common.py (`divide`, `ensure_divisibility`);
      https://github.com/sgl-project/sglang/issues/3246
    """
    cfg = _config(snap)
    if cfg is None:
        return Unknown(f"model config unknown ({snap.get('model.config').describe()})")
    if _is_sglang(snap) and "tp_size" not in (snap.value("launch.sglang_parallel") or {}):
        layout = snap.value("launch.sglang_parallel") or {}
        return Unknown(f"the command's TP size was not read ({layout.get('why') or snap.get('launch.sglang_parallel').describe()})")
    tp, pp, _ = _parallel(snap)
    flag, tp_path = _tp_flag(snap)
    pp_path = "launch.sglang_parallel.pp_size" if _is_sglang(snap) else "launch.args.--pipeline-parallel-size"
    heads, kv_heads, layers = _int(cfg.get("num_attention_heads")), _int(cfg.get("num_key_value_heads")), _int(cfg.get("num_hidden_layers"))
    fails = []
    if heads and heads % tp:
        said = (f"SGLang stops building the attention layers with \"AssertionError: {heads} is not divisible by {tp}\" "
                f"({heads} attention heads over TP {tp})" if _is_sglang(snap) else
                f"Total number of attention heads ({heads}) must be divisible by tensor parallel size ({tp}). (vLLM's startup error)")
        fails.append(Fail(
            said,
            [("model.config.num_attention_heads", heads), (tp_path, tp)],
            Fix("Use a TP size that divides the head count.", [_command_with(snap, flag, _largest_divisor_tp(snap, tp))]),
            subject="attention heads",
        ))
    elif kv_heads and kv_heads % tp and tp % kv_heads:
        fails.append(Fail(
            f"{kv_heads} KV heads cannot be split over TP {tp} (neither divides the other)"
            + (f": SGLang stops with \"AssertionError: {max(kv_heads, tp)} is not divisible by {min(kv_heads, tp)}\"" if _is_sglang(snap) else ""),
            [("model.config.num_key_value_heads", kv_heads), (tp_path, tp)],
            Fix("Use a TP size that divides the KV heads or is a multiple of them."),
            subject="KV heads",
        ))
    if layers and pp > layers:
        fails.append(Fail(f"pipeline parallel size {pp} exceeds the model's {layers} layers",
                          [("model.config.num_hidden_layers", layers), (pp_path, pp)],
                          Fix("Use fewer pipeline stages."), subject="layers"))
    return fails


@rule("GD707", "tensor-parallel-group-mixed-gpus", severity=ERROR, area="launch", applies=_applies)
def tensor_parallel_group_mixed_gpus(snap):
    """The GPUs of one tensor/pipeline-parallel group are not the same model.

    ## Why
    vLLM sizes the KV cache from the smallest GPU of the group and runs every step at the pace
    of the slowest; kernels and the attention backend are chosen once for all ranks, so a
    backend valid on one compute capability (FA3 on 9.0, FP8 on ≥ 8.9) can fail on the other.
    GD301 reports mixed GPUs on the machine; this rule reports the group this command uses.

    ## Fix
    Make only identical GPUs visible to the server (`CUDA_VISIBLE_DEVICES` in front of the
    command, with `CUDA_DEVICE_ORDER=PCI_BUS_ID` so the indices are nvidia-smi's).

    ## References
    - GD301 (rules/gpu.py).
    - https://docs.vllm.ai/en/latest/serving/parallelism_scaling/
    """
    group, why = _group(snap)
    if group is None:
        return Unknown(why)
    if len(group) < 2:
        return NotApplicable("one GPU per engine")
    kinds: Dict[Tuple[Any, Any, Any], List[int]] = {}
    for index in group:
        key = (snap.value(f"gpu.{index}.name"), snap.value(f"gpu.{index}.compute_capability"), snap.value(f"gpu.{index}.memory_total"))
        kinds.setdefault(key, []).append(index)
    if len(kinds) < 2:
        return None
    described = "; ".join(f"{name} (cc {cc}, {gib(total) if isinstance(total, int) else '?'}) on GPU {','.join(map(str, idx))}"
                          for (name, cc, total), idx in kinds.items())
    ccs = {cc for _, cc, _ in kinds}
    best = max(kinds.values(), key=len)
    return Fail(
        f"the {len(group)} GPUs of this engine differ: {described}; the KV cache is sized for the smallest and "
        + ("kernels are chosen for one compute capability" if len(ccs) > 1 else "every step waits for the slowest"),
        [f"gpu.{i}.name" for i in group] + [f"gpu.{i}.compute_capability" for i in group],
        Fix("Serve on identical GPUs only.", [f"CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES={','.join(map(str, best))} "
                                               + _command_with(snap, "--tensor-parallel-size", len(best))]),
        severity=ERROR if len(ccs) > 1 else WARNING,
    )
