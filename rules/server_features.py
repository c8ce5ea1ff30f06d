"""GD8xx: a running inference server's features — tool calls (plain and streamed), speculative
decoding, long context and the reasoning field.

Like rules/server.py (the basic request path, and the helpers both share), these rules judge the
``server.*`` facts written by the smoke probe; without them every rule here is "not applicable".
"""

from __future__ import annotations

import json
import shlex

from gpudoctor.rule import ERROR, INFO, WARNING, Fail, Fix, NotApplicable, Unknown, rule

from .server import _smoke, _step, not_checked, request_failure

# Below this acceptance rate, with at least MIN_DRAFT_TOKENS drafted, the drafter is loaded
# but useless: a wrong target_layer_ids list or wrong drafter weights load silently and
# collapse acceptance to ~0 (vLLM PR #40727), while working drafters accept tens of percent.
NEAR_ZERO_ACCEPTANCE = 0.05
MIN_DRAFT_TOKENS = 16
# With --expect-spec, a mean acceptance length below this (fewer than one accepted token per
# five drafts) means speculation barely pays for itself: working drafters reach 2-4 (vLLM docs, Speculative Decoding).
LOW_MEAN_ACCEPTANCE_LENGTH = 1.2


# --- GD807 -------------------------------------------------------------------------------
@rule("GD807", "tool-call-broken", severity=ERROR, area="server", applies=not_checked)
def tool_call_broken(snap):
    """A tool call did not come back as a well-formed `tool_calls` entry with JSON arguments.

    ## Why
    vLLM turns the model's tool-call text into `tool_calls` with the parser named by
    `--tool-call-parser` (with `--enable-auto-tool-choice`). The wrong parser for the model
    (e.g. `qwen3_xml` for Qwen3-Coder, whose parser is `qwen3_coder`) leaves the call as raw
    markup in `content`, or produces arguments that are not JSON, and agents break.
    A server that does not do tools at all (vLLM without `--enable-auto-tool-choice`,
    llama.cpp without `--jinja`) answers with an error: that is a skip, not a failure.

    ## Fix
    Start vLLM with `--enable-auto-tool-choice --tool-call-parser NAME` where NAME matches
    the model family (`vllm serve --help` lists the parsers of the installed version).

    ## References
    - OpenAI Chat Completions `tools` / `tool_calls`.
    - https://docs.vllm.ai/en/latest/features/tool_calling/
    - https://platform.openai.com/docs/api-reference/chat
    """
    fact, skip = _step(snap, "server.tool_call")
    if skip:
        return skip
    if fact.status == "not_supported":
        return NotApplicable(fact.detail)
    if not fact.ok:
        return request_failure(snap, "server.tool_call", fact, "tool-call request")
    value = fact.value or {}
    result = value.get("result")
    evidence = [("server.tool_call.result", result), ("server.tool_call.content", value.get("content"))]
    parser_fix = Fix("Use the tool-call parser that matches the model family.",
                     ["vllm serve MODEL --enable-auto-tool-choice --tool-call-parser NAME  # e.g. hermes, qwen3_coder, llama3_json, mistral"])
    if result == "malformed":
        return Fail(f"malformed tool call: {value.get('reason')}", evidence, parser_fix)
    if result == "unparsed_markup":
        return Fail("the model wrote a tool call but the server left it as text in content (wrong or missing --tool-call-parser)",
                    evidence, parser_fix)
    if result == "no_tool_call":
        return Fail("asked to call get_weather, the model answered in prose without a tool call", evidence,
                    Fix("A small model may just not call tools; with a capable model, check the chat template and the parser.",
                        ["vllm serve MODEL --enable-auto-tool-choice --tool-call-parser NAME --chat-template TEMPLATE.jinja"]),
                    severity=WARNING)
    return None


