"""Known-fix advisories (gpudoctor/knowledge/advisories.py): data, evaluation by source markers, release version and
commit history, ``advisories_for`` as the launch checks call it, and GD514.

vLLM trees carry the real shapes of the code before and after each PR (tests/fakes/flash_attn_trees.py);
git histories are real repositories made here (packed with ``git gc --aggressive``, so commits are
stored as deltas, as in a real clone), and every object the probe reads is compared with
``git cat-file``.
"""

import json
import os
import re
import shlex
import subprocess
import sys
import time

import pytest

from gpudoctor.probes import gitfiles
from gpudoctor.snapshot import Fact, Snapshot
from gpudoctor.knowledge import advisories
from gpudoctor.knowledge.advisories import Advisory, advisories_for, probe_options
from helpers import outcome
from fakes.flash_attn_trees import (DFLASH_AFTER_46104, DFLASH_BEFORE_46104, RUNNER_AFTER_40727, RUNNER_BEFORE_40727, snapshot,
                              torch_site, vllm)
from fakes.site_packages import SitePackages
from fakes.vllm_checkout import git, install_editable, make_checkout

PY = shlex.quote(sys.executable)


def by_id(results):
    return {r.advisory.id: r for r in results}


@pytest.fixture
def site(tmp_path):
    return SitePackages(tmp_path / "site-packages")


# --- the data ------------------------------------------------------------------------------
def test_seed_advisories_are_complete_and_verified():
    ids = [a.id for a in advisories.ADVISORIES]
    assert len(ids) == len(set(ids))
    seeds = {a.pr: a for a in advisories.ADVISORIES}
    assert set(seeds) >= {40727, 46104, 42679}
    assert (seeds[40727].merged_commit, seeds[40727].merged, seeds[40727].feature) == ("c628a93a64", "2026-05-20", "dflash")
    assert (seeds[46104].merged_commit, seeds[46104].supersedes, seeds[46104].feature) == ("9969466a5978", (40898,), "dflash")
    for adv in advisories.ADVISORIES:
        assert adv.sources and adv.needs and adv.symptom and adv.title
        assert adv.first_release is None  # none is verified: never guessed (facts.md "Not confirmed")
        assert adv.merged_commit is None or re.fullmatch(r"[0-9a-f]{7,40}", adv.merged_commit)
        if adv.marker is not None:
            re.compile(adv.marker.fixed)
            re.compile(adv.marker.unfixed or "x")
    options = probe_options()
    assert json.loads(json.dumps(options)) == options
    assert [m["id"] for m in options["markers"]] == ids
    assert {c["id"]: c["commit"] for c in options["commits"]} == {"ADV-dflash-aux-layer-offset": "c628a93a64",
                                                                  "ADV-dflash-drafter-swa": "9969466a5978"}
    assert options["commits"][0]["merged_epoch"] == 1779235200  # 2026-05-20T00:00:00Z


def test_markers_match_the_real_code_shapes():
    aux = advisories.ADVISORIES[0].marker
    assert re.search(aux.fixed, RUNNER_AFTER_40727) and not re.search(aux.fixed, RUNNER_BEFORE_40727)
    assert re.search(aux.unfixed, RUNNER_BEFORE_40727) and not re.search(aux.unfixed, RUNNER_AFTER_40727)
    # the later, one-line form in eagle3_utils.py (stored vLLM versions)
    assert re.search(aux.fixed, 'layer_ids = [i + 1 for i in (dflash_config.get("target_layer_ids") or [])]')
    swa = advisories.ADVISORIES[1].marker
    assert re.search(swa.fixed, DFLASH_AFTER_46104) and not re.search(swa.fixed, DFLASH_BEFORE_46104)


