"""GD708-GD710: will the weights and the KV cache fit, per GPU of the engine.

Memory numbers are estimates and say so: weights come from the safetensors headers (exact
bytes on disk), the KV cache per token from config.json (2 × layers × KV heads × head size ×
dtype bytes, per GPU), and what vLLM takes for activations, CUDA graphs and the CUDA context
is an allowance (``OVERHEAD``), not a measurement: vLLM profiles the real value at startup.
"""

from __future__ import annotations

import math
from typing import Any, Dict, Optional, Tuple

from gpudoctor.rule import ERROR, WARNING, Fail, Fix, NotApplicable, Passed, Unknown, rule
from .common import DTYPE_NAMES, GIB, _applies, _args, _command_with, _config, _gpu_name, _group, _int, _num, _parallel, _spec, gib

# Activations (profiled at max_num_batched_tokens), CUDA graphs and the non-torch memory of a
# worker (CUDA context, NCCL buffers): an allowance taken out of the --gpu-memory-utilization
# budget before the KV cache. vLLM measures it; ~1.5-3 GiB is what its startup log reports for
# dense models at the default batch size (the "Model loading took …" / "Available KV cache
# memory" lines). Eager mode skips the graphs.
OVERHEAD = 2 * GIB
OVERHEAD_EAGER = int(1.5 * GIB)
# What the CUDA context and NCCL take on each GPU before vLLM compares free memory with the
# budget (its check runs after init_device): free memory this close to the budget is marginal.
CONTEXT = GIB // 2
# Only for the estimates of GD709/GD710 when the installed vLLM's own default is not read
# (launch.vllm.memory, read from its source: 0.9 up to 0.11, 0.92 from 0.20, 1.0 with 0.34's
# extensible KV cache); GD708 never uses it.
DEFAULT_UTILIZATION = 0.9
# The KV estimate is rough; "will not fit" only above this factor, "probably not" below it.
KV_MARGIN = 1.2

FULL_ATTENTION = {"full_attention", "attention", "global_attention", "full", "global"}
SLIDING_ATTENTION = {"sliding_attention", "sliding_window", "local_attention", "local", "sliding", "chunked_attention"}

# --- memory model ------------------------------------------------------------------------------------------
def _dtype(snap, cfg: Optional[Dict[str, Any]]) -> Optional[str]:
    wanted = str(_args(snap).get("--dtype") or "auto").lower()
    if wanted != "auto":
        return DTYPE_NAMES.get(wanted, wanted)
    model_dtype = str((cfg or {}).get("torch_dtype") or "").replace("torch.", "").lower()
    if model_dtype in ("float32", "float"):
        return "float16"  # vLLM serves float32 checkpoints in half precision by default
    return DTYPE_NAMES.get(model_dtype)


def _kv_bytes(snap, cfg: Dict[str, Any]) -> int:
    kv = str(_args(snap).get("--kv-cache-dtype") or "auto").lower()
    if kv.startswith("fp8") or kv in ("int8",):
        return 1
    dtype = _dtype(snap, cfg)
    return 4 if dtype == "float32" else 2


