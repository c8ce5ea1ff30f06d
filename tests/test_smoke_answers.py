"""The smoke check's judgement of what came back: the chat answer's function (run in a child),
the parser names matched to a model family, the server's launch flags, and the rules that
turn them into findings (GD804, GD810, GD811, GD812) against the wire-format server."""

from __future__ import annotations

import io
import json

import pytest

from fakes.smoke_servers import WireServer

from gpudoctor.cli import main
from gpudoctor.probes.smoke.codecheck import check_prime_answer
from gpudoctor.probes.smoke.serverinfo import registry_names, serving_flags
from gpudoctor_rules.server_config import family_parser

GOOD = "Sure:\n```python\ndef is_prime(n):\n    if n < 2:\n        return False\n    return all(n % d for d in range(2, n))\n```\nprint(is_prime(7))"


@pytest.mark.parametrize("text, verdict", [
    (GOOD, "correct"),
    ("<think>\ndef nope(x): return 1\n</think>\n\n" + GOOD, "correct"),  # raw thinking is not the answer
    ("```python\ndef is_prime(n):\n    return n % 2 == 1\n```", "wrong"),
    ("The capital of France is Paris.", "no_code"),
    ("```python\ndef is_prime(n)\n    return True\n```", "syntax_error"),
    ("```python\nimport os\ndef is_prime(n):\n    return os.system('true') == 0\n```", "refused"),
    ("```python\ndef is_prime(n):\n    return open('/etc/passwd') and True\n```", "refused"),
    ("```python\ndef is_prime(n):\n    while True:\n        pass\n```", "wrong"),  # the CPU limit ends it
    ("```python\ndef is_prime(n):\n    x = [0] * (10 ** 10)\n    return True\n```", "wrong"),  # the memory limit
])
def test_prime_answer_verdicts(text, verdict):
    result = check_prime_answer(text)
    assert result["verdict"] == verdict, result


def test_wrong_answer_names_a_number_it_gets_wrong():
    result = check_prime_answer("def is_prime(n):\n    return n > 1\n")
    assert result["verdict"] == "wrong" and "is_prime(4) = True" in result["reason"]


def test_an_answer_cut_at_max_tokens_is_not_judged():
    cut = "```python\ndef is_prime(n):\n    if n < 2:\n        return False\n    for i in range(2,"
    assert check_prime_answer(cut, cut=True)["verdict"] == "truncated"
    assert check_prime_answer(cut, cut=False)["verdict"] == "syntax_error"


REASONING = ["deepseek_r1", "deepseek_v3", "glm45", "granite", "kimi_k2", "mistral", "qwen3", "minimax_m2", "minimax_m2_append_think"]
TOOLS = ["deepseek_v3", "glm45", "hermes", "kimi_k2", "llama3_json", "mistral", "qwen3_coder", "qwen3_json", "qwen3_xml"]


@pytest.mark.parametrize("model, names, best", [
    ("Qwen/Qwen3-8B", REASONING, "qwen3"),
    ("Qwen/Qwen3.6-27B", REASONING, "qwen3"),
    ("deepseek-ai/DeepSeek-R1-Distill-Qwen-7B", REASONING, "deepseek_r1"),
    ("zai-org/GLM-4.5-Air", REASONING, "glm45"),
    ("moonshotai/Kimi-K2-Thinking", REASONING, "kimi_k2"),
    ("MiniMaxAI/MiniMax-M2", REASONING, "minimax_m2"),
    ("meta-llama/Llama-3.1-8B-Instruct", REASONING, None),
    ("Qwen/Qwen3-Coder-30B-A3B-Instruct", TOOLS, "qwen3_coder"),
    ("Qwen/Qwen3-8B", TOOLS, "qwen3_json"),  # the plain-format name of the family
    (None, TOOLS, None),
])
def test_family_parser_reads_the_registry_names(model, names, best):
    assert family_parser(model, names)[0] == best