# --- evaluation from the installed source ------------------------------------------------------------
def test_old_vllm_lacks_both_dflash_fixes(site):
    torch_site(site)
    vllm(site, version="0.19.0", runner=RUNNER_BEFORE_40727, dflash=DFLASH_BEFORE_46104)
    snap = snapshot(site.path)
    results = by_id(advisories_for("dflash", snap))
    aux = results["ADV-dflash-aux-layer-offset"]
    assert (aux.status, aux.how) == ("missing", "code")
    assert aux.reason == "vLLM 0.19.0 lacks #40727: vllm/v1/worker/gpu_model_runner.py still has the code before the fix"
    assert results["ADV-dflash-drafter-swa"].status == "missing"

    findings = {f.subject: f for f in outcome(snap, "GD514").findings}
    assert set(findings) == {"ADV-dflash-aux-layer-offset", "ADV-dflash-drafter-swa"}
    finding = findings["ADV-dflash-aux-layer-offset"]
    assert finding.severity == "info"
    assert finding.message.startswith("If you use dflash (dflash auxiliary hidden-state layers are taken one layer early): vLLM 0.19.0 lacks #40727")
    assert "(PR #40727, merged as c628a93a64 on 2026-05-20, first release: not verified)" in finding.message
    assert finding.fix.commands == [f"{PY} -m pip install -U vllm  # a release or nightly after 2026-05-20 (first release with #40727: not verified)"]


def test_new_vllm_has_them(site):
    torch_site(site)
    vllm(site, version="0.33.0", extra_files={
        # the fix moved out of the runner into eagle3_utils.py in later versions: either file counts
        "vllm/v1/worker/gpu_model_runner.py": "from vllm.v1.worker.gpu.spec_decode.eagle.eagle3_utils import get_eagle3_aux_layers_from_config\n",
        "vllm/v1/worker/gpu/spec_decode/eagle/eagle3_utils.py":
            'layer_ids = [i + 1 for i in (dflash_config.get("target_layer_ids") or [])]\n'})
    snap = snapshot(site.path)
    results = by_id(advisories_for("dflash", snap))
    assert results["ADV-dflash-aux-layer-offset"].status == "fixed"
    assert "vllm/v1/worker/gpu/spec_decode/eagle/eagle3_utils.py carries it" in results["ADV-dflash-aux-layer-offset"].reason
    assert results["ADV-dflash-drafter-swa"].status == "fixed"
    assert outcome(snap, "GD514").status == "pass"


def test_vllm_without_dflash_is_not_applicable(site):
    torch_site(site)
    vllm(site, version="0.11.0")
    os.unlink(site.path / "vllm" / "model_executor" / "models" / "qwen3_dflash.py")
    results = advisories_for("dflash", snapshot(site.path))
    assert {r.status for r in results} == {"not_applicable"}
    assert "vLLM 0.11.0 has no dflash at all (no vllm/model_executor/models/qwen3_dflash.py)" == results[0].reason


def test_refactored_source_is_unknown_and_says_why(site):
    torch_site(site)
    vllm(site, version="0.99.0", runner="# the function moved somewhere new\n")
    results = by_id(advisories_for("dflash", snapshot(site.path)))
    aux = results["ADV-dflash-aux-layer-offset"]
    assert aux.status == "unknown"
    assert aux.reason == ("cannot tell whether vLLM 0.99.0 has #40727: the source markers were inconclusive "
                          "(none of the files carries either form); the first release with it is not verified")
    assert outcome(snapshot(site.path), "GD514").status == "unknown"


# --- evaluation from the release version ------------------------------------------------------------
RELEASED = Advisory(id="ADV-test-released", feature="testfeature", title="t", needs="n", symptom="s", pr=1, first_release="0.22.0",
                    sources=("test",))


@pytest.mark.parametrize("version, status", [("0.21.0", "missing"), ("0.22.0", "fixed"), ("0.33.0", "fixed"),
                                             ("0.22.1rc1.dev5+gabcdef0", "unknown")])
def test_release_version_against_a_verified_first_release(site, version, status):
    torch_site(site)
    vllm(site, version=version)
    [result] = advisories_for("testfeature", snapshot(site.path), advisories=[RELEASED])
    assert result.status == status
    if status != "unknown":
        assert result.how == "release"


