"""gpudoctor smoke against a wire-format server written in the tests (tests/fakes/smoke_servers.py).

What llama.cpp's server does not do — vLLM's ``reasoning`` field and ``vllm:spec_decode_*``
metric names, tool calls — and every fault the check must name: connection refused,
timeouts, 401, 404 model, 5xx, HTML, invalid JSON, a cut stream, a server that never gets
ready. Each gives its verdict, and the process never runs past ``--timeout``.
The real llama.cpp server is in test_smoke_llama.py.
"""

from __future__ import annotations

import io
import json
import os
import time

import pytest
from helpers import private_env
from fakes.smoke_servers import WireServer, refused_port

from gpudoctor import registry
from gpudoctor.cli import main
from gpudoctor.engine import run_rules
from gpudoctor.probes.smoke import metrics as prom
from gpudoctor.render import smoke as table
from gpudoctor.probes.smoke.client import URLError, normalize_url
from gpudoctor.probes.smoke.text import degenerate
from gpudoctor.snapshot import Snapshot
from fakes.smoke_run import fact, messages, outcome, smoke, smoke_json, verdict

SERVER_RULES = [m for m in registry.load_rules() if m.area == "server"]
SLACK = 3.0  # seconds past --timeout allowed for process overhead; a hang would be 60 s


@pytest.fixture
def wire():
    server = WireServer().start()
    yield server
    server.stop()


# --- a healthy vLLM-like server ----------------------------------------------------------
def test_vllm_like_server_passes_and_reports_its_numbers(wire):
    wire.spec = (3, [1, 1, 0])  # 3 speculative tokens; positions 0 and 1 always accepted
    code, doc, err, _ = smoke_json("--url", wire.url + "/v1", "--expect-spec")
    assert code == 0, doc["findings"]
    checks = {row["check"]: row["verdict"] for row in doc["smoke"]["verdicts"]}
    assert checks == {
        "readiness": "pass", "model": "pass", "known answer": "pass", "chat (origin request)": "pass",
        "streaming": "pass", "concurrency": "pass", "tool call": "pass", "streamed tool call": "pass",
        "speculative decoding": "pass",
    }
    assert doc["smoke"]["url"] == wire.url and doc["smoke"]["model"] == "Qwen/Qwen3-0.6B"
    chat = fact(doc, "server.chat")["value"]
    assert chat["reasoning_field"] == "reasoning" and chat["finish_reason"] == "stop"
    assert chat["usage"] == {"prompt_tokens": 20, "completion_tokens": 12, "total_tokens": 32}
    stream = fact(doc, "server.stream")["value"]
    assert stream["done"] and stream["usage"]["completion_tokens"] == 12 and stream["tokens_counted_by"] == "usage"
    assert stream["ttft_ms"] > 0 and stream["itl_p50_ms"] <= stream["itl_p95_ms"] and stream["decode_tokens_per_s"] > 0
    conc = fact(doc, "server.concurrency")["value"]
    assert (conc["requested"], conc["completed"], conc["failed"], conc["completion_tokens"]) == (4, 4, [], 48)
    tool = fact(doc, "server.tool_call")["value"]
    assert (tool["result"], tool["name"], tool["arguments"]) == ("tool_call", "get_weather", {"city": "Paris"})
    # GD809 is information: current vLLM's `reasoning` field on a correct server is a pass
    assert outcome(doc, "GD809")["status"] == "pass" and not messages(doc, "GD809")
    # the one-line summary for check's "Server" area, from the snapshot alone
    line = table.headline(Snapshot.from_json(doc["snapshot"]))
    assert line.startswith(wire.url + " · Qwen/Qwen3-0.6B · TTFT ") and line.endswith("spec 67% accepted")