def _kv_per_token(cfg: Dict[str, Any], tp: int, pp: int, nbytes: int) -> Optional[Dict[str, Any]]:
    """KV cache bytes per token on one GPU: {full, sliding, window, layers_full, layers_sliding, …}."""
    layers = _int(cfg.get("num_hidden_layers"))
    if not layers:
        return None
    types = cfg.get("layer_types") if isinstance(cfg.get("layer_types"), dict) else None
    if types:
        full = sum(v for k, v in types.items() if k in FULL_ATTENTION)
        sliding = sum(v for k, v in types.items() if k in SLIDING_ATTENTION)
        other = sum(types.values()) - full - sliding
    else:
        full, sliding, other = layers, 0, 0
    if _int(cfg.get("kv_lora_rank")):  # MLA: one latent per token, not split across TP
        per_layer = (cfg["kv_lora_rank"] + (_int(cfg.get("qk_rope_head_dim")) or 0)) * nbytes
        shape = f"MLA latent {cfg['kv_lora_rank']}+{_int(cfg.get('qk_rope_head_dim')) or 0}"
    else:
        kv_heads, head_dim = _int(cfg.get("num_key_value_heads")), _int(cfg.get("head_dim"))
        if not kv_heads or not head_dim:
            return None
        per_gpu_heads = max(1, math.ceil(kv_heads / tp))
        per_layer = 2 * per_gpu_heads * head_dim * nbytes
        shape = f"{per_gpu_heads} KV head(s) of {head_dim} per GPU"
    return {
        "full": per_layer * math.ceil(full / pp) if full else 0,
        "sliding": per_layer * math.ceil(sliding / pp) if sliding else 0,
        "window": _int(cfg.get("sliding_window")),
        "layers_full": full,
        "layers_sliding": sliding,
        "layers_other": other,
        "shape": shape,
        "bytes": nbytes,
    }


def _derived_max_len(cfg: Dict[str, Any]) -> Tuple[Optional[int], str]:
    """(vLLM's derived max_model_len, how): the smallest length key, times a rope scaling factor."""
    base = _int(cfg.get("max_length"))
    if not base:
        return None, "no context length in config.json"
    how = f"{cfg.get('max_length_key')}={base}"
    rope = cfg.get("rope_scaling") if isinstance(cfg.get("rope_scaling"), dict) else None
    if rope:
        kind = rope.get("rope_type") or rope.get("type")
        factor = _num(rope.get("factor"))
        if factor and kind not in ("su", "longrope", "llama3", "mrope", "default", None):
            original = _int(rope.get("original_max_position_embeddings"))
            scaled = int((original or base) * factor) if kind == "yarn" and original else int(base * factor)
            return max(base, scaled), f"{how} with {kind} rope scaling × {factor:g}"
    return base, how


def _max_model_len(snap, cfg: Dict[str, Any]) -> Tuple[Optional[int], str]:
    given = _int(_args(snap).get("--max-model-len"))
    if given is not None and given > 0:
        return given, "--max-model-len"
    if given == -1:
        return None, "--max-model-len auto: vLLM picks the longest length that fits"
    derived, how = _derived_max_len(cfg)
    return derived, f"derived from config.json ({how}); --max-model-len not given"


def _memory_plan(snap) -> Tuple[Optional[Dict[str, Any]], str]:
    """Everything the memory rules need, per GPU of the engine, or (None, why unknown)."""
    group, why = _group(snap)
    if group is None:
        return None, why
    args = _args(snap)
    util = _num(args.get("--gpu-memory-utilization"))
    decided = snap.value("launch.vllm.memory") if snap.get("launch.vllm.memory").ok else None
    if util is None and isinstance(decided, dict):
        util = _num(decided.get("utilization"))  # what the installed vLLM resolves for this command
    util = DEFAULT_UTILIZATION if util is None else util
    gpus = []
    for position, index in enumerate(group):
        total = _int(snap.value(f"gpu.{index}.memory_total"))
        free = _int(snap.value(f"gpu.{index}.memory_free"))
        if total is None:
            return None, f"GPU {index}: total memory not read ({snap.get(f'gpu.{index}.memory_total').describe()})"
        reserved = _int(snap.value(f"gpu.{index}.memory_reserved"), 0) or 0
        cuda_total = total - reserved  # what cudaMemGetInfo calls total
        gpus.append({"index": index, "cuda": position, "total": cuda_total, "free": free, "budget": math.ceil(util * cuda_total),
                     "processes": snap.value(f"gpu.{index}.processes") or []})
    return {"group": group, "util": util, "gpus": gpus}, ""


def _weights_plan_or_outcome(snap):
    """The per-GPU memory and weights plan, or the outcome to return when there is none."""
    skip = _applies(snap)
    if skip:
        return skip
    base, why = _memory_plan(snap)
    if base is None:
        return Unknown(why)
    plan, why = _weights_plan(snap, base)
    return plan if plan is not None else Unknown(why)


