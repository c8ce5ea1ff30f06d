"""GD810–GD811: a running vLLM server whose parsers are not set up for its model.

The answers show the symptom (raw ``<think>`` markup in ``content``, a ``tool_choice`` request
refused); the server's launch flags (``server.launch``, a server on this machine) and the
parser names its own vLLM registers (``server.parsers``) name the fix. Which parser fits
which model comes from those registry names, matched against the served model's name —
never from a list in gpudoctor.
"""

from __future__ import annotations

import re
import shlex
from typing import Any, Dict, List, Optional, Tuple

from gpudoctor.rule import WARNING, Fail, Fix, NotApplicable, Unknown, rule

# A parser-name suffix that says "the plain format" rather than a model variant: among
# several parsers of one family (qwen3_json, qwen3_xml, qwen3_coder) it is the default.
FORMAT_WORDS = ("json",)


def _server_checked(snap) -> Optional[NotApplicable]:
    """These rules' precondition (``applies=``): the smoke check ran."""
    return None if "server.url" in snap.facts else NotApplicable("no server was checked")


def _norm(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def family_parser(model: Optional[str], names: Optional[List[str]]) -> Tuple[Optional[str], List[str]]:
    """(the registry name that matches ``model``'s family, every name of that family).

    A name matches when its first ``_``-segment starts the model's base name (``qwen3`` for
    ``Qwen/Qwen3-8B``, ``deepseek_r1`` for ``DeepSeek-R1-Distill-Qwen-7B``) — longest first;
    names all of whose segments occur in the model name (``qwen3_coder`` for
    ``Qwen3-Coder-30B``) beat partial ones; a tie among partial ones goes to the plain-format
    name (``…_json``), else to none (the candidates are listed instead).
    """
    if not model or not names:
        return None, []
    base = _norm(model.rstrip("/").split("/")[-1])
    scored = []
    for name in names:
        parts = [_norm(p) for p in re.split(r"[_-]", name) if _norm(p)]
        if not parts or not base.startswith(parts[0]):
            continue
        # deepseek_r1 is one family word split by "_": match the joined name first.
        full = base.startswith(_norm(name)) or all(p in base for p in parts)
        scored.append((full, len(_norm(name)), name))
    if not scored:
        return None, []
    family = sorted(name for _, _, name in scored)
    full = sorted((s for s in scored if s[0]), key=lambda s: -s[1])
    if full:
        return full[0][2], family
    plain = [name for _, _, name in scored if name.split("_")[-1] in FORMAT_WORDS]
    return (plain[0] if len(plain) == 1 else None), family


def _flags(snap) -> Dict[str, Any]:
    fact = snap.get("server.launch")
    value = fact.value if fact.ok and isinstance(fact.value, dict) else {}
    return value.get("flags") or {}


def _model(snap) -> Optional[str]:
    flags = _flags(snap)
    chosen = (snap.value("server.models") or {}).get("chosen") if isinstance(snap.value("server.models"), dict) else None
    return flags.get("served_model_name") or chosen or flags.get("model")


def _registry(snap, kind: str) -> Optional[List[str]]:
    fact = snap.get("server.parsers")
    return (fact.value or {}).get(kind) if fact.ok and isinstance(fact.value, dict) else None


def _serve(snap, *flags: str) -> str:
    model = _flags(snap).get("model") or _model(snap) or "MODEL"
    return " ".join(["vllm serve", shlex.quote(str(model)), *flags])


def _name_or_placeholder(snap, kind: str) -> Tuple[str, str]:
    """(parser name for the command, a note on where it came from)."""
    names = _registry(snap, kind)
    best, family = family_parser(_model(snap), names)
    if best:
        return best, f"`{best}` is the {kind} parser of the installed vLLM that matches {_model(snap)}"
    if family:
        return family[0], f"the installed vLLM's {kind} parsers for this model family: {', '.join(family)}"
    if names:
        return "NAME", f"none of the installed vLLM's {len(names)} {kind} parsers is named after {_model(snap)}; pick the one for its family"
    return "NAME", f"the {kind} parser for this model family (`vllm serve --help` lists them)"


@rule("GD810", "reasoning-parser-missing", severity=WARNING, area="server", applies=_server_checked)
def reasoning_parser_missing(snap):
    """A reasoning model's thinking arrives as raw `<think>…</think>` in `content`: no (or the wrong) `--reasoning-parser`.

    ## Why
    Reasoning models (Qwen3, QwQ, DeepSeek-R1 and most open ones) write their thinking
    between `<think>` and `</think>`. vLLM moves it into the message's `reasoning` field only
    when started with `--reasoning-parser NAME` for that model family; without it the
    thinking lands in `content`, `reasoning` is absent, and every client shows the model's
    private monologue as the answer (or finds "no reasoning" at all). With a parser for
    another family the markup stays in `content`, or the whole answer disappears into
    `reasoning`. Which name fits is read from the parser registry of the server's own vLLM
    (`vllm/reasoning/__init__.py`) matched against the served model's name.

    ## Fix
    Restart the server with `--reasoning-parser NAME` (the name in the finding).

    ## References
    - vLLM docs, Reasoning Outputs: https://docs.vllm.ai/en/latest/features/reasoning_outputs.html
    - vLLM source: `_REASONING_PARSERS_TO_REGISTER` in `vllm/reasoning/__init__.py`.
    """
    chat = snap.get("server.chat")
    known = snap.get("server.known_answer")
    steps = [f for f in (chat, known) if f.ok and isinstance(f.value, dict)]
    if not steps:
        return Unknown(chat.detail or "the chat request did not run")
    tags = any(f.value.get("think_tags_in_content") for f in steps)
    swallowed = chat.ok and isinstance(chat.value, dict) and chat.value.get("reasoning_has_answer") \
        and chat.value.get("finish_reason") == "stop" and not chat.value.get("content_chars")
    flags = _flags(snap)
    given = flags.get("reasoning_parser")
    name, why = _name_or_placeholder(snap, "reasoning")
    evidence = [("server.chat.think_tags_in_content", bool(chat.ok and chat.value.get("think_tags_in_content"))),
                ("server.chat.reasoning_field", chat.value.get("reasoning_field") if chat.ok else None),
                ("server.launch.flags.reasoning_parser", given), ("server.models.chosen", _model(snap))]
    fix = Fix(f"Restart the server with `--reasoning-parser {name}` ({why}).",
              [_serve(snap, "--reasoning-parser", name)])
    if tags and not given and not any(f.value.get("reasoning_chars") for f in steps):
        where = "" if flags else " (and no `reasoning` field)"
        return Fail(f"raw <think>…</think> markup in the answer's content{where}: the reasoning model is served "
                    f"without --reasoning-parser", evidence, fix)
    if tags:
        return Fail(f"<think> markup is left in content although the server parses reasoning"
                    f"{f' with `{given}`' if given else ''}: the parser does not fit this model", evidence, fix)
    if swallowed:
        return Fail("the whole answer came back in `reasoning` and content is empty: the reasoning parser"
                    f"{f' `{given}`' if given else ''} does not fit this model", evidence, fix)
    return None


@rule("GD811", "tool-choice-not-enabled", severity=WARNING, area="server", applies=_server_checked)
def tool_choice_not_enabled(snap):
    """vLLM refuses `tool_choice: "auto"` because it was started without `--enable-auto-tool-choice`.

    ## Why
    vLLM answers a chat request with tools and `tool_choice: "auto"` with HTTP 400
    ("\"auto\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be
    set") unless the server was started with both flags. Agents and OpenAI-style clients
    send exactly that request, so every tool call fails although chat works.

    ## Fix
    Restart with `--enable-auto-tool-choice --tool-call-parser NAME`, NAME the tool parser
    of the installed vLLM for this model family (read from its registry).

    ## References
    - vLLM docs, Tool Calling: https://docs.vllm.ai/en/latest/features/tool_calling.html
    - vLLM source: `_TOOL_PARSERS_TO_REGISTER` in `vllm/tool_parsers/__init__.py`.
    """
    fact = snap.get("server.tool_call")
    value = fact.value if isinstance(fact.value, dict) else {}
    message = str(value.get("message") or "")
    if fact.status != "not_supported" or "enable-auto-tool-choice" not in message:
        return None if fact.ok or fact.status == "not_supported" else Unknown(fact.detail or "the tool-call request did not run")
    given = _flags(snap).get("tool_call_parser")
    name, why = (given, "the parser already on the command line") if given else _name_or_placeholder(snap, "tool")
    return Fail(
        f"the server refuses tool_choice \"auto\" (HTTP {value.get('http_status')}): started without "
        f"--enable-auto-tool-choice{'' if given else ' and --tool-call-parser'}",
        [("server.tool_call.message", message[:200]), ("server.launch.flags.tool_call_parser", given),
         ("server.models.chosen", _model(snap))],
        Fix(f"Restart the server with `--enable-auto-tool-choice --tool-call-parser {name}` ({why}).",
            [_serve(snap, "--enable-auto-tool-choice", "--tool-call-parser", name)]),
    )
