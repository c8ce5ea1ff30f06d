"""The smoke verdict table: one row per step, its verdict (from the rule that judged it)
and the numbers measured, for the terminal and for JSON."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from gpudoctor.engine import Result
from gpudoctor.rule import FAIL, NOT_APPLICABLE, PASS, SEVERITY_RANK, UNKNOWN

# (check, fact, rule that judges it)
STEPS: Tuple[Tuple[str, str, str], ...] = (
    ("readiness", "server.ready", "GD801"),
    ("model", "server.models", "GD802"),
    ("known answer", "server.known_answer", "GD803"),
    ("chat (origin request)", "server.chat", "GD804"),
    ("streaming", "server.stream", "GD805"),
    ("concurrency", "server.concurrency", "GD806"),
    ("tool call", "server.tool_call", "GD807"),
    ("streamed tool call", "server.tool_stream", "GD812"),
    ("speculative decoding", "server.spec_decode", "GD808"),
    ("long context", "server.long_context", "GD813"),  # --long only
)
OPTIONAL = {"server.long_context"}
GLYPHS = {"pass": ("✓", "+"), "FAIL": ("✗", "x"), "warn": ("!", "!"), "info": ("i", "i"), "skip": ("-", "-"), "unknown": ("?", "?")}
STYLES = {"pass": "green", "FAIL": "bold red", "warn": "yellow", "info": "cyan", "skip": "dim", "unknown": "magenta"}


def rows(result: Result) -> List[Dict[str, Any]]:
    outcomes = {o.rule.id: o for o in result.outcomes}
    out = []
    for check, path, rule_id in STEPS:
        if path in OPTIONAL and path not in result.snapshot.facts:
            continue
        outcome = outcomes.get(rule_id)
        fact = result.snapshot.get(path)
        verdict, note = _verdict(outcome)
        value = fact.value if isinstance(fact.value, dict) else {}
        try:
            measured = SUMMARIES[path](value) if fact.ok else ""
        except Exception as exc:  # decoration must never fail the run
            measured = f"({type(exc).__name__})"
        if verdict in ("skip", "unknown") and note:
            measured = note  # why it was skipped says more than the numbers
        elif not measured:
            measured = note or fact.detail
        out.append({"check": check, "rule": rule_id, "verdict": verdict, "measured": measured, "fact": path, "status": fact.status,
                    "value": fact.value})
    return out


def _verdict(outcome) -> Tuple[str, str]:
    if outcome is None:
        return "unknown", "not judged"
    if outcome.status == PASS:
        return "pass", ""
    if outcome.status == FAIL:
        worst = max((f.severity for f in outcome.findings), key=SEVERITY_RANK.__getitem__)
        return {"error": "FAIL", "warning": "warn", "info": "info"}[worst], outcome.findings[0].message
    if outcome.status == NOT_APPLICABLE:
        return "skip", outcome.reason
    return "unknown", outcome.reason if outcome.status == UNKNOWN else ""


# --- one line of numbers per step ----------------------------------------------------------
def _n(value: Any, digits: int = 1) -> str:
    if isinstance(value, bool) or value is None:
        return "?"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _short_model(name: Any) -> str:
    text = str(name)
    return text if len(text) <= 60 or "/" not in text else "…/" + text.rsplit("/", 1)[-1]


def _ready(v: Dict[str, Any]) -> str:
    attempts = v.get("attempts", 1)
    return f"ready after {_n(v.get('waited_s'))} s ({attempts} attempt{'s' * (attempts != 1)}), /health {v.get('health')}"


def _models(v: Dict[str, Any]) -> str:
    served = v.get("served") or []
    return f"{_short_model(v.get('chosen'))} ({len(served)} served)"


def _known(v: Dict[str, Any]) -> str:
    found = "found" if v.get("correct") else "not found"
    where = " (in reasoning)" if v.get("answer_in") == "reasoning" else ""
    return f"{v.get('expected')!r} {found}{where} in {_n(v.get('elapsed_s'), 2)} s: {str(v.get('content') or '')[:50]!r}"


def _usage(u: Optional[Dict[str, Any]]) -> str:
    if not isinstance(u, dict):
        return "usage missing"
    return f"usage {u.get('prompt_tokens', '?')}+{u.get('completion_tokens', '?')} tokens"


def _chat(v: Dict[str, Any]) -> str:
    reasoning = v.get("reasoning_field") or "none"
    if v.get("reasoning_field"):
        reasoning += f" ({v.get('reasoning_chars')} chars)"
    check = v.get("answer_check") if isinstance(v.get("answer_check"), dict) else {}
    answer = f"answer {check.get('verdict')}: {check.get('reason')}, " if check else ""
    return (f"{v.get('content_chars')} chars{' with code' if v.get('has_code') else ''}, {answer}finish_reason {v.get('finish_reason')}, "
            f"{_usage(v.get('usage'))}, reasoning field: {reasoning}, {_n(v.get('elapsed_s'), 2)} s")


def _stream(v: Dict[str, Any]) -> str:
    text = (f"TTFT {_n(v.get('ttft_ms'))} ms, ITL p50 {_n(v.get('itl_p50_ms'), 2)} / p95 {_n(v.get('itl_p95_ms'), 2)} ms, "
            f"{_n(v.get('decode_tokens_per_s'))} tok/s over {v.get('completion_tokens')} tokens, "
            f"{'usage chunk' if v.get('usage') else 'no usage chunk'}, {'[DONE]' if v.get('done') else 'no [DONE]'}")
    server = v.get("server_timings") or {}
    if server.get("source") == "metrics":  # vLLM: like for like, and TTFT as a breakdown
        text += (f"; server's own: {_n(server.get('decode_tokens_per_s'))} tok/s as 1000/mean ITL vs our "
                 f"{_n(server.get('ours_decode_tokens_per_s'))} first-to-last chunk ({_pct(server.get('tokens_per_s_diff_pct'))}); "
                 f"TTFT {_n(server.get('ttft_ms'))} ms after {_n(server.get('queue_time_ms'))} ms queued, "
                 f"front end {_n(server.get('front_end_ms'))} ms (different definitions)")
    elif server.get("source") == "prometheus":  # no timings in the responses: what its /metrics moved by
        text += f"; server's /metrics: {_n(server.get('decode_tokens_per_s'))} tok/s (decode time per token after the first)"
        if server.get("ours_decode_tokens_per_s") is not None:
            text += f" vs our {_n(server.get('ours_decode_tokens_per_s'))} first-to-last chunk ({_pct(server.get('tokens_per_s_diff_pct'))})"
        if server.get("tokens_per_step") and server["tokens_per_step"] > 1.05:
            text += (f", {_n(server.get('tokens_per_step'), 2)} tokens per engine step (its inter-token latency, "
                     f"{_n(server.get('itl_per_step_ms'), 2)} ms, is per step: {_n(server.get('steps_per_s'))} "
                     "tok/s if read as per token)")
        text += f"; TTFT {_n(server.get('ttft_ms'))} ms from arrival, front end {_n(server.get('front_end_ms'))} ms"
        if server.get("note"):
            text += f" ({server['note']})"
    elif server:
        text += (f"; server's own: TTFT {_n(server.get('ttft_ms'))} ms ({_pct(server.get('ttft_diff_pct'))}), "
                 f"{_n(server.get('decode_tokens_per_s'))} tok/s ({_pct(server.get('tokens_per_s_diff_pct'))})")
    return text


def _pct(value: Any) -> str:
    return f"{value:+.1f} %" if isinstance(value, (int, float)) else "?"


def _concurrency(v: Dict[str, Any]) -> str:
    return (f"{v.get('completed')}/{v.get('requested')} streams completed, {_n(v.get('aggregate_tokens_per_s'))} tok/s aggregate, "
            f"TTFT p50 {_n(v.get('ttft_p50_ms'))} ms")


def _tool(v: Dict[str, Any]) -> str:
    result = v.get("result")
    if result == "tool_call":
        return f"{v.get('name')}({_short_args(v.get('arguments'))}), finish_reason {v.get('finish_reason')}"
    words = RESULT_WORDS.get(str(result), str(result).replace("_", " "))
    return f"{words}: {v.get('reason') or v.get('message') or ''}".rstrip(": ")


# The probe's result codes, as a reader says them (the row printed "no_tool_call").
RESULT_WORDS = {"no_tool_call": "no tool call", "unparsed_markup": "tool call left as text", "malformed": "malformed tool call",
                "not_supported": "tools not supported"}


def _tool_stream(v: Dict[str, Any]) -> str:
    if v.get("result") == "tool_call":
        return (f"{v.get('name')}({_short_args(v.get('arguments'))}) over {v.get('deltas')} deltas "
                f"(id, type and name first, {v.get('argument_fragments')} argument fragments), finish_reason {v.get('finish_reason')}")
    return _tool(v)


def _short_args(args: Any) -> str:
    import json

    text = json.dumps(args, ensure_ascii=False)
    return text if len(text) <= 60 else text[:59] + "…"


def _spec(v: Dict[str, Any]) -> str:
    if not v.get("draft_tokens"):
        src = v.get("source") or "metrics"
        return f"no drafts ({'no spec_decode counters' if not v.get('counters') and not v.get('per_response') else src})"
    rate = v.get("acceptance_rate")
    text = (f"{_n(v.get('drafts'))} drafts, {v.get('accepted_tokens')}/{v.get('draft_tokens')} draft tokens accepted "
            f"({rate:.1%})" if isinstance(rate, (int, float)) else f"{v.get('draft_tokens')} draft tokens")
    if v.get("mean_acceptance_length") is not None:
        text += f", mean acceptance length {v['mean_acceptance_length']:.2f}"
    per_pos = v.get("per_position_acceptance") or []
    if per_pos:
        text += ", per position " + " ".join(f"{p:.2f}" for p in per_pos[:8])
    text += f" [{v.get('scheme') or v.get('source')}]"
    return text


SUMMARIES = {
    "server.ready": _ready,
    "server.models": _models,
    "server.known_answer": _known,
    "server.chat": _chat,
    "server.stream": _stream,
    "server.concurrency": _concurrency,
    "server.tool_call": _tool,
    "server.tool_stream": _tool_stream,
    "server.spec_decode": _spec,
    "server.long_context": lambda v: (f"{(v.get('usage') or {}).get('prompt_tokens')} prompt tokens of max_model_len "
                                      f"{v.get('max_model_len')} ({v.get('fill')}), code word "
                                      f"{'recalled' if v.get('recalled') else 'lost'}, {v.get('elapsed_s')} s"),
}


# --- terminal ----------------------------------------------------------------------------
def lines(result: Result, fail_on: str, unicode: bool = True) -> List[List[Tuple[str, str]]]:
    """Lines of (text, rich style) segments, for gpudoctor.render.text.write."""
    from gpudoctor import __version__

    table = rows(result)
    snap = result.snapshot
    model = (snap.value("server.models") or {}).get("chosen") if isinstance(snap.value("server.models"), dict) else None
    out: List[List[Tuple[str, str]]] = [[(f"gpudoctor {__version__} smoke", "bold"),
                                         (f"  {snap.value('server.url', '?')}" + (f" · {_short_model(model)}" if model else ""), "dim")]]
    width = max(len(row["check"]) for row in table) + 2
    for row in table:
        glyph = GLYPHS[row["verdict"]][0 if unicode else 1]
        style = STYLES[row["verdict"]]
        out.append([(f"{glyph} ", style), (f"{row['check']:<{width}}", "bold"), (f"{row['verdict']:<8}", style), (row["measured"], "")])
    findings = [f for f in result.findings]
    if findings:
        out.append([])
    fixes_shown = {}
    for finding in findings:
        glyph = GLYPHS[{"error": "FAIL", "warning": "warn", "info": "info"}[finding.severity]][0 if unicode else 1]
        style = STYLES[{"error": "FAIL", "warning": "warn", "info": "info"}[finding.severity]]
        out.append([(f"{glyph} {finding.rule_id} {finding.name}: ", style), (finding.message, "")])
        for item in finding.evidence:
            shown = item.value if isinstance(item.value, str) else repr(item.value)
            shown = shown.replace("\r", "\\r").replace("\n", "\\n")
            out.append([(f"    {item.path} = ", "dim"), (shown if len(shown) <= 160 else shown[:159] + "…", "")])
        if finding.fix:
            key = (finding.fix.summary, tuple(finding.fix.commands))
            if key in fixes_shown:
                out.append([("  fix: ", "bold"), (f"as for {fixes_shown[key]} above", "")])
            else:
                fixes_shown[key] = finding.rule_id
                out.append([("  fix: ", "bold"), (finding.fix.summary, "")])
                for command in finding.fix.commands:
                    out.append([("    $ ", "dim"), (command, "cyan")])
        out.append([(f"  more: gpudoctor explain {finding.rule_id}", "dim")])
    counts = result.counts()
    blocking = result.blocking(fail_on)
    passed = sum(row["verdict"] == "pass" for row in table)
    skipped = sum(row["verdict"] == "skip" for row in table)
    failed = sum(row["verdict"] == "FAIL" for row in table)
    verdict = f"blocking (at or above {fail_on}): exit 1" if blocking else "nothing blocking: exit 0"
    out.append([])
    out.append([("Summary: ", "bold"),
                (f"{passed} passed, {failed} failed, {counts['warning']} warning{'s' * (counts['warning'] != 1)}, {skipped} skipped, "
                 f"{sum(row['verdict'] == 'unknown' for row in table)} unknown", ""),
                (f" — {verdict}", "bold red" if blocking else "bold green")])
    return out


def json_document(result: Result, fail_on: str) -> Dict[str, Any]:
    from gpudoctor.render import json_out

    doc = json_out.document(result, fail_on)
    snap = result.snapshot
    models = snap.value("server.models") if isinstance(snap.value("server.models"), dict) else {}
    doc["smoke"] = {
        "url": snap.value("server.url"),
        "model": (models or {}).get("chosen"),
        "verdicts": [{key: row[key] for key in ("check", "rule", "verdict", "measured", "fact", "status", "value")} for row in rows(result)],
    }
    return doc


def headline(snap) -> str:
    """One line for the "Server" area in `check --smoke` (render/headlines.py can register it)."""
    url = snap.value("server.url")
    if not url:
        return ""
    ready = snap.get("server.ready")
    if not ready.ok:
        return f"{url}: not ready"
    parts = [str(url)]
    models = snap.value("server.models")
    if isinstance(models, dict) and models.get("chosen"):
        parts.append(_short_model(models["chosen"]))
    stream = snap.value("server.stream")
    if isinstance(stream, dict) and stream.get("ttft_ms") is not None:
        parts.append(f"TTFT {_n(stream.get('ttft_ms'), 0)} ms, {_n(stream.get('decode_tokens_per_s'), 0)} tok/s")
    spec = snap.value("server.spec_decode")
    if isinstance(spec, dict) and isinstance(spec.get("acceptance_rate"), (int, float)) and spec.get("draft_tokens"):
        parts.append(f"spec {spec['acceptance_rate']:.0%} accepted")
    return " · ".join(parts)
