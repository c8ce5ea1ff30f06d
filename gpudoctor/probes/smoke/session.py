"""One smoke run's shared state: options, the deadline, requests, and failures turned into facts.

Every step module (ready, answers, streaming, spec) works on a ``Run``; none of them raises
past it: a failed request becomes a ``StepError`` carrying the fact that says how.
"""


import json
import re
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

from gpudoctor import bounded  # JSON from a server: depth and number caps
from gpudoctor.probes.smoke.client import (
    TIMEOUT as T_TIMEOUT,
    Client,
    ClientError,
    Response,
    html_title,
    parse_json,
)
from gpudoctor.probes.smoke import DEFAULT_URL
from gpudoctor.snapshot import ERROR, NO_PERMISSION, TIMEOUT, Fact

SOURCE = "smoke"

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
    long: bool = False  # --long: one request near max_model_len
    long_timeout: float = 300.0


class StepError(Exception):
    """A step's request failed; ``fact`` says how."""

    def __init__(self, fact: Fact):
        super().__init__(fact.detail)
        self.fact = fact


class Run:
    def __init__(self, opts: Options, progress: Optional[Progress]):
        self.opts = opts
        self.progress = progress or (lambda kind, text: None)
        self.started = time.monotonic()
        self.deadline = self.started + opts.timeout
        self.client = Client(opts.url, opts.api_key)
        self.lock = threading.Lock()
        self.per_response = {"responses": 0, "draft_tokens": 0, "accepted_tokens": 0, "kind": None}
        self.engine: Optional[str] = None  # "sglang" when /v1/models says so (owned_by), for its request fields

    def engine_fields(self, payload: Dict[str, Any]) -> Dict[str, Any]:
        """What this engine needs added to a chat request. SGLang reports a request's speculative
        counts only when asked (ChatCompletionRequest.return_spec_tokens_details, answered in the
        response's ``sglext.spec_tokens_details``); other servers may refuse unknown fields."""
        if self.engine == "sglang":
            return dict(payload, return_spec_tokens_details=True)
        return payload

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
            response = self.client.request("POST", path, self.engine_fields(payload), timeout=self.timeout_left())
        except ClientError as exc:
            raise StepError(self.from_client_error(exc)) from None
        if not 200 <= response.status < 300:
            raise StepError(self.from_http(response, what))
        try:
            return parse_json(response), response
        except ClientError as exc:
            raise StepError(self.failure(exc.kind, f"{what}: {exc.message}", response.status)) from None

    def note_spec(self, body: Any) -> None:
        """Per-response draft counts: llama.cpp ``timings``, vLLM per-request ``metrics``, SGLang's
        ``sglext.spec_tokens_details`` (one object, or a list with ``n`` > 1:
        spec_num_proposed_drafts, spec_num_correct_drafts)."""
        if not isinstance(body, dict):
            return
        timings = body.get("timings")
        spec = (body.get("metrics") or {}).get("speculative_decoding") if isinstance(body.get("metrics"), dict) else None
        sglext = (body.get("sglext") or {}).get("spec_tokens_details") if isinstance(body.get("sglext"), dict) else None
        drafted = accepted = None
        kind = None
        if isinstance(timings, dict) and isinstance(timings.get("draft_n"), (int, float)):
            drafted, accepted, kind = timings.get("draft_n"), timings.get("draft_n_accepted", 0), "timings.draft_n"
        elif isinstance(spec, dict) and isinstance(spec.get("num_draft_tokens"), (int, float)):
            drafted, accepted, kind = spec.get("num_draft_tokens"), spec.get("num_accepted_draft_tokens", 0), "metrics.speculative_decoding"
        elif isinstance(sglext, (dict, list)):
            items = [d for d in (sglext if isinstance(sglext, list) else [sglext]) if isinstance(d, dict)]
            proposed = [d.get("spec_num_proposed_drafts") for d in items]
            if items and all(isinstance(n, (int, float)) and not isinstance(n, bool) for n in proposed):
                drafted = sum(proposed)
                accepted = sum(d.get("spec_num_correct_drafts") or 0 for d in items if isinstance(d.get("spec_num_correct_drafts") or 0, (int, float)))
                kind = "sglext.spec_tokens_details"
        if drafted is None:
            return
        with self.lock:
            self.per_response["responses"] += 1
            self.per_response["draft_tokens"] += int(drafted)
            self.per_response["accepted_tokens"] += int(accepted) if isinstance(accepted, (int, float)) else 0
            self.per_response["kind"] = kind



# --- answer shapes -------------------------------------------------------------------------
def first_message(data: Any, what: str, run_: Run) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """choices[0] and its message, or a bad_shape failure."""
    choices = data.get("choices") if isinstance(data, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise StepError(run_.failure("bad_shape", f"{what}: the answer has no choices"))
    message = choices[0].get("message")
    if not isinstance(message, dict):
        raise StepError(run_.failure("bad_shape", f"{what}: choices[0] has no message"))
    return choices[0], message


def reasoning_of(message: Dict[str, Any]) -> Tuple[Optional[str], str, List[str]]:
    """(field that carries reasoning text, the text, reasoning fields present at all)."""
    present = [name for name in ("reasoning", "reasoning_content") if name in message]
    for name in ("reasoning", "reasoning_content"):
        text = message.get(name)
        if isinstance(text, str) and text.strip():
            return name, text, present
    return None, "", present


def usage_of(data: Any) -> Optional[Dict[str, Any]]:
    usage = data.get("usage") if isinstance(data, dict) else None
    if not isinstance(usage, dict):
        return None
    return {key: usage.get(key) for key in ("prompt_tokens", "completion_tokens", "total_tokens") if key in usage}



def make_payload(model: Optional[str], prompt: str, **params: Any) -> Dict[str, Any]:
    payload: Dict[str, Any] = {"messages": [{"role": "user", "content": prompt}]}
    if model:
        payload["model"] = model
    payload.update(params)
    return payload



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
        data = bounded.loads(response.body.decode("utf-8"))
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

