"""A model as vLLM will find it, inspected without loading a weight.

Where the model is (what ``vllm serve MODEL`` does with MODEL):

- an existing directory (or ``~`` / relative path) is used as it is;
- anything else is a Hugging Face repo id, looked up in the hub cache layout
  ``CACHE/models--ORG--NAME/snapshots/COMMIT/`` (``refs/REVISION`` names the commit; default
  revision ``main``). CACHE is ``--download-dir`` when given (vLLM passes it as ``cache_dir``),
  else ``HF_HUB_CACHE``, ``HUGGINGFACE_HUB_CACHE``, ``HF_HOME/hub``,
  ``XDG_CACHE_HOME/huggingface/hub``, ``~/.cache/huggingface/hub`` (huggingface_hub
  ``constants.py``). Not cached and not offline: vLLM will download it, so there is nothing to
  read yet. ``HF_HUB_OFFLINE=1`` / ``TRANSFORMERS_OFFLINE=1`` forbid that download.

What is read:

- ``config.json``: the fields vLLM's memory and capability checks depend on (architectures,
  layers, hidden size, heads, KV heads, head size, context length keys, dtype,
  ``quantization_config``, rope scaling, layer types, sliding window, MLA ranks) and, for a
  speculative drafter, ``dflash_config`` / ``eagle_aux_hidden_state_layer_ids`` /
  ``block_size`` / ``target_hidden_size``. Multimodal configs keep the language model under
  ``text_config`` (Qwen3.5/3.6, Gemma 3, Llama 4): the language-model fields come from there.
- weight bytes from the safetensors headers: a file is ``u64 little-endian N`` then N bytes of
  JSON ``{name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": …}`` then the data
  (huggingface/safetensors format spec); the bytes of a tensor are ``end - begin``. The index
  ``model.safetensors.index.json`` lists the shards (``weight_map``) and ``metadata.total_size``.
  ``.bin`` / ``.pt`` / ``.gguf`` weights are counted by file size.
"""

from __future__ import annotations

import glob
import json
import os
import re
import struct
from typing import Any, Dict, List, Optional, Tuple

from gpudoctor import bounded

CONFIG_LIMIT = 16 << 20
HEADER_LIMIT = 100 << 20  # the safetensors reference implementation refuses larger headers
MAX_SHARDS = 4096
COMMIT = re.compile(r"^[0-9a-f]{40}$")
REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?$")
LENGTH_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "model_max_length",
               "max_sequence_length", "max_seq_length", "seq_len")  # vLLM _get_and_verify_max_len


def is_offline(environ: Dict[str, str]) -> bool:
    def on(name: str) -> bool:
        return str(environ.get(name, "")).strip().upper() in ("1", "ON", "YES", "TRUE")

    return on("HF_HUB_OFFLINE") or on("TRANSFORMERS_OFFLINE")


def cache_dirs(environ: Dict[str, str], download_dir: Optional[str] = None) -> List[str]:
    home = environ.get("HOME") or os.path.expanduser("~")
    dirs: List[str] = []
    if download_dir:
        dirs.append(os.path.expanduser(download_dir))
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if environ.get(name):
            dirs.append(os.path.expanduser(environ[name]))
    if environ.get("HF_HOME"):
        dirs.append(os.path.join(os.path.expanduser(environ["HF_HOME"]), "hub"))
    xdg = environ.get("XDG_CACHE_HOME") or os.path.join(home, ".cache")
    dirs.append(os.path.join(xdg, "huggingface", "hub"))
    out: List[str] = []
    for item in dirs:
        if item not in out:
            out.append(item)
    return out


def _looks_like_path(name: str) -> bool:
    return name.startswith(("/", "./", "../", "~")) or name in (".", "..") or name.count("/") > 1 or os.sep == "\\"


