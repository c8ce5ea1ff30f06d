"""The stand-in SGLang server of the smoke tests (tests/fakes/sglang_wire.py) speaks the real wheel's
wire format: every field, route and metric name it sends, and every one gpudoctor's smoke check
reads from SGLang, is defined in sglang's own source (read with ``ast``, never imported), with
the type (counter or gauge) the smoke check assumes.
"""

import ast
import re
import sys
import zipfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import realenv  # noqa: E402
from fakes.sglang_wire import SGLangWireServer  # noqa: E402

from gpudoctor.probes.smoke import metrics as prom  # noqa: E402

pytestmark = pytest.mark.real

RELEASES = ("0.5.23",)


def sources(version):
    with zipfile.ZipFile(realenv.source_wheel("sglang", version)) as archive:
        read = {name: archive.read(name).decode("utf-8", "replace") for name in (
            "sglang/srt/entrypoints/openai/protocol.py", "sglang/srt/observability/metrics_collector.py",
            "sglang/srt/entrypoints/http_server.py")}
    return read


def fields(tree, name):
    """{field: default source} of a pydantic/msgspec class."""
    [cls] = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == name]
    return {n.target.id: (ast.unparse(n.value) if n.value is not None else None)
            for n in cls.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}


def metric_types(source):
    """{metric name: "Counter" | "Gauge" | "Histogram"} from Counter(name="sglang:…", …) calls."""
    out = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("Counter", "Gauge", "Histogram"):
            for kw in node.keywords:
                if kw.arg == "name" and isinstance(kw.value, ast.Constant):
                    out[kw.value.value] = node.func.id
    return out


@pytest.mark.parametrize("version", RELEASES)
def test_the_stand_in_and_the_smoke_check_use_sglangs_own_names(version):
    src = sources(version)
    protocol = ast.parse(src["sglang/srt/entrypoints/openai/protocol.py"])
    card = fields(protocol, "ModelCard")
    assert card["owned_by"] == "'sglang'" and "max_model_len" in card and "root" in card
    assert fields(protocol, "ChatCompletionRequest")["return_spec_tokens_details"] == "False"
    details = fields(protocol, "SpecTokensDetails")
    with SGLangWireServer() as server:
        server.sglang_spec = (4, 2)
        sent = server.per_request({"return_spec_tokens_details": True}, server.bump_spec(12))
        model_info = server.native_get("/model_info")
        server.totals["verify"] = 3
        text = server.metrics_text()
        card_sent = server.models_payload()["data"][0]
    assert set(sent["sglext"]["spec_tokens_details"]) == set(details), "the stand-in sends SpecTokensDetails' fields"
    assert {"spec_num_proposed_drafts", "spec_num_correct_drafts"} <= set(details)  # what smoke/session.py sums
    assert "spec_tokens_details" in fields(protocol, "SglExt")
    for response in ("ChatCompletionResponse", "ChatCompletionStreamResponse"):
        assert "sglext" in fields(protocol, response), response
    assert "reasoning_content" in fields(protocol, "ChatMessage") and "reasoning_content" in fields(protocol, "DeltaMessage")
    assert set(card_sent) <= set(card)
    # Routes, and the keys of model_info's answer.
    http = src["sglang/srt/entrypoints/http_server.py"]
    for route in ("/health", "/model_info", "/get_model_info", "/v1/models", "/v1/chat/completions"):
        assert re.search(r'@app\.(?:get|post|api_route)\(\s*"' + re.escape(route) + '"', http), route
    body = http[http.index("async def model_info"):][:2000]
    assert all(f'"{key}"' in body for key in model_info), model_info
    # Metric names and types.
    types = metric_types(src["sglang/srt/observability/metrics_collector.py"])
    assert types[prom.SGLANG_VERIFY] == "Counter" and types[prom.SGLANG_TOKENS] == "Counter"
    assert all(types[name] == "Gauge" for name in prom.SGLANG_GAUGES)
    sent_names = {line.split("{")[0] for line in text.splitlines() if line and not line.startswith("#")}
    assert sent_names <= set(types), sent_names - set(types)
