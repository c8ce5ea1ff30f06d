"""The smoke probe: talk to a running OpenAI-compatible server and record what it does.

Steps (each one fact under ``server.``; rules/server.py judges them):

1. ``server.ready``  poll ``/health`` then ``/v1/models`` until ready or the deadline; a
   server that answers 503 ("Loading model") or refuses connections while it starts is
   "not ready yet" (research/facts.md §4.9); ``server.models`` the served models and the
   one chosen.
2. ``server.known_answer``  a question with one exact answer at temperature 0.
3. ``server.chat``  the origin-story request: a short Python function at temperature 0.6,
   top_p 0.95: content, the reasoning field the server uses (``reasoning`` or
   ``reasoning_content``, facts.md §4.6), finish_reason, usage.
4. ``server.stream``  SSE well-formed and ending in ``[DONE]``; TTFT, inter-token latency
   p50/p95, tokens/s, usage from ``stream_options.include_usage``; compared with the
   server's own ``timings`` when it sends them (llama.cpp).
5. ``server.concurrency``  N parallel streams; aggregate tokens/s.
6. ``server.tool_call``  one function tool, ``tool_choice: auto`` (the path that goes
   through vLLM's ``--tool-call-parser``, facts.md §4.7).
7. ``server.spec_decode``  Prometheus ``/metrics`` before and after the requests:
   speculative-decoding counter deltas (facts.md §4.5), plus per-response
   ``timings.draft_n`` / ``draft_n_accepted`` (llama.cpp) and vLLM's per-request
   ``metrics.speculative_decoding`` where present.

The probe never raises and never runs past ``Options.timeout`` (one deadline for the whole
check); the API key is only handed to the client, never written to a fact.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

from gpudoctor.smoke import metrics as prom
from gpudoctor.smoke.client import (
    CLOSED,
    PROTOCOL,
    REFUSED,
    TIMEOUT as T_TIMEOUT,
    Client,
    ClientError,
    HTTPStatus,
    Response,
    StreamResult,
    html_title,
    parse_json,
)
from gpudoctor.smoke import DEFAULT_URL
from gpudoctor.smoke.text import degenerate
from gpudoctor.snapshot import ABSENT, ERROR, NO_PERMISSION, NOT_SUPPORTED, OK, TIMEOUT, Fact

SOURCE = "smoke"
STEP_FACTS = (
    "server.models",
    "server.known_answer",
    "server.chat",
    "server.stream",
    "server.concurrency",
    "server.tool_call",
    "server.spec_decode",
)

SEED = 20260425
KNOWN_QUESTION = "What is the capital of France? Answer with one word."
KNOWN_ANSWER = "Paris"
ORIGIN_PROMPT = "Write a short Python function that returns True when a number is prime."
# Long enough that prompt processing, not HTTP, dominates the time to first token, so the
# measured TTFT can be compared with the server's own prompt time.
STREAM_PROMPT = "Continue this list of numbers up to 100, separated by commas: " + ", ".join(str(i) for i in range(1, 41)) + ","
TOOL_PROMPT = "What is the weather in Paris right now? Call the get_weather tool."
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "City name, e.g. Paris"}},
            "required": ["city"],
        },
    },
}
# Tool-call markup a model emits that a working parser would have turned into tool_calls
# (hermes/qwen <tool_call>, mistral [TOOL_CALLS], llama3 <|python_tag|>, qwen3_coder
# <function=…>, deepseek's tool-call tokens, a bare {"name": …, "arguments": …} object).
TOOL_MARKUP = re.compile(
    r"<tool_call>|\[TOOL_CALLS\]|<\|python_tag\|>|<function=|<\|tool[▁_]call|<｜tool[▁_]call"
    r'|\{\s*"name"\s*:\s*"get_weather"'
)
# An error answer that means "this server does not do tool calls" (a skip, not a failure):
# vLLM without --enable-auto-tool-choice, llama.cpp without --jinja, strict servers.
TOOLS_UNSUPPORTED = re.compile(
    r"enable-auto-tool-choice|requires? (the )?--jinja|--jinja flag|tool[ _]choice.{0,40}(requires|not supported)"
    r"|tools? (are |is )?not supported|does not support (tools|function)|unsupported.{0,20}tool|tool.{0,20}unsupported"
    r"|(unknown|unrecognized|extra).{0,30}\btools\b",
    re.I,
)
SERVER_PROCESS = re.compile(r"vllm|sglang|llama-server|llama_cpp\.server|xllamacpp|text-generation-launcher|trtllm-serve|lmdeploy", re.I)

# progress(kind, text): kind "wait" (readiness, shown live), "step" (the step now running)
# or "clear" (done: remove the live line).
Progress = Callable[[str, str], None]


@dataclass
class Options:
    url: str = DEFAULT_URL
    model: Optional[str] = None
    api_key: Optional[str] = None  # the value: handed to the client only
    api_key_env: Optional[str] = None  # the variable's name, for messages
    concurrency: int = 4
    timeout: float = 120.0  # one deadline for everything, readiness wait included
    expect_spec: bool = False
    wait: bool = True  # poll until ready; False: one attempt (check --smoke)
    max_tokens: int = 128
    stream_tokens: int = 64
    concurrency_tokens: int = 32


class StepError(Exception):
    """A step's request failed; ``fact`` says how."""

    def __init__(self, fact: Fact):
        super().__init__(fact.detail)
        self.fact = fact


