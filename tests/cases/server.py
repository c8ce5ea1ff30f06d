"""GD8xx server rules: pass, fail, unknown and not-applicable cases.

Each case runs the real smoke check (``gpudoctor smoke``) against the scriptable
OpenAI-compatible server of tests/fakes/smoke_servers.py on 127.0.0.1, set to one behaviour, and
judges the snapshot that run recorded; tests/test_smoke.py has the detailed assertions.
"""

from __future__ import annotations

import io
import json

from gpudoctor.cli import main
from gpudoctor.snapshot import Snapshot

from cases import Case, h200
from fakes.smoke_servers import WireServer, refused_port


def smoke(*args, **behaviour):
    """The snapshot of ``gpudoctor smoke --url WIRE *args`` with the wire server set to ``behaviour``."""
    def build(tmp):
        server = WireServer()
        for key, value in behaviour.items():
            setattr(server, key, value)
        with server:
            out = io.StringIO()
            main(["smoke", "--url", server.url, "--timeout", "30", "--format", "json", *args], environ={}, stdout=out,
                 stderr=io.StringIO())
        return Snapshot.from_json(json.loads(out.getvalue())["snapshot"])
    return build


def refused(tmp):
    sock = refused_port()
    try:
        out = io.StringIO()
        main(["smoke", "--url", f"http://127.0.0.1:{sock.getsockname()[1]}", "--timeout", "5", "--format", "json"], environ={},
             stdout=out, stderr=io.StringIO())
    finally:
        sock.close()
    return Snapshot.from_json(json.loads(out.getvalue())["snapshot"])


HEALTHY = smoke()


def both_reasoning_fields(tmp):
    """What vLLM versions that send ``reasoning`` and ``reasoning_content`` record (the wire server sends one)."""
    snap = HEALTHY(tmp)
    chat = snap.facts["server.chat"]
    chat.value["reasoning_fields_present"] = ["reasoning", "reasoning_content"]
    return snap

CASES = [
    Case("no-smoke-run", "GD801", h200(), "not_applicable"),
    # GD801 server-not-ready
    Case("vllm-like-server", "GD801", HEALTHY, "pass"),
    Case("connection-refused", "GD801", refused, "fail", "error", ("refused",)),
    # GD802 model-not-served
    Case("served-model", "GD802", HEALTHY, "pass"),
    Case("asked-for-a-model-not-served", "GD802", smoke("--model", "nope", fault="404_model"), "fail", "error", ("is not served here",)),
    # GD803 wrong-known-answer
    Case("right-answer", "GD803", HEALTHY, "pass"),
    Case("invalid-json", "GD803", smoke(fault="invalid_json"), "fail", "error", ("invalid JSON",)),
    # GD804 chat-answer-broken
    Case("chat-answers", "GD804", HEALTHY, "pass"),
    Case("degenerate-text", "GD804", smoke(text_mode="degenerate"), "fail", "error"),
    # GD805 stream-broken
    Case("stream-ends-with-done", "GD805", HEALTHY, "pass"),
    Case("stream-cut-midway", "GD805", smoke(fault="cut_stream"), "fail", "error", ("the stream was cut after",)),
    # GD806 concurrent-streams-fail
    Case("concurrent-streams-answer", "GD806", HEALTHY, "pass"),
    Case("every-stream-fails", "GD806", smoke(fault="500"), "fail", "error"),
    # GD807 tool-call-broken
    Case("well-formed-tool-call", "GD807", HEALTHY, "pass"),
    Case("tool-arguments-not-json", "GD807", smoke(tool_mode="bad_args"), "fail", "error", ("not valid JSON",)),
    # GD808 spec-decode-not-accepted
    Case("no-speculation-configured", "GD808", HEALTHY, "not_applicable"),
    Case("drafts-accepted", "GD808", smoke(spec=(4, [3, 2, 2, 1])), "pass"),
    Case("near-zero-acceptance", "GD808", smoke(spec=(4, [0, 0, 0, 0])), "fail", "error", ("almost none are accepted: 0.0%",)),
    Case("expected-but-no-metrics", "GD808", smoke("--expect-spec", metrics_enabled=False), "unknown", message=("/metrics: 404",)),
    # GD809 reasoning-field-name
    Case("no-reasoning-parser", "GD809", smoke(reasoning_field=None), "not_applicable"),
    Case("both-fields-sent", "GD809", both_reasoning_fields, "pass"),
    Case("reasoning-content-only", "GD809", smoke(reasoning_field="reasoning_content"), "fail", "info", ("`reasoning_content` only",)),
    Case("current-reasoning-field", "GD809", HEALTHY, "pass"),
    # GD804: the answer must answer
    Case("answer-off-topic", "GD804", smoke(text_mode="off_topic"), "fail", "warning", ("does not answer",)),
    # GD810 reasoning-parser-missing (the real vLLM front end: tests/test_smoke_vllm.py)
    Case("reasoning-parsed", "GD810", HEALTHY, "pass"),
    Case("raw-think-in-content", "GD810", smoke(text_mode="think_in_content", reasoning_field=None), "fail", "warning",
         ("without --reasoning-parser",)),
    # GD811 tool-choice-not-enabled
    Case("auto-tool-choice-on", "GD811", HEALTHY, "pass"),
    Case("tool-choice-refused", "GD811", smoke(tool_mode="unsupported"), "fail", "warning", ("--enable-auto-tool-choice",)),
    # GD812 streamed-tool-call-broken
    Case("streamed-tool-call", "GD812", HEALTHY, "pass"),
    Case("streamed-arguments-not-json", "GD812", smoke(tool_mode="bad_args"), "fail", "error", ("do not join into JSON",)),
    Case("no-tools-on-server", "GD812", smoke(tool_mode="unsupported"), "not_applicable"),
    Case("model-answered-in-prose", "GD812", smoke(tool_mode="prose"), "not_applicable", message=("answered in prose",)),
    # GD813 long-context-fails (--long)
    Case("long-not-asked", "GD813", HEALTHY, "not_applicable"),
    Case("long-context-recalled", "GD813", smoke("--long"), "pass"),
    Case("long-context-forgotten", "GD813", smoke("--long", text_mode="forgetful"), "fail", "warning", ("lost the code word",)),
]
