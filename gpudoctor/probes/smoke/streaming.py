"""Steps 4 and 5: one streamed request measured token by token, then N in parallel."""


import threading
import time
from typing import Any, Dict, List, Optional

from gpudoctor import bounded  # JSON from a server: depth and number caps
from gpudoctor.probes.smoke.client import (
    CLOSED,
    ClientError,
    HTTPStatus,
    StreamResult,
)
from gpudoctor.probes.smoke.text import degenerate
from gpudoctor.snapshot import NOT_SUPPORTED, ERROR, OK, TIMEOUT, Fact
from gpudoctor.probes.smoke.session import SOURCE, Run, StepError, make_payload, usage_of
from gpudoctor.probes.smoke.answers import STREAM_PROMPT

def percentile(values: List[float], q: float) -> Optional[float]:
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def _stream_once(run_: Run, payload: Dict[str, Any], what: str) -> Dict[str, Any]:
    """Run one streamed request; return its measurements or raise StepError (with them)."""
    result = StreamResult()
    m: Dict[str, Any] = {"events": 0, "done": False}
    token_times: List[float] = []
    chunk_times: List[float] = []  # every chunk with choices, the role-only first one included
    text: List[str] = []
    reasoning: List[str] = []
    tool_deltas = 0
    tool_parts: List[Any] = []  # every tool_calls[] item of every delta, in order (bounded)
    finish_reason = None
    usage = None
    timings = None
    server_metrics = None
    sglext = None
    t0 = time.perf_counter()

    def finish() -> Dict[str, Any]:
        total = time.perf_counter() - t0
        m.update(events=result.events, done=result.done, bytes=result.bytes_read, finish_reason=finish_reason,
                 text_chunks=len(token_times), text="".join(text)[:300], reasoning_chars=len("".join(reasoning)),
                 tool_call_deltas=tool_deltas, usage=usage, total_s=round(total, 4))
        if tool_parts:
            m["tool_stream"] = tool_stream_summary(tool_parts)
        n = usage.get("completion_tokens") if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int) else len(token_times)
        m["completion_tokens"] = n
        m["tokens_counted_by"] = "usage" if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int) else "chunks"
        if token_times:
            m["ttft_ms"] = round((token_times[0] - t0) * 1000, 2)
            gaps = [(b - a) * 1000 for a, b in zip(token_times, token_times[1:])]
            m["itl_p50_ms"] = _round(percentile(gaps, 50))
            m["itl_p95_ms"] = _round(percentile(gaps, 95))
            span = token_times[-1] - token_times[0]
            m["decode_tokens_per_s"] = round((n - 1) / span, 2) if n > 1 and span > 0 else None
            m["e2e_tokens_per_s"] = round(n / total, 2) if total > 0 else None
        if chunk_times:
            # vLLM sends its first chunk (the role) when the first token is out, even when that
            # token is hidden (a reasoning parser swallows "<think>"), and the last one with the
            # final token: the span between them is the server's first-to-last-token time.
            m["first_chunk_ms"] = round((chunk_times[0] - t0) * 1000, 2)
            span = chunk_times[-1] - chunk_times[0]
            m["chunk_span_ms"] = round(span * 1000, 2)
            m["decode_tokens_per_s_chunks"] = round((n - 1) / span, 2) if n > 1 and span > 0 else None
        if timings or server_metrics:
            m["server_timings"] = _server_timings(timings, server_metrics, m)
            if not m["server_timings"]:
                del m["server_timings"]
        return m

    try:
        for event in run_.client.stream("/v1/chat/completions", run_.engine_fields(payload), run_.timeout_left(), result):
            if event.data.strip() == "[DONE]":
                continue
            if result.done:
                continue
            try:
                chunk = bounded.loads(event.data)
            except ValueError:
                raise StepError(run_.failure("invalid_json", f"{what}: chunk {result.events} is not JSON: {event.data[:80]!r}",
                                             result.status, {"measured": finish()})) from None
            if not isinstance(chunk, dict):
                raise StepError(run_.failure("invalid_json", f"{what}: chunk {result.events} is not a JSON object",
                                             result.status, {"measured": finish()}))
            if chunk.get("error"):
                err = chunk["error"]
                msg = err.get("message") if isinstance(err, dict) else str(err)
                raise StepError(run_.failure("server_error", f"{what}: the server sent an error mid-stream: {str(msg)[:200]}",
                                             result.status, {"measured": finish()}))
            if isinstance(chunk.get("usage"), dict):
                usage = usage_of(chunk)
            if isinstance(chunk.get("timings"), dict):
                timings = chunk["timings"]
            if isinstance(chunk.get("metrics"), dict):
                server_metrics = chunk["metrics"]
            if isinstance(chunk.get("sglext"), dict):  # SGLang: a chunk with no choices, before the usage chunk
                sglext = chunk["sglext"]
            choices = chunk.get("choices") if isinstance(chunk.get("choices"), list) else []
            for choice in choices:
                if not isinstance(choice, dict):
                    continue
                delta = choice.get("delta") if isinstance(choice.get("delta"), dict) else {}
                if delta or choice.get("finish_reason"):
                    chunk_times.append(event.at)
                piece = delta.get("content") if isinstance(delta.get("content"), str) else ""
                thought = ""
                for name in ("reasoning", "reasoning_content"):
                    if isinstance(delta.get(name), str):
                        thought += delta[name]
                calls = delta.get("tool_calls")
                if piece or thought or calls:
                    token_times.append(event.at)
                text.append(piece)
                reasoning.append(thought)
                if calls:
                    tool_deltas += 1
                    if isinstance(calls, list) and len(tool_parts) < 2000:
                        tool_parts.extend(calls[:8])
                if choice.get("finish_reason"):
                    finish_reason = choice["finish_reason"]
    except HTTPStatus as exc:
        raise StepError(run_.from_http(exc.response, what)) from None
    except ClientError as exc:
        kind = "stream_cut" if exc.kind in (CLOSED, "cut") else exc.kind
        message = exc.message
        if kind == "stream_cut":
            message = f"{what}: the stream was cut after {result.events} events, without [DONE]"
        raise StepError(run_.failure(kind, message, result.status or None, {"measured": finish()})) from None
    measured = finish()
    run_.note_spec({"timings": timings, "metrics": server_metrics, "sglext": sglext})  # the last chunk's counts cover the request
    if not result.done:
        raise StepError(run_.failure("stream_cut", f"{what}: the stream ended after {result.events} events without data: [DONE]",
                                     result.status, {"measured": measured}))
    return measured


