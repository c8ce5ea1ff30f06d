"""GD8xx: a running inference server — ready, serving the model, answering right, chat, streaming, concurrent.

These rules judge the ``server.*`` facts written by the smoke probe (gpudoctor/probes/smoke/),
which runs with ``gpudoctor smoke`` or ``gpudoctor check --smoke``. Without it there are
no server facts and every rule here is "not applicable".
"""

from __future__ import annotations

import json
import shlex
from typing import Any, Dict, List, Optional
from urllib.parse import urlsplit

from gpudoctor.rule import ERROR, INFO, WARNING, Fail, Fix, NotApplicable, Unknown, rule


def not_checked(snap) -> Optional[NotApplicable]:
    """The server rules' precondition (``applies=``): the smoke check ran."""
    if "server.url" not in snap.facts:
        return NotApplicable("no server was checked (run `gpudoctor smoke --url URL` or `gpudoctor check --smoke URL`)")
    return None


def _step(snap, path: str):
    """(fact, None) when the step ran; (None, Unknown) when it did not (a server was checked)."""
    fact = snap.get(path)
    if fact.status == "absent":
        return None, Unknown(fact.detail or f"{path} was not collected")
    value = fact.value if isinstance(fact.value, dict) else {}
    if value.get("error") == "deadline":
        return None, Unknown(fact.detail)
    return fact, None


def _url(snap) -> str:
    return str(snap.value("server.url") or "http://127.0.0.1:8000")


def _port(snap) -> int:
    parts = urlsplit(_url(snap))
    try:
        return parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return 8000


def _smoke(snap, *extra: str) -> str:
    return " ".join(["gpudoctor smoke --url", shlex.quote(_url(snap)), *extra])


def _curl(snap, stream: bool = False) -> str:
    """The request to reproduce by hand (the key by reference to $SERVER_API_KEY, never its value)."""
    models = snap.value("server.models") if isinstance(snap.value("server.models"), dict) else {}
    body = {"messages": [{"role": "user", "content": "Say hi"}], "max_tokens": 16}
    if models.get("chosen"):
        body = {"model": models["chosen"], **body}
    if stream:
        body.update(stream=True, stream_options={"include_usage": True})
    auth = ' --oauth2-bearer "$SERVER_API_KEY"' if _asked_for_key(snap) else ""  # sends Authorization: Bearer
    return (f"curl -sS{'N' if stream else ''} {shlex.quote(_url(snap) + '/v1/chat/completions')}{auth} "
            f"-H 'Content-Type: application/json' -d {shlex.quote(json.dumps(body))}")


def _asked_for_key(snap) -> bool:
    value = snap.get("server.ready").value
    return isinstance(value, dict) and bool(value.get("key_sent"))


def _owner_text(value: Dict[str, Any]) -> str:
    owners = value.get("port_owner") or []
    if not owners:
        return ""
    first = owners[0]
    who = first.get("name") or "a process"
    pid = f" (pid {first['pid']})" if first.get("pid") else " (pid hidden: another user's process; run as root to see it)"
    return f"; port held by {who}{pid}" + (f": {first['cmdline']}" if first.get("cmdline") else "")


def _servers_text(value: Dict[str, Any]) -> str:
    servers = value.get("server_processes") or []
    if not servers:
        return ""
    names = ", ".join(f"pid {s.get('pid')} {s.get('cmdline') or s.get('name') or ''}".strip()[:100] for s in servers[:3])
    return f"; server processes on this machine: {names}"


