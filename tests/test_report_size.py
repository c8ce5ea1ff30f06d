"""The report fits in a GitHub issue (65,536 characters) whatever the machine, renders as
Markdown, and shows evidence in units people read; the snapshot goes to a file it names."""

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from gpudoctor import registry, report
from gpudoctor.engine import Result
from gpudoctor.render.values import render, show, wrap
from gpudoctor.rule import FAIL, Evidence, Finding, Fix, Outcome
from gpudoctor.snapshot import Snapshot

REPO = Path(__file__).resolve().parent.parent
SNAPSHOTS = sorted((REPO / "tests" / "fixtures" / "snapshots").glob("*.json"))
LIMIT = 65536


def gd(*args, cwd=None):
    proc = subprocess.run([sys.executable, "-m", "gpudoctor", *args], capture_output=True, text=True, encoding="utf-8",
                          env=dict(os.environ, PYTHONIOENCODING="utf-8"), cwd=str(cwd or REPO), timeout=120)
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    return proc


def assert_renders(text):
    """Parses as CommonMark + tables; every fence and <details> block is closed."""
    tokens = MarkdownIt("commonmark").enable("table").parse(text)
    opened = sum(t.type == "html_block" and "<details>" in t.content for t in tokens)
    closed = sum(t.type == "html_block" and "</details>" in t.content for t in tokens)
    assert opened == closed
    assert any(t.type == "table_open" for t in tokens)
    assert tokens[0].type == "heading_open"
    return tokens


@pytest.mark.parametrize("path", SNAPSHOTS, ids=[p.stem for p in SNAPSHOTS])
def test_every_fixture_report_fits_in_an_issue(path):
    if path.name == "derive.py":
        pytest.skip("not a snapshot")
    proc = gd("report", "--snapshot", str(path))
    assert proc.returncode in (0, 1), proc.stderr
    size = len(proc.stdout)
    assert size <= LIMIT and size < 30000, size  # ~20,000 for a typical machine; the snapshot is not inlined
    assert_renders(proc.stdout)
    print(f"{path.name}: {size} characters")


def test_h200_report_size_and_content():
    proc = gd("report", "--snapshot", str(REPO / "tests/fixtures/snapshots/h200-stale-engine.json"))
    text = proc.stdout
    print(f"h200-stale-engine report: {len(text)} characters")
    assert len(text) < 25000
    assert "| Host compiler (for CUDA builds) | `gcc 13.3.0" in text
    assert not any("gcc" in line for line in text.splitlines() if line.startswith("| CUDA toolkit"))
    assert '"process_api", 17' not in text and "[0, 0, " not in text  # no internal lists
    assert "| `0` | `1147` | `VLLM::EngineCor` | `root` | `2.5 GiB` | `C` |" in text
    assert "`gpu.0.memory_used` = `4.0 GiB`" in text


def _huge_report():
    data = json.loads((REPO / "tests/fixtures/snapshots/h200-full.json").read_text(encoding="utf-8"))
    data["facts"]["env"] = {"status": "ok", "source": "test", "value": {f"VAR_{i}": "x" * 3000 for i in range(300)}}
    data["facts"]["processes.serving"] = {"status": "ok", "source": "test", "value": [
        {"pid": i, "ppid": 1, "user": "u", "stack": "vllm", "role": "engine_core", "cmdline": "vllm serve " + "m" * 5000}
        for i in range(3000)]}
    snap = Snapshot.from_json(data)
    meta = registry.load_rules()[0]
    findings = [Finding(meta.id, meta.name, "error", meta.area, meta.title, "m" * 3000,
                        [Evidence("big", {f"k{j}": "v" * 5000 for j in range(40)}), Evidence("gpu.0.memory_used", 1 << 40)],
                        Fix("do " * 500, ["echo " + "z" * 4000] * 5), subject=f"PID {i}") for i in range(400)]
    result = Result(snap, [Outcome(meta, FAIL, findings)])
    return report.Report(result, "error", "test", "now")


def test_a_hostile_machine_still_fits_and_renders():
    text = report.to_markdown(_huge_report())
    assert len(text) <= LIMIT
    assert_renders(text)
    assert "Left out to fit GitHub's 65,536-character issue limit" in text or "cut here" in text
    assert " more:" in text and "and 3" in text  # past the budget one line each, then a count


def test_a_hostile_log_excerpt_keeps_its_end(tmp_path):
    log = tmp_path / "big.log"
    log.write_text("".join(f"line {i} " + "y" * 490 + "\n" for i in range(200)) + "FINAL ERROR\n", encoding="utf-8")
    proc = gd("report", "--snapshot", str(REPO / "tests/fixtures/snapshots/h200-full.json"), "--log", str(log))
    assert len(proc.stdout) <= LIMIT and "FINAL ERROR" in proc.stdout
    assert_renders(proc.stdout)


