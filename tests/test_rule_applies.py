"""``@rule(applies=…)``: a precondition several rules share, asked by the decorator instead of a guard
at the top of each rule. The launch, cluster, server and flash-attn rules use it; what a user sees
(not applicable, and why) is what each rule's own guard said before."""

from __future__ import annotations

import pytest

from gpudoctor import registry
from gpudoctor import rule as rule_module
from gpudoctor.engine import run_rules
from gpudoctor.rule import NOT_APPLICABLE, UNKNOWN, Fail, NotApplicable, rule
from gpudoctor.snapshot import Snapshot

# The launch rules whose guard is the decorator's (rules/launch/common.py): vLLM servers only, and
# the two that hold for an SGLang server too (its flags, its port).
VLLM_ONLY = ["GD704", "GD707", "GD708", "GD711", "GD712", "GD713", "GD714", "GD716", "GD718", "GD719", "GD720",
             "GD721", "GD723"]
SERVER = ["GD701", "GD702", "GD703", "GD706", "GD717", "GD722"]
# The other areas' shared preconditions, and the words their guards said.
OTHER = {
    # rules/cluster.py on_cluster: a snapshot of several nodes
    **dict.fromkeys(["GD901", "GD902", "GD903", "GD904", "GD905", "GD906", "GD907", "GD908", "GD909"],
                    "a single-node snapshot (run `gpudoctor cluster`, or check several --snapshot files)"),
    # rules/server.py not_checked: the smoke check ran
    **dict.fromkeys(["GD801", "GD802", "GD803", "GD804", "GD805", "GD806", "GD807", "GD808", "GD809", "GD812"],
                    "no server was checked (run `gpudoctor smoke --url URL` or `gpudoctor check --smoke URL`)"),
    **dict.fromkeys(["GD810", "GD811"], "no server was checked"),  # rules/server_config.py
    **dict.fromkeys(["GD402", "GD405"], "no flash-attn distribution is installed"),  # rules/flash_attn.py
}


def snapshot(**facts) -> Snapshot:
    return Snapshot.from_json({"schema_version": 1, "facts": {k: {"value": v, "status": "ok"} for k, v in facts.items()}})


@pytest.fixture
def scratch_rule():
    """A rule made for one test, taken out of the catalogue's list again afterwards."""
    before = list(rule_module._REGISTERED)
    asked = []

    def only_vllm(snap):
        asked.append(snap.value("launch.kind"))
        return None if snap.value("launch.kind") == "vllm-serve" else NotApplicable("not a vLLM server")

    @rule("GD799", "scratch-rule", severity="error", area="launch", requires=("launch.argv",), applies=only_vllm)
    def scratch(snap):
        """A scratch rule."""
        return Fail("it ran")

    yield scratch, asked
    rule_module._REGISTERED[:] = before


def test_applies_is_asked_after_requires_and_before_the_rule(scratch_rule):
    scratch, asked = scratch_rule
    meta = scratch.meta
    assert run_rules(snapshot(), [meta]).outcomes[0].status == UNKNOWN and asked == []  # requires first
    outcome = run_rules(snapshot(**{"launch.argv": [], "launch.kind": "sglang-serve"}), [meta]).outcomes[0]
    assert (outcome.status, outcome.reason) == (NOT_APPLICABLE, "not a vLLM server")
    outcome = run_rules(snapshot(**{"launch.argv": [], "launch.kind": "vllm-serve"}), [meta]).outcomes[0]
    assert outcome.findings[0].message == "it ran"
    assert scratch(snapshot(**{"launch.kind": "other"})) == NotApplicable("not a vLLM server")  # called directly too
    assert scratch.__name__ == "scratch" and meta.title == "A scratch rule." and scratch.__module__ == __name__


@pytest.mark.parametrize("rule_id", VLLM_ONLY + SERVER)
def test_launch_rules_say_not_applicable_as_their_guards_did(rule_id):
    meta = registry.find(rule_id)
    outcome = run_rules(snapshot(), [meta]).outcomes[0]
    assert (outcome.status, outcome.reason) == (NOT_APPLICABLE, "no launch command (run: gpudoctor preflight -- vllm serve MODEL …)")
    outcome = run_rules(snapshot(**{"launch.kind": "vllm-other"}), [meta]).outcomes[0]
    assert (outcome.status, outcome.reason) == (NOT_APPLICABLE, "the launch command is not a vLLM server (vllm-other)")
    outcome = run_rules(snapshot(**{"launch.kind": "sglang-serve"}), [meta]).outcomes[0]
    if rule_id in SERVER:
        assert outcome.status != NOT_APPLICABLE or "vLLM server" not in outcome.reason
    else:
        assert (outcome.status, outcome.reason) == (NOT_APPLICABLE, "the launch command is not a vLLM server (sglang-serve)")


@pytest.mark.parametrize("rule_id", sorted(OTHER))
def test_the_other_areas_rules_say_not_applicable_as_their_guards_did(rule_id):
    meta = registry.find(rule_id)
    # Their required facts there (the flash-attn rules': no variant installed), so the precondition decides.
    facts = {path: ([] if path == "flash_attn.variants" else {}) for path in meta.requires}
    outcome = run_rules(snapshot(**facts), [meta]).outcomes[0]
    assert (outcome.status, outcome.reason) == (NOT_APPLICABLE, OTHER[rule_id])


def test_every_guarded_rule_is_listed_here():
    guarded = sorted(m.id for m in registry.load_rules() if getattr(m.func, "__wrapped__", None) is not None)
    assert guarded == sorted(VLLM_ONLY + SERVER + list(OTHER))
