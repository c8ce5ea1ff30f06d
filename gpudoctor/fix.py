"""Typed fix actions, and the one place that carries them out (``gpudoctor fix``).

A rule never returns a shell string to run: it attaches data — ``StopProcess(pid,
start_ticks, uid)`` or ``RemoveFile(path, dev, inode, uid)`` — to its ``Fix``. ``gpudoctor
fix`` lists them, asks, and then checks each one against the live machine again just before
acting, because the snapshot may be seconds old and PIDs get reused:

- StopProcess: the PID still runs the same process (same start time in clock ticks since
  boot), it is yours (real and effective uid = your effective uid; root is warned and
  also limited to its own processes), it is not PID 1, gpudoctor itself or one of its
  ancestors, and not a kernel thread. The signal goes through a pidfd where the kernel has
  them (Linux ≥ 5.3), so it cannot reach a process that took the PID over after the check.
  SIGTERM first, then SIGKILL for whatever is still there after the grace period.
- RemoveFile: the path is still a regular file (not a symlink) directly inside the
  directory it was found in, with the same device and inode, owned by you, and no running
  process maps it — which gpudoctor can only know in the host's PID namespace (in a container
  with a private one it refuses and says why).

Nothing else is ever done here: there is no action type that runs a command. A StackAction
(change a Python environment with its own pip) is carried out by gpudoctor/stack_fix.py.
"""

from __future__ import annotations

import os
import signal
import stat as stat_module
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Optional, Set, Tuple

from gpudoctor.actions import Action, RemoveFile, StackAction, StopProcess
from gpudoctor.probes.processes import ancestors, pid_namespace_problem, read_stat, read_uids, shm_creator, shm_kind, shm_users

DONE = "done"  # acted, and the result is confirmed
ALREADY = "already"  # nothing left to do (process gone, file removed)
REFUSED = "refused"  # a safety check said no
FAILED = "failed"  # tried, and it did not work


@dataclass
class Planned:
    action: Action
    rules: List[str] = field(default_factory=list)  # the findings that asked for it ("GD601 PID 645")


def plan(findings: Iterable[Any]) -> List[Planned]:
    """The actions of these findings, each once, processes before files (a stopped process
    may be what kept a file in use)."""
    by_key: Dict[Tuple[Any, ...], Planned] = {}
    for finding in findings:
        fix = getattr(finding, "fix", None)
        for action in getattr(fix, "actions", None) or ():
            entry = by_key.setdefault(action.key, Planned(action))
            label = finding.rule_id + (f" {finding.subject}" if finding.subject else "")
            if label not in entry.rules:
                entry.rules.append(label)
    order = {StopProcess.type: 0, RemoveFile.type: 1, StackAction.type: 2}  # the environment last: nothing running uses it then
    return sorted(by_key.values(), key=lambda p: (order.get(p.action.type, 9), p.action.key))


# --- checks against the live machine ---------------------------------------------------------------
@dataclass
class Verdict:
    status: str  # "go", or ALREADY / REFUSED
    reason: str = ""

    @property
    def go(self) -> bool:
        return self.status == "go"


