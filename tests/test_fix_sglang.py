"""Issue 25: `gpudoctor fix --dry-run` lists a stale SGLang scheduler, detokenizer and DP
controller, and never a live SGLang server's processes.

Real processes started the way SGLang 0.5.23 starts them: a launcher whose command line is
`sglang serve …` starts its children with multiprocessing's spawn method
(srt/entrypoints/engine.py: ``mp.set_start_method("spawn")``, ``mp.Process(target=…)``), and
each child renames itself with setproctitle to the title SGLang's source gives it
(managers/scheduler.py ``sglang::scheduler`` + ``_DP<n>_PP<n>_ATTN_CP<n>_MOE_DP<n>_TP<n>_EP<n>``,
detokenizer_manager.py ``sglang::detokenizer``, data_parallel_controller.py
``sglang::data_parallel_controller``, whose own children are the schedulers when DP attention is
off, multi_tokenizer_mixin.py ``sglang::detokenizer_router`` and ``sglang::tokenizer_worker:<pid>``).
SGLang's children also ask for SIGKILL when their parent dies (utils/common.py
``kill_itself_when_parent_died``); one that survives anyway (stuck in the driver, or started
after its parent's death raced it) is what the stale cases make, by killing the launcher of
children that do not ask. tests/real/test_sglang_titles.py checks these titles against the
real wheel's source.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from typing import Any, Dict, List

import pytest

from gpudoctor.probes import processes as probe
from rules.process_view import CHILD_ROLES
from fakes.processes import (
    _STARTS,
    _can_unshare,
    gone,
    kill_if_same,
    live_facts,
    private_pid_namespace,
    start_ticks,
    wait_for,
)

pytest.importorskip("setproctitle")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# A stand-in for SGLang's launcher, run as `python DIR/bin/sglang serve --model-path M …`.
# cfg: {"orphan": bool, "children": [{"title": T, "children": [...]}, ...]}. Prints one JSON
# line {"launcher": pid, "children": {title: pid}} once every process has its title.
LAUNCHER = r'''
import json, multiprocessing as mp, os, sys, time

def child(title, kids, queue):
    import setproctitle
    setproctitle.setproctitle(title)
    for kid in kids:
        mp.get_context("spawn").Process(target=child, args=(kid["title"], kid.get("children", []), queue)).start()
    queue.put((title, os.getpid()))
    time.sleep(120)

def titles(kids):
    return sum((1 + titles(k.get("children", [])) for k in kids), 0)

if __name__ == "__main__":
    cfg = json.loads(os.environ["FAKE_SGLANG"])
    if cfg.get("orphan"):  # under init, as systemd or a container entrypoint runs it
        os.setsid()
        if os.fork():
            os._exit(0)
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    for kid in cfg["children"]:
        ctx.Process(target=child, args=(kid["title"], kid.get("children", []), queue)).start()
    seen = dict(queue.get(timeout=60) for _ in range(titles(cfg["children"])))
    sys.stdout.write(json.dumps({"launcher": os.getpid(), "children": seen}) + "\n")
    sys.stdout.flush()
    time.sleep(120)
'''

# SGLang 0.5.23's process layouts (srt/entrypoints/engine.py _launch_scheduler_processes,
# _launch_detokenizer_subprocesses): TP 2; DP 2 without DP attention (the controller starts the
# schedulers); DP attention (the launcher pre-starts them beside the controller); two
# detokenizers behind their router, and a tokenizer worker.
TP2 = [{"title": "sglang::scheduler_TP0"}, {"title": "sglang::scheduler_TP1"}, {"title": "sglang::detokenizer"}]
DP2 = [{"title": "sglang::data_parallel_controller",
        "children": [{"title": "sglang::scheduler_DP0"}, {"title": "sglang::scheduler_DP1"}]},
       {"title": "sglang::detokenizer"}]
DP_ATTENTION = [{"title": "sglang::scheduler_DP0_TP0_EP0"}, {"title": "sglang::scheduler_DP1_TP1_EP1"},
                {"title": "sglang::data_parallel_controller"}, {"title": "sglang::detokenizer"}]
ROUTER = [{"title": "sglang::scheduler"}, {"title": "sglang::detokenizer"}, {"title": "sglang::detokenizer"},
          {"title": "sglang::detokenizer_router"}, {"title": "sglang::tokenizer_worker:4242"}]


class Launchers:
    def __init__(self, tmp_path) -> None:
        self.script = tmp_path / "bin" / "sglang"
        self.script.parent.mkdir()
        self.script.write_text(LAUNCHER, encoding="utf-8")
        self.popens: List[subprocess.Popen] = []
        self.pids: List[int] = []

    def start(self, children: List[Dict[str, Any]], orphan: bool = True) -> Dict[str, Any]:
        popen = subprocess.Popen([sys.executable, str(self.script), "serve", "--model-path", "/models/Qwen3-8B", "--port", "30000"],
                                 env=dict(os.environ, FAKE_SGLANG=json.dumps({"orphan": orphan, "children": children})),
                                 stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
        self.popens.append(popen)
        line = popen.stdout.readline()
        assert line, "the stand-in launcher died before reporting"
        info = json.loads(line)
        for pid in [info["launcher"], *info["children"].values()]:
            self.pids.append(pid)
            _STARTS[pid] = start_ticks(pid)
        return info

    def cleanup(self) -> None:
        for pid in self.pids:
            kill_if_same(pid)
        for popen in self.popens:
            popen.kill()
            popen.wait(10)
            popen.stdout.close()


@pytest.fixture
def launchers(tmp_path):
    made = Launchers(tmp_path)
    try:
        yield made
    finally:
        made.cleanup()


def dry_run() -> str:
    proc = subprocess.run([sys.executable, "-m", "gpudoctor", "fix", "--dry-run"], capture_output=True, text=True,
                          cwd=REPO, timeout=120, stdin=subprocess.DEVNULL)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.stdout


@pytest.mark.parametrize("title, role", [
    ("sglang::scheduler", "worker"), ("sglang::scheduler_TP1", "worker"), ("sglang::scheduler_DP1", "worker"),
    ("sglang::scheduler_DP0_PP1_ATTN_CP1_MOE_DP1_TP3_EP3", "worker"), ("sglang::detokenizer", "helper"),
    ("sglang::data_parallel_controller", "helper"), ("sglang::detokenizer_router", "helper"),
    ("sglang::tokenizer_worker:4242", "helper"), ("sgl_diffusion::scheduler_0", "worker"),
    ("sgl_diffusion::scheduler_DP0_TP1", "worker"),
])
def test_sglang_titles_from_its_source(title, role):
    comm = title.encode()[:15].decode()
    assert probe.classify(comm, [title]) == ("sglang", role, title)
    stack, role_from_comm, _ = probe.classify(comm, [])  # a zombie: comm alone ("sgl_diffusion::" keeps no name)
    assert stack == "sglang" and role_from_comm in CHILD_ROLES


@private_pid_namespace
def test_a_live_sglang_server_is_never_listed(launchers):
    """Launchers under init (systemd, a container's entrypoint) in every layout SGLang has."""
    servers = [launchers.start(layout) for layout in (TP2, DP2, DP_ATTENTION, ROUTER)]
    records = {r["pid"]: r for r in live_facts().value("processes.serving")}
    out = dry_run()
    for server in servers:
        assert records[server["launcher"]]["role"] == "launcher", records[server["launcher"]]
        for title, pid in server["children"].items():
            assert records[pid]["stack"] == "sglang" and records[pid]["title"] == title, records[pid]
            assert f"PID {pid}" not in out, (title, out)
        assert f"PID {server['launcher']}" not in out, out


@private_pid_namespace
def test_stale_sglang_scheduler_detokenizer_and_dp_controller_are_listed(launchers):
    """The launcher is SIGKILLed; its children live on, adopted by PID 1."""
    tp2, dp2 = launchers.start(TP2), launchers.start(DP2)
    for server in (tp2, dp2):
        os.kill(server["launcher"], signal.SIGKILL)
        wait_for(lambda server=server: gone(server["launcher"]), what="the launcher to exit")
    out = dry_run()
    for title, pid in [*tp2["children"].items(), *dp2["children"].items()]:
        assert f"PID {pid}" in out, (title, out)
    controller = dp2["children"]["sglang::data_parallel_controller"]
    schedulers = sorted(dp2["children"][t] for t in ("sglang::scheduler_DP0", "sglang::scheduler_DP1"))
    # One finding per stack: the controller, with its schedulers under it.
    # One finding per stack: the controller's, with its schedulers under it.
    assert f"PID {controller} sglang::data_parallel_controller (user" in out and f"[GD601 PID {controller}]" in out, out
    for pid in schedulers:
        assert any(f"stop PID {pid} " in line and line.endswith(f"[GD601 PID {controller}]") for line in out.splitlines()), out


# Run as PID 1 of a PID namespace of its own: the user's script as a container's entrypoint. It
# starts an engine's processes itself (spawn, as sgl.Engine does) and one orphan in a session of
# its own (setsid + double fork), then asks gpudoctor and prints {"own": [...], "orphan": pid, "out": …}.
PID_1_SCRIPT = r'''
import json, multiprocessing as mp, os, subprocess, sys, time

def child(title, queue):
    import setproctitle
    setproctitle.setproctitle(title)
    queue.put(os.getpid())
    time.sleep(120)

if __name__ == "__main__":
    assert os.getpid() == 1
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    for title in ("sglang::scheduler_TP0", "sglang::detokenizer"):
        ctx.Process(target=child, args=(title, queue), daemon=True).start()
    own = [queue.get(timeout=60) for _ in range(2)]
    read, write = os.pipe()
    middle = os.fork()
    if middle == 0:
        os.setsid()
        if os.fork():
            os._exit(0)
        import setproctitle
        setproctitle.setproctitle("sglang::scheduler_TP1")
        os.write(write, str(os.getpid()).encode())
        time.sleep(120)
        os._exit(0)
    os.waitpid(middle, 0)
    orphan = int(os.read(read, 32))
    done = subprocess.run([sys.executable, "-m", "gpudoctor", "fix", "--dry-run"], capture_output=True, text=True, timeout=120)
    print(json.dumps({"own": own, "orphan": orphan, "out": done.stdout, "err": done.stderr[-2000:]}))
    sys.stdout.flush()
    os._exit(0)  # PID 1 exits: the kernel kills everything left in the namespace
'''


@pytest.mark.skipif(not _can_unshare(), reason="needs root and unshare")
def test_an_engine_started_by_a_python_pid_1_is_not_stale(tmp_path):
    """A container whose PID 1 is the user's script, running `sgl.Engine(...)` itself: its
    schedulers' parent is PID 1, as an adopted orphan's would be, but they are in its process
    group; an orphan that left it (a launcher started from a shell has a group of its own) is
    still listed."""
    script = tmp_path / "entrypoint.py"
    script.write_text(PID_1_SCRIPT, encoding="utf-8")
    proc = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", sys.executable, str(script)], capture_output=True,
                          text=True, timeout=240, cwd=REPO, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "Traceback" not in result["err"], result["err"]
    for pid in result["own"]:
        assert f"PID {pid} " not in result["out"], result["out"]
    assert f"PID {result['orphan']} sglang::scheduler_TP1" in result["out"], result["out"]


def test_sglang_shm_segments_are_left_over_only_once_their_creator_is_gone(tmp_path):
    """SGLang's PID-stamped segments (srt/utils/stale_shm_cleanup.py make_shm_name,
    managers/multi_tokenizer_mixin.py): a live server's tokenizer arguments, mapped by nobody
    after start-up, are kept; a dead scheduler's multimodal segment is a leftover that fix
    removes; the load snapshot and host pool files are SGLang's too."""
    from gpudoctor import actions, fix, registry
    from gpudoctor.engine import run_rules
    from fakes.processes import fake_root, shm_file

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True).stdout.strip()
    root = fake_root(tmp_path)
    live_args = shm_file(root, f"multi_tokenizer_args_{os.getpid()}")
    dead_mm = shm_file(root, f"sgl_shm_mm_{dead}_0badf00d")
    shm_file(root, "sglang_loads_scheduler_input_1a2b3c4d.shm")
    shm_file(root, "sglang_host_pool_" + "ab" * 16 + ".mmap")
    shm_file(root, "sgl_shm_notes.txt")  # not a name SGLang gives
    facts = live_facts(root)
    files = {f["name"]: f for f in facts.value("processes.shm")["files"]}
    assert set(files) == {os.path.basename(live_args), os.path.basename(dead_mm), "sglang_loads_scheduler_input_1a2b3c4d.shm",
                          "sglang_host_pool_" + "ab" * 16 + ".mmap"}, files
    assert files[os.path.basename(live_args)]["creator_pid"] == os.getpid()
    hidden = probe.pid_namespace_problem("/proc")  # in a container: "unused" cannot be known, nothing is removed
    text = json.dumps([f.to_json() for f in run_rules(facts, registry.select(registry.load_rules(), ["GD603"])).findings])
    assert os.path.basename(live_args) not in text, text
    assert hidden or os.path.basename(dead_mm) in text, text
    machine = fix.Machine(root=root)
    for path, status in ((live_args, fix.REFUSED), (dead_mm, fix.REFUSED if hidden else "go")):
        info = os.lstat(path)
        verdict = machine.check_file(actions.RemoveFile(path, info.st_dev, info.st_ino, info.st_uid, info.st_size))
        assert verdict.status == status, (path, verdict)
