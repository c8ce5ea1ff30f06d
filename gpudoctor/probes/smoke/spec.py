"""Step 7: speculative decoding — /metrics counter deltas around the run, per-response counts."""


from typing import Any, Dict, Optional

from gpudoctor.probes.smoke import metrics as prom
from gpudoctor.probes.smoke.client import (
    ClientError,
)
from gpudoctor.snapshot import NOT_SUPPORTED, OK, Fact
from gpudoctor.probes.smoke.session import SOURCE, Run

def scrape_metrics(run_: Run) -> Optional[Dict[str, Any]]:
    """One /metrics scrape: {"counters": …, "legacy": …} or {"error": …}; None past the deadline."""
    left = run_.remaining()
    if left <= 0.05:
        return None
    try:
        response = run_.client.request("GET", "/metrics", timeout=min(10.0, left))
    except ClientError as exc:
        return {"error": exc.message}
    if response.status != 200:
        return {"error": f"/metrics: {response.status} {response.reason}".rstrip() + (
            " (llama.cpp serves it only with --metrics)" if response.status in (404, 501) else "")}
    if response.looks_like_html():
        return {"error": "/metrics answered HTML, not Prometheus text"}
    samples, bad = prom.parse(response.text())
    return {"counters": prom.spec_counters(samples), "legacy": prom.legacy_gauges(samples), "timing": prom.request_timing(samples),
            "samples": len(samples), "bad_lines": bad}


def server_figures(measured: Dict[str, Any], before: Optional[Dict[str, Any]], after: Optional[Dict[str, Any]]) -> None:
    """The server's own TTFT and tokens/s for one streamed request, from what its /metrics
    histograms moved by around it, next to ours on the same definition: decode time is the
    first-to-last-token span over the tokens after the first — our first-to-last chunk.
    Stored as ``server_metrics``; it is the comparison when the responses carry no timings."""
    then, now = (before or {}).get("timing"), (after or {}).get("timing")
    if then is None and now and before and "error" not in before:
        then = {"scheme": now["scheme"]}  # scraped, with no series yet: SGLang makes its labelled series at the first request
    delta = prom.timing_delta(then, now)
    if not delta or not delta.get("requests"):
        return
    if delta["requests"] != 1:
        delta["note"] = f"{delta['requests']} requests finished meanwhile: other traffic is mixed in"
    ours = measured.get("decode_tokens_per_s_chunks")
    theirs = delta.get("decode_tokens_per_s")
    if isinstance(ours, (int, float)) and isinstance(theirs, (int, float)) and theirs > 0:
        delta["ours_decode_tokens_per_s"] = ours
        delta["tokens_per_s_diff_pct"] = round((ours - theirs) / theirs * 100, 2)
    first = measured.get("first_chunk_ms")
    if isinstance(delta.get("ttft_ms"), (int, float)) and isinstance(first, (int, float)):
        delta["front_end_ms"] = round(first - delta["ttft_ms"], 2)  # vLLM's TTFT starts at arrival, queueing included
    measured["server_metrics"] = delta
    if not measured.get("server_timings"):
        measured["server_timings"] = dict(delta, source="prometheus")


def spec_fact(run_: Run, before: Optional[Dict[str, Any]], after: Optional[Dict[str, Any]]) -> Fact:
    opts = run_.opts
    value: Dict[str, Any] = {"expected": opts.expect_spec}
    per = dict(run_.per_response)
    if per["responses"]:
        value["per_response"] = {
            "source": per["kind"],
            "responses": per["responses"],
            "draft_tokens": per["draft_tokens"],
            "accepted_tokens": per["accepted_tokens"],
            "acceptance_rate": round(per["accepted_tokens"] / per["draft_tokens"], 4) if per["draft_tokens"] else None,
        }
    metrics_ok = bool(before) and bool(after) and "error" not in before and "error" not in after
    if metrics_ok:
        value["metrics"] = "ok"
        delta = prom.spec_delta(before["counters"], after["counters"])
        if after.get("legacy"):
            value["legacy_gauges"] = after["legacy"]
        if delta is None:
            value.update(source="metrics", counters=False, drafts=0, draft_tokens=0, accepted_tokens=0)
        else:
            value.update(source="metrics", counters=True, metric_names=after["counters"]["metric_names"], **delta)
            pr = value.get("per_response")
            if delta["scheme"] == "sglang" and pr and pr["draft_tokens"]:
                # SGLang's own per-request counts are exact where its counters are not (smoke/metrics.py).
                value.update(source="metrics+per_response", draft_tokens=pr["draft_tokens"], accepted_tokens=pr["accepted_tokens"],
                             acceptance_rate=pr["acceptance_rate"])
                value.pop("approximate", None)
        value["note"] = "counter deltas are server-wide: other traffic during the check is included"
        return Fact(value, OK, SOURCE)
    problem = (after or {}).get("error") or (before or {}).get("error") or "not scraped: the deadline was reached"
    value["metrics"] = problem
    if "per_response" in value:
        pr = value["per_response"]
        value.update(source="per_response", counters=False, drafts=None, draft_tokens=pr["draft_tokens"],
                     accepted_tokens=pr["accepted_tokens"], acceptance_rate=pr["acceptance_rate"])
        return Fact(value, OK, SOURCE)
    return Fact(value, NOT_SUPPORTED, SOURCE, f"no speculative-decoding numbers: {problem}")

