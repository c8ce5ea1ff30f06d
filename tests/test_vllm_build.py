"""The vLLM build (probes/vllm_build.py) and GD510–GD514, on real dist-info trees and real git repos.

git repositories are made in tmp dirs with the real git; the probe reads their ``.git`` as files
(it never runs git), and the tests compare what it reads with what git itself says
(``git rev-parse``, ``git status --porcelain``) — git is the oracle, not a mock.
"""

import json
import os
import shlex
import struct
import subprocess
import sys

import pytest

from gpudoctor.probes import gitfiles
from gpudoctor.probes import vllm_build as probe
from gpudoctor.render import headlines
from helpers import findings, outcome
from fakes.flash_attn_trees import collect, snapshot, torch_site, vllm
from fakes.site_packages import SitePackages, make_venv, venv_site
from helpers import doc_findings, gd
from fakes.vllm_checkout import SHA, git, install_editable, make_checkout

PY = shlex.quote(sys.executable)


@pytest.fixture
def site(tmp_path):
    return SitePackages(tmp_path / "site-packages")


# --- origin -----------------------------------------------------------------------------------
def test_pypi_release(site):
    torch_site(site)
    vllm(site, version="0.10.0")
    build = collect([site.path])["vllm.build"]["value"]
    assert build["origin"] == "index" and build["version_parts"]["release"] is True and "checkout" not in build
    snap = snapshot(site.path)
    assert outcome(snap, "GD511").status == "pass"
    assert "vllm 0.10.0 (index)" in headlines.headline("vllm", snap)


def test_git_install_reports_revision_and_commit(site):
    torch_site(site)
    info = vllm(site, version="0.11.1rc2.dev123+g2f3f441f8")
    (info / "direct_url.json").write_text(json.dumps({
        "url": "https://github.com/vllm-project/vllm.git",
        "vcs_info": {"vcs": "git", "commit_id": SHA, "requested_revision": "refs/pull/40727/head"}}), encoding="utf-8")
    build = collect([site.path])["vllm.build"]["value"]
    assert (build["origin"], build["commit_id"], build["requested_revision"]) == ("git", SHA, "refs/pull/40727/head")
    assert build["version_parts"] == {"raw": "0.11.1rc2.dev123+g2f3f441f8", "base": "0.11.1rc2", "dev": 123,
                                      "commit": "2f3f441f8", "release": False}
    [finding] = findings(snapshot(site.path), "GD511")
    assert finding.severity == "info"
    assert finding.message.startswith("vllm 0.11.1rc2.dev123+g2f3f441f8 is from git https://github.com/vllm-project/vllm.git "
                                      "@ refs/pull/40727/head (commit 2f3f441f8c0f): 123 commits after 0.11.1rc2 (commit 2f3f441f8)")
    assert "vllm 0.11.1rc2.dev123+g2f3f441f8 (git @refs/pull/40727/head 2f3f441f8c0f)" in headlines.headline("vllm", snapshot(site.path))


def test_editable_checkout_branch_commit_remote_and_dirty_state(site, tmp_path):
    checkout = make_checkout(tmp_path / "src" / "vllm")
    torch_site(site)
    install_editable(site, checkout)
    build = collect([site.path])["vllm.build"]["value"]
    co = build["checkout"]
    assert build["origin"] == "editable" and co["path"] == str(checkout)
    assert co["branch"] == git(checkout, "rev-parse", "--abbrev-ref", "HEAD") == "dflash-fixes"
    assert co["commit"] == git(checkout, "rev-parse", "HEAD")
    assert co["remote_url"] == "https://github.com/someone/vllm.git"  # the token never leaves the machine
    assert co["upstream"] == "origin/dflash-fixes" and co["upstream_commit"] == git(checkout, "rev-parse", "HEAD~1")
    assert co["dirty"]["state"] == "clean" and git(checkout, "status", "--porcelain", "--untracked-files=no") == ""
    assert not co["worktree"] and not co.get("detached")

    (checkout / "csrc" / "ops.cu").write_text("// kernels, changed\n", encoding="utf-8")
    os.unlink(checkout / "vllm" / "spec.py")
    (checkout / "untracked.txt").write_text("x", encoding="utf-8")  # untracked: not "dirty" for a build
    co = collect([site.path])["vllm.build"]["value"]["checkout"]
    porcelain = sorted(line.split(maxsplit=1)[1] for line in git(checkout, "status", "--porcelain", "--untracked-files=no").splitlines())
    assert co["dirty"]["state"] == "dirty" and sorted(co["dirty"]["changed"]) == porcelain == ["csrc/ops.cu", "vllm/spec.py"]

    snap = snapshot(site.path)
    [finding] = findings(snap, "GD511")
    head = git(checkout, "rev-parse", "HEAD")
    assert (f"is an editable install of {checkout} (branch dflash-fixes, commit {head[:12]}, 2 modified tracked file(s), "
            "remote origin https://github.com/someone/vllm.git)") in finding.message
    assert f"git -C {shlex.quote(str(checkout))} status --short" in finding.fix.commands
    assert f"(editable, branch dflash-fixes @ {head[:12]}, dirty)" in headlines.headline("vllm", snap)


