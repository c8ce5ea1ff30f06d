"""Issue 25: `gpudoctor smoke` against SGLang's wire format, and `--expect-spec` proven on SGLang.

The server is tests/fakes/sglang_wire.py, a stand-in on 127.0.0.1 that answers as sglang 0.5.23's
HTTP server does (its module docstring says why SGLang's own front end cannot run here, and
tests/real/test_sglang_wire.py checks its names against the real wheel's source).
"""

from __future__ import annotations

import pytest
from fakes.sglang_wire import SGLangWireServer
from fakes.smoke_servers import WireServer
from fakes.smoke_run import fact, messages, outcome, smoke_json, verdict


@pytest.fixture
def sgl():
    server = SGLangWireServer().start()
    yield server
    server.stop()


def test_a_healthy_sglang_server_passes(sgl):
    sgl.sglang_spec = (4, 2)  # --speculative-num-draft-tokens 4: 3 drafts a pass, 2 of them right
    sgl.metrics_enabled = True
    code, doc, _, _ = smoke_json("--url", sgl.url, "--expect-spec")
    assert code == 0, doc["findings"]
    assert {row["check"]: row["verdict"] for row in doc["smoke"]["verdicts"]} == {
        "readiness": "pass", "model": "pass", "known answer": "pass", "chat (origin request)": "pass",
        "streaming": "pass", "concurrency": "pass", "tool call": "pass", "streamed tool call": "pass",
        "speculative decoding": "pass",
    }
    models = fact(doc, "server.models")["value"]
    assert models["engine"] == "sglang" and models["max_model_len"] == 32768
    assert fact(doc, "server.chat")["value"]["reasoning_field"] == "reasoning_content"
    spec = fact(doc, "server.spec_decode")["value"]
    assert spec["scheme"] == "sglang" and spec["source"] == "metrics+per_response"
    assert spec["metric_names"] == ["sglang:generation_tokens_total", "sglang:spec_verify_calls_total"]
    # Exact, from each response's sglext.spec_tokens_details (non-streamed and streamed answers).
    per = spec["per_response"]
    assert per["source"] == "sglext.spec_tokens_details" and per["responses"] >= 7, per
    assert spec["acceptance_rate"] == per["acceptance_rate"] == round(2 / 3, 4)
    assert spec["draft_tokens"] == per["draft_tokens"] and spec["accepted_tokens"] == per["accepted_tokens"]
    # From the counters: verify passes and tokens between the two scrapes, SGLang's mean acceptance length.
    assert spec["drafts"] == sgl.totals["verify"] and spec["generated_tokens"] == sgl.totals["generated"]
    assert spec["mean_acceptance_length"] == round(sgl.totals["generated"] / sgl.totals["verify"], 4)
    assert spec["legacy_gauges"]["sglang:spec_num_draft_tokens"] == 4.0
    # Asked for SGLang's per-request details; every chat request carried the field.
    posts = [r for r in sgl.requests if r.get("body") is not None]
    assert posts and all(r["body"].get("return_spec_tokens_details") is True for r in posts)


def test_sglang_without_enable_metrics_still_proves_acceptance(sgl):
    """SGLang serves /metrics only with --enable-metrics: the per-request counts decide."""
    sgl.sglang_spec = (4, 2)
    code, doc, _, _ = smoke_json("--url", sgl.url, "--expect-spec")
    assert code == 0, doc["findings"]
    spec = fact(doc, "server.spec_decode")["value"]
    assert spec["source"] == "per_response" and spec["acceptance_rate"] == round(2 / 3, 4)
    assert "404" in spec["metrics"]


def test_a_useless_sglang_drafter_fails(sgl):
    sgl.sglang_spec = (4, 0)
    sgl.metrics_enabled = True
    code, doc, _, _ = smoke_json("--url", sgl.url, "--expect-spec")
    assert code == 1 and verdict(doc, "speculative decoding")["verdict"] == "FAIL"
    assert "almost none are accepted: 0.0%" in messages(doc, "GD808")


def test_sglang_metrics_alone_give_an_approximate_rate(sgl):
    """A server that does not answer per request (an older SGLang): the counters and the
    draft-tokens gauge, one token per request over (its first, from prefill)."""
    sgl.sglang_spec = (4, 2)
    sgl.metrics_enabled = True
    sgl.per_request = lambda body, spec: {}
    code, doc, _, _ = smoke_json("--url", sgl.url, "--expect-spec")
    assert code == 0, doc["findings"]
    spec = fact(doc, "server.spec_decode")["value"]
    assert spec["source"] == "metrics" and "approximate" in spec
    verify, generated = sgl.totals["verify"], sgl.totals["generated"]
    assert spec["draft_tokens"] == 3 * verify and spec["accepted_tokens"] == generated - verify
    assert 2 / 3 <= spec["acceptance_rate"] <= 1.0


def test_sglang_without_speculation_expected_is_an_error_naming_sglang(sgl):
    sgl.metrics_enabled = True
    code, doc, _, _ = smoke_json("--url", sgl.url, "--expect-spec")
    assert code == 1 and "sglang:spec_verify_calls_total" in messages(doc, "GD808")
    fix = outcome(doc, "GD808")["findings"][0]["fix"]
    assert any(c.startswith("sglang serve --model-path MODEL --speculative-algorithm EAGLE") for c in fix["commands"]), fix
    code, doc, _, _ = smoke_json("--url", sgl.url)
    assert code == 0 and verdict(doc, "speculative decoding")["verdict"] == "skip"


def test_a_vllm_server_is_never_sent_sglang_fields():
    with WireServer() as wire:
        code, doc, _, _ = smoke_json("--url", wire.url)
        assert "engine" not in fact(doc, "server.models")["value"]
        posts = [r for r in wire.requests if r.get("body") is not None]
        assert posts and not any("return_spec_tokens_details" in r["body"] for r in posts)
