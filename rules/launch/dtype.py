"""GD711-GD714: dtype, FP8, quantization and attention backend against the GPUs' compute capability."""

from __future__ import annotations

from typing import Optional

from gpudoctor.rule import ERROR, WARNING, Fail, Fix, NotApplicable, Unknown, rule
from .common import _applies, _args, _cc_int, _command_with, _config, _gpu_cc, _gpu_name, _group, _int, _vllm_version
from .memory import _dtype

# Attention backends and the compute capabilities they run on (vLLM docs,
# https://docs.vllm.ai/en/latest/design/attention_backends.html): (lowest, highest) as major*10+minor, None = open.
BACKEND_CC = {
    "FLASH_ATTN": (80, None),  # vendored FA2 needs >= 8.0 ("FA2 is only supported on devices with compute capability >= 8")
    "FLASH_ATTN_MLA": (90, 99),
    "FLASHMLA": (90, 109),
    "FLASHMLA_SPARSE": (90, 109),
    "CUTLASS_MLA": (100, 109),
    "FLASHINFER_MLA": (100, 109),
    "FLASHINFER": (75, None),
}
FA_VERSION_CC = {2: (80, None), 3: (90, 99), 4: (90, 119)}  # vllm_flash_attn/flash_attn_interface.py

# When the installed vLLM's source is not available: get_min_capability() of the common
# quantization configs in one stored vLLM version (vllm/model_executor/layers/
# quantization/*.py, 0.19.0 wheel).
QUANT_MIN_CC_FALLBACK = {"awq": 75, "awq_marlin": 75, "gptq": 60, "gptq_marlin": 75, "fp8": 75, "compressed-tensors": 70,
                         "bitsandbytes": 70, "gguf": 60, "mxfp4": 80, "modelopt": 89, "modelopt_fp4": 75, "fbgemm_fp8": 80,
                         "experts_int8": 80, "moe_wna16": 70, "machete": 90}

@rule("GD711", "dtype-unsupported-by-gpu", severity=ERROR, area="launch", applies=_applies)
def dtype_unsupported_by_gpu(snap):
    """The model's dtype (bfloat16) needs a GPU with compute capability ≥ 8.0.

    ## Why
    bfloat16 arithmetic needs Ampere (cc 8.0) or newer. With `--dtype bfloat16` on a Turing or
    Volta GPU vLLM stops: "Bfloat16 is only supported on GPUs with compute capability of at
    least 8.0. Your Tesla T4 GPU has compute capability 7.5. You can use float16 instead by
    explicitly setting the `dtype` flag in CLI, for example: --dtype=half." With `--dtype auto`
    and a bf16 checkpoint, recent vLLM falls back to float16 on its own (older versions raise
    the same error); float16 has a smaller range than bfloat16, and some bf16-trained models
    overflow in it.

    ## Fix
    `--dtype half` on these GPUs (and check outputs for NaN/garbage), or serve on cc ≥ 8.0.

    ## References
    - https://github.com/vllm-project/vllm/issues/946,
      https://github.com/vllm-project/vllm/issues/1157,
      https://github.com/vllm-project/vllm/issues/2374.
    """
    group, why = _group(snap)
    if group is None:
        return Unknown(why)
    cfg = _config(snap)
    explicit = str(_args(snap).get("--dtype") or "auto").lower()
    dtype = _dtype(snap, cfg)
    if dtype is None:
        return Unknown(f"the model's dtype is unknown ({snap.get('model.config').describe()})")
    if dtype != "bfloat16":
        return None
    low = [(i, cc) for i in group for cc in [_gpu_cc(snap, i)] if cc and _cc_int(cc) < 80]
    if not low:
        return None
    index, cc = low[0]
    text = (f"Bfloat16 is only supported on GPUs with compute capability of at least 8.0. Your {_gpu_name(snap, index)} GPU has "
            f"compute capability {cc[0]}.{cc[1]}. You can use float16 instead by explicitly setting the`dtype` flag in CLI, for "
            "example: --dtype=half.")
    evidence = [f"gpu.{index}.compute_capability", ("launch.args.--dtype", explicit), ("model.config.torch_dtype", (cfg or {}).get("torch_dtype"))]
    fix = Fix("Serve in float16 on this GPU.", [_command_with(snap, "--dtype", "half")])
    if explicit != "auto":
        return Fail(f"GPU {index}: vLLM stops with \"ValueError: {text}\"", evidence, fix)
    return Fail(f"GPU {index} ({_gpu_name(snap, index)}, cc {cc[0]}.{cc[1]}) has no bfloat16 and the checkpoint is bfloat16: recent vLLM "
                "casts it to float16 (smaller range: watch for NaN or garbage), older versions stop with the bfloat16 error",
                evidence, fix, severity=WARNING)


