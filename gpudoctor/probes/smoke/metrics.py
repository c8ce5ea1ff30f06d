"""Prometheus text parsing and speculative-decoding counter deltas.

Two naming schemes carry the same four counters:

- vLLM V1 (``vllm/v1/spec_decode/metrics.py``; https://docs.vllm.ai/en/latest/usage/metrics/):
  ``vllm:spec_decode_num_drafts_total``, ``vllm:spec_decode_num_draft_tokens_total``,
  ``vllm:spec_decode_num_accepted_tokens_total`` and
  ``vllm:spec_decode_num_accepted_tokens_per_pos_total{position="i"}``, labelled by
  ``model_name`` and ``engine`` (one series per engine with data parallelism: summed here).
- llama.cpp's server (``--metrics``): the same names under ``llamacpp:``
  (``llamacpp:spec_decode_num_drafts_total`` … ``{position="i"}``), always present, zero
  when no draft model is loaded.

- SGLang (``python/sglang/srt/observability/metrics_collector.py``, served only with
  ``--enable-metrics``) has no draft-token counters: ``sglang:spec_verify_calls_total`` (verify
  passes of finished requests) and ``sglang:generation_tokens_total`` (their output tokens), and
  gauges of the latest batch (``sglang:spec_accept_length``, ``sglang:spec_accept_rate``,
  ``sglang:spec_num_draft_tokens``). From the deltas: mean acceptance length = tokens / verify
  passes (SGLang's own ``spec_accept_length``, bonus token included); draft tokens = verify passes
  × (``spec_num_draft_tokens`` − 1) and accepted = tokens − verify passes (SGLang's
  ``num_proposed_drafts``; each pass yields its accepted drafts plus one), approximate by one
  token per request (its first, from prefill). Exact counts come per request (smoke/session.py).

Derived numbers follow vLLM's definitions (and ``vllm bench serve``,
https://docs.vllm.ai/en/latest/cli/bench/serve/):
acceptance rate = accepted / draft tokens; mean acceptance length = 1 + accepted / drafts;
per-position acceptance = accepted_per_pos[i] / drafts.
"""

from __future__ import annotations

import math
import re
from typing import Any, Dict, List, Optional, Tuple

Labels = Tuple[Tuple[str, str], ...]
Samples = Dict[Tuple[str, Labels], float]

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_SPEC = re.compile(
    r"^(?:(?P<ns>[a-zA-Z_][a-zA-Z0-9_]*):)?spec_decode_num_"
    r"(?P<what>drafts|draft_tokens|accepted_tokens_per_pos|accepted_tokens)(?:_total)?$"
)
# vLLM's V0 engine (≤ 0.8) exposed gauges instead; gone in V1 (https://docs.vllm.ai/en/latest/design/metrics/).
LEGACY_GAUGES = ("vllm:spec_decode_draft_acceptance_rate", "vllm:spec_decode_efficiency")
SCHEME_NAMES = {"vllm": "vllm", "llamacpp": "llama.cpp"}
COUNTERS = ("drafts", "draft_tokens", "accepted_tokens")
SGLANG_VERIFY = "sglang:spec_verify_calls_total"
SGLANG_TOKENS = "sglang:generation_tokens_total"
SGLANG_DRAFT_TOKENS = "sglang:spec_num_draft_tokens"
SGLANG_GAUGES = ("sglang:spec_accept_length", "sglang:spec_accept_rate", SGLANG_DRAFT_TOKENS)


def parse(text: str) -> Tuple[Samples, int]:
    """Prometheus text exposition → ({(name, labels): value}, number of lines not understood)."""
    samples: Samples = {}
    bad = 0
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parsed = _parse_line(line)
        if parsed is None:
            bad += 1
            continue
        name, labels, value = parsed
        samples[(name, labels)] = value
    return samples, bad


def _parse_line(line: str) -> Optional[Tuple[str, Labels, float]]:
    match = _NAME.match(line)
    if not match:
        return None
    name = match.group(0)
    pos = match.end()
    labels: List[Tuple[str, str]] = []
    if pos < len(line) and line[pos] == "{":
        pos += 1
        while True:
            while pos < len(line) and line[pos] in " ,":
                pos += 1
            if pos < len(line) and line[pos] == "}":
                pos += 1
                break
            key = _NAME.match(line, pos)
            if not key or line[key.end():key.end() + 2] != '="':
                return None
            pos = key.end() + 2
            value_chars: List[str] = []
            while pos < len(line) and line[pos] != '"':
                if line[pos] == "\\" and pos + 1 < len(line):
                    pos += 1
                    value_chars.append({"n": "\n", "\\": "\\", '"': '"'}.get(line[pos], line[pos]))
                else:
                    value_chars.append(line[pos])
                pos += 1
            if pos >= len(line):
                return None
            pos += 1  # closing quote
            labels.append((key.group(0), "".join(value_chars)))
    rest = line[pos:].split()
    if not rest:
        return None
    try:
        value = float(rest[0])
    except ValueError:
        return None
    return name, tuple(sorted(labels)), value


