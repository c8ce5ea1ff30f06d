"""Does the chat answer answer? Find the prime-checking function in it and run it.

The origin story's check was not "the server said something" but "the answer is a correct
function". So: take the code (a fenced block, else the whole text, with any
``<think>…</think>`` block removed), parse it with ``ast``, find the ``def``, and call it on
a few numbers in a child interpreter (``-I``, a CPU and memory limit, a wall-clock timeout,
no builtins that reach files, processes or the network). Code that imports anything but
``math``, or names such builtins, is not run: the verdict says why.
"""

from __future__ import annotations

import ast
import json
import re
import sys
from typing import Any, Dict, List, Optional

from gpudoctor import runner

NUMBERS = [0, 1, 2, 3, 4, 5, 9, 11, 15, 17, 25, 29, 91, 97, 100]
TIMEOUT_S = 5.0
MAX_CODE_CHARS = 8000
THINK = re.compile(r"<think>.*?</think>|^.*?</think>", re.S)
FENCE = re.compile(r"```[ \t]*(?:python|py|python3)?[ \t]*\n(.*?)```", re.S | re.I)
SAFE_IMPORTS = {"math"}
# Names that reach outside the function (files, processes, interpreter internals).
UNSAFE_NAMES = {"open", "exec", "eval", "compile", "__import__", "globals", "locals", "vars", "getattr", "setattr",
                "delattr", "input", "breakpoint", "help", "exit", "quit", "memoryview", "os", "sys", "subprocess"}

# Runs in the child: limits first, then the definitions with a small set of builtins.
CHILD = r"""
import json, math, resource, sys
resource.setrlimit(resource.RLIMIT_CPU, (3, 3))
resource.setrlimit(resource.RLIMIT_AS, (512 << 20, 512 << 20))
req = json.loads(sys.stdin.read())
names = ["abs", "all", "any", "bool", "divmod", "enumerate", "float", "int", "isinstance", "len", "list", "max",
         "min", "pow", "range", "reversed", "round", "set", "sorted", "sum", "tuple", "zip", "ValueError",
         "TypeError", "ZeroDivisionError", "Exception", "True", "False", "None"]
import builtins
env = {"__builtins__": {n: getattr(builtins, n) for n in names if hasattr(builtins, n)}, "math": math}
exec(compile(req["code"], "<answer>", "exec"), env)
fn = env[req["name"]]
out = []
for n in req["numbers"]:
    try:
        out.append([n, fn(n)])
    except Exception as exc:
        out.append([n, "raised " + type(exc).__name__])
sys.stdout.write(json.dumps(out, default=repr))
"""


def is_prime(n: int) -> bool:
    return n >= 2 and all(n % d for d in range(2, int(n ** 0.5) + 1))


def extract_code(text: str) -> str:
    text = THINK.sub("", text or "")
    blocks = FENCE.findall(text)
    return "\n\n".join(blocks) if blocks else text


def _definitions(code: str) -> Optional[ast.Module]:
    """Only the top-level defs and ``import math`` of the code (the calls and prints around
    them are dropped: they are examples, not the answer)."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return None
    keep = [node for node in tree.body if isinstance(node, (ast.FunctionDef, ast.Import, ast.ImportFrom))]
    return ast.Module(body=keep, type_ignores=[])


def _refusal(tree: ast.Module) -> Optional[str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] not in SAFE_IMPORTS for a in node.names):
            return f"imports {', '.join(a.name for a in node.names)}"
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] not in SAFE_IMPORTS:
            return f"imports from {node.module}"
        if isinstance(node, ast.Name) and node.id in UNSAFE_NAMES:
            return f"uses {node.id}"
        if isinstance(node, ast.Attribute) and node.attr.startswith("__"):
            return f"uses .{node.attr}"
    return None


def _choose(tree: ast.Module) -> Optional[ast.FunctionDef]:
    defs = [n for n in tree.body if isinstance(n, ast.FunctionDef) and (n.args.args or n.args.posonlyargs)]
    named = [n for n in defs if "prime" in n.name.lower()]
    return (named or defs or [None])[0]


def check_prime_answer(text: str, cut: bool = False, python: str = sys.executable) -> Dict[str, Any]:
    """{"verdict": correct | wrong | no_code | no_function | syntax_error | truncated | refused | not_run, …}.

    ``cut``: the answer stopped at max_tokens (finish_reason "length"), so code that does not
    parse is unfinished rather than wrong."""
    code = extract_code(text)[:MAX_CODE_CHARS]
    if cut and text.count("```") % 2:  # an open fence: the function was still being written
        code = text[text.rindex("```"):].split("\n", 1)[-1] if "\n" in text[text.rindex("```"):] else ""
    if "def " not in code:
        if cut:
            return {"verdict": "truncated", "reason": "not run: the answer stopped at max_tokens before any function"}
        return {"verdict": "no_code", "reason": "the answer has no Python function (no `def`)"}
    tree = _definitions(code)
    if tree is None:
        if cut:
            return {"verdict": "truncated", "reason": "not run: the answer stopped at max_tokens inside the function"}
        return {"verdict": "syntax_error", "reason": "the code in the answer does not parse as Python"}
    fn = _choose(tree)
    if fn is None:
        return {"verdict": "no_function", "reason": "no function that takes an argument"}
    refused = _refusal(tree)
    if refused:
        return {"verdict": "refused", "function": fn.name, "reason": f"not run: the code {refused}"}
    request = json.dumps({"code": ast.unparse(tree), "name": fn.name, "numbers": NUMBERS})
    # gpudoctor.runner: its own process group (a fork in the answer dies with it), output capped (a
    # print loop cannot flood us), killed at the deadline.
    done = runner.run([python, "-I", "-S", "-c", CHILD], timeout=TIMEOUT_S, env={}, stdin=request.encode("utf-8"),
                      max_output=1 << 20)
    if done.status == "timeout":
        return {"verdict": "wrong", "function": fn.name, "reason": f"did not return within {TIMEOUT_S:g} s (an endless loop?)"}
    if done.status in ("absent",) or done.returncode is None and done.status == "error" and "cannot run" in done.detail:
        return {"verdict": "not_run", "function": fn.name, "reason": f"could not start a child interpreter: {done.detail}"}
    if done.status == "error" and done.returncode is None:  # stopped: it printed more than 1 MiB
        return {"verdict": "wrong", "function": fn.name, "reason": done.detail}
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["exit status %d" % done.returncode])[-1][:200]
        return {"verdict": "wrong", "function": fn.name, "reason": f"defining or calling it failed: {last}"}
    try:
        results = json.loads(done.stdout[:20000])
    except ValueError:
        return {"verdict": "not_run", "function": fn.name, "reason": "the child's output was not readable"}
    wrong: List[List[Any]] = [[n, got, is_prime(n)] for n, got in results if got is not is_prime(n) and got != is_prime(n)]
    verdict = "wrong" if wrong else "correct"
    return {"verdict": verdict, "function": fn.name, "tested": len(results), "wrong": wrong[:5],
            "reason": f"{fn.name}() is right on all {len(results)} numbers" if not wrong else
            f"{fn.name}() is wrong on {len(wrong)} of {len(results)} numbers, e.g. {fn.name}({wrong[0][0]}) = {wrong[0][1]!r}"}
