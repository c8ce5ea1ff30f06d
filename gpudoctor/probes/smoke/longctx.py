"""Optional step (``--long``): one request near the served ``max_model_len``.

The origin story never proved that the KV cache holds a long context. This step fills the
context to about ``LONG_FILL`` of ``max_model_len`` (as ``/v1/models`` reports it) with
numbered filler lines, puts one code word in the first line and asks for it at the end: the
answer shows the whole prompt was attended to, the request shows the server accepts and
prefills it. Token counts come from the server's own ``/tokenize`` (vLLM, llama.cpp) where
it has one, else from a cautious 3 characters per token. The step has its own deadline
(``--long-timeout``, inside the global one): a long prefill can take minutes on a slow GPU.
"""

from __future__ import annotations

import re
import time
from typing import Any, Dict, Optional

from gpudoctor.probes.smoke.client import ClientError
from gpudoctor.probes.smoke.session import SOURCE, Run, StepError, first_message, make_payload, reasoning_of, usage_of
from gpudoctor.snapshot import NOT_SUPPORTED, OK, TIMEOUT, Fact

LONG_FILL = 0.9  # of max_model_len, leaving room for the chat template and the answer
ANSWER_TOKENS = 64
CODE_WORD = "BLUEBERRY-7341"
LINE = "Line {i}: this is filler text for a long-context check; nothing in it matters.\n"
HEAD = f"Remember this code word: {CODE_WORD}.\n"
QUESTION = "\nWhat was the code word given on the first line? Answer with the code word only."


def _count(run_: Run, model: Optional[str], text: str) -> Optional[int]:
    """Tokens in ``text`` by the server's own /tokenize, or None when it has none."""
    body: Dict[str, Any] = {"prompt": text, "content": text}
    if model:
        body["model"] = model
    try:
        response = run_.client.request("POST", "/tokenize", body, timeout=min(30.0, max(0.1, run_.remaining())))
        if response.status != 200:
            return None
        from gpudoctor.probes.smoke.client import parse_json

        data = parse_json(response)
    except ClientError:
        return None
    if isinstance(data, dict):
        if isinstance(data.get("count"), int):
            return data["count"]
        if isinstance(data.get("tokens"), list):
            return len(data["tokens"])
    return None


def long_context(run_: Run, model: Optional[str], max_model_len: Optional[int]) -> Fact:
    if not isinstance(max_model_len, int) or max_model_len < 256:
        return Fact({"result": "not_supported"}, NOT_SUPPORTED, SOURCE,
                    "not run: the server does not report max_model_len in /v1/models")
    target = int(max_model_len * LONG_FILL) - ANSWER_TOKENS
    unit = _count(run_, model, LINE.format(i=1000) * 10)
    counted_by = "tokenize" if unit else "estimate"
    per_line = unit / 10 if unit else len(LINE.format(i=1000)) / 3.0
    lines = max(1, int((target - 40) / per_line))
    prompt = HEAD + "".join(LINE.format(i=i) for i in range(1, lines + 1)) + QUESTION
    prompt_tokens = _count(run_, model, prompt) if unit else None
    if prompt_tokens and prompt_tokens > target:  # trim once, to the measured rate
        lines = max(1, int(lines * target / prompt_tokens))
        prompt = HEAD + "".join(LINE.format(i=i) for i in range(1, lines + 1)) + QUESTION
        prompt_tokens = _count(run_, model, prompt)
    deadline = min(run_.remaining(), run_.opts.long_timeout)
    value: Dict[str, Any] = {"max_model_len": max_model_len, "target_tokens": target, "lines": lines,
                             "prompt_tokens_counted": prompt_tokens, "counted_by": counted_by,
                             "deadline_s": round(deadline, 1)}
    payload = make_payload(model, prompt, temperature=0, max_tokens=ANSWER_TOKENS)
    t0 = time.perf_counter()
    saved = run_.deadline
    run_.deadline = time.monotonic() + deadline  # the step's own deadline, never past the global one
    try:
        data, _ = run_.post_json("/v1/chat/completions", payload, "long-context request")
    except StepError as exc:
        fact = exc.fact
        if isinstance(fact.value, dict):
            fact.value.update(value)
        if fact.status == TIMEOUT:
            fact.detail = f"the long-context request ({prompt_tokens or '~' + str(target)} tokens) did not finish within {deadline:.0f} s"
        return fact
    finally:
        run_.deadline = saved
    elapsed = time.perf_counter() - t0
    choice, message = first_message(data, "long-context request", run_)
    content = message.get("content") if isinstance(message.get("content"), str) else ""
    _, reasoning, _ = reasoning_of(message)
    usage = usage_of(data) or {}
    found = bool(re.search(re.escape(CODE_WORD), content + reasoning))
    value.update(elapsed_s=round(elapsed, 3), usage=usage, finish_reason=choice.get("finish_reason"),
                 content=content[:200], recalled=found,
                 fill=round((usage.get("prompt_tokens") or 0) / max_model_len, 3) if usage.get("prompt_tokens") else None)
    return Fact(value, OK, SOURCE)