class _Run:
    def __init__(self, opts: Options, progress: Optional[Progress]):
        self.opts = opts
        self.progress = progress or (lambda kind, text: None)
        self.started = time.monotonic()
        self.deadline = self.started + opts.timeout
        self.client = Client(opts.url, opts.api_key)
        self.lock = threading.Lock()
        self.per_response = {"responses": 0, "draft_tokens": 0, "accepted_tokens": 0, "kind": None}

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    # --- failures → facts ----------------------------------------------------------
    def failure(self, kind: str, message: str, http_status: Optional[int] = None, extra: Optional[Dict[str, Any]] = None) -> Fact:
        status = {T_TIMEOUT: TIMEOUT, "auth": NO_PERMISSION}.get(kind, ERROR)
        value: Dict[str, Any] = {"error": kind, "message": message}
        if http_status is not None:
            value["http_status"] = http_status
        if kind == "auth":
            value["key_sent"] = bool(self.opts.api_key)
            value["key_variable"] = self.opts.api_key_env  # its name only
        if extra:
            value.update(extra)
        return Fact(value, status, SOURCE, message)

    def from_client_error(self, exc: ClientError, extra: Optional[Dict[str, Any]] = None) -> Fact:
        return self.failure(exc.kind, exc.message, extra=extra)

    def from_http(self, response: Response, what: str, extra: Optional[Dict[str, Any]] = None) -> Fact:
        message = f"{what}: {response.status} {response.reason}".rstrip()
        first = error_message(response)
        if first:
            message += f": {first}"
        status = response.status
        if status in (401, 403):
            kind = "auth"
            hint = " (no API key was sent; pass --api-key-env VAR)" if not self.opts.api_key else " (the API key was refused)"
            message += hint
        elif status == 404:
            kind = "model_not_found" if re.search(r"model", first, re.I) else "not_found"
        elif 300 <= status < 400:
            kind = "redirect"
            message = f"{what}: {status} redirect to {response.headers.get('location', '?')} (not followed: the API key goes to the given origin only)"
        elif status >= 500:
            kind = "server_error"
        else:
            kind = "bad_request"
        return self.failure(kind, message, status, extra)

    # --- requests ------------------------------------------------------------------
    def timeout_left(self) -> float:
        left = self.remaining()
        if left <= 0.05:
            raise StepError(Fact({"error": "deadline", "message": "not run"}, TIMEOUT, SOURCE,
                                 f"not run: the --timeout deadline ({self.opts.timeout:g} s) was reached"))
        return left

    def post_json(self, path: str, payload: Dict[str, Any], what: str) -> Tuple[Any, Response]:
        try:
            response = self.client.request("POST", path, payload, timeout=self.timeout_left())
        except ClientError as exc:
            raise StepError(self.from_client_error(exc)) from None
        if not 200 <= response.status < 300:
            raise StepError(self.from_http(response, what))
        try:
            return parse_json(response), response
        except ClientError as exc:
            raise StepError(self.failure(exc.kind, f"{what}: {exc.message}", response.status)) from None

    def note_spec(self, body: Any) -> None:
        """Per-response draft counts: llama.cpp ``timings``, vLLM per-request ``metrics``."""
        if not isinstance(body, dict):
            return
        timings = body.get("timings")
        spec = (body.get("metrics") or {}).get("speculative_decoding") if isinstance(body.get("metrics"), dict) else None
        drafted = accepted = None
        kind = None
        if isinstance(timings, dict) and isinstance(timings.get("draft_n"), (int, float)):
            drafted, accepted, kind = timings.get("draft_n"), timings.get("draft_n_accepted", 0), "timings.draft_n"
        elif isinstance(spec, dict) and isinstance(spec.get("num_draft_tokens"), (int, float)):
            drafted, accepted, kind = spec.get("num_draft_tokens"), spec.get("num_accepted_draft_tokens", 0), "metrics.speculative_decoding"
        if drafted is None:
            return
        with self.lock:
            self.per_response["responses"] += 1
            self.per_response["draft_tokens"] += int(drafted)
            self.per_response["accepted_tokens"] += int(accepted) if isinstance(accepted, (int, float)) else 0
            self.per_response["kind"] = kind