def test_same_content_with_new_timestamps_is_clean(site, tmp_path):
    checkout = make_checkout(tmp_path / "vllm")
    torch_site(site)
    install_editable(site, checkout)
    for path in (checkout / "csrc" / "ops.cu", checkout / "setup.py"):
        path.write_bytes(path.read_bytes())  # rewritten, same bytes: git hashes and finds no change
        os.utime(path, (2_000_000_000, 2_000_000_000))
    co = collect([site.path])["vllm.build"]["value"]["checkout"]
    assert co["dirty"]["state"] == "clean" and co["dirty"]["hashed"] >= 2
    assert git(checkout, "status", "--porcelain", "--untracked-files=no") == ""


def test_packed_refs_detached_head_and_index_v4(site, tmp_path):
    checkout = make_checkout(tmp_path / "vllm")
    git(checkout, "pack-refs", "--all")
    git(checkout, "update-index", "--index-version", "4")
    assert not (checkout / ".git" / "refs" / "heads" / "dflash-fixes").exists()
    torch_site(site)
    install_editable(site, checkout)
    co = collect([site.path])["vllm.build"]["value"]["checkout"]
    assert co["commit"] == git(checkout, "rev-parse", "HEAD") and co["dirty"]["state"] == "clean"
    (checkout / "setup.py").write_text("# changed\n", encoding="utf-8")
    assert collect([site.path])["vllm.build"]["value"]["checkout"]["dirty"]["changed"] == ["setup.py"]
    git(checkout, "checkout", "-q", "-f", "--detach", "HEAD~1")
    co = collect([site.path])["vllm.build"]["value"]["checkout"]
    assert co["detached"] and co["commit"] == git(checkout, "rev-parse", "HEAD") and "branch" not in co


def test_linked_worktree(site, tmp_path):
    checkout = make_checkout(tmp_path / "vllm")
    worktree = tmp_path / "vllm-wt"
    git(checkout, "worktree", "add", "-q", "-b", "pr-46104", str(worktree), "HEAD~1")
    assert (worktree / ".git").is_file()
    torch_site(site)
    install_editable(site, worktree)
    co = collect([site.path])["vllm.build"]["value"]["checkout"]
    assert co["worktree"] and co["branch"] == "pr-46104" and co["commit"] == git(worktree, "rev-parse", "HEAD")
    assert co["dirty"]["state"] == "clean"
    assert co["remote_url"] == "https://github.com/someone/vllm.git"  # from the shared config (commondir)


@pytest.mark.parametrize("case", ["not-json", "not-utf8", "no-url", "no-info", "list"])
def test_broken_direct_url_json(site, case):
    torch_site(site)
    info = vllm(site)
    content = {"not-json": b"{url: ", "not-utf8": b'{"url": "\xff"}', "no-url": b'{"dir_info": {}}',
               "no-info": b'{"url": "https://x"}', "list": b"[1, 2]"}[case]
    (info / "direct_url.json").write_bytes(content)
    build = collect([site.path])["vllm.build"]["value"]
    assert build["origin"] == "unknown" and build["error"]
    [finding] = findings(snapshot(site.path), "GD511")
    assert "from an unknown origin (" in finding.message