def _fp8_weights(snap) -> Optional[str]:
    cfg = _config(snap) or {}
    quant = cfg.get("quantization") if isinstance(cfg.get("quantization"), dict) else {}
    method = str(quant.get("quant_method") or "").lower()
    if method in ("fp8", "fbgemm_fp8") or str(quant.get("fmt") or "").lower().startswith(("e4m3", "e5m2", "float8")):
        return f"an FP8 checkpoint (quant_method {method or quant.get('fmt')})"
    if any(str(t).startswith("float8") for t in quant.get("weight_types") or []):
        return "an FP8 checkpoint (compressed-tensors float 8-bit weights)"
    if str(quant.get("quant_algo") or "").upper().startswith("FP8"):
        return f"an FP8 checkpoint (ModelOpt {quant.get('quant_algo')})"
    if str(_args(snap).get("--quantization") or "").lower() == "fp8":
        return "--quantization fp8 (online FP8)"
    weights = snap.value("model.weights") or {}
    dtypes = weights.get("dtypes") if isinstance(weights, dict) else None
    if isinstance(dtypes, dict) and dtypes:
        fp8 = sum(v for k, v in dtypes.items() if str(k).startswith("F8"))
        if fp8 * 2 > sum(dtypes.values()):
            return "FP8 weights (safetensors dtype F8_*)"
    return None


@rule("GD712", "fp8-without-native-support", severity=WARNING, area="launch", applies=_applies)
def fp8_without_native_support(snap):
    """FP8 weights or an FP8 KV cache on a GPU without FP8 tensor cores (compute capability < 8.9).

    ## Why
    FP8 matrix math (W8A8) needs Ada (8.9), Hopper (9.0) or newer. On Ampere and Turing vLLM
    runs FP8 checkpoints through FP8 Marlin as weight-only W8A16 kernels (dequantize to 16-bit
    on the fly): it works, but it is not the FP8 speed-up the checkpoint was chosen for, and
    activation scales are ignored. `--kv-cache-dtype fp8` stores the cache in 8 bits on any
    GPU but computes attention in 16-bit there, and backends that cannot read an FP8 cache
    on that GPU are skipped or refuse. Below the minimum capability of the method vLLM refuses
    outright; GD713 reports that case.

    ## Fix
    Prefer a 16-bit or INT4/INT8 (AWQ, GPTQ) checkpoint on cc < 8.9, or serve on Ada/Hopper;
    drop `--kv-cache-dtype fp8` unless the memory is needed.

    ## References
    - vLLM docs features/quantization/fp8.md and quantization/README.md.
    - https://docs.vllm.ai/en/latest/features/quantization/fp8/
    """
    group, why = _group(snap)
    if group is None:
        return Unknown(why)
    weights = _fp8_weights(snap)
    kv = str(_args(snap).get("--kv-cache-dtype") or "auto").lower()
    kv_fp8 = kv.startswith("fp8")
    if not weights and not kv_fp8:
        return None
    low = [(i, cc) for i in group for cc in [_gpu_cc(snap, i)] if cc and _cc_int(cc) < 89]
    if not low:
        return None
    index, cc = low[0]
    fails = []
    if weights:
        minimum = (_quant_min(snap, "fp8") or 75)
        if _cc_int(cc) >= minimum:
            fails.append(Fail(
                f"{weights} on GPU {index} ({_gpu_name(snap, index)}, cc {cc[0]}.{cc[1]}): no FP8 tensor cores below 8.9, so vLLM "
                "runs it as weight-only FP8 Marlin (16-bit compute): slower than on Ada/Hopper",
                [f"gpu.{index}.compute_capability", "model.config"],
                Fix("Use a 16-bit or AWQ/GPTQ checkpoint on this GPU, or an Ada/Hopper GPU for FP8."),
                subject="weights",
            ))
    if kv_fp8:
        fails.append(Fail(
            f"--kv-cache-dtype {kv} on GPU {index} (cc {cc[0]}.{cc[1]}): the cache is stored in FP8 but attention computes in "
            "16-bit here; backends that cannot read an FP8 cache on this GPU are skipped or refuse (e.g. a forced FLASH_ATTN)",
            [f"gpu.{index}.compute_capability", ("launch.args.--kv-cache-dtype", kv)],
            Fix("Keep the 16-bit KV cache unless the memory is needed.", [_command_with(snap, "--kv-cache-dtype", "auto")]),
            subject="kv cache",
        ))
    return fails


