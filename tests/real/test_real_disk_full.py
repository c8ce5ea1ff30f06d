"""Issue 29: a disk that is really full while `fix` changes an environment (no simulated ENOSPC).

A private mount namespace (``unshare -m``, so nothing leaks to the machine) mounts a small tmpfs; a
real venv is made on it, with pip and the real lark 1.2.1 wheel from PyPI; a ballast file leaves a
chosen number of bytes free. The environment's own pip configuration names only a folder with the
real lark 1.2.2 wheel (``PIP_FIND_LINKS``, ``PIP_NO_INDEX``), so its sizes are known exactly: 111,036
bytes to download, 350,066 unpacked (its zip directory), and more on the tmpfs (pages, bytecode).

- 200 KiB free (less than lark 1.2.2 unpacks to): refused before anything is touched, with numbers;
- unpacked size + 256 KiB free (enough by the numbers, the stash's record of the venv's ~1,000 paths
  included; not with bytecode and page rounding: lark 1.2.2 takes 1,040 KiB of a tmpfs): pip
  itself fails with the real ``[Errno 28] No space left on device``; the user is told the disk is
  full, where and how much was free; every file is back, byte-identical, every RECORD hash checked;
- 0 bytes free, an uninstall, and an install whose sizes are unknown (so the room check cannot refuse
  it): the stash's manifest cannot be written, so nothing is changed;
- the ballast removed: the same install goes through (the failures above were the disk's).

Runs as root (CI and these machines do); skipped with the reason where mounting is refused.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

pytestmark = pytest.mark.real

LARK_UNPACKED = 350066  # lark-1.2.2-py3-none-any.whl's files, summed from its zip directory
TMPFS = "48m"


def tree(root: Path) -> Dict[str, str]:
    """Every file under ``root`` (the ballast aside) → SHA-256 of its bytes."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and p.name != "ballast"}


def records_bad(site: Path) -> int:
    bad = 0
    for record in site.glob("*.dist-info/RECORD"):
        for line in record.read_text(encoding="utf-8").splitlines():
            path, digest, _ = line.rsplit(",", 2)
            if digest:
                algorithm, expected = digest.split("=", 1)
                try:
                    got = base64.urlsafe_b64encode(hashlib.new(algorithm, (site / path).read_bytes()).digest()).rstrip(b"=").decode()
                except OSError:
                    bad += 1
                    continue
                bad += got != expected
    return bad


def leave_free(mount: Path, nbytes: int) -> int:
    """Grow or shrink the ballast so that ``nbytes`` (rounded to pages) stay free; the free bytes now."""
    ballast = mount / "ballast"
    ballast.unlink(missing_ok=True)
    info = os.statvfs(mount)
    fill = info.f_bfree * info.f_frsize - nbytes
    with open(ballast, "wb") as handle:
        chunk = b"\0" * (1 << 20)
        while fill > 0:
            try:
                fill -= handle.write(chunk[:fill])
            except OSError:  # already full: as full as it gets
                break
    info = os.statvfs(mount)
    return info.f_bfree * info.f_frsize


def scenario(mount: Path, wheels: Path, bundled_pip: str) -> Dict[str, object]:
    """Runs inside the mount namespace, the tmpfs mounted at ``mount``; returns what each case showed."""
    from gpudoctor import actions, runner, stack_fix, stack_install, stack_space
    from gpudoctor.commands import fix as fix_command

    venv = mount / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, capture_output=True, timeout=300)
    python = str(venv / "bin" / "python")
    quiet = dict(check=True, capture_output=True, timeout=300)
    subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", "--no-index", bundled_pip],
                   env=dict(os.environ, PYTHONPATH=bundled_pip), **quiet)
    subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheels / "old" / "lark-1.2.1-py3-none-any.whl")], **quiet)
    subprocess.run([python, "-c", "import lark"], **quiet)  # its __pycache__, as a used environment has
    site = venv / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    os.environ.update(PIP_FIND_LINKS=str(wheels / "new"), PIP_NO_INDEX="1")
    os.environ.pop("PIP_INDEX_URL", None)
    os.environ.pop("PIP_EXTRA_INDEX_URL", None)
    os.environ["PIP_CONFIG_FILE"] = os.devnull  # the machine's own extra indexes out: the folder is the index
    install = actions.StackAction("install", "lark", "1.2.1", python, "GD503", "vllm pins lark==1.2.2", ("lark==1.2.2",))
    uninstall = actions.StackAction("uninstall", "lark", "1.2.1", python, "GD401", "test")
    before, out = tree(venv), {"records_bad_before": records_bad(site)}

    def attempt(action, module):
        seen = module.check(action, runner.run)
        assert seen.go, seen.reason
        said = []
        result = module.apply(action, seen.state or {}, runner.run, say=said.append)
        return {"status": result.status, "detail": result.detail, "said": said, "same": tree(venv) == before,
                "records_bad": records_bad(site), "stashes": [p.name for p in site.parent.glob(stack_fix.STASH_PREFIX + "*")]}

    out["too_small"] = dict(free=leave_free(mount, 200 << 10), **attempt(install, stack_install))
    out["plan_too_small"] = stack_install.preview(install, runner.run)  # what the plan says before anything is asked
    out["enospc"] = dict(free=leave_free(mount, LARK_UNPACKED + (256 << 10)), **attempt(install, stack_install))
    out["stash_full"] = dict(free=leave_free(mount, 0), **attempt(uninstall, stack_fix))
    # the same full disk under an install whose sizes are unknown (an index that answers no HEAD): the room
    # check cannot refuse it, so the stash is what finds the disk full, before pip runs
    measure = stack_space.measure
    stack_space.measure = lambda items, **kw: [dict(m, download_bytes=None, unpacked_bytes=None) for m in measure(items, **kw)]
    try:
        out["stash_full_install"] = dict(free=leave_free(mount, 0), **attempt(install, stack_install))
    finally:
        stack_space.measure = measure
    # what `gpudoctor fix` prints and whether it counts as trouble (its exit status is 1 on trouble)
    leave_free(mount, LARK_UNPACKED + (256 << 10))
    lines: list = []
    out["command_trouble"] = fix_command._apply_stack(install, False, lines.append)
    out["command_said"] = lines
    out["command_same"] = tree(venv) == before
    (mount / "ballast").unlink()
    out["room"] = attempt(install, stack_install)
    version = subprocess.run([python, "-c", "import lark; print(lark.__version__)"], capture_output=True, text=True, timeout=120)
    out["version_after"] = version.stdout.strip()
    return out


