"""gpudoctor/fix.py and `gpudoctor fix`: the safety checks, on real processes and files."""

from __future__ import annotations

import os
import pty
import select
import shutil
import subprocess
import sys
import time

import pytest

from gpudoctor import actions, fix
from gpudoctor.rule import Fix
from fakes.processes import (  # noqa: F401  (spawner is a fixture)
    NOBODY,
    fake_root,
    gone,
    needs_root,
    private_pid_namespace,
    shm_file,
    spawner,
    start_ticks,
)

pytest.importorskip("setproctitle")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def stop(pid: int, uid: int = 0) -> actions.StopProcess:
    return actions.StopProcess(pid, start_ticks(pid), uid, "t", "root")


def remove(path: str) -> actions.RemoveFile:
    info = os.lstat(path)
    return actions.RemoveFile(path, info.st_dev, info.st_ino, info.st_uid, info.st_size, "root")


def test_actions_are_data():
    planned = [actions.StopProcess(645, 123, 0, "VLLM::EngineCore", "root"), actions.RemoveFile("/dev/shm/psm_deadbeef", 1, 2, 0, 4096)]
    assert Fix("x", actions=planned).to_json()["actions"][0] == {"type": "stop_process", "pid": 645, "start_ticks": 123,
                                                                  "uid": 0, "title": "VLLM::EngineCore", "user": "root"}
    assert "actions" not in Fix("x").to_json()  # other rules' JSON is unchanged


def test_plan_deduplicates_and_puts_processes_first():
    class F:
        def __init__(self, rule_id, subject, *actions):
            self.rule_id, self.subject, self.fix = rule_id, subject, Fix("x", actions=list(actions))

    a, b = actions.StopProcess(10, 1, 0), actions.RemoveFile("/dev/shm/psm_00000000", 1, 2, 0)
    planned = fix.plan([F("GD603", "/dev/shm", b), F("GD601", "PID 10", a), F("GD602", "port 8000", a)])
    assert [p.action for p in planned] == [a, b]
    assert planned[0].rules == ["GD601 PID 10", "GD602 port 8000"]


# --- refusing -------------------------------------------------------------------------------------
def test_never_pid_1_self_or_ancestors():
    machine = fix.Machine()
    assert os.getppid() in machine.protected and os.getpid() in machine.protected
    for pid in (1, os.getpid(), os.getppid()):
        verdict = machine.check_process(stop(pid))
        assert verdict.status == fix.REFUSED, pid
    assert "PID 1" in machine.check_process(stop(1)).reason
    assert "gpudoctor itself or one of its parent" in machine.check_process(stop(os.getppid())).reason


def test_a_reused_pid_is_left_alone(spawner):
    target = spawner.spawn("VLLM::EngineCore", orphan=True)
    action = actions.StopProcess(target["pid"], start_ticks(target["pid"]) - 1, 0)  # "started earlier": another process
    verdict = fix.Machine().check_process(action)
    assert verdict.status == fix.ALREADY and "now belongs to another process" in verdict.reason
    [outcome] = fix.apply([action], fix.Machine(), grace=0.2)
    assert outcome.status == fix.ALREADY and not gone(target["pid"])


@needs_root
def test_another_users_process_is_refused(spawner):
    theirs = spawner.spawn("VLLM::EngineCore", orphan=True, uid=NOBODY)
    verdict = fix.Machine().check_process(stop(theirs["pid"], NOBODY))
    assert verdict.status == fix.REFUSED and f"owned by nobody (uid {NOBODY})" in verdict.reason
    # seen from an ordinary user, root's processes are refused the same way
    mine = spawner.spawn("VLLM::EngineCore", orphan=True)
    verdict = fix.Machine(euid=NOBODY).check_process(stop(mine["pid"]))
    assert verdict.status == fix.REFUSED and "owned by root (uid 0)" in verdict.reason
    [outcome] = fix.apply([stop(theirs["pid"], NOBODY)], fix.Machine(), grace=0.2)
    assert outcome.status == fix.REFUSED and not gone(theirs["pid"])


def test_zombie_and_gone_are_already_done(spawner):
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    ticks = None
    while not gone(child.pid):
        ticks = start_ticks(child.pid) or ticks
        time.sleep(0.01)
    ticks = start_ticks(child.pid) or ticks
    verdict = fix.Machine().check_process(actions.StopProcess(child.pid, ticks, 0))
    assert verdict.status == fix.ALREADY and "zombie" in verdict.reason
    child.wait()
    assert fix.Machine().check_process(actions.StopProcess(child.pid, ticks, 0)).reason.startswith("already gone")


# --- acting ---------------------------------------------------------------------------------------
def test_sigterm_then_sigkill(spawner):
    polite = spawner.spawn("VLLM::Worker_TP0", orphan=True)
    stubborn = spawner.spawn("VLLM::Worker_TP1", orphan=True, ignore_term=True)
    lines = []
    started = time.monotonic()
    outcomes = fix.apply([stop(polite["pid"]), stop(stubborn["pid"])], fix.Machine(), grace=0.5, say=lines.append)
    assert [(o.status, o.detail) for o in outcomes] == [(fix.DONE, "stopped (SIGTERM)"), (fix.DONE, "stopped (SIGKILL after 0.5 s)")]
    assert gone(polite["pid"]) and gone(stubborn["pid"])
    assert time.monotonic() - started >= 0.5
    assert f"PID {stubborn['pid']} still running after 0.5 s: sent SIGKILL" in lines


