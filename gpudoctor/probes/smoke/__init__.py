"""The inference smoke check: a probe that touches a running OpenAI-compatible server.

``client`` is a tiny HTTP/SSE client (stdlib ``http.client``; every request under a hard
deadline, every body under a size cap, the API key sent to the given origin only),
``metrics`` parses Prometheus text and computes speculative-decoding deltas for vLLM's
and llama.cpp's metric names, ``probe`` runs the steps and turns what it measured into
``server.*`` facts, which the rules in ``rules/server.py`` judge like any other facts.
"""

# Here, not in probe.py, so that `gpudoctor --help` need not import the HTTP client.
DEFAULT_URL = "http://127.0.0.1:8000"
