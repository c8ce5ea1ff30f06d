"""gpudoctor smoke against vLLM 0.33.0's real front end (tests/vllm_peer/).

The peer is `vllm serve` from the real wheel on CPU torch, with only the engine core
replaced by a scripted one that produces real EngineCoreOutputs; everything the smoke check
talks to — the argument parser, chat serving, the detokenizer, the qwen3 reasoning and
hermes tool parsers, SSE framing, per-request metrics and the Prometheus stat loggers — is
vLLM's own code. The first run builds the peer venv (a few minutes; cached afterwards).
"""

from __future__ import annotations

import io
import json
import re
import urllib.request

import pytest

from vllm_peer import HEALTHY_FLAGS, VllmPeer

from gpudoctor.cli import main

pytestmark = pytest.mark.real
FAST = ("--timeout", "300", "--max-tokens", "128")


def smoke(url, *extra):
    out, err = io.StringIO(), io.StringIO()
    code = main(["smoke", "--url", url, "--format", "json", *FAST, *extra], environ={}, stdout=out, stderr=err)
    return code, json.loads(out.getvalue())


def fact(doc, path):
    return doc["snapshot"]["facts"][path]["value"]


def outcome(doc, rule_id):
    return next(o for o in doc["outcomes"] if o["id"] == rule_id)


def finding(doc, rule_id):
    found = [f for f in doc["findings"] if f["id"] == rule_id]
    assert found, f"no {rule_id} finding in {[f['id'] for f in doc['findings']]}"
    return found[0]


def spec_counters(url):
    with urllib.request.urlopen(url + "/metrics", timeout=10) as response:
        text = response.read().decode()
    total = {}
    for name in ("num_drafts", "num_draft_tokens", "num_accepted_tokens"):
        values = re.findall(rf"^vllm:spec_decode_{name}_total\{{[^}}]*\}} ([0-9.e+]+)$", text, re.M)
        total[name] = sum(float(v) for v in values)
    return total


@pytest.fixture(scope="module")
def healthy():
    peer = VllmPeer(*HEALTHY_FLAGS).start()
    yield peer
    peer.stop()


def test_healthy_qwen3_spec_decode_tool_parser_server_passes(healthy):
    before_metrics, before = spec_counters(healthy.url), healthy.counted()
    code, doc = smoke(healthy.url, "--expect-spec")
    after_metrics, after = spec_counters(healthy.url), healthy.counted()
    assert code == 0, doc["findings"]
    assert not doc["findings"], doc["findings"]
    assert {row["check"]: row["verdict"] for row in doc["smoke"]["verdicts"]} == {
        "readiness": "pass", "model": "pass", "known answer": "pass", "chat (origin request)": "pass",
        "streaming": "pass", "concurrency": "pass", "tool call": "pass", "streamed tool call": "pass",
        "speculative decoding": "pass",
    }
    # speculative decoding: smoke's deltas are exactly what /metrics moved by, and exactly what
    # the engine core drafted and accepted (its own ledger)
    spec = fact(doc, "server.spec_decode")
    assert spec["counters"] and spec["source"] == "metrics"
    assert spec["accepted_tokens"] == after_metrics["num_accepted_tokens"] - before_metrics["num_accepted_tokens"] \
        == after["accepted_tokens"] - before["accepted_tokens"] > 0
    assert spec["draft_tokens"] == after["draft_tokens"] - before["draft_tokens"]
    assert spec["drafts"] == after["drafts"] - before["drafts"]
    assert spec["mean_acceptance_length"] == pytest.approx(1 + spec["accepted_tokens"] / spec["drafts"], abs=0.01)
    # reasoning parsed into `reasoning` (GD809/GD810 pass), the answer is a correct function
    chat = fact(doc, "server.chat")
    assert chat["reasoning_field"] == "reasoning" and not chat["think_tags_in_content"]
    assert chat["answer_check"]["verdict"] == "correct" and chat["answer_check"]["function"] == "is_prime"
    assert outcome(doc, "GD809")["status"] == outcome(doc, "GD810")["status"] == "pass"
    # a streamed tool call, OpenAI-shaped: id/type/name first, then argument fragments
    tool = fact(doc, "server.tool_stream")
    assert tool["result"] == "tool_call" and tool["first_id"] and tool["first_type"] == "function"
    assert tool["first_name"] == "get_weather" and tool["argument_fragments"] >= 1 and tool["arguments"] == {"city": "Paris"}
    # tokens/s like for like with vLLM's own per-request metrics: 1000 / mean_itl_ms
    timings = fact(doc, "server.stream")["server_timings"]
    assert timings["source"] == "metrics" and timings["decode_tokens_per_s"] > 0
    assert abs(timings["tokens_per_s_diff_pct"]) < 5, timings
    # TTFT: different definitions, reported as a breakdown, not as a percentage
    assert "ttft_diff_pct" not in timings and timings["front_end_ms"] is not None
    # the same figures from what vLLM's own /metrics histograms moved by around the streamed
    # request (what smoke compares with when the responses carry no timings): per token, like
    # the per-request metrics — while its inter-token latency is per engine step, which with
    # ngram drafts emits several tokens, so a tokens/s read from it as per token is low
    prom = fact(doc, "server.stream")["server_metrics"]
    assert prom["scheme"] == "vllm" and prom["requests"] == 1 and "note" not in prom, prom
    assert prom["decode_tokens_per_s"] == pytest.approx(timings["decode_tokens_per_s"], rel=0.01), (prom, timings)
    assert abs(prom["tokens_per_s_diff_pct"]) < 5, prom
    assert prom["tokens_per_step"] > 1.5 and prom["steps_per_s"] < prom["decode_tokens_per_s"] / 1.5, prom
    # the launch flags and the parser registry were read from the server's own process and vLLM
    launch = fact(doc, "server.launch")
    assert launch["flags"]["reasoning_parser"] == "qwen3" and launch["flags"]["tool_call_parser"] == "hermes"
    parsers = fact(doc, "server.parsers")
    assert "qwen3" in parsers["reasoning"] and "hermes" in parsers["tool"]


