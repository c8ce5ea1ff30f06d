"""Bad input never gives a traceback, a hung probe never hangs the doctor, Ctrl-C exits 130.

Real processes (`python -m gpudoctor`) and real files: broken snapshot files, fake
filesystem roots (`--root DIR`) holding real and garbage /proc/driver/nvidia/version
texts, and a FIFO standing in for a driver file that never answers.
"""

import errno
import io
import json
import os
import re
import signal
import subprocess
import textwrap
import sys
import threading
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpudoctor import registry
from gpudoctor.cli import main
from gpudoctor.engine import run_rules
from gpudoctor.probes import Context, collect, host
from gpudoctor.probes.driver import parse_proc_version
from gpudoctor.render import json_out, markdown, text
from gpudoctor.rule import FAIL, UNKNOWN, WARNING, RuleMeta
from gpudoctor.snapshot import STATUSES, Snapshot

REPO = Path(__file__).resolve().parent.parent
SNAPSHOTS = REPO / "tests" / "fixtures" / "snapshots"
H200 = SNAPSHOTS / "h200.json"
PROC_TEXTS = REPO / "tests" / "fixtures" / "ground_truth" / "public" / "proc-driver-version"


def gd(*args, timeout=120):
    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    env["PYTHONIOENCODING"] = "utf-8"
    proc = subprocess.run(
        [sys.executable, "-m", "gpudoctor", *args],
        capture_output=True,
        text=True,
        encoding="utf-8",
        env=env,
        cwd=str(REPO),
        stdin=subprocess.DEVNULL,
        timeout=timeout,
    )
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    return proc


def fake_root(tmp_path, version_text=None):
    """A filesystem root with /proc/driver/nvidia/version holding version_text (str or bytes)."""
    root = tmp_path / "root"
    nvidia = root / "proc" / "driver" / "nvidia"
    nvidia.mkdir(parents=True)
    if version_text is not None:
        data = version_text if isinstance(version_text, bytes) else version_text.encode("utf-8")
        (nvidia / "version").write_bytes(data)
    return root


# --- bad snapshot files ----------------------------------------------------------------

def _h200_with(mutate):
    data = json.loads(H200.read_text(encoding="utf-8"))
    mutate(data)
    return json.dumps(data)


def _set_status(data):
    data["facts"]["driver.version"]["status"] = "kinda"


def _future(data):
    data["schema_version"] = 99


def _bool_version(data):
    data["schema_version"] = True


BAD_SNAPSHOTS = {
    "truncated": (H200.read_bytes()[:500], "not valid JSON"),
    "future-schema": (_h200_with(_future).encode(), "schema_version 99 is newer"),
    "bool-schema": (_h200_with(_bool_version).encode(), "bad schema_version"),
    "not-json": (b"this is not a snapshot\n", "not valid JSON"),
    "empty-file": (b"", "not valid JSON"),
    "json-list": (b"[]", "not a gpudoctor snapshot"),
    "json-object": (b"{}", "not a gpudoctor snapshot"),
    "json-string": (b'"schema_version"', "not a gpudoctor snapshot"),
    "facts-not-object": (b'{"schema_version": 1, "facts": []}', "no facts object"),
    "fact-not-object": (b'{"schema_version": 1, "facts": {"gpu.count": 2}}', "gpu.count"),
    "unknown-status": (_h200_with(_set_status).encode(), "unknown fact status 'kinda'"),
    "binary": (bytes(range(256)) * 8, "not text"),
    "deeply-nested": (b"[" * 100000 + b"]" * 100000, "nested too deeply"),
}


@pytest.mark.parametrize("case", sorted(BAD_SNAPSHOTS))
def test_bad_snapshot_file_is_a_one_line_error(tmp_path, case):
    content, expected = BAD_SNAPSHOTS[case]
    path = tmp_path / f"{case}.json"
    path.write_bytes(content)
    proc = gd("check", "--snapshot", str(path))
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("gpudoctor: error: ")
    assert expected in lines[0]
    assert "internal error" not in lines[0]