# --- evidence by value type ----------------------------------------------------------------------------
def test_evidence_dicts_are_key_value_lists_and_never_cut_before_the_deciding_field():
    home = {"path": "/usr/local", "nvcc_full": "Cuda compilation tools " * 40, "exists": True, "headers": False}
    text = show("cuda.home", home)
    assert text.startswith("path=/usr/local, nvcc_full=Cuda compilation tools")
    assert text.endswith("exists=yes, headers=no")  # the deciding field survives a long value before it
    assert "{" not in text and "'" not in text


def test_evidence_dicts_leave_out_what_no_one_reads():
    """The H200 box's cuda.home (issue 31: "cuda.home = path=…, nvcc_version_source=…, env={}")."""
    home = {"path": "/usr/local", "realpath": "/usr/local", "nvcc": "/usr/local/bin/nvcc", "nvcc_version": "13.0",
            "nvcc_version_source": "nvcc --version", "nvcc_full": "13.0.88", "version": "13.0.88",
            "version_source": "nvcc --version", "headers": False, "source": "nvcc on PATH", "exists": True, "env": {}}
    assert show("cuda.home", home) == ("path=/usr/local, nvcc=/usr/local/bin/nvcc, nvcc_version=13.0, nvcc_full=13.0.88, "
                                       "version=13.0.88, headers=no, source=nvcc on PATH, exists=yes")
    assert show("x", {"path": "/a", "realpath": "/b", "installed": None, "dev": []}) == "path=/a, realpath=/b, installed=none, dev=[]"


def test_evidence_wraps_between_words_never_inside_one():
    text = "torch 2.13.0+cpu is installed where vllm requires torch==2.14.0 and its kernels need libtorch_cuda.so"
    lines = wrap(text, 40)
    assert all(len(line) <= 40 for line in lines) and " ".join(lines) == text
    path = "/root/.cache/gpudoctor-tests/venvs/vllm0.33.0-torch2.13.0-70563c5b4357cab2/lib/python3.11/site-packages/torch"
    assert "".join(wrap(path, 50)) == path and all(line.endswith("/") for line in wrap(path, 50)[:-1])


def test_evidence_bytes_in_mib_and_gib():
    assert show("gpu.0.memory_used", 4322623488) == "4.0 GiB"
    assert show("gpu.0.memory_total", 150754820096) == "140.4 GiB"
    assert render([{"pid": 1, "used_memory": 2690646016}]) == "{pid=1, used_memory=2.5 GiB}"
    assert show("gpu.0.pcie_width_max", 16) == "16" and show("count", 1 << 30) == str(1 << 30)


def test_long_evidence_wraps_in_text_output():
    lines = wrap(", ".join(f"key{i}=value{i}" for i in range(40)), 60)
    assert len(lines) > 1 and all(len(line) <= 60 for line in lines)
    assert "".join(lines).replace(",", ", ").split() == ", ".join(f"key{i}=value{i}" for i in range(40)).replace(",", ", ").split()


# --- where the snapshot goes ---------------------------------------------------------------------------
def test_snapshot_file_and_bundle_are_named_in_the_report(tmp_path):
    snap_file = tmp_path / "box.json"
    out = tmp_path / "report.md"
    proc = gd("report", "--snapshot", str(REPO / "tests/fixtures/snapshots/h200.json"), "-o", str(out),
              "--snapshot-file", str(snap_file), "--bundle")
    assert proc.returncode == 0, proc.stderr
    text = (tmp_path / "report.tar.gz").exists() and tarfile.open(tmp_path / "report.tar.gz").extractfile("gpudoctor-report/report.md").read().decode()
    assert "it was saved to `report.tar.gz` (snapshot.json inside) and `box.json`" in text
    assert json.loads(snap_file.read_text(encoding="utf-8"))["facts"]["driver.version"]["value"] == "580.159.04"
    assert oct(snap_file.stat().st_mode & 0o777) == "0o600"


def test_dash_o_writes_stdout(tmp_path):
    proc = gd("report", "--snapshot", str(REPO / "tests/fixtures/snapshots/h200.json"), "-o", "-", cwd=tmp_path)
    assert proc.stdout.startswith("## gpudoctor report") and not (tmp_path / "-").exists()
    proc = gd("snapshot", "--root", str(tmp_path), "--timeout", "5", "-o", "-", cwd=tmp_path)
    assert proc.stdout.lstrip().startswith("{") and not (tmp_path / "-").exists()


def test_check_markdown_says_1_error_not_1_errors():
    proc = gd("check", "--snapshot", str(REPO / "tests/fixtures/snapshots/h200-stale-engine.json"), "--format", "markdown")
    assert "1 error, 1 warning" in proc.stdout and "1 errors" not in proc.stdout
    assert_renders(proc.stdout)


def test_check_markdown_leaves_a_big_snapshot_out_and_keeps_a_small_one():
    big = gd("check", "--snapshot", str(REPO / "tests/fixtures/snapshots/h200-full.json"), "--format", "markdown").stdout
    assert len(big) <= LIMIT and "_The snapshot (" in big and "<details><summary>snapshot.json" not in big
    small = gd("check", "--snapshot", str(REPO / "tests/fixtures/snapshots/h200.json"), "--format", "markdown").stdout
    assert "<details><summary>snapshot.json</summary>" in small
    assert_renders(big)