# --- evaluation from the checkout's history ------------------------------------------------------------
def dated(repo, when, *args):
    env_date = {"GIT_COMMITTER_DATE": when, "GIT_AUTHOR_DATE": when}
    old = {k: os.environ.get(k) for k in env_date}
    os.environ.update(env_date)
    try:
        return git(repo, *args)
    finally:
        for key, value in old.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def history_repo(tmp_path):
    """main: A - FIX - C (HEAD); side: A - SIDE; all packed with deltas."""
    repo = make_checkout(tmp_path / "vllm", branch="main-work")
    body = "\n".join(f"line {i} of a long message" for i in range(200))
    shas = {}
    for name, when in (("fix", "2026-05-20T10:00:00Z"), ("after", "2026-05-21T10:00:00Z")):
        (repo / f"{name}.txt").write_text(name, encoding="utf-8")
        git(repo, "add", "-A")
        dated(repo, when, "commit", "-q", "-m", f"{name}\n\n{body}")
        shas[name] = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-q", "-b", "side", "HEAD~2")
    (repo / "side.txt").write_text("side", encoding="utf-8")
    git(repo, "add", "-A")
    dated(repo, "2026-06-01T10:00:00Z", "commit", "-q", "-m", f"side\n\n{body}")
    shas["side"] = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-q", "main-work")
    git(repo, "gc", "-q", "--aggressive")
    assert not list((repo / ".git" / "objects").glob("[0-9a-f][0-9a-f]/*"))  # everything is in the pack
    return repo, shas


def commit_advisory(sha, merged="2026-05-20"):
    return Advisory(id=f"ADV-test-{sha[:8]}", feature="testfeature", title="t", needs="n", symptom="s", pr=2,
                    merged=merged, merged_commit=sha[:10], sources=("test",))


def test_commit_ancestry_in_an_editable_checkout(site, tmp_path):
    repo, shas = history_repo(tmp_path)
    store = gitfiles.GitObjects(str(repo / ".git"))
    for sha in git(repo, "rev-list", "--all").split():
        kind, body = store.read(sha)
        assert kind == "commit" and body.decode() == git(repo, "cat-file", "commit", sha) + "\n"
    torch_site(site)
    install_editable(site, repo)
    cases = [(commit_advisory(shas["fix"]), "fixed"), (commit_advisory(shas["side"], "2026-06-01"), "missing"),
             (commit_advisory("deadbeef0123"), "missing")]
    options = probe_options([adv for adv, _ in cases])
    snap = snapshot(site.path, options=options)
    results = {r.advisory.id: r for r in advisories_for("testfeature", snap, advisories=[adv for adv, _ in cases])}
    head = git(repo, "rev-parse", "HEAD")
    for adv, status in cases:
        result = results[adv.id]
        assert (result.status, result.how) == (status, "commit"), result.reason
    assert results[cases[0][0].id].reason == f"the checkout's HEAD {head[:12]} contains {shas['fix'][:10]} (#2)"
    assert "is not in this repository's history at all" in results[cases[2][0].id].reason
    assert git(repo, "merge-base", "--is-ancestor", shas["fix"], "HEAD", check=False) == ""


def test_commit_newer_than_head_stops_the_walk_early(site, tmp_path):
    repo, shas = history_repo(tmp_path)  # HEAD is dated 2026-05-21, the side commit 2026-06-01
    result = gitfiles.contains_commit(str(repo / ".git"), git(repo, "rev-parse", "HEAD"), shas["side"][:10], None, time.monotonic() + 5)
    assert result == {"state": "no", "visited": 0, "detail": "walked back past the commit's date"}


def test_shallow_clone_cannot_tell(site, tmp_path):
    repo, shas = history_repo(tmp_path)
    shallow = tmp_path / "shallow"
    subprocess.run(["git", "clone", "-q", "--depth", "1", "--branch", "main-work", repo.as_uri(), str(shallow)], check=True,
                   capture_output=True, timeout=60)
    torch_site(site)
    install_editable(site, shallow)
    adv = commit_advisory("0123456789")
    snap = snapshot(site.path, options=probe_options([adv]))
    [result] = advisories_for("testfeature", snap, advisories=[adv])
    assert result.status == "unknown" and "not in this shallow repository" in result.reason


