"""The doctor's own environment is read in a child of its own interpreter (probes/python_stack.py).

Off the doctor's GIL, the stdlib probe runs on another core while the other probes and the rules
run in the doctor's process. It must give what the in-process probe gives, and fall back to the
in-process probe when there is no interpreter to start or the child cannot answer.
"""

from __future__ import annotations

import site
import sys

from gpudoctor.probes import Context, fatbin, flash_attn, python_stack_collect, python_stack, sglang_kernels, vllm_build, vllm_kernels
from helpers import private_env


def _in_process():
    plain = python_stack_collect.collect_plain(None, "stack", fatbin.scan,
                                [flash_attn.collect_plain, vllm_build.collect_plain, vllm_kernels.collect_plain,
                                 sglang_kernels.collect_plain],
                                python_stack.probe_options, private_env())
    return python_stack._facts(plain, "")


def test_the_child_gives_what_the_in_process_probe_gives(monkeypatch):
    calls = []
    real = python_stack.collect_other
    monkeypatch.setattr(python_stack, "collect_other", lambda *a, **k: calls.append(a[0]) or real(*a, **k))
    child = python_stack.collect(Context(environ=private_env()))
    assert calls == [sys.executable]  # it did start a child of this interpreter
    here = _in_process()
    assert "python.requested" not in child  # not a --python run: the doctor's own environment
    assert set(child) == set(here)
    for path in ("python.executable", "python.version", "torch.version", "flash_attn.variants", "vllm.build"):
        assert child[path].value == here[path].value, path
        assert child[path].source == here[path].source, path
    # In this process sys.path also holds what pytest put there (tests/, the repo with its
    # egg-info, nvcc-built fixtures); the child sees what a normal start of this interpreter sees.
    sites = tuple(site.getsitepackages())

    def dists(facts):
        return {d: v["version"] for d, v in facts["packages.dists"].value.items() if str(v.get("location", "")).startswith(sites)}
    mine, theirs = dists(here), dists(child)
    # gpudoctor itself: pytest's sys.path finds the checkout's egg-info first, the child the installed
    # one; and another test of the suite may install into this venv between the two reads.
    common = mine.keys() & theirs.keys()
    assert len(mine) >= 10 and len(common) >= len(mine) - 1 and len(theirs) - len(common) <= 2, (mine, theirs)
    assert {d: theirs[d] for d in common} == {d: mine[d] for d in common}
    def in_sites(facts):
        return [b["path"] for b in facts["kernels.binaries"].value or [] if b["path"].startswith(sites)]
    assert in_sites(child) == in_sites(here) and not [b for b in child["kernels.binaries"].value or [] if "/tests/" in b["path"]]


def test_without_an_interpreter_to_start_it_reads_in_process(monkeypatch):
    monkeypatch.setattr(sys, "executable", "")
    monkeypatch.setattr(python_stack, "collect_other", lambda *a, **k: (_ for _ in ()).throw(AssertionError("no child")))
    facts = python_stack.collect(Context(environ=private_env()))
    assert facts["python.executable"].ok


def test_a_child_that_cannot_answer_falls_back_to_the_in_process_probe(monkeypatch, tmp_path):
    broken = tmp_path / "python"
    broken.write_text("#!/bin/sh\necho not json\n")
    broken.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(broken))
    facts = python_stack.collect(Context(environ=private_env()))
    assert facts["python.executable"].ok and "python.requested" not in facts


def test_a_child_out_of_time_is_a_timeout_not_a_second_try(monkeypatch, tmp_path):
    slow = tmp_path / "python"
    slow.write_text("#!/bin/sh\nsleep 30\n")
    slow.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(slow))
    monkeypatch.setattr(python_stack_collect, "collect_plain", lambda *a, **k: (_ for _ in ()).throw(AssertionError("read again")))
    facts = python_stack.collect(Context(environ=private_env(), timeout=1))
    assert facts["python.executable"].status == "timeout" and "did not answer" in facts["python.executable"].detail
    assert "python.requested" not in facts


def test_the_child_finds_this_process_compiled_code_and_compiles_nothing(tmp_path):
    """seed_code writes under the key the bootstrap's _code() reads: after a run with an empty
    cache, the probe-code directory holds exactly the seeded files (a wrong key would make the
    child compile and write others), and a second run changes none of them."""
    env = {"GPUDOCTOR_CACHE_DIR": str(tmp_path / "c")}
    python_stack.seed_code(env)
    code = tmp_path / "c" / "probe-code"
    seeded = {p.name: p.stat().st_mtime_ns for p in code.iterdir()}
    assert len(seeded) == len(python_stack._BOOTSTRAPPED)
    facts = python_stack.collect(Context(environ=env))
    assert facts["python.executable"].ok and facts["kernels.scan"].ok
    assert {p.name: p.stat().st_mtime_ns for p in code.iterdir()} == seeded


def test_a_frozen_build_reads_in_process(monkeypatch):
    """A frozen gpudoctor's sys.executable is gpudoctor itself, not a Python to run the probe with."""
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(python_stack, "collect_other", lambda *a, **k: (_ for _ in ()).throw(AssertionError("no child")))
    assert python_stack.collect(Context(environ=private_env()))["python.executable"].ok


def test_the_child_is_started_before_the_other_probes_are_imported(monkeypatch):
    """probes.Running calls python_stack.launch in its own thread before it imports the other probes'
    modules (pynvml, ctypes …, which hold the GIL while a cold disk loads them)."""
    from gpudoctor import probes, runner

    order = []
    real = runner.start
    monkeypatch.setattr(runner, "start", lambda *a, **k: order.append("child started") or real(*a, **k))

    def other(ctx):
        return {}
    other.preload = lambda: order.append("other imported")  # type: ignore[attr-defined]
    snapshot = probes.start(Context(environ=private_env()), [("python", probes._lazy("python_stack")), ("other", other)]).finish()
    assert order == ["child started", "other imported"]
    assert snapshot.facts["python.executable"].ok and "python.requested" not in snapshot.facts


def test_a_launch_that_raises_leaves_the_work_to_the_probe_thread(monkeypatch):
    from gpudoctor import probes

    real = python_stack.start_other
    calls = []

    def once(*a, **k):
        calls.append(a[0])
        if len(calls) == 1:
            raise OSError("no temp dir")
        return real(*a, **k)
    monkeypatch.setattr(python_stack, "start_other", once)
    ctx = Context(environ=private_env())
    snapshot = probes.start(ctx, [("python", probes._lazy("python_stack"))]).finish()
    assert len(calls) == 2 and snapshot.facts["python.executable"].ok
    assert any("launch raised" in line and "no temp dir" in line for line in ctx.debug)


def test_nvml_starts_before_the_other_probes_are_imported():
    """gpus (NVML's initialisation, ~0.1 s on an H200 host) is the second wait to start: its thread
    runs before the remaining probes' modules are imported."""
    import threading

    from gpudoctor import probes

    running = threading.Event()

    def gpus(ctx):
        running.set()
        return {}
    gpus.preload = lambda: None  # type: ignore[attr-defined]

    def other(ctx):
        return {}
    seen = []
    other.preload = lambda: seen.append(running.wait(10))  # type: ignore[attr-defined]
    probes.start(Context(environ=private_env()), [("other", other), ("gpus", gpus)]).finish()
    assert seen == [True]