def _weights_plan(snap, plan: Dict[str, Any]) -> Tuple[Optional[Dict[str, Any]], str]:
    """Adds weights, drafter and KV numbers to a memory plan (all per GPU, estimates)."""
    weights = snap.value("model.weights")
    if not isinstance(weights, dict) or not _int(weights.get("bytes")):
        return None, f"model weights unknown ({snap.get('model.weights').describe()})"
    cfg = _config(snap) or {}
    tp, pp, _ = _parallel(snap)
    args = _args(snap)
    total = weights["bytes"]
    notes = []
    quant = str(args.get("--quantization") or "").lower()
    if quant == "fp8" and not cfg.get("quantization") and _dtype(snap, cfg) in ("bfloat16", "float16"):
        total //= 2
        notes.append("online fp8 quantization halves the 16-bit weights")
    per_gpu = total / (tp * pp)
    offload = _num(args.get("--cpu-offload-gb")) or 0.0
    per_gpu = max(0.0, per_gpu - offload * GIB)
    spec = _spec(snap)
    draft_per_gpu = 0.0
    draft_kv = None
    if snap.get("drafter.weights").ok and _int((snap.value("drafter.weights") or {}).get("bytes")):
        draft_tp = _int(spec.get("draft_tensor_parallel_size")) or tp
        draft_per_gpu = snap.value("drafter.weights")["bytes"] / max(1, draft_tp)
        dcfg = _config(snap, "drafter")
        if dcfg:
            draft_kv = _kv_per_token(dcfg, draft_tp, 1, _kv_bytes(snap, cfg))
    overhead = OVERHEAD_EAGER if args.get("--enforce-eager") is True else OVERHEAD
    kv = _kv_per_token(cfg, tp, pp, _kv_bytes(snap, cfg)) if cfg else None
    out = dict(plan)
    out.update(weights_total=weights["bytes"], weights_per_gpu=per_gpu, drafter_per_gpu=draft_per_gpu, overhead=overhead,
               kv=kv, draft_kv=draft_kv, notes=notes, tp=tp, pp=pp)
    return out, ""


def _kv_needed(plan: Dict[str, Any], tokens: int) -> int:
    need = 0
    for kv in (plan.get("kv"), plan.get("draft_kv")):
        if not kv:
            continue
        need += kv["full"] * tokens
        if kv["sliding"]:
            window = kv["window"] or tokens
            need += kv["sliding"] * min(tokens, window)
    return need


def _vllm_words(words: str, gpu: Dict[str, Any], util: float) -> str:
    """The installed vLLM's own message (its f-string, read from its source by vllm_memory) with this
    GPU's numbers, formatted as vLLM formats them (round(bytes / GiB, 2); the fraction as given)."""
    values = {"device": f"cuda:{gpu['cuda']}", "free": round(gpu["free"] / GIB, 2), "total": round(gpu["total"] / GIB, 2),
              "utilization": util, "requested": round(gpu["budget"] / GIB, 2), "other": "…"}
    try:
        return words.format(**values)
    except (KeyError, IndexError, ValueError):
        return (f"Free memory on device {values['device']} ({values['free']}/{values['total']} GiB) on startup is less than desired "
                f"GPU memory utilization ({util}, {values['requested']} GiB)")


def _holders(gpu: Dict[str, Any]) -> str:
    procs = [p for p in gpu.get("processes") or [] if isinstance(p, dict)]
    if not procs:
        return ""
    parts = []
    for proc in procs:
        size = f" ({gib(proc['used_memory'])})" if _int(proc.get("used_memory")) else ""
        parts.append(f"PID {proc.get('pid')}{size}")
    return "; held by " + ", ".join(parts)


