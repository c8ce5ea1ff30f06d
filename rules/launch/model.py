"""GD703, GD704, GD715, GD723: the model the command serves (readable, cached, context length, code)."""

from __future__ import annotations

import shlex

from gpudoctor.rule import ERROR, WARNING, Fail, Fix, NotApplicable, Unknown, rule
from .common import _applies, _applies_server, _args, _command_with, _config, _engine_name, _int, _is_sglang, _num, _vllm_version
from .memory import _derived_max_len

@rule("GD703", "model-unreadable", severity=ERROR, area="launch", applies=_applies_server)
def model_unreadable(snap):
    """The model (or its config.json or weights) cannot be read where the command points.

    ## Why
    vLLM treats an existing path as a local model and anything else as a Hugging Face repo id.
    A typo in a local path therefore turns into a download attempt of a repo that does not
    exist ("Repository Not Found" / "is not a local folder and is not a valid model
    identifier"); a config.json that is not JSON fails in transformers' config loader; a
    snapshot with missing or truncated shards (an interrupted download) fails while loading
    weights, after minutes of startup, or with "Cannot find any model weights".
    A Hub model id that is not cached is read from the Hub, as vLLM reads it at startup; when the Hub
    cannot be reached or refuses (gated, offline), that is not this finding: the checks that need
    the config are unknown with the reason (the server may well reach the Hub).

    ## Fix
    Point at the directory that holds config.json and the weights; re-download a broken
    snapshot (`hf download ORG/NAME`); repair or restore config.json.

    ## References
    - huggingface/safetensors format (8-byte header length, JSON header with data_offsets);
      Hugging Face hub cache layout (models--ORG--NAME/snapshots/COMMIT).
    - vLLM `DefaultModelLoader` ("Cannot find any model weights with …").
    - https://huggingface.co/docs/safetensors/index
    """
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
                f"{what} {given!r} does not exist ({info.get('detail')}); {_engine_name(snap)} would then try it as a Hugging Face repo id and fail",
                [f"{prefix}.source"],
                Fix("Give the directory that holds config.json and the weights.", [f"ls -la {shlex.quote(str(given))}"]),
                subject=what,
            ))
            continue
        config = snap.get(f"{prefix}.config")
        if config.status == "error" and info.get("kind") in ("local", "hf_cache"):  # the Hub's trouble is an unknown, not this
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


@rule("GD704", "model-not-cached-offline", severity=ERROR, area="launch", applies=_applies)
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
    - huggingface_hub docs, "Environment variables" (HF_HUB_OFFLINE, HF_HOME, HF_HUB_CACHE) and
      "Manage the cache" (models--ORG--NAME/snapshots layout).
    - https://huggingface.co/docs/huggingface_hub/package_reference/environment_variables
    """
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
    - https://github.com/vllm-project/vllm/blob/main/vllm/config/model.py
    - SGLang's `--context-length` (`ModelConfig`, python/sglang/srt/configs/model_config.py):
      "User-specified context_length (N) is greater than the derived context_length (M) …
      set the env var SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1"; it derives M from the
      first of max_sequence_length, seq_length, max_seq_len, model_max_length,
      max_position_embeddings, times the rope factor unless the rope config has
      original_max_position_embeddings or is llama3
      (python/sglang/srt/utils/hf_transformers/common.py `get_context_length`).
    """
    if _is_sglang(snap):
        return _sglang_context_length(snap)
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


def _sglang_context_length(snap):
    """GD715 for `sglang serve --context-length N` (see the rule's references for SGLang's derivation)."""
    settings = snap.value("launch.sglang_model") or {}
    given = _int(settings.get("context_length"))
    if given is None or given <= 0:
        return NotApplicable("--context-length not given (SGLang derives it from config.json)")
    cfg = _config(snap)
    if cfg is None:
        return Unknown(f"model config unknown ({snap.get('model.config').describe()})")
    if cfg.get("max_length_key") != "max_position_embeddings" or not _int(cfg.get("max_position_embeddings")):
        return Unknown(f"the model's context is in {cfg.get('max_length_key') or 'no key'}: SGLang reads its length keys in "
                       "another order than this check knows")
    base = int(cfg["max_position_embeddings"])
    rope = cfg.get("rope_scaling") if isinstance(cfg.get("rope_scaling"), dict) else None
    factor = 1.0
    if rope and "original_max_position_embeddings" not in rope and rope.get("rope_type") != "llama3":
        factor = _num(rope.get("factor")) or 1.0
    derived = int(factor * base)
    if given <= derived:
        return None
    how = f"max_position_embeddings={base}" + (f" × rope factor {factor:g}" if factor != 1.0 else "")
    allowed = str((snap.value("env") or {}).get("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN", "")).lower() in ("1", "true")
    message = (f"--context-length {given} is more than the model's {derived} ({how}): SGLang stops with \"User-specified "
               f"context_length ({given}) is greater than the derived context_length ({derived})\"")
    if allowed:
        message = (f"--context-length {given} is more than the model's {derived} ({how}); SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 "
                   "lets SGLang start, but positions past the trained context give garbage without rope scaling")
    return Fail(message, [("launch.sglang_model.context_length", given), ("model.config.max_position_embeddings", base)],
                Fix("Stay within the trained context, or use rope scaling the model supports (--json-model-override-args).",
                    [_command_with(snap, "--context-length", derived)]),
                severity=WARNING if allowed else ERROR)


@rule("GD723", "architecture-needs-trust-remote-code", severity=ERROR, area="launch", applies=_applies)
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
    - https://docs.vllm.ai/en/latest/models/supported_models/
    """
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
