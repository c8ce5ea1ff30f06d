"""Preflight of a Hugging Face Hub model id that is not in the local cache (issue 31).

vLLM's first act is to fetch the model's config.json; preflight now does too, from a real HTTP
server on 127.0.0.1 that answers the Hub's URLs with real config.json files of public models
(tests/hub_standin.py, tests/fixtures/hub/README.md). TP divisibility, memory and context length
are then checked; gated without a token, offline, unreachable or silent: a clear unknown, never a
pass, and the token never leaves the request header.
"""

import json
import time

import pytest

from gpudoctor.probes.launch import hub
from hub_standin import StandIn
from fakes.preflight_world import H200X2, build_world, env_for, outcome, preflight

TOKEN = "hf_standin_secret_token_0123456789"


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return build_world(tmp_path_factory.mktemp("world"))


def serve_hub(world, model, *flags):  # noqa: F811
    return ["--snapshot", H200X2, "--", str(world["vllm"]), "serve", model, *[str(f) for f in flags]]


def statuses(doc, *ids):
    return {i: outcome(doc, i)["status"] for i in ids}


def test_tp_memory_and_context_are_checked_from_the_hubs_config(world):  # noqa: F811
    with StandIn() as standin:
        env = env_for(world, HF_ENDPOINT=standin.url)
        _, doc, _ = preflight(world, *serve_hub(world, "Qwen/Qwen3-8B", "-tp", "2", "--max-model-len", "32768"), env=env)
        assert statuses(doc, "GD706", "GD709", "GD710", "GD715") == {"GD706": "pass", "GD709": "pass", "GD710": "pass", "GD715": "pass"}
        facts = doc["snapshot"]["facts"]
        assert facts["model.config"]["source"] == f"{standin.url}/Qwen/Qwen3-8B/resolve/main/config.json"
        assert facts["model.config"]["value"]["num_key_value_heads"] == 8
        weights = facts["model.weights"]["value"]
        assert weights["estimate"] is True and 16.3e9 < weights["bytes"] < 16.5e9  # Qwen3-8B: 8.19 B parameters in bf16
        assert [p for p, _ in standin.requests] == ["/Qwen/Qwen3-8B/resolve/main/config.json",
                                                    "/Qwen/Qwen3-8B/resolve/main/model.safetensors.index.json"]

        _, doc, _ = preflight(world, *serve_hub(world, "Qwen/Qwen3-8B", "-tp", "3", "--max-model-len", "65536"), env=env)
        (heads,) = outcome(doc, "GD706")["findings"]
        assert "32" in heads["message"] and "3" in heads["message"]
        (context,) = outcome(doc, "GD715")["findings"]
        assert "40960" in context["message"] and "65536" in context["message"]


def test_the_safetensors_index_on_the_hub_gives_the_weights_bytes(world):  # noqa: F811
    index = json.dumps({"metadata": {"total_size": 65_524_246_528},
                        "weight_map": {f"model.layers.{i}.mlp.up_proj.weight": f"model-{i % 17 + 1:05d}-of-00017.safetensors"
                                       for i in range(64)}}).encode()
    with StandIn(extra={"Qwen/Qwen3-32B/model.safetensors.index.json": index}) as standin:
        _, doc, _ = preflight(world, *serve_hub(world, "Qwen/Qwen3-32B"), env=env_for(world, HF_ENDPOINT=standin.url))
    weights = doc["snapshot"]["facts"]["model.weights"]["value"]
    assert weights["bytes"] == 65_524_246_528 and weights["files"] == 17 and "index.json" in weights["source"]


def test_a_gated_model_without_a_token_is_unknown_and_with_one_is_read_without_showing_it(world):  # noqa: F811
    with StandIn() as standin:
        _, doc, _ = preflight(world, *serve_hub(world, "meta-llama/Llama-3.1-8B", "-tp", "2"), env=env_for(world, HF_ENDPOINT=standin.url))
        config = doc["snapshot"]["facts"]["model.config"]
        assert config["status"] == "no_permission" and "answered 401" in config["detail"] and "no HF_TOKEN" in config["detail"]
        assert statuses(doc, "GD706", "GD709") == {"GD706": "unknown", "GD709": "unknown"}
        assert "answered 401" in outcome(doc, "GD706")["reason"]

        code, doc, err = preflight(world, *serve_hub(world, "meta-llama/Llama-3.1-8B", "-tp", "2"),
                                   env=env_for(world, HF_ENDPOINT=standin.url, HF_TOKEN=TOKEN))
        assert doc["snapshot"]["facts"]["model.config"]["value"]["max_length"] == 131072
        assert outcome(doc, "GD706")["status"] == "pass"
        assert [auth for _, auth in standin.requests[-2:]] == [f"Bearer {TOKEN}"] * 2  # config.json and the index
        assert TOKEN not in json.dumps(doc) and TOKEN not in err