@rule("GD708", "gpu-memory-utilization-exceeds-free", severity=ERROR, area="launch", applies=_applies)
def gpu_memory_utilization_exceeds_free(snap):
    """`--gpu-memory-utilization` × total memory is more than is free on a GPU: vLLM refuses to start.

    ## Why
    `--gpu-memory-utilization` is a fraction of the GPU's *total* memory that vLLM wants for
    itself, and it must be free when the worker starts. vLLM checks right after creating the
    CUDA context and raises "ValueError: Free memory on device cuda:N (F/T GiB) on startup is
    less than desired GPU memory utilization (U, R GiB). Decrease GPU memory utilization or
    reduce GPU memory used by other processes." Memory held by another process — often a
    stale engine from the last launch (GD601), a notebook, or a process in another container
    (GD604) — is the usual cause. gpudoctor reproduces the check with this machine's numbers:
    total as CUDA counts it (NVML total minus the driver's reservation), NVML free memory
    now; the CUDA context and NCCL take roughly another 0.5 GiB before vLLM measures, so a
    budget within that of the free memory is reported as marginal.

    What the installed release does is read from its source (gpudoctor/probes/launch/vllm_memory.py),
    never assumed: the default fraction (`CacheConfig.gpu_memory_utilization`: 0.9 up to 0.11,
    0.92 in 0.20 and 0.33), the message (its f-string in `request_memory`,
    vllm/v1/worker/utils.py; 0.11 words it without the device), and whether the check runs.
    vLLM 0.34.0 turns the extensible KV cache on by default on CUDA (unless `--kv-cache-memory-bytes`,
    `--num-gpu-blocks-override`, elastic EP or some KV connectors turn it off,
    `VllmConfig._resolve_extensible_kv_cache`), resolves an unset fraction to 1.0 with it
    (`CacheConfig.resolved_gpu_memory_utilization`) and raises only `and not
    cache_config.enable_extensible_kv_cache`: with it on there is no such error, and this rule
    does not apply. 0.8.5 has no such check.

    ## Fix
    Stop the processes that hold the memory if they are stale (`gpudoctor fix` for stale
    serving processes; GD302/GD601/GD604 name them), or lower `--gpu-memory-utilization` to
    what is free (the value that fits is suggested).

    ## References
    - vllm/v1/worker/utils.py `request_memory` (0.20+), vllm/v1/worker/gpu_worker.py
      `init_device` (0.11); vllm/config/cache.py `CacheConfig`; vllm/config/vllm.py
      `_resolve_extensible_kv_cache` (0.34):
      https://github.com/vllm-project/vllm/blob/main/vllm/v1/worker/utils.py,
      https://github.com/vllm-project/vllm/blob/main/vllm/config/cache.py
    - https://github.com/vllm-project/vllm/issues/20305,
      https://github.com/vllm-project/vllm/issues/55510,
      https://github.com/vllm-project/vllm/issues/42017.
    """
    decided_fact = snap.get("launch.vllm.memory")
    if not decided_fact.ok or not isinstance(decided_fact.value, dict):
        return Unknown(f"what the installed vLLM does with GPU memory at startup is not read ({decided_fact.describe()})")
    decided = decided_fact.value
    if decided.get("check_runs") is False:
        return NotApplicable(f"this vLLM does not run its free-memory check for this command: {decided.get('check_why')}")
    if decided.get("check_runs") is None:
        return Unknown(str(decided.get("check_why") or "whether this vLLM checks free memory at startup is not known"))
    plan, why = _memory_plan(snap)
    if plan is None:
        return Unknown(why)
    util = plan["util"]
    if _num(_args(snap).get("--gpu-memory-utilization")) is None and _num(decided.get("utilization")) is None:
        return Unknown(f"the default --gpu-memory-utilization of this vLLM is not read ({decided.get('utilization_from')})")
    if not 0 < util <= 1:
        return Fail(f"--gpu-memory-utilization {util} is outside (0, 1]; vLLM refuses it",
                    [("launch.args.--gpu-memory-utilization", util)], Fix("Give a fraction such as 0.9."))
    words = str(decided.get("words") or "")
    fails = []
    for gpu in plan["gpus"]:
        free = gpu["free"]
        if free is None:
            continue
        total, budget = gpu["total"], gpu["budget"]
        fits = math.floor((free - CONTEXT) / total * 100) / 100 if total else 0
        evidence = [f"gpu.{gpu['index']}.memory_total", f"gpu.{gpu['index']}.memory_free", f"gpu.{gpu['index']}.memory_reserved",
                    f"gpu.{gpu['index']}.processes", ("launch.args.--gpu-memory-utilization", util)]
        commands = ["nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv", "gpudoctor fix  # stops stale serving processes (GD601)"]
        if fits > 0.05:
            commands.append(_command_with(snap, "--gpu-memory-utilization", f"{fits:.2f}"))
        if free < budget:
            text = _vllm_words(words, gpu, util)
            fails.append(Fail(
                f"GPU {gpu['index']} ({_gpu_name(snap, gpu['index'])}): vLLM will refuse to start with: \"ValueError: {text}\""
                f"{_holders(gpu)} (see GD302/GD601/GD604 for who holds it; {decided.get('where')}, --gpu-memory-utilization from "
                f"{'the command' if _num(_args(snap).get('--gpu-memory-utilization')) is not None else decided.get('utilization_from')})",
                evidence + ["launch.vllm.memory"],
                Fix("Free the GPU memory others hold, or ask for no more than is free.", commands, "disruptive" if gpu.get("processes") else "safe"),
                subject=f"GPU {gpu['index']}",
            ))
        elif free - CONTEXT < budget:
            fails.append(Fail(
                f"GPU {gpu['index']}: {gib(budget)} wanted ({util} × {gib(total)}), {gib(free)} free now: after the CUDA context and "
                f"NCCL (~{gib(CONTEXT)}) vLLM may find less free than it wants and refuse to start{_holders(gpu)}",
                evidence,
                Fix("Leave some headroom.", commands),
                subject=f"GPU {gpu['index']}",
                severity=WARNING,
            ))
    return fails