@pytest.mark.parametrize("kind", ["missing", "directory"])
def test_unreadable_snapshot_path_is_a_one_line_error(tmp_path, kind):
    path = tmp_path / "s.json"
    if kind == "directory":
        path.mkdir()
    proc = gd("check", "--snapshot", str(path))
    assert proc.returncode == 2
    assert proc.stdout == ""
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(f"gpudoctor: error: cannot read snapshot {path}")


def _json_values():
    scalars = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=20)
    return st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=8)


H200_FACTS = sorted(json.loads(H200.read_text(encoding="utf-8"))["facts"])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    changes=st.dictionaries(
        st.sampled_from(H200_FACTS),
        st.tuples(_json_values(), st.sampled_from(STATUSES)),
        min_size=1,
        max_size=8,
    ),
    fmt=st.sampled_from(["text", "json", "markdown"]),
)
def test_facts_of_the_wrong_shape_never_crash_the_doctor(tmp_path, changes, fmt):
    """A well-formed snapshot whose values are nonsense: rules say unknown or fail, the doctor never crashes."""
    data = json.loads(H200.read_text(encoding="utf-8"))
    for path, (value, status) in changes.items():
        if path == "gpu.count" and isinstance(value, int) and value > 64:
            value = 64  # a count of 2**70 GPUs would be enumerated; not a crash, just a very long run
        data["facts"][path] = {"value": value, "status": status}
    snap = tmp_path / "fuzz.json"
    snap.write_text(json.dumps(data), encoding="utf-8")
    out, err = io.StringIO(), io.StringIO()
    code = main(["check", "--snapshot", str(snap), "--format", fmt], environ={}, stdout=out, stderr=err)
    assert code in (0, 1), err.getvalue()
    assert err.getvalue() == ""
    if fmt == "json":
        json.loads(out.getvalue())


# --- fake /proc roots ------------------------------------------------------------------

def _expected_from_name(name):
    """issue__nixGL-121__open-525.60.11-x86_64-arch.txt -> ("525.60.11", "open"): the first version after the type."""
    match = re.search(r"__(open|proprietary)-(?:.*?-)??(\d+\.\d+(?:\.\d+)?)(?:-|$)", Path(name).stem)
    assert match, name
    return match.group(2), match.group(1)


PROC_FILES = sorted(p.name for p in PROC_TEXTS.glob("*.txt"))


def test_proc_fixtures_are_there():
    assert len(PROC_FILES) == 6
    assert _expected_from_name("issue__nixGL-139__open-jetson-orin-nx-aarch64-35.3.1.txt") == ("35.3.1", "open")


@pytest.mark.parametrize("name", PROC_FILES)
def test_real_proc_version_texts(tmp_path, name):
    version, kind = _expected_from_name(name)
    assert kind in ("open", "proprietary")
    root = fake_root(tmp_path, (PROC_TEXTS / name).read_bytes())
    proc = gd("snapshot", "--root", str(root))
    assert proc.returncode == 0, proc.stderr
    facts = json.loads(proc.stdout)["facts"]
    assert facts["driver.kernel_module_version"] == {"value": version, "status": "ok", "source": "/proc/driver/nvidia/version"}
    assert facts["driver.kernel_module_type"]["value"] == kind
    assert facts["driver.proc_version"]["value"].startswith("NVRM version: NVIDIA UNIX")
    assert facts["driver.nvml"]["status"] == "absent"  # live probes are off under --root
    # ... and the rules accept it: no GD104.
    doc = json.loads(gd("check", "--root", str(root), "--format", "json").stdout)
    assert "GD104" not in [f["id"] for f in doc["findings"]]


GARBAGE = {
    "random-bytes": bytes((i * 37 + 11) % 256 for i in range(3000)),
    "banana": b"NVRM version: banana\n",
    "no-version-after-module": b"NVRM version: NVIDIA UNIX x86_64 Kernel Module\n",
    "empty": b"",
    "only-gcc-line": b"GCC version:  gcc version 12.2.0 (GCC)\n",
    "nul-bytes": b"\0" * 64,
    "arabic-digits": "NVRM version: NVIDIA UNIX x86_64 Kernel Module  ٥٥٠.٩٠  Fri May 31\n".encode("utf-8"),
}