def spec_counters(samples: Samples) -> Optional[Dict[str, Any]]:
    """The speculative-decoding counters in one scrape, summed over label sets, or None."""
    by_ns: Dict[str, Dict[str, Any]] = {}
    for (name, labels), value in samples.items():
        match = _SPEC.match(name)
        if not match or not math.isfinite(value):
            continue
        ns = match.group("ns") or ""
        entry = by_ns.setdefault(ns, {"names": set(), "per_pos": {}, **{key: 0.0 for key in COUNTERS}})
        entry["names"].add(name)
        what = match.group("what")
        if what == "accepted_tokens_per_pos":
            position = dict(labels).get("position")
            if position is None or not position.isdigit():
                continue
            entry["per_pos"][int(position)] = entry["per_pos"].get(int(position), 0.0) + value
        else:
            entry[what] += value
    if not by_ns:
        return _sglang_counters(samples)
    ns = next((n for n in ("vllm", "llamacpp") if n in by_ns), sorted(by_ns)[0])
    entry = by_ns[ns]
    return {
        "scheme": SCHEME_NAMES.get(ns, ns or "unprefixed"),
        "metric_names": sorted(entry["names"]),
        "drafts": entry["drafts"],
        "draft_tokens": entry["draft_tokens"],
        "accepted_tokens": entry["accepted_tokens"],
        "per_pos": dict(sorted(entry["per_pos"].items())),
    }


def _sglang_counters(samples: Samples) -> Optional[Dict[str, Any]]:
    """SGLang's two counters summed over label sets (TP/PP/DP ranks, is_streaming), or None: SGLang
    creates the verify series when the first speculative request finishes."""
    verify = tokens = 0.0
    draft_tokens: Optional[float] = None
    names = set()
    for (name, _), value in samples.items():
        if not math.isfinite(value):
            continue
        if name == SGLANG_VERIFY:
            verify += value
            names.add(name)
        elif name == SGLANG_TOKENS:
            tokens += value
            names.add(name)
        elif name == SGLANG_DRAFT_TOKENS and value > 0:
            draft_tokens = max(draft_tokens or 0.0, value)
    if SGLANG_VERIFY not in names:
        return None
    return {"scheme": "sglang", "metric_names": sorted(names), "drafts": verify, "generated_tokens": tokens,
            "num_draft_tokens": draft_tokens, "draft_tokens": 0.0, "accepted_tokens": 0.0, "per_pos": {}}


def legacy_gauges(samples: Samples) -> Dict[str, float]:
    """vLLM V0's gauges, and SGLang's gauges of its latest batch."""
    return {name: value for (name, _), value in samples.items() if name in LEGACY_GAUGES or name in SGLANG_GAUGES}


def _number(value: float) -> Any:
    return int(value) if float(value).is_integer() else round(value, 6)