def resolve(name: str, environ: Dict[str, str], revision: Optional[str] = None,
            download_dir: Optional[str] = None, cwd: Optional[str] = None) -> Dict[str, Any]:
    """Where MODEL is: {given, kind, path, repo, revision, cache_dir, looked, detail}.

    kind: local | hf_cache | hf_remote (not downloaded yet) | missing_local | invalid.
    """
    out: Dict[str, Any] = {"given": name, "kind": "invalid", "path": None, "offline": is_offline(environ)}
    if not name:
        out["detail"] = "empty model name"
        return out
    expanded = os.path.expanduser(name)
    if not os.path.isabs(expanded) and cwd:
        candidate = os.path.join(cwd, expanded)
    else:
        candidate = expanded
    if os.path.isdir(candidate):
        out.update(kind="local", path=os.path.abspath(candidate))
        return out
    if os.path.exists(candidate):
        if candidate.endswith(".gguf"):
            out.update(kind="local", path=os.path.abspath(candidate), detail="a single GGUF file")
            return out
        out.update(kind="missing_local", detail=f"{name} is a file, not a model directory")
        return out
    if _looks_like_path(name) or not REPO_ID.match(name):
        out.update(kind="missing_local", detail=f"no such directory: {candidate}")
        return out
    out["repo"] = name
    wanted = revision or "main"
    looked = cache_dirs(environ, download_dir)
    out["looked"] = looked
    folder = "models--" + name.replace("/", "--")
    for cache in looked:
        repo_dir = os.path.join(cache, folder)
        if not os.path.isdir(repo_dir):
            continue
        commit = wanted if COMMIT.match(wanted) else None
        if commit is None:
            try:  # bounded: the Hub cache is the user's directory, a FIFO there must not block preflight
                commit = bounded.read_head(os.path.join(repo_dir, "refs", wanted), 100, "ref").decode("utf-8", "replace").strip()
            except (OSError, ValueError):
                commit = None
        snapshots = os.path.join(repo_dir, "snapshots")
        if commit and os.path.isdir(os.path.join(snapshots, commit)):
            out.update(kind="hf_cache", path=os.path.join(snapshots, commit), revision=commit, cache_dir=cache)
            return out
        try:
            present = sorted(os.listdir(snapshots))
        except OSError:
            present = []
        if commit is None and len(present) == 1 and revision is None:
            out.update(kind="hf_cache", path=os.path.join(snapshots, present[0]), revision=present[0], cache_dir=cache,
                       detail="no refs/main; the only snapshot in the cache")
            return out
        out["detail"] = (f"{repo_dir} exists but has no snapshot for revision {wanted}"
                         + (f" (snapshots: {', '.join(present[:4])})" if present else ""))
    out["kind"] = "hf_remote"
    out.setdefault("detail", f"not in the Hugging Face cache ({', '.join(looked)})")
    return out


# --- config.json ----------------------------------------------------------------------------------
def read_json(path: str, limit: int = CONFIG_LIMIT) -> Tuple[Optional[Any], Optional[str]]:
    """(data, problem)."""
    if not os.path.exists(path):
        return None, "missing"
    try:  # a regular file only: a FIFO named config.json must not block the preflight
        raw = bounded.read_file(path, "config", limit + 1)
    except bounded.InputError as exc:
        return None, f"unreadable: {exc.reason}"
    if bounded.depth_exceeds(raw):
        return None, "not valid JSON (nested too deeply)"
    if len(raw) > limit:
        return None, f"larger than {limit >> 20} MiB"
    try:
        return json.loads(raw.decode("utf-8")), None
    except UnicodeDecodeError:
        return None, "not UTF-8 text"
    except RecursionError:
        return None, "not valid JSON (nested too deeply)"
    except ValueError as exc:
        line = getattr(exc, "lineno", None)
        return None, f"not valid JSON ({getattr(exc, 'msg', exc)}" + (f", line {line})" if line else ")")