def test_git_install_without_checkout_cannot_tell(site):
    torch_site(site)
    info = vllm(site, version="0.23.1rc1.dev901+g2f3f441f8", runner="# refactored\n")
    (info / "direct_url.json").write_text(json.dumps({"url": "https://github.com/x/vllm", "vcs_info": {
        "vcs": "git", "commit_id": "2f3f441f8" + "0" * 31, "requested_revision": "dflash"}}), encoding="utf-8")
    snap = snapshot(site.path)
    result = by_id(advisories_for("dflash", snap))["ADV-dflash-aux-layer-offset"]
    assert result.status == "unknown"
    assert "the checkout's history is not available (cannot walk the history: not a git checkout)" in result.reason


def test_apply_delta_copy_and_insert():
    base = b"0123456789abcdef"
    delta = bytes([16, 9]) + bytes([0x91, 2, 4]) + bytes([3]) + b"XYZ" + bytes([0x90, 2])
    assert gitfiles.apply_delta(base, delta) == b"2345XYZ01"


# --- the interface the launch checks use -------------------------------------------------------------
def test_advisories_for_accepts_snapshots_facts_and_plain_values(site):
    torch_site(site)
    vllm(site, version="0.19.0", runner=RUNNER_BEFORE_40727)
    snap = snapshot(site.path)
    facts = {path: snap.facts[path] for path in ("vllm.build", "vllm.code_markers")}
    plain = {path: fact.to_json() for path, fact in facts.items()}
    values = {path: fact.value for path, fact in facts.items()}
    for given in (snap, facts, plain, values):
        assert by_id(advisories_for("dflash", given))["ADV-dflash-aux-layer-offset"].status == "missing"
    assert advisories_for("eagle3", snap) == []
    assert [r.advisory.pr for r in advisories_for("FA4", snap)] == [42679]  # alias, any case
    [unknown] = advisories_for("flash-attn-4", {})
    assert unknown.status == "unknown" and "vLLM's build was not read" in unknown.reason
    missing_fact = {"vllm.build": Fact(None, "absent", "", "vllm is not installed")}
    assert by_id(advisories_for("dflash", missing_fact))["ADV-dflash-aux-layer-offset"].status == "unknown"
    assert by_id(advisories_for("dflash", snap))["ADV-dflash-aux-layer-offset"].to_json()["status"] == "missing"


def test_gd514_editable_checkout_gets_cherry_pick_commands(site, tmp_path):
    repo = make_checkout(tmp_path / "vllm")
    (repo / "vllm" / "v1" / "worker").mkdir(parents=True)
    (repo / "vllm" / "v1" / "worker" / "gpu_model_runner.py").write_text(RUNNER_BEFORE_40727, encoding="utf-8")
    (repo / "vllm" / "model_executor" / "models").mkdir(parents=True)
    (repo / "vllm" / "model_executor" / "models" / "qwen3_dflash.py").write_text(DFLASH_AFTER_46104, encoding="utf-8")
    torch_site(site)
    install_editable(site, repo)
    [finding] = outcome(snapshot(site.path), "GD514").findings
    path = shlex.quote(str(repo))
    assert finding.subject == "ADV-dflash-aux-layer-offset"
    assert finding.fix.commands[:2] == [f"git -C {path} fetch origin main",
                                        f"git -C {path} merge-base --is-ancestor c628a93a64 HEAD || git -C {path} cherry-pick c628a93a64"]


def test_gd514_without_vllm_is_not_applicable(site):
    torch_site(site)
    assert outcome(snapshot(site.path), "GD514").status == "not_applicable"


def test_replayed_snapshot_without_vllm_facts(site):
    snap = Snapshot.from_json({"schema_version": 1, "facts": {}})
    for rule_id in ("GD510", "GD511", "GD512", "GD513", "GD514"):
        assert outcome(snap, rule_id).status in ("not_applicable", "unknown"), rule_id