def _quant_min(snap, method: str) -> Optional[int]:
    table = snap.value("launch.vllm.quantization")
    if isinstance(table, dict) and method in table:
        return _int(table[method])
    return QUANT_MIN_CC_FALLBACK.get(method)


@rule("GD713", "quantization-unsupported-by-gpu", severity=ERROR, area="launch", applies=_applies)
def quantization_unsupported_by_gpu(snap):
    """The quantization method needs a newer GPU than the one the engine runs on.

    ## Why
    Each quantization method in vLLM declares a minimum compute capability
    (`get_min_capability()`: AWQ 7.5, Marlin kernels 7.5–8.0, ModelOpt FP8 8.9, FP4 methods
    10.0 …) and vLLM checks it before loading: "The quantization method M is not supported for
    the current GPU. Minimum capability: X. Current capability: Y." gpudoctor reads the
    minimum from the installed vLLM's source (the value changes between versions), or a
    table from one vLLM version when the source is not available.

    ## Fix
    Use a checkpoint quantized with a method this GPU supports (or the 16-bit original), or
    serve on a newer GPU.

    ## References
    - vLLM `vllm/config/vllm.py` (`_get_quantization_config`), quantization configs'
      `get_min_capability` in vllm/model_executor/layers/quantization/
    - https://docs.vllm.ai/en/latest/features/quantization/
    """
    group, why = _group(snap)
    if group is None:
        return Unknown(why)
    cfg = _config(snap) or {}
    quant = cfg.get("quantization") if isinstance(cfg.get("quantization"), dict) else {}
    method = str(_args(snap).get("--quantization") or quant.get("quant_method") or "").lower()
    if not method:
        if snap.get("model.config").ok:
            return None
        return Unknown(f"the model's quantization is unknown ({snap.get('model.config').describe()})")
    minimum = _quant_min(snap, method)
    if minimum is None:
        return Unknown(f"no minimum capability known for quantization method {method!r}")
    fails = []
    for index in group:
        cc = _gpu_cc(snap, index)
        if cc and _cc_int(cc) < minimum:
            source = "the installed vLLM's source" if isinstance(snap.value("launch.vllm.quantization"), dict) and method in snap.value("launch.vllm.quantization") else "gpudoctor's table (vLLM source not read)"
            fails.append(Fail(
                f"GPU {index} ({_gpu_name(snap, index)}): vLLM stops with \"The quantization method {method} is not supported for the "
                f"current GPU. Minimum capability: {minimum}. Current capability: {_cc_int(cc)}.\" (minimum from {source})",
                [f"gpu.{index}.compute_capability", ("quantization method", method), ("minimum capability", minimum)],
                Fix("Use a checkpoint in a format this GPU supports, or a newer GPU."),
                subject=f"GPU {index}",
            ))
            break
    return fails


