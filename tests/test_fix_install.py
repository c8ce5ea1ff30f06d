"""Issue 29: `gpudoctor fix` replaces and installs with the environment's own pip, or changes nothing.

Real venvs (with pip) and real wheels built here (tests/fakes/pip_venvs.py's ``build_wheel``), served
to the venv's pip through its own configuration (``PIP_FIND_LINKS`` / ``PIP_NO_INDEX``, what a
user's pip.conf would say): gpudoctor adds nothing to it. ``corelib`` plays torch, ``ext`` an
extension built for one corelib release (its exact pin), as torchvision pins torch. Every failure
must leave the environment byte-identical (the tree and every RECORD hash).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from gpudoctor import actions, runner, stack_fix, stack_install, stack_space
from gpudoctor.probes import pip_running

from fakes.pip_venvs import base_venv, build_wheel, pip_install, python_of, record_state, site_packages, tree  # noqa: F401 (a fixture)


@pytest.fixture
def venv(base_venv, tmp_path) -> Path:  # noqa: F811 (base_venv: the module-scoped fixture of tests/fakes/pip_venvs.py)
    where = tmp_path / "venv"
    subprocess.run(["cp", "-a", str(base_venv), str(where)], check=True)
    return where


@pytest.fixture
def wheels(tmp_path, monkeypatch) -> Path:
    """A find-links folder as the environment's only index (its pip configuration, from the environment)."""
    where = tmp_path / "wheels"
    where.mkdir()
    monkeypatch.setenv("PIP_FIND_LINKS", str(where))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.delenv("PIP_INDEX_URL", raising=False)
    return where


def corelib(where: Path, version: str) -> Path:
    return build_wheel(where, "corelib", version, {"corelib/__init__.py": f"VERSION = {version!r}\n"})


def ext(where: Path, version: str, core: str, body: str = "") -> Path:
    text = body or f"import corelib\nassert corelib.VERSION == {core!r}, 'ext was built for corelib {core}'\n"
    return build_wheel(where, "ext", version, {"ext/__init__.py": text, "ext/ops.py": "NMS = 1\n"}, requires=[f"corelib=={core}"])


def broken_env(venv, wheels, tmp_path):
    """corelib 2.0 installed; ext 1.0 built for corelib 1.0 (installed --no-deps): `import ext` fails."""
    old = tmp_path / "old"
    old.mkdir()
    pip_install(venv, corelib(old, "2.0"), ext(old, "1.0", "1.0"))
    subprocess.run([python_of(venv), "-c", "import corelib"], check=True)  # its __pycache__ too
    return site_packages(venv)


def replace_action(venv, **kw) -> actions.StackAction:
    return actions.StackAction("replace", "ext", "1.0", python_of(venv), "GD508", "ext 1.0 was built for corelib 1.0",
                               ("ext!=1.0", "corelib==2.0"), **kw)


def folders(site: Path):
    return sorted(str(p.relative_to(site)) for p in site.rglob("*") if p.is_dir() and "__pycache__" not in p.parts)


def records_ok(site: Path) -> None:
    for info in site.glob("*.dist-info"):
        if (info / "RECORD").exists():
            assert set(record_state(site, info.name).values()) <= {"ok", "exists"}, info.name


def applied(action, run=runner.run, **kw):
    seen = stack_install.check(action, runner.run)
    assert seen.go, seen.reason
    return stack_install.apply(action, seen.state or {}, run, **kw)


# --- the action is data; its command is the finding's ----------------------------------------------
def test_replace_action_argv_and_index_note():
    action = actions.StackAction("replace", "torchvision", "0.27.0", "/v/bin/python", "GD508", "why",
                                 ("torchvision!=0.27.0", "torch==2.13.0"), "https://download.pytorch.org/whl/cpu")
    assert action.command == ("/v/bin/python -m pip install --extra-index-url https://download.pytorch.org/whl/cpu "
                              "'torchvision!=0.27.0' torch==2.13.0")
    assert "plus https://download.pytorch.org/whl/cpu" in action.index_note
    assert action.to_json()["requirements"] == ["torchvision!=0.27.0", "torch==2.13.0"]
    replaced = actions.StackAction("replace", "torchvision", "0.28.0", "/v/bin/python", "GD508", "why", ("torchvision==0.28.0",),
                                   "https://download.pytorch.org/whl/cpu", True, ("--force-reinstall", "--no-deps"))
    assert replaced.argv[3:8] == ["install", "--force-reinstall", "--no-deps", "--index-url", "https://download.pytorch.org/whl/cpu"]
    assert "instead of the environment's index" in replaced.index_note
    assert actions.StackAction("uninstall", "x", "1", "/v/bin/python", "GD401", "").index_note.startswith("the environment's own")
    with pytest.raises(ValueError):
        _ = actions.StackAction("install", "x", "1", "/p", "GD1", "").argv  # nothing to install


