"""GD601–GD605 (and GD302's share of GPU memory) on real processes and real H200 facts.

The GPU side comes from tests/fixtures/snapshots/h200x2-busy.json (recorded on an H200 with a
torch process holding 3.6 GiB on GPU 1 and 0.5 GiB on GPU 0); the process side from this
machine, where the tests start real processes. The join is done by the rules, as in
`gpudoctor check`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from gpudoctor import registry
from gpudoctor.engine import run_rules
from gpudoctor.probes import processes as probe
from gpudoctor.snapshot import Fact, Snapshot
from fakes.processes import (  # noqa: F401  (spawner is a fixture)
    ME,
    NOBODY,
    fake_root,
    findings,
    free_port,
    gone,
    live_facts,
    needs_root,
    ppid,
    private_pid_namespace,
    run_command,
    shm_file,
    spawner,
    wait_for,
)

pytest.importorskip("setproctitle")
BUSY = Path(__file__).parent / "fixtures" / "snapshots" / "h200x2-busy.json"
BUSY_PID = 896  # the torch process in that snapshot


def check(root: str, port: int, *extra: str):
    code, out, err = run_command("check", ["--root", root, "--port", str(port), "--format", "json", "--select", "processes", *extra])
    return code, json.loads(out)


def busy_with(processes_snapshot: Snapshot, pid_map: dict) -> Snapshot:
    """The recorded H200 snapshot, its NVML PIDs renamed, plus this machine's process facts."""
    snap = Snapshot.load(str(BUSY))
    for path, fact in list(snap.facts.items()):
        if path.endswith(".processes") and fact.ok:
            value = [dict(entry, pid=pid_map.get(entry["pid"], entry["pid"])) for entry in fact.value]
            snap.facts[path] = Fact(value, fact.status, fact.source, fact.detail)
    snap.update({k: v for k, v in processes_snapshot.facts.items() if k.startswith("processes.")})
    # Both halves as seen from the host's PID namespace (NVML reports host PIDs), wherever
    # the tests run; test_container_pid_namespace_is_not_joined covers the other case.
    scan = dict(snap.value("processes.scan"), pid_namespace={"inode": 0xEFFFFFFC, "initial": True})
    snap.facts["processes.scan"] = Fact(scan, "ok", "/proc")
    return snap


def run(snap: Snapshot, *ids: str):
    rules = registry.select(registry.load_rules(), list(ids))
    doc = {"findings": [f.to_json() for f in run_rules(snap, rules).findings]}
    return doc, {o.rule.id: o for o in run_rules(snap, rules).outcomes}


# --- the whole story through `check` ---------------------------------------------------------------
def test_check_reports_stale_stack_port_and_shm(tmp_path, spawner):
    root = fake_root(tmp_path)
    port = free_port()
    mapped = shm_file(root, "psm_0badf00d")
    shm_file(root, "psm_deadbeef", size=8192)
    shm_file(root, "nccl-AbC123")
    shm_file(root, "psm_c0ffee00", age=1)  # written a second ago: maybe not mapped yet
    orphan = spawner.spawn("VLLM::EngineCore", orphan=True, listen=port, map=mapped, child_title="VLLM::Worker_TP0")
    code, doc = check(root, port)
    assert code == 1  # GD602 is an error: the port is held by a stale process

    [stale] = [f for f in findings(doc, "GD601") if f["subject"] == f"PID {orphan['pid']}"]
    assert stale["severity"] == "warning"  # no GPU here
    assert f"VLLM::EngineCore (PID {orphan['pid']}, user {ME}" in stale["message"]
    assert "adopted it" in stale["message"] and f"PID {orphan['child']}" in stale["message"]
    evidence = {e["path"]: e["value"] for e in stale["evidence"]}
    assert f"VLLM::Worker_TP0 · user {ME}" in evidence[f"PID {orphan['child']}"]
    actions = stale["fix"]["actions"]
    assert sorted(a["pid"] for a in actions) == sorted([orphan["pid"], orphan["child"]])
    assert f"kill -TERM {min(orphan['pid'], orphan['child'])} {max(orphan['pid'], orphan['child'])}" in stale["fix"]["commands"][1]

    [taken] = findings(doc, "GD602")
    assert taken["severity"] == "error" and f"127.0.0.1:{port} by stale PID {orphan['pid']} VLLM::EngineCore (user {ME}" in taken["message"]

    [shm] = findings(doc, "GD603")
    assert f"psm_deadbeef (8 KiB, python_shared_memory, user {ME}, last written 60 min ago)" in shm["message"]
    assert "nccl-AbC123" in shm["message"] and "psm_0badf00d" not in shm["message"] and "psm_c0ffee00" not in shm["message"]
    assert sorted(os.path.basename(a["path"]) for a in shm["fix"]["actions"]) == ["nccl-AbC123", "psm_deadbeef"]
    assert not any(f"PID {orphan['pid']}" in f["message"] for f in findings(doc, "GD605"))


