"""The smoke probe: talk to a running OpenAI-compatible server and record what it does.

Steps (each one fact under ``server.``; rules/server.py judges them):

1. ``server.ready``  poll ``/health`` then ``/v1/models`` until ready or the deadline; a
   server that answers 503 ("Loading model") or refuses connections while it starts is
   "not ready yet"; ``server.models`` the served models and the
   one chosen.
2. ``server.known_answer``  a question with one exact answer at temperature 0.
3. ``server.chat``  the origin-story request: a short Python function at temperature 0.6,
   top_p 0.95: content, the reasoning field the server uses (``reasoning`` or
   ``reasoning_content``, vLLM PR #27752 / #33402), finish_reason, usage.
4. ``server.stream``  SSE well-formed and ending in ``[DONE]``; TTFT, inter-token latency
   p50/p95, tokens/s, usage from ``stream_options.include_usage``; compared with the
   server's own ``timings`` when it sends them (llama.cpp).
5. ``server.concurrency``  N parallel streams; aggregate tokens/s.
6. ``server.tool_call``  one function tool, ``tool_choice: auto`` (the path that goes
   through vLLM's ``--tool-call-parser``, https://docs.vllm.ai/en/latest/features/tool_calling/).
7. ``server.spec_decode``  Prometheus ``/metrics`` before and after the requests:
   speculative-decoding counter deltas (smoke/metrics.py), plus per-response
   ``timings.draft_n`` / ``draft_n_accepted`` (llama.cpp) and vLLM's per-request
   ``metrics.speculative_decoding`` where present.

The probe never raises and never runs past ``Options.timeout`` (one deadline for the whole
check); the API key is only handed to the client, never written to a fact.
"""

from __future__ import annotations

import time
from typing import Any, Dict, Optional

from gpudoctor.probes.smoke.answers import chat, known_answer, tool_call
from gpudoctor.probes.smoke.client import TIMEOUT as T_TIMEOUT
from gpudoctor.probes.smoke.longctx import long_context
from gpudoctor.probes.smoke.ready import SERVER_PROCESS, choose_model, discover_url, port_owners, wait_ready
from gpudoctor.probes.smoke.serverinfo import launch_fact, parsers_fact
from gpudoctor.probes.smoke.session import SOURCE, Options, Progress, Run, StepError
from gpudoctor.probes.smoke.spec import scrape_metrics, server_figures, spec_fact
from gpudoctor.probes.smoke.streaming import concurrency, stream, tool_stream
from gpudoctor.snapshot import ABSENT, ERROR, OK, TIMEOUT, Fact

__all__ = ["Options", "Progress", "SERVER_PROCESS", "discover_url", "run"]

