"""Issue 14: one deadline per command, shared by every phase.

``--timeout S`` means an answer S seconds after the process started (interpreter start-up
included): the probes, every subprocess they run (nvcc, an interpreter asked for its sys.path,
the bundle's nvidia-smi -q) and the rules and rendering all count against that one point in
time. Nothing here times a run; each test asserts what a shared deadline changes in the outcome
(which reason a fact gives, that a step ran at all, that a call returns), with generous limits
only where returning is the behaviour. benchmarks/hostile_inputs.py measures the wall times.
"""

import json
import os
import subprocess
import sys
import tarfile
import textwrap
import threading
import time
from pathlib import Path

from gpudoctor import runner
from helpers import alive, script
from gpudoctor.probes.launch import vllm_source
from gpudoctor.probes import Context, cuda

REPO = Path(__file__).resolve().parent.parent


def all_gone(pidfile: Path) -> bool:
    """The pids in ``pidfile`` are dead (a SIGKILLed process takes a moment to become a zombie)."""
    pids = [int(p) for p in pidfile.read_text().split()] if pidfile.exists() else []
    for _ in range(250):
        if not [p for p in pids if alive(p)]:
            return True
        time.sleep(0.02)
    return False


def child(program: str, env=None, timeout=120) -> subprocess.CompletedProcess:
    environ = dict(os.environ, PYTHONIOENCODING="utf-8", **(env or {}))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(program)], capture_output=True, text=True, cwd=str(REPO),
                          env=environ, stdin=subprocess.DEVNULL, timeout=timeout)


def test_process_start_is_before_gpudoctor_was_imported():
    proc = child("""
        import time
        time.sleep(0.6)
        from gpudoctor import runner
        print(time.monotonic() - runner.process_start())
    """)
    assert proc.returncode == 0, proc.stderr
    assert 0.6 <= float(proc.stdout) < 60


def test_the_program_counts_its_timeout_from_the_process_start(tmp_path):
    """A process that spent its whole --timeout before main() (a slow start-up) runs no probe child:
    before, the 3 s were counted from the probes' start and a hung --python was waited on for 2.4 s more."""
    pidfile = tmp_path / "pids"
    python = script(tmp_path, "python", f"sleep 300 & echo $! >> {pidfile}\necho $$ >> {pidfile}\nsleep 300")
    proc = child(f"""
        import sys, time
        time.sleep(3.2)
        from gpudoctor.cli import main
        sys.argv = ["gpudoctor", "check", "--timeout", "3", "--format", "json", "--python", {str(python)!r}]
        sys.exit(main())
    """)
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    facts = json.loads(proc.stdout)["snapshot"]["facts"]
    fact = facts.get("packages.dists") or facts["probe.python"]
    assert fact["status"] == "timeout", fact
    assert "no time left" in fact["detail"] or fact["detail"].startswith("no answer"), fact
    assert all_gone(pidfile)


def test_in_process_the_timeout_counts_from_the_call():
    """Tests and libraries call main(argv): the anchor is the call, not a process started long ago."""
    from gpudoctor.cli import main

    assert main(["--version"]) == 0
    assert runner.command_deadline(5) - time.monotonic() > 4


def test_a_command_run_after_main_returned_counts_from_its_own_start():
    """Tests run a command module's run() directly: the anchor of an earlier main() must not stick
    (it did: the probes of every later check in that process were given a deadline long past)."""
    from gpudoctor.cli import main

    assert main(["--version"]) == 0
    time.sleep(1.0)
    assert runner.command_deadline(5) - time.monotonic() > 4.5


def test_work_deadline_leaves_a_reserve_for_the_answer():
    runner.begin(from_process_start=False)
    try:
        assert runner.work_deadline(10) < runner.command_deadline(10)
        assert 0 < runner.command_deadline(10) - runner.work_deadline(10) <= 1
        assert runner.work_deadline(1) > runner.command_deadline(1) - 0.5  # a short timeout keeps most of it
    finally:
        runner.end()


def test_report_bundle_runs_nvidia_smi_q_alongside_the_probes(tmp_path):
    """Run after the probes, a hung nvidia-smi had used the whole deadline and -q was "not run: no time left"
    (or, counted from the run, pushed the answer past it); alongside them it is run and cut at the deadline."""
    pidfile = tmp_path / "pids"
    bindir = tmp_path / "bin"
    script(bindir, "nvidia-smi", f"sleep 300 & echo $! >> {pidfile}\necho $$ >> {pidfile}\nsleep 300")
    shadow = tmp_path / "no-nvml"
    shadow.mkdir()
    (shadow / "pynvml.py").write_text('raise ImportError("no NVML in this test")\n')
    out = tmp_path / "r.tar.gz"
    # 4 s: counted from the process start, and start-up alone can take 1-2 s on a loaded box.
    proc = subprocess.run([sys.executable, "-m", "gpudoctor", "report", "--bundle", "-o", str(out), "--timeout", "4"],
                          capture_output=True, text=True, cwd=str(REPO), stdin=subprocess.DEVNULL, timeout=120,
                          env=dict(os.environ, PATH=f"{bindir}:{os.environ['PATH']}", PYTHONPATH=str(shadow)))
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    with tarfile.open(out) as tar:
        note = tar.extractfile("gpudoctor-report/nvidia-smi-q.txt").read().decode()
    assert "did not answer within" in note, note
    assert all_gone(pidfile)


def test_nvcc_runs_stop_at_the_probe_deadline(tmp_path):
    """Eight toolkits with a hung nvcc cost 8 x 5 s before; now every nvcc shares ctx.deadline."""
    roots = []
    for n in range(3):
        root = tmp_path / f"cuda-12.{n}"
        script(root / "bin", "nvcc", "sleep 300")
        (root / "include").mkdir()
        (root / "include" / "cuda_runtime_api.h").write_text("")
        roots.append(root)
    environ = {"PATH": f"{roots[0] / 'bin'}:/usr/bin:/bin", "CUDA_HOME": str(roots[1]), "CC": str(roots[2] / "bin" / "nvcc")}
    ctx = Context(root=str(tmp_path), environ=environ, deadline=time.monotonic() + 0.5)
    facts = cuda.collect(ctx)
    assert facts["cuda.nvcc"].status == "timeout"
    assert "within 0." in facts["cuda.nvcc"].detail, facts["cuda.nvcc"].detail  # not "within 5 s"
    assert "no time left" in facts["cuda.home"].value["nvcc_error"] or "within 0." in facts["cuda.home"].value["nvcc_error"]
    gcc = facts["cuda.gcc"].value or []
    cc = [item for item in gcc if "CC" in item.get("via", [])]
    assert cc and ("no time left" in cc[0]["error"] or "within 0." in cc[0]["error"]), gcc


def test_interpreter_paths_stops_at_the_deadline(tmp_path):
    pidfile = tmp_path / "pids"
    python = script(tmp_path, "python3", f"sleep 300 & echo $! >> {pidfile}\nsleep 300")
    answer = []
    call = threading.Thread(target=lambda: answer.append(
        vllm_source.locate([str(python), "-m", "vllm.entrypoints.openai.api_server"], {"PATH": "/usr/bin:/bin"},
                           python=str(python), timeout=60, deadline=time.monotonic() + 0.5)), daemon=True)
    call.start()
    call.join(30)  # generous: before, each of the two interpreter calls waited its own 60 s
    assert answer and answer[0].package is None
    assert all_gone(pidfile)
