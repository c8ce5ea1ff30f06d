"""smoke's reading of SGLang's /metrics, on what SGLang's own collectors wrote.

tests/fixtures/smoke_metrics/sglang-0.5.17-collector.json: sglang 0.5.17's TokenizerMetricsCollector
and SchedulerMetricsCollector, made as its tokenizer manager and scheduler make them, scraped with
prometheus_client before and after the calls the server makes for one streamed speculative request
(scripts/device/sglang_metrics.py, run on the H200, where SGLang's modules import). SGLang's HTTP
server cannot run on this CPU box; its wire format is the stand-in's (tests/sglang_wire.py).
"""

import json
from pathlib import Path

from gpudoctor.probes.smoke import metrics as prom
from gpudoctor.probes.smoke import spec

RECORDING = json.loads((Path(__file__).parent / "fixtures" / "smoke_metrics" / "sglang-0.5.17-collector.json").read_text())
REQUEST = RECORDING["request"]


def scrape(text):
    samples, bad = prom.parse(text)
    assert bad == 0
    return {"counters": prom.spec_counters(samples), "legacy": prom.legacy_gauges(samples),
            "timing": prom.request_timing(samples), "samples": len(samples), "bad_lines": bad}


def test_acceptance_from_sglangs_own_counters_and_gauges():
    before, after = scrape(RECORDING["before"]), scrape(RECORDING["after"])
    assert before["counters"] is None  # SGLang makes the verify series when the first speculative request finishes
    delta = prom.spec_delta(before["counters"], after["counters"])
    verify, tokens = REQUEST["spec_verify_ct"], REQUEST["generation_tokens"]
    assert delta["drafts"] == verify and delta["generated_tokens"] == tokens
    assert delta["mean_acceptance_length"] == round(tokens / verify, 4) == REQUEST["accept_length"]
    assert delta["draft_tokens"] == verify * (REQUEST["num_draft_tokens"] - 1) and delta["accepted_tokens"] == tokens - verify
    assert delta["acceptance_rate"] == REQUEST["accept_rate"]  # 44 / 60, as the scheduler's own gauge says


def test_server_timings_from_sglangs_own_histograms_with_no_series_before_the_request():
    """SGLang's labelled histograms appear at the first request: the scrape before it has none,
    which is zero, not "unknown" (found on this recording: smoke showed no server timings)."""
    before, after = scrape(RECORDING["before"]), scrape(RECORDING["after"])
    assert before["timing"] is None and after["timing"]["scheme"] == "sglang"
    measured = {"decode_tokens_per_s_chunks": 99.0, "first_chunk_ms": 51.0}
    spec.server_figures(measured, before, after)
    figures = measured["server_metrics"]
    after_first = sum(n for _, n in REQUEST["chunks"])
    assert figures["requests"] == 1 and figures["ttft_ms"] == REQUEST["ttft_s"] * 1000
    assert figures["decode_tokens_per_s"] == round(after_first / sum(t for t, _ in REQUEST["chunks"]), 2)  # per token
    assert figures["itl_ms"] == 10.0 and figures["tokens_per_s_diff_pct"] == -1.0
    assert measured["server_timings"]["source"] == "prometheus"
    # a scrape that failed is not zero: no figures from it
    failed = {}
    spec.server_figures(failed, {"error": "/metrics: 404 Not Found"}, after)
    assert "server_metrics" not in failed
