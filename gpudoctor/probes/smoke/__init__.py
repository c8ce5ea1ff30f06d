"""The inference smoke check: a probe that touches a running OpenAI-compatible server.

``client`` is a tiny HTTP/SSE client (stdlib ``http.client``; every request under a hard
deadline, every body under a size cap, the API key sent to the given origin only),
``metrics`` parses Prometheus text and computes speculative-decoding deltas for vLLM's
and llama.cpp's metric names, ``probe`` runs the steps and turns what it measured into
``server.*`` facts, which the rules in ``rules/server.py`` judge like any other facts.

``collect(ctx)`` is the probe (the contract of gpudoctor/probes/__init__.py): it checks the
server ``ctx.smoke`` (a ``session.Options``, with its own deadline) and reports its steps to
``ctx.progress``.
"""

from typing import Any, Dict

# Here, not in probe.py, so that `gpudoctor --help` need not import the HTTP client.
DEFAULT_URL = "http://127.0.0.1:8000"


def collect(ctx: Any) -> Dict[str, Any]:
    """The ``server.*`` facts (and ``probe.smoke``) of ``ctx.smoke``; none without one. Never raises."""
    from gpudoctor.probes.smoke.probe import run

    if ctx.smoke is None:
        return {}
    return run(ctx.smoke, ctx.progress)
