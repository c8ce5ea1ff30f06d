"""Which inference engines are installed (vLLM, SGLang, both) is a fact, and check and report name them.

The environments are dist-info trees as pip writes them (tests/flash_attn_trees.py), read by the
real probe (pyenv.collect_plain); SGLang's Requires-Dist is its 0.5.23 wheel's.
"""

from __future__ import annotations

from flash_attn_trees import fa4, sglang, snapshot, torch_site, vllm
from gpudoctor.render import headlines
from gpudoctor.report_sections import version_rows
from test_pystack_env import SitePackages
from gpudoctor_rules import engines


def test_sglang_alone_is_named_in_the_fact_the_headlines_and_the_report(tmp_path):
    site = SitePackages(tmp_path / "site")
    torch_site(site, version="2.14.1", cuda="13.0")
    fa4(site)
    sglang(site)
    snap = snapshot(site.path, gpu="A100")
    fact = snap.get("engines.installed")
    assert fact.ok and [(e["name"], e["version"], e["engine"]) for e in fact.value] == [("sglang", "0.5.23", "SGLang")]
    assert fact.detail == "SGLang 0.5.23"
    assert headlines.context(snap).endswith(" · SGLang 0.5.23")
    assert "sglang 0.5.23" in headlines.vllm(snap)
    rows = {r["component"]: r["value"] for r in version_rows(snap) if r["component"]}
    assert rows["Inference engines"] == "SGLang 0.5.23" and rows["SGLang"] == "sglang 0.5.23"
    assert engines.label(snap) == "SGLang 0.5.23"
    assert engines.requirers(snap, "flash-attn-4") == [("sglang", "0.5.23", "flash-attn-4>=4.0.0b18")]


def test_both_engines_and_none(tmp_path):
    site = SitePackages(tmp_path / "site")
    torch_site(site)
    snap = snapshot(site.path, gpu="A100")
    assert snap.value("engines.installed") == [] and snap.get("engines.installed").detail == "no inference engine installed"
    assert "SGLang" not in headlines.context(snap) and engines.label(snap) == ""
    vllm(site)
    sglang(site)
    snap = snapshot(site.path, gpu="A100")
    assert [e["engine"] for e in snap.value("engines.installed")] == ["vLLM", "SGLang"]
    assert headlines.context(snap).endswith(" · vLLM 0.20.0 + SGLang 0.5.23")
    assert engines.label(snap) == "vLLM 0.20.0 and SGLang 0.5.23"


def test_a_requirement_for_another_platform_or_an_extra_does_not_count(tmp_path):
    site = SitePackages(tmp_path / "site")
    fa4(site)
    sglang(site, requires=('flash-attn-4>=4.0.0b18; sys_platform == "darwin"', 'flash-attn-4; extra == "fa4"'))
    assert engines.requirers(snapshot(site.path, gpu="A100"), "flash-attn-4") == []