@rule("GD714", "attention-backend-unsupported", severity=ERROR, area="launch", applies=_applies)
def attention_backend_unsupported(snap):
    """The attention backend chosen for the launch cannot run on these GPUs (or does not exist here).

    ## Why
    A forced backend is validated against the GPU: FLASH_ATTN (vLLM's FA2) needs cc ≥ 8.0,
    FA3 (`flash_attn_version` 3) only 9.x, FLASHMLA 9.x–10.x, CUTLASS_MLA and FLASHINFER_MLA
    10.x; a mismatch fails with "Selected backend … is not valid for this configuration.
    Reason: ['compute capability not supported']" or "FlashAttention only supports Ampere GPUs
    or newer". A name the installed vLLM does not have fails with "Unknown attention backend".
    The old environment variable `VLLM_ATTENTION_BACKEND` was deprecated around 0.14 and is
    silently ignored by versions whose vllm/envs.py no longer reads it.

    ## Fix
    Drop the override (vLLM picks a backend the GPU supports: FLASH_ATTN on 8.x–9.x,
    FLASHINFER on 10.x, TRITON_ATTN otherwise) or choose one from the list for this GPU; set it
    with `--attention-backend NAME` instead of the environment variable.

    ## References
    - vLLM docs/design/attention_backends.md; vllm/vllm_flash_attn/flash_attn_interface.py;
      https://github.com/vllm-project/vllm/issues/50292.
    """
    args = _args(snap)
    attention = args.get("--attention-config") if isinstance(args.get("--attention-config"), dict) else {}
    env = snap.value("env") or {}
    backend = args.get("--attention-backend") or attention.get("backend")
    source = "--attention-backend" if args.get("--attention-backend") else "--attention-config backend"
    fa_version = _int(attention.get("flash_attn_version"))
    fails = []
    markers = snap.value("launch.vllm.markers") or {}
    if env.get("VLLM_ATTENTION_BACKEND") and markers.get("reads_vllm_attention_backend_env") is False:
        fails.append(Fail(
            f"VLLM_ATTENTION_BACKEND={env['VLLM_ATTENTION_BACKEND']} is ignored by {_vllm_version(snap)} (its vllm/envs.py no longer "
            "reads it): the backend you meant is not the one you get",
            [("env.VLLM_ATTENTION_BACKEND", env["VLLM_ATTENTION_BACKEND"]), "launch.vllm"],
            Fix("Use the flag.", [_command_with(snap, "--attention-backend", env["VLLM_ATTENTION_BACKEND"])]),
            subject="VLLM_ATTENTION_BACKEND", severity=WARNING,
        ))
        if not backend:
            return fails
    elif not backend and env.get("VLLM_ATTENTION_BACKEND"):
        backend, source = env["VLLM_ATTENTION_BACKEND"], "VLLM_ATTENTION_BACKEND"
    if not backend and not fa_version:
        return fails or NotApplicable("no attention backend forced (vLLM chooses one for the GPU)")
    name = str(backend).upper() if backend else None
    known = snap.value("launch.vllm.attention_backends")
    if name and name != "AUTO" and isinstance(known, list) and name not in known:
        fails.append(Fail(
            f"{source} {backend!r}: {_vllm_version(snap)} has no such backend (\"Unknown attention backend\"); it has "
            + ", ".join(k for k in known if not k.startswith(("ROCM", "CPU", "XPU", "IPEX", "PALLAS", "HPU", "AMX")))[:300],
            [("launch.args." + source, backend), "launch.vllm.attention_backends"],
            Fix("Use a backend this vLLM has, or let vLLM choose.", [_command_with(snap, "--attention-backend", "auto")]),
            subject=str(backend),
        ))
        return fails
    group, why = _group(snap)
    if group is None:
        return fails or Unknown(why)
    bounds = BACKEND_CC.get(name or "")
    if name == "FLASH_ATTN" and fa_version in FA_VERSION_CC:
        bounds = FA_VERSION_CC[fa_version]
    elif name is None and fa_version in FA_VERSION_CC:
        bounds, name = FA_VERSION_CC[fa_version], f"FlashAttention {fa_version}"
    if not bounds:
        return fails
    low, high = bounds
    for index in group:
        cc = _gpu_cc(snap, index)
        if cc is None:
            continue
        value = _cc_int(cc)
        if value < low or (high is not None and value > high):
            span = f"{low / 10:.1f}" + (f"–{high / 10:.1f}" if high else "+")
            fails.append(Fail(
                f"{source} {name}" + (f" (flash_attn_version {fa_version})" if fa_version and name == "FLASH_ATTN" else "")
                + f" needs compute capability {span}; GPU {index} ({_gpu_name(snap, index)}) is {cc[0]}.{cc[1]}: vLLM refuses the "
                "backend (\"compute capability not supported\")",
                [f"gpu.{index}.compute_capability", ("launch.args." + source, backend)],
                Fix("Let vLLM choose, or pick a backend for this GPU (TRITON_ATTN runs everywhere).",
                    [_command_with(snap, "--attention-backend", "TRITON_ATTN" if value < 80 else "auto")]),
                subject=f"GPU {index}",
            ))
            break
    return fails