def _int(value: Any) -> Optional[int]:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def config_fields(data: Dict[str, Any]) -> Dict[str, Any]:
    """The fields the launch rules need, language-model fields from ``text_config`` when nested."""
    text = data
    for key in ("text_config", "llm_config", "language_config", "thinker_config"):
        nested = data.get(key)
        if isinstance(nested, dict) and (nested.get("num_hidden_layers") or nested.get("hidden_size")):
            if not data.get("num_hidden_layers"):
                text = nested
                break

    def get(*keys: str, where: Optional[Dict[str, Any]] = None) -> Any:
        for source in ([where] if where is not None else [text, data]):
            for key in keys:
                if isinstance(source, dict) and source.get(key) is not None:
                    return source[key]
        return None

    layers = _int(get("num_hidden_layers", "n_layer", "num_layers", "n_layers"))
    hidden = _int(get("hidden_size", "n_embd", "d_model"))
    heads = _int(get("num_attention_heads", "n_head", "num_heads"))
    kv_heads = _int(get("num_key_value_heads", "num_kv_heads", "n_head_kv", "multi_query_group_num"))
    if kv_heads is None and get("multi_query") is True:
        kv_heads = 1
    if kv_heads is None:
        kv_heads = heads
    head_dim = _int(get("head_dim", "kv_channels"))
    if head_dim is None and hidden and heads:
        head_dim = hidden // heads
    lengths = {key: _int(get(key)) for key in LENGTH_KEYS if _int(get(key))}
    length_key = min(lengths, key=lambda k: lengths[k]) if lengths else None
    dtype = get("torch_dtype", "dtype")
    quant = data.get("quantization_config") if isinstance(data.get("quantization_config"), dict) else text.get("quantization_config")
    layer_types = get("layer_types")
    counts: Dict[str, int] = {}
    if isinstance(layer_types, list):
        for item in layer_types:
            counts[str(item)] = counts.get(str(item), 0) + 1
    out: Dict[str, Any] = {
        "architectures": data.get("architectures") if isinstance(data.get("architectures"), list) else None,
        "model_type": data.get("model_type"),
        "num_hidden_layers": layers,
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
        "max_length": lengths.get(length_key) if length_key else None,
        "max_length_key": length_key,
        "max_position_embeddings": _int(get("max_position_embeddings")),
        "torch_dtype": str(dtype) if dtype is not None else None,
        "quantization": _quant_summary(quant) if isinstance(quant, dict) else None,
        "rope_scaling": _rope(text, data),
        "layer_types": counts or None,
        "sliding_window": _int(get("sliding_window")),
        "kv_lora_rank": _int(get("kv_lora_rank")),
        "qk_rope_head_dim": _int(get("qk_rope_head_dim")),
        "vocab_size": _int(get("vocab_size")),
        "intermediate_size": _int(get("intermediate_size", "ffn_hidden_size", "n_inner")),
        "moe_intermediate_size": _int(get("moe_intermediate_size")),
        "num_experts": _int(get("num_experts", "n_routed_experts", "num_local_experts")),
        "auto_map": bool(data.get("auto_map")),
        "tie_word_embeddings": data.get("tie_word_embeddings"),
        "num_nextn_predict_layers": _int(get("num_nextn_predict_layers")),
    }
    # Speculative drafters (DFlash, EAGLE-3, speculators format).
    dflash = data.get("dflash_config")
    if isinstance(dflash, dict):
        out["dflash_config"] = {k: dflash.get(k) for k in ("target_layer_ids", "num_target_layers", "block_size",
                                                            "mask_token_id", "use_swa", "causal") if k in dflash}
    for key in ("target_layer_ids", "eagle_aux_hidden_state_layer_ids", "block_size", "num_target_layers",
                "target_hidden_size", "dspark_target_layer_ids"):
        if key in data:
            out[key] = data.get(key)
    eagle = data.get("eagle_config")
    if isinstance(eagle, dict) and "eagle_aux_hidden_state_layer_ids" in eagle and "eagle_aux_hidden_state_layer_ids" not in out:
        out["eagle_aux_hidden_state_layer_ids"] = eagle.get("eagle_aux_hidden_state_layer_ids")
    return out