def test_spec_decode_numbers_equal_the_vllm_counter_deltas(wire):
    wire.spec = (3, [1, 1, 0])
    before = dict(wire.counters, per_pos=list(wire.counters["per_pos"]))
    code, doc, _, _ = smoke_json("--url", wire.url, "--expect-spec")
    after = wire.counters
    spec = fact(doc, "server.spec_decode")["value"]
    assert spec["scheme"] == "vllm" and spec["source"] == "metrics"
    assert spec["drafts"] == after["drafts"] - before["drafts"] > 0
    assert spec["draft_tokens"] == after["draft_tokens"] - before["draft_tokens"] == 3 * spec["drafts"]
    assert spec["accepted_tokens"] == after["accepted"] - before["accepted"] == 2 * spec["drafts"]
    assert spec["accepted_per_position"] == [spec["drafts"], spec["drafts"], 0]
    assert spec["acceptance_rate"] == round(2 / 3, 4)
    assert spec["mean_acceptance_length"] == 3.0  # 1 + accepted / drafts
    assert spec["per_position_acceptance"] == [1.0, 1.0, 0.0]
    # vLLM's per-request metrics.speculative_decoding (non-streamed answers) are summed too
    assert spec["per_response"]["source"] == "metrics.speculative_decoding"
    assert spec["per_response"]["acceptance_rate"] == round(2 / 3, 4)
    assert "vllm:spec_decode_num_accepted_tokens_per_pos_total" in spec["metric_names"]
    assert code == 0


def test_near_zero_acceptance_is_an_error(wire):
    wire.spec = (4, [0, 0, 0, 0])
    code, doc, _, _ = smoke_json("--url", wire.url)
    assert code == 1
    assert verdict(doc, "speculative decoding")["verdict"] == "FAIL"
    assert "almost none are accepted: 0.0%" in messages(doc, "GD808")
    assert "drafter is loaded but useless" in messages(doc, "GD808")


def test_no_spec_counters_is_an_error_only_when_speculation_is_expected(wire):
    code, doc, _, _ = smoke_json("--url", wire.url)
    assert code == 0 and verdict(doc, "speculative decoding")["verdict"] == "skip"
    assert "not configured" in outcome(doc, "GD808")["reason"]
    code, doc, _, _ = smoke_json("--url", wire.url, "--expect-spec")
    assert code == 1 and verdict(doc, "speculative decoding")["verdict"] == "FAIL"
    assert "no spec_decode counters at all" in messages(doc, "GD808")


def test_no_metrics_endpoint_with_expect_spec_is_unknown_not_a_pass(wire):
    wire.metrics_enabled = False
    code, doc, _, _ = smoke_json("--url", wire.url, "--expect-spec")
    assert outcome(doc, "GD808")["status"] == "unknown"
    assert "/metrics: 404" in outcome(doc, "GD808")["reason"]
    assert code == 0


def test_reasoning_content_field_is_reported(wire):
    wire.reasoning_field = "reasoning_content"
    code, doc, _, _ = smoke_json("--url", wire.url)
    assert fact(doc, "server.chat")["value"]["reasoning_field"] == "reasoning_content"
    assert "`reasoning_content` only" in messages(doc, "GD809")
    assert code == 0


def test_text_output_is_a_verdict_table(wire):
    wire.spec = (3, [1, 1, 0])
    code, out, err, _ = smoke("--url", wire.url)
    assert code == 0, out
    lines = out.splitlines()
    assert lines[0].startswith("gpudoctor ") and wire.url in lines[0]
    for check in ("readiness", "known answer", "streaming", "concurrency", "tool call", "speculative decoding"):
        assert any(line.split("  ")[0].endswith(check) for line in lines if line.strip()), check
    assert "TTFT" in out and "ITL p50" in out and "tok/s" in out and "mean acceptance length 3.00" in out
    assert "get_weather" in out and lines[-1].startswith("Summary: 9 passed, 0 failed")


def test_degenerate_output_fails_every_text_check(wire):
    wire.text_mode = "degenerate"
    code, doc, _, _ = smoke_json("--url", wire.url)
    assert code == 1
    for rule_id in ("GD803", "GD804", "GD805"):
        assert "degenerate" in messages(doc, rule_id) and "no letters or digits" in messages(doc, rule_id), rule_id


