"""GD721: the tool-call and reasoning parsers the command names exist in the installed vLLM."""

from __future__ import annotations

import difflib

from gpudoctor.rule import ERROR, WARNING, Fail, Fix, NotApplicable, Unknown, rule
from .common import _applies, _args, _command_with, _vllm_version

@rule("GD721", "parser-unknown", severity=ERROR, area="launch", applies=_applies)
def parser_unknown(snap):
    """`--tool-call-parser` / `--reasoning-parser` names a parser the installed vLLM does not have.

    ## Why
    Parsers are registered by name in vLLM's source and arrive release by release:
    `qwen3_coder` came with PR #21396 (July 2025), many others later. An unknown reasoning
    parser is an argparse error (`invalid choice`) in versions that list them as choices, a
    KeyError at startup in others; an unknown tool-call parser fails when the server starts
    serving ("invalid tool call parser"). `--enable-auto-tool-choice` without
    `--tool-call-parser` is refused outright ("--enable-auto-tool-choice requires
    --tool-call-parser"). A name registered by a plugin (`--tool-parser-plugin`,
    `--reasoning-parser-plugin`) cannot be checked statically.

    ## Fix
    Use a parser this vLLM has (the list is shown; for Qwen3-Coder / Qwen3.5 tool calls
    `qwen3_coder`, not `qwen3_xml`), or upgrade vLLM.

    ## References
    - vllm/entrypoints/openai/cli_args.py `validate_parsed_serve_args`.
    - https://docs.vllm.ai/en/latest/features/tool_calling/
    - https://docs.vllm.ai/en/v0.11.2/features/reasoning_outputs/
    """
    args = _args(snap)
    tool, reasoning = args.get("--tool-call-parser"), args.get("--reasoning-parser")
    if isinstance(reasoning, str) and reasoning.lower() == "none":
        reasoning = None  # vLLM maps `none` to no reasoning parser (parse_reasoning_parser, 0.33)
    fails = []
    if args.get("--enable-auto-tool-choice") is True and not tool:
        fails.append(Fail("--enable-auto-tool-choice without --tool-call-parser: vLLM refuses (\"--enable-auto-tool-choice requires "
                          "--tool-call-parser\")", [("launch.args.--enable-auto-tool-choice", True)],
                          Fix("Name the parser for the model.", [_command_with(snap, "--tool-call-parser", "PARSER")]),
                          subject="--enable-auto-tool-choice"))
    if not tool and not reasoning:
        return fails or NotApplicable("no parser named")
    unknown_reason = None
    for flag, name, fact_path, plugin_flag in (("--tool-call-parser", tool, "launch.vllm.tool_parsers", "--tool-parser-plugin"),
                                               ("--reasoning-parser", reasoning, "launch.vllm.reasoning_parsers", "--reasoning-parser-plugin")):
        if not isinstance(name, str) or not name:
            continue
        fact = snap.get(fact_path)
        if not fact.ok:
            unknown_reason = f"cannot check {flag}: {fact.detail}"
            continue
        names = (fact.value or {}).get("names") or []
        if name in names:
            continue
        plugin = args.get(plugin_flag)
        # A typo (qwen3_coderr) gets "did you mean qwen3_coder", not "a vLLM that has qwen3_coderr".
        meant = difflib.get_close_matches(name, names, n=1, cutoff=0.8)
        close = [n for n in names if n.startswith(name.split("_")[0])][:6]
        hint = f"; did you mean {meant[0]}?" if meant else f" (similar: {', '.join(close)})" if close else ""
        fix = (Fix(f"Did you mean {meant[0]}? {flag} {meant[0]} is registered in this vLLM.", [_command_with(snap, flag, meant[0])])
               if meant else Fix(f"Use a parser this vLLM has, or a vLLM that has {name}."))
        fails.append(Fail(
            f"{flag} {name}: {_vllm_version(snap)} has no such parser{hint}"
            + (f"; it may come from {plugin_flag} {plugin}, which gpudoctor cannot read" if plugin else ""),
            [(f"launch.args.{flag}", name), (fact_path, f"{len(names)} registered: {', '.join(names)}"[:400]), "launch.vllm"],
            fix,
            subject=flag,
            # vLLM looks the tool-call parser up only with --enable-auto-tool-choice; without it
            # the name is ignored (api_server: `if args.enable_auto_tool_choice: … get_tool_parser`).
            severity=WARNING if plugin or (flag == "--tool-call-parser" and args.get("--enable-auto-tool-choice") is not True)
            else ERROR,
        ))
    if not fails and unknown_reason:
        return Unknown(unknown_reason)
    return fails