def test_the_token_file_is_used_as_huggingface_hub_does(world, tmp_path):  # noqa: F811
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "token").write_text(TOKEN + "\n", encoding="utf-8")
    with StandIn() as standin:
        _, doc, _ = preflight(world, *serve_hub(world, "meta-llama/Llama-3.1-8B"),
                              env=env_for(world, HF_ENDPOINT=standin.url, HF_HOME=str(tmp_path / "hf")))
    assert doc["snapshot"]["facts"]["model.config"]["status"] == "ok"


def test_offline_is_a_clear_unknown_and_nothing_is_asked(world):  # noqa: F811
    with StandIn() as standin:
        code, doc, _ = preflight(world, *serve_hub(world, "Qwen/Qwen3-8B", "-tp", "2"),
                                 env=env_for(world, HF_ENDPOINT=standin.url, HF_HUB_OFFLINE="1"))
        assert standin.requests == []
    assert outcome(doc, "GD704")["status"] == "fail" and code == 1
    assert outcome(doc, "GD706")["status"] == "unknown"


def test_an_unreachable_hub_is_a_clear_unknown_not_a_pass(world):  # noqa: F811
    started = time.monotonic()
    code, doc, _ = preflight(world, *serve_hub(world, "Qwen/Qwen3-8B", "-tp", "2", "--max-model-len", "32768"),
                             env=env_for(world, HF_ENDPOINT="http://127.0.0.1:9"))
    assert code == 0 and outcome(doc, "GD703")["status"] == "pass"  # the Hub out of reach here is no proof the server cannot reach it
    assert time.monotonic() - started < 10
    config = doc["snapshot"]["facts"]["model.config"]
    assert config["status"] == "error" and "could not be reached" in config["detail"]
    for rule_id in ("GD706", "GD709", "GD715"):
        assert outcome(doc, rule_id)["status"] == "unknown", rule_id
    _, gated, _ = preflight(world, "--fail-on", "unknown", *serve_hub(world, "Qwen/Qwen3-8B", "-tp", "2"),
                            env=env_for(world, HF_ENDPOINT="http://127.0.0.1:9"))
    assert gated["blocking"] is True


def test_a_silent_hub_is_a_timeout_within_the_deadline():
    with StandIn(delay_s=5) as standin:
        started = time.monotonic()
        got = hub.fetch("Qwen/Qwen3-8B", None, {"HF_ENDPOINT": standin.url, "HOME": "/nonexistent"}, deadline_s=0.5)
        assert time.monotonic() - started < 2
    assert got["status"] == "timeout" and "did not answer within 0.5 s" in got["detail"]


def test_a_redirect_to_another_host_does_not_carry_the_token():
    with StandIn(gated={}) as cdn:
        other_host = cdn.url.replace("127.0.0.1", "localhost")
        with StandIn(redirect_to=other_host) as front:
            got = hub.fetch("meta-llama/Llama-3.1-8B", None, {"HF_ENDPOINT": front.url, "HF_TOKEN": TOKEN, "HOME": "/nonexistent"})
    assert got["status"] == "ok" and got["config"]["vocab_size"] == 128256
    assert front.requests[0][1] == f"Bearer {TOKEN}"
    assert cdn.requests and all(auth is None for _, auth in cdn.requests)
    assert TOKEN not in json.dumps(got)


@pytest.mark.parametrize("value", ["0", "off"])
def test_gpudoctor_hub_0_turns_it_off(value):
    assert hub.fetch("Qwen/Qwen3-8B", None, {"GPUDOCTOR_HUB": value, "HF_ENDPOINT": "http://127.0.0.1:9"})["detail"] == \
        "not asked: GPUDOCTOR_HUB=0"


def test_verbose_lists_the_passed_rules_with_the_kv_cache_headroom(world):  # noqa: F811
    """Issue 31: `-v` said "2 more (-v lists them)" and never listed passed rules."""
    import io

    from gpudoctor import cli

    with StandIn() as standin:
        out, err = io.StringIO(), io.StringIO()
        cli.main(["preflight", "-v", *serve_hub(world, "Qwen/Qwen3-8B", "-tp", "2", "--max-model-len", "32768")],
                 environ=env_for(world, HF_ENDPOINT=standin.url), stdout=out, stderr=err)
    text = out.getvalue()
    assert "✓ GD706 tensor-parallel-does-not-divide-model" in text
    assert "✓ GD710 kv-cache-too-small-for-max-model-len: estimated: a 32768-token request needs about" in text
    assert "-v lists them" not in text
