"""What every launch rule reads: the parsed command, the model config, the engine's GPUs."""

from __future__ import annotations

import shlex
from typing import Any, Dict, List, Optional, Tuple

from gpudoctor.rule import NotApplicable
from gpudoctor.visible import visible_gpus

GIB = 1 << 30


DTYPE_NAMES = {"half": "float16", "float16": "float16", "fp16": "float16", "bfloat16": "bfloat16", "bf16": "bfloat16",
               "float": "float32", "float32": "float32", "fp32": "float32"}


# --- shared helpers ---------------------------------------------------------------------------------
def _applies(snap) -> Optional[NotApplicable]:
    kind = snap.value("launch.kind")
    if kind is None:
        return NotApplicable("no launch command (run: gpudoctor preflight -- vllm serve MODEL …)")
    if kind not in ("vllm-serve", "vllm-api-server"):
        return NotApplicable(f"the launch command is not a vLLM server ({kind})")
    return None


def _applies_server(snap) -> Optional[NotApplicable]:
    """As ``_applies``, for the rules that also hold for an SGLang server (its flags, its port)."""
    if snap.value("launch.kind") == "sglang-serve":
        return None
    return _applies(snap)


def _engine(snap) -> Tuple[str, str]:
    """(the engine the command runs as users call it, with its version; the command that lists its flags)."""
    if snap.value("launch.kind") == "sglang-serve":
        info = snap.value("launch.sglang") or {}
        return (f"SGLang {info['version']}" if info.get("version") else "the installed SGLang"), "sglang serve --help"
    return _vllm_version(snap), "vllm serve --help="


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
