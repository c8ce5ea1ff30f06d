"""Real processes for the process tests: renamed like vLLM's, orphaned by a double fork,
owned by another user, listening on a port, mapping a shared-memory file — and cleaned up.

Used by tests/test_processes*.py and tests/test_fix*.py (no tests in here). Every spawned
process sleeps at most LIFETIME seconds on its own, and the ``spawner`` fixture kills what
is left (matching PID *and* start time, so a reused PID is never hit) and reaps its children.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import inspect
import io
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional

import pytest

from gpudoctor.commands.common import IO
from gpudoctor.probes import Context, collect
from gpudoctor.probes import processes as proc_probe

LIFETIME = 120  # seconds: an upper bound even if every cleanup below failed
NOBODY = 65534
ME = pwd.getpwuid(os.geteuid()).pw_name
# Starting a process as another user, or chown, needs root (CI runs as root).
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: acts as another user")

# Runs in a fresh interpreter: python3 -c DRIVER JSON. Imports first (a process that drops
# to "nobody" can no longer read /root), then: optional double fork (orphan), optional
# setuid, rename (setproctitle rewrites the command line and comm like vLLM does; "prctl"
# changes comm only), listen, map a file, fork a renamed child, report, sleep. With "exec"
# it runs that command line instead (after the double fork): it must report like work() does.
DRIVER = r"""
import ctypes, json, mmap, os, signal, socket, sys, time
cfg = json.loads(sys.argv[1])
try:
    import setproctitle
except ImportError:
    setproctitle = None

def become(title):
    if cfg.get("method", "setproctitle") == "setproctitle" and setproctitle is not None:
        setproctitle.setproctitle(title)
    else:
        ctypes.CDLL(None).prctl(15, title.encode()[:15], 0, 0, 0)

def report(**info):
    sys.stdout.write(json.dumps(info) + "\n")
    sys.stdout.flush()