def test_a_full_disk_is_refused_or_rolled_back_and_said(tmp_path):
    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("needs unshare(1) and root to mount a small tmpfs in a private mount namespace")
    import realenv

    for folder, version in (("old", "1.2.1"), ("new", "1.2.2")):
        (tmp_path / "wheels" / folder).mkdir(parents=True)
        shutil.copy(realenv.wheel("lark", version), tmp_path / "wheels" / folder)
    bundled = sorted(Path(sys.base_prefix).glob(f"lib/python{sys.version_info[0]}.{sys.version_info[1]}/ensurepip/_bundled/pip-*.whl"))
    assert bundled, "no bundled pip wheel"
    mount = tmp_path / "tmpfs"
    mount.mkdir()
    result = tmp_path / "result.json"
    code = (f"import json, sys; sys.path[:0] = {sys.path[:1]!r} + [{str(Path(__file__).parent)!r}]\n"
            "from test_real_disk_full import scenario\nfrom pathlib import Path\n"
            f"out = scenario(Path({str(mount)!r}), Path({str(tmp_path / 'wheels')!r}), {str(bundled[-1])!r})\n"
            f"Path({str(result)!r}).write_text(json.dumps(out))\n")
    wrapped = f"mount -t tmpfs -o size={TMPFS} gpudoctor-test {mount} || exit 77; cd /; exec \"$0\" -c \"$1\""
    done = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", wrapped, sys.executable, code],
                          capture_output=True, text=True, timeout=900, cwd=str(tmp_path))
    if done.returncode == 77 or (done.returncode != 0 and "unshare failed" in done.stderr):
        pytest.skip(f"no private tmpfs mount here: {done.stderr.strip()[-300:]}")
    assert done.returncode == 0 and result.exists(), done.stderr[-3000:]
    out = json.loads(result.read_text())
    print(json.dumps(out, indent=1))
    assert out["records_bad_before"] == 0

    small = out["too_small"]
    assert small["status"] == "refused" and small["same"] and not small["stashes"], small
    assert small["detail"].startswith("not enough free space: ") and "lark 1.2.2 needs at least 341.9 KiB unpacked, plus " in small["detail"]
    assert "nothing was changed" in small["detail"] and f"{mount} (the file system of site-packages" in small["detail"]
    assert "pip will install lark 1.2.2 (108.4 KiB, 341.9 KiB unpacked); download 108.4 KiB in total" in small["said"]

    plan = out["plan_too_small"]
    assert (plan["download_bytes"], plan["needs_at_least_bytes"], plan["unknown"]) == (111036, LARK_UNPACKED, 0), plan
    assert plan["room"].startswith("not enough free space: ") and "lark 1.2.2 needs at least 341.9 KiB unpacked" in plan["room"]

    full = out["enospc"]
    assert full["status"] == "restored", full  # pip ran, failed for real, and everything came back
    assert full["detail"].startswith("the disk is full: pip stopped with \"No space left on device\". "), full["detail"]
    assert f"{mount} (the file system of site-packages" in full["detail"] and " KiB free before the change" in full["detail"]
    assert "lark 1.2.2 needs at least 341.9 KiB unpacked (download 108.4 KiB)" in full["detail"]
    assert "everything put back" in full["detail"] and "SHA-256 checked" in full["detail"]
    assert full["same"] and full["records_bad"] == 0 and not full["stashes"]

    stash = out["stash_full"]
    assert stash["free"] == 0 and stash["status"] == "refused", stash
    assert stash["detail"].startswith("the disk is full: the ") and "could not be kept aside" in stash["detail"]
    assert "No space left on device" in stash["detail"] and "has 0 B free" in stash["detail"] and "nothing was changed" in stash["detail"]
    assert stash["same"] and not stash["stashes"]

    unsized = out["stash_full_install"]
    assert unsized["status"] == "refused" and unsized["same"] and not unsized["stashes"], unsized
    assert unsized["detail"].startswith("the disk is full: the 84 file(s) to be replaced could not be kept aside in "), unsized
    assert "pip will install lark 1.2.2 (size unknown); download size unknown" in unsized["said"]

    assert out["command_trouble"] is True and out["command_same"]
    assert any(line.startswith("  FAILED, restored: install lark==1.2.2") and "the disk is full" in line for line in out["command_said"])

    room = out["room"]
    assert room["status"] == "done" and out["version_after"] == "1.2.2", room