def mentions(doc, rule_id: str, pid: int) -> bool:
    """Whether a finding of that rule names this PID (other tests' processes may be around)."""
    return any(f"PID {pid}" in f["message"] or f["subject"] == f"PID {pid}" for f in findings(doc, rule_id))


@private_pid_namespace
def test_fix_yes_stops_them_and_the_recheck_is_clean(tmp_path, spawner):
    root = fake_root(tmp_path)
    port = free_port()
    mapped = shm_file(root, "psm_0badf00d")
    left = shm_file(root, "psm_deadbeef")
    orphan = spawner.spawn("VLLM::EngineCore", orphan=True, listen=port, map=mapped, child_title="VLLM::Worker_TP0")
    stubborn = spawner.spawn("VLLM::Worker_TP1", orphan=True, ignore_term=True)
    # Issue 14: from a private PID namespace (how this test isolates itself) gpudoctor cannot see every
    # process that may map /dev/shm, so it stops the processes but refuses the files and says why.
    private = probe.pid_namespace_problem("/proc") != ""
    code, out, err = run_command("fix", ["--yes", "--root", root, "--port", str(port), "--grace", "1"])
    assert code == (1 if private else 0), out + err
    for pid in (orphan["pid"], orphan["child"], stubborn["pid"]):
        assert gone(pid), pid
        assert f"done: stop PID {pid}" in out
    assert f"PID {stubborn['pid']} still running after 1 s: sent SIGKILL" in out
    assert "stopped (SIGTERM)" in out and "stopped (SIGKILL after 1 s)" in out
    assert "that left 1 more action(s)" in out  # the mapped segment only became a leftover in round 2
    if private:
        assert os.path.exists(left) and os.path.exists(mapped)
        assert "will not: gpudoctor runs in a private PID namespace" in out
    else:
        assert not os.path.exists(left) and not os.path.exists(mapped)
        assert "re-check: clean" in out
    last = out.strip().splitlines()[-1]  # issue 31: the last line says what to do next
    assert last.startswith("next: ") and (("refused" in last) if private else ("nothing left for `fix`" in last)), last
    assert ("running as root" in err) == (os.geteuid() == 0)
    code, doc = check(root, port)
    assert findings(doc, "GD602") == [] and (private or findings(doc, "GD603") == [])
    assert not any(mentions(doc, "GD601", pid) for pid in (orphan["pid"], orphan["child"], stubborn["pid"]))


@needs_root
@private_pid_namespace
def test_fix_refuses_another_users_process(tmp_path, spawner):
    theirs = spawner.spawn("VLLM::EngineCore", orphan=True, uid=NOBODY)
    mine = spawner.spawn("VLLM::EngineCore", orphan=True)
    root = fake_root(tmp_path)
    code, doc = check(root, free_port())
    owners = {f["subject"]: f["message"] for f in findings(doc, "GD601")}
    assert f"PID {theirs['pid']}, user nobody" in owners[f"PID {theirs['pid']}"]
    code, out, _ = run_command("fix", ["--yes", "--root", root, "--grace", "1"])
    assert code == 1
    assert f"will not: owned by nobody (uid {NOBODY}), not by you (root)" in out
    assert not gone(theirs["pid"]) and gone(mine["pid"])
    assert f"still pending:\n  - stop PID {theirs['pid']}" in out


@private_pid_namespace
def test_fix_is_a_dry_run_without_a_terminal(tmp_path, spawner):
    orphan = spawner.spawn("VLLM::EngineCore", orphan=True)
    code, out, _ = run_command("fix", ["--root", fake_root(tmp_path)])  # pytest's stdin is not a TTY
    assert code == 1 and "dry run (stdin is not a terminal): nothing was done" in out
    assert f"stop PID {orphan['pid']} VLLM::EngineCore (user {ME})" in out
    assert not gone(orphan["pid"])


def test_zombie_serving_process(tmp_path):
    child = subprocess.Popen([sys.executable, "-c", "import setproctitle, os; setproctitle.setproctitle('VLLM::Worker_TP1')"])
    try:
        wait_for(lambda: gone(child.pid), what="the child to exit")  # exited, not reaped: a zombie of ours
        code, doc = check(fake_root(tmp_path), free_port())
        [zombie] = [f for f in findings(doc, "GD605") if f["subject"] == f"PID {os.getpid()}"]
        assert zombie["severity"] == "warning"
        assert f"VLLM::Worker_TP (PID {child.pid})" in zombie["message"]  # comm (15 bytes) survives; cmdline is gone
        assert "has not reaped them" in zombie["message"] and zombie["fix"].get("actions") is None
        assert not mentions(doc, "GD601", child.pid)
    finally:
        child.wait()
    code, doc = check(fake_root(tmp_path / "again"), free_port())
    assert not mentions(doc, "GD605", child.pid)