def test_gd508_fix_command_is_the_replace_actions_command(tmp_path):
    """One source: GD508's command for an extension built for another torch is its action's command."""
    from cases.torch_extensions import site
    from fakes.torch_extensions import CHECK, OLD_ABI

    from gpudoctor import registry
    from gpudoctor.engine import run_rules
    from gpudoctor.snapshot import Snapshot

    built = site(("badext", "0.3+cu128torch2.7cxx11abiFALSE", [OLD_ABI, CHECK], ("torch==2.7.0",)))(tmp_path)
    snap = built if isinstance(built, Snapshot) else Snapshot.from_json(built)
    [finding] = run_rules(snap, registry.select(registry.load_rules(), ["GD508"])).findings
    [action] = finding.fix.actions
    assert finding.fix.commands == [action.command]
    assert (action.kind, action.dist, action.version, action.rule) == ("replace", "badext", "0.3+cu128torch2.7cxx11abiFALSE", "GD508")
    assert action.requirements == ("badext!=0.3+cu128torch2.7cxx11abiFALSE", "torch==2.11.0")
    assert action.index_url == "https://download.pytorch.org/whl/cpu" and not action.replace_index  # the torch is 2.11.0+cpu


# --- the safe apply, for real ------------------------------------------------------------------------
def test_replace_installs_the_build_for_the_installed_core_and_imports(venv, wheels, tmp_path):
    site = broken_env(venv, wheels, tmp_path)
    assert subprocess.run([python_of(venv), "-c", "import ext"], capture_output=True).returncode != 0
    ext(wheels, "1.1", "2.0")
    corelib(wheels, "2.0")
    ext(wheels, "1.2", "3.0")  # the newest, but built for another corelib: pip must not pick it
    result = applied(replace_action(venv))
    assert result.status == stack_fix.DONE, result.detail
    assert result.detail.startswith("installed ext 1.1; verified in a child of")
    subprocess.run([python_of(venv), "-c", "import ext, ext.ops"], check=True)
    assert not list(site.glob("ext-1.0.dist-info")) and not list(site.parent.glob(stack_fix.STASH_PREFIX + "*"))
    records_ok(site)


def test_a_replacement_that_does_not_import_is_rolled_back_byte_identical(venv, wheels, tmp_path):
    site = broken_env(venv, wheels, tmp_path)
    before = tree(site)
    ext(wheels, "1.1", "2.0", body="raise ImportError('operator ext::nms does not exist')\n")
    corelib(wheels, "2.0")
    result = applied(replace_action(venv))
    assert result.status == stack_fix.RESTORED, result.detail
    assert "import ext fails afterwards: ImportError: operator ext::nms does not exist" in result.detail
    assert tree(site) == before
    records_ok(site)


def test_pip_failing_half_way_is_undone(venv, wheels, tmp_path):
    """pip removed ext 1.0, wrote ext 1.1, then failed (an I/O error; a real full disk is tests/real/test_real_disk_full.py's):
    what it added goes, what it removed comes back."""
    site = broken_env(venv, wheels, tmp_path)
    before = tree(site)
    ext(wheels, "1.1", "2.0")
    corelib(wheels, "2.0")

    def dying_pip(argv, **kw):
        done = runner.run(argv, **kw)
        assert done.returncode == 0 and (site / "ext-1.1.dist-info").is_dir()
        (site / "ext-1.1.dist-info" / "RECORD").unlink()  # a kill before pip wrote the RECORD
        return runner.run([argv[0], "-c", "import sys; sys.exit('ERROR: Could not install packages due to an OSError: [Errno 5] Input/output error')"], **kw)

    dirs = folders(site)
    result = applied(replace_action(venv), pip_run=dying_pip)
    assert result.status == stack_fix.RESTORED and "pip failed (ERROR: Could not install packages due to an OSError: [Errno 5]" in result.detail
    assert tree(site) == before and folders(site) == dirs  # ext/ stays (it was there), nothing new is left empty
    records_ok(site)


