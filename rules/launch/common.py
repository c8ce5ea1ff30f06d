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
    """The launch command with one flag set (None: a switch), as a shell line.

    The flag is edited where the user typed it, in their spelling (``-tp 3`` becomes ``-tp 1``, not
    ``-tp 3 --tensor-parallel-size 1``); earlier repeats go (argparse keeps the last); appended when absent.
    """
    command = snap.value("launch.command") or {}
    argv = list(command.get("argv") or [])
    aliases = command.get("aliases") or {}
    spans: List[Tuple[int, int, str]] = []  # (start, end, spelling) of each occurrence of the flag
    i = 0
    while i < len(argv):
        word = argv[i]
        typed = word.split("=", 1)[0]
        if word.startswith("--"):  # SGLang's aliases and abbreviations are in ``aliases`` too (--tp for --tp-size)
            name = aliases[typed] if isinstance(aliases, dict) and typed in aliases else "--" + typed[2:].replace("_", "-")
        else:
            name = aliases.get(typed, typed) if isinstance(aliases, dict) else typed
        if name == flag:
            takes_next = "=" not in word and i + 1 < len(argv) and not argv[i + 1].startswith("-")
            end = i + (2 if takes_next and value is not None else 1)
            spans.append((i, end, typed))
            i = end
            continue
        i += 1
    if not spans:
        out = argv + ([flag] if value is None else [flag, str(value)])
    else:
        start, end, typed = spans[-1]
        setting = [typed] if value is None else [typed, str(value)]
        dropped = {k for s, e, _ in spans[:-1] for k in range(s, e)}
        out = [w for k, w in enumerate(argv[:start]) if k not in dropped] + setting + argv[end:]
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
def _is_sglang(snap) -> bool:
    return snap.value("launch.kind") == "sglang-serve"


def _engine_name(snap) -> str:
    return "SGLang" if _is_sglang(snap) else "vLLM"


def _tp_flag(snap) -> Tuple[str, str]:
    """(the TP flag a fix sets, the evidence path of the TP size) for the command's engine."""
    return ("--tp-size", "launch.sglang_parallel.tp_size") if _is_sglang(snap) else \
        ("--tensor-parallel-size", "launch.args.--tensor-parallel-size")


def _parallel(snap) -> Tuple[int, int, int]:
    if _is_sglang(snap):  # probes/launch/sglang_args.py parallel_layout: SGLang's own fields and defaults
        layout = snap.value("launch.sglang_parallel") or {}
        return (_int(layout.get("tp_size"), 1) or 1, _int(layout.get("pp_size"), 1) or 1, _int(layout.get("dp_size"), 1) or 1)
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
