"""Issue 29's "Must show": real stacks broken the way users break them, repaired for real (or refused).

Each venv is one the real tier already builds (tests/realenv.py: CPU torch 2.13.0 from PyPI, real
torchvision / flash-attn-4 / SGLang / vLLM wheels), copied with hard links (pip unlinks before it
writes and renames what it removes: the cached original is never touched) and given pip from
the wheel ``ensurepip`` bundles (offline). gpudoctor plans with its own rules, the venv's own pip acts, against the
indexes this machine's pip configuration names (PyPI and the local mirrors; PyTorch's own index is
not reachable from here). Each case writes its before/after row (findings, exit code, import test)
to the test cache's ``oracle/fix-table/``.

Downloads a cold cache adds: lark 1.2.1 and 1.2.2 (about 0.2 MB, pip's own cache); the torchvision
0.27.0/0.28.0 and CPU torch wheels, flash-attn-4 and SGLang's sparse forms are the ones
tests/real/test_real_torch_links.py and test_real_sglang.py already fetch.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
import zipfile
from pathlib import Path
from types import SimpleNamespace
from typing import Dict, List

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import realenv  # noqa: E402
from test_real_torch_links import torch_venv  # noqa: E402  (CPU torch 2.13.0 with its requirements, as that table has it)

from gpudoctor import actions, runner, stack_fix, stack_install  # noqa: E402

pytestmark = pytest.mark.real

ROWS = realenv.CACHE / "oracle" / "fix-table"
TORCHVISION_NMS = "operator torchvision::nms does not exist"


# --- helpers --------------------------------------------------------------------------------------
def writable_copy(python: Path, name: str) -> Path:
    """A hard-linked copy of a cached venv, with pip; returns its python."""
    source = python.parent.parent
    target = realenv.SCRATCH / f"fix-{name}-{os.getpid()}"
    shutil.rmtree(target, ignore_errors=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["cp", "-al", str(source), str(target)], check=True)
    # pip alone, from the wheel ensurepip bundles (ensurepip itself would add setuptools as well)
    bundled = sorted(Path(sys.base_prefix).glob(f"lib/python{sys.version_info[0]}.{sys.version_info[1]}/ensurepip/_bundled/pip-*.whl"))
    assert bundled, "no bundled pip wheel"
    subprocess.run([str(target / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(bundled[-1])],
                   check=True, capture_output=True, timeout=300, env=dict(os.environ, PYTHONPATH=str(bundled[-1])))
    return target / "bin" / "python"


def site_of(python: Path) -> Path:
    return python.parent.parent / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"


def gpudoctor(*args: str, tmp_path: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, NO_COLOR="1", GPUDOCTOR_CACHE_DIR=str(tmp_path / "gd-cache"))
    return subprocess.run([sys.executable, "-m", "gpudoctor", *args], capture_output=True, text=True, timeout=900, env=env,
                          stdin=subprocess.DEVNULL)


def findings(python: Path, select: str, tmp_path: Path, *more: str):
    done = gpudoctor("check", "--python", str(python), "--select", select, "--format", "json", "--timeout", "120", *more,
                     tmp_path=tmp_path)
    assert done.returncode in (0, 1), done.stderr
    return done.returncode, [f for f in json.loads(done.stdout)["findings"] if f["id"].startswith(select)]


def plan(python: Path, select: str, tmp_path: Path, *more: str):
    done = gpudoctor("fix", "--python", str(python), "--select", select, "--format", "json", "--timeout", "120", *more,
                     tmp_path=tmp_path)
    assert done.returncode in (0, 1), done.stderr
    return json.loads(done.stdout)["plan"]


def import_test(python: Path, code: str) -> str:
    done = subprocess.run([str(python), "-I", "-c", code], capture_output=True, text=True, timeout=300)
    if done.returncode == 0:
        return "ok" + (f": {done.stdout.strip().splitlines()[-1]}" if done.stdout.strip() else "")
    return "fails: " + (done.stderr.strip().splitlines() or ["?"])[-1][:160]


def records(site: Path, dists: str = "*") -> Dict[str, int]:
    """Every RECORD of the environment checked: files checked, and the count of missing or changed ones."""
    checked = bad = 0
    for record in sorted(site.glob(f"{dists}.dist-info/RECORD")):
        for line in record.read_text(encoding="utf-8").splitlines():
            path, digest, _ = line.rsplit(",", 2) if line.count(",") >= 2 else (line, "", "")
            if not digest:
                continue
            algorithm, expected = digest.split("=", 1)
            target = site / path
            checked += 1
            try:
                got = base64.urlsafe_b64encode(hashlib.new(algorithm, target.read_bytes()).digest()).rstrip(b"=").decode()
            except OSError:
                bad += 1
                continue
            bad += got != expected
    return {"checked": checked, "bad": bad}


def listing(root: Path) -> Dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_ino for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts}


def summary(items: List[dict]) -> str:
    return "; ".join(f"{f['id']} [{f.get('subject', '')}]" for f in items) or "none"


def write_row(case: str, **row) -> None:
    ROWS.mkdir(parents=True, exist_ok=True)
    (ROWS / f"{case}.json").write_text(json.dumps(dict(case=case, **row), indent=1, sort_keys=True), encoding="utf-8")
    print(json.dumps(dict(case=case, **row), indent=1))


def reachable(url: str) -> bool:
    try:
        urllib.request.urlopen(url, timeout=10).close()
        return True
    except Exception:  # noqa: BLE001 - any failure: not reachable from here
        return False


# --- flash-attn-4 for an Ampere target --------------------------------------------------------------
def test_flash_attn_4_on_an_a100_is_uninstalled_and_with_sglang_it_stays(tmp_path):
    broken = writable_copy(realenv.venv_with("torch==2.13.0", "flash-attn-4==4.0.0b40"), "fa4")
    try:
        # FA4 on 8.x runs degraded (no paged KV): a warning by GD401's severity policy
        code_before, before = findings(broken, "GD401", tmp_path, "--gpu", "A100", "--fail-on", "warning")
        assert code_before == 1 and [f["subject"] for f in before] == ["flash-attn-4 / GPU 0"], before
        [item] = plan(broken, "GD401", tmp_path, "--gpu", "A100")
        assert (item["kind"], item["dist"], item["version"], item["verdict"]) == ("uninstall", "flash-attn-4", "4.0.0b40", "go")
        assert before[0]["fix"]["commands"][0] == item["command"] == f"{broken} -m pip uninstall -y flash-attn-4"
        find = "import importlib.util as u; print(u.find_spec('flash_attn.cute') is not None)"
        import_before = import_test(broken, find)
        done = gpudoctor("fix", "--python", str(broken), "--gpu", "A100", "--select", "GD401", "--yes", tmp_path=tmp_path)
        assert "done: uninstall flash-attn-4 4.0.0b40" in done.stdout and done.returncode == 0, done.stdout + done.stderr
        code_after, after = findings(broken, "GD401", tmp_path, "--gpu", "A100", "--fail-on", "warning")
        assert code_after == 0 and after == []
        import_after = import_test(broken, find)
        assert import_after == "ok: False" and import_before == "ok: True"
        assert records(site_of(broken))["bad"] == 0
        write_row("flash-attn-4-on-a100-no-engine", before=summary(before), exit_before=code_before, import_before=import_before,
                  action=item["command"], after=summary(after), exit_after=code_after, import_after=import_after)
    finally:
        shutil.rmtree(broken.parent.parent, ignore_errors=True)
    # SGLang 0.5.23 requires flash-attn-4: no finding, no action (read only, the cached venv itself)
    with_sglang = realenv.venv_with("torch==2.13.0", "flash-attn-4==4.0.0b40", "sglang==0.5.23")
    code, found = findings(with_sglang, "GD401", tmp_path, "--gpu", "A100", "--fail-on", "warning")
    assert found == [] and plan(with_sglang, "GD401", tmp_path, "--gpu", "A100") == []
    write_row("flash-attn-4-on-a100-with-sglang", before=summary(found), exit_before=code, action="none (SGLang requires it)")


# --- torchvision built for another torch -------------------------------------------------------------
def test_torchvision_for_another_torch_is_replaced_or_nothing_changes(tmp_path):
    """torchvision 0.27.0 (pins torch 2.12.0, a CUDA build) over CPU torch 2.13.0: GD508 plans the
    build for the installed torch from PyTorch's CPU index. Where that index answers, it is installed
    and imports; where it does not (this machine), fix says so and the environment is byte-identical."""
    broken = writable_copy(torch_venv("torchvision==0.27.0"), "torchvision")
    try:
        site = site_of(broken)
        code_before, before = findings(broken, "GD508", tmp_path)
        assert code_before == 1 and [f["subject"] for f in before] == ["torchvision"], before
        import_before = import_test(broken, "import torch, torchvision")
        assert TORCHVISION_NMS in import_before
        [item] = plan(broken, "GD508", tmp_path)
        assert (item["kind"], item["verdict"], item["requirements"]) == ("replace", "go", ["torchvision!=0.27.0", "torch==2.13.0"])
        assert item["command"] == before[0]["fix"]["commands"][0]
        assert "--extra-index-url https://download.pytorch.org/whl/cpu" in item["command"] and "plus https://download.pytorch.org/whl/cpu" in item["index"]
        files, hashes = listing(site), records(site)
        done = gpudoctor("fix", "--python", str(broken), "--select", "GD508", "--yes", tmp_path=tmp_path)
        code_after, after = findings(broken, "GD508", tmp_path)
        import_after = import_test(broken, "import torch, torchvision; print(torchvision.__version__)")
        if reachable("https://download.pytorch.org/whl/cpu/torchvision/"):
            assert "done: replace torchvision 0.27.0" in done.stdout and done.returncode == 0, done.stdout
            assert code_after == 0 and after == [] and import_after.startswith("ok: 0.28.0+cpu"), import_after
        else:
            assert "refused: replace torchvision 0.27.0" in done.stdout and "the package index cannot be reached" in done.stdout, done.stdout
            assert done.returncode == 1 and code_after == 1 and import_after == import_before
            assert listing(site) == files and records(site) == hashes and hashes["bad"] == 0
        write_row("torchvision-0.27.0-over-torch-2.13.0-cpu", before=summary(before), exit_before=code_before,
                  import_before=import_before, action=item["command"], fix_said=[line.strip() for line in done.stdout.splitlines()
                                                                              if line.strip().startswith(("done", "refused", "FAILED"))],
                  after=summary(after), exit_after=code_after, import_after=import_after, records=records(site))
    finally:
        shutil.rmtree(broken.parent.parent, ignore_errors=True)


def _killing_pip(site: Path, gone: str, came: str):
    """Runs pip for real and SIGKILLs it the moment it has removed ``gone`` or written ``came``: half-way."""
    said = {}

    def run(argv, timeout=None, **_):
        child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + (timeout or 600)
        while child.poll() is None and time.monotonic() < deadline:
            if not (site / gone).exists() or (site / came).exists():
                os.killpg(child.pid, signal.SIGKILL)
                said["killed"] = "removed" if not (site / gone).exists() else "written"
                break
            time.sleep(0.002)
        out = child.communicate()[0].decode("utf-8", "replace")
        return SimpleNamespace(status="ok" if child.returncode == 0 else "error", returncode=child.returncode, stdout=out,
                               stderr="", detail=f"killed by the test ({said.get('killed')})" if said else "")
    return run, said


def test_a_pip_killed_half_way_leaves_the_environment_byte_identical(tmp_path, monkeypatch):
    broken = writable_copy(torch_venv("torchvision==0.27.0"), "killed")
    try:
        site = site_of(broken)
        files, hashes = listing(site), records(site)
        assert hashes["bad"] == 0 and hashes["checked"] > 10000  # torch's RECORD too
        # the environment's own pip configuration: only the folder with the real torchvision 0.28.0 wheel
        # (fetched first: on a cold cache, with PIP_NO_INDEX already set, the tier's own download found no index)
        wheels = realenv.wheel("torchvision", "0.28.0").parent
        monkeypatch.setenv("PIP_NO_INDEX", "1")
        monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
        # a requirement that cannot be resolved: pip's words, nothing touched
        impossible = actions.StackAction("replace", "torchvision", "0.27.0", str(broken), "GD508", "test", ("torchvision==0.99.0",))
        seen = stack_install.check(impossible, runner.run)
        assert seen.go, seen.reason
        refused = stack_install.apply(impossible, seen.state or {}, runner.run)
        assert refused.status == stack_fix.REFUSED and "pip cannot install torchvision==0.99.0 here (ERROR: " in refused.detail
        assert refused.detail.endswith("nothing was changed"), refused.detail
        assert listing(site) == files
        # pip killed (SIGKILL: its own rollback never runs) in the middle of the replacement
        action = actions.StackAction("replace", "torchvision", "0.27.0", str(broken), "GD508", "test", ("torchvision==0.28.0",),
                                     flags=("--no-deps",))
        seen = stack_install.check(action, runner.run)
        killer, said = _killing_pip(site, "torchvision-0.27.0.dist-info", "torchvision-0.28.0.dist-info")
        started = time.monotonic()
        result = stack_install.apply(action, seen.state or {}, runner.run, pip_run=killer)
        took = time.monotonic() - started
        assert said.get("killed"), "pip finished before the test could kill it"
        assert result.status == stack_fix.RESTORED and "pip was killed (signal 9) half-way" in result.detail, result.detail
        assert listing(site) == files, "a path differs after the restore"
        after = records(site)
        assert after == hashes and after["bad"] == 0
        assert import_test(broken, "import torch; print(torch.__version__)") == "ok: 2.13.0+cpu"
        write_row("killed-pip-half-way", action=" ".join(action.argv[1:]), killed_after_pip=said["killed"], result=result.detail,
                  records_before=hashes, records_after=after, same_paths_and_inodes=listing(site) == files, apply_s=round(took, 2))
    finally:
        shutil.rmtree(broken.parent.parent, ignore_errors=True)


# --- an engine's pin not met: vLLM 0.33.0 pins lark==1.2.2 ------------------------------------------
# lark tries `import regex` first; the closure's regex is a sparse form (never loaded: ld.so dies on it), so the
# import test blocks it and lark uses `re`, as it does wherever regex is not installed
LARK = "import sys; sys.modules['regex'] = None; import lark; print(lark.__version__)"


def test_an_engine_pin_is_aligned_and_a_missing_requirement_installed(tmp_path):
    """The real vLLM 0.33.0 closure with lark 1.2.1 (vLLM pins lark==1.2.2), then without lark: GD503's
    action installs the pinned version with the venv's own pip (from PyPI), and `check` is clean after."""
    broken = writable_copy(realenv.release_venv("0.33.0"), "lark")
    try:
        site = site_of(broken)
        subprocess.run([str(broken), "-m", "pip", "install", "-q", "--no-deps", "lark==1.2.1"], check=True, capture_output=True, timeout=300)
        for case, expect in (("lark-1.2.1-vllm-pins-1.2.2", "lark==1.2.2, 1.2.1 is installed"),
                             ("lark-missing-vllm-pins-1.2.2", "lark==1.2.2 (not installed)")):
            if case.startswith("lark-missing"):
                subprocess.run([str(broken), "-m", "pip", "uninstall", "-q", "-y", "lark"], check=True, capture_output=True, timeout=300)
            code_before, before = findings(broken, "GD503", tmp_path, "--fail-on", "warning")  # a pure-Python pin: a warning
            assert code_before == 1 and [f["subject"] for f in before] == ["vllm"] and expect in before[0]["message"], before
            [item] = plan(broken, "GD503", tmp_path)
            assert (item["kind"], item["requirements"], item["verdict"]) == ("install", ["lark==1.2.2"], "go"), item
            assert item["command"] == before[0]["fix"]["commands"][0] == f"{broken} -m pip install lark==1.2.2"
            # the plan's download size is the size of the very wheel pip fetches (a HEAD to PyPI's files host, or a stat)
            [fetched] = item["download"]["items"]
            assert (fetched["name"], fetched["version"]) == ("lark", "1.2.2") and fetched["url"].endswith("/lark-1.2.2-py3-none-any.whl")
            assert fetched["download_bytes"] == realenv.wheel("lark", "1.2.2").stat().st_size == 111036, fetched
            with zipfile.ZipFile(realenv.wheel("lark", "1.2.2")) as whole:  # its directory read with Range requests, or the file
                assert fetched["unpacked_bytes"] == sum(i.file_size for i in whole.infolist()) == 350066, fetched
            import_before = import_test(broken, LARK)
            started = time.monotonic()
            done = gpudoctor("fix", "--python", str(broken), "--select", "GD503", "--yes", tmp_path=tmp_path)
            took = time.monotonic() - started
            assert "done: install lark==1.2.2" in done.stdout and "re-check: clean" in done.stdout and done.returncode == 0, done.stdout
            assert "  1. lark 1.2.2 (108.4 KiB, 341.9 KiB unpacked); download 108.4 KiB in total" in done.stdout, done.stdout
            code_after, after = findings(broken, "GD503", tmp_path, "--fail-on", "warning")
            import_after = import_test(broken, LARK)
            assert code_after == 0 and after == [] and import_after == "ok: 1.2.2"
            assert records(site, "lark-*") == {"checked": records(site, "lark-*")["checked"], "bad": 0}  # the closure's own files are sparse
            write_row(case, before=summary(before), exit_before=code_before, import_before=import_before, action=item["command"],
                      after=summary(after), exit_after=code_after, import_after=import_after, fix_s=round(took, 1))
    finally:
        shutil.rmtree(broken.parent.parent, ignore_errors=True)
