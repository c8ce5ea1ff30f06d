"""Which inference engines are installed (vLLM, SGLang, both) is a fact, and check and report name them.

The environments are dist-info trees as pip writes them (tests/fakes/flash_attn_trees.py), read by the
real probe (python_stack_collect.collect_plain); SGLang's Requires-Dist is its 0.5.23 wheel's.
"""

from __future__ import annotations

from fakes.flash_attn_trees import fa4, sglang, snapshot, torch_site, vllm
from gpudoctor.render import headlines
from gpudoctor.report_sections import version_rows
from fakes.site_packages import SitePackages
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


def test_requirements_read_without_packaging_are_written_as_packaging_writes_them():
    """rules/engines.py takes a requirement without marker or URL itself: on every Requires-Dist of
    the fixture snapshots and of the real sglang 0.5.23 / vLLM 0.33.0 METADATA forms below, the text
    equals str(packaging.requirements.Requirement(...)), and anything else is left to packaging."""
    import glob
    import json

    from packaging.requirements import Requirement

    from rules import engines as eng

    texts = {"flash-attn-4>=4.0.0b18", "torch==2.14.1", "flashinfer_python[cu13]==0.7.2", "sgl-kernel >=0.3.9, <0.4",
             "xgrammar==0.1.25 ; platform_machine == 'x86_64'", "a[b, c] (>=1.0,<2)", "numpy", "x @ https://e.org/x.whl",
             "outlines_core==0.1.26", "opencv-python-headless>=4.11.0", "compressed-tensors==0.11.0", "ray[cgraph]>=2.48.0"}
    repo = __import__("os").path.dirname(__import__("os").path.dirname(__import__("os").path.abspath(__file__)))
    for path in glob.glob(f"{repo}/tests/fixtures/**/*.json", recursive=True):
        try:
            with open(path) as handle:
                doc = json.load(handle)
        except (ValueError, UnicodeDecodeError):
            continue
        stack = ((doc.get("facts") or {}).get("packages.stack") or {}).get("value") if isinstance(doc, dict) else None
        for entry in (stack or {}).values() if isinstance(stack, dict) else ():
            if isinstance(entry, dict):
                texts.update(str(t) for t in entry.get("requires") or [])
    taken = 0
    for text in sorted(texts):
        fast = eng._simple(text)
        if fast is None:
            continue
        taken += 1
        assert fast == str(Requirement(text)), text
    assert eng._simple("x @ https://e.org/x.whl") is None and eng._simple("numpy; python_version < '3.9'") is None
    assert taken >= 20, taken  # 25 in the fixtures and the list above; the rest carry markers: packaging reads them