class Machine:
    """The live side of ``fix``: who we are, what we must never touch, where /proc is."""

    def __init__(self, root: str = "/", euid: Optional[int] = None, pid: Optional[int] = None):
        self.root = root
        self.proc = os.path.join(root, "proc")
        self.euid = os.geteuid() if euid is None else euid
        self.pid = os.getpid() if pid is None else pid
        self.protected: Set[int] = {self.pid, *ancestors(self.proc, self.pid)}

    def user(self, uid: int) -> str:
        try:
            import pwd

            return pwd.getpwuid(uid).pw_name
        except (ImportError, KeyError, OverflowError):
            return str(uid)

    def check_process(self, action: StopProcess) -> Verdict:
        pid = action.pid
        if pid <= 1:
            return Verdict(REFUSED, "PID 1 (init) and PID 0 are never stopped")
        if pid in self.protected:
            return Verdict(REFUSED, "it is gpudoctor itself or one of its parent processes")
        st = read_stat(self.proc, pid)
        if st is None:
            return Verdict(ALREADY, "already gone")
        if st.start_ticks != action.start_ticks:
            return Verdict(ALREADY, f"already gone: PID {pid} now belongs to another process ({st.comm}), left alone")
        if st.state in ("Z", "X"):
            return Verdict(ALREADY, "already exited (a zombie until its parent reaps it)")
        if st.kernel_thread:
            return Verdict(REFUSED, "it is a kernel thread")
        uids = read_uids(self.proc, pid)
        if uids is None:
            return Verdict(REFUSED, "cannot read its owner")
        real, effective, _ = uids
        if real != self.euid or effective != self.euid:
            owner = self.user(real if real != self.euid else effective)
            return Verdict(
                REFUSED,
                f"owned by {owner} (uid {real if real != self.euid else effective}), not by you "
                f"({self.user(self.euid)}): gpudoctor only stops your own processes; as that user: kill -TERM {pid}",
            )
        return Verdict("go")

    def check_file(self, action: RemoveFile) -> Verdict:
        path = action.path
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            return Verdict(ALREADY, "already removed")
        except OSError as exc:
            return Verdict(REFUSED, f"cannot inspect it: {exc.strerror or exc}")
        if not stat_module.S_ISREG(info.st_mode):
            return Verdict(REFUSED, "it is no longer a regular file (a symlink or directory?)")
        if (info.st_dev, info.st_ino) != (action.dev, action.inode):
            return Verdict(REFUSED, "it was replaced by another file since the check")
        if shm_kind(os.path.basename(path)) is None:
            return Verdict(REFUSED, "its name is not one gpudoctor removes")
        if info.st_uid != self.euid:
            return Verdict(REFUSED, f"owned by {self.user(info.st_uid)} (uid {info.st_uid}), not by you ({self.user(self.euid)})")
        creator = shm_creator(os.path.basename(path))
        if creator is not None and read_stat(self.proc, creator) is not None:
            return Verdict(REFUSED, f"PID {creator}, whose segment it is by its name, is running")
        namespace = pid_namespace_problem(self.proc)
        if namespace:  # only the host sees every process that could map it
            return Verdict(REFUSED, f"{namespace}; remove it from the host: rm {path}")
        # A segment others may open (group/other bits) can be mapped by their processes too.
        owners = None if info.st_mode & 0o066 else {info.st_uid}
        pids = _processes_of(self.proc, owners)
        users, unreadable = shm_users(self.proc, {path}, pids)
        if users.get(path):
            return Verdict(REFUSED, f"now in use by PID {', '.join(map(str, sorted(users[path])))}")
        if unreadable:
            return Verdict(REFUSED, f"cannot tell whether PID {', '.join(map(str, sorted(unreadable)[:5]))} uses it")
        return Verdict("go")


def _processes_of(proc: str, uids: Optional[Set[int]]) -> List[int]:
    """PIDs owned by ``uids`` (every visible PID when None)."""
    out = []
    try:
        names = os.listdir(proc)
    except OSError:
        return out
    for name in names:
        if name.isdigit():
            try:
                if uids is None or os.stat(f"{proc}/{name}").st_uid in uids:
                    out.append(int(name))
            except OSError:
                continue
    return out


# --- acting ----------------------------------------------------------------------------------------
@dataclass
class Outcome:
    action: Action
    status: str
    detail: str = ""


