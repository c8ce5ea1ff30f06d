"""The command contract, end to end: real `python -m gpudoctor` processes, real files.

Live checks run on this machine as it is (CI and the dev boxes have no NVIDIA driver);
everything that must not depend on the machine replays the snapshots recorded on real
H200 hosts (tests/fixtures/snapshots/).
"""

import json
import os
import pty
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from gpudoctor import __version__, registry

REPO = Path(__file__).resolve().parent.parent
SNAPSHOTS = REPO / "tests" / "fixtures" / "snapshots"
H200 = str(SNAPSHOTS / "h200.json")
BUSY = str(SNAPSHOTS / "h200x2-busy.json")  # one GD302 warning (a real process holds GPU 1)
ANSI = re.compile(r"\x1b\[[0-9;]*m")
CATALOGUE = registry.load_rules()
ALL_IDS = [meta.id for meta in CATALOGUE]
VOLATILE_AREAS = ("processes", "launch", "server")
# Rules of other areas that also read the serving processes (GD320: their open-files limits): other
# tests start and stop such processes between a live run and its snapshot.
VOLATILE_RULES = ("GD320",)


def child_env(extra=None):
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR", "TERM", "COLUMNS")}
    env["PYTHONIOENCODING"] = "utf-8"
    env.update(extra or {})
    return env


def gd(*args, env=None, cwd=None):
    """Run `python -m gpudoctor ARGS` with stdout/stderr piped (so: not a TTY)."""
    proc = subprocess.run(
        [sys.executable, "-m", "gpudoctor", *args],
        capture_output=True,
        text=True,
        encoding="utf-8",
        env=child_env(env),
        cwd=str(cwd or REPO),
        stdin=subprocess.DEVNULL,
        timeout=120,
    )
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr
    return proc