def test_reasoning_that_eats_max_tokens_is_a_warning_and_the_answer_is_found_in_it(wire):
    wire.text_mode = "reasoning_only"
    code, doc, _, _ = smoke_json("--url", wire.url)
    assert code == 0  # a warning does not block...
    assert fact(doc, "server.known_answer")["value"]["answer_in"] == "reasoning"
    assert verdict(doc, "known answer")["verdict"] == "pass"
    assert verdict(doc, "chat (origin request)")["verdict"] == "warn"
    assert "went into reasoning" in messages(doc, "GD804")
    code, _, _, _ = smoke_json("--url", wire.url, "--fail-on", "warning")
    assert code == 1  # ...unless asked to


def _spec_snapshot(drafts, draft_tokens, accepted, expected=False):
    from gpudoctor.snapshot import Fact

    value = {"expected": expected, "counters": True, "source": "metrics", "drafts": drafts, "draft_tokens": draft_tokens,
             "accepted_tokens": accepted, "acceptance_rate": round(accepted / draft_tokens, 4) if draft_tokens else None,
             "mean_acceptance_length": 1 + accepted / drafts if drafts else None, "per_position_acceptance": []}
    return Snapshot({"server.url": Fact("http://127.0.0.1:1"), "server.spec_decode": Fact(value)})


@pytest.mark.parametrize("drafts, draft_tokens, accepted, status", [
    (25, 100, 4, "fail"),  # 4 % of 100 draft tokens: useless
    (25, 100, 5, "pass"),  # 5 %: low, but not "near zero"
    (3, 12, 0, "pass"),  # too few drafts to judge
    (0, 0, 0, "not_applicable"),
])
def test_near_zero_threshold(drafts, draft_tokens, accepted, status):
    gd808 = registry.find("GD808")
    assert run_rules(_spec_snapshot(drafts, draft_tokens, accepted), [gd808]).outcomes[0].status == status


# --- tool calls ----------------------------------------------------------------------------
@pytest.mark.parametrize("mode, verdict_, code_, text", [
    ("bad_args", "FAIL", 1, "not valid JSON"),
    ("markup", "FAIL", 1, "left it as text"),
    ("prose", "warn", 0, "answered in prose"),
])
def test_tool_call_problems(wire, mode, verdict_, code_, text):
    wire.tool_mode = mode
    code, doc, _, _ = smoke_json("--url", wire.url)
    assert verdict(doc, "tool call")["verdict"] == verdict_
    assert text in messages(doc, "GD807")
    assert code == code_


def test_a_model_that_answers_in_prose_does_not_pass_the_streamed_tool_call(wire):
    """issue 31: the row read "✓ streamed tool call  pass  no_tool_call": nothing streamed was checked."""
    wire.tool_mode = "prose"
    _, out, _, _ = smoke("--url", wire.url)
    row = next(line for line in out.splitlines() if "streamed tool call" in line)
    assert "✓" not in row and "no_tool_call" not in row and "answered in prose" in row, row
    tool_row = next(line for line in out.splitlines() if line.split("  ")[0].endswith(" tool call"))
    assert "no_tool_call" not in tool_row and "no tool call" in tool_row, tool_row


def test_tool_calls_not_supported_is_a_skip_with_the_reason(wire):
    wire.tool_mode = "unsupported"
    code, doc, _, _ = smoke_json("--url", wire.url)
    assert code == 0
    row = verdict(doc, "tool call")
    assert row["verdict"] == "skip" and "--enable-auto-tool-choice" in row["measured"]
    assert fact(doc, "server.tool_call")["status"] == "not_supported"


# --- faults --------------------------------------------------------------------------------
def test_connection_refused_says_is_the_server_running():
    sock = refused_port()
    try:
        port = sock.getsockname()[1]
        code, doc, err, elapsed = smoke_json("--url", f"127.0.0.1:{port}", "--timeout", "1.5")
    finally:
        sock.close()
    assert code == 1 and elapsed < 1.5 + SLACK
    assert verdict(doc, "readiness")["verdict"] == "FAIL"
    text = messages(doc, "GD801")
    assert "connection refused" in text and "is the server running?" in text and "not ready after" in text
    assert any(f"sport = :{port}" in c for f in outcome(doc, "GD801")["findings"] for c in f["fix"]["commands"])
    assert "waiting for" in err and "connection refused" in err  # the progress line (one per state when piped)
    assert all(verdict(doc, c)["verdict"] == "unknown" for c in ("known answer", "streaming", "tool call"))