def work():
    if cfg.get("uid") is not None:
        os.setgroups([])
        os.setgid(cfg["uid"])
        os.setuid(cfg["uid"])
    become(cfg["title"])
    keep = []
    if cfg.get("listen"):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", cfg["listen"]))
        s.listen()
        keep.append(s)
    if cfg.get("map"):
        f = open(cfg["map"], "r+b")
        keep += [f, mmap.mmap(f.fileno(), 0)]
    if cfg.get("ignore_term"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    child = None
    if cfg.get("child_title"):
        ready, done = os.pipe()
        child = os.fork()
        if child == 0:
            become(cfg["child_title"])
            os.write(done, b"1")
            if cfg.get("child_exits"):
                os._exit(0)
            time.sleep(cfg.get("sleep", 120))
            os._exit(0)
        os.read(ready, 1)  # report only once the child has its own title
    report(pid=os.getpid(), child=child)
    if cfg.get("exit"):
        os._exit(0)
    time.sleep(cfg.get("sleep", 120))
    os._exit(0)

if cfg.get("orphan"):
    os.setsid()
    if os.fork():
        os._exit(0)  # the middle process exits: the grandchild is adopted by PID 1 (or a subreaper)
if cfg.get("exec"):
    os.execve(cfg["exec"][0], cfg["exec"], dict(os.environ, **cfg.get("env", {})))
work()
"""


class Spawner:
    """Starts the processes and remembers them for cleanup."""

    def __init__(self) -> None:
        self.popens: List[subprocess.Popen] = []
        self.pids: List[int] = []

    def spawn(self, title: str, **cfg: Any) -> Dict[str, Any]:
        cfg = {"title": title, "sleep": LIFETIME, **cfg}
        popen = subprocess.Popen([sys.executable, "-c", DRIVER, json.dumps(cfg)], stdout=subprocess.PIPE,
                                 stdin=subprocess.DEVNULL)
        self.popens.append(popen)
        line = popen.stdout.readline()
        if not line:
            popen.wait(5)
            raise RuntimeError(f"spawned process died before reporting (exit {popen.returncode})")
        info = json.loads(line)
        info["popen"] = popen
        for pid in (info["pid"], info.get("child")):
            if pid:
                self.pids.append(pid)
                _STARTS[pid] = start_ticks(pid)
        if cfg.get("orphan"):
            popen.wait(10)  # the middle process: exits right away
            wait_for(lambda: ppid(info["pid"]) != popen.pid, what="the orphan to be adopted")
        return info

    def cleanup(self) -> None:
        for pid in self.pids:
            kill_if_same(pid)
        for popen in self.popens:
            try:
                popen.kill()
            except OSError:
                pass
            try:
                popen.wait(10)
            except subprocess.TimeoutExpired:
                pass
            if popen.stdout:
                popen.stdout.close()


PIDNS_ENV = "GPUDOCTOR_TEST_IN_PIDNS"
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@functools.lru_cache(maxsize=1)
def _can_unshare() -> bool:
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return False
    try:
        return subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "true"], timeout=30,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def private_pid_namespace(test):
    """Run this test again in a PID namespace of its own (``unshare --pid --fork
    --mount-proc``), where ``gpudoctor fix --yes`` sees only the processes the test starts:
    never those of a test run going on at the same time on this machine, nor a developer's
    own stale vLLM. Inside it pytest is PID 1 and adopts the orphans. Without root or
    unshare the test runs as it is."""

    @functools.wraps(test)
    def wrapper(*args, **kwargs):
        if os.environ.get(PIDNS_ENV) == "1" or not _can_unshare():
            return test(*args, **kwargs)
        node = f"{inspect.getfile(test)}::{test.__name__}"
        proc = subprocess.run(
            ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", node],
            env=dict(os.environ, **{PIDNS_ENV: "1"}), capture_output=True, text=True, timeout=600, cwd=REPO,
        )
        assert proc.returncode == 0 and " passed" in proc.stdout, proc.stdout[-6000:] + proc.stderr[-3000:]

    return wrapper


@pytest.fixture
def spawner():
    s = Spawner()
    try:
        yield s
    finally:
        s.cleanup()


# --- small utilities ---------------------------------------------------------------------------
_STARTS: Dict[int, int] = {}


def start_ticks(pid: int) -> Optional[int]:
    st = proc_probe.read_stat("/proc", pid)
    return st.start_ticks if st else None


def ppid(pid: int) -> Optional[int]:
    st = proc_probe.read_stat("/proc", pid)
    return st.ppid if st else None


def state(pid: int) -> Optional[str]:
    st = proc_probe.read_stat("/proc", pid)
    return st.state if st else None


def gone(pid: int) -> bool:
    """Exited: no longer in /proc, or a zombie waiting for its parent."""
    return state(pid) in (None, "Z", "X")


def kill_if_same(pid: int) -> None:
    ticks = _STARTS.get(pid)
    if ticks is not None and start_ticks(pid) == ticks and not gone(pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    try:
        os.waitpid(pid, os.WNOHANG)  # reap it if it is our child (or adopted by us)
    except ChildProcessError:
        pass


def wait_for(condition, timeout: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fake_root(tmp_path) -> str:
    """A root whose proc is the real /proc and whose /dev/shm is an empty temp dir."""
    root = tmp_path / "root"
    (root / "dev" / "shm").mkdir(parents=True)
    os.symlink("/proc", str(root / "proc"))
    return str(root)


def shm_file(root: str, name: str, size: int = 65536, age: float = 3600.0) -> str:
    """A real file in ROOT/dev/shm, last written ``age`` seconds ago."""
    path = os.path.join(root, "dev", "shm", name)
    with open(path, "wb") as handle:
        handle.write(b"\0" * size)
    past = time.time() - age
    os.utime(path, (past, past))
    return path


def live_facts(root: str = "/", port: int = 8000):
    """Only the processes probe, on this machine (no NVML here)."""
    return collect(Context(root=root, port=port, timeout=30), [("processes", proc_probe.collect)])


def run_command(name: str, argv: List[str], environ: Optional[Dict[str, str]] = None):
    """One command module with its real argparse setup and run(); returns (exit code, stdout, stderr)."""
    module = importlib.import_module(f"gpudoctor.commands.{name}")
    parser = argparse.ArgumentParser(prog=f"gpudoctor {name}")
    module.configure(parser)
    args = parser.parse_args(argv)
    out, err = io.StringIO(), io.StringIO()
    env = dict(os.environ if environ is None else environ)
    env["NO_COLOR"] = "1"
    code = int(module.run(args, IO(env, out, err)))
    return code, out.getvalue(), err.getvalue()


def findings(doc: Dict[str, Any], rule_id: str) -> List[Dict[str, Any]]:
    return [f for f in doc["findings"] if f["id"] == rule_id]