# --- GD808 -------------------------------------------------------------------------------
@rule("GD808", "spec-decode-not-accepted", severity=ERROR, area="server", applies=not_checked)
def spec_decode_not_accepted(snap):
    """Speculative decoding is configured but useless: drafts are rejected, or no drafts happen at all.

    ## Why
    The smoke check reads Prometheus `/metrics` before and after its requests and diffs
    the speculative-decoding counters (vLLM `vllm:spec_decode_num_drafts_total`,
    `…_num_draft_tokens_total`, `…_num_accepted_tokens_total`,
    `…_num_accepted_tokens_per_pos_total{position}`; llama.cpp the same names under
    `llamacpp:`), as `vllm bench serve` does. SGLang counts verify passes
    (`sglang:spec_verify_calls_total`, with `--enable-metrics`) and, asked with
    `return_spec_tokens_details`, each request's proposed and correct drafts
    (`sglext.spec_tokens_details`), which the smoke check sums. Acceptance rate = accepted / draft tokens,
    mean acceptance length = 1 + accepted / drafts. Drafts with near-zero acceptance (below
    5 % of at least 16 draft tokens; working drafters accept tens of percent) mean
    the drafter is loaded but useless: a DFlash/EAGLE drafter whose `target_layer_ids` do
    not match the target (they load without an error), drafter weights for another target
    model or revision, a vLLM without the aux-layer indexing fix. Every step then pays for
    drafting and gains nothing, slower than no speculation at all. No drafts at all while
    speculation is expected (`--expect-spec`) means the config did not take effect.

    ## Fix
    Check the drafter against the target: `dflash_config.target_layer_ids` (vLLM adds 1 to
    each since PR #40727), the drafter checkpoint made for this exact target model, the
    method in `--speculative-config`. With no drafts: check that `--speculative-config` was
    passed and accepted (server log: "SpecDecoding metrics").

    ## References
    - https://github.com/vllm-project/vllm/blob/main/docs/features/speculative_decoding/README.md
    - https://github.com/sgl-project/sglang/blob/main/python/sglang/srt/observability/metrics_collector.py
      and python/sglang/srt/entrypoints/openai/protocol.py (`SpecTokensDetails`)
    """
    fact, skip = _step(snap, "server.spec_decode")
    if skip:
        return skip
    value = fact.value if isinstance(fact.value, dict) else {}
    expected = bool(value.get("expected"))
    if not fact.ok:
        if expected:
            return Unknown(f"cannot tell whether drafts are accepted: {fact.detail}")
        return NotApplicable(fact.detail)
    drafted = value.get("draft_tokens")
    if drafted is None:  # SGLang's counters without its spec_num_draft_tokens gauge: verify passes only
        drafted = value.get("drafts") or 0
    sglang = (snap.value("server.models") or {}).get("engine") == "sglang" or value.get("scheme") == "sglang"
    evidence = [("server.spec_decode.drafts", value.get("drafts")), ("server.spec_decode.draft_tokens", drafted),
                ("server.spec_decode.accepted_tokens", value.get("accepted_tokens")),
                ("server.spec_decode.source", value.get("source"))]
    config_fix = Fix("Pass a speculative config and check the server log for it being applied.",
                     ["vllm serve MODEL --speculative-config '{\"method\": \"…\", \"model\": \"DRAFTER\", \"num_speculative_tokens\": 4}'"])
    if sglang:
        config_fix = Fix("Pass SGLang's speculative flags (and --enable-metrics for its counters) and check the server log.",
                         ["sglang serve --model-path MODEL --speculative-algorithm EAGLE --speculative-draft-model-path DRAFTER "
                          "--speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4 --enable-metrics"])
    if not value.get("counters") and not value.get("per_response"):
        if expected:
            return Fail("speculative decoding was expected but the server has no spec_decode counters at all "
                        + ("(SGLang counts verify passes, sglang:spec_verify_calls_total, only for speculative requests, and "
                           "reports them per request in sglext.spec_tokens_details)" if sglang
                           else "(vLLM registers them only when a speculative config is set)"), evidence, config_fix)
        return NotApplicable("speculative decoding is not configured (no spec_decode counters on /metrics)")
    if not drafted:
        if expected:
            return Fail("speculative decoding was expected but no tokens were drafted during the check", evidence, config_fix)
        return NotApplicable("no drafts during the check: speculative decoding is off (pass --expect-spec if it should be on)")
    rate = value.get("acceptance_rate")
    length = value.get("mean_acceptance_length")
    evidence = evidence + [("server.spec_decode.mean_acceptance_length", length),
                           ("server.spec_decode.per_position_acceptance", value.get("per_position_acceptance"))]
    if isinstance(rate, (int, float)) and rate < NEAR_ZERO_ACCEPTANCE and drafted >= MIN_DRAFT_TOKENS:
        return Fail(
            f"drafts happen but almost none are accepted: {rate:.1%} of {drafted} draft tokens "
            f"(mean acceptance length {length}): the drafter is loaded but useless", evidence, _spec_causes(snap))
    if expected and isinstance(length, (int, float)) and length < LOW_MEAN_ACCEPTANCE_LENGTH and drafted >= MIN_DRAFT_TOKENS:
        return Fail(f"mean acceptance length {length:.2f} is barely above 1 ({rate:.1%} of {drafted} draft tokens accepted): "
                    "speculation costs about as much as it saves", evidence, _spec_causes(snap), severity=WARNING)
    return None