def test_broken_checkouts_never_crash(site, tmp_path):
    torch_site(site)
    cases = {}
    bad_gitfile = tmp_path / "gitfile"
    (bad_gitfile / "vllm").mkdir(parents=True)
    (bad_gitfile / ".git").write_text("gitdir: ../nowhere\n", encoding="utf-8")
    cases["gitfile"] = bad_gitfile
    unborn = tmp_path / "unborn"
    (unborn / "vllm").mkdir(parents=True)
    git(unborn, "init", "-q", "-b", "main")
    cases["unborn"] = unborn
    garbage = make_checkout(tmp_path / "garbage")
    (garbage / ".git" / "HEAD").write_bytes(b"\xff\xfe garbage")
    (garbage / ".git" / "index").write_bytes(b"DIRC\x00\x00\x00\x02\xff\xff\xff\xff")
    cases["garbage"] = garbage
    nogit = tmp_path / "nogit"
    (nogit / "vllm").mkdir(parents=True)
    cases["nogit"] = nogit
    expected = {"gitfile": ".git points to a missing directory", "unborn": "refs/heads/main has no commit yet",
                "garbage": "HEAD is unreadable", "nogit": "no .git"}
    for name, root in cases.items():
        target = SitePackages(tmp_path / f"site-{name}")
        torch_site(target)
        install_editable(target, root)
        co = collect([target.path])["vllm.build"]["value"]["checkout"]
        assert expected[name] in co.get("detail", ""), (name, co)
        outcome_ = outcome(snapshot(target.path), "GD511")
        assert outcome_.status == "fail" and "crashed" not in outcome_.reason, name


def test_index_reader_refuses_garbage(tmp_path):
    for data in (b"", b"XXXX", b"DIRC\x00\x00\x00\x07\x00\x00\x00\x00", b"DIRC\x00\x00\x00\x02\x00\x00\x00\x05"):
        (tmp_path / "index").write_bytes(data)
        with pytest.raises((ValueError, IndexError, struct.error)):
            gitfiles.read_index(str(tmp_path / "index"))
    state = gitfiles.dirty_state(str(tmp_path), str(tmp_path), deadline=1e18)
    assert state["state"] == "unknown" and "cannot read .git/index" in state["detail"]


def test_version_shapes():
    parts = probe.parse_version("0.23.1rc1.dev901+g2f3f441f8.d20260721")
    assert (parts["base"], parts["dev"], parts["commit"], parts["dirty_build_date"]) == ("0.23.1rc1", 901, "2f3f441f8", "20260721")
    assert probe.parse_version("0.20.1.dev5+g1234567.precompiled")["precompiled"] is True
    assert probe.parse_version("0.20.0+precompiled")["precompiled"] is True
    assert probe.parse_version("0.20.0+cu130")["cuda_tag"] == "cu130"
    assert probe.parse_version("0.33.0")["release"] is True
    assert probe.parse_version("garbage")["release"] is False
    assert probe.strip_credentials("https://user:tok@github.com/x") == "https://github.com/x"
    assert probe.strip_credentials("git@github.com:x/vllm.git") == "git@github.com:x/vllm.git"


# --- GD510 pins ---------------------------------------------------------------------------------
def test_gd510_reports_vllms_torch_pin_once(site):
    torch_site(site, version="2.10.0", cuda="13.0")
    vllm(site, version="0.20.0", requires=["torch==2.11.0", "flashinfer-python==0.6.8.post1", "xgrammar==0.1.21"])
    snap = snapshot(site.path)
    [finding] = findings(snap, "GD510")
    assert finding.message.startswith("vllm 0.20.0 (from a package index (PyPI or a wheel index)) is built against "
                                      "torch==2.11.0 (2.10.0 is installed); flashinfer-python==0.6.8.post1 (not installed): "
                                      "its compiled kernels")
    # torch through the one command GD501 gives too (vLLM's pin, the installed torch's CUDA 13.0: no driver with --gpu); the rest from PyPI.
    assert finding.fix.commands == [f"{PY} -m pip install --force-reinstall torch==2.11.0 --index-url https://download.pytorch.org/whl/cu130",
                                    f"{PY} -m pip install flashinfer-python==0.6.8.post1",
                                    f"{PY} -m pip install --force-reinstall vllm==0.20.0  # instead: let pip bring back its pins"]
    # GD503 still reports vLLM's pure-Python requirement, not the binary pins.
    [generic] = findings(snap, "GD503")
    assert generic.message == "vllm 0.20.0 requires xgrammar==0.1.21 (not installed)"


def test_gd510_editable_build_fix_rebuilds_the_checkout(site, tmp_path):
    checkout = make_checkout(tmp_path / "vllm")
    torch_site(site, version="2.10.0", cuda="13.0")
    install_editable(site, checkout, requires=("torch==2.11.0",))
    [finding] = findings(snapshot(site.path), "GD510")
    assert "an editable install of" in finding.message
    assert finding.fix.commands[1] == (f"cd {shlex.quote(str(checkout))} && {PY} -m pip install -e . --no-build-isolation"
                                       "  # instead: rebuild vLLM's kernels against the installed torch")


def test_gd510_passes_when_pins_are_met(site):
    torch_site(site, version="2.11.0", cuda="13.0")
    vllm(site, version="0.20.0", requires=["torch==2.11.0"])
    assert outcome(snapshot(site.path), "GD510").status == "pass"


