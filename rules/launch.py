"""GD7xx: the launch command (``gpudoctor preflight -- vllm serve MODEL …``) against this machine.

The facts come from gpudoctor/launch/probe.py (``launch.*``: the parsed command and what the
installed vLLM's source defines; ``model.*`` / ``drafter.*``: config.json and safetensors
headers) and from the machine probes or a replayed snapshot (``gpu.*``, ``env``,
``processes.*``). Preflight overlays the command's own ``NAME=value`` assignments on ``env``,
so ``CUDA_VISIBLE_DEVICES=0,1 vllm serve …`` is judged with the GPUs it will see.

Memory numbers are estimates and say so: weights come from the safetensors headers (exact
bytes on disk), the KV cache per token from config.json (2 × layers × KV heads × head size ×
dtype bytes, per GPU), and what vLLM takes for activations, CUDA graphs and the CUDA context
is an allowance (``OVERHEAD``), not a measurement: vLLM profiles the real value at startup.
"""

from __future__ import annotations

import math
import shlex
from typing import Any, Dict, List, Optional, Tuple

from gpudoctor.rule import ERROR, WARNING, Fail, Fix, NotApplicable, Unknown, rule

GIB = 1 << 30
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
DEFAULT_UTILIZATION = 0.9  # vLLM CacheConfig.gpu_memory_utilization
# The KV estimate is rough; "will not fit" only above this factor, "probably not" below it.
KV_MARGIN = 1.2

FULL_ATTENTION = {"full_attention", "attention", "global_attention", "full", "global"}
SLIDING_ATTENTION = {"sliding_attention", "sliding_window", "local_attention", "local", "sliding", "chunked_attention"}

DTYPE_NAMES = {"half": "float16", "float16": "float16", "fp16": "float16", "bfloat16": "bfloat16", "bf16": "bfloat16",
               "float": "float32", "float32": "float32", "fp32": "float32"}

# Attention backends and the compute capabilities they run on (facts.md §2.2, §2.3, §4.8;
# vLLM docs/design/attention_backends.md): (lowest, highest) as major*10+minor, None = open.
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
# quantization configs in one stored vLLM version (facts.md §2.2; vllm/model_executor/layers/
# quantization/*.py, 0.19.0 wheel).
QUANT_MIN_CC_FALLBACK = {"awq": 75, "awq_marlin": 75, "gptq": 60, "gptq_marlin": 75, "fp8": 75, "compressed-tensors": 70,
                         "bitsandbytes": 70, "gguf": 60, "mxfp4": 80, "modelopt": 89, "modelopt_fp4": 75, "fbgemm_fp8": 80,
                         "experts_int8": 80, "moe_wna16": 70, "machete": 90}

SPEC_WITH_AUX_LAYERS = {"dflash", "eagle3", "dspark", "extract_hidden_states"}
SPEC_WITHOUT_DRAFTER = {"ngram", "ngram_gpu", "suffix"}


# --- shared helpers ---------------------------------------------------------------------------------
def _applies(snap) -> Optional[NotApplicable]:
    kind = snap.value("launch.kind")
    if kind is None:
        return NotApplicable("no launch command (run: gpudoctor preflight -- vllm serve MODEL …)")
    if kind not in ("vllm-serve", "vllm-api-server"):
        return NotApplicable(f"the launch command is not a vLLM server ({kind})")
    return None


def _args(snap) -> Dict[str, Any]:
    value = snap.value("launch.args")
    return value if isinstance(value, dict) else {}


def _int(value: Any, default: Optional[int] = None) -> Optional[int]:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _num(value: Any) -> Optional[float]:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def gib(nbytes: float) -> str:
    return f"{nbytes / GIB:.1f} GiB"


def _vllm_version(snap) -> str:
    info = snap.value("launch.vllm") or {}
    return f"vLLM {info.get('version')}" if info.get("version") else "the installed vLLM"


def _spec(snap) -> Dict[str, Any]:
    spec = _args(snap).get("--speculative-config")
    out = dict(spec) if isinstance(spec, dict) else {}
    args = _args(snap)
    for flag, key in (("--spec-method", "method"), ("--spec-model", "model"), ("--spec-tokens", "num_speculative_tokens")):
        if args.get(flag) is not None and key not in out:
            out[key] = args[flag]
    return out


def _config(snap, prefix: str = "model") -> Optional[Dict[str, Any]]:
    value = snap.value(f"{prefix}.config")
    return value if isinstance(value, dict) else None


def _command_with(snap, flag: str, value: Any = None) -> str:
    """The launch command with one flag set (replaced or appended; None: a switch), as a shell line."""
    argv = list((snap.value("launch.command") or {}).get("argv") or [])
    setting = [flag] if value is None else [flag, str(value)]
    out: List[str] = []
    i, replaced = 0, False
    while i < len(argv):
        word = argv[i]
        name = "--" + word[2:].split("=", 1)[0].replace("_", "-") if word.startswith("--") else word
        if name == flag:
            out += setting
            replaced = True
            takes_next = "=" not in word and i + 1 < len(argv) and not argv[i + 1].startswith("-")
            i += 2 if takes_next and value is not None else 1
            continue
        out.append(word)
        i += 1
    if not replaced:
        out += setting
    return " ".join(shlex.quote(w) for w in out)


def _gpu_cc(snap, index: int) -> Optional[Tuple[int, int]]:
    text = snap.value(f"gpu.{index}.compute_capability")
    try:
        major, minor = str(text).split(".")
        return int(major), int(minor)
    except (ValueError, AttributeError):
        return None


def _cc_int(cc: Tuple[int, int]) -> int:
    return cc[0] * 10 + cc[1]


def _gpu_name(snap, index: int) -> str:
    return str(snap.value(f"gpu.{index}.name") or "?")


# --- which GPUs the engine uses -----------------------------------------------------------------------
def _parallel(snap) -> Tuple[int, int, int]:
    args = _args(snap)
    tp = _int(args.get("--tensor-parallel-size"), 1) or 1
    pp = _int(args.get("--pipeline-parallel-size"), 1) or 1
    dp = _int(args.get("--data-parallel-size-local")) or _int(args.get("--data-parallel-size"), 1) or 1
    return tp, pp, dp


def _visible(snap) -> Optional[List[int]]:
    if not snap.get("gpu.count").ok:
        return None
    from .gpu import visible_gpus

    return visible_gpus(snap)


