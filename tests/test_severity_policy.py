"""One severity policy (issue 31): written down once (gpudoctor/rule.py SEVERITY_POLICY), said by
`gpudoctor rules` and `gpudoctor explain ID`, and held here against every rule and every case table.

A finding that comes out with another severity than the catalogue's must be explained in its rule's
"## Severity" section (naming that severity), so `gpudoctor rules` listing one severity and a finding
showing another is never unexplained; and an error's words never say it is harmless.
"""

import io
import json
import re

from cases import all_cases
from gpudoctor import cli, registry
from gpudoctor.rule import SEVERITY_POLICY, SEVERITY_RANK

# Words that say nothing is wrong for the server: an error never says them of its own finding.
HARMLESS = re.compile(r"\b(is harmless|can be ignored|still works|works anyway|nothing to fix|does load after)\b", re.I)


def _run(*argv):
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(list(argv), stdout=out, stderr=err)
    return code, out.getvalue() + err.getvalue()


def test_the_policy_names_every_severity_and_the_catalogue_says_it():
    assert set(SEVERITY_POLICY) == set(SEVERITY_RANK)
    _, text = _run("rules")
    for name, words in SEVERITY_POLICY.items():
        assert f"  {name:<8} {words}" in text
    _, doc = _run("rules", "--format", "json")
    assert json.loads(doc)["severity_policy"]["error"] == SEVERITY_POLICY["error"]
    _, explained = _run("explain", "GD503")
    assert f"Severity error: {SEVERITY_POLICY['error']}." in explained and "## Severity" in explained


def unexplained(cases, rules):
    out = []
    for case in cases:
        if case.status != "fail" or case.severity == rules[case.rule].severity:
            continue
        section = rules[case.rule].section("severity").lower()
        if case.severity not in section or rules[case.rule].severity not in section:
            out.append(f"{case.rule} ({rules[case.rule].severity} in the catalogue, {case.severity} in case {case.name})")
    return sorted(set(out))


def test_every_severity_a_finding_takes_besides_the_catalogues_is_explained_in_its_rule():
    found = unexplained(all_cases(), {meta.id: meta for meta in registry.load_rules()})
    assert not found, "add a '## Severity' section naming both severities and when each applies: " + "; ".join(found)


def test_an_error_never_says_it_is_harmless():
    from cases import run
    from gpudoctor.snapshot import Snapshot

    import tempfile
    from pathlib import Path

    offenders = []
    with tempfile.TemporaryDirectory() as folder:
        for number, case in enumerate(c for c in all_cases() if c.status == "fail" and c.severity == "error"):
            data = case.build(Path(folder) / str(number))
            outcome = run(case.rule, data if isinstance(data, Snapshot) else Snapshot.from_json(data))
            offenders += [f"{case.rule} {case.name}: {f.message}" for f in outcome.findings
                          if f.severity == "error" and HARMLESS.search(f.message)]
    assert not offenders, offenders


def test_the_check_that_can_fail_does():
    """A rule whose findings change severity without a "## Severity" section is caught."""
    from dataclasses import replace

    from cases import Case

    rules = {meta.id: meta for meta in registry.load_rules()}
    case = Case("an-error", "GD602", lambda tmp: {}, "fail", "error")  # GD602 is a warning in the catalogue
    assert unexplained([case], rules) == []
    bare = dict(rules, GD602=replace(rules["GD602"], doc=rules["GD602"].doc.split("## Severity")[0]))
    assert unexplained([case], bare) == ["GD602 (warning in the catalogue, error in case an-error)"]
