"""Issue 29: `gpudoctor fix` repairs the Python stack: typed stack actions, the plan, the safe apply.

Real venvs (``python -m venv``, with pip) and real wheels built here (a zip with METADATA, WHEEL
and a RECORD of SHA-256 hashes, as any build backend writes them) installed by the venv's own pip
with ``--no-index``; gpudoctor's own rules decide the plan and the venv's own pip carries it out.
The rollback is proven byte-identical: every RECORD hash is checked after the environment is
put back.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import sys
from pathlib import Path
from typing import List

import pytest

from gpudoctor import actions, fix, runner, stack_fix
from gpudoctor.probes import dist_state

from fakes.pip_venvs import base_venv, build_wheel, pip_install, python_of, record_state, site_packages, tree  # noqa: F401 (a fixture)

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def venv(base_venv, tmp_path) -> Path:  # noqa: F811 (base_venv: the module-scoped fixture of tests/fakes/pip_venvs.py)
    where = tmp_path / "venv"
    subprocess.run(["cp", "-a", str(base_venv), str(where)], check=True)
    # a copied venv's scripts name the old path in their shebang; python -m pip does not care
    return where


FA4_FILES = {
    "flash_attn/cute/__init__.py": '"""FlashAttention-4 (CuTe DSL)."""\n',
    "flash_attn/cute/interface.py": "def flash_attn_func(*args):\n    pass\n",
    "flash_attn/cute/flash_fwd_sm100.py": "# SM100 forward kernel\n",
}


def fa4_wheel(tmp_path: Path) -> Path:
    return build_wheel(tmp_path, "flash-attn-4", "4.0.0b36", FA4_FILES, requires=["nvidia-cutlass-dsl>=4.4.1"])


def gpudoctor(*args: str, stdin=subprocess.DEVNULL) -> subprocess.CompletedProcess:
    env = dict(os.environ, NO_COLOR="1")
    return subprocess.run([sys.executable, "-m", "gpudoctor", *args], capture_output=True, text=True, timeout=300,
                          cwd=str(REPO), env=env, stdin=stdin)


# --- the action is data, and the finding's command is the action's ------------------------------
def test_stack_action_is_data_and_its_command_is_quoted():
    action = actions.StackAction("uninstall", "flash-attn-4", "4.0.0b36", "/opt/my venv/bin/python", "GD401", "why")
    assert action.command == "'/opt/my venv/bin/python' -m pip uninstall -y flash-attn-4"
    assert action.to_json() == {"type": "stack", "kind": "uninstall", "dist": "flash-attn-4", "version": "4.0.0b36",
                                "python": "/opt/my venv/bin/python", "rule": "GD401", "why": "why",
                                "command": "'/opt/my venv/bin/python' -m pip uninstall -y flash-attn-4"}
    with pytest.raises(ValueError):
        _ = actions.StackAction("install", "x", "1", "/p", "GD1", "").argv


def test_plan_puts_the_environment_last():
    class F:
        def __init__(self, rule_id, subject, *acts):
            self.rule_id, self.subject, self.fix = rule_id, subject, type("Fix", (), {"actions": list(acts)})()

    stack = actions.StackAction("uninstall", "flash-attn-4", "4.0.0b36", "/v/bin/python", "GD401", "why")
    same = actions.StackAction("uninstall", "flash_attn_4", "4.0.0b36", "/v/bin/python", "GD401", "why")
    stop = actions.StopProcess(10, 1, 0)
    planned = fix.plan([F("GD401", "flash-attn-4 / GPU 0", stack), F("GD401", "flash-attn-4 / GPU 1", same), F("GD601", "PID 10", stop)])
    assert [p.action for p in planned] == [stop, stack]  # one action per cause, however many GPUs name it
    assert planned[1].rules == ["GD401 flash-attn-4 / GPU 0", "GD401 flash-attn-4 / GPU 1"]


def _gd401(tmp_path, *installs, gpu="sm_86"):
    from fakes.flash_attn_trees import snapshot
    from fakes.site_packages import SitePackages

    from gpudoctor import registry
    from gpudoctor.engine import run_rules

    packages = SitePackages(tmp_path / "site-packages")
    for install in installs:
        install(packages)
    snap = snapshot(packages.path, gpu=gpu, environ={"PATH": "/nonexistent"})
    return [f for f in run_rules(snap, registry.select(registry.load_rules(), ["GD401"])).findings]


def test_gd401_fix_command_is_the_actions_command(tmp_path):
    from fakes.flash_attn_trees import fa2, fa4, sglang, torch_site

    [finding] = _gd401(tmp_path / "alone", torch_site, fa4)
    [action] = finding.fix.actions
    assert (action.kind, action.dist, action.version, action.rule) == ("uninstall", "flash-attn-4", "4.0.0b36", "GD401")
    assert finding.fix.commands[0] == action.command == f"{action.python} -m pip uninstall -y flash-attn-4"
    # FA2 sharing flash_attn/cute with FA4: removing FA4 alone takes FA2's files too, so no action (the
    # command there removes both and reinstalls FA2, a repair this slice does not carry out)
    [clash] = _gd401(tmp_path / "clash", torch_site, fa2, fa4)
    assert clash.fix.actions == [] and "flash-attn  # both" in clash.fix.commands[0]
    # SGLang requires flash-attn-4: no finding, so no action
    assert _gd401(tmp_path / "sglang", torch_site, fa4, sglang, gpu="A100") == []


# --- the plan, on a real venv --------------------------------------------------------------------
def test_plan_uninstalls_fa4_on_an_a100_with_the_venvs_own_pip(venv, tmp_path):
    pip_install(venv, fa4_wheel(tmp_path))
    before = tree(site_packages(venv))
    done = gpudoctor("fix", "--python", python_of(venv), "--gpu", "A100", "--format", "json", "--select", "GD401")
    assert done.returncode == 1, done.stderr
    [item] = json.loads(done.stdout)["plan"]
    assert item["command"] == f"{python_of(venv)} -m pip uninstall -y flash-attn-4"
    assert (item["kind"], item["dist"], item["version"], item["rule"], item["verdict"]) == ("uninstall", "flash-attn-4", "4.0.0b36", "GD401", "go")
    assert item["findings"] == ["GD401 flash-attn-4 / GPU 0"] and "no installed engine requires it" in item["why"]
    # the finding's own fix text names the very same command (one source)
    check = gpudoctor("check", "--python", python_of(venv), "--gpu", "A100", "--format", "json", "--select", "GD401")
    [finding] = [f for f in json.loads(check.stdout)["findings"] if f["id"] == "GD401"]
    assert finding["fix"]["commands"][0] == item["command"] and finding["fix"]["actions"][0]["command"] == item["command"]
    # without a terminal: a dry run that lists what, why, which finding and the command, and changes nothing
    dry = gpudoctor("fix", "--python", python_of(venv), "--gpu", "A100", "--select", "GD401")
    assert dry.returncode == 1
    assert f"uninstall flash-attn-4 4.0.0b36 (with {python_of(venv)}'s pip)   [GD401 flash-attn-4 / GPU 0]" in dry.stdout
    assert f"command: {python_of(venv)} -m pip uninstall -y flash-attn-4" in dry.stdout and "why: FlashAttention-4" in dry.stdout
    assert "dry run (stdin is not a terminal): nothing was done" in dry.stdout
    assert tree(site_packages(venv)) == before


def test_no_uninstall_of_what_sglang_requires(venv, tmp_path):
    sglang = build_wheel(tmp_path, "sglang", "0.5.23", {"sglang/__init__.py": ""}, requires=["flash-attn-4>=4.0.0b18"])
    pip_install(venv, fa4_wheel(tmp_path), sglang)
    done = gpudoctor("fix", "--python", python_of(venv), "--gpu", "A100", "--format", "json", "--select", "GD401")
    assert json.loads(done.stdout)["plan"] == [] and done.returncode == 0, done.stdout
    # and if a stale plan asked anyway, the live check refuses it
    action = actions.StackAction("uninstall", "flash-attn-4", "4.0.0b36", python_of(venv), "GD401", "stale")
    seen = stack_fix.check(action, runner.run)
    assert seen.status == stack_fix.REFUSED and "required by sglang 0.5.23 (flash-attn-4>=4.0.0b18)" in seen.reason


# --- the safe apply ------------------------------------------------------------------------------
def _action(venv: Path, dist: str = "flash-attn-4", version: str = "4.0.0b36") -> actions.StackAction:
    return actions.StackAction("uninstall", dist, version, python_of(venv), "GD401", "test")


def test_apply_uninstalls_and_verifies(venv, tmp_path):
    pip_install(venv, fa4_wheel(tmp_path))
    done = gpudoctor("fix", "--python", python_of(venv), "--gpu", "A100", "--yes", "--select", "GD401")
    assert f"done: uninstall flash-attn-4 4.0.0b36 (with {python_of(venv)}'s pip): uninstalled flash-attn-4 4.0.0b36; verified" in done.stdout, done.stdout
    assert "re-check: clean" in done.stdout and done.returncode == 0
    site = site_packages(venv)
    assert not [p for p in (site / "flash_attn").rglob("*") if p.is_file()] and not list(site.glob("flash_attn_4-*"))  # pip leaves the empty folder
    assert not list(site.parent.glob(stack_fix.STASH_PREFIX + "*"))  # the stash is gone once verified


def test_ctrl_c_after_pip_puts_everything_back_byte_identical(venv, tmp_path):
    pip_install(venv, fa4_wheel(tmp_path))
    site = site_packages(venv)
    subprocess.run([python_of(venv), "-c", "import flash_attn.cute.interface"], check=True)  # __pycache__ too
    before = tree(site)
    seen = stack_fix.check(_action(venv), runner.run)
    assert seen.go, seen.reason

    def interrupt():
        assert not (site / "flash_attn" / "cute").exists()  # pip really removed it
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        stack_fix.apply(_action(venv), seen.state or {}, runner.run, after_pip=interrupt)
    assert tree(site) == before
    assert set(record_state(site, "flash_attn_4-4.0.0b36.dist-info").values()) <= {"ok", "exists"}
    assert not list(site.parent.glob(stack_fix.STASH_PREFIX + "*"))


def test_a_change_that_breaks_an_import_is_rolled_back(venv, tmp_path):
    """Two distributions share one package (as FA2 and FA4 share flash_attn/): removing one breaks
    the other's import, so the verification fails and the files come back."""
    shared = build_wheel(tmp_path, "shared-core", "1.0", {"sharedpkg/__init__.py": "from sharedpkg import extra\n"})
    extra = build_wheel(tmp_path, "shared-extra", "1.0", {"sharedpkg/extra.py": "VALUE = 1\n"})
    pip_install(venv, shared, extra)
    site = site_packages(venv)
    before = tree(site)
    action = _action(venv, "shared-extra", "1.0")
    seen = stack_fix.check(action, runner.run)
    assert seen.go and stack_fix.top_levels(seen.state or {}) == ["sharedpkg"]
    result = stack_fix.apply(action, seen.state or {}, runner.run)
    assert result.status == stack_fix.RESTORED, result.detail
    assert "import sharedpkg fails afterwards (it imported before)" in result.detail and "SHA-256 checked" in result.detail
    assert {k: v for k, v in tree(site).items() if "__pycache__" not in k} == {k: v for k, v in before.items() if "__pycache__" not in k}
    assert set(record_state(site, "shared_extra-1.0.dist-info").values()) <= {"ok", "exists"}