def request_failure(snap, path: str, fact, what: str) -> Fail:
    """A step's request failed: one finding naming the cause, with the fix for that cause."""
    value = fact.value if isinstance(fact.value, dict) else {}
    kind = value.get("error") or fact.status
    message = fact.detail or f"{what} failed ({kind})"
    port = _port(snap)
    ss = f"ss -ltnp 'sport = :{port}'"
    fixes = {
        "refused": Fix(
            "Start the server, or point --url at the port it listens on. vLLM opens its port only once the "
            "engine is up (weights loaded, KV cache allocated, graphs captured), so right after launch a refused "
            "connection is normal: wait with a longer --timeout.",
            [ss, _smoke(snap, "--timeout 900")],
        ),
        "timeout": Fix(
            "The server accepted the connection but did not answer in time: overloaded, hung (a stuck engine "
            "or a dead GPU), or a slow model on slow hardware. Read the server log; raise --timeout if it is "
            "only slow.",
            [_smoke(snap, "--timeout 600")],
        ),
        "loading": Fix(
            "The server is up but not ready (503). A loading server gets there: wait for it (vLLM logs "
            "\"Application startup complete.\", llama.cpp \"model loaded\") or give the check more time. vLLM's "
            "/health also answers 503 when its engine core has died: then its log shows why, and only a restart helps.",
            [_smoke(snap, "--timeout 900")],
        ),
        "auth": Fix(
            "The server wants an API key (vLLM --api-key / VLLM_API_KEY, llama.cpp --api-key). Put it in an "
            "environment variable and name that variable; gpudoctor sends it to this origin only and never prints it.",
            ["export SERVER_API_KEY='…'", _smoke(snap, "--api-key-env SERVER_API_KEY")],
        ),
        "html": Fix(
            "Something other than an inference server answers on this port (a web UI, a notebook, a proxy's "
            "error page). Find it and point --url at the inference server's port.",
            [ss],
        ),
        "protocol": Fix("This port does not speak HTTP (another service holds it). Point --url at the inference server.", [ss]),
        "not_found": Fix(
            "No OpenAI-compatible API at this address: wrong port, or a path prefix is missing (a server behind "
            "a proxy under /something). Give the base URL, with or without /v1.",
            [ss],
        ),
        "invalid_json": Fix(
            "The answer is not valid JSON: a proxy rewriting or truncating responses, or not an OpenAI-compatible "
            "server. Call the endpoint by hand and look at the raw body.",
            [f"curl -sS {shlex.quote(_url(snap) + '/v1/models')} | head -c 400"],
        ),
        "bad_shape": Fix(
            "The JSON does not have the OpenAI shape (no `data` / `choices`): not an OpenAI-compatible endpoint, "
            "or a different API behind this URL.",
            [f"curl -sS {shlex.quote(_url(snap) + '/v1/models')} | head -c 400"],
        ),
        "model_not_found": Fix(
            "Ask for a model the server serves (`--model`, or leave it out to use the first served model); vLLM "
            "serves the name given to --served-model-name, else the model path.",
            [f"curl -sS {shlex.quote(_url(snap) + '/v1/models')}", _smoke(snap, "--model NAME")],
        ),
        "server_error": Fix(
            "The server failed the request; the first line of its error is shown. Its log has the traceback "
            "(an out-of-memory, a kernel that does not exist for this GPU, a crashed engine).",
            ["journalctl -u vllm --since '10 min ago'  # or the terminal / container log of the server", _curl(snap)],
        ),
        "bad_request": Fix("The server rejected the request as invalid; the message says which field. An old server version?",
                           [_curl(snap)]),
        "redirect": Fix(
            "The URL redirects. Use the final address: gpudoctor does not follow redirects, so an API key never "
            "goes to another origin.",
            [f"curl -sSI {shlex.quote(_url(snap) + '/v1/models')}  # shows the Location it redirects to"],
        ),
        "too_large": Fix("The answer exceeded gpudoctor's size cap: not a normal completion. Look at it by hand.",
                         [_curl(snap) + " | head -c 2000"]),
        "stream_cut": Fix(
            "The stream ended before `data: [DONE]`: the server (or a proxy between: nginx proxy_read_timeout, "
            "a load balancer's idle timeout) closed it mid-way; a crashing engine does the same. Read the server "
            "log at that moment, and compare with a direct connection that bypasses the proxy.",
            [_curl(snap, stream=True) + " | tail -3"],
        ),
        "not_sse": Fix(
            "A streamed request came back as one non-SSE body: the server (or a proxy) ignores `stream: true`. "
            "Clients that stream will hang or fail to parse it.",
            [_curl(snap, stream=True) + " -D - | head -20"],
        ),
        "closed": Fix("The server closed the connection without answering: crashed, restarting, or a proxy dropped it. Read its log.",
                      [ss, _curl(snap)]),
        "dns": Fix("The host name does not resolve. Use an IP address or fix the name.",
                   [f"getent hosts {shlex.quote(urlsplit(_url(snap)).hostname or '')}"]),
        "tls": Fix("TLS failed: an https:// URL for a plain-HTTP server, or a certificate this machine does not trust.",
                   [f"curl -v {shlex.quote(_url(snap) + '/health')}"]),
        "deadline": Fix("The check ran out of time before this step.", [_smoke(snap, "--timeout 600")]),
    }
    fix = fixes.get(kind) or Fix("Reproduce the request by hand and read the server log.", [_curl(snap)])
    if kind == "model_not_found":
        served = snap.value("server.models", {}) or {}
        if served.get("served"):
            message += f" (served: {', '.join(map(str, served['served'][:5]))})"
    if kind in ("refused", "html", "protocol", "not_found", "timeout", "loading"):
        message += _owner_text(value) + (_servers_text(value) if kind == "refused" else "")
    evidence: List[Any] = [(f"{path}.error", kind)]
    if value.get("http_status") is not None:
        evidence.append((f"{path}.http_status", value["http_status"]))
    measured = value.get("measured")
    if isinstance(measured, dict):
        evidence.append((f"{path}.events_before_failure", measured.get("events")))
    return Fail(message, evidence, fix)