def gd_tty(*args, env=None):
    """Run gpudoctor with stdout on a pseudo-terminal; return (exit code, what the terminal got)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpudoctor", *args],
        stdin=subprocess.DEVNULL,
        stdout=slave,
        stderr=subprocess.PIPE,
        env=child_env(env),
        cwd=str(REPO),
    )
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    err = proc.stderr.read().decode("utf-8", "replace")
    proc.stderr.close()
    code = proc.wait(timeout=120)
    out = b"".join(chunks).decode("utf-8", "replace")
    assert "Traceback" not in out + err, err
    return code, out


def one_line_error(proc):
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("gpudoctor: error: "), lines[0]
    return lines[0]


def outcome_ids(proc):
    assert proc.returncode in (0, 1), proc.stderr
    return [outcome["id"] for outcome in json.loads(proc.stdout)["outcomes"]]


# --- this machine, live --------------------------------------------------------------

@pytest.fixture(scope="module")
def live():
    """`check --format json` on this machine, and its driver.nvml fact."""
    proc = gd("check", "--format", "json")
    doc = json.loads(proc.stdout)
    return proc, doc, doc["snapshot"]["facts"]["driver.nvml"]


@pytest.fixture(scope="module")
def no_driver(live):
    nvml = live[2]
    name = nvml["value"].get("name") if isinstance(nvml["value"], dict) else None
    if nvml["status"] == "ok" or name != "LibraryNotFound":
        pytest.skip(f"this machine is not driverless (driver.nvml: {nvml})")
    return live


def test_live_check_without_driver_says_so_and_exits_1(no_driver):
    proc = gd("check")
    assert proc.returncode == 1, proc.stderr
    out = proc.stdout
    assert "GD101 no-driver" in out
    assert "no NVIDIA driver: libnvidia-ml.so.1 was not found" in out
    assert "LibraryNotFound" in out  # the cause NVML gave, as evidence
    assert "fix: Install the NVIDIA driver" in out
    assert "more: gpudoctor explain GD101" in out
    summary = next(line for line in out.splitlines() if line.startswith("Summary: "))
    assert summary.startswith("Summary: 1 error")
    assert "exit 1" in summary
    assert not ANSI.search(out), "piped output must be plain"


def test_live_json_is_one_document_with_evidence_and_fix(no_driver):
    proc, doc, _ = no_driver
    assert proc.returncode == 1
    assert doc["schema_version"] == 1
    assert doc["blocking"] is True
    assert doc["fail_on"] == "error"
    assert doc["tool"] == {"name": "gpudoctor", "version": __version__}
    (finding,) = [f for f in doc["findings"] if f["id"] == "GD101"]
    assert finding["severity"] == "error" and finding["area"] == "driver"
    assert "no NVIDIA driver" in finding["message"]
    evidence = {item["path"]: item for item in finding["evidence"]}
    assert evidence["driver.nvml"]["status"] == "error"
    assert "LibraryNotFound" in evidence["driver.nvml"]["value"]
    assert finding["fix"]["summary"].startswith("Install the NVIDIA driver")
    assert finding["fix"]["commands"] and finding["fix"]["safety"] == "needs_root"
    assert sorted(o["id"] for o in doc["outcomes"]) == ALL_IDS
    assert doc["summary"]["error"] == 1


def test_live_check_exit_code_matches_findings(live):
    """Whatever the machine: exit 1 exactly when an error-level finding exists."""
    proc, doc, _ = live
    errors = [f for f in doc["findings"] if f["severity"] == "error"]
    assert proc.returncode == (1 if errors else 0)
    assert doc["blocking"] is bool(errors)


def test_live_markdown_has_heading_and_details(live):
    proc = gd("check", "--format", "markdown")
    assert proc.returncode == live[0].returncode
    assert proc.stdout.startswith(f"## gpudoctor {__version__}\n")
    # The snapshot is inlined when it fits GitHub's limit; on a machine with many facts (a real
    # H200 with 31 CUDA binaries) the Markdown says where to get it instead.
    if "<details><summary>snapshot.json</summary>" in proc.stdout:
        assert proc.stdout.rstrip().endswith("</details>")
    else:
        assert "gpudoctor snapshot -o FILE" in proc.stdout
    assert not ANSI.search(proc.stdout)


# --- formats and exit codes on replayed snapshots ------------------------------------

def test_warning_only_snapshot_exits_0_by_default_and_1_with_fail_on_warning():
    default = gd("check", "--snapshot", BUSY)
    assert default.returncode == 0, default.stderr
    assert "GD302 gpu-memory-in-use [GPU 1]" in default.stdout
    assert "nothing blocking: exit 0" in default.stdout
    strict = gd("check", "--snapshot", BUSY, "--fail-on", "warning")
    assert strict.returncode == 1
    assert "blocking (at or above warning): exit 1" in strict.stdout


def test_fail_on_in_json():
    doc = json.loads(gd("check", "--snapshot", BUSY, "--format", "json").stdout)
    assert doc["blocking"] is False
    assert [(f["id"], f["severity"], f["subject"]) for f in doc["findings"]] == [("GD302", "warning", "GPU 1")]
    assert doc["findings"][0]["evidence"] and doc["findings"][0]["fix"]["commands"]
    strict = gd("check", "--snapshot", BUSY, "--format", "json", "--fail-on", "warning")
    assert strict.returncode == 1
    assert json.loads(strict.stdout)["blocking"] is True


def test_clean_snapshot_passes_even_with_fail_on_warning():
    proc = gd("check", "--snapshot", H200, "--fail-on", "warning", "--format", "json")
    assert proc.returncode == 0
    doc = json.loads(proc.stdout)
    assert doc["findings"] == [] and doc["blocking"] is False


def test_markdown_lists_the_finding():
    proc = gd("check", "--snapshot", BUSY, "--format", "markdown")
    assert proc.returncode == 0
    assert "### WARNING GD302 gpu-memory-in-use (GPU 1)" in proc.stdout
    assert "**Fix:**" in proc.stdout and "```sh" in proc.stdout
    assert "<details>" in proc.stdout and "</details>" in proc.stdout


# --- colour ----------------------------------------------------------------------------

def test_piped_output_is_plain_and_color_always_forces_ansi():
    assert not ANSI.search(gd("check", "--snapshot", BUSY).stdout)
    forced = gd("check", "--snapshot", BUSY, "--color", "always")
    assert ANSI.search(forced.stdout), forced.stdout[:200]
    # Same text once the escapes are gone.
    assert ANSI.sub("", forced.stdout).split() == gd("check", "--snapshot", BUSY).stdout.split()


def test_color_always_wins_over_no_color_and_dumb_terminal():
    forced = gd("check", "--snapshot", BUSY, "--color", "always", env={"NO_COLOR": "1", "TERM": "dumb"})
    assert ANSI.search(forced.stdout)


def test_terminal_gets_color_unless_no_color_or_never():
    env = {"TERM": "xterm-256color"}
    code, out = gd_tty("check", "--snapshot", BUSY, env=env)
    assert code == 0 and ANSI.search(out), out[:200]
    code, out = gd_tty("check", "--snapshot", BUSY, env=dict(env, NO_COLOR="1"))
    assert code == 0 and "GD302" in out and not ANSI.search(out)
    code, out = gd_tty("check", "--snapshot", BUSY, "--color", "never", env=env)
    assert code == 0 and "GD302" in out and not ANSI.search(out)
    code, out = gd_tty("check", "--snapshot", BUSY, env={"TERM": "dumb"})
    assert code == 0 and "GD302" in out and not ANSI.search(out)


# --- choosing rules ------------------------------------------------------------------

def ids_with(prefix):
    return [i for i in ALL_IDS if i.startswith(prefix)]


def test_default_runs_every_rule():
    assert outcome_ids(gd("check", "--snapshot", H200, "--format", "json")) == ALL_IDS


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--select", "GD1"], ids_with("GD1")),
        (["--select", "driver"], [m.id for m in CATALOGUE if m.area == "driver"]),
        (["--select", "no-driver"], ["GD101"]),
        (["--select", "gd101,GD301"], ["GD101", "GD301"]),
        (["--select", "GD101", "--select", "GD302"], ["GD101", "GD302"]),
        (["--ignore", "GD101"], [i for i in ALL_IDS if i != "GD101"]),
        (["--select", "GD1", "--ignore", "GD101"], [i for i in ids_with("GD1") if i != "GD101"]),
        (["--ignore", "gpu,internal"], [m.id for m in CATALOGUE if m.area not in ("gpu", "internal")]),
    ],
)
def test_select_and_ignore(args, expected):
    assert len(expected) >= 1
    ids = outcome_ids(gd("check", "--snapshot", H200, "--format", "json", *args))
    assert ids == sorted(expected)
    assert ids != ALL_IDS


def test_selection_changes_the_verdict():
    # GD302 is the only finding in this snapshot: ignoring it leaves nothing to report.
    doc = json.loads(gd("check", "--snapshot", BUSY, "--format", "json", "--ignore", "GD302").stdout)
    assert doc["findings"] == []
    proc = gd("check", "--snapshot", BUSY, "--fail-on", "warning", "--select", "GD1")
    assert proc.returncode == 0


@pytest.mark.parametrize("args", [["--select", "GD1000"], ["--select", "nope"], ["--ignore", "GD101,bogus-rule"]])
def test_unknown_selector_is_a_one_line_usage_error(args):
    line = one_line_error(gd("check", "--snapshot", H200, *args))
    assert "no rule matches" in line
    assert args[-1].split(",")[-1] in line


# --- rules and explain ---------------------------------------------------------------

def test_rules_lists_every_rule():
    proc = gd("rules")
    assert proc.returncode == 0
    lines = proc.stdout.strip().splitlines()
    assert [line.split()[0] for line in lines] == ALL_IDS
    policy = proc.stderr.split("Severity:\n", 1)[1]  # the severity policy (issue 31), beside the catalogue
    assert [line.split()[0] for line in policy.splitlines()[:3]] == ["error", "warning", "info"]
    for meta, line in zip(CATALOGUE, lines):
        assert meta.name in line and meta.title in line


def test_rules_json_parses():
    proc = gd("rules", "--format", "json")
    assert proc.returncode == 0
    doc = json.loads(proc.stdout)
    assert doc["schema_version"] == 1 and doc["kind"] == "gpudoctor.rules"
    rules = doc["rules"]
    assert [r["id"] for r in rules] == ALL_IDS
    for item in rules:
        assert item["name"] and item["severity"] in ("error", "warning", "info") and item["area"]
        assert item["why"] and item["fix"] and item["references"]


@pytest.mark.parametrize("key", ["GD103", "gd103", "driver-too-old-for-torch"])
def test_explain_prints_the_docstring(key):
    proc = gd("explain", key)
    assert proc.returncode == 0, proc.stderr
    meta = registry.find("GD103")
    assert proc.stdout.startswith("GD103 driver-too-old-for-torch (error, area driver)")
    assert meta.doc.strip() in proc.stdout
    for heading in ("## Why", "## Fix", "## References"):
        assert heading in proc.stdout


@pytest.mark.parametrize("key", ["GD999", "no-such-rule"])
def test_explain_unknown_rule(key):
    line = one_line_error(gd("explain", key))
    assert key in line


# --- version, global options, usage errors -------------------------------------------

def test_version():
    proc = gd("--version")
    assert proc.returncode == 0
    assert proc.stdout.strip() == f"gpudoctor {__version__}"


def test_options_before_the_default_command(tmp_path):
    # A fake root makes some rules unknown; -v lists them, so -v reached `check`.
    quiet = gd("--root", str(tmp_path), "--format", "text")
    verbose = gd("-v", "--root", str(tmp_path))
    assert quiet.returncode == verbose.returncode
    assert quiet.returncode in (0, 1)
    unknown_line = re.compile(r"^    \? GD\d{3} [a-z0-9-]+: unknown: .+", re.M)
    assert not unknown_line.search(quiet.stdout)
    assert unknown_line.search(verbose.stdout), verbose.stdout


def test_option_before_an_explicit_command():
    proc = gd("-v", "snapshot")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["schema_version"] == 1


def test_help_exits_0():
    proc = gd("--help")
    assert proc.returncode == 0
    assert "usage: gpudoctor" in proc.stdout and "Exit codes" in proc.stdout


@pytest.mark.parametrize(
    "args",
    [
        ["--bogus"],
        ["check", "--format", "yaml"],
        ["check", "--fail-on", "info"],
        ["explain"],
        ["rules", "--format", "markdown"],
    ],
)
def test_argparse_usage_errors_exit_2(args):
    proc = gd(*args)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert "error:" in proc.stderr


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "1e300", "soon"])
def test_bad_timeout_is_a_usage_error(value, tmp_path):
    proc = gd("check", "--root", str(tmp_path), "--timeout", value)
    assert proc.returncode == 2, proc.stdout
    assert proc.stdout == ""
    assert "--timeout" in proc.stderr
    assert "internal error" not in proc.stderr


def test_root_that_is_not_a_directory(tmp_path):
    line = one_line_error(gd("check", "--root", str(tmp_path / "nothing")))
    assert "--root" in line


# --- snapshot round trip ---------------------------------------------------------------

def test_snapshot_file_is_private_and_replays_to_the_same_findings(tmp_path, live):
    path = tmp_path / "s.json"
    proc = gd("snapshot", "-o", str(path))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
    assert f"snapshot written to {path}" in proc.stderr
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    saved = json.loads(path.read_text(encoding="utf-8"))
    assert saved["schema_version"] == 1 and saved["facts"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", saved["meta"]["captured_at"])  # issue 31: the capture time

    _, live_doc, nvml = live
    replay = gd("check", "--snapshot", str(path), "--format", "json")
    replay_doc = json.loads(replay.stdout)
    assert replay.returncode == (1 if replay_doc["blocking"] else 0)
    # The machine's processes and servers move between the live run and the snapshot (other
    # tests start and stop them); the driver, GPUs and installed stack do not.
    stable = [m.id for m in CATALOGUE if m.area not in VOLATILE_AREAS and m.id not in VOLATILE_RULES]
    assert "GD101" in stable

    def outcomes(doc):
        return [(o["id"], o["status"]) for o in doc["outcomes"] if o["id"] in stable]

    def findings(doc):
        found = [f for f in doc["findings"] if f["id"] in stable]
        if nvml["status"] == "ok":  # a GPU host: memory in use moves too; same rules, same subjects
            return [(f["id"], f["subject"]) for f in found]
        return found

    assert outcomes(replay_doc) == outcomes(live_doc)
    assert findings(replay_doc) == findings(live_doc)
    # Replaying keeps every fact exactly as saved.
    assert replay_doc["snapshot"] == saved


def test_the_snapshot_inside_a_json_report_replays_to_the_same_report(tmp_path, live):
    _, live_doc, _ = live
    path = tmp_path / "embedded.json"
    path.write_text(json.dumps(live_doc["snapshot"]), encoding="utf-8")
    replay_doc = json.loads(gd("check", "--snapshot", str(path), "--format", "json").stdout)
    assert replay_doc["findings"] == live_doc["findings"]
    assert replay_doc["outcomes"] == live_doc["outcomes"]
    assert replay_doc["summary"] == live_doc["summary"]


def test_snapshot_overwrites_an_existing_file_as_private(tmp_path):
    path = tmp_path / "s.json"
    path.write_text("old", encoding="utf-8")
    path.chmod(0o644)
    assert gd("snapshot", "-o", str(path)).returncode == 0
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert json.loads(path.read_text(encoding="utf-8"))["schema_version"] == 1


def test_snapshot_into_a_missing_directory_is_a_one_line_error(tmp_path):
    line = one_line_error(gd("snapshot", "-o", str(tmp_path / "no" / "s.json")))
    assert "cannot write" in line


def test_replaying_a_recorded_snapshot_reproduces_it(tmp_path):
    """A snapshot saved from a replay is the same snapshot (the seam loses nothing)."""
    doc = json.loads(gd("check", "--snapshot", BUSY, "--format", "json").stdout)
    original = json.loads(Path(BUSY).read_text(encoding="utf-8"))
    assert doc["snapshot"] == original