class _Target:
    """A process we are allowed to signal, pinned by a pidfd when the kernel has them."""

    def __init__(self, action: StopProcess, machine: Machine):
        self.action = action
        self.machine = machine
        self.pidfd: Optional[int] = None
        opener = getattr(os, "pidfd_open", None)
        if opener is not None:
            try:
                self.pidfd = opener(action.pid)
            except OSError:
                self.pidfd = None  # gone already (ESRCH) or no pidfd support: os.kill after the check

    def signal(self, signum: int) -> Verdict:
        """Check again, then send. The pidfd was opened before the check, so the check is
        about the very process the signal goes to."""
        verdict = self.machine.check_process(self.action)
        if not verdict.go:
            return verdict
        sender = getattr(signal, "pidfd_send_signal", None)
        try:
            if self.pidfd is not None and sender is not None:
                sender(self.pidfd, signum)
            else:
                os.kill(self.action.pid, signum)
        except ProcessLookupError:
            return Verdict(ALREADY, "already gone")
        except PermissionError:
            return Verdict(REFUSED, "the kernel refused the signal (permission denied)")
        except OSError as exc:
            return Verdict(REFUSED, f"could not signal it: {exc.strerror or exc}")
        return verdict

    def gone(self) -> bool:
        st = read_stat(self.machine.proc, self.action.pid)
        return st is None or st.start_ticks != self.action.start_ticks or st.state in ("Z", "X")

    def close(self) -> None:
        if self.pidfd is not None:
            try:
                os.close(self.pidfd)
            except OSError:
                pass
            self.pidfd = None


def _wait(targets: List[_Target], seconds: float, interval: float = 0.05) -> None:
    deadline = time.monotonic() + seconds
    while targets and not all(t.gone() for t in targets):
        if time.monotonic() >= deadline:
            return
        time.sleep(interval)


def apply(actions: List[Action], machine: Machine, grace: float = 10.0, kill_wait: float = 5.0,
          say: Callable[[str], None] = lambda text: None) -> List[Outcome]:
    """Carry the actions out; one Outcome per action, in the same order."""
    outcomes: Dict[int, Outcome] = {}
    targets: List[Tuple[int, _Target]] = []
    try:
        for position, action in enumerate(actions):
            if isinstance(action, StopProcess):
                target = _Target(action, machine)
                verdict = target.signal(signal.SIGTERM)
                if verdict.go:
                    say(f"sent SIGTERM to PID {action.pid}")
                    targets.append((position, target))
                else:
                    target.close()
                    outcomes[position] = Outcome(action, verdict.status, verdict.reason)
        if targets:
            _wait([t for _, t in targets], grace)
            survivors = [(p, t) for p, t in targets if not t.gone()]
            for position, target in survivors:
                verdict = target.signal(signal.SIGKILL)
                if verdict.go:
                    say(f"PID {target.action.pid} still running after {grace:g} s: sent SIGKILL")
            _wait([t for _, t in survivors], kill_wait)
            for position, target in targets:
                killed = any(p == position for p, _ in survivors)
                if target.gone():
                    how = f"stopped (SIGKILL after {grace:g} s)" if killed else "stopped (SIGTERM)"
                    outcomes[position] = Outcome(target.action, DONE, how)
                else:
                    outcomes[position] = Outcome(target.action, FAILED, f"still running after SIGKILL (state: {_state(machine, target.action.pid)})")
    finally:
        for _, target in targets:
            target.close()
    for position, action in enumerate(actions):
        if isinstance(action, RemoveFile):
            verdict = machine.check_file(action)
            if not verdict.go:
                outcomes[position] = Outcome(action, verdict.status, verdict.reason)
                continue
            try:
                os.unlink(action.path)
                outcomes[position] = Outcome(action, DONE, "removed")
            except FileNotFoundError:
                outcomes[position] = Outcome(action, ALREADY, "already removed")
            except OSError as exc:
                outcomes[position] = Outcome(action, FAILED, exc.strerror or str(exc))
        elif position not in outcomes:
            outcomes[position] = Outcome(action, REFUSED, f"unknown action type {type(action).__name__}")
    return [outcomes[i] for i in range(len(actions))]


def _state(machine: Machine, pid: int) -> str:
    st = read_stat(machine.proc, pid)
    # D = uninterruptible sleep: often a process stuck in the GPU driver; only a reboot frees it.
    return st.state if st else "gone"