def estimated_weight_bytes(fields: Dict[str, Any]) -> Optional[Tuple[int, str]]:
    """(bytes, how) of a model's weights from its config.json alone, when no file says (a model read
    from the Hub without its safetensors index). A decoder of ``layers`` blocks: attention (query and
    output heads × head size × hidden, key and value KV heads × head size × hidden), a gated MLP of
    3 × hidden × intermediate (× experts for MoE, with ``moe_intermediate_size``), the embedding
    and, untied, the output head; 2 bytes a parameter: vLLM's ``--dtype auto`` loads float32 and
    16-bit checkpoints as 16-bit. None where that shape does not hold (quantized weights, MLA
    attention, a missing dimension): a guess would decide a memory check."""
    hidden, layers, vocab = fields.get("hidden_size"), fields.get("num_hidden_layers"), fields.get("vocab_size")
    heads, kv_heads, head_dim = fields.get("num_attention_heads"), fields.get("num_key_value_heads"), fields.get("head_dim")
    inter = fields.get("intermediate_size")
    if fields.get("quantization") or fields.get("kv_lora_rank") or not all(
            isinstance(v, int) and v > 0 for v in (hidden, layers, vocab, heads, kv_heads, head_dim, inter)):
        return None
    experts = fields.get("num_experts") or 0
    moe = fields.get("moe_intermediate_size")
    attention = 2 * heads * head_dim * hidden + 2 * kv_heads * head_dim * hidden
    mlp = 3 * hidden * (moe * experts if experts and moe else inter)
    embeddings = vocab * hidden * (1 if fields.get("tie_word_embeddings") is True else 2)
    params = layers * (attention + mlp) + embeddings
    return 2 * params, f"estimated from config.json: {params / 1e9:.2f} B parameters × 2 bytes"


def _quant_summary(quant: Dict[str, Any]) -> Dict[str, Any]:
    keep = ("quant_method", "bits", "fmt", "activation_scheme", "weight_block_size", "format", "quant_algo")
    out: Dict[str, Any] = {k: quant[k] for k in keep if k in quant and not isinstance(quant[k], dict)}
    groups = quant.get("config_groups")
    if isinstance(groups, dict):  # compressed-tensors: the weight type of each group
        types = set()
        for group in groups.values():
            weights = group.get("weights") if isinstance(group, dict) else None
            if isinstance(weights, dict):
                types.add(f"{weights.get('type', '?')}{weights.get('num_bits', '')}")
        out["weight_types"] = sorted(types)
    return out


def _rope(text: Dict[str, Any], data: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    for source in (text, data):
        for key in ("rope_scaling", "rope_parameters"):
            value = source.get(key) if isinstance(source, dict) else None
            if isinstance(value, dict):
                kind = value.get("rope_type") or value.get("type")
                if key == "rope_parameters" and kind in (None, "default") and "factor" not in value:
                    continue  # transformers 5 keeps rope_theta here: no scaling
                return {k: value[k] for k in ("rope_type", "type", "factor", "original_max_position_embeddings") if k in value}
    return None


def hf_quant_config(path: str) -> Optional[Dict[str, Any]]:
    """ModelOpt checkpoints (hf_quant_config.json): quantization.quant_algo FP8 / NVFP4 …"""
    data, problem = read_json(os.path.join(path, "hf_quant_config.json"), 1 << 20)
    if problem or not isinstance(data, dict):
        return None
    quant = data.get("quantization") if isinstance(data.get("quantization"), dict) else {}
    algo = str(quant.get("quant_algo") or "")
    if not algo:
        return None
    return {"quant_method": "modelopt_fp4" if "FP4" in algo.upper() else "modelopt", "quant_algo": algo}


# --- weights ------------------------------------------------------------------------------------------
def safetensors_header(path: str) -> Dict[str, Any]:
    """{bytes, dtypes, tensors} of one file, or {error}. Reads the header only."""
    try:
        size = os.path.getsize(path)
        with bounded.open_regular(path, "weights") as handle:  # a FIFO named *.safetensors must not block
            head = handle.read(8)
            if len(head) < 8:
                return {"error": "shorter than 8 bytes: not a safetensors file"}
            (length,) = struct.unpack("<Q", head)
            if length > HEADER_LIMIT or length + 8 > size:
                return {"error": f"header length {length} does not fit in the file ({size} bytes): not a safetensors file or truncated"}
            raw = handle.read(length)
    except bounded.InputError as exc:
        return {"error": exc.reason}
    except OSError as exc:
        return {"error": exc.strerror or str(exc)}
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return {"error": "the header is not valid JSON: not a safetensors file"}
    if not isinstance(header, dict):
        return {"error": "the header is not a JSON object"}
    total, end_max, count = 0, 0, 0
    dtypes: Dict[str, int] = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        offsets = entry.get("data_offsets") if isinstance(entry, dict) else None
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(_int(v) is not None for v in offsets) and 0 <= offsets[0] <= offsets[1]):
            return {"error": f"tensor {name!r} has no valid data_offsets"}
        nbytes = offsets[1] - offsets[0]
        total += nbytes
        end_max = max(end_max, offsets[1])
        count += 1
        dtype = str(entry.get("dtype"))
        dtypes[dtype] = dtypes.get(dtype, 0) + nbytes
    if 8 + length + end_max > size:
        return {"error": f"truncated: the header describes {8 + length + end_max} bytes, the file has {size}",
                "bytes": total, "dtypes": dtypes, "tensors": count}
    return {"bytes": total, "dtypes": dtypes, "tensors": count}