# --- entry point -------------------------------------------------------------------------
def run(opts: Options, progress: Optional[Progress] = None) -> Dict[str, Fact]:
    """Run every step; return the ``server.*`` facts (and ``probe.smoke``). Never raises."""
    facts: Dict[str, Fact] = {}
    started = time.monotonic()
    try:
        _run_steps(opts, progress, facts)
        facts["probe.smoke"] = Fact(round(time.monotonic() - started, 4), OK, "gpudoctor")
    except Exception as exc:  # the probe must never take the doctor down
        import traceback

        facts["probe.smoke"] = Fact(None, ERROR, "gpudoctor", f"{type(exc).__name__}: {exc}")
        facts.setdefault("server.ready", Fact(None, ERROR, SOURCE, f"the smoke probe crashed: {type(exc).__name__}: {exc}"))
        facts["probe.smoke"].value = {"traceback": traceback.format_exc()[-2000:]}
    for path in STEP_FACTS:
        facts.setdefault(path, Fact(None, ABSENT, SOURCE, "not run: the server was not ready"))
    return facts


def _run_steps(opts: Options, progress: Optional[Progress], facts: Dict[str, Fact]) -> None:
    run_ = _Run(opts, progress)
    facts["server.url"] = Fact(run_.client.base_url, OK, SOURCE)
    ready, models = wait_ready(run_)
    facts["server.ready"] = ready
    run_.progress("clear", "")
    if not ready.ok:
        return
    model, models_fact = choose_model(opts, models)
    facts["server.models"] = models_fact
    before = scrape_metrics(run_)
    steps = (
        ("server.known_answer", "known answer", lambda: known_answer(run_, model)),
        ("server.chat", "chat (origin request)", lambda: chat(run_, model)),
        ("server.stream", "streaming", lambda: stream(run_, model)),
        ("server.concurrency", "concurrency", lambda: concurrency(run_, model)),
        ("server.tool_call", "tool call", lambda: tool_call(run_, model)),
    )
    for path, label, step in steps:
        run_.progress("step", f"smoke: {label} …")
        try:
            facts[path] = step()
        except StepError as exc:
            facts[path] = exc.fact
        except Exception as exc:  # a bug in one step costs that step, not the whole check
            facts[path] = Fact({"error": "internal", "message": f"{type(exc).__name__}: {exc}"}, ERROR, SOURCE,
                               f"gpudoctor could not judge this answer ({type(exc).__name__}: {exc}); please report it")
    after = scrape_metrics(run_)
    facts["server.spec_decode"] = spec_fact(run_, before, after)
    run_.progress("clear", "")