@needs_root
def test_files_are_checked_again_before_removal(tmp_path, spawner):
    root = fake_root(tmp_path)
    machine = fix.Machine(root=root)
    ok_file = shm_file(root, "psm_00000001")
    replaced = shm_file(root, "psm_00000002")
    replaced_action = remove(replaced)
    os.replace(shm_file(root, "newer"), replaced)  # same name, another inode (made while the old one existed)
    link = os.path.join(root, "dev", "shm", "psm_00000003")
    os.symlink("/etc/passwd", link)
    theirs = shm_file(root, "nccl-theirs")
    os.chown(theirs, NOBODY, NOBODY)
    mapped = shm_file(root, "psm_00000004")
    holder = spawner.spawn("VLLM::EngineCore", map=mapped)
    oddly_named = shm_file(root, "important.db")
    link_action = actions.RemoveFile(link, os.lstat(link).st_dev, os.lstat(link).st_ino, 0)

    reasons = {os.path.basename(o.action.path): (o.status, o.detail) for o in fix.apply(
        [remove(ok_file), replaced_action, link_action, remove(theirs), remove(mapped), remove(oddly_named)], machine)}
    assert reasons["psm_00000001"] == (fix.DONE, "removed") and not os.path.exists(ok_file)
    assert reasons["psm_00000002"] == (fix.REFUSED, "it was replaced by another file since the check")
    assert reasons["psm_00000003"][0] == fix.REFUSED and "regular file" in reasons["psm_00000003"][1]
    assert reasons["nccl-theirs"] == (fix.REFUSED, "owned by nobody (uid 65534), not by you (root)")
    assert reasons["psm_00000004"] == (fix.REFUSED, f"now in use by PID {holder['pid']}")
    assert reasons["important.db"] == (fix.REFUSED, "its name is not one gpudoctor removes")
    for path in (replaced, link, theirs, mapped, oddly_named):
        assert os.path.lexists(path)
    assert os.path.exists("/etc/passwd")
    assert fix.apply([remove(theirs)], fix.Machine(root=root, euid=NOBODY))[0].status == fix.DONE


# --- the confirmation, in a real terminal ------------------------------------------------------------
def _fix_in_a_terminal(root: str, answer: bytes) -> str:
    """Run `gpudoctor fix` with a pseudo-terminal as stdin/stdout and type ``answer``."""
    command = ("import sys; from gpudoctor.commands import fix, common; import argparse; p = argparse.ArgumentParser(); "
               "fix.configure(p); a = p.parse_args(sys.argv[1:]); "
               "sys.exit(fix.run(a, common.IO(dict(__import__('os').environ), sys.stdout, sys.stderr)))")
    pid, fd = pty.fork()
    if pid == 0:  # pragma: no cover - the child
        os.chdir(REPO)
        os.execv(sys.executable, [sys.executable, "-c", command, "--root", root, "--grace", "1"])
    output = b""
    try:
        deadline = time.monotonic() + 60
        sent = False
        while time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(fd, 4096)
                except OSError:
                    break
                if not chunk:
                    break
                output += chunk
            if not sent and b"[y/N]" in output:
                os.write(fd, answer)
                sent = True
    finally:
        os.close(fd)
        os.waitpid(pid, 0)
    return output.decode("utf-8", "replace")


@pytest.mark.skipif(shutil.which("true") is None, reason="no POSIX tools")
@private_pid_namespace
def test_asks_in_a_terminal_and_respects_no(tmp_path, spawner):
    orphan = spawner.spawn("VLLM::EngineCore", orphan=True)
    root = fake_root(tmp_path)
    out = _fix_in_a_terminal(root, b"n\n")
    assert "Apply" in out and "nothing was done." in out and not gone(orphan["pid"])
    out = _fix_in_a_terminal(root, b"y\n")
    assert f"done: stop PID {orphan['pid']}" in out and gone(orphan["pid"])
    assert "re-check: clean" in out


def test_the_last_line_says_what_to_do_next():
    """Issue 31: `fix` ended on "1 other process finding(s) need a manual fix" without naming it."""
    from types import SimpleNamespace

    from gpudoctor.commands.fix import _next_step

    stale = SimpleNamespace(rule_id="GD604", label="GD604 stale-process [PID 7]")
    assert _next_step(set(), [], False, []).startswith("next: nothing for `fix` to do")
    assert _next_step({"a"}, [], False, []) == "next: nothing left for `fix`; run `gpudoctor check` to confirm."
    assert "`gpudoctor fix` again" in _next_step({"a"}, ["p"], False, [])
    assert "refused or FAILED" in _next_step({"a"}, [], True, [stale])
    assert "by hand (`gpudoctor explain GD604`" in _next_step({"a"}, [], False, [stale])