@rule("GD709", "weights-exceed-memory-budget", severity=ERROR, area="launch")
def weights_exceed_memory_budget(snap):
    """The model's weights per GPU do not fit in the `--gpu-memory-utilization` budget.

    ## Why
    Each GPU of the TP × PP group holds about 1/(TP × PP) of the weights (plus its share of a
    speculative drafter). If that alone is more than `--gpu-memory-utilization` × total
    memory, loading ends in "CUDA out of memory" or "No available memory for the cache
    blocks" after minutes of startup. Weight bytes are the tensors' bytes from the
    safetensors headers (exact); the split per GPU is an estimate (norms and some embeddings
    are replicated).

    ## Fix
    Raise the tensor-parallel size, use a quantized checkpoint (or `--quantization fp8` on a
    GPU with cc ≥ 8.9), offload some weights (`--cpu-offload-gb`), or use bigger GPUs.

    ## References
    - huggingface/safetensors format; vLLM docs "Conserving memory" (TP, quantization, cpu
      offload).
    - https://docs.vllm.ai/en/latest/configuration/conserving_memory/
    """
    plan = _weights_plan_or_outcome(snap)
    if not isinstance(plan, dict):
        return plan
    need = plan["weights_per_gpu"] + plan["drafter_per_gpu"]
    gpu = min(plan["gpus"], key=lambda g: g["budget"])
    if need <= gpu["budget"]:
        return None
    tp = plan["tp"]
    suggested = tp
    while suggested < 64 and (plan["weights_total"] / (suggested * plan["pp"]) + plan["drafter_per_gpu"]) > gpu["budget"] * 0.8:
        suggested *= 2
    drafter = f" + {gib(plan['drafter_per_gpu'])} drafter" if plan["drafter_per_gpu"] else ""
    return Fail(
        f"weights need about {gib(need)} per GPU ({gib(plan['weights_total'])} / TP {tp} × PP {plan['pp']}{drafter}), more than the "
        f"{gib(gpu['budget'])} budget of GPU {gpu['index']} ({plan['util']} × {gib(gpu['total'])}): loading runs out of memory",
        ["model.weights", ("launch.args.--tensor-parallel-size", tp), f"gpu.{gpu['index']}.memory_total",
         ("launch.args.--gpu-memory-utilization", plan["util"])],
        Fix("Spread the weights over more GPUs, quantize, or offload.",
            [_command_with(snap, "--tensor-parallel-size", suggested) + "  # needs that many GPUs"]),
    )