# --- 1. readiness ------------------------------------------------------------------------
def wait_ready(run_: _Run) -> Tuple[Fact, Optional[List[Dict[str, Any]]]]:
    opts = run_.opts
    attempts = 0
    interval = 0.25
    seen: List[str] = []
    while True:
        attempts += 1
        state, detail, payload = _ready_once(run_)
        if detail and (not seen or seen[-1] != detail):
            seen.append(detail)
        if state == "ready":
            value = {"ready": True, "waited_s": round(run_.elapsed(), 3), "attempts": attempts,
                     "health": payload["health"], "states_seen": seen[:-1] if len(seen) > 1 else [],
                     "key_sent": bool(opts.api_key)}
            return Fact(value, OK, SOURCE), payload["models"]
        if state == "fatal":
            fact: Fact = payload
            fact.value.update({"ready": False, "waited_s": round(run_.elapsed(), 3), "attempts": attempts})
            _add_port_owner(run_, fact)
            return fact, None
        # still waiting
        left = run_.remaining()
        if not opts.wait or left <= 0:
            fact = payload
            waited = run_.elapsed()
            if opts.wait:
                fact.detail = f"not ready after {waited:.0f} s (--timeout {opts.timeout:g}): last answer: {detail}"
            fact.value.update({"ready": False, "waited_s": round(waited, 3), "attempts": attempts, "states_seen": seen})
            if fact.value.get("error") == "loading":
                fact.status = TIMEOUT
            _add_port_owner(run_, fact)
            return fact, None
        run_.progress("wait", f"waiting for {run_.client.base_url}: {detail}  ({run_.elapsed():.0f} s of {opts.timeout:g} s)")
        time.sleep(max(0.0, min(interval, left)))
        interval = min(interval * 2, 2.0)


def _ready_once(run_: _Run) -> Tuple[str, str, Any]:
    """("ready", detail, {"health", "models"}) | ("waiting", detail, fact) | ("fatal", detail, fact)."""
    client = run_.client
    per_try = max(0.05, min(5.0, run_.remaining()))
    health: Any = None
    try:
        response = client.request("GET", "/health", timeout=per_try)
    except ClientError as exc:
        if exc.kind == REFUSED:
            fact = run_.from_client_error(exc)
            fact.detail = fact.value["message"] = f"{exc.message} (is the server running?)"
            return "waiting", fact.detail, fact
        if exc.kind in (T_TIMEOUT, CLOSED):
            return "waiting", exc.message, run_.from_client_error(exc)
        return "fatal", exc.message, run_.from_client_error(exc)
    if response.status == 503:
        first = error_message(response)
        # llama.cpp says "Loading model"; vLLM's /health answers 503 with no such word once its
        # engine core is dead (facts.md §4.9), which waiting will not fix.
        why = "still loading" if re.search(r"load", first, re.I) else "loading, or a dead engine"
        detail = "503 " + (first or "Service Unavailable") + f" ({why})"
        return "waiting", detail, run_.failure("loading", f"/health: {detail}", 503)
    if response.status in (502, 504):
        fact = run_.from_http(response, "/health")
        return "waiting", fact.detail, fact
    if response.status in (401, 403) or 300 <= response.status < 400 or response.status >= 500:
        fact = run_.from_http(response, "/health")
        return "fatal", fact.detail, fact
    health = response.status if 200 <= response.status < 300 else f"{response.status} (no /health endpoint)"

    per_try = max(0.05, min(10.0, run_.remaining()))
    try:
        response = client.request("GET", "/v1/models", timeout=per_try)
    except ClientError as exc:
        if exc.kind in (REFUSED, T_TIMEOUT, CLOSED):
            return "waiting", f"/v1/models: {exc.message}", run_.from_client_error(exc)
        return "fatal", exc.message, run_.from_client_error(exc)
    if response.status == 503 or response.status in (502, 504):
        fact = run_.from_http(response, "/v1/models")
        if response.status == 503:
            fact.value["error"] = "loading"
        return "waiting", fact.detail, fact
    if not 200 <= response.status < 300:
        fact = run_.from_http(response, "/v1/models")
        if response.status == 404:
            fact.value["error"] = "not_found"
            fact.detail = fact.value["message"] = (
                f"/v1/models: 404 Not Found: not an OpenAI-compatible server at {client.base_url} "
                "(wrong port or path prefix?)"
            )
        return "fatal", fact.detail, fact
    try:
        data = parse_json(response)
    except ClientError as exc:
        fact = run_.failure(exc.kind, f"/v1/models: {exc.message}", response.status)
        return "fatal", fact.detail, fact
    models = data.get("data") if isinstance(data, dict) else None
    if not isinstance(models, list):
        fact = run_.failure("bad_shape", "/v1/models: the answer has no \"data\" list of models", response.status)
        return "fatal", fact.detail, fact
    return "ready", "ready", {"health": health, "models": [m for m in models if isinstance(m, dict)]}