def _spec_causes(snap) -> Fix:
    """The known causes of rejected drafts, with the advisories for the method the server runs."""
    from gpudoctor.knowledge.advisories import advisories_for

    launch = snap.value("server.launch") if isinstance(snap.value("server.launch"), dict) else {}
    raw = (launch.get("flags") or {}).get("speculative_config")
    try:
        config = json.loads(raw) if isinstance(raw, str) else {}
    except ValueError:
        config = {}
    method = str(config.get("method") or "") if isinstance(config, dict) else ""
    drafter = config.get("model") if isinstance(config, dict) and config.get("model") else "DRAFTER"
    causes = ["the drafter was trained for another target model or revision (check its config's base model)",
              "a DFlash/EAGLE drafter whose target_layer_ids do not match the target's layers (they load without an error)"]
    for result in advisories_for(method, snap) if method else []:
        if result.status != "fixed":
            adv = result.advisory
            causes.append(f"{adv.title} (vLLM PR #{adv.pr}; {result.status}: {result.reason})")
    summary = "Known causes" + (f" for `{method}`" if method else "") + ": " + "; ".join(causes) + "."
    return Fix(summary, [f"python -c \"import json,sys; c=json.load(open(sys.argv[1])); "
                         f"print(c.get('dflash_config', {{}}).get('target_layer_ids'), c.get('architectures'))\" {shlex.quote(str(drafter))}/config.json"])


# --- GD812 -------------------------------------------------------------------------------
@rule("GD812", "streamed-tool-call-broken", severity=ERROR, area="server", applies=not_checked)
def streamed_tool_call_broken(snap):
    """A streamed tool call is malformed: the deltas lack id/type/name, or the argument fragments do not join into JSON.

    ## Why
    Agents stream. vLLM's tool parsers run incrementally on a stream: the first delta of a
    call must carry `index`, `id`, `type: "function"` and `function.name`, and later deltas
    `function.arguments` fragments that join into one JSON object (OpenAI's streaming
    format). A parser can be right on whole text (GD807 passes) and still emit a stream
    that clients cannot assemble, or leave the call as text in `content` deltas.

    ## Fix
    Use the tool-call parser that matches the model family; upgrade vLLM when the parser's
    streaming path is fixed upstream (its release notes name "streaming" tool-parser fixes).

    ## References
    - OpenAI Chat Completions streaming: `choices[].delta.tool_calls[]` (`index`, `id`, `type`, `function`).
    - vLLM docs, Tool Calling: https://docs.vllm.ai/en/latest/features/tool_calling.html
    """
    fact, skip = _step(snap, "server.tool_stream")
    if skip:
        return skip
    if fact.status == "not_supported":
        return NotApplicable(fact.detail)
    if not fact.ok:
        return request_failure(snap, "server.tool_stream", fact, "streamed tool-call request")
    value = fact.value or {}
    result = value.get("result")
    evidence = [("server.tool_stream.result", result), ("server.tool_stream.deltas", value.get("deltas")),
                ("server.tool_stream.first_id", value.get("first_id")), ("server.tool_stream.first_name", value.get("first_name")),
                ("server.tool_stream.argument_fragments", value.get("argument_fragments"))]
    fix = Fix("Use the tool-call parser that matches the model family.",
              ["vllm serve MODEL --enable-auto-tool-choice --tool-call-parser NAME  # gpudoctor explain GD811 names NAME"])
    if result == "malformed":
        return Fail(f"malformed streamed tool call: {value.get('reason')}", evidence, fix)
    if result == "unparsed_markup":
        return Fail("the streamed tool call stayed as text in content deltas (wrong or missing --tool-call-parser)", evidence, fix)
    if result == "no_tool_call":  # nothing streamed to judge: a pass here read "✓ streamed tool call pass no_tool_call"
        return NotApplicable("the model answered in prose without calling the tool, so no streamed call to check (GD807 judges that)")
    return None