def _group(snap) -> Tuple[Optional[List[int]], str]:
    """(the GPUs one engine uses, why not when None): the first TP × PP visible ones."""
    visible = _visible(snap)
    if visible is None:
        return None, f"no GPU facts ({snap.get('gpu.count').describe()})"
    tp, pp, _ = _parallel(snap)
    world = tp * pp
    if world > len(visible):
        return None, f"TP × PP = {world} is more than the {len(visible)} visible GPU(s)"
    return visible[:world], ""


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
    util = DEFAULT_UTILIZATION if util is None else util
    gpus = []
    for position, index in enumerate(group):
        total = _int(snap.value(f"gpu.{index}.memory_total"))
        free = _int(snap.value(f"gpu.{index}.memory_free"))
        if total is None:
            return None, f"GPU {index}: total memory not read ({snap.get(f'gpu.{index}.memory_total').describe()})"
        reserved = _int(snap.value(f"gpu.{index}.memory_reserved"), 0) or 0
        cuda_total = total - reserved  # what cudaMemGetInfo calls total
        gpus.append({"index": index, "cuda": position, "total": cuda_total, "free": free, "budget": util * cuda_total,
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


def _holders(gpu: Dict[str, Any]) -> str:
    procs = [p for p in gpu.get("processes") or [] if isinstance(p, dict)]
    if not procs:
        return ""
    parts = []
    for proc in procs:
        size = f" ({gib(proc['used_memory'])})" if _int(proc.get("used_memory")) else ""
        parts.append(f"PID {proc.get('pid')}{size}")
    return "; held by " + ", ".join(parts)


# --- the rules ------------------------------------------------------------------------------------------
@rule("GD701", "launch-command-invalid", severity=ERROR, area="launch")
def launch_command_invalid(snap):
    """The launch command has values vLLM's argument parser refuses.

    ## Why
    vLLM parses its flags before anything else: a JSON-valued flag that is not valid JSON
    (`--speculative-config`, `--compilation-config`, `--attention-config` …), a number that is
    not a number (`--tensor-parallel-size two`), a flag without its value, or a second
    positional word makes `vllm serve` print a usage error and exit with status 2 — in a
    container restart loop, over and over. Shell quoting is the usual cause: JSON needs single
    quotes around it in a shell, and YAML / systemd lines often eat the inner double quotes.

    ## Fix
    Quote JSON with single quotes (`--speculative-config '{"method": "dflash", …}'`) or set
    keys one by one (`--speculative-config.method dflash`); give numbers as numbers.

    ## References
    - vLLM `FlexibleArgumentParser` (vllm/utils/argparse_utils.py): `--json-arg.key value`,
      underscores as dashes, `optional_type(json.loads)` for `--speculative-config`
      (vllm/engine/arg_utils.py).
    - research/facts.md §4.3 (speculative-config keys).
    """
    skip = _applies(snap)
    if skip:
        return skip
    errors = [e for e in snap.value("launch.errors") or [] if isinstance(e, dict)]
    if not errors:
        return None
    fails = []
    for item in errors:
        flag = item.get("flag") or "argument"
        value = item.get("value")
        shown = "" if value is None else f" {str(value)[:120]!r}"
        fix = Fix("Correct the value (JSON in single quotes in a shell, or one key per flag).",
                  ["--speculative-config '{\"method\": \"dflash\", \"model\": \"ORG/DRAFTER\", \"num_speculative_tokens\": 15}'"]
                  if flag in ("--speculative-config", "-sc") else [])
        fails.append(Fail(f"{flag}{shown}: {item.get('problem')}; vLLM's argument parser rejects it and exits with status 2",
                          [("launch.errors", item), "launch.command"], fix, subject=str(flag)))
    return fails


@rule("GD702", "launch-unknown-flag", severity=ERROR, area="launch")
def launch_unknown_flag(snap):
    """The launch command uses flags the installed vLLM does not define.

    ## Why
    `vllm serve` stops at once with "error: unrecognized arguments: --the-flag". Flags come and
    go between releases (`--task` became `--runner`, `VLLM_ATTENTION_BACKEND` became
    `--attention-backend`, `--speculative-model` moved into `--speculative-config`), so a
    command copied from a model card or written for another version fails on this one.
    gpudoctor reads the flags from the installed vLLM's own source (`add_argument` calls in
    vllm/engine/arg_utils.py and the entrypoints' cli_args.py, and the fields of the
    `FrontendArgs` dataclass that recent versions turn into flags); it never imports vLLM.

    ## Fix
    Use the flag this vLLM has (the closest one is suggested), remove it, or install the vLLM
    version the command was written for.

    ## References
    - vllm/engine/arg_utils.py `EngineArgs.add_cli_args`; vllm/entrypoints/openai/cli_args.py
      (`FrontendArgs`, `make_arg_parser`); vllm/utils/argparse_utils.py (FlexibleArgumentParser).
    - vllm-project/vllm serve docs ("vllm serve --help=all").
    """
    skip = _applies(snap)
    if skip:
        return skip
    fact = snap.get("launch.unknown_flags")
    if not fact.ok:
        return Unknown(fact.detail or "cannot check flags")
    unknown = [u for u in fact.value or [] if isinstance(u, dict)]
    if not unknown:
        return None
    version = _vllm_version(snap)
    fails = []
    for item in unknown:
        hint = f" (did you mean {item['suggestion']}?)" if item.get("suggestion") else ""
        fails.append(Fail(
            f"{version} does not define {item['flag']}{hint}: `vllm serve` exits with \"unrecognized arguments: {item['as_typed']}\"",
            [("launch.unknown_flags", item), "launch.vllm"],
            Fix(f"Use {item['suggestion']} instead." if item.get("suggestion") else "Remove the flag, or install the vLLM version it belongs to.",
                [f"vllm serve --help={item['flag'].lstrip('-').split('-')[0]}  # the flags this vLLM has"]),
            subject=item["flag"],
        ))
    return fails


@rule("GD703", "model-unreadable", severity=ERROR, area="launch")
def model_unreadable(snap):
    """The model (or its config.json or weights) cannot be read where the command points.

    ## Why
    vLLM treats an existing path as a local model and anything else as a Hugging Face repo id.
    A typo in a local path therefore turns into a download attempt of a repo that does not
    exist ("Repository Not Found" / "is not a local folder and is not a valid model
    identifier"); a config.json that is not JSON fails in transformers' config loader; a
    snapshot with missing or truncated shards (an interrupted download) fails while loading
    weights, after minutes of startup, or with "Cannot find any model weights".

    ## Fix
    Point at the directory that holds config.json and the weights; re-download a broken
    snapshot (`hf download ORG/NAME`); repair or restore config.json.

    ## References
    - huggingface/safetensors format (8-byte header length, JSON header with data_offsets);
      Hugging Face hub cache layout (models--ORG--NAME/snapshots/COMMIT).
    - vLLM `DefaultModelLoader` ("Cannot find any model weights with …").
    """
    skip = _applies(snap)
    if skip:
        return skip
    fails = []
    for prefix, what in (("model", "model"), ("drafter", "speculative drafter")):
        source = snap.get(f"{prefix}.source")
        if not source.ok:
            if prefix == "model" and source.status != "absent":
                fails.append(Fail(f"the model could not be inspected: {source.detail}", [f"{prefix}.source"]))
            continue
        if prefix == "drafter":
            continue  # GD717 reports the drafter
        info = source.value or {}
        given = info.get("given")
        if info.get("kind") == "missing_local":
            fails.append(Fail(
                f"{what} {given!r} does not exist ({info.get('detail')}); vLLM would then try it as a Hugging Face repo id and fail",
                [f"{prefix}.source"],
                Fix("Give the directory that holds config.json and the weights.", [f"ls -la {shlex.quote(str(given))}"]),
                subject=what,
            ))
            continue
        config = snap.get(f"{prefix}.config")
        if config.status == "error":
            fails.append(Fail(
                f"{what} {given!r}: {config.detail} ({config.source})",
                [f"{prefix}.config", f"{prefix}.source"],
                Fix("Restore config.json (re-download the model, or fix the file).",
                    [f"python3 -m json.tool {shlex.quote(config.source)} >/dev/null"]),
                subject=what,
            ))
        weights = snap.get(f"{prefix}.weights")
        data = weights.value if isinstance(weights.value, dict) else {}
        problems = list(data.get("problems") or [])
        if data.get("missing"):
            problems.insert(0, f"{len(data['missing'])} shard(s) listed in the index are missing: {', '.join(data['missing'][:4])}")
        if problems and info.get("kind") in ("local", "hf_cache"):
            repo = info.get("repo")
            fails.append(Fail(
                f"{what} {given!r}: weights unusable: {'; '.join(problems[:4])}",
                [f"{prefix}.weights", f"{prefix}.source"],
                Fix("Re-download the model (an interrupted download leaves missing or truncated shards).",
                    [f"hf download {repo}" if repo else f"ls -la {shlex.quote(str(info.get('path')))}"]),
                subject=what,
            ))
    return fails


@rule("GD704", "model-not-cached-offline", severity=ERROR, area="launch")
def model_not_cached_offline(snap):
    """Hugging Face offline mode is on and the model is not in the local cache.

    ## Why
    With `HF_HUB_OFFLINE=1` (or `TRANSFORMERS_OFFLINE=1`) huggingface_hub never downloads:
    a repo id that is not already in the cache fails at startup ("We have no connection or you
    passed local_files_only=True and we cannot find the requested files in the local cache";
    huggingface_hub `OfflineModeIsEnabled`). Air-gapped servers and CI images set offline mode
    on purpose, so the model has to be in the cache the server reads — which moves with
    `HF_HOME`, `HF_HUB_CACHE` and `--download-dir`.

    ## Fix
    Download it beforehand where the server looks (`hf download ORG/NAME`, with the same
    `HF_HOME` / `HF_HUB_CACHE`), or point the command at the local directory.

    ## References
    - huggingface_hub docs, "Environment variables" (HF_HUB_OFFLINE, HF_HOME, HF_HUB_CACHE)
      and "Manage the cache" (models--ORG--NAME/snapshots layout).
    """
    skip = _applies(snap)
    if skip:
        return skip
    fails = []
    seen_offline = False
    for prefix, what in (("model", "model"), ("drafter", "speculative drafter")):
        info = snap.value(f"{prefix}.source")
        if not isinstance(info, dict):
            continue
        seen_offline = seen_offline or bool(info.get("offline"))
        if info.get("offline") and info.get("kind") == "hf_remote":
            looked = ", ".join(info.get("looked") or [])
            fails.append(Fail(
                f"HF offline mode is on and the {what} {info.get('given')!r} is not in the cache (looked in {looked}): "
                "the server cannot download it and fails at startup",
                [f"{prefix}.source", ("env.HF_HUB_OFFLINE", (snap.value("env") or {}).get("HF_HUB_OFFLINE")),
                 ("env.TRANSFORMERS_OFFLINE", (snap.value("env") or {}).get("TRANSFORMERS_OFFLINE"))],
                Fix("Download it first into the cache the server uses (or pass the local directory).",
                    [f"HF_HUB_OFFLINE=0 hf download {info.get('given')}"]),
                subject=what,
            ))
    if not fails and not seen_offline:
        return NotApplicable("HF offline mode is off")
    return fails


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
    """
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
         ("visible GPUs", visible)],
        Fix("Fit the parallel sizes to the visible GPUs, or make more GPUs visible.",
            [_command_with(snap, "--tensor-parallel-size", _largest_divisor_tp(snap, fit))]),
    )


def _largest_divisor_tp(snap, gpus: int) -> int:
    heads = _int((_config(snap) or {}).get("num_attention_heads"))
    for tp in range(gpus, 0, -1):
        if heads is None or heads % tp == 0:
            return tp
    return 1


@rule("GD706", "tensor-parallel-does-not-divide-model", severity=ERROR, area="launch")
def tensor_parallel_does_not_divide_model(snap):
    """The tensor-parallel size does not divide the model's attention heads (or PP its layers).

    ## Why
    vLLM shards attention heads evenly across the TP group and refuses otherwise:
    "Total number of attention heads (N) must be divisible by tensor parallel size (T)." KV
    heads must divide by TP, or TP by the KV heads (they are then replicated); pipeline
    parallelism needs at least one layer per stage.

    ## Fix
    Pick a TP size that divides the head count (the closest that fits is suggested).

    ## References
    - vLLM `ModelConfig.verify_with_parallel_config` (vllm/config/model.py) and
      `QKVParallelLinear` (KV-head replication).
    """
    skip = _applies(snap)
    if skip:
        return skip
    cfg = _config(snap)
    if cfg is None:
        return Unknown(f"model config unknown ({snap.get('model.config').describe()})")
    tp, pp, _ = _parallel(snap)
    heads, kv_heads, layers = _int(cfg.get("num_attention_heads")), _int(cfg.get("num_key_value_heads")), _int(cfg.get("num_hidden_layers"))
    fails = []
    if heads and heads % tp:
        fails.append(Fail(
            f"Total number of attention heads ({heads}) must be divisible by tensor parallel size ({tp}). (vLLM's startup error)",
            [("model.config.num_attention_heads", heads), ("launch.args.--tensor-parallel-size", tp)],
            Fix("Use a TP size that divides the head count.", [_command_with(snap, "--tensor-parallel-size", _largest_divisor_tp(snap, tp))]),
            subject="attention heads",
        ))
    elif kv_heads and kv_heads % tp and tp % kv_heads:
        fails.append(Fail(
            f"{kv_heads} KV heads cannot be split over TP {tp} (neither divides the other)",
            [("model.config.num_key_value_heads", kv_heads), ("launch.args.--tensor-parallel-size", tp)],
            Fix("Use a TP size that divides the KV heads or is a multiple of them."),
            subject="KV heads",
        ))
    if layers and pp > layers:
        fails.append(Fail(f"pipeline parallel size {pp} exceeds the model's {layers} layers",
                          [("model.config.num_hidden_layers", layers), ("launch.args.--pipeline-parallel-size", pp)],
                          Fix("Use fewer pipeline stages."), subject="layers"))
    return fails


@rule("GD707", "tensor-parallel-group-mixed-gpus", severity=ERROR, area="launch")
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
    - research/facts.md §2.1–2.3; GD301 (rules/gpu.py).
    """
    skip = _applies(snap)
    if skip:
        return skip
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


@rule("GD708", "gpu-memory-utilization-exceeds-free", severity=ERROR, area="launch")
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

    ## Fix
    Stop the processes that hold the memory if they are stale (`gpudoctor fix` for stale
    serving processes; GD302/GD601/GD604 name them), or lower `--gpu-memory-utilization` to
    what is free (the value that fits is suggested).

    ## References
    - anchors.md §4 signature 9 (text from vLLM 0.33 `vllm/v1/worker/utils.py`
      `request_memory`; older versions: `gpu_worker.py`, "Free memory on device (…)");
      vllm-project/vllm#20305, #55510, #42017.
    """
    skip = _applies(snap)
    if skip:
        return skip
    plan, why = _memory_plan(snap)
    if plan is None:
        return Unknown(why)
    util = plan["util"]
    if not 0 < util <= 1:
        return Fail(f"--gpu-memory-utilization {util} is outside (0, 1]; vLLM refuses it",
                    [("launch.args.--gpu-memory-utilization", util)], Fix("Give a fraction such as 0.9."))
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
            text = (f"Free memory on device cuda:{gpu['cuda']} ({round(free / GIB, 2)}/{round(total / GIB, 2)} GiB) on startup is less "
                    f"than desired GPU memory utilization ({util}, {round(budget / GIB, 2)} GiB). Decrease GPU memory utilization "
                    "or reduce GPU memory used by other processes.")
            fails.append(Fail(
                f"GPU {gpu['index']} ({_gpu_name(snap, gpu['index'])}): vLLM will refuse to start with: \"ValueError: {text}\""
                f"{_holders(gpu)} (see GD302/GD601/GD604 for who holds it)",
                evidence,
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
    - huggingface/safetensors format; vLLM docs "Conserving memory" (TP, quantization,
      cpu offload).
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
      above); research/facts.md §7 ("No available memory for the cache blocks").
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
    if need <= room:
        return None
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


@rule("GD711", "dtype-unsupported-by-gpu", severity=ERROR, area="launch")
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
    - research/facts.md §2.2 (bf16 ≥ 8.0, the error text); anchors.md §4 signature 10;
      vllm-project/vllm#946, #1157, PR #2374.
    """
    skip = _applies(snap)
    if skip:
        return skip
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


@rule("GD712", "fp8-without-native-support", severity=WARNING, area="launch")
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
    - research/facts.md §2.2 (FP8 W8A8 ≥ 8.9; FP8 Marlin weight-only ≥ 7.5 in current docs);
      vLLM docs features/quantization/fp8.md and quantization/README.md.
    """
    skip = _applies(snap)
    if skip:
        return skip
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


@rule("GD713", "quantization-unsupported-by-gpu", severity=ERROR, area="launch")
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
      `get_min_capability()` in vllm/model_executor/layers/quantization/; research/facts.md §2.2.
    """
    skip = _applies(snap)
    if skip:
        return skip
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


@rule("GD714", "attention-backend-unsupported", severity=ERROR, area="launch")
def attention_backend_unsupported(snap):
    """The attention backend chosen for the launch cannot run on these GPUs (or does not exist here).

    ## Why
    A forced backend is validated against the GPU: FLASH_ATTN (vLLM's FA2) needs cc ≥ 8.0,
    FA3 (`flash_attn_version` 3) only 9.x, FLASHMLA 9.x–10.x, CUTLASS_MLA and FLASHINFER_MLA
    10.x; a mismatch fails with "Selected backend … is not valid for this configuration.
    Reason: ['compute capability not supported']" or "FlashAttention only supports Ampere GPUs
    or newer". A name the installed vLLM does not have fails with "Unknown attention backend".
    The old environment variable `VLLM_ATTENTION_BACKEND` was deprecated around 0.14 and is
    silently ignored by versions whose vllm/envs.py no longer reads it (facts.md §4.8).

    ## Fix
    Drop the override (vLLM picks a backend the GPU supports: FLASH_ATTN on 8.x–9.x,
    FLASHINFER on 10.x, TRITON_ATTN otherwise) or choose one from the list for this GPU; set it
    with `--attention-backend NAME` instead of the environment variable.

    ## References
    - research/facts.md §2.2, §2.3, §4.8; vLLM docs/design/attention_backends.md;
      vllm/vllm_flash_attn/flash_attn_interface.py; vllm-project/vllm#50292.
    """
    skip = _applies(snap)
    if skip:
        return skip
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


@rule("GD715", "max-model-len-exceeds-context", severity=ERROR, area="launch")
def max_model_len_exceeds_context(snap):
    """`--max-model-len` is longer than the model's context (max_position_embeddings) and no rope scaling extends it.

    ## Why
    Positions beyond what the model was trained for give garbage, so vLLM refuses: "User-
    specified max_model_len (N) is greater than the derived max_model_len
    (max_position_embeddings=M or model_max_length=None in model's config.json). … To allow
    overriding this maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1". Rope scaling
    (YaRN, dynamic NTK) in config.json or `--hf-overrides` raises the derived length; then the
    scaled length is the limit.

    ## Fix
    Use at most the model's context, or add rope scaling the model supports (its card says
    which), e.g. `--hf-overrides '{"rope_scaling": {"rope_type": "yarn", "factor": 4.0,
    "original_max_position_embeddings": 32768}}'`.

    ## References
    - vLLM `_get_and_verify_max_len` (vllm/config/model.py): length keys
      max_position_embeddings, n_positions, max_seq_len, seq_length, model_max_length,
      max_sequence_length, max_seq_length, seq_len (the smallest wins), rope scaling factor.
    """
    skip = _applies(snap)
    if skip:
        return skip
    given = _int(_args(snap).get("--max-model-len"))
    if given is None or given <= 0:
        return NotApplicable("--max-model-len not given (vLLM derives it from config.json)")
    cfg = _config(snap)
    if cfg is None:
        return Unknown(f"model config unknown ({snap.get('model.config').describe()})")
    overrides = _args(snap).get("--hf-overrides")
    if isinstance(overrides, dict) and (overrides.get("rope_scaling") or overrides.get("rope_parameters")):
        return NotApplicable("--hf-overrides sets rope scaling")
    if _args(snap).get("--rope-scaling"):
        return NotApplicable("--rope-scaling is given")
    derived, how = _derived_max_len(cfg)
    if derived is None:
        return Unknown(how)
    if given <= derived:
        return None
    allowed = str((snap.value("env") or {}).get("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "")).lower() in ("1", "true")
    message = (f"--max-model-len {given} is more than the model's {derived} ({how}): vLLM stops with \"User-specified max_model_len "
               f"({given}) is greater than the derived max_model_len ({cfg.get('max_length_key')}={derived} …)\"")
    if allowed:
        message = (f"--max-model-len {given} is more than the model's {derived} ({how}); VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 lets vLLM "
                   "start, but positions past the trained context give garbage without rope scaling")
    return Fail(message, [("launch.args.--max-model-len", given), ("model.config.max_length", derived), "model.config"],
                Fix("Stay within the trained context, or add rope scaling the model supports.",
                    [_command_with(snap, "--max-model-len", derived)]),
                severity=WARNING if allowed else ERROR)


@rule("GD716", "speculative-method-unknown", severity=ERROR, area="launch")
def speculative_method_unknown(snap):
    """The speculative decoding method is not one the installed vLLM knows.

    ## Why
    `--speculative-config` `method` is checked against vLLM's `SpeculativeMethod` literal
    (pydantic validation at startup). Methods arrive release by release — `eagle3`, the MTP
    variants, `dflash` (2026), `dspark` — so a config copied from a newer model card fails on
    an older vLLM with a validation error. Without `method` and without `model` vLLM cannot
    tell what to run.

    ## Fix
    Use a method this vLLM lists (shown), or upgrade vLLM to a version with the method.

    ## References
    - research/facts.md §4.3 (speculative-config keys and methods), §4.4 (DFlash history);
      vllm/config/speculative.py `SpeculativeMethod`.
    """
    skip = _applies(snap)
    if skip:
        return skip
    spec = _spec(snap)
    if not spec:
        return NotApplicable("no speculative decoding")
    method = spec.get("method")
    if not method:
        if spec.get("model"):
            return None  # vLLM detects the method from the drafter's config
        return Fail("--speculative-config has neither `method` nor `model`: vLLM cannot tell what to run",
                    [("launch.args.--speculative-config", spec)], Fix("Set `method` (and `model` for a drafter)."))
    methods = snap.get("launch.vllm.spec_methods")
    if not methods.ok:
        return Unknown(f"cannot check the method: {methods.detail}")
    if method in (methods.value or []):
        return None
    return Fail(
        f"{_vllm_version(snap)} has no speculative method {method!r} (it has: {', '.join(methods.value or [])}); startup fails "
        "validating --speculative-config",
        [("launch.args.--speculative-config.method", method), "launch.vllm.spec_methods", "launch.vllm"],
        Fix(f"Install a vLLM that has {method!r}, or use a method this one has."),
    )


@rule("GD717", "speculative-drafter-unreadable", severity=ERROR, area="launch")
def speculative_drafter_unreadable(snap):
    """The speculative drafter named in `--speculative-config` is missing or its config.json is unreadable.

    ## Why
    The drafter is loaded after the target model: a wrong path or a broken config.json fails
    only after the target's weights are loaded and compiled — minutes into startup. DFlash and
    EAGLE-3 drafters also carry the target layer ids in that config; without it nothing can
    be checked.

    ## Fix
    Point `model` in `--speculative-config` at the drafter's directory (or a repo id that is
    cached / downloadable) and repair its config.json.

    ## References
    - research/facts.md §4.3, §4.4 (draft config keys read by vLLM's DFlash model).
    """
    skip = _applies(snap)
    if skip:
        return skip
    spec = _spec(snap)
    if not spec.get("model"):
        return NotApplicable("no drafter model in the speculative config")
    source = snap.get("drafter.source")
    if not source.ok:
        return Unknown(source.detail or "drafter not inspected")
    info = source.value or {}
    if info.get("kind") == "missing_local":
        return Fail(f"the drafter {info.get('given')!r} does not exist ({info.get('detail')})", ["drafter.source"],
                    Fix("Give the drafter's directory or repo id in --speculative-config model."))
    config = snap.get("drafter.config")
    if config.status == "error":
        return Fail(f"the drafter {info.get('given')!r}: {config.detail} ({config.source})", ["drafter.config", "drafter.source"],
                    Fix("Restore the drafter's config.json (re-download it)."))
    weights = snap.get("drafter.weights")
    data = weights.value if isinstance(weights.value, dict) else {}
    problems = ([f"missing shard(s): {', '.join(data['missing'][:4])}"] if data.get("missing") else []) + list(data.get("problems") or [])
    if problems and info.get("kind") in ("local", "hf_cache"):
        return Fail(f"the drafter {info.get('given')!r}: weights unusable: {'; '.join(problems[:4])}", ["drafter.weights"],
                    Fix("Re-download the drafter."))
    return None


def _layer_ids(dcfg: Dict[str, Any], method: str) -> Tuple[Optional[List[Any]], str]:
    dflash = dcfg.get("dflash_config") if isinstance(dcfg.get("dflash_config"), dict) else {}
    if method in ("dflash", "dspark") or dflash:
        for key, where in ((dflash.get("target_layer_ids"), "dflash_config.target_layer_ids"),
                           (dcfg.get("dspark_target_layer_ids"), "dspark_target_layer_ids"),
                           (dcfg.get("target_layer_ids"), "target_layer_ids")):
            if key is not None:
                return key, where
    if dcfg.get("eagle_aux_hidden_state_layer_ids") is not None:
        return dcfg["eagle_aux_hidden_state_layer_ids"], "eagle_aux_hidden_state_layer_ids"
    return None, ""


@rule("GD718", "speculative-target-layers-invalid", severity=ERROR, area="launch")
def speculative_target_layers_invalid(snap):
    """The drafter's target layer ids do not fit the target model (DFlash / EAGLE-3).

    ## Why
    DFlash and EAGLE-3 drafters read hidden states of chosen target layers
    (`dflash_config.target_layer_ids`, `eagle_aux_hidden_state_layer_ids`) and concatenate
    them into the drafter's first projection, whose width is fixed by how many there are. For
    DFlash the ids are 0-based indices of the decoder layer whose *output* is used (vLLM adds
    1 to turn them into its aux-layer ids, PR #40727), so each must be in 0 … layers−1 of the
    target. An id past the last layer is never captured (shape mismatch or a crash); a
    duplicate or an unsorted list does not match the order vLLM collects them in (layer
    order), so the drafter sees its features shuffled and acceptance collapses without any
    error (sglang#37475). A drafter trained for another target (`num_target_layers`,
    `target_hidden_size` that differ from the target) is the same problem.

    ## Fix
    Use the drafter made for this target model; fix the ids to the target's layer range,
    unique and ascending.

    ## References
    - research/facts.md §4.4 (DFlash aux-layer semantics, draft-config keys; vLLM
      eagle3_utils.py `get_eagle3_aux_layers_from_config`); vllm-project/vllm PR #40727;
      sgl-project/sglang#37475, #37476.
    """
    skip = _applies(snap)
    if skip:
        return skip
    spec = _spec(snap)
    method = str(spec.get("method") or "")
    if not spec:
        return NotApplicable("no speculative decoding")
    dcfg = _config(snap, "drafter")
    if dcfg is None:
        if method and method not in SPEC_WITH_AUX_LAYERS:
            return NotApplicable(f"method {method!r} has no target layer ids")
        return Unknown(f"drafter config unknown ({snap.get('drafter.config').describe()})")
    ids, where = _layer_ids(dcfg, method)
    if ids is None:
        if method in ("dflash", "dspark"):
            return Fail(f"the {method} drafter's config.json has no target layer ids (dflash_config.target_layer_ids)",
                        ["drafter.config"], Fix("Use a DFlash drafter checkpoint (its config carries dflash_config)."))
        return NotApplicable("the drafter names no target layers")
    cfg = _config(snap)
    layers = _int((cfg or {}).get("num_hidden_layers"))
    fails = []
    evidence = [("drafter.config." + where, ids), ("model.config.num_hidden_layers", layers)]
    if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids) or not ids:
        return Fail(f"{where} = {ids!r} is not a list of layer numbers", evidence, Fix("Fix the drafter's config.json."))
    if layers is None:
        return Unknown(f"the target's layer count is unknown ({snap.get('model.config').describe()})")
    eagle = where == "eagle_aux_hidden_state_layer_ids"
    top = layers if eagle else layers - 1  # EAGLE-3 aux ids name layer boundaries (0 … layers)
    outside = [i for i in ids if i < 0 or i > top]
    if outside:
        fails.append(Fail(f"{where} {ids} has {outside} outside the target's layers 0…{top} ({layers} layers): "
                          "those hidden states are never captured", evidence,
                          Fix("Use the drafter trained for this target model."), subject="range"))
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        fails.append(Fail(f"{where} {ids} repeats {dupes}: vLLM captures each layer once, so the drafter gets fewer features than it "
                          "expects", evidence, Fix("List each layer once."), subject="duplicates"))
    if ids != sorted(ids) and not dupes:
        fails.append(Fail(f"{where} {ids} is not ascending: vLLM collects the hidden states in layer order, so the drafter would see "
                          "its features in a different order than it lists them (acceptance collapses silently)", evidence,
                          Fix("Check the drafter card; list the ids in ascending order."), subject="order", severity=WARNING))
    trained_for = _int(dcfg.get("num_target_layers") or (dcfg.get("dflash_config") or {}).get("num_target_layers"))
    if trained_for and trained_for != layers:
        fails.append(Fail(f"the drafter was made for a target with {trained_for} layers; this target has {layers}",
                          [("drafter.config.num_target_layers", trained_for), ("model.config.num_hidden_layers", layers)],
                          Fix("Use the drafter made for this target model."), subject="target"))
    hidden = _int(dcfg.get("target_hidden_size"))
    if hidden and _int((cfg or {}).get("hidden_size")) and hidden != cfg["hidden_size"]:
        fails.append(Fail(f"the drafter expects target hidden size {hidden}; the target's is {cfg['hidden_size']} (a shape mismatch at load)",
                          [("drafter.config.target_hidden_size", hidden), ("model.config.hidden_size", cfg["hidden_size"])],
                          Fix("Use the drafter made for this target model."), subject="hidden size"))
    return fails


def advisories_for(feature: str, snap) -> Optional[List[Any]]:
    """rules/advisories.py's evaluation of ``feature`` for the vLLM the command runs.

    The launch probe records that vLLM's build and code markers as ``launch.vllm.build`` /
    ``.code_markers`` / ``.fix_commits``; they stand in for the ``vllm.*`` facts of
    gpudoctor's own environment, which may be another vLLM. None: no advisory module.
    """
    try:
        from . import advisories
    except ImportError:
        return None
    evaluator = getattr(advisories, "advisories_for", None)
    if not callable(evaluator):
        return None
    facts = dict(snap.facts)
    if snap.get("launch.vllm").ok:  # the command's vLLM was found: judge that one, not gpudoctor's own
        for key in ("build", "code_markers", "fix_commits"):
            facts.pop(f"vllm.{key}", None)
            if snap.get(f"launch.vllm.{key}").ok:
                facts[f"vllm.{key}"] = snap.facts[f"launch.vllm.{key}"]
    return list(evaluator(feature, facts) or [])


@rule("GD719", "speculative-method-needs-fixes", severity=ERROR, area="launch")
def speculative_method_needs_fixes(snap):
    """The installed vLLM lacks fixes the chosen speculative method needs.

    ## Why
    Young speculative methods ship with bugs fixed later, often silently wrong rather than
    crashing: DFlash's target-layer ids were read one layer early until PR #40727 (acceptance
    length well below the drafter card's numbers), and sliding-window DFlash drafters need
    PR #46104 (and the V2 model runner for mixed layers). A vLLM development branch or an old
    wheel may lack them. The advisories (which PR, how to recognise it in the source) and
    their evaluation live in rules/advisories.py; this rule asks it about the launch's
    method, for the vLLM the command runs.

    ## Fix
    Install a vLLM release that includes the fixes listed, or apply them to the branch.

    ## References
    - research/facts.md §4.4 (PR #40727, #40898 → #46104, #47914, #48113); rules/advisories.py.
    """
    skip = _applies(snap)
    if skip:
        return skip
    method = str(_spec(snap).get("method") or "")
    if not method:
        return NotApplicable("no speculative method")
    try:
        results = advisories_for(method, snap)
    except Exception as exc:  # the evaluator belongs to another module: never let it crash this rule
        return Unknown(f"the advisory check failed: {type(exc).__name__}: {exc}")
    if results is None:
        return Unknown(f"cannot tell whether {_vllm_version(snap)} has the fixes {method} needs: no advisory data (rules/advisories.py)")
    if not results:
        return NotApplicable(f"no known fixes recorded for {method!r}")
    fails, unknown = [], []
    for result in results:
        status = getattr(result, "status", None)
        adv = getattr(result, "advisory", None)
        pr = getattr(adv, "pr", None)
        if status == "missing":
            describe = getattr(advisories_module(), "describe_pr", None)
            where = describe(adv) if callable(describe) else f"PR #{pr}"
            evidence = [(k, v) for k, v in (getattr(result, "evidence", None) or [])][:4]
            fails.append(Fail(
                f"{_vllm_version(snap)} lacks PR #{pr} ({getattr(adv, 'title', '?')}): {getattr(adv, 'symptom', '')}. "
                f"{getattr(result, 'reason', '')}",
                evidence + [("launch.args.--speculative-config.method", method)],
                Fix(f"Install a vLLM that includes {where}, or apply the PR to this branch."),
                subject=f"PR #{pr}",
            ))
        elif status == "unknown":
            unknown.append(str(getattr(result, "reason", "") or f"PR #{pr}: cannot tell"))
    if fails:
        return fails
    if unknown:
        return Unknown("; ".join(unknown))
    return None


def advisories_module():
    try:
        from . import advisories
    except ImportError:
        return None
    return advisories


@rule("GD720", "num-speculative-tokens-invalid", severity=ERROR, area="launch")
def num_speculative_tokens_invalid(snap):
    """`num_speculative_tokens` is missing, not a positive integer, or beyond what the drafter predicts.

    ## Why
    vLLM requires `num_speculative_tokens` > 0 (pydantic `gt=0`), an integer. A DFlash drafter
    predicts one block of `block_size` positions, the first being the bonus token: asking for
    more than `block_size − 1` drafts positions the drafter was never trained for, which are
    (almost) never accepted and cost a wider verification step each time. Very long drafts
    (> 16) waste target compute on every step for any method.

    ## Fix
    For DFlash use `block_size − 1` (15 for the b16 drafters); for EAGLE/MTP 1–5 is typical.

    ## References
    - research/facts.md §4.3 (num_speculative_tokens), §4.4 (DFlash block drafting);
      vllm/v1/spec_decode/dflash.py (query tokens per request = 1 + num_speculative_tokens).
    """
    skip = _applies(snap)
    if skip:
        return skip
    spec = _spec(snap)
    if not spec:
        return NotApplicable("no speculative decoding")
    count = spec.get("num_speculative_tokens")
    evidence: List[Any] = [("launch.args.--speculative-config.num_speculative_tokens", count)]
    if count is None:
        return None  # taken from the drafter's config where it has one; vLLM says so otherwise
    if not isinstance(count, int) or isinstance(count, bool) or count <= 0:
        return Fail(f"num_speculative_tokens = {count!r}: vLLM requires a positive integer", evidence,
                    Fix("Give a positive integer.", [_command_with(snap, "--speculative-config.num_speculative_tokens", 3)]))
    method = str(spec.get("method") or "")
    dcfg = _config(snap, "drafter") or {}
    block = _int(dcfg.get("block_size") or (dcfg.get("dflash_config") or {}).get("block_size"))
    if method == "dflash" and block and count > block - 1:
        return Fail(f"num_speculative_tokens {count} > block_size − 1 = {block - 1} of the DFlash drafter: positions past its block are "
                    "never trained, so they are rejected and only cost verification work",
                    evidence + [("drafter.config.block_size", block)],
                    Fix(f"Use {block - 1}.", [_command_with(snap, "--speculative-config.num_speculative_tokens", block - 1)]), severity=WARNING)
    if count > 16 and method != "dflash":
        return Fail(f"num_speculative_tokens {count} is unusually long for {method or 'this method'}: acceptance falls with every "
                    "position, and each step verifies all of them", evidence, Fix("Try 1–5 and measure acceptance (gpudoctor smoke)."),
                    severity=WARNING)
    return None


@rule("GD721", "parser-unknown", severity=ERROR, area="launch")
def parser_unknown(snap):
    """`--tool-call-parser` / `--reasoning-parser` names a parser the installed vLLM does not have.

    ## Why
    Parsers are registered by name in vLLM's source and arrive release by release:
    `qwen3_coder` came with PR #21396 (July 2025), many others later. An unknown reasoning
    parser is an argparse error (`invalid choice`) in versions that list them as choices, a
    KeyError at startup in others; an unknown tool-call parser fails when the server starts
    serving ("invalid tool call parser"). `--enable-auto-tool-choice` without
    `--tool-call-parser` is refused outright ("--enable-auto-tool-choice requires
    --tool-call-parser"). A name registered by a plugin (`--tool-parser-plugin`,
    `--reasoning-parser-plugin`) cannot be checked statically.

    ## Fix
    Use a parser this vLLM has (the list is shown; for Qwen3-Coder / Qwen3.5 tool calls
    `qwen3_coder`, not `qwen3_xml`), or upgrade vLLM.

    ## References
    - research/facts.md §4.7 (parser registries and names; PR #21396, #28900);
      vllm/entrypoints/openai/cli_args.py `validate_parsed_serve_args`.
    """
    skip = _applies(snap)
    if skip:
        return skip
    args = _args(snap)
    tool, reasoning = args.get("--tool-call-parser"), args.get("--reasoning-parser")
    fails = []
    if args.get("--enable-auto-tool-choice") is True and not tool:
        fails.append(Fail("--enable-auto-tool-choice without --tool-call-parser: vLLM refuses (\"--enable-auto-tool-choice requires "
                          "--tool-call-parser\")", [("launch.args.--enable-auto-tool-choice", True)],
                          Fix("Name the parser for the model.", [_command_with(snap, "--tool-call-parser", "PARSER")]),
                          subject="--enable-auto-tool-choice"))
    if not tool and not reasoning:
        return fails or NotApplicable("no parser named")
    unknown_reason = None
    for flag, name, fact_path, plugin_flag in (("--tool-call-parser", tool, "launch.vllm.tool_parsers", "--tool-parser-plugin"),
                                               ("--reasoning-parser", reasoning, "launch.vllm.reasoning_parsers", "--reasoning-parser-plugin")):
        if not isinstance(name, str) or not name:
            continue
        fact = snap.get(fact_path)
        if not fact.ok:
            unknown_reason = f"cannot check {flag}: {fact.detail}"
            continue
        names = (fact.value or {}).get("names") or []
        if name in names:
            continue
        plugin = args.get(plugin_flag)
        close = [n for n in names if n.startswith(name.split("_")[0])][:6]
        hint = f" (similar: {', '.join(close)})" if close else ""
        fails.append(Fail(
            f"{flag} {name}: {_vllm_version(snap)} has no such parser{hint}"
            + (f"; it may come from {plugin_flag} {plugin}, which gpudoctor cannot read" if plugin else ""),
            [(f"launch.args.{flag}", name), (fact_path, f"{len(names)} registered: {', '.join(names)}"[:400]), "launch.vllm"],
            Fix(f"Use a parser this vLLM has, or a vLLM that has {name}."),
            subject=flag,
            severity=WARNING if plugin else ERROR,
        ))
    if not fails and unknown_reason:
        return Unknown(unknown_reason)
    return fails


@rule("GD722", "launch-port-taken", severity=ERROR, area="launch")
def launch_port_taken(snap):
    """The port the command will listen on is already taken.

    ## Why
    The API server binds its port only after the engine is up — after loading weights and
    capturing CUDA graphs — and then dies with "OSError: [Errno 98] Address already in use"
    (uvicorn: "error while attempting to bind on address"), throwing that startup away. A
    previous server that is still running, or a stale one (GD601), is the usual holder; GD602
    tells who it is.

    ## Fix
    Stop the holder if it is stale, or give the new server another `--port`.

    ## References
    - research/facts.md §4.9 (the port opens after engine init), §7 ("Address already in use";
      vllm-project/vllm#9763, #7514, #11617); GD602 (rules/processes.py).
    """
    skip = _applies(snap)
    if skip:
        return skip
    launch = snap.value("launch.port") or {}
    if launch.get("uds"):
        return NotApplicable("--uds: the server listens on a Unix socket")
    port = launch.get("port")
    if not isinstance(port, int):
        return Unknown("the launch port is not a number")
    probed = snap.get("processes.port")
    if not probed.ok:
        return Unknown(f"listening sockets not read ({probed.describe()})")
    data = probed.value or {}
    if data.get("port") != port:
        return Unknown(f"the snapshot checked port {data.get('port')}, the command uses {port} (preflight checks the command's port "
                       "when it probes this machine)")
    host = launch.get("host")
    wildcard = host in (None, "", "0.0.0.0", "::")
    hosts = {"127.0.0.1", "::1"} if host == "localhost" else {host}
    clashes = [item for item in data.get("listeners") or [] if isinstance(item, dict)
               and (wildcard or item.get("address") in ("0.0.0.0", "::") or item.get("address") in hosts)]
    if not clashes:
        return None
    holders = []
    for item in clashes:
        pids = item.get("pids") or []
        holders.append(f"{item.get('address')}:{port} by " + (f"PID {', '.join(map(str, pids))}" if pids else "a process not visible here"))
    return Fail(
        f"port {port} is taken ({'; '.join(holders)}): the server would load the model and then fail with \"[Errno 98] Address "
        "already in use\" (GD602 names the holder and whether it is stale)",
        ["processes.port", "launch.port"],
        Fix("Stop the holder if it is stale, or use another port.",
            [f"ss -ltnp 'sport = :{port}'", "gpudoctor fix  # if the holder is a stale serving process", _command_with(snap, "--port", port + 1)]),
        subject=f"port {port}",
    )


@rule("GD723", "architecture-needs-trust-remote-code", severity=ERROR, area="launch")
def architecture_needs_trust_remote_code(snap):
    """The model's architecture is not one vLLM implements, and `--trust-remote-code` is missing.

    ## Why
    vLLM runs the architectures in its model registry natively. For any other, recent
    versions fall back to the Transformers backend, which for a model with its own code
    (`auto_map` in config.json) needs `--trust-remote-code`: without it startup fails with
    "The repository … contains custom code which must be executed to correctly load the model
    … Please pass the argument `trust_remote_code=True`". Older versions stop with "Model
    architectures ['X'] are not supported for now". An architecture that is neither in the
    registry nor custom code needs a newer vLLM (or transformers) altogether.

    ## Fix
    Add `--trust-remote-code` after reviewing the model's code, or use a vLLM version that
    implements the architecture natively.

    ## References
    - vLLM vllm/model_executor/models/registry.py (`_TEXT_GENERATION_MODELS` …), docs
      "Supported models" (Transformers backend fallback, trust_remote_code).
    """
    skip = _applies(snap)
    if skip:
        return skip
    cfg = _config(snap)
    if cfg is None:
        return Unknown(f"model config unknown ({snap.get('model.config').describe()})")
    archs = [a for a in cfg.get("architectures") or [] if isinstance(a, str)]
    if not archs:
        return Unknown("config.json names no architecture")
    known = snap.get("launch.vllm.architectures")
    if not known.ok:
        return Unknown(f"cannot check the architecture: {known.detail}")
    if any(a in (known.value or []) for a in archs):
        return None
    trusted = _args(snap).get("--trust-remote-code") is True
    if cfg.get("auto_map"):
        if trusted:
            return None
        return Fail(f"{_vllm_version(snap)} does not implement {archs} and the model ships its own code (auto_map): without "
                    "--trust-remote-code startup fails (\"contains custom code which must be executed\")",
                    [("model.config.architectures", archs), ("model.config.auto_map", True), ("launch.args.--trust-remote-code", trusted)],
                    Fix("Review the model's code, then allow it.", [_command_with(snap, "--trust-remote-code")]))
    return Fail(f"{_vllm_version(snap)} does not implement {archs} and the model has no custom code: it falls back to the Transformers "
                "backend (if this transformers knows the architecture; slower) or stops with \"not supported for now\"",
                [("model.config.architectures", archs), "launch.vllm"],
                Fix("Use a vLLM version that supports the architecture natively."), severity=WARNING)