# --- GD801 -------------------------------------------------------------------------------
@rule("GD801", "server-not-ready", severity=ERROR, area="server", applies=not_checked)
def server_not_ready(snap):
    """The server did not become ready: refused, hung, still loading, wrong service, or an auth wall.

    ## Why
    Everything else the smoke check measures needs a server that answers `/health` with
    200 and `/v1/models` with the OpenAI model list. A vLLM server opens its port only after
    the engine is initialised, so "connection refused" right after launch is normal; a
    server that answers 503 ("Loading model", llama.cpp) is up but not ready; `/health`
    answering 503 on vLLM ≥ the 2025-09 change means the engine core is dead. HTML on the
    port means another program holds it (a notebook, a web UI), 401/403 means an API key is
    needed. The finding names which, and who holds the port when the server runs here.

    ## Fix
    Depends on the cause the finding names: start the server or wait longer
    (`--timeout`), pass the key with `--api-key-env VAR`, or point `--url` at the right
    port (`ss -ltnp 'sport = :PORT'` shows who listens).

    ## References
    - https://docs.vllm.ai/en/v0.8.1/serving/openai_compatible_server.html
    """
    fact = snap.get("server.ready")
    if fact.ok:
        return None
    if fact.status == "absent":
        return Unknown(fact.detail or "server.ready was not collected")
    return request_failure(snap, "server.ready", fact, "readiness")