def _round(value: Optional[float]) -> Optional[float]:
    return None if value is None else round(value, 2)


def _server_timings(timings: Optional[Dict[str, Any]], server_metrics: Optional[Dict[str, Any]], m: Dict[str, Any]) -> Dict[str, Any]:
    """The server's own numbers next to ours, computed the same way.

    llama.cpp: ``prompt_ms`` runs from the start of prompt processing to the first sampled
    token (its TTFT without HTTP and queueing); ``predicted_ms`` from the first to the
    last sampled token, over ``predicted_n`` tokens — so its decode rate on our definition
    ((n − 1) tokens over the first-to-last span) is (predicted_n − 1) / predicted_ms. The
    xllamacpp 2026.10 build's own ``predicted_per_second`` is exactly that; it is
    recomputed here so that an older build dividing by predicted_n compares the same way.
    """
    out: Dict[str, Any] = {}
    if isinstance(timings, dict):
        prompt_ms = timings.get("prompt_ms")
        n = timings.get("predicted_n")
        span_ms = timings.get("predicted_ms")
        out["source"] = "timings"
        out["prompt_ms"] = _round(prompt_ms) if isinstance(prompt_ms, (int, float)) else None
        out["prompt_n"] = timings.get("prompt_n")
        out["predicted_n"] = n
        out["predicted_ms"] = _round(span_ms) if isinstance(span_ms, (int, float)) else None
        out["predicted_per_second"] = _round(timings.get("predicted_per_second")) if isinstance(timings.get("predicted_per_second"), (int, float)) else None
        if isinstance(n, (int, float)) and isinstance(span_ms, (int, float)) and n > 1 and span_ms > 0:
            out["decode_tokens_per_s"] = round((n - 1) / (span_ms / 1000.0), 2)
        out["ttft_ms"] = out["prompt_ms"]
    elif isinstance(server_metrics, dict):  # vLLM --enable-per-request-metrics (else only its speculative counts)
        timed = any(key in server_metrics for key in ("mean_itl_ms", "time_to_first_token_ms"))
        return _vllm_timings(server_metrics, m) if timed else {}
    if isinstance(out.get("ttft_ms"), (int, float)) and out["ttft_ms"] > 0 and isinstance(m.get("ttft_ms"), (int, float)):
        out["ttft_diff_pct"] = round((m["ttft_ms"] - out["ttft_ms"]) / out["ttft_ms"] * 100, 2)
    if isinstance(out.get("decode_tokens_per_s"), (int, float)) and out["decode_tokens_per_s"] > 0 and isinstance(m.get("decode_tokens_per_s"), (int, float)):
        out["tokens_per_s_diff_pct"] = round((m["decode_tokens_per_s"] - out["decode_tokens_per_s"]) / out["decode_tokens_per_s"] * 100, 2)
    return out