def test_ctrl_c_after_pip_puts_everything_back(venv, wheels, tmp_path):
    site = broken_env(venv, wheels, tmp_path)
    before = tree(site)
    ext(wheels, "1.1", "2.0")
    corelib(wheels, "2.0")

    def interrupt():
        assert (site / "ext-1.1.dist-info").is_dir()
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        applied(replace_action(venv), after_pip=interrupt)
    assert tree(site) == before and not list(site.parent.glob(stack_fix.STASH_PREFIX + "*"))


def test_unresolvable_and_unreachable_change_nothing(venv, wheels, tmp_path, monkeypatch):
    site = broken_env(venv, wheels, tmp_path)
    before = tree(site)
    # no ext built for corelib 2.0 anywhere: pip's own words, nothing touched
    result = applied(replace_action(venv))
    assert result.status == stack_fix.REFUSED and "pip cannot install ext!=1.0 corelib==2.0 here" in result.detail
    assert "No matching distribution found for ext!=1.0" in result.detail and "nothing was changed" in result.detail
    # an index that refuses connections (127.0.0.1 port 9): said, and nothing touched, even though find-links has a wheel
    ext(wheels, "1.1", "2.0")
    corelib(wheels, "2.0")
    monkeypatch.delenv("PIP_NO_INDEX")
    started = time.monotonic()
    result = applied(replace_action(venv, index_url="http://127.0.0.1:9/simple"))
    assert result.status == stack_fix.REFUSED and "the package index cannot be reached" in result.detail, result.detail
    assert "plus http://127.0.0.1:9/simple" in result.detail and time.monotonic() - started < 120
    assert tree(site) == before


def test_another_pip_on_the_same_environment_is_refused(venv, wheels, tmp_path):
    broken_env(venv, wheels, tmp_path)
    pip = str(venv / "bin" / "pip")
    busy = subprocess.Popen(["bash", "-c", f"exec -a {pip} sleep 60"])  # a process whose argv[0] is this venv's pip
    try:
        deadline = time.monotonic() + 10
        while not pip_running.pips_on(str(venv)) and time.monotonic() < deadline:
            time.sleep(0.05)
        seen = stack_install.check(replace_action(venv), runner.run)
        assert seen.status == stack_fix.REFUSED and f"another pip is changing this environment (PID {busy.pid}: {pip}" in seen.reason
        assert stack_fix.check(actions.StackAction("uninstall", "ext", "1.0", python_of(venv), "GD401", ""), runner.run).status == stack_fix.REFUSED
    finally:
        busy.kill()
        busy.wait()
    assert stack_install.check(replace_action(venv), runner.run).go


def test_pip_command_lines_are_recognised():
    prefix = "/srv/env"
    assert pip_running.is_pip_on(["/srv/env/bin/python", "-m", "pip", "install", "x"], prefix)
    assert pip_running.is_pip_on(["/srv/env/bin/python3", "/srv/env/bin/pip", "install", "x"], prefix)
    assert pip_running.is_pip_on(["/usr/bin/python3", "-m", "pip", "--python", "/srv/env/bin/python", "install", "x"], prefix)
    assert pip_running.is_pip_on(["/usr/bin/pip3", "install", "--prefix=/srv/env", "x"], prefix)
    assert not pip_running.is_pip_on(["/srv/other/bin/python", "-m", "pip", "install", "x"], prefix)
    assert not pip_running.is_pip_on(["/srv/env/bin/python", "-m", "vllm.entrypoints.openai.api_server"], prefix)
    assert not pip_running.is_pip_on(["/srv/env/bin/python", "-c", "import pip"], prefix)


def test_read_only_site_packages_is_refused(venv, wheels, tmp_path):
    """A real read-only mount (a bind mount remounted ro in a private mount namespace): access(2) says EROFS, even to root."""
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare(1)")
    site = broken_env(venv, wheels, tmp_path)
    code = ("import json, sys\nfrom gpudoctor import actions, runner, stack_install\n"
            f"a = actions.StackAction('replace', 'ext', '1.0', {python_of(venv)!r}, 'GD508', '', ('ext!=1.0', 'corelib==2.0'))\n"
            "s = stack_install.check(a, runner.run)\nprint(json.dumps([s.status, s.reason]))\n")
    done = subprocess.run(["unshare", "-m", "sh", "-c", f"mount --bind {site} {site} && mount -o remount,bind,ro {site} && "
                           f"exec {sys.executable} -c \"$0\"", code], capture_output=True, text=True, timeout=120)
    if done.returncode != 0 and "mount" in done.stderr:
        pytest.skip(f"no private mount namespace here: {done.stderr.strip()[-200:]}")
    status, reason = json.loads(done.stdout.strip().splitlines()[-1])
    assert status == stack_fix.REFUSED and f"{site} is not writable by you (read-only" in reason, done.stderr