def test_serving_flags_from_a_command_line():
    argv = ["/v/bin/python", "-m", "vllm.entrypoints.cli.main", "serve", "Qwen/Qwen3-8B", "--reasoning-parser=qwen3",
            "--enable-auto-tool-choice", "--tool-call-parser", "hermes", "--max-model-len", "32768"]
    flags = serving_flags(argv)
    assert flags == {"model": "Qwen/Qwen3-8B", "reasoning_parser": "qwen3", "enable_auto_tool_choice": True,
                     "tool_call_parser": "hermes", "max_model_len": "32768"}


def test_registry_names_read_the_dict_literal(tmp_path):
    source = tmp_path / "__init__.py"
    source.write_text('_REASONING_PARSERS_TO_REGISTER = {\n  "qwen3": ("a", "B"),\n  "deepseek_r1": ("c", "D"),\n}\n')
    assert registry_names(str(source), "_REASONING_PARSERS_TO_REGISTER") == ["deepseek_r1", "qwen3"]
    assert registry_names(str(source), "_TOOL_PARSERS_TO_REGISTER") is None
    source.write_text("this is not ( python")
    assert registry_names(str(source), "_REASONING_PARSERS_TO_REGISTER") is None


# --- the rules, against the wire-format server ---------------------------------------------
@pytest.fixture
def wire():
    server = WireServer().start()
    yield server
    server.stop()


def smoke(url):
    out, err = io.StringIO(), io.StringIO()
    code = main(["smoke", "--url", url, "--format", "json", "--timeout", "60"], environ={}, stdout=out, stderr=err)
    return code, json.loads(out.getvalue())


def findings(doc, rule_id):
    return [f for f in doc["findings"] if f["id"] == rule_id]


def test_off_topic_answer_is_a_warning(wire):
    wire.text_mode = "off_topic"
    code, doc = smoke(wire.url)
    (found,) = findings(doc, "GD804")
    assert found["severity"] == "warning" and "does not answer" in found["message"] and code == 0


def test_raw_think_markup_without_reasoning_field_is_gd810(wire):
    wire.text_mode, wire.reasoning_field = "think_in_content", None
    _, doc = smoke(wire.url)
    (found,) = findings(doc, "GD810")
    assert "without --reasoning-parser" in found["message"]
    # no server process to read and no vLLM here: the fix says what to pick, not a made-up name
    assert "--reasoning-parser" in found["fix"]["commands"][0]


def test_tool_choice_400_is_gd811_with_the_flags(wire):
    wire.tool_mode = "unsupported"
    _, doc = smoke(wire.url)
    (found,) = findings(doc, "GD811")
    assert "--enable-auto-tool-choice --tool-call-parser" in found["fix"]["commands"][0]
    assert not findings(doc, "GD807") and not findings(doc, "GD812")


@pytest.mark.parametrize("mode, words", [("bad_args", "do not join into JSON"), ("markup", "stayed as text")])
def test_broken_streamed_tool_call_is_gd812(wire, mode, words):
    wire.tool_mode = mode
    code, doc = smoke(wire.url)
    (found,) = findings(doc, "GD812")
    assert words in found["message"] and code == 1


def test_rejected_dflash_drafts_name_the_dflash_advisories(wire):
    from gpudoctor import registry
    from gpudoctor.engine import run_rules
    from gpudoctor.snapshot import Fact, Snapshot

    wire.spec = (4, [0, 0, 0, 0])  # every draft rejected
    out = io.StringIO()
    main(["smoke", "--url", wire.url, "--format", "json", "--timeout", "60", "--expect-spec"], environ={}, stdout=out,
         stderr=io.StringIO())
    snap = Snapshot.from_json(json.loads(out.getvalue())["snapshot"])
    snap.facts["server.launch"] = Fact({"pid": 1, "flags": {"speculative_config": json.dumps(
        {"method": "dflash", "model": "z-lab/Qwen3-8B-DFlash", "num_speculative_tokens": 4})}}, "ok", "smoke")
    rules = [m for m in registry.load_rules() if m.id == "GD808"]
    (outcome,) = run_rules(snap, rules).outcomes
    (found,) = outcome.findings
    assert "for `dflash`" in found.fix.summary and "PR #40727" in found.fix.summary
    assert "z-lab/Qwen3-8B-DFlash/config.json" in found.fix.commands[0]
