"""probes/processes.py on real processes, real sockets, real files, and on broken /proc text."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import tempfile
import threading

import pytest

from gpudoctor.probes import Context
from gpudoctor.probes import processes as probe
from fakes.processes import (  # noqa: F401  (spawner is a fixture)
    ME,
    NOBODY,
    fake_root,
    free_port,
    live_facts,
    needs_root,
    shm_file,
    spawner,
    wait_for,
)

setproctitle = pytest.importorskip("setproctitle")


# --- recognising the serving stack -----------------------------------------------------------
@pytest.mark.parametrize(
    "comm, argv, expected",
    [
        # setproctitle rewrites cmdline; comm is cut to 15 bytes (facts.md §4.10, capture2.log)
        ("VLLM::EngineCor", ["VLLM::EngineCore"], ("vllm", "engine_core", "VLLM::EngineCore")),
        ("VLLM::EngineCor", ["VLLM::EngineCore_DP1"], ("vllm", "engine_core", "VLLM::EngineCore_DP1")),
        ("VLLM::Worker_TP", ["VLLM::Worker_DP0_PP0_TP1_EP0"], ("vllm", "worker", "VLLM::Worker_DP0_PP0_TP1_EP0")),
        ("VLLM::APIServer", ["VLLM::APIServer_0"], ("vllm", "api_server", "VLLM::APIServer_0")),
        ("VLLM::DPCoordin", ["VLLM::DPCoordinator"], ("vllm", "coordinator", "VLLM::DPCoordinator")),
        ("vLLM-Omni::Engi", ["vLLM-Omni::EngineCore"], ("vllm", "engine_core", "vLLM-Omni::EngineCore")),
        # renamed with prctl only (the capture2.log process): cmdline still says python3
        ("VLLM::EngineCor", ["/opt/torch/.venv/bin/python3", "-c", "import ctypes"], ("vllm", "engine_core", "VLLM::EngineCor")),
        # a zombie has no cmdline left
        ("VLLM::Worker", [], ("vllm", "worker", "VLLM::Worker")),
        ("sglang::schedul", ["sglang::scheduler_TP0"], ("sglang", "worker", "sglang::scheduler_TP0")),
        ("sglang::detoken", ["sglang::detokenizer"], ("sglang", "helper", "sglang::detokenizer")),
        # SGLang 0.5.23's other titles (scheduler.py, data_parallel_controller.py, multi_tokenizer_mixin.py, diffusion gpu_worker.py)
        ("sglang::schedul", ["sglang::scheduler_DP1_PP0_TP3_EP3"], ("sglang", "worker", "sglang::scheduler_DP1_PP0_TP3_EP3")),
        ("sglang::schedul", ["sglang::scheduler"], ("sglang", "worker", "sglang::scheduler")),
        ("sglang::schedul", [], ("sglang", "worker", "sglang::schedul")),  # a zombie: comm only
        ("sglang::data_pa", ["sglang::data_parallel_controller"], ("sglang", "helper", "sglang::data_parallel_controller")),
        ("sglang::detoken", ["sglang::detokenizer_router"], ("sglang", "helper", "sglang::detokenizer_router")),
        ("sglang::tokeniz", ["sglang::tokenizer_worker:4242"], ("sglang", "helper", "sglang::tokenizer_worker:4242")),
        ("sgl_diffusion::", ["sgl_diffusion::scheduler_0"], ("sglang", "worker", "sgl_diffusion::scheduler_0")),
        ("sglang_tools::x", ["sglang_tools::x"], None),  # someone else's prefix
        ("vllm", ["/usr/bin/python3", "/usr/local/bin/vllm", "serve", "Qwen/Qwen3-8B"], ("vllm", "launcher", "vllm")),
        ("vllm", ["/usr/local/bin/vllm", "serve", "m"], ("vllm", "launcher", "vllm")),
        ("python3", ["python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "m"], ("vllm", "launcher", "python3")),
        ("python3", ["python", "-m", "sglang.launch_server", "--model-path", "m"], ("sglang", "launcher", "python3")),
        ("llama-server", ["/usr/bin/llama-server", "-m", "x.gguf"], ("llama.cpp", "launcher", "llama-server")),
        ("python3", ["python3", "train.py"], None),
        ("vllm", ["/usr/local/bin/vllm", "bench", "serve"], None),
        ("ray::IDLE", ["ray::IDLE"], None),
        ("bash", ["bash", "-c", "echo vllm serve"], None),
    ],
)
def test_classify(comm, argv, expected):
    assert probe.classify(comm, argv) == expected


def test_custom_vllm_prefix():
    assert probe.classify("MYCO::EngineCor", ["MYCO::EngineCore"]) is None
    assert probe.classify("MYCO::EngineCor", ["MYCO::EngineCore"], "MYCO")[:2] == ("vllm", "engine_core")


def test_secrets_on_the_command_line_are_masked():
    argv = ["vllm", "serve", "m", "--api-key", "hunter2", "--hf-token=hf_abc", "--port", "8000"]
    assert probe.mask_secrets(argv) == ["vllm", "serve", "m", "--api-key", "***", "--hf-token=***", "--port", "8000"]


@pytest.mark.parametrize(
    "data, expected",
    [
        (b"645 (VLLM::EngineCor) S 1 644 644 0 -1 4194560 0 0 0 0 1 2 0 0 20 0 1 0 12345 0 0", ("VLLM::EngineCor", "S", 1, 12345)),
        (b"7 (a) (b c) Z 3 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 99 0 0", ("a) (b c", "Z", 3, 99)),
    ],
)
def test_parse_stat(data, expected):
    st = probe.parse_stat(1, data)
    assert (st.comm, st.state, st.ppid, st.start_ticks) == expected


@pytest.mark.parametrize("data", [b"", b"garbage", b"12 (x) S", b"12 (x) S one two three", b"\xff\xfe(\x00"])
def test_parse_stat_garbage(data):
    assert probe.parse_stat(12, data) is None


# --- real processes -----------------------------------------------------------------------------
def test_renamed_orphan_is_recorded(spawner):
    orphan = spawner.spawn("VLLM::EngineCore", orphan=True, child_title="VLLM::Worker_TP0")
    snap = live_facts()
    serving = {r["pid"]: r for r in snap.value("processes.serving")}
    core, worker = serving[orphan["pid"]], serving[orphan["child"]]
    assert (core["title"], core["role"], core["stack"], core["comm"]) == ("VLLM::EngineCore", "engine_core", "vllm", "VLLM::EngineCor")
    assert core["user"] == ME and core["uid"] == os.geteuid()
    assert core["ppid"] != os.getpid() and str(core["ppid"]) in snap.value("processes.index")
    assert (worker["title"], worker["role"], worker["ppid"]) == ("VLLM::Worker_TP0", "worker", orphan["pid"])
    assert core["start_ticks"] == probe.read_stat("/proc", orphan["pid"]).start_ticks
    row = snap.value("processes.index")[str(orphan["pid"])]
    assert row[:2] + row[3:4] == [core["ppid"], os.geteuid(), "VLLM::EngineCor"] and row[2] in ("S", "R")
    # create_time agrees with psutil's (boot time + start ticks / CLK_TCK)
    psutil = pytest.importorskip("psutil")
    assert abs(row[4] - psutil.Process(orphan["pid"]).create_time()) < 1.0


@needs_root
def test_prctl_only_rename_and_other_owner(spawner):
    other = spawner.spawn("VLLM::EngineCore", method="prctl", uid=NOBODY)
    record = {r["pid"]: r for r in live_facts().value("processes.serving")}[other["pid"]]
    assert record["title"] == "VLLM::EngineCor"  # comm only: cmdline is still python -c …
    assert record["cmdline"].startswith(sys.executable)
    assert record["uid"] == NOBODY and record["user"] in ("nobody", str(NOBODY))


def test_listener_on_the_serving_port(spawner):
    port = free_port()
    server = spawner.spawn("VLLM::APIServer_0", listen=port)
    facts = live_facts(port=port)
    listeners = facts.value("processes.port")["listeners"]
    assert [(item["address"], item["pids"]) for item in listeners] == [("127.0.0.1", [server["pid"]])]
    assert facts.get("processes.port").source.startswith("netlink")
    assert live_facts(port=free_port()).value("processes.port")["listeners"] == []


def test_netlink_and_proc_net_tcp_agree():
    port = free_port()
    with socket.socket() as s4, socket.socket(socket.AF_INET6) as s6:
        s4.bind(("127.0.0.1", port))
        s4.listen()
        try:
            s6.bind(("::1", port))
            s6.listen()
        except OSError:
            pass  # no IPv6 here
        netlink = probe.listeners_netlink(port)
        text = [(open("/proc/net/tcp").read(), 4), (open("/proc/net/tcp6").read(), 6)]
        procfs = [item for body, family in text for item in probe.parse_net_tcp(body, port, family)]
    assert netlink and sorted(map(str, netlink)) == sorted(map(str, procfs))


def test_fake_root_reads_its_own_proc_net_tcp(tmp_path, spawner):
    port = free_port()
    server = spawner.spawn("VLLM::APIServer_0", listen=port)
    facts = live_facts(fake_root(tmp_path), port=port)
    assert facts.get("processes.port").source.endswith("net/tcp, " + str(tmp_path / "root" / "proc") + "/PID/fd")
    assert facts.value("processes.port")["listeners"][0]["pids"] == [server["pid"]]


def test_shm_files_in_use_and_left_over(tmp_path, spawner):
    root = fake_root(tmp_path)
    used = shm_file(root, "psm_0badf00d")
    left = shm_file(root, "psm_deadbeef", size=4096)
    nccl = shm_file(root, "nccl-AbC123")
    shm_file(root, "psm_tooshort")  # not CPython's name: ignored
    shm_file(root, "notes.txt")
    os.symlink(left, os.path.join(root, "dev", "shm", "nccl-link"))  # symlinks are never listed
    holder = spawner.spawn("VLLM::EngineCore", map=used)
    files = {f["name"]: f for f in live_facts(root).value("processes.shm")["files"]}
    assert sorted(files) == ["nccl-AbC123", "psm_0badf00d", "psm_deadbeef"]
    assert files["psm_0badf00d"]["in_use_by"] == [holder["pid"]]
    assert files["psm_deadbeef"]["in_use_by"] == [] and files["psm_deadbeef"]["size"] == 4096
    assert (files["nccl-AbC123"]["kind"], files["psm_deadbeef"]["kind"]) == ("nccl", "python_shared_memory")
    assert files["nccl-AbC123"]["path"] == nccl and files["nccl-AbC123"]["inode"] == os.stat(nccl).st_ino


# --- never crash: broken, vanishing and forbidden /proc ---------------------------------------------
def test_garbage_proc_never_raises(tmp_path):
    root = tmp_path / "root"
    proc = root / "proc"
    (proc / "net").mkdir(parents=True)
    (proc / "stat").write_text("cpu 1 2 3\nbtime notanumber\n")
    (proc / "net" / "tcp").write_text("header\n0: garbage\n  1: 0100007F:ZZZZ 00000000:0000 0A x\n")
    (proc / "100").mkdir()  # vanished: no stat any more
    (proc / "101").mkdir()
    (proc / "101" / "stat").write_bytes(b"\x00garbage")  # unreadable
    (proc / "102").mkdir()
    (proc / "102" / "stat").write_bytes(b"102 (VLLM::EngineCor) S 1 102 102 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 500 0 0")
    # 102 has no cmdline file: recognised by comm alone
    facts = probe.collect(Context(root=str(root), port=1))
    scan = facts["processes.scan"].value
    assert (scan["count"], scan["vanished"], scan["unreadable"], scan["boot_time"]) == (1, 1, 1, None)
    assert [r["pid"] for r in facts["processes.serving"].value] == [102]
    assert facts["processes.serving"].value[0]["create_time"] is None
    assert facts["processes.port"].value == {"port": 1, "listeners": []}
    assert facts["processes.shm"].status == "absent"


def test_no_proc_at_all(tmp_path):
    facts = probe.collect(Context(root=str(tmp_path)))
    assert {f.status for f in facts.values()} == {"absent"}
    assert "cannot list" in facts["processes.index"].detail


def test_processes_vanishing_during_the_scan():
    """Hundreds of short-lived processes start and exit while the probe scans."""
    stop = threading.Event()
    spawned = []

    def churn():
        while not stop.is_set():
            spawned.append(subprocess.Popen(["true"]))
            if len(spawned) > 20:
                spawned.pop(0).wait()

    thread = threading.Thread(target=churn, daemon=True)
    thread.start()
    try:
        counts = [probe.collect(Context())["processes.scan"].value for _ in range(40)]
    finally:
        stop.set()
        thread.join(10)
        for p in spawned:
            p.wait()
    assert all(c["count"] > 0 for c in counts)


def _collect_as(uid: int, root: str, port: int) -> dict:
    """Run the probe in a forked child that has dropped to ``uid``: other users' /proc/PID/fd
    and /proc/PID/maps are then closed to it."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.close(read)
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            facts = probe.collect(Context(root=root, port=port))
            os.write(write, json.dumps({k: v.to_json() for k, v in facts.items()}).encode())
        finally:
            os._exit(0)
    os.close(write)
    chunks = []
    while True:
        chunk = os.read(read, 1 << 16)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(read)
    os.waitpid(pid, 0)
    return json.loads(b"".join(chunks))


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to drop to another user")
def test_access_denied_is_recorded_not_raised(spawner):
    # pytest's tmp_path is private to root: use a directory "nobody" can enter.
    top = tempfile.mkdtemp(prefix="gd-nobody-")
    os.chmod(top, 0o755)
    try:
        _access_denied(pathlib.Path(top), spawner)
    finally:
        shutil.rmtree(top)


def _access_denied(tmp_path, spawner):
    root = fake_root(tmp_path)
    port = free_port()
    used = shm_file(root, "psm_0badf00d")
    server = spawner.spawn("VLLM::APIServer_0", listen=port, map=used)  # owned by root
    facts = _collect_as(NOBODY, root, port)
    listeners = facts["processes.port"]["value"]["listeners"]
    assert [(item["uid"], item["pids"]) for item in listeners] == [(0, [])]  # root's fds are closed to nobody
    shm = facts["processes.shm"]["value"]
    assert shm["files"][0]["in_use_by"] == [] and shm["maps_unreadable_uids"] == [0]
    assert server["pid"] in [r["pid"] for r in facts["processes.serving"]["value"]]
    assert facts["processes.self"]["value"]["uid"] == NOBODY
