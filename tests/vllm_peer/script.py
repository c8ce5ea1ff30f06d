"""What the scripted engine core answers: a Qwen3-style answer per prompt (stdlib only).

The answers carry what a real Qwen3 writes: a ``<think>…</think>`` block first, a hermes
``<tool_call>`` JSON block when tools were offered. The engine core tokenises them with the
model's own tokenizer, so everything the client sees went through vLLM's detokenizer and
parsers.
"""

from __future__ import annotations

import re

PRIME = (
    "<think>\nA prime has exactly two divisors, so test divisors up to the square root.\n</think>\n\n"
    "Here is the function:\n\n```python\ndef is_prime(n):\n    if n < 2:\n        return False\n"
    "    i = 2\n    while i * i <= n:\n        if n % i == 0:\n            return False\n        i += 1\n"
    "    return True\n```\n\nIt returns True for 2, 3, 5 and 7."
)
PARIS = "<think>\nThe user asks for the capital of France. That is Paris.\n</think>\n\nParis"
WEATHER = (
    "<think>\nThe user wants the weather in Paris, so call the tool.\n</think>\n\n"
    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"
)
LONG = "<think>\nThe text is long; summarise it in a word.\n</think>\n\nNumbers."
HELLO = "<think>\nA greeting.\n</think>\n\nHello! How can I help you today?"


def numbers(start: int, stop: int) -> str:
    return "<think>\nContinue the list.\n</think>\n\n" + ", ".join(str(i) for i in range(start, stop + 1))


def answer(prompt: str, tools: bool, scenario: dict) -> str:
    """The scripted answer for the decoded prompt text."""
    word = re.search(r"code word: ([A-Z0-9-]+)", prompt)
    if word and "code word given" in prompt:  # gpudoctor smoke --long: the word from the first line
        return "<think>\nThe first line gave it.\n</think>\n\n" + word.group(1)
    if tools and "weather" in prompt.lower():
        return WEATHER
    if "number is prime" in prompt or "is prime" in prompt:
        return PARIS if scenario.get("wrong_answer") else PRIME
    if "capital of France" in prompt:
        return PARIS
    match = re.search(r"Count from (\d+) to (\d+)", prompt)
    if match:
        return numbers(int(match.group(1)), int(match.group(2)))
    match = re.search(r"(\d+),\s*$", prompt.split("<|im_end|>")[0].rstrip())
    if "Continue this list" in prompt:
        last = int(match.group(1)) if match else 40
        return numbers(last + 1, 100)
    if len(prompt) > 4000:
        return LONG
    return HELLO


def corpus() -> str:
    """Text the peer's tokenizer is trained on: the answers and the prompts' words."""
    parts = [PRIME, PARIS, WEATHER, LONG, HELLO, numbers(1, 120),
             "What is the capital of France? Answer with one word. Write a Python function that checks "
             "if a number is prime. Call the get_weather tool. city name weather system user assistant "
             "tools function arguments description parameters properties required type object string "
             "You may call one or more functions to assist with the user query."]
    return "\n".join(parts)