def test_server_that_never_gets_ready_times_out_with_the_last_answer(wire):
    wire.loading_polls = -1
    code, doc, err, elapsed = smoke_json("--url", wire.url, "--timeout", "2")
    assert code == 1 and elapsed < 2 + SLACK
    ready = fact(doc, "server.ready")
    assert ready["status"] == "timeout" and ready["value"]["attempts"] >= 2
    assert "not ready after 2 s" in messages(doc, "GD801") and "503 Loading model" in messages(doc, "GD801")
    assert err.count("503 Loading model") == 1  # printed once per state, not once per poll


def test_loading_server_is_waited_for_then_passes(wire):
    wire.loading_polls = 2
    code, doc, err, _ = smoke_json("--url", wire.url, "--timeout", "30")
    assert code == 0
    ready = fact(doc, "server.ready")["value"]
    assert ready["attempts"] == 3 and ready["states_seen"] == ["503 Loading model (still loading)"]
    assert "waiting for" in err and "still loading" in err


def test_check_smoke_does_not_wait_for_a_loading_server(wire):
    wire.loading_polls = -1
    out, err = io.StringIO(), io.StringIO()
    started = time.monotonic()
    code = main(["check", "--select", "server", "--smoke", wire.url, "--format", "json"], environ=private_env(), stdout=out, stderr=err)
    assert time.monotonic() - started < 10
    doc = json.loads(out.getvalue())
    assert code == 1 and "503 Loading model" in messages(doc, "GD801")


def test_hung_server_never_holds_the_process_past_timeout(wire):
    wire.fault = "hang"
    code, doc, _, elapsed = smoke_json("--url", wire.url, "--timeout", "2")
    assert elapsed < 2 + SLACK
    assert code == 1
    assert fact(doc, "server.known_answer")["status"] == "timeout"
    assert "no complete answer" in messages(doc, "GD803")
    # later steps did not run at all: unknown with the reason, not a pass
    assert outcome(doc, "GD805")["status"] == "unknown" and "--timeout" in outcome(doc, "GD805")["reason"]


def test_server_dribbling_a_stream_is_cut_off_at_the_deadline(wire):
    wire.fault = "drip"
    code, doc, _, elapsed = smoke_json("--url", wire.url, "--timeout", "2")
    assert elapsed < 2 + SLACK and code == 1
    assert fact(doc, "server.stream")["status"] == "timeout"


def test_401_without_a_key_then_the_key_from_the_environment(wire):
    key = "plainsecretvalue42"  # no recognisable secret pattern: only gpudoctor's own care hides it
    wire.api_key = key
    code, doc, _, _ = smoke_json("--url", wire.url)
    assert code == 1
    assert fact(doc, "server.ready")["status"] == "no_permission"
    text = messages(doc, "GD801")
    assert "401" in text and "no API key was sent" in text
    assert any("--api-key-env" in c for f in outcome(doc, "GD801")["findings"] for c in f["fix"]["commands"])

    wire.requests.clear()
    code, out, err, _ = smoke("--url", wire.url, "--api-key-env", "MY_KEY", environ={"MY_KEY": key})
    assert code == 0, out
    assert key not in out and key not in err
    code, out_json, err, _ = smoke("--url", wire.url, "--api-key-env", "MY_KEY", "--format", "json", environ={"MY_KEY": key})
    assert key not in out_json and key not in err
    sent = {r["authorization"] for r in wire.requests if r["path"].startswith("/v1/")}
    assert sent == {f"Bearer {key}"}


def test_wrong_key_is_named_as_refused(wire):
    wire.api_key = "right-key-123456"
    code, doc, _, _ = smoke_json("--url", wire.url, "--api-key-env", "K", environ={"K": "wrong-key-654321"})
    assert code == 1 and "the API key was refused" in messages(doc, "GD801")


