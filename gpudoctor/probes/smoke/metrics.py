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
        return None
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


def legacy_gauges(samples: Samples) -> Dict[str, float]:
    return {name: value for (name, _), value in samples.items() if name in LEGACY_GAUGES}


def _number(value: float) -> Any:
    return int(value) if float(value).is_integer() else round(value, 6)


def spec_delta(before: Optional[Dict[str, Any]], after: Optional[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    """What happened between two scrapes, with vLLM's derived ratios (None: no counters)."""
    if after is None:
        return None
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