@pytest.fixture(scope="module")
def misconfigured():
    """Qwen3 without --reasoning-parser and without --enable-auto-tool-choice."""
    peer = VllmPeer("--enable-per-request-metrics").start()
    yield peer
    peer.stop()


def test_qwen3_without_reasoning_parser_names_the_parser(misconfigured):
    code, doc = smoke(misconfigured.url)
    chat = fact(doc, "server.chat")
    assert chat["think_tags_in_content"] and chat["reasoning_field"] is None
    found = finding(doc, "GD810")
    assert found["severity"] == "warning" and "without --reasoning-parser" in found["message"]
    assert found["fix"]["commands"] == [f"vllm serve {fact(doc, 'server.launch')['flags']['model']} --reasoning-parser qwen3"]
    # the answer is still checked: the function is found behind the raw <think> block
    assert chat["answer_check"]["verdict"] == "correct"
    assert code == 0  # warnings do not block


def test_without_auto_tool_choice_gives_the_exact_flags(misconfigured):
    code, doc = smoke(misconfigured.url)
    tool = doc["snapshot"]["facts"]["server.tool_call"]
    assert tool["status"] == "not_supported" and "enable-auto-tool-choice" in tool["value"]["message"]
    assert tool["value"]["http_status"] == 400
    found = finding(doc, "GD811")
    # qwen3_json: 0.33.0's registered name for Qwen3's JSON tool calls (an alias of hermes)
    assert "--enable-auto-tool-choice --tool-call-parser qwen3_json" in found["fix"]["commands"][0]
    assert outcome(doc, "GD807")["status"] == "not_applicable"


def test_wrong_reasoning_parser_is_named(tmp_path):
    peer = VllmPeer("--reasoning-parser", "granite").start()
    try:
        _, doc = smoke(peer.url)
    finally:
        peer.stop()
    found = finding(doc, "GD810")
    assert "granite" in found["message"] and "does not fit" in found["message"]
    assert found["fix"]["commands"][0].endswith("--reasoning-parser qwen3")


def test_expect_spec_with_rejected_drafts_points_at_the_known_causes():
    peer = VllmPeer("--reasoning-parser", "qwen3", "--speculative-config",
                    '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}',
                    scenario={"acceptance": "low"}).start()
    try:
        before_metrics, before = spec_counters(peer.url), peer.counted()
        code, doc = smoke(peer.url, "--expect-spec")
        after_metrics, after = spec_counters(peer.url), peer.counted()
    finally:
        peer.stop()
    spec = fact(doc, "server.spec_decode")
    # exact deltas still: what the engine core drafted and accepted, as /metrics counted it
    assert spec["accepted_tokens"] == after["accepted_tokens"] - before["accepted_tokens"] \
        == after_metrics["num_accepted_tokens"] - before_metrics["num_accepted_tokens"]
    assert spec["draft_tokens"] == after["draft_tokens"] - before["draft_tokens"] > 0
    assert spec["mean_acceptance_length"] < 1.1
    # no --enable-per-request-metrics: the responses carry no timings, so smoke's tokens/s is
    # compared with what vLLM's own /metrics histograms moved by, per token
    timings = fact(doc, "server.stream")["server_timings"]
    assert timings["source"] == "prometheus" and timings["requests"] == 1, timings
    assert abs(timings["tokens_per_s_diff_pct"]) < 5 and timings["tokens_per_step"] < 1.2, timings
    found = finding(doc, "GD808")
    assert "almost none are accepted" in found["message"] and code == 1
    assert "target_layer_ids" in found["fix"]["summary"] and "another target model" in found["fix"]["summary"]


def test_long_request_near_max_model_len(healthy):
    code, doc = smoke(healthy.url, "--long", "--long-timeout", "120")
    long = fact(doc, "server.long_context")
    # counted by vLLM's own /tokenize, sent through its length validation, recalled from line 1
    assert long["counted_by"] == "tokenize" and long["max_model_len"] == 4096
    assert long["recalled"] and 0.8 < long["fill"] < 0.95, long
    assert outcome(doc, "GD813")["status"] == "pass" and code == 0
    assert any(row["check"] == "long context" for row in doc["smoke"]["verdicts"])
