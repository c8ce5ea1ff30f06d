"""The server's own TTFT and tokens/s from its /metrics histograms (issue 31), on a real recording.

tests/fixtures/smoke_metrics/vllm-0.33.0-{before,after}.prom are vLLM 0.33.0's own /metrics
(its Prometheus stat loggers, tests/vllm_peer/ with ngram drafts of 3 tokens, no
--enable-per-request-metrics) scraped around one streamed request. The live comparison
against the same front end is in tests/test_smoke_vllm.py (real tier).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpudoctor.probes.smoke import metrics as prom
from gpudoctor.probes.smoke.spec import server_figures
from gpudoctor.render.smoke import _stream

HERE = Path(__file__).parent / "fixtures" / "smoke_metrics"


def timing(name):
    samples, bad = prom.parse((HERE / f"vllm-0.33.0-{name}.prom").read_text())
    assert bad == 0
    return prom.request_timing(samples)


def test_one_request_per_token_not_per_engine_step():
    delta = prom.timing_delta(timing("before"), timing("after"))
    assert delta["scheme"] == "vllm" and delta["requests"] == 1 and delta["finished"] == 1
    # ngram drafts: an engine step emits 1 + accepted tokens, and the inter-token histogram
    # counts steps, so 1 / ITL is a per-step rate that is well below the per-token one
    assert delta["tokens_per_step"] > 1.5
    assert delta["steps_per_s"] * delta["tokens_per_step"] == \
        pytest.approx(delta["decode_tokens_per_s"], rel=0.02)
    assert delta["ttft_ms"] > 0 and delta["queue_time_ms"] >= 0


def test_a_restart_or_a_missing_scrape_gives_no_figures():
    before, after = timing("before"), timing("after")
    assert prom.timing_delta(after, before) is None  # counters went down: the server restarted
    assert prom.timing_delta(None, after) is None
    assert prom.request_timing(prom.parse("# nothing\nother_metric 1\n")[0]) is None


def test_the_comparison_is_attached_and_rendered_when_the_responses_carry_no_timings():
    before, after = {"timing": timing("before")}, {"timing": timing("after")}
    theirs = prom.timing_delta(before["timing"], after["timing"])["decode_tokens_per_s"]
    measured = {"ttft_ms": 40.0, "first_chunk_ms": 30.0, "decode_tokens_per_s_chunks": round(theirs * 1.02, 2),
                "completion_tokens": 64, "done": True, "usage": {"completion_tokens": 64}}
    server_figures(measured, before, after)
    shown = measured["server_timings"]
    assert shown["source"] == "prometheus" and shown["tokens_per_s_diff_pct"] == pytest.approx(2.0, abs=0.1)
    line = _stream(measured)
    assert "server's /metrics: " in line and "tokens per engine step" in line and "is per step" in line
    # responses that carried the server's own timings keep them; the histograms ride along
    timed = dict(measured, server_timings={"source": "timings", "decode_tokens_per_s": 1.0})
    timed.pop("server_metrics")
    server_figures(timed, before, after)
    assert timed["server_timings"]["source"] == "timings" and timed["server_metrics"]["requests"] == 1


def test_other_traffic_is_said():
    before, after = timing("before"), dict(timing("after"))
    after = {key: (value + (1 if key.endswith("_count") else 0.5) if isinstance(value, float) else value) for key, value in after.items()}
    delta = {"timing": after}
    measured = {"decode_tokens_per_s_chunks": 100.0}
    server_figures(measured, {"timing": before}, delta)
    assert measured["server_metrics"]["requests"] == 2 and "other traffic" in measured["server_metrics"]["note"]


# SGLang's collector (python/sglang/srt/observability/metrics_collector.py, names checked against the
# wheel by tests/real/test_sglang_wire.py): its inter-token histogram is observed per token
# (observe_inter_token_latency spreads each interval over its new tokens), so count / sum is tokens/s.
SGLANG_BEFORE = """\
sglang:time_to_first_token_seconds_count{model_name="m",is_streaming="true"} 3.0
sglang:time_to_first_token_seconds_sum{model_name="m",is_streaming="true"} 0.3
sglang:inter_token_latency_seconds_count{model_name="m"} 300.0
sglang:inter_token_latency_seconds_sum{model_name="m"} 3.0
"""
SGLANG_AFTER = """\
sglang:time_to_first_token_seconds_count{model_name="m",is_streaming="true"} 4.0
sglang:time_to_first_token_seconds_sum{model_name="m",is_streaming="true"} 0.34
sglang:inter_token_latency_seconds_count{model_name="m"} 363.0
sglang:inter_token_latency_seconds_sum{model_name="m"} 3.252
"""


def test_sglangs_inter_token_histogram_is_per_token():
    before = prom.request_timing(prom.parse(SGLANG_BEFORE)[0])
    after = prom.request_timing(prom.parse(SGLANG_AFTER)[0])
    delta = prom.timing_delta(before, after)
    assert delta["scheme"] == "sglang" and delta["requests"] == 1 and delta["ttft_ms"] == pytest.approx(40.0)
    assert delta["decode_tokens_per_s"] == pytest.approx(63 / 0.252, rel=1e-3) and "steps" not in delta
