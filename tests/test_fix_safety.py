"""Issue 14: `gpudoctor fix` never harms another process.

Real processes renamed with setproctitle as vLLM does, and as tools that merely start with
"vllm" do; a real leftover /dev/shm segment seen from a private PID namespace
(`unshare --pid --fork --mount-proc`), where the processes that may map it are invisible.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from gpudoctor import fix
from gpudoctor.probes import processes as probe
from fakes.processes import (  # noqa: F401  (spawner is a fixture)
    _can_unshare,
    fake_root,
    private_pid_namespace,
    shm_file,
    spawner,
)

pytest.importorskip("setproctitle")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize("comm, argv", [
    ("vllm_bench::run", ["vllm_bench::runner"]),
    ("vllmtools::clea", ["vllmtools::cleanup"]),
    ("vllm::EngineCor", ["vllm::EngineCore"]),
    ("VLLM::Tokenize", ["VLLM::Tokenizer"]),
    ("VLLMX::EngineCo", ["VLLMX::EngineCore"]),
    ("python3", ["python3", "-m", "vllm_bench.serve"]),
    ("sglangx::schedu", ["sglangx::scheduler"]),
])
def test_titles_that_only_look_like_vllm_are_not_serving_processes(comm, argv):
    assert probe.classify(comm, argv) is None


@pytest.mark.parametrize("title, role", [
    ("VLLM::EngineCore", "engine_core"), ("VLLM::EngineCore_DP3", "engine_core"), ("VLLM::Worker", "worker"),
    ("VLLM::Worker_TP1", "worker"), ("VLLM::Worker_DP0_PP1_TP3_EP0", "worker"), ("VLLM::Worker_PP0_TP0_DCP1", "worker"),
    ("VLLM::APIServer_0", "api_server"), ("VLLM::DPCoordinator", "coordinator"),
])
def test_vllm_titles_from_its_source(title, role):
    assert probe.classify(title.encode()[:15].decode(), [title]) == ("vllm", role, title)
    assert probe.classify(title.encode()[:15].decode(), [])[:2] == ("vllm", role)  # a zombie: comm only


@private_pid_namespace
def test_fix_dry_run_lists_only_vllm_and_sglang_processes(spawner):
    ours = spawner.spawn("VLLM::EngineCore", orphan=True)
    sglang = spawner.spawn("sglang::scheduler_TP0", orphan=True)
    detokenizer = spawner.spawn("sglang::detokenizer", orphan=True)
    controller = spawner.spawn("sglang::data_parallel_controller", orphan=True)
    bench = spawner.spawn("vllm_bench::runner", orphan=True)
    tools = spawner.spawn("vllmtools::cleanup", orphan=True)
    proc = subprocess.run([sys.executable, "-m", "gpudoctor", "fix", "--dry-run"], capture_output=True, text=True,
                          cwd=REPO, timeout=120, stdin=subprocess.DEVNULL)
    assert "Traceback" not in proc.stderr
    out = proc.stdout
    assert f"PID {ours['pid']}" in out and f"PID {sglang['pid']}" in out, out
    assert f"PID {detokenizer['pid']}" in out and f"PID {controller['pid']}" in out, out  # SGLang 0.5.23's other titles
    assert f"PID {bench['pid']}" not in out and f"PID {tools['pid']}" not in out, out


@pytest.mark.skipif(not _can_unshare(), reason="needs root and unshare")
def test_shm_removal_is_refused_in_a_private_pid_namespace(tmp_path):
    root = fake_root(tmp_path)
    path = shm_file(root, "psm_0badf00d")
    info = os.lstat(path)
    program = (
        "import json, sys; from gpudoctor import actions, fix; a = actions.RemoveFile(*json.loads(sys.argv[1]));"
        "m = fix.Machine(root=sys.argv[2]); v = m.check_file(a); print(json.dumps([v.status, v.reason]))"
    )
    action = json.dumps([path, info.st_dev, info.st_ino, info.st_uid, info.st_size])
    inside = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", program, action, root],
                            capture_output=True, text=True, cwd=REPO, timeout=60)
    status, reason = json.loads(inside.stdout)
    assert status == fix.REFUSED and "private PID namespace" in reason, inside.stderr
    assert os.path.exists(path)
    # The same file from the host's namespace: nothing maps it, so it may go.
    outside = subprocess.run([sys.executable, "-c", program, action, root], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert json.loads(outside.stdout)[0] == "go", outside.stderr


@pytest.mark.skipif(not _can_unshare(), reason="needs root and unshare")
def test_check_says_unknown_for_shm_seen_from_a_private_pid_namespace():
    name = f"psm_{os.getpid():08x}"[-12:]
    path = os.path.join("/dev/shm", name)
    with open(path, "wb") as handle:
        handle.write(b"\0" * 4096)
    os.utime(path, (1, 1))
    try:
        proc = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-m", "gpudoctor", "check",
                               "--format", "json", "--select", "GD603"], capture_output=True, text=True, cwd=REPO, timeout=120)
        doc = json.loads(proc.stdout)
        outcome = next(o for o in doc["outcomes"] if o["id"] == "GD603")
        assert outcome["status"] == "unknown" and "private PID namespace" in outcome["reason"], outcome
    finally:
        os.unlink(path)
