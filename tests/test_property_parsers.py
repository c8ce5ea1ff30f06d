"""Property tests (hypothesis) for every parser of untrusted input and for the rule engine.

The targets and their real seeds live in tests/fuzz_targets.py; here each gets a bounded
number of examples (CI stays fast: the whole module takes well under a minute on two
cores). The long runs are benchmarks/fuzz_parsers.py. Properties: a parser returns or
raises only its documented error, and redaction is idempotent; the engine, given a real
snapshot with facts of the wrong type, never reports "rule crashed".
"""

import json
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fuzz_targets import FIXTURES, INTERESTING, snapshot_mutations, targets

TARGETS = {t.name: t for t in targets()}
FAST = settings(max_examples=40, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])


@st.composite
def mutated(draw, seeds):
    """A real seed with a few slices replaced by random bytes or hostile chunks."""
    data = bytearray(draw(st.sampled_from(seeds)))
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(data)))
        end = min(len(data), at + draw(st.integers(0, 64)))
        chunk = draw(st.one_of(st.binary(max_size=64), st.sampled_from(INTERESTING),
                               st.text(max_size=40).map(lambda t: t.encode("utf-8", "surrogatepass"))))
        data[at:end] = chunk
    return bytes(data)


def _check(target, data):
    try:
        target.run(data)
    except target.allowed:
        pass


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_parser_never_raises_an_undocumented_error(name):
    target = TARGETS[name]

    @FAST
    @given(data=st.one_of(mutated(target.seeds), st.binary(max_size=256)))
    def run(data):
        _check(target, data)

    run()


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_parser_on_its_real_seeds(name):
    target = TARGETS[name]
    for seed in target.seeds:
        _check(target, seed)


def test_engine_on_mutated_snapshots_never_reports_rule_crashed():
    from gpudoctor import registry
    from gpudoctor.engine import run_rules
    from gpudoctor.snapshot import Snapshot

    rules = registry.load_rules()
    bases = [json.loads(p.read_text()) for p in sorted((FIXTURES / "snapshots").glob("*.json"))]
    assert bases

    @settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
    @given(seed=st.integers(0, 2**32 - 1), base=st.sampled_from(range(len(bases))), count=st.integers(1, 6))
    def run(seed, base, count):
        data = snapshot_mutations(random.Random(seed), bases[base], count)
        result = run_rules(Snapshot.from_json(data), rules)
        crashed = [f"{o.rule.id}: {o.reason}" for o in result.outcomes if o.reason and "rule crashed" in o.reason]
        assert not crashed

    run()