# --- GD512 ignored settings ------------------------------------------------------------------------------
def test_gd512_attention_backend_env_ignored(site):
    torch_site(site)
    vllm(site, version="0.26.0")
    snap = snapshot(site.path, environ={"PATH": "", "VLLM_ATTENTION_BACKEND": "FLASH_ATTN", "VLLM_HOST_IP": "10.0.0.1"},
                    env={"VLLM_ATTENTION_BACKEND": "FLASH_ATTN"})
    assert snap.value("vllm.env_vars") == {"VLLM_ATTENTION_BACKEND": {"read_by_envs_py": False}, "VLLM_HOST_IP": {"read_by_envs_py": True}}
    [finding] = findings(snap, "GD512")
    assert finding.message.startswith("VLLM_ATTENTION_BACKEND=FLASH_ATTN is set, but this vLLM's vllm/envs.py does not read it")
    assert finding.fix.commands == ["unset VLLM_ATTENTION_BACKEND", "vllm serve MODEL --attention-backend FLASH_ATTN"]


def test_gd512_still_read_passes(site):
    torch_site(site)
    vllm(site, version="0.13.0", envs='environment_variables = {"VLLM_ATTENTION_BACKEND": lambda: None}\n')
    snap = snapshot(site.path, environ={"PATH": "", "VLLM_ATTENTION_BACKEND": "FLASH_ATTN"})
    assert outcome(snap, "GD512").status == "pass"


# --- GD513 precompiled --------------------------------------------------------------------------
def test_gd513_precompiled_build_with_kernel_changes(site, tmp_path):
    checkout = make_checkout(tmp_path / "vllm")
    torch_site(site)
    install_editable(site, checkout, version="0.23.1rc1.dev901+g2f3f441f8.precompiled")
    assert outcome(snapshot(site.path), "GD513").status == "pass"  # clean checkout
    (checkout / "csrc" / "ops.cu").write_text("// my kernel change\n", encoding="utf-8")
    [finding] = findings(snapshot(site.path), "GD513")
    assert "precompiled build, but the checkout modifies kernel sources (csrc/ops.cu)" in finding.message
    (checkout / "csrc" / "ops.cu").write_text("// kernels\n", encoding="utf-8")
    (checkout / "setup.py").write_text("# python-only change\n", encoding="utf-8")
    assert outcome(snapshot(site.path), "GD513").status == "pass"


# --- end to end ---------------------------------------------------------------------------------
def test_git_and_editable_vllm_end_to_end(tmp_path):
    """`gpudoctor check --python VENV` reports branch and commit for both kinds of non-release vLLM."""
    checkout = make_checkout(tmp_path / "src" / "vllm")
    editable_venv = make_venv(tmp_path / "editable")
    install_editable(SitePackages(venv_site(tmp_path / "editable")), checkout, requires=())
    git_venv = make_venv(tmp_path / "git")
    info = SitePackages(venv_site(tmp_path / "git")).dist("vllm", "0.11.1rc2.dev123+g2f3f441f8",
                                                          files={"vllm/__init__.py": "", "vllm/envs.py": ""})
    (info / "direct_url.json").write_text(json.dumps({"url": "https://github.com/vllm-project/vllm",
                                                      "vcs_info": {"vcs": "git", "commit_id": SHA, "requested_revision": "main"}}), encoding="utf-8")
    head = git(checkout, "rev-parse", "HEAD")
    for python, expected in ((editable_venv, f"branch dflash-fixes, commit {head[:12]}, clean"),
                             (git_venv, f"from git https://github.com/vllm-project/vllm @ main (commit {SHA[:12]})")):
        proc = gd("check", "--python", str(python), "--format", "json", timeout=180)
        [finding] = doc_findings(json.loads(proc.stdout), "GD511")
        assert expected in finding["message"], finding["message"]
        text = gd("check", "--python", str(python), "--color", "never", timeout=180).stdout
        assert "GD511 vllm-development-build" in text and (head[:12] if python == editable_venv else SHA[:12]) in text


@pytest.mark.parametrize("rule_id", ["GD510", "GD511", "GD512", "GD513", "GD514"])
def test_explain_prints_why_fix_and_sources(rule_id):
    proc = subprocess.run([sys.executable, "-m", "gpudoctor", "explain", rule_id], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"{rule_id} vllm-")
    for heading in ("## Why", "## Fix", "## References"):
        assert heading in proc.stdout
    assert "https://" in proc.stdout.split("## References")[1]  # public sources, not research notes