@rule("GD710", "kv-cache-too-small-for-max-model-len", severity=ERROR, area="launch")
def kv_cache_too_small_for_max_model_len(snap):
    """Estimated: after the weights there is not enough memory for one request of `--max-model-len` tokens.

    ## Why
    vLLM allocates the KV cache from what is left of the budget after weights, activations
    and CUDA graphs, and refuses to start when one sequence of max_model_len tokens does not
    fit: "To serve at least one request with the model's max seq len (N), (X GiB KV cache is
    needed, which is larger than the available KV cache memory (Y GiB)." Without
    `--max-model-len` it takes the model's full context (262 144 tokens for recent Qwen
    models), which rarely fits next to big weights. This is an **estimate**: KV bytes per
    token = 2 × attention layers × KV heads per GPU × head size × dtype bytes (MLA: the latent
    size; sliding-window layers capped at the window; linear-attention layers hold a fixed
    state and are not counted), plus the drafter's layers; activations, CUDA graphs and the
    CUDA context are an allowance of about 2 GiB (vLLM measures them at startup). A shortfall
    beyond 20 % is an error, a smaller one a warning.

    ## Fix
    Lower `--max-model-len` (the length that fits is suggested), raise
    `--gpu-memory-utilization` if memory is free, use `--kv-cache-dtype fp8` (cc ≥ 8.9), or
    more tensor parallelism; `--max-model-len auto` (recent vLLM) picks what fits.

    ## References
    - vLLM `vllm/v1/core/kv_cache_utils.py` (`check_enough_kv_cache_memory`, the message
      above).
    - https://github.com/vllm-project/vllm/blob/main/vllm/v1/core/kv_cache_utils.py
    - https://docs.vllm.ai/en/latest/configuration/conserving_memory/
    """
    plan = _weights_plan_or_outcome(snap)
    if not isinstance(plan, dict):
        return plan
    cfg = _config(snap) or {}
    tokens, how = _max_model_len(snap, cfg)
    if tokens is None:
        return NotApplicable(how) if "auto" in how else Unknown(how)
    if not plan.get("kv"):
        return Unknown("config.json lacks the layer / KV-head / head-size fields needed for the estimate")
    gpu = min(plan["gpus"], key=lambda g: g["budget"])
    room = gpu["budget"] - plan["weights_per_gpu"] - plan["drafter_per_gpu"] - plan["overhead"]
    need = _kv_needed(plan, tokens)
    if need <= room:  # the headroom, for -v (issue 31: a user could not see it when the model fits)
        return Passed(f"estimated: a {tokens}-token request needs about {gib(need)} of KV cache per GPU; about "
                      f"{gib(room)} is left on GPU {gpu['index']} after the weights ({gib(plan['weights_per_gpu'])})")
    kv = plan["kv"]
    per_token = kv["full"] + (plan["draft_kv"] or {}).get("full", 0)
    fit = int(max(0, room) // per_token) if per_token else 0
    fit_rounded = (fit // 1024) * 1024
    layers = f"{kv['layers_full']} attention layer(s)" + (f" + {kv['layers_sliding']} sliding-window" if kv["layers_sliding"] else "") \
        + (f" (+ {kv['layers_other']} linear/other layers with a fixed state, not counted)" if kv["layers_other"] else "")
    drafter = " + the drafter's layers" if plan.get("draft_kv") else ""
    detail = (f"estimated: one {tokens}-token request ({how}) needs about {gib(need)} of KV cache per GPU "
              f"({per_token / 1024:.0f} KiB per token for {layers}, {kv['shape']}, {kv['bytes']} byte(s) per value{drafter}), but only about "
              f"{gib(max(0, room))} is left on GPU {gpu['index']} ({gib(gpu['budget'])} budget − {gib(plan['weights_per_gpu'])} weights"
              + (f" − {gib(plan['drafter_per_gpu'])} drafter" if plan["drafter_per_gpu"] else "")
              + f" − ~{gib(plan['overhead'])} activations/CUDA graphs allowance)")
    if room <= 0:
        detail += "; vLLM: \"No available memory for the cache blocks\""
    else:
        detail += f"; about {fit} tokens fit"
    commands = []
    if fit_rounded >= 1024:
        commands.append(_command_with(snap, "--max-model-len", fit_rounded))
    commands.append(_command_with(snap, "--max-model-len", "auto") + "  # recent vLLM: the longest that fits")
    severity = ERROR if room <= 0 or need > room * KV_MARGIN else WARNING
    return Fail(
        detail,
        ["model.config", "model.weights", ("launch.args.--max-model-len", _args(snap).get("--max-model-len")),
         ("launch.args.--kv-cache-dtype", _args(snap).get("--kv-cache-dtype", "auto")),
         ("launch.args.--gpu-memory-utilization", plan["util"]), ("KV bytes per token per GPU (estimate)", per_token)],
        Fix("Ask for a context that fits (or more memory for the KV cache).", commands),
        severity=severity,
    )


@rule("GD724", "sglang-mem-fraction-static-out-of-range", severity=ERROR, area="launch")
def sglang_mem_fraction_static_out_of_range(snap):
    """SGLang's `--mem-fraction-static` is not a fraction: at most 0 or above 1.

    ## Why
    SGLang's parser takes any float here and checks nothing before it loads the weights. Its KV
    cache gets what is free after loading, less the memory that was free before loading times
    (1 − `--mem-fraction-static`) (`_profile_available_bytes` in
    `srt/mem_cache/kv_cache_configurator.py`, 0.5.23). At 0 or below that is never positive, and
    the server stops after loading the weights with "Loaded weights leave no GPU memory for the KV
    cache under --mem-fraction-static=…". Above 1 the KV cache is sized from more memory than is
    free, and allocating it fails with CUDA out of memory. Either way minutes of loading are lost.

    ## Fix
    Give a fraction in (0, 1]: SGLang's own choice is made when the flag is left out
    (`srt/arg_groups/memory_hook.py`), and 0.8-0.9 are the usual values by hand.

    ## References
    - https://github.com/sgl-project/sglang/blob/main/python/sglang/srt/mem_cache/kv_cache_configurator.py
    - https://github.com/sgl-project/sglang/blob/main/python/sglang/srt/arg_groups/fields/schedule.py
      (`mem_fraction_static`: "The fraction of the memory used for static allocation (model
      weights and KV cache memory pool)")
    """
    if snap.value("launch.kind") != "sglang-serve":
        return _applies(snap) or NotApplicable("not an SGLang server command")
    memory = snap.value("launch.sglang_memory")
    if not isinstance(memory, dict):
        return Unknown(f"the command's --mem-fraction-static was not read ({snap.get('launch.sglang_memory').describe()})")
    value = memory.get("value")
    if not memory.get("defined"):
        return Unknown("this SGLang's --mem-fraction-static definition could not be read from its source")
    if memory.get("typed") is None:
        return None  # SGLang chooses it (memory_hook.py)
    if not isinstance(value, (int, float)) or math.isnan(value):
        return Unknown(f"--mem-fraction-static {memory.get('typed')!r} is not a number (SGLang's parser refuses it)")
    if 0 < value <= 1:
        return None
    why = ("leaves no GPU memory for the KV cache: SGLang stops after loading the weights" if value <= 0
           else "sizes the KV cache from more memory than is free: allocating it fails with CUDA out of memory")
    return Fail(f"--mem-fraction-static {memory['typed']} {why}", [("launch.sglang_memory", memory)],
                Fix("Give a fraction in (0, 1], or leave the flag out and let SGLang choose.",
                    [_command_with(snap, "--mem-fraction-static", 0.85)]))