def _add_port_owner(run_: _Run, fact: Fact) -> None:
    """Who holds the port (or which server processes run) — only for a server on this machine."""
    if fact.value.get("error") not in (REFUSED, "html", PROTOCOL, "not_found", "invalid_json", "bad_shape", T_TIMEOUT, "loading"):
        return
    try:
        owners = port_owners(run_.client.host, run_.client.port)
    except Exception:  # psutil trouble must not cost the verdict
        owners = None
    if owners is None:
        return
    fact.value["port_owner"] = owners.get("listeners")
    if owners.get("servers"):
        fact.value["server_processes"] = owners["servers"]


def port_owners(host: str, port: int) -> Optional[Dict[str, Any]]:
    """Processes listening on ``port`` and inference-server processes on this machine.

    None when ``host`` is not this machine. Processes of other users show without a pid
    unless gpudoctor runs as root.
    """
    import ipaddress
    import socket

    import psutil

    local = {"localhost", "0.0.0.0", "::", ""}
    try:
        address = ipaddress.ip_address(host)
        is_local = address.is_loopback or address.is_unspecified
    except ValueError:
        is_local = host.lower() in local
        address = None
    if not is_local:
        try:
            mine = {a.address for addrs in psutil.net_if_addrs().values() for a in addrs if a.family in (socket.AF_INET, socket.AF_INET6)}
            is_local = host in mine
        except Exception:
            is_local = False
    if not is_local:
        return None
    listeners: List[Dict[str, Any]] = []
    try:
        for conn in psutil.net_connections(kind="tcp"):
            if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port:
                listeners.append(_process_info(conn.pid, f"{conn.laddr.ip}:{conn.laddr.port}"))
    except (psutil.Error, OSError):
        pass
    servers: List[Dict[str, Any]] = []
    for proc in psutil.process_iter(["pid", "name", "cmdline"]):
        try:
            cmd = " ".join(proc.info.get("cmdline") or []) or proc.info.get("name") or ""
            if SERVER_PROCESS.search(cmd) and proc.info["pid"] != os.getpid():
                servers.append(_process_info(proc.info["pid"], None))
        except (psutil.Error, OSError):
            continue
        if len(servers) >= 5:
            break
    return {"listeners": listeners, "servers": servers}


def _process_info(pid: Optional[int], address: Optional[str]) -> Dict[str, Any]:
    import psutil

    info: Dict[str, Any] = {"pid": pid}
    if address:
        info["address"] = address
    if pid:
        try:
            proc = psutil.Process(pid)
            info["name"] = proc.name()
            info["cmdline"] = " ".join(proc.cmdline())[:160]
        except (psutil.Error, OSError):
            pass
    return info


def choose_model(opts: Options, models: Optional[List[Dict[str, Any]]]) -> Tuple[Optional[str], Fact]:
    served = [str(m.get("id")) for m in models or [] if m.get("id") is not None]
    value: Dict[str, Any] = {"served": served, "requested": opts.model}
    if opts.model:
        value["chosen"] = opts.model
        value["listed"] = opts.model in served
    elif served:
        value["chosen"] = served[0]
    else:
        value["chosen"] = None
    for m in models or []:
        if m.get("id") == value["chosen"]:
            meta = m.get("meta") if isinstance(m.get("meta"), dict) else {}
            max_len = m.get("max_model_len") or meta.get("n_ctx")  # vLLM / llama.cpp
            if isinstance(max_len, int):
                value["max_model_len"] = max_len
    return value["chosen"], Fact(value, OK, SOURCE)