# --- GD813 -------------------------------------------------------------------------------
@rule("GD813", "long-context-fails", severity=ERROR, area="server")
def long_context_fails(snap):
    """A request near the served `max_model_len` (`gpudoctor smoke --long`) fails, times out, or loses the start of the prompt.

    ## Why
    Short requests prove little about the KV cache: a server can answer "hi" and still fail
    the first long document (too few KV blocks for `--max-model-len`, a prefill that runs
    out of memory or time, a proxy's body-size limit, a RoPE/YaRN setting that garbles the
    far context). The check fills about 90 % of `max_model_len` with filler lines, puts a
    code word in the first one and asks for it at the end.

    ## Fix
    A context-length error: lower `--max-model-len` to what fits, or raise
    `--gpu-memory-utilization`. A timeout: give `--long-timeout` more time, or check
    prefill throughput (`--max-num-batched-tokens`, chunked prefill). The code word lost:
    check the model's RoPE scaling (`--hf-overrides` / `rope_scaling`) for this length.

    ## References
    - vLLM docs, Engine arguments (`--max-model-len`, `--gpu-memory-utilization`): https://docs.vllm.ai/en/latest/configuration/engine_args.html

    ## Severity
    An error when the long request fails (an error, a timeout, a cut stream); a warning when it
    answers but lost the code word from the first line (the model's RoPE setting, not the
    server, may be at fault).
    """
    if "server.url" not in snap.facts or "server.long_context" not in snap.facts:
        return NotApplicable("not run (pass --long)")
    fact, skip = _step(snap, "server.long_context")
    if skip:
        return skip
    if fact.status == "not_supported":
        return NotApplicable(fact.detail)
    value = fact.value if isinstance(fact.value, dict) else {}
    evidence = [("server.long_context.max_model_len", value.get("max_model_len")),
                ("server.long_context.prompt_tokens_counted", value.get("prompt_tokens_counted")),
                ("server.long_context.deadline_s", value.get("deadline_s"))]
    if not fact.ok:
        return request_failure(snap, "server.long_context", fact, "long-context request")
    if not value.get("recalled"):
        return Fail(f"with {(value.get('usage') or {}).get('prompt_tokens')} prompt tokens the answer lost the code word "
                    f"from the first line: {str(value.get('content'))[:80]!r}", evidence,
                    Fix("Check the model's RoPE scaling for this context length; compare with a shorter --max-model-len.",
                        [_smoke(snap, "--long")]), severity=WARNING)
    return None


# --- GD809 -------------------------------------------------------------------------------
@rule("GD809", "reasoning-field-name", severity=INFO, area="server", applies=not_checked)
def reasoning_field_name(snap):
    """Which field carries the reasoning text: `reasoning` (current vLLM) or `reasoning_content` (older, DeepSeek style).

    ## Why
    vLLM added `reasoning` next to `reasoning_content` (PR #27752, ~Nov 2025) and then
    removed `reasoning_content` (PR #33402, merged 2026-01-30). A client written for one
    name reads an empty string from a server that sends the other: the thinking text is
    silently lost. Knowing which one this server sends tells which clients work.

    A server that sends `reasoning` (current vLLM) passes; one that sends only
    `reasoning_content` is reported as information, since clients written for current vLLM
    read nothing there.

    ## Fix
    Read `reasoning` and fall back to `reasoning_content` in clients; with vLLM, replace
    `reasoning_content` with `reasoning` ("To migrate, directly replace…", vLLM docs).

    ## References
    - https://docs.vllm.ai/en/v0.11.2/features/reasoning_outputs/
    """
    fact, skip = _step(snap, "server.chat")
    if skip:
        return skip
    if not fact.ok:
        return Unknown(f"the chat request failed: {fact.detail}")
    value = fact.value or {}
    field = value.get("reasoning_field")
    present = value.get("reasoning_fields_present") or []
    if not field:
        return NotApplicable("no reasoning text in the answer (not a reasoning model, or no --reasoning-parser)")
    evidence = [("server.chat.reasoning_field", field), ("server.chat.reasoning_fields_present", present)]
    if field == "reasoning":
        # Current vLLM's field: a correctly configured server, nothing to report (the smoke
        # table names the field).
        return None
    if field == "reasoning_content" and "reasoning" not in present:
        return Fail("the server sends reasoning in `reasoning_content` only (older vLLM / DeepSeek style): clients "
                    "written for current vLLM read `reasoning` and see no thinking text",
                    evidence, Fix("Read both names in clients, or upgrade the server.", ["grep -rn '\\.reasoning\\b' YOUR_CLIENT_CODE/"]))
    return None