def test_the_next_fix_removes_what_a_killed_install_added(venv, wheels, tmp_path):
    """A fix killed after pip (no handler ran): the stash's manifest lists what was there, so the
    next `fix` removes what pip added and puts back what it removed."""
    site = broken_env(venv, wheels, tmp_path)
    before = tree(site)
    ext(wheels, "1.1", "2.0")
    corelib(wheels, "2.0")
    seen = stack_install.check(replace_action(venv), runner.run)
    state = seen.state or {}
    roots = stack_install._roots(state)
    stash = stack_fix.Stash(str(state["purelib"]), state["files"], "replace ext 1.0",
                            listing={"roots": roots, "before": sorted(stack_install.listing(roots))})
    subprocess.run(replace_action(venv).argv, check=True, capture_output=True, timeout=300)
    assert tree(site) != before
    [left] = stack_fix.leftovers([str(site)])
    assert left.listing and left.restore() == []
    assert tree(site) == before and not os.path.exists(stash.root)
    records_ok(site)


def test_a_new_package_is_removed_with_its_folders_when_the_install_fails(venv, wheels, tmp_path):
    """An install of a distribution that was not there (a missing requirement): on failure its files and
    the folders pip made for them go, so the folder tree is as it was too."""
    site = broken_env(venv, wheels, tmp_path)
    build_wheel(wheels, "newdep", "1.0", {"newdep/__init__.py": "", "newdep/sub/deep/mod.py": "X = 1\n"})
    before, dirs = tree(site), folders(site)
    action = actions.StackAction("install", "newdep", "", python_of(venv), "GD503", "test", ("newdep==1.0",))

    def interrupt():
        assert (site / "newdep" / "sub" / "deep" / "mod.py").exists()
        raise RuntimeError("stopped after pip")

    result = applied(action, after_pip=interrupt)
    assert result.status == stack_fix.RESTORED and "RuntimeError: stopped after pip" in result.detail, result.detail
    assert tree(site) == before and folders(site) == dirs


def test_the_plan_shows_what_pip_would_download_and_how_big(venv, wheels, tmp_path):
    """`fix --format json` and the text plan: pip's dry run per action, each wheel's size (a find-links
    file: stat'ed, its unpacked size read from its zip directory) and the total; nothing changes."""
    import io

    from gpudoctor import fix as fix_actions
    from gpudoctor.commands import fix as fix_command
    from gpudoctor.commands.common import IO

    site = broken_env(venv, wheels, tmp_path)
    before = tree(site)
    new_ext, new_core = ext(wheels, "1.1", "2.0"), corelib(wheels, "2.0")
    planned = [fix_actions.Planned(replace_action(venv), ["GD508 ext"])]
    out = io.StringIO()
    code = fix_command._print_plan(planned, lambda a: fix_command._verdict(fix_actions.Machine(), a), IO({}, out, io.StringIO()))
    plan = json.loads(out.getvalue())
    [item] = plan["plan"]
    assert code == 1 and item["verdict"] == "go" and plan["changed"] is False
    [got] = item["download"]["items"]  # corelib 2.0 is installed already: only ext 1.1 is fetched
    assert (got["name"], got["version"], got["url"]) == ("ext", "1.1", new_ext.as_uri())
    assert got["download_bytes"] == new_ext.stat().st_size
    assert got["unpacked_bytes"] == sum(i.file_size for i in zipfile.ZipFile(new_ext).infolist())
    assert plan["download_bytes"] == new_ext.stat().st_size and plan["download_unknown"] == 0 and new_core.exists()
    said: list = []
    fix_command._say_downloads([(1, replace_action(venv))], said.append)
    assert said == ["download (pip resolves each change with --dry-run: nothing changes):",
                    f"  1. ext 1.1 ({stack_space.human(new_ext.stat().st_size)}, {stack_space.human(got['unpacked_bytes'])} unpacked); "
                    f"download {stack_space.human(new_ext.stat().st_size)} in total"]
    out = io.StringIO()
    fix_command._print_plan(planned, lambda a: fix_command._verdict(fix_actions.Machine(), a), IO({}, out, io.StringIO()), resolve=False)
    assert "download" not in json.loads(out.getvalue())["plan"][0] and json.loads(out.getvalue())["download_bytes"] is None
    assert tree(site) == before