@pytest.mark.parametrize("case", sorted(GARBAGE))
def test_garbage_proc_version_gives_gd104(tmp_path, case):
    root = fake_root(tmp_path, GARBAGE[case])
    proc = gd("check", "--root", str(root), "--format", "json")
    doc = json.loads(proc.stdout)
    gd104 = [f for f in doc["findings"] if f["id"] == "GD104"]
    assert len(gd104) == 1, doc["findings"]
    assert gd104[0]["severity"] == "warning"
    assert "no NVRM version line" in gd104[0]["message"]
    assert doc["snapshot"]["facts"]["driver.kernel_module_version"]["status"] == "error"
    errors = [f for f in doc["findings"] if f["severity"] == "error"]
    assert proc.returncode == (1 if errors else 0)
    # The warning blocks only when asked to.
    assert gd("check", "--root", str(root), "--fail-on", "warning").returncode == 1
    text_out = gd("check", "--root", str(root))
    assert "GD104 kernel-module-version-unreadable" in text_out.stdout


def test_missing_proc_version_is_not_gd104(tmp_path):
    root = fake_root(tmp_path)
    doc = json.loads(gd("check", "--root", str(root), "--format", "json").stdout)
    assert doc["snapshot"]["facts"]["driver.kernel_module_version"]["status"] == "absent"
    assert "GD104" not in [f["id"] for f in doc["findings"]]


@settings(max_examples=500, deadline=None)
@given(st.text())
def test_parse_proc_version_never_raises(text):
    result = parse_proc_version(text)
    assert result is None or (result[1] in ("open", "proprietary") and result[0] in text)


NVRM_PIECES = st.sampled_from(
    ["NVRM version:", "NVIDIA", "UNIX", "Open", "Kernel", "Module", "for", "x86_64", "aarch64", "Release", "Build",
     "550.90.07", "35.3.1", "1.2", "٥.٥", "1.2.3.4", "v580.1", "(gcc)", "\t", "\r", "", "Module580.1"]
)


NVRM_LINES = st.tuples(st.sampled_from(["NVRM version: ", "NVRM version:", " NVRM version: ", ""]),
                       st.lists(NVRM_PIECES | st.text(max_size=5), max_size=12).map(" ".join)).map("".join)


@settings(max_examples=500, deadline=None)
@given(st.lists(NVRM_LINES, max_size=4).map("\n".join))
def test_parse_proc_version_on_nvrm_like_text(text):
    result = parse_proc_version(text)
    if result is not None:
        version, kind = result
        assert kind in ("open", "proprietary")
        assert all(part.isascii() and part.isdigit() for part in version.split("."))
        assert 2 <= len(version.split(".")) <= 3
        assert version in text


# --- deadline, crashing probes, crashing rules ---------------------------------------

def test_a_hung_probe_is_cut_off_at_the_deadline():
    release = threading.Event()

    def slow(ctx):
        release.wait(30)
        return {}

    try:
        started = time.monotonic()
        snap = collect(Context(timeout=0.5), probes=[("slow", slow), ("host", host.collect)])
        elapsed = time.monotonic() - started
    finally:
        release.set()
    assert elapsed < 10, "the deadline did not cut the hung probe off"  # generous: the deadline is 0.5 s
    slow_fact = snap.get("probe.slow")
    assert slow_fact.status == "timeout"
    assert "0.5 s" in slow_fact.detail
    assert snap.get("probe.host").ok
    assert snap.get("host.arch").ok and snap.get("host.os").status in ("ok", "absent")


def test_a_crashing_probe_becomes_an_error_fact_and_gd001():
    def broken(ctx):
        raise ValueError("nvml said something odd")

    ctx = Context(timeout=5)
    snap = collect(ctx, probes=[("broken", broken), ("host", host.collect)])
    fact = snap.get("probe.broken")
    assert fact.status == "error"
    assert fact.detail == "ValueError: nvml said something odd"
    assert any("nvml said something odd" in line and "Traceback" in line for line in ctx.debug)
    result = run_rules(snap, registry.select(registry.load_rules(), ["GD001"]))
    (outcome,) = result.outcomes
    assert outcome.status == FAIL
    (finding,) = outcome.findings
    assert finding.subject == "broken"
    assert "the broken probe did not finish" in finding.message
    assert "nvml said something odd" in finding.message