# --- GD802 -------------------------------------------------------------------------------
@rule("GD802", "model-not-served", severity=ERROR, area="server", applies=not_checked)
def model_not_served(snap):
    """The model asked for is not the one the server serves (or the server lists none).

    ## Why
    OpenAI-compatible servers route by the request's `model` field. vLLM answers 404 "The
    model `X` does not exist." for a name it does not serve: its served name is
    `--served-model-name`, else the path or repo id given to `vllm serve`, so a client that
    sends the short name fails while curl with the full path works. llama.cpp serves one
    model and ignores the name, which hides the same mistake until the client moves to vLLM.

    ## Fix
    Use a name from `GET /v1/models` (or start vLLM with `--served-model-name NAME`);
    leave `--model` out and the smoke check uses the first served model.

    ## References
    - vLLM OpenAI server: `/v1/models`, `--served-model-name` (docs.vllm.ai, "OpenAI-Compatible
      Server").
    - https://docs.vllm.ai/en/v0.8.1/serving/openai_compatible_server.html
    """
    fact, skip = _step(snap, "server.models")
    if skip:
        return skip
    value = fact.value or {}
    served = value.get("served") or []
    fails = []
    not_found = [
        path for path in ("server.known_answer", "server.chat", "server.stream", "server.tool_call")
        if isinstance(snap.get(path).value, dict) and snap.get(path).value.get("error") == "model_not_found"
    ]
    if not served:
        fails.append(Fail("the server lists no models at /v1/models", [("server.models.served", served)],
                          Fix("Check the server's launch command and log: no model was loaded or registered.",
                              [f"curl -sS {shlex.quote(_url(snap) + '/v1/models')}"])))
    requested = value.get("requested")
    if requested and served and requested not in served:
        shown = ", ".join(map(str, served[:5]))
        if not_found:
            fails.append(Fail(f"model {requested!r} is not served here (served: {shown}); the requests got 404",
                              [("server.models.requested", requested), ("server.models.served", served[:5])],
                              Fix("Use a served name, or restart the server with --served-model-name.",
                                  [_smoke(snap, "--model", shlex.quote(str(served[0])))])))
        else:
            fails.append(Fail(f"the server answered for model {requested!r} but does not list it (served: {shown}); "
                              "it ignores the name (llama.cpp does), so a stricter server would answer 404",
                              [("server.models.requested", requested), ("server.models.served", served[:5])],
                              Fix("Send a listed name so clients keep working when the server changes.",
                                  [_smoke(snap, "--model", shlex.quote(str(served[0])))]),
                              severity=WARNING))
    return fails


# --- GD803 -------------------------------------------------------------------------------
@rule("GD803", "wrong-known-answer", severity=ERROR, area="server", applies=not_checked)
def wrong_known_answer(snap):
    """A question with one exact answer, asked at temperature 0, got a wrong or degenerate answer.

    ## Why
    A server can answer 200 with fluent-looking garbage: a kernel built for another GPU
    family, a wrong dtype or quantization, a broken attention backend, a chat template that
    does not match the model. The tell is text that repeats one token or phrase, is only
    punctuation ("!!!!!!"), or misses a fact any instruction-tuned model knows. At
    temperature 0 the answer is deterministic, so this check does not flake.

    ## Fix
    Compare with a known-good configuration: another attention backend
    (`--attention-backend FLASH_ATTN` / `TRITON_ATTN`), `--enforce-eager`, the model's own
    chat template, an unquantized checkpoint. A reasoning model that spends all of
    `max_tokens` thinking still passes when the answer is in its reasoning.

    ## References
    - https://docs.vllm.ai/en/v0.8.1/serving/openai_compatible_server.html
    """
    fact, skip = _step(snap, "server.known_answer")
    if skip:
        return skip
    if not fact.ok:
        return request_failure(snap, "server.known_answer", fact, "known-answer request")
    value = fact.value or {}
    evidence = [("server.known_answer.question", value.get("question")), ("server.known_answer.content", value.get("content"))]
    fix = Fix("Check the attention backend, dtype/quantization and chat template against a known-good setup.",
              ["vllm serve MODEL --enforce-eager --attention-backend TRITON_ATTN  # then: " + _smoke(snap)])
    if value.get("degenerate"):
        return Fail(f"degenerate answer ({value['degenerate']}): the model is not producing language", evidence, fix)
    if not value.get("correct"):
        return Fail(f"asked {value.get('question')!r} at temperature 0 and expected {value.get('expected')!r}; "
                    f"got {str(value.get('content') or '')[:120]!r}", evidence, fix)
    return None