def test_pip_dying_half_way_changes_nothing(venv, tmp_path):
    pip_install(venv, fa4_wheel(tmp_path))
    site = site_packages(venv)
    before = tree(site)
    seen = stack_fix.check(_action(venv), runner.run)
    half = str(site / "flash_attn" / "cute" / "interface.py")

    def failing_pip(argv, **kw):
        """A pip that removed one file and then died (a full disk, a kill): its own rollback never ran."""
        if argv[1:4] == ["-m", "pip", "uninstall"]:
            return runner.run([argv[0], "-c", f"import os, sys; os.remove({half!r}); sys.exit('ERROR: simulated failure')"], **kw)
        return runner.run(argv, **kw)

    result = stack_fix.apply(_action(venv), seen.state or {}, failing_pip)
    assert result.status == stack_fix.RESTORED and "pip failed (ERROR: simulated failure)" in result.detail
    assert tree(site) == before


def test_refusals(venv, tmp_path):
    pip_install(venv, fa4_wheel(tmp_path))
    assert stack_fix.check(_action(venv, version="4.0.0b18"), runner.run).reason == \
        "flash-attn-4 is now 4.0.0b36, not the 4.0.0b18 that was checked"
    assert stack_fix.check(_action(venv, dist="flash-attn"), runner.run).status == stack_fix.ALREADY
    assert "not an executable interpreter" in stack_fix.check(
        actions.StackAction("uninstall", "x", "1", str(tmp_path / "nope"), "GD401", ""), runner.run).reason
    # the doctor's own interpreter's base (a system Python): refused without --yes
    base = os.path.realpath(os.path.join(sys.base_prefix, "bin", "python3"))
    state = dist_state.read(base, "pip", run=runner.run)
    if state.get("found") and not state.get("venv"):
        system = actions.StackAction("uninstall", "pip", state["version"], base, "GD401", "")
        assert "is a system Python" in stack_fix.check(system, runner.run).reason
    if os.geteuid() == 0:
        return  # root writes anywhere: the read-only case needs an ordinary user
    os.chmod(site_packages(venv), 0o555)
    try:
        assert "is not writable by you" in stack_fix.check(_action(venv), runner.run).reason
    finally:
        os.chmod(site_packages(venv), 0o755)