def _throwaway_rule(func):
    return RuleMeta("GD099", "throwaway-crash", WARNING, "internal", (), func, "A rule that raises.\n\n## Why\nx\n")


def test_a_crashing_rule_becomes_unknown_with_the_reason():
    def crashes(snap):
        return snap.value("gpu.count") / 0

    snap = Snapshot.load(str(H200))
    meta = _throwaway_rule(crashes)
    before = [m.id for m in registry.load_rules()]
    result = run_rules(snap, registry.load_rules() + [meta])
    assert [m.id for m in registry.load_rules()] == before  # not added to the catalogue
    outcome = result.outcomes[-1]
    assert outcome.rule is meta
    assert outcome.status == UNKNOWN
    assert "rule crashed: ZeroDivisionError" in outcome.reason
    assert any("GD099" in line and "ZeroDivisionError" in line for line in result.debug)
    # The other rules ran exactly as without it, and every renderer copes.
    alone = run_rules(snap, registry.load_rules())
    assert [o.to_json() for o in result.outcomes[:-1]] == [o.to_json() for o in alone.outcomes]
    assert result.blocking("warning") == alone.blocking("warning")
    lines = text.plain(text.build(result, "error", verbose=True))
    assert "GD099 throwaway-crash: unknown: rule crashed: ZeroDivisionError" in lines
    doc = json.loads(json_out.dumps(json_out.document(result, "error")))
    assert doc["outcomes"][-1]["status"] == "unknown" and "ZeroDivisionError" in doc["outcomes"][-1]["reason"]
    assert "gpudoctor" in markdown.render(result, "error")


# --- a driver file that never answers (FIFO): deadline and Ctrl-C through the CLI -----

def _fifo_root(tmp_path):
    root = fake_root(tmp_path)
    fifo = root / "proc" / "driver" / "nvidia" / "version"
    os.mkfifo(str(fifo))
    return root, fifo


def test_a_hung_driver_file_does_not_hang_check(tmp_path):
    root, _ = _fifo_root(tmp_path)  # nobody ever writes: the driver probe blocks in open()
    # 3 s: --timeout counts from the process start, and under load start-up alone can take 1-2 s.
    proc = gd("check", "--root", str(root), "--timeout", "3", "--format", "json", timeout=60)
    doc = json.loads(proc.stdout)
    facts = doc["snapshot"]["facts"]
    assert facts["probe.driver"]["status"] == "timeout"
    assert facts["probe.host"]["status"] == "ok"
    gd001 = [f for f in doc["findings"] if f["id"] == "GD001"]
    assert [f["subject"] for f in gd001] == ["driver"]
    assert "timeout" in gd001[0]["message"]
    assert proc.returncode in (0, 1)


def _wait_for_reader(fifo, proc):
    """Open the FIFO's write end once the child has opened it for reading (then it blocks in read)."""
    while True:
        try:
            return os.open(str(fifo), os.O_WRONLY | os.O_NONBLOCK)
        except OSError as exc:
            if exc.errno != errno.ENXIO:  # ENXIO: no reader yet
                raise
        if proc.poll() is not None:
            raise AssertionError(f"gpudoctor exited {proc.returncode} before reading the FIFO")
        time.sleep(0.02)


def test_ctrl_c_exits_130_without_traceback(tmp_path):
    root, fifo = _fifo_root(tmp_path)
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpudoctor", "check", "--root", str(root), "--timeout", "600"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        cwd=str(REPO),
    )
    writer = None
    try:
        # Once the driver probe reads the FIFO, gpudoctor is running its own code (signal
        # handlers installed) and waits on the probes' deadline: SIGINT lands in that wait.
        writer = _wait_for_reader(fifo, proc)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        if writer is not None:
            os.close(writer)
    err_text = err.decode("utf-8", "replace")
    assert proc.returncode == 130, err_text
    assert err_text.strip() == "gpudoctor: interrupted"
    assert b"Summary" not in out