def spec_delta(before: Optional[Dict[str, Any]], after: Optional[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    """What happened between two scrapes, with vLLM's derived ratios (None: no counters)."""
    if after is None:
        return None
    if after.get("scheme") == "sglang":
        return _sglang_delta(before, after)
    before = before or {"drafts": 0.0, "draft_tokens": 0.0, "accepted_tokens": 0.0, "per_pos": {}}
    reset = any(after[key] < before.get(key, 0.0) for key in COUNTERS)
    base = {"drafts": 0.0, "draft_tokens": 0.0, "accepted_tokens": 0.0, "per_pos": {}} if reset else before
    drafts = after["drafts"] - base["drafts"]
    draft_tokens = after["draft_tokens"] - base["draft_tokens"]
    accepted = after["accepted_tokens"] - base["accepted_tokens"]
    positions = sorted(set(after["per_pos"]) | set(base["per_pos"]))
    per_pos = {i: after["per_pos"].get(i, 0.0) - base["per_pos"].get(i, 0.0) for i in positions}
    out: Dict[str, Any] = {
        "scheme": after["scheme"],
        "drafts": _number(drafts),
        "draft_tokens": _number(draft_tokens),
        "accepted_tokens": _number(accepted),
        "accepted_per_position": [_number(per_pos[i]) for i in positions],
        "acceptance_rate": round(accepted / draft_tokens, 4) if draft_tokens > 0 else None,
        "mean_acceptance_length": round(1 + accepted / drafts, 4) if drafts > 0 else None,
        "per_position_acceptance": [round(per_pos[i] / drafts, 4) for i in positions] if drafts > 0 else [],
        "counter_reset": reset,
    }
    return out


def _sglang_delta(before: Optional[Dict[str, Any]], after: Dict[str, Any]) -> Dict[str, Any]:
    base = before if before and before.get("scheme") == "sglang" else {"drafts": 0.0, "generated_tokens": 0.0}
    reset = after["drafts"] < base["drafts"] or after["generated_tokens"] < base["generated_tokens"]
    if reset:
        base = {"drafts": 0.0, "generated_tokens": 0.0}
    verify = after["drafts"] - base["drafts"]
    tokens = after["generated_tokens"] - base["generated_tokens"]
    per_pass = after.get("num_draft_tokens")
    draft_tokens = verify * (per_pass - 1) if isinstance(per_pass, (int, float)) and per_pass > 1 else None
    accepted = max(0.0, tokens - verify) if verify > 0 else 0.0
    return {
        "scheme": "sglang",
        "drafts": _number(verify),
        "draft_tokens": _number(draft_tokens) if draft_tokens is not None else None,
        "accepted_tokens": _number(accepted),
        "generated_tokens": _number(tokens),
        "accepted_per_position": [],
        "acceptance_rate": round(min(1.0, accepted / draft_tokens), 4) if draft_tokens else None,
        "mean_acceptance_length": round(tokens / verify, 4) if verify > 0 else None,
        "per_position_acceptance": [],
        "counter_reset": reset,
        "approximate": "accepted and draft tokens from SGLang's verify passes: one token per request over",
    }


# --- the server's own request timings ----------------------------------------------------------
# vLLM V1's request histograms (vllm/v1/metrics/loggers.py, stats.py;
# https://docs.vllm.ai/en/latest/design/metrics/): TTFT runs from arrival to the first token;
# decode time from the first to the last token of a request, over its tokens after the first
# (``request_time_per_output_token`` = decode / (n − 1)); inter-token latency is observed once
# per engine step and request — with speculative decoding a step emits 1 + accepted tokens, so
# a tokens/s taken from it is per step, not per token. SGLang's collector has the same TTFT
# and inter-token histograms under ``sglang:``, and no decode-time one; its inter-token histogram
# is per token (``observe_inter_token_latency`` spreads each interval over its new tokens,
# python/sglang/srt/observability/metrics_collector.py), so its count over its sum is tokens/s.
TIMING_HISTOGRAMS = {
    "time_to_first_token_seconds": "ttft",
    "request_decode_time_seconds": "decode",
    "request_generation_tokens": "generated",
    "request_queue_time_seconds": "queue",
    "inter_token_latency_seconds": "itl",
    "time_per_output_token_seconds": "itl",  # its name before vLLM 0.11, recorded per step too
}


def request_timing(samples: Samples) -> Optional[Dict[str, Any]]:
    """The request histograms' sums and counts in one scrape (summed over engines), or None."""
    found: Dict[str, Dict[str, float]] = {}
    for (name, _), value in samples.items():
        ns, colon, rest = name.partition(":")
        if not colon or ns not in ("vllm", "sglang") or not math.isfinite(value):
            continue
        for suffix in ("_sum", "_count"):
            key = TIMING_HISTOGRAMS.get(rest[: -len(suffix)]) if rest.endswith(suffix) else None
            if key:
                found.setdefault(ns, {})[key + suffix] = found.get(ns, {}).get(key + suffix, 0.0) + value
    scheme = next((ns for ns in ("vllm", "sglang") if ns in found), None)
    return dict(found[scheme], scheme=scheme) if scheme else None  # type: ignore[dict-item]


def timing_delta(before: Optional[Dict[str, Any]], after: Optional[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    """What the server's histograms say about the requests that finished between two scrapes."""
    if not before or not after or before.get("scheme") != after.get("scheme"):
        return None
    d = {key: after[key] - before.get(key, 0.0) for key in after if key != "scheme"}
    if any(value < 0 for value in d.values()):
        return None  # the server restarted in between
    out: Dict[str, Any] = {"scheme": after["scheme"], "requests": _number(d.get("ttft_count", 0.0))}
    if d.get("ttft_count"):
        out["ttft_ms"] = round(d["ttft_sum"] / d["ttft_count"] * 1000, 2)
    if d.get("queue_count"):
        out["queue_time_ms"] = round(d["queue_sum"] / d["queue_count"] * 1000, 2)
    after_first = d.get("generated_sum", 0.0) - d.get("generated_count", 0.0)  # each request's tokens after its first
    if d.get("generated_count"):
        out["finished"] = _number(d["generated_count"])
        out["generated_tokens"] = _number(d["generated_sum"])
    if d.get("decode_sum", 0.0) > 0 and after_first > 0:
        out["decode_tokens_per_s"] = round(after_first / d["decode_sum"], 2)
    if d.get("itl_count") and after["scheme"] == "sglang":
        if d["itl_sum"] > 0:
            out["decode_tokens_per_s"] = round(d["itl_count"] / d["itl_sum"], 2)
        out["itl_ms"] = round(d["itl_sum"] / d["itl_count"] * 1000, 3)
    elif d.get("itl_count"):
        out["steps"] = _number(d["itl_count"])
        out["itl_per_step_ms"] = round(d["itl_sum"] / d["itl_count"] * 1000, 3)
        if d["itl_sum"] > 0:
            out["steps_per_s"] = round(d["itl_count"] / d["itl_sum"], 2)
        if after_first > 0:
            out["tokens_per_step"] = round(after_first / d["itl_count"], 3)
    return out
