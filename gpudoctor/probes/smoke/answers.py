"""Steps 2, 3 and 6: the known answer, the origin-story chat request, the (non-streamed) tool call."""


import re
import time
from typing import Any, Dict, Optional

from gpudoctor import bounded  # JSON from a server: depth and number caps
from gpudoctor.probes.smoke.text import degenerate
from gpudoctor.snapshot import NOT_SUPPORTED, OK, Fact
from gpudoctor.probes.smoke.codecheck import check_prime_answer
from gpudoctor.probes.smoke.session import SOURCE, Run, StepError, first_message, make_payload, reasoning_of, usage_of

SEED = 20260425
KNOWN_QUESTION = "What is the capital of France? Answer with one word."
KNOWN_ANSWER = "Paris"
ORIGIN_PROMPT = "Write a Python function that checks if a number is prime."
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
# Raw thinking markup left in content: a reasoning model served without (or with the wrong)
# --reasoning-parser (Qwen3, DeepSeek-R1, QwQ and most open reasoning models use these tags).
THINK_TAG = re.compile(r"</?think>")
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


def known_answer(run_: Run, model: Optional[str]) -> Fact:
    payload = make_payload(model, KNOWN_QUESTION, temperature=0, max_tokens=run_.opts.max_tokens)
    t0 = time.perf_counter()
    data, _ = run_.post_json("/v1/chat/completions", payload, "known-answer request")
    elapsed = time.perf_counter() - t0
    run_.note_spec(data)
    choice, message = first_message(data, "known-answer request", run_)
    content = message.get("content") if isinstance(message.get("content"), str) else ""
    field, reasoning, _ = reasoning_of(message)
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
        "think_tags_in_content": bool(THINK_TAG.search(content)),
        "finish_reason": choice.get("finish_reason"),
        "degenerate": degenerate(judged),
        "usage": usage_of(data),
        "elapsed_s": round(elapsed, 3),
    }
    return Fact(value, OK, SOURCE)



def chat(run_: Run, model: Optional[str]) -> Fact:
    # A fixed seed (OpenAI's `seed`; vLLM and llama.cpp honour it) keeps the sampled answer,
    # and so the verdict, the same from run to run.
    payload = make_payload(model, ORIGIN_PROMPT, temperature=0.6, top_p=0.95, seed=SEED, max_tokens=max(run_.opts.max_tokens, 64))
    t0 = time.perf_counter()
    data, _ = run_.post_json("/v1/chat/completions", payload, "chat request")
    elapsed = time.perf_counter() - t0
    run_.note_spec(data)
    choice, message = first_message(data, "chat request", run_)
    content = message.get("content") if isinstance(message.get("content"), str) else ""
    field, reasoning, present = reasoning_of(message)
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
        "think_tags_in_content": bool(THINK_TAG.search(content)),
        "reasoning_has_answer": "def " in reasoning and "def " not in content,
        "finish_reason": choice.get("finish_reason"),
        "usage": usage_of(data),
        "degenerate": degenerate(content) if content.strip() else (degenerate(reasoning) if reasoning else "empty text"),
        "elapsed_s": round(elapsed, 3),
    }
    # The answer is judged on content; a reasoning model cut off by max_tokens may have its
    # only code in the reasoning, which is checked then (and said so).
    judged_text = content if "def " in content or "def " not in reasoning else reasoning
    value["answer_check"] = check_prime_answer(judged_text, cut=choice.get("finish_reason") == "length")
    value["answer_check"]["checked"] = "content" if judged_text is content else "reasoning"
    return Fact(value, OK, SOURCE)


def tool_call(run_: Run, model: Optional[str]) -> Fact:
    payload = make_payload(model, TOOL_PROMPT, temperature=0, max_tokens=run_.opts.max_tokens, tools=[WEATHER_TOOL], tool_choice="auto")
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
    choice, message = first_message(data, "tool-call request", run_)
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
            value.update(result="tool_call", name=function["name"], arguments=bounded.loads(function["arguments"]),
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
        parsed = bounded.loads(arguments)
    except ValueError as exc:
        return f"tool_calls[0].function.arguments is not valid JSON ({exc}): {arguments[:80]!r}"
    if not isinstance(parsed, dict):
        return f"tool_calls[0].function.arguments is JSON but not an object: {arguments[:80]!r}"
    if function["name"] != "get_weather":
        return f"called {function['name']!r}, a function that was not offered"
    return None