def test_an_interrupt_that_passed_through_exec_still_exits_130(tmp_path):
    """Under ``python -m``, a KeyboardInterrupt that went through exec() of a string (dataclasses
    build their methods so, while modules are imported) makes CPython end the process by SIGINT
    after finalizing, even once handled; cli._exit_now exits 130 instead."""
    package = tmp_path / "interrupted_run"
    package.mkdir()
    (package / "__main__.py").write_text(
        "from gpudoctor import cli\n"
        "try:\n    exec('raise KeyboardInterrupt')\nexcept KeyboardInterrupt:\n    pass\n"
        "cli._exit_now(130)\n", encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "interrupted_run"], cwd=str(tmp_path), capture_output=True, timeout=60,
                          env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert done.returncode == 130, done.stderr


def test_the_exit_without_finalizing_still_does_what_a_normal_exit_does(tmp_path):
    """cli._exit_now skips the interpreter's teardown but not what a normal exit owes: a thread that
    is not a daemon finishes its work, an executor left open neither hangs nor loses its task, the
    exit handlers run, buffered output is written, and the status is the one given."""
    done_file, handler_file = tmp_path / "thread-done", tmp_path / "handler-ran"
    program = textwrap.dedent(f"""
        import atexit, concurrent.futures, sys, threading, time
        from gpudoctor import cli
        def late():
            time.sleep(0.3)
            open({str(done_file)!r}, "w").write("done")
        threading.Thread(target=late).start()
        pool = concurrent.futures.ThreadPoolExecutor(2)
        pool.submit(time.sleep, 0.1)
        atexit.register(lambda: open({str(handler_file)!r}, "w").write("ran"))
        sys.stdout.write("x" * 100000)
        cli._exit_now(1)
        """)
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, timeout=60,
                          env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert done.returncode == 1, done.stderr
    assert done.stdout == b"x" * 100000
    assert done_file.read_text() == "done" and handler_file.read_text() == "ran"


def test_under_a_profiler_the_program_ends_normally_so_the_profile_is_written(tmp_path):
    """cProfile (and coverage) write what they saw when the interpreter finalizes: watched, the
    program does not take the quick exit."""
    done = subprocess.run([sys.executable, "-m", "cProfile", "-s", "tottime", "-m", "gpudoctor", "rules"], cwd=str(tmp_path),
                          capture_output=True, text=True, timeout=120, env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert done.returncode == 0, done.stderr
    assert "GD101" in done.stdout and "function calls" in done.stdout


def test_a_ctrl_c_lost_in_a_weakref_callback_still_ends_the_wait_for_the_probes():
    """Python raises KeyboardInterrupt where the main thread is; inside a weakref callback (import's
    module locks, while rules are imported) it is printed as "Exception ignored" and lost. The
    handler's flag makes the wait for the probes end anyway."""
    program = textwrap.dedent("""
        import os, signal, sys, threading, time, weakref
        from gpudoctor import probes, runner
        runner.watch_interrupts()
        class Thing: pass
        thing = Thing()
        def callback(ref):
            os.kill(os.getpid(), signal.SIGINT)  # lands here, inside the callback
            for _ in range(1000): pass
        keep = weakref.ref(thing, callback)
        del thing
        assert runner._INTERRUPTED.is_set(), "the handler did not run"
        ctx = probes.Context(timeout=30)
        slow = [("slow", lambda ctx: time.sleep(30) or {})]
        started = time.monotonic()
        try:
            probes.collect(ctx, slow)
        except KeyboardInterrupt:
            print("interrupted after %.1f s" % (time.monotonic() - started))
            sys.exit(130)
        print("not interrupted")
    """)
    proc = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60, cwd=str(REPO))
    assert proc.returncode == 130, (proc.stdout, proc.stderr)
    assert "Exception ignored" in proc.stderr and "KeyboardInterrupt" in proc.stderr  # it was swallowed there
    assert float(proc.stdout.split()[2]) < 2