# --- 2. known answer ---------------------------------------------------------------------
def _message(data: Any, what: str, run_: _Run) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """choices[0] and its message, or a bad_shape failure."""
    choices = data.get("choices") if isinstance(data, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise StepError(run_.failure("bad_shape", f"{what}: the answer has no choices"))
    message = choices[0].get("message")
    if not isinstance(message, dict):
        raise StepError(run_.failure("bad_shape", f"{what}: choices[0] has no message"))
    return choices[0], message


def _reasoning(message: Dict[str, Any]) -> Tuple[Optional[str], str, List[str]]:
    """(field that carries reasoning text, the text, reasoning fields present at all)."""
    present = [name for name in ("reasoning", "reasoning_content") if name in message]
    for name in ("reasoning", "reasoning_content"):
        text = message.get(name)
        if isinstance(text, str) and text.strip():
            return name, text, present
    return None, "", present


def _usage(data: Any) -> Optional[Dict[str, Any]]:
    usage = data.get("usage") if isinstance(data, dict) else None
    if not isinstance(usage, dict):
        return None
    return {key: usage.get(key) for key in ("prompt_tokens", "completion_tokens", "total_tokens") if key in usage}


def known_answer(run_: _Run, model: Optional[str]) -> Fact:
    payload = _payload(model, KNOWN_QUESTION, temperature=0, max_tokens=run_.opts.max_tokens)
    t0 = time.perf_counter()
    data, _ = run_.post_json("/v1/chat/completions", payload, "known-answer request")
    elapsed = time.perf_counter() - t0
    run_.note_spec(data)
    choice, message = _message(data, "known-answer request", run_)
    content = message.get("content") if isinstance(message.get("content"), str) else ""
    field, reasoning, _ = _reasoning(message)
    pattern = re.compile(r"\b" + re.escape(KNOWN_ANSWER) + r"\b", re.I)
    answer_in = "content" if pattern.search(content) else ("reasoning" if pattern.search(reasoning) else None)
    judged = content if content.strip() else reasoning
    value = {
        "question": KNOWN_QUESTION,
        "expected": KNOWN_ANSWER,
        "correct": answer_in is not None,
        "answer_in": answer_in,
        "content": content[:300],
        "reasoning_chars": len(reasoning),
        "finish_reason": choice.get("finish_reason"),
        "degenerate": degenerate(judged),
        "usage": _usage(data),
        "elapsed_s": round(elapsed, 3),
    }
    return Fact(value, OK, SOURCE)


def _payload(model: Optional[str], prompt: str, **params: Any) -> Dict[str, Any]:
    payload: Dict[str, Any] = {"messages": [{"role": "user", "content": prompt}]}
    if model:
        payload["model"] = model
    payload.update(params)
    return payload


# --- 3. the origin-story request ---------------------------------------------------------
def chat(run_: _Run, model: Optional[str]) -> Fact:
    # A fixed seed (OpenAI's `seed`; vLLM and llama.cpp honour it) keeps the sampled answer,
    # and so the verdict, the same from run to run.
    payload = _payload(model, ORIGIN_PROMPT, temperature=0.6, top_p=0.95, seed=SEED, max_tokens=max(run_.opts.max_tokens, 64))
    t0 = time.perf_counter()
    data, _ = run_.post_json("/v1/chat/completions", payload, "chat request")
    elapsed = time.perf_counter() - t0
    run_.note_spec(data)
    choice, message = _message(data, "chat request", run_)
    content = message.get("content") if isinstance(message.get("content"), str) else ""
    field, reasoning, present = _reasoning(message)
    value = {
        "prompt": ORIGIN_PROMPT,
        "temperature": 0.6,
        "top_p": 0.95,
        "seed": SEED,
        "max_tokens": payload["max_tokens"],
        "content_chars": len(content),
        "content": content[:400],
        "has_code": "def " in content or "def " in reasoning,
        "reasoning_field": field,
        "reasoning_fields_present": present,
        "reasoning_chars": len(reasoning),
        "finish_reason": choice.get("finish_reason"),
        "usage": _usage(data),
        "degenerate": degenerate(content) if content.strip() else (degenerate(reasoning) if reasoning else "empty text"),
        "elapsed_s": round(elapsed, 3),
    }
    return Fact(value, OK, SOURCE)


# --- 4. streaming ------------------------------------------------------------------------
def percentile(values: List[float], q: float) -> Optional[float]:
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def _stream_once(run_: _Run, payload: Dict[str, Any], what: str) -> Dict[str, Any]:
    """Run one streamed request; return its measurements or raise StepError (with them)."""
    result = StreamResult()
    m: Dict[str, Any] = {"events": 0, "done": False}
    token_times: List[float] = []
    text: List[str] = []
    reasoning: List[str] = []
    tool_deltas = 0
    finish_reason = None
    usage = None
    timings = None
    server_metrics = None
    t0 = time.perf_counter()

    def finish() -> Dict[str, Any]:
        total = time.perf_counter() - t0
        m.update(events=result.events, done=result.done, bytes=result.bytes_read, finish_reason=finish_reason,
                 text_chunks=len(token_times), text="".join(text)[:300], reasoning_chars=len("".join(reasoning)),
                 tool_call_deltas=tool_deltas, usage=usage, total_s=round(total, 4))
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
        if timings or server_metrics:
            m["server_timings"] = _server_timings(timings, server_metrics, m)
        return m

    try:
        for event in run_.client.stream("/v1/chat/completions", payload, run_.timeout_left(), result):
            if event.data.strip() == "[DONE]":
                continue
            if result.done:
                continue
            try:
                chunk = json.loads(event.data)
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
                usage = _usage(chunk)
            if isinstance(chunk.get("timings"), dict):
                timings = chunk["timings"]
            if isinstance(chunk.get("metrics"), dict):
                server_metrics = chunk["metrics"]
            choices = chunk.get("choices") if isinstance(chunk.get("choices"), list) else []
            for choice in choices:
                if not isinstance(choice, dict):
                    continue
                delta = choice.get("delta") if isinstance(choice.get("delta"), dict) else {}
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
    run_.note_spec({"timings": timings, "metrics": server_metrics})  # the last chunk's counts cover the request
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
    elif isinstance(server_metrics, dict):  # vLLM --enable-per-request-metrics (anchors.md §1.17)
        out["source"] = "metrics"
        out["ttft_ms"] = _round(server_metrics.get("time_to_first_token_ms")) if isinstance(server_metrics.get("time_to_first_token_ms"), (int, float)) else None
        tps = server_metrics.get("tokens_per_second")
        out["decode_tokens_per_s"] = _round(tps) if isinstance(tps, (int, float)) else None
    if isinstance(out.get("ttft_ms"), (int, float)) and out["ttft_ms"] > 0 and isinstance(m.get("ttft_ms"), (int, float)):
        out["ttft_diff_pct"] = round((m["ttft_ms"] - out["ttft_ms"]) / out["ttft_ms"] * 100, 2)
    if isinstance(out.get("decode_tokens_per_s"), (int, float)) and out["decode_tokens_per_s"] > 0 and isinstance(m.get("decode_tokens_per_s"), (int, float)):
        out["tokens_per_s_diff_pct"] = round((m["decode_tokens_per_s"] - out["decode_tokens_per_s"]) / out["decode_tokens_per_s"] * 100, 2)
    return out


def stream(run_: _Run, model: Optional[str]) -> Fact:
    payload = _payload(model, STREAM_PROMPT, temperature=0, max_tokens=run_.opts.stream_tokens, stream=True,
                       stream_options={"include_usage": True})
    measured = _stream_once(run_, payload, "streamed request")
    measured["degenerate"] = degenerate(measured.get("text", "")) if measured.get("text", "").strip() else (
        None if measured.get("reasoning_chars") else "empty text")
    measured["max_tokens"] = run_.opts.stream_tokens
    return Fact(measured, OK, SOURCE)


# --- 5. concurrency ----------------------------------------------------------------------
def concurrency(run_: _Run, model: Optional[str]) -> Fact:
    run_.timeout_left()  # past the deadline: "not run", not "failed"
    n = max(1, run_.opts.concurrency)
    results: List[Any] = [None] * n

    def worker(index: int) -> None:
        payload = _payload(model, f"Count from {index + 1} to {index + 20}, separated by commas.", temperature=0,
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


# --- 6. tool call ------------------------------------------------------------------------
def tool_call(run_: _Run, model: Optional[str]) -> Fact:
    payload = _payload(model, TOOL_PROMPT, temperature=0, max_tokens=run_.opts.max_tokens, tools=[WEATHER_TOOL], tool_choice="auto")
    try:
        data, _ = run_.post_json("/v1/chat/completions", payload, "tool-call request")
    except StepError as exc:
        value = exc.fact.value if isinstance(exc.fact.value, dict) else {}
        message = str(value.get("message", ""))
        if value.get("error") in ("bad_request", "server_error", "not_found") and TOOLS_UNSUPPORTED.search(message):
            return Fact({"result": "not_supported", "message": message, "http_status": value.get("http_status")},
                        NOT_SUPPORTED, SOURCE, f"not supported by this server: {message}")
        raise
    run_.note_spec(data)
    choice, message = _message(data, "tool-call request", run_)
    content = message.get("content") if isinstance(message.get("content"), str) else ""
    calls = message.get("tool_calls")
    value: Dict[str, Any] = {"finish_reason": choice.get("finish_reason"), "content": content[:300]}
    if calls:
        value["tool_calls"] = len(calls) if isinstance(calls, list) else None
        problem = _tool_call_problem(calls)
        if problem:
            value.update(result="malformed", reason=problem)
        else:
            function = calls[0]["function"]
            value.update(result="tool_call", name=function["name"], arguments=json.loads(function["arguments"]),
                         id_present=bool(calls[0].get("id")))
    elif TOOL_MARKUP.search(content):
        value.update(result="unparsed_markup",
                     reason="the model wrote a tool call as text and the server did not parse it into tool_calls")
    else:
        value.update(result="no_tool_call", reason="the model answered without calling the tool")
    return Fact(value, OK, SOURCE)


def _tool_call_problem(calls: Any) -> Optional[str]:
    if not isinstance(calls, list) or not calls:
        return "tool_calls is not a non-empty list"
    first = calls[0]
    if not isinstance(first, dict):
        return "tool_calls[0] is not an object"
    if first.get("type", "function") != "function":
        return f"tool_calls[0].type is {first.get('type')!r}, not 'function'"
    function = first.get("function")
    if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not function.get("name"):
        return "tool_calls[0].function has no name"
    arguments = function.get("arguments")
    if not isinstance(arguments, str):
        return f"tool_calls[0].function.arguments is a {type(arguments).__name__}, not a JSON string"
    try:
        parsed = json.loads(arguments)
    except ValueError as exc:
        return f"tool_calls[0].function.arguments is not valid JSON ({exc}): {arguments[:80]!r}"
    if not isinstance(parsed, dict):
        return f"tool_calls[0].function.arguments is JSON but not an object: {arguments[:80]!r}"
    if function["name"] != "get_weather":
        return f"called {function['name']!r}, a function that was not offered"
    return None


# --- 7. speculative decoding -------------------------------------------------------------
def scrape_metrics(run_: _Run) -> Optional[Dict[str, Any]]:
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
    return {"counters": prom.spec_counters(samples), "legacy": prom.legacy_gauges(samples), "samples": len(samples), "bad_lines": bad}


def spec_fact(run_: _Run, before: Optional[Dict[str, Any]], after: Optional[Dict[str, Any]]) -> Fact:
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


# --- error bodies ------------------------------------------------------------------------
def error_message(response: Response) -> str:
    """The first useful line of an error body: JSON error.message / detail / message, the
    title of an HTML page, or the first line of text."""
    if not response.body.strip():
        return ""
    if response.looks_like_html():
        name = html_title(response.body)
        return f"an HTML page{f' ({name!r})' if name else ''}, not JSON"
    try:
        data = json.loads(response.body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        data = None
    if isinstance(data, dict):
        for key in ("error", "detail", "message"):
            item = data.get(key)
            if isinstance(item, dict):
                item = item.get("message") or item.get("detail") or json.dumps(item)[:200]
            if isinstance(item, list):
                item = json.dumps(item)[:200]
            if isinstance(item, str) and item.strip():
                return _first_line(item)
    text = response.text()
    return _first_line(text)


def _first_line(text: str) -> str:
    for line in text.strip().splitlines():
        if line.strip():
            return line.strip()[:300]
    return ""


# --- check --smoke without a URL -----------------------------------------------------------
def discover_url() -> Tuple[str, str]:
    """(URL, how it was chosen): an inference server listening on this machine, else the default."""
    found: List[Tuple[int, str, str]] = []
    try:
        import psutil

        for conn in psutil.net_connections(kind="tcp"):
            if conn.status != psutil.CONN_LISTEN or not conn.pid or not conn.laddr:
                continue
            try:
                cmd = " ".join(psutil.Process(conn.pid).cmdline())
            except (psutil.Error, OSError):
                continue
            if not SERVER_PROCESS.search(cmd) or conn.pid == os.getpid():
                continue
            ip = conn.laddr.ip
            host = "127.0.0.1" if ip in ("", "0.0.0.0", "127.0.0.1") else ("[::1]" if ip in ("::", "::1") else (f"[{ip}]" if ":" in ip else ip))
            found.append((0 if conn.laddr.port == 8000 else conn.laddr.port, f"http://{host}:{conn.laddr.port}",
                          f"pid {conn.pid} listening on port {conn.laddr.port}: {cmd[:100]}"))
    except Exception:  # discovery is a convenience; never a failure
        found = []
    if found:
        _, url, how = sorted(found)[0]
        return url, f"found {how}"
    return DEFAULT_URL, "the default (no inference server found listening on this machine)"