def test_dist_state_reads_record_files_and_requirers(venv, tmp_path):
    pip_install(venv, fa4_wheel(tmp_path))
    state = dist_state.read(python_of(venv), "FLASH_ATTN_4", run=runner.run)
    site = str(site_packages(venv))
    assert state["found"] and state["version"] == "4.0.0b36" and state["venv"] is True and state["writable"] is True
    files: List[str] = state["files"]
    assert os.path.join(site, "flash_attn", "cute", "interface.py") in files
    assert os.path.join(site, "flash_attn_4-4.0.0b36.dist-info", "RECORD") in files
    assert dist_state.read(str(tmp_path / "missing-python"), "x", run=runner.run)["error"]


def test_the_next_fix_restores_what_a_killed_one_left(venv, tmp_path):
    """A fix killed after pip removed the files (SIGKILL: no handler ran) leaves its stash; the next
    `fix` lists it, a dry run keeps it, and `--yes` puts every file back byte-identical."""
    pip_install(venv, fa4_wheel(tmp_path))
    site = site_packages(venv)
    before = tree(site)
    seen = stack_fix.check(_action(venv), runner.run)
    stash_fix = stack_fix.Stash(str(site), (seen.state or {})["files"], "flash-attn-4 4.0.0b36")
    subprocess.run([python_of(venv), "-m", "pip", "uninstall", "-q", "-y", "flash-attn-4"], check=True, capture_output=True)
    assert tree(site) != before
    plan = gpudoctor("fix", "--python", python_of(venv), "--gpu", "A100", "--select", "GD601", "--format", "json")
    [left] = json.loads(plan.stdout)["leftover_stashes"]
    assert left == {"stash": stash_fix.root, "label": "flash-attn-4 4.0.0b36", "files": len(stash_fix.entries)} and plan.returncode == 1
    dry = gpudoctor("fix", "--python", python_of(venv), "--gpu", "A100", "--select", "GD601")
    assert "restore flash-attn-4 4.0.0b36 (" in dry.stdout and "dry run: nothing was restored" in dry.stdout and dry.returncode == 1
    done = gpudoctor("fix", "--python", python_of(venv), "--gpu", "A100", "--select", "GD601", "--yes")
    assert "done: restore flash-attn-4 4.0.0b36" in done.stdout and "every file put back, SHA-256 checked" in done.stdout, done.stdout
    assert done.returncode == 0
    assert tree(site) == before and not os.path.exists(stash_fix.root)
    assert set(record_state(site, "flash_attn_4-4.0.0b36.dist-info").values()) <= {"ok", "exists"}
    # a stash cut short before its manifest (pip never ran) is simply removed
    half = Path(tempfile.mkdtemp(prefix=stack_fix.STASH_PREFIX, dir=str(site.parent)))
    assert stack_fix.leftovers([str(site)]) == [] and not half.exists()