def _number(value: Any) -> Optional[float]:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _vllm_timings(server: Dict[str, Any], m: Dict[str, Any]) -> Dict[str, Any]:
    """vLLM's per-request ``metrics`` next to ours, each figure on the same definition.

    vLLM (vllm/entrypoints/generate/base/serving.py, build_per_request_timing_metrics):
    ``mean_itl_ms`` = (last − first token time) / (n − 1), so 1000 / mean_itl_ms is
    (n − 1) tokens over the first-to-last-token span — what we measure between the first and
    the last chunk. Its ``tokens_per_second`` divides all n tokens by the time from
    scheduling to the last token, prefill included: a different figure, kept for reference
    only. ``time_to_first_token_ms`` runs from scheduling to the first token and
    ``queue_time_ms`` before it; ours adds HTTP, chat templating and tokenisation, so TTFT is
    not compared as a percentage: the difference is reported as the front end's share.
    """
    out: Dict[str, Any] = {"source": "metrics"}
    itl = _number(server.get("mean_itl_ms"))
    ttft = _number(server.get("time_to_first_token_ms"))
    queue = _number(server.get("queue_time_ms"))
    out["mean_itl_ms"] = _round(itl)
    out["generation_time_ms"] = _round(_number(server.get("generation_time_ms")))
    out["tokens_per_second_incl_prefill"] = _round(_number(server.get("tokens_per_second")))
    out["decode_tokens_per_s"] = round(1000.0 / itl, 2) if itl and itl > 0 else None
    out["decode_definition"] = "(n-1) tokens / first-to-last-token time: 1000 / mean_itl_ms vs our first-to-last chunk"
    ours = m.get("decode_tokens_per_s_chunks")
    if out["decode_tokens_per_s"] and isinstance(ours, (int, float)):
        out["ours_decode_tokens_per_s"] = ours
        out["tokens_per_s_diff_pct"] = round((ours - out["decode_tokens_per_s"]) / out["decode_tokens_per_s"] * 100, 2)
    out["ttft_ms"] = _round(ttft)
    out["queue_time_ms"] = _round(queue)
    out["ttft_definition"] = "server: scheduled to first token; ours: request sent to first chunk (adds HTTP, templating, tokenising, queueing)"
    first = m.get("first_chunk_ms")
    if ttft is not None and isinstance(first, (int, float)):
        out["front_end_ms"] = round(first - ttft - (queue or 0.0), 2)
    return out


def stream(run_: Run, model: Optional[str]) -> Fact:
    payload = make_payload(model, STREAM_PROMPT, temperature=0, max_tokens=run_.opts.stream_tokens, stream=True,
                       stream_options={"include_usage": True})
    measured = _stream_once(run_, payload, "streamed request")
    measured["degenerate"] = degenerate(measured.get("text", "")) if measured.get("text", "").strip() else (
        None if measured.get("reasoning_chars") else "empty text")
    measured["max_tokens"] = run_.opts.stream_tokens
    return Fact(measured, OK, SOURCE)


# --- 5. concurrency ----------------------------------------------------------------------
def concurrency(run_: Run, model: Optional[str]) -> Fact:
    run_.timeout_left()  # past the deadline: "not run", not "failed"
    n = max(1, run_.opts.concurrency)
    results: List[Any] = [None] * n

    def worker(index: int) -> None:
        payload = make_payload(model, f"Count from {index + 1} to {index + 20}, separated by commas.", temperature=0,
                           max_tokens=run_.opts.concurrency_tokens, stream=True, stream_options={"include_usage": True})
        try:
            results[index] = _stream_once(run_, payload, f"stream {index + 1}/{n}")
        except StepError as exc:
            results[index] = exc.fact
        except Exception as exc:  # a thread must report, not vanish
            results[index] = Fact({"error": "internal", "message": str(exc)}, ERROR, SOURCE, f"{type(exc).__name__}: {exc}")

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker, args=(i,), name=f"smoke-stream-{i}", daemon=True) for i in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(max(0.0, run_.remaining()) + 1.0)
    wall = time.perf_counter() - t0
    done = [r for r in results if isinstance(r, dict)]
    failed = [r for r in results if not isinstance(r, dict)]
    tokens = sum(r.get("completion_tokens") or 0 for r in done)
    failures = []
    for r in failed:
        if isinstance(r, Fact):
            failures.append({"error": (r.value or {}).get("error") if isinstance(r.value, dict) else r.status, "message": r.detail})
        else:
            failures.append({"error": "timeout", "message": "the stream did not finish before the deadline"})
    ttfts = [r["ttft_ms"] for r in done if isinstance(r.get("ttft_ms"), (int, float))]
    value = {
        "requested": n,
        "completed": len(done),
        "failed": failures,
        "completion_tokens": tokens,
        "wall_s": round(wall, 3),
        "aggregate_tokens_per_s": round(tokens / wall, 2) if wall > 0 and tokens else None,
        "ttft_p50_ms": _round(percentile(ttfts, 50)),
        "ttft_max_ms": _round(max(ttfts)) if ttfts else None,
        "degenerate": [r.get("text", "")[:60] for r in done if r.get("text", "").strip() and degenerate(r.get("text", ""))],
    }
    if not done and failures:
        first = failed[0]
        status = first.status if isinstance(first, Fact) else TIMEOUT
        return Fact(value, status, SOURCE, f"none of {n} parallel streams completed: {failures[0]['message']}")
    return Fact(value, OK, SOURCE)