def weights(path: str) -> Dict[str, Any]:
    """Weight bytes of a model directory: {bytes, format, source, files, dtypes, missing, problems}."""
    if os.path.isfile(path):
        return {"bytes": os.path.getsize(path), "format": "gguf", "source": "file size", "files": 1}
    index_names = sorted(glob.glob(os.path.join(path, "*.safetensors.index.json")))
    index_name = next((n for n in index_names if os.path.basename(n) == "model.safetensors.index.json"), index_names[0] if index_names else None)
    out: Dict[str, Any] = {"format": None, "bytes": None, "files": 0, "missing": [], "problems": []}
    shards: List[str] = []
    if index_name:
        data, problem = read_json(index_name)
        if problem:
            out["problems"].append(f"{os.path.basename(index_name)}: {problem}")
        elif isinstance(data, dict):
            weight_map = data.get("weight_map") if isinstance(data.get("weight_map"), dict) else {}
            shards = sorted({str(v) for v in weight_map.values()})[:MAX_SHARDS]
            meta = data.get("metadata") if isinstance(data.get("metadata"), dict) else {}
            if _int(meta.get("total_size")):
                out["index_total_size"] = meta["total_size"]
            out["index"] = os.path.basename(index_name)
    if not shards:
        found = sorted(os.path.basename(p) for p in glob.glob(os.path.join(path, "*.safetensors")))
        preferred = [n for n in found if n.startswith("model")] or found
        shards = preferred[:MAX_SHARDS]
    if shards:
        out["format"] = "safetensors"
        total = 0
        dtypes: Dict[str, int] = {}
        for shard in shards:
            full = os.path.join(path, shard)
            if not os.path.exists(full):
                out["missing"].append(shard)
                continue
            info = safetensors_header(full)
            if "error" in info:
                out["problems"].append(f"{shard}: {info['error']}")
            total += int(info.get("bytes") or 0)
            for dtype, nbytes in (info.get("dtypes") or {}).items():
                dtypes[dtype] = dtypes.get(dtype, 0) + nbytes
            out["files"] += 1
        if out["missing"] and out.get("index_total_size"):
            out.update(bytes=out["index_total_size"], source="index metadata.total_size (shards missing)")
        else:
            out.update(bytes=total, source="safetensors headers")
        out["dtypes"] = dtypes
        return out
    others = [p for pattern in ("*.bin", "*.pt", "*.pth", "*.gguf") for p in glob.glob(os.path.join(path, pattern))]
    others = [p for p in others if not os.path.basename(p).startswith(("training_args", "optimizer", "scheduler"))]
    if others:
        out.update(format=os.path.splitext(others[0])[1].lstrip("."), bytes=sum(os.path.getsize(p) for p in others),
                   source="file sizes", files=len(others))
        return out
    out["problems"].append("no weight files (*.safetensors, *.bin, *.pt, *.gguf)")
    return out


def inspect(resolved: Dict[str, Any]) -> Dict[str, Any]:
    """{config | config_problem, weights} of a resolved local or cached model."""
    path = resolved.get("path")
    out: Dict[str, Any] = {}
    if not path:
        return out
    if os.path.isfile(path):
        out["config_problem"] = "a GGUF file: config.json is inside the file (not read)"
        out["weights"] = weights(path)
        return out
    data, problem = read_json(os.path.join(path, "config.json"))
    if problem:
        out["config_problem"] = f"config.json {problem}"
    elif not isinstance(data, dict):
        out["config_problem"] = "config.json is not a JSON object"
    else:
        fields = config_fields(data)
        if fields.get("quantization") is None:
            fields["quantization"] = hf_quant_config(path)
        out["config"] = fields
    out["weights"] = weights(path)
    return out