FAKE_LAUNCHER = """
import json, os, sys, time
import setproctitle
ready, done = os.pipe()
engine = os.fork()
if engine == 0:
    setproctitle.setproctitle("VLLM::EngineCore")
    os.write(done, b"1")
    time.sleep(120)
    os._exit(0)
os.read(ready, 1)
sys.stdout.write(json.dumps({"pid": os.getpid(), "child": engine}) + "\\n")
sys.stdout.flush()
time.sleep(120)
"""


def fake_vllm(tmp_path) -> str:
    """A package named vllm whose `python -m vllm.entrypoints.openai.api_server` starts an
    engine core the way vLLM does (a child titled VLLM::EngineCore) and waits."""
    top = tmp_path / "site"
    module = top / "vllm" / "entrypoints" / "openai"
    module.mkdir(parents=True)
    for folder in (top / "vllm", top / "vllm" / "entrypoints", module):
        (folder / "__init__.py").write_text("")
    (module / "api_server.py").write_text(FAKE_LAUNCHER)
    return str(top)


def test_killed_launcher_leaves_a_stale_engine(tmp_path, spawner):
    """vllm-project/vllm#55510: SIGKILL the API server, the engine core lives on."""
    argv = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", "m", "--port", "1"]
    server = spawner.spawn("", orphan=True, exec=argv, env={"PYTHONPATH": fake_vllm(tmp_path)})
    # Under init on purpose (systemd, a container entrypoint) with its engine: nothing is stale.
    code, doc = check(fake_root(tmp_path), free_port())
    assert not mentions(doc, "GD601", server["child"]) and not mentions(doc, "GD601", server["pid"])
    roles = {r["pid"]: r["role"] for r in live_facts().value("processes.serving")}
    assert (roles[server["pid"]], roles[server["child"]]) == ("launcher", "engine_core")
    os.kill(server["pid"], signal.SIGKILL)
    wait_for(lambda: ppid(server["child"]) != server["pid"], what="the engine to be adopted")
    code, doc = check(fake_root(tmp_path / "after"), free_port())
    [stale] = [f for f in findings(doc, "GD601") if f["subject"] == f"PID {server['child']}"]
    assert "its parent is gone" in stale["message"]


def test_engine_under_a_live_script_is_not_stale(tmp_path, spawner):
    """An engine core whose parent is alive (offline LLM() in a script: here, this test)."""
    engine = spawner.spawn("VLLM::EngineCore")
    code, doc = check(fake_root(tmp_path), free_port())
    assert f"PID {engine['pid']}" not in {f["subject"] for f in findings(doc, "GD601")}


# --- joining NVML's PIDs ----------------------------------------------------------------------------
def test_stale_engine_holding_gpu_memory_is_an_error_and_gd302_stays_quiet(spawner):
    orphan = spawner.spawn("VLLM::EngineCore", orphan=True)
    snap = busy_with(live_facts(), {BUSY_PID: orphan["pid"]})
    doc, outcomes = run(snap, "GD601", "GD302", "GD604")
    [stale] = [f for f in findings(doc, "GD601") if f["subject"] == f"PID {orphan['pid']}"]
    assert stale["severity"] == "error"
    assert "holding 0.5 GiB on GPU 0, 3.6 GiB on GPU 1" in stale["message"]
    assert any(e["path"] == f"PID {orphan['pid']}" and "GPU 1: 3.6 GiB" in e["value"] for e in stale["evidence"])
    assert findings(doc, "GD302") == [] and findings(doc, "GD604") == []  # reported once, by GD601


def test_live_holder_is_named_by_gd302(spawner):
    holder = spawner.spawn("python3")  # a live, non-serving process (a notebook, a training job)
    snap = busy_with(live_facts(), {BUSY_PID: holder["pid"]})
    doc, _ = run(snap, "GD601", "GD302", "GD604")
    [in_use] = findings(doc, "GD302")
    assert in_use["subject"] == "GPU 1"
    assert f"held by PID {holder['pid']} (python3, user {ME}, up " in in_use["message"] and "3.6 GiB)" in in_use["message"]
    assert not mentions(doc, "GD601", holder["pid"]) and findings(doc, "GD604") == []