# --- GD804 -------------------------------------------------------------------------------
@rule("GD804", "chat-answer-broken", severity=ERROR, area="server", applies=not_checked)
def chat_answer_broken(snap):
    """The real-world chat request (a short Python function at temperature 0.6) is empty, degenerate or incomplete.

    ## Why
    This is the request from the origin story, with the sampling settings reasoning models
    are served with. It must come back with content (or, for a reasoning model, reasoning
    plus content), a `finish_reason` and a `usage` object. A reasoning model that spends
    all of `max_tokens` thinking returns empty content with finish_reason "length": the
    client sees an empty answer although the server works.

    The answer must also answer: gpudoctor takes the code out of it (`ast`), finds the
    `def` and runs it on fifteen numbers in a child interpreter (`-I`, CPU/memory limits, a
    5 s timeout, no file, process or network builtins). An answer about something else or
    code that does not parse is a warning: it is what a user would see. A function that runs
    but is wrong is information: a small model gets it wrong on a healthy server. An answer
    cut at `max_tokens` inside the function is not judged (the table says so).

    ## Fix
    Empty content with reasoning: raise `max_tokens` (or lower the thinking budget).
    Degenerate text: as for GD803. Missing usage / finish_reason: a proxy or an old server
    that drops fields; clients that count tokens will break.

    ## References
    - OpenAI Chat Completions response object (`choices[].finish_reason`, `usage`).
    - https://platform.openai.com/docs/api-reference/chat
    - https://docs.vllm.ai/en/v0.11.2/features/reasoning_outputs/

    ## Severity
    An error when the server answers with nothing usable (no content and no reasoning, every
    token spent on reasoning, degenerate text); a warning when the answer is there but misses
    the request or lacks a field clients read; info when only the code the model wrote is wrong
    (the model's mistake, not the server's).
    """
    fact, skip = _step(snap, "server.chat")
    if skip:
        return skip
    if not fact.ok:
        return request_failure(snap, "server.chat", fact, "chat request")
    value = fact.value or {}
    fails = []
    content_chars = value.get("content_chars") or 0
    reasoning_chars = value.get("reasoning_chars") or 0
    evidence = [("server.chat.finish_reason", value.get("finish_reason")), ("server.chat.content_chars", content_chars),
                ("server.chat.reasoning_chars", reasoning_chars)]
    if content_chars == 0 and reasoning_chars == 0:
        fails.append(Fail("the chat request came back with no content and no reasoning", evidence,
                          Fix("Read the server log for this request; check the chat template.", [_curl(snap)])))
    elif content_chars == 0 and value.get("finish_reason") == "length":
        fails.append(Fail(f"all {value.get('max_tokens')} max_tokens went into reasoning ({reasoning_chars} chars): "
                          "the answer itself is empty", evidence,
                          Fix("Give reasoning models a larger max_tokens (thousands), or turn thinking off for short calls.",
                              [_smoke(snap, "--max-tokens 2048")]),
                          severity=WARNING))
    elif value.get("degenerate") and content_chars:
        fails.append(Fail(f"degenerate answer ({value['degenerate']})", evidence + [("server.chat.content", value.get("content"))],
                          Fix("As for GD803: check attention backend, dtype/quantization and chat template.",
                              ["gpudoctor explain GD803"])))
    check = value.get("answer_check") if isinstance(value.get("answer_check"), dict) else {}
    if check.get("verdict") in ("wrong", "no_code", "syntax_error", "no_function") and not fails:
        # Off-topic or unparseable: what a user sees as a broken answer (warning). Code that
        # runs but is wrong: the model's skill more than the server's health (information).
        wrong_code = check.get("verdict") == "wrong"
        fails.append(Fail(f"the answer does not answer the request: {check.get('reason')}" if not wrong_code else
                          f"the answer's code is wrong: {check.get('reason')}",
                          evidence + [("server.chat.answer_check.verdict", check.get("verdict")),
                                      ("server.chat.content", value.get("content"))],
                          Fix("A small or heavily quantized model may write wrong code; a model that knows Python and "
                              "still answers off-topic points at the chat template or a broken kernel (as for GD803).",
                              [_curl(snap), "gpudoctor explain GD803"]),
                          severity=INFO if wrong_code else WARNING))
    if not value.get("finish_reason"):
        fails.append(Fail("the answer has no finish_reason", evidence,
                          Fix("An old server or a proxy drops it; clients that check it will misbehave.", [_curl(snap)]),
                          severity=WARNING))
    if not value.get("usage"):
        fails.append(Fail("the answer has no usage object (token counts)", [("server.chat.usage", value.get("usage"))],
                          Fix("An old server or a proxy drops it; token accounting will be wrong.", [_curl(snap)]), severity=WARNING))
    return fails