def test_redirect_is_not_followed_and_the_key_stays_home(wire):
    other = WireServer().start()
    try:
        wire.fault, wire.fault_on = "redirect", "models"
        wire.requests.clear()
        code, doc, _, _ = smoke_json("--url", wire.url, "--api-key-env", "K", environ={"K": "sk-redirect-key-0001"})
        assert code == 1 and "redirect" in messages(doc, "GD801") and "not followed" in messages(doc, "GD801")
        assert other.requests == []
        assert all(r["path"] in ("/health", "/v1/models") for r in wire.requests)
    finally:
        other.stop()


def test_404_model(wire):
    code, doc, _, _ = smoke_json("--url", wire.url, "--model", "nope")
    assert code == 0  # the wire server serves any name...
    assert "does not list it" in messages(doc, "GD802")  # ...which is worth a warning
    wire.fault = "404_model"
    code, doc, _, _ = smoke_json("--url", wire.url, "--model", "nope")
    assert code == 1
    assert "The model `nope` does not exist." in messages(doc, "GD803")
    assert "served: Qwen/Qwen3-0.6B" in messages(doc, "GD803")
    assert "is not served here" in messages(doc, "GD802")


def test_5xx_shows_the_first_line_of_the_body(wire):
    wire.fault = "500"
    code, doc, _, _ = smoke_json("--url", wire.url)
    assert code == 1
    text = messages(doc, "GD803")
    assert "500 Internal Server Error: CUDA error: an illegal memory access was encountered" in text
    assert "TORCH_USE_CUDA_DSA" not in text  # first line only
    assert fact(doc, "server.known_answer")["value"]["http_status"] == 500


def test_the_fix_to_reproduce_a_failure_names_the_key_by_variable_only(wire):
    wire.api_key, wire.fault = "another-plain-secret-99", "500"
    code, out, _, _ = smoke("--url", wire.url, "--api-key-env", "K", environ={"K": "another-plain-secret-99"})
    assert code == 1 and "another-plain-secret-99" not in out
    assert '--oauth2-bearer "$SERVER_API_KEY"' in out


def test_html_instead_of_json_names_who_holds_the_port(wire):
    wire.fault, wire.fault_on = "html", "models"
    code, doc, _, _ = smoke_json("--url", wire.url)
    assert code == 1
    text = messages(doc, "GD801")
    assert "HTML instead of JSON" in text and "page title 'Jupyter Server'" in text
    owners = fact(doc, "server.ready")["value"].get("port_owner")
    if owners and owners[0].get("pid"):  # psutil sees our own listening socket
        assert owners[0]["pid"] == os.getpid() and f"(pid {os.getpid()})" in text


def test_invalid_json(wire):
    wire.fault = "invalid_json"
    code, doc, _, _ = smoke_json("--url", wire.url)
    assert code == 1 and "invalid JSON" in messages(doc, "GD803")


def test_stream_cut_midway(wire):
    wire.fault = "cut_stream"
    code, doc, _, _ = smoke_json("--url", wire.url)
    assert code == 1
    assert "the stream was cut after" in messages(doc, "GD805")
    assert fact(doc, "server.stream")["value"]["error"] == "stream_cut"
    assert fact(doc, "server.stream")["value"]["measured"]["events"] >= 3


def test_stream_answered_with_plain_json(wire):
    wire.fault = "500"  # every chat request, streamed or not, gets one JSON error body...
    code, doc, _, _ = smoke_json("--url", wire.url)
    assert "500 Internal Server Error" in messages(doc, "GD805")  # ...a non-2xx status wins
    wire.fault = "invalid_json"  # 200 with content-type application/json to a streamed request
    code, doc, _, _ = smoke_json("--url", wire.url)
    assert code == 1 and "answered application/json instead of text/event-stream" in messages(doc, "GD805")


def test_stream_without_done(wire):
    wire.fault = "no_done"
    code, doc, _, _ = smoke_json("--url", wire.url)
    assert code == 1 and "without data: [DONE]" in messages(doc, "GD805")