def test_a_live_servers_engine_core_is_named_as_that_servers(tmp_path, spawner):
    """issue 31: GD302 warned about a live server's engine core holding 35.5 GiB without linking
    it to the server on port 8000 it belongs to."""
    argv = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", "m", "--port", "8123"]
    server = spawner.spawn("", exec=argv, env={"PYTHONPATH": fake_vllm(tmp_path)})
    snap = busy_with(live_facts(), {BUSY_PID: server["child"]})
    doc, _ = run(snap, "GD601", "GD302", "GD604")
    [in_use] = findings(doc, "GD302")
    assert f"held by PID {server['child']} (VLLM::EngineCore, user {ME}" in in_use["message"]
    assert f"3.6 GiB) — the engine core of the live vLLM server PID {server['pid']} (port 8123)" in in_use["message"]
    assert not mentions(doc, "GD601", server["child"])


def test_memory_of_invisible_processes():
    facts = live_facts()
    absent = 1 << 22  # above pid_max: no process here has it
    assert str(absent) not in facts.value("processes.index")
    snap = busy_with(facts, {BUSY_PID: absent})
    doc, _ = run(snap, "GD302", "GD604")
    [hidden] = findings(doc, "GD604")
    assert hidden["subject"] == "GPU 1" and f"NVML lists PID {absent}, which do(es) not exist" in hidden["message"]
    assert "3.6 GiB in use by processes not visible here (this is a docker container)" in hidden["message"]
    assert findings(doc, "GD302") == []
    # NVML lists nothing at all (what a container without the host's PID namespace sees):
    snap.facts["gpu.1.processes"] = Fact([], "ok", "nvml")
    doc, _ = run(snap, "GD604")
    assert "3.6 GiB is not listed under any process" in findings(doc, "GD604")[0]["message"]


def test_zombie_holding_gpu_memory_under_init_is_reported():
    facts = live_facts()
    snap = busy_with(facts, {})
    index = dict(snap.value("processes.index"))
    index[str(BUSY_PID)] = [1, 0, "Z", "VLLM::Worker_TP", 1.0]
    snap.facts["processes.index"] = Fact(index, "ok", "/proc")
    snap.facts["processes.serving"] = Fact(
        [{"pid": BUSY_PID, "ppid": 1, "pgid": BUSY_PID, "uid": 0, "user": "root", "state": "Z", "comm": "VLLM::Worker_TP",
          "title": "VLLM::Worker_TP", "cmdline": "", "start_ticks": 5, "create_time": 1.0, "stack": "vllm", "role": "worker"}],
        "ok", "/proc")
    doc, _ = run(snap, "GD605", "GD302", "GD601")
    [zombie] = findings(doc, "GD605")
    assert zombie["severity"] == "error" and f"NVML still lists PID {BUSY_PID} with 0.5 GiB on GPU 0, 3.6 GiB on GPU 1" in zombie["message"]
    assert findings(doc, "GD302") == [] and not mentions(doc, "GD601", BUSY_PID)


def test_old_snapshot_without_process_facts():
    snap = Snapshot.load(str(BUSY))
    doc, outcomes = run(snap, "GD302", "GD601", "GD602", "GD603", "GD604", "GD605")
    [in_use] = findings(doc, "GD302")
    assert "held by PID 896" in in_use["message"]  # as before the process table existed
    assert {i: outcomes[i].status for i in ("GD601", "GD602", "GD603", "GD604", "GD605")} == dict.fromkeys(
        ("GD601", "GD602", "GD603", "GD604", "GD605"), "unknown")


def test_container_pid_namespace_is_not_joined(spawner):
    """Inside a container NVML's PIDs are the host's: a process here with the same number
    is someone else (NVIDIA/nvidia-docker#1483)."""
    orphan = spawner.spawn("VLLM::EngineCore", orphan=True)
    snap = busy_with(live_facts(), {BUSY_PID: orphan["pid"]})
    snap.facts["processes.scan"].value["pid_namespace"] = {"inode": 4026532000, "initial": False}
    doc, _ = run(snap, "GD601", "GD302", "GD604")
    [stale] = [f for f in findings(doc, "GD601") if f["subject"] == f"PID {orphan['pid']}"]
    assert stale["severity"] == "warning" and "NVML's PIDs (the host's) cannot be matched" in stale["message"]
    [hidden] = findings(doc, "GD604")
    assert hidden["subject"] == "GPU 1" and f"NVML lists PID {orphan['pid']}: host PIDs" in hidden["message"]
    assert findings(doc, "GD302") == []


def test_pid_namespace_is_read():
    namespace = live_facts().value("processes.scan")["pid_namespace"]
    assert namespace["inode"] == os.stat("/proc/self/ns/pid").st_ino
    assert namespace["initial"] == (namespace["inode"] == 0xEFFFFFFC)