# --- GD805 -------------------------------------------------------------------------------
@rule("GD805", "stream-broken", severity=ERROR, area="server", applies=not_checked)
def stream_broken(snap):
    """Streaming is broken: malformed SSE, no `[DONE]`, no tokens, or no usage chunk.

    ## Why
    Chat UIs and agents stream. A stream must be Server-Sent Events of JSON chunks ending in
    `data: [DONE]`; with `stream_options: {"include_usage": true}` the last chunk carries
    `usage`. A stream cut mid-way (a proxy's read timeout, a crashing engine) or chunks that
    are not JSON break every client, even when non-streamed requests work. The measured
    time to first token, inter-token latency and tokens/s are reported next to the server's
    own numbers when it sends them (llama.cpp `timings`).

    ## Fix
    A cut stream: read the server log at that moment; behind nginx set
    `proxy_buffering off` and a long `proxy_read_timeout`. No usage chunk: upgrade the
    server (vLLM supports `stream_options.include_usage`).

    ## References
    - OpenAI streaming: `stream_options.include_usage`, `data: [DONE]`.
    - https://platform.openai.com/docs/api-reference/chat
    """
    fact, skip = _step(snap, "server.stream")
    if skip:
        return skip
    if not fact.ok:
        return request_failure(snap, "server.stream", fact, "streamed request")
    value = fact.value or {}
    evidence = [("server.stream.events", value.get("events")), ("server.stream.text_chunks", value.get("text_chunks"))]
    fails = []
    if not value.get("text_chunks"):
        fails.append(Fail("the stream carried no tokens (no content, reasoning or tool-call deltas)", evidence,
                          Fix("Read the server log; compare with a non-streamed request.", [_curl(snap, stream=True)])))
    elif value.get("degenerate"):
        fails.append(Fail(f"degenerate streamed text ({value['degenerate']})", evidence + [("server.stream.text", value.get("text"))],
                          Fix("As for GD803: check attention backend, dtype/quantization and chat template.",
                              ["gpudoctor explain GD803"])))
    if not value.get("usage"):
        fails.append(Fail("no usage chunk although stream_options.include_usage was set", evidence,
                          Fix("Upgrade the server; clients that bill or budget by tokens need it.", [_curl(snap, stream=True) + " | tail -3"]),
                          severity=WARNING))
    return fails


# --- GD806 -------------------------------------------------------------------------------
@rule("GD806", "concurrent-streams-fail", severity=ERROR, area="server", applies=not_checked)
def concurrent_streams_fail(snap):
    """Not every one of N parallel streams completed.

    ## Why
    One request at a time can work while concurrent ones fail: too little KV cache for the
    batch (`--gpu-memory-utilization`, `--max-model-len`), `--max-num-seqs` / llama.cpp
    `--parallel` slots, a proxy's connection limit, or a crash under batching.

    ## Fix
    Read the server log for the failed requests; check KV-cache size and the concurrency
    limits; rerun with `--concurrency 1` to confirm that single requests work.

    ## References
    - https://docs.vllm.ai/en/v0.8.1/serving/openai_compatible_server.html
    """
    fact, skip = _step(snap, "server.concurrency")
    if skip:
        return skip
    value = fact.value if isinstance(fact.value, dict) else {}
    failed = value.get("failed") or []
    if not failed and fact.ok:
        return None
    first = failed[0] if failed else {"error": fact.status, "message": fact.detail}
    return Fail(
        f"{len(failed)} of {value.get('requested')} parallel streams failed; first: {first.get('message')}",
        [("server.concurrency.completed", value.get("completed")), ("server.concurrency.requested", value.get("requested")),
         ("server.concurrency.first_error", first.get("error"))],
        Fix("Check the server's concurrency limits and KV-cache size; confirm single requests work.",
            [_smoke(snap, "--concurrency 1")]),
    )