def test_body_over_the_cap(wire):
    wire.fault = "huge"
    code, doc, _, _ = smoke_json("--url", wire.url)
    assert code == 1 and "larger than the 4 MiB cap" in messages(doc, "GD803")


def test_json_of_the_wrong_shape_is_a_verdict_not_a_crash(wire):
    wire.fault = "shapes"
    code, doc, err, _ = smoke_json("--url", wire.url)
    assert code == 1 and "Traceback" not in err
    assert "the answer has no choices" in messages(doc, "GD803")
    assert fact(doc, "server.stream")["value"]["error"] == "invalid_json"  # [1, 2] is JSON but not an object
    assert "not a JSON object" in messages(doc, "GD805")
    assert all(row["status"] != "ok" or row["verdict"] != "unknown" for row in doc["smoke"]["verdicts"])
    assert fact(doc, "probe.smoke")["status"] == "ok"  # no step crashed


@pytest.mark.parametrize("args, text", [
    (["--url", "ftp://x"], "unsupported scheme"),
    (["--url", "http://user:pw@127.0.0.1:1"], "credentials inside the URL"),
    (["--api-key-env", "NOT_SET_ANYWHERE"], "not set or is empty"),
    (["--api-key-env", "sk-looks-like-a-key"], "takes the NAME"),
    (["--concurrency", "0"], "--concurrency"),
    (["--timeout", "0"], "--timeout"),
])
def test_usage_errors_exit_2(args, text):
    code, out, err, _ = smoke(*args)
    assert code == 2 and text in err and out == ""
    assert "sk-looks-like-a-key" not in err


# --- check --smoke and the snapshot seam --------------------------------------------------
def test_check_smoke_merges_server_facts_and_makes_server_rules_applicable(wire, tmp_path):
    out, err = io.StringIO(), io.StringIO()
    code = main(["check", "--select", "server", "--format", "json"], environ=private_env(), stdout=out, stderr=err)
    doc = json.loads(out.getvalue())
    assert {o["status"] for o in doc["outcomes"]} == {"not_applicable"}, doc["outcomes"]

    out = io.StringIO()
    code = main(["check", "--select", "server", "--smoke", wire.url, "--format", "json"], environ=private_env(), stdout=out, stderr=err)
    doc = json.loads(out.getvalue())
    statuses = {o["id"]: o["status"] for o in doc["outcomes"]}
    assert statuses["GD801"] == statuses["GD803"] == statuses["GD805"] == statuses["GD807"] == "pass"
    assert code == 0 and doc["snapshot"]["facts"]["server.url"]["value"] == wire.url

    # the facts replay anywhere: the same verdicts from the saved snapshot, no server needed
    saved = tmp_path / "snap.json"
    saved.write_text(json.dumps(doc["snapshot"]), encoding="utf-8")
    wire.stop()
    out = io.StringIO()
    main(["check", "--select", "server", "--snapshot", str(saved), "--format", "json"], environ=private_env(), stdout=out, stderr=err)
    replayed = {o["id"]: o["status"] for o in json.loads(out.getvalue())["outcomes"]}
    assert replayed == statuses


# --- units: Prometheus text, degenerate text, URLs ----------------------------------------
LLAMA_METRICS = """\
# HELP llamacpp:spec_decode_num_draft_tokens_total Speculative: Total draft tokens generated
# TYPE llamacpp:spec_decode_num_draft_tokens_total counter
llamacpp:spec_decode_num_draft_tokens_total 100
llamacpp:spec_decode_num_accepted_tokens_total 90
llamacpp:spec_decode_num_drafts_total 26
llamacpp:prompt_tokens_seconds 450.243
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 26
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="1"} 24
"""  # as llama.cpp's server (xllamacpp 2026.10.11549) prints it