STEP_FACTS = (
    "server.models",
    "server.known_answer",
    "server.chat",
    "server.stream",
    "server.concurrency",
    "server.tool_call",
    "server.tool_stream",
    "server.spec_decode",
    "server.launch",
    "server.parsers",
)


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
    run_ = Run(opts, progress)
    facts["server.url"] = Fact(run_.client.base_url, OK, SOURCE)
    ready, models = wait_ready(run_)
    facts["server.ready"] = ready
    run_.progress("clear", "")
    if not ready.ok:
        return
    model, models_fact = choose_model(opts, models)
    if any(isinstance(m, dict) and m.get("owned_by") == "sglang" for m in models or []):
        # SGLang's ModelCard (srt/entrypoints/openai/protocol.py) says owned_by "sglang".
        run_.engine = models_fact.value["engine"] = "sglang"
    facts["server.models"] = models_fact
    facts["server.launch"], facts["server.parsers"] = server_info(run_)
    before = scrape_metrics(run_)
    steps = (
        ("server.known_answer", "known answer", lambda: known_answer(run_, model)),
        ("server.chat", "chat (origin request)", lambda: chat(run_, model)),
        ("server.stream", "streaming", lambda: stream(run_, model)),
        ("server.concurrency", "concurrency", lambda: concurrency(run_, model)),
        ("server.tool_call", "tool call", lambda: tool_call(run_, model)),
        ("server.tool_stream", "streamed tool call", lambda: tool_stream(run_, model)),
    )
    if opts.long:
        steps += (("server.long_context", "long context", lambda: long_context(run_, model, models_fact.value.get("max_model_len"))),)
    for path, label, step in steps:
        run_.progress("step", f"smoke: {label} …")
        had = run_.remaining()
        around = scrape_metrics(run_) if path == "server.stream" else None
        try:
            facts[path] = _deadline_cut(run_, step(), label, had)
            if around is not None and facts[path].ok and isinstance(facts[path].value, dict):
                server_figures(facts[path].value, around, _scrape_finished(run_, around))
        except StepError as exc:
            facts[path] = _deadline_cut(run_, exc.fact, label, had)
        except Exception as exc:  # a bug in one step costs that step, not the whole check
            facts[path] = Fact({"error": "internal", "message": f"{type(exc).__name__}: {exc}"}, ERROR, SOURCE,
                               f"gpudoctor could not judge this answer ({type(exc).__name__}: {exc}); please report it")
    after = scrape_metrics(run_)
    facts["server.spec_decode"] = spec_fact(run_, before, after)
    run_.progress("clear", "")



def _scrape_finished(run_: Run, before: Dict[str, Any]):
    """/metrics after a request, once more 0.2 s later if its histograms have not moved yet: the
    server records a finished request's stats in its output loop, which may run just after the
    last chunk went out."""
    after = scrape_metrics(run_)
    moved = lambda scrape: bool(scrape) and (scrape.get("timing") or {}).get("generated_count", 0.0) > (  # noqa: E731
        before.get("timing") or {}).get("generated_count", 0.0)
    if after and after.get("timing") and not moved(after) and run_.remaining() > 1.0:
        time.sleep(0.2)
        after = scrape_metrics(run_)
    return after


def _deadline_cut(run_: Run, fact: Fact, label: str, had: float) -> Fact:
    """A step that started with less than half the --timeout left and whose requests timed out when the
    deadline ran out did not fail: it had no time left. Its fact says "deadline" (the server rules
    answer unknown), not a failure (issue 14: GD806 "4 of 4 parallel streams failed" against a
    healthy, slow one-slot server). A step that had most of the budget and still timed out is a
    hung server: that stays a failure."""
    value = fact.value if isinstance(fact.value, dict) else None
    if fact.ok and not (value and value.get("failed")) or value is None or run_.remaining() > 0.05:
        return fact
    if had >= run_.opts.timeout / 2:
        return fact
    failed = value.get("failed") if isinstance(value.get("failed"), list) else None
    kinds = [f.get("error") for f in failed if isinstance(f, dict)] if failed else [value.get("error")]
    if not kinds or any(kind not in (T_TIMEOUT, "deadline") for kind in kinds):
        return fact  # a real failure (refused, 500, bad JSON) before the deadline stays one
    cut = dict(value, error="deadline", cut_by_deadline=len(kinds))
    return Fact(cut, TIMEOUT, fact.source,
                f"deadline reached: {label} had no time left under the --timeout deadline ({run_.opts.timeout:g} s)")


def server_info(run_: Run):
    """``server.launch`` and ``server.parsers`` (a server on this machine only; never raises)."""
    try:
        owners = port_owners(run_.client.host, run_.client.port)
        launch = launch_fact(owners.get("listeners") if owners is not None else None)
        return launch, parsers_fact(launch)
    except Exception as exc:  # /proc or file trouble must not cost the check
        failed = Fact(None, ERROR, SOURCE, f"could not read the server's launch flags: {type(exc).__name__}: {exc}")
        return failed, Fact(None, ERROR, SOURCE, failed.detail)