# --- the streamed tool call --------------------------------------------------------------
def tool_stream_summary(parts: List[Any]) -> Dict[str, Any]:
    """What OpenAI-style streamed tool calls must look like: the first delta of a call carries
    ``index``, ``id``, ``type: "function"`` and ``function.name``; later ones carry
    ``function.arguments`` fragments that join into one JSON object."""
    first = parts[0] if isinstance(parts[0], dict) else {}
    function = first.get("function") if isinstance(first.get("function"), dict) else {}
    indexes = {p.get("index") for p in parts if isinstance(p, dict)}
    fragments = [p["function"]["arguments"] for p in parts if isinstance(p, dict) and isinstance(p.get("function"), dict)
                 and isinstance(p["function"].get("arguments"), str) and p["function"]["arguments"]]
    joined = "".join(fragments)
    out: Dict[str, Any] = {
        "deltas": len(parts), "calls": len(indexes), "first_id": bool(first.get("id")), "first_type": first.get("type"),
        "first_name": function.get("name"), "argument_fragments": len(fragments), "arguments_text": joined[:300],
    }
    problems = []
    if not first.get("id"):
        problems.append("the first tool-call delta has no id")
    if first.get("type") != "function":
        problems.append(f"the first tool-call delta's type is {first.get('type')!r}, not 'function'")
    if not function.get("name"):
        problems.append("the first tool-call delta has no function.name")
    try:
        parsed = bounded.loads(joined) if joined else None
    except ValueError as exc:
        parsed = None
        problems.append(f"the function.arguments fragments do not join into JSON ({exc}): {joined[:80]!r}")
    if joined and parsed is not None and not isinstance(parsed, dict):
        problems.append("the joined function.arguments are JSON but not an object")
    if not joined:
        problems.append("no function.arguments fragments")
    out["arguments"] = parsed if isinstance(parsed, dict) else None
    out["problems"] = problems
    return out


def tool_stream(run_: Run, model: Optional[str]) -> Fact:
    """The tool call again, streamed: the path agents use, parsed incrementally by vLLM's
    tool parser (a parser can be right on whole text and wrong on deltas)."""
    from gpudoctor.probes.smoke.answers import TOOL_MARKUP, TOOL_PROMPT, TOOLS_UNSUPPORTED, WEATHER_TOOL

    payload = make_payload(model, TOOL_PROMPT, temperature=0, max_tokens=run_.opts.max_tokens, stream=True,
                           tools=[WEATHER_TOOL], tool_choice="auto", stream_options={"include_usage": True})
    try:
        measured = _stream_once(run_, payload, "streamed tool-call request")
    except StepError as exc:
        value = exc.fact.value if isinstance(exc.fact.value, dict) else {}
        message = str(value.get("message", ""))
        if value.get("error") in ("bad_request", "server_error", "not_found") and TOOLS_UNSUPPORTED.search(message):
            return Fact({"result": "not_supported", "message": message, "http_status": value.get("http_status")},
                        NOT_SUPPORTED, SOURCE, f"not supported by this server: {message}")
        raise
    summary = measured.get("tool_stream")
    value: Dict[str, Any] = {"finish_reason": measured.get("finish_reason"), "content": measured.get("text", "")[:300],
                             "tool_call_deltas": measured.get("tool_call_deltas")}
    if summary:
        value.update(summary)
        if summary["problems"]:
            value.update(result="malformed", reason="; ".join(summary["problems"]))
        elif summary["first_name"] != "get_weather":
            value.update(result="malformed", reason=f"called {summary['first_name']!r}, a function that was not offered")
        else:
            value.update(result="tool_call", name=summary["first_name"])
    elif TOOL_MARKUP.search(measured.get("text", "")):
        value.update(result="unparsed_markup", reason="the streamed tool call stayed text in content deltas")
    else:
        value.update(result="no_tool_call", reason="the model answered without calling the tool")
    return Fact(value, OK, SOURCE)