def test_parse_llama_cpp_metrics():
    samples, bad = prom.parse(LLAMA_METRICS)
    assert bad == 0
    counters = prom.spec_counters(samples)
    assert counters["scheme"] == "llama.cpp"
    assert (counters["drafts"], counters["draft_tokens"], counters["accepted_tokens"]) == (26, 100, 90)
    assert counters["per_pos"] == {0: 26, 1: 24}


def test_vllm_series_of_several_engines_are_summed_and_created_samples_ignored():
    text = (
        'vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 10.0\n'
        'vllm:spec_decode_num_drafts_total{engine="1",model_name="m"} 5.0\n'
        'vllm:spec_decode_num_drafts_created{engine="0",model_name="m"} 1.7e9\n'
        'vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 30.0\n'
        'vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 0.0\n'
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="we \\"quoted\\", {braces}",position="2"} 7\n'
        "garbage line {\n"
    )
    samples, bad = prom.parse(text)
    assert bad == 1
    counters = prom.spec_counters(samples)
    assert counters["scheme"] == "vllm" and counters["drafts"] == 15 and counters["per_pos"] == {2: 7}
    assert any(dict(labels).get("model_name") == 'we "quoted", {braces}' for _, labels in samples)


def test_spec_delta_formulas_and_counter_reset():
    before = {"scheme": "vllm", "drafts": 10.0, "draft_tokens": 40.0, "accepted_tokens": 20.0, "per_pos": {0: 8.0, 1: 6.0}}
    after = {"scheme": "vllm", "drafts": 20.0, "draft_tokens": 80.0, "accepted_tokens": 50.0, "per_pos": {0: 18.0, 1: 14.0, 2: 4.0}}
    delta = prom.spec_delta(before, after)
    assert (delta["drafts"], delta["draft_tokens"], delta["accepted_tokens"]) == (10, 40, 30)
    assert delta["acceptance_rate"] == 0.75 and delta["mean_acceptance_length"] == 4.0
    assert delta["accepted_per_position"] == [10, 8, 4] and delta["per_position_acceptance"] == [1.0, 0.8, 0.4]
    restarted = prom.spec_delta(after, before)  # the server restarted between the scrapes
    assert restarted["counter_reset"] and restarted["drafts"] == 10
    assert prom.spec_delta(None, None) is None


@pytest.mark.parametrize("text, bad", [
    ("", "empty"),
    ("   \n ", "empty"),
    ("!!!!!!!!!!!!!!!!!!!!!!!!", "no letters"),
    ("\ufffd\ufffd\ufffd\ufffd\ufffd", "U+FFFD"),
    ("Sure! " + "the the " * 30, "repeats"),
    ("<pad>" * 20, "repeats"),
    ("I think " + "that it is what it is and " * 8, "repeats"),
])
def test_degenerate_text_is_caught(text, bad):
    assert bad in (degenerate(text) or "")


@pytest.mark.parametrize("text", [
    "Paris.",
    "The capital of France is Paris.",
    ", ".join(str(i) for i in range(1, 80)),
    "```python\ndef is_prime(n):\n    if n < 2:\n        return False\n    for i in range(2, int(n**0.5) + 1):\n"
    "        if n % i == 0:\n            return False\n    return True\n```",
])
def test_normal_text_is_not_degenerate(text):
    assert degenerate(text) is None


@pytest.mark.parametrize("given, expected", [
    ("127.0.0.1:8000", "http://127.0.0.1:8000"),
    ("http://127.0.0.1:8000/", "http://127.0.0.1:8000"),
    ("http://host:8000/v1", "http://host:8000"),
    ("https://host/llm/v1/", "https://host/llm"),
])
def test_normalize_url(given, expected):
    assert normalize_url(given) == expected


def test_normalize_url_refuses_bad_input():
    for bad in ("", "http://", "http://h:99999", "http://h:1/?q=1"):
        with pytest.raises(URLError):
            normalize_url(bad)


def test_every_server_rule_is_not_applicable_without_a_smoke_run():
    result = run_rules(Snapshot(), SERVER_RULES)
    assert {o.status for o in result.outcomes} == {"not_applicable"}
    assert {m.id for m in SERVER_RULES} == {f"GD8{i:02d}" for i in range(1, 14)}
