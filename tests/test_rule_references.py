"""Every rule's docs point at public sources: at least one https link in References, and never
at the project's private research notes (research/facts.md, anchors.md, design.md), which no
user has."""

import re

import pytest

from gpudoctor import registry

PRIVATE = re.compile(r"research/|\b(facts|anchors|design|style)\.md\b")
LINK = re.compile(r"https://[^\s)>\]]+[\w/]")


@pytest.mark.parametrize("meta", registry.load_rules(), ids=lambda m: m.id)
def test_rule_docs_cite_public_links_only(meta):
    assert not PRIVATE.search(meta.doc), f"{meta.id} cites a private research file"
    links = LINK.findall(meta.section("references"))
    assert links, f"{meta.id} has no https link under ## References"
    for link in links:
        assert " " not in link and not link.endswith((".", ",")), link


def test_github_references_are_links_not_shorthand():
    for meta in registry.load_rules():
        refs = meta.section("references")
        assert not re.search(r"(?<![\w/.])[\w.-]+/[\w.-]+#\d+", refs), f"{meta.id}: write owner/repo#N as a github.com link"
