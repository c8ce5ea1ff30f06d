"""gpudoctor report: the Markdown renders as intended (parsed with markdown-it-py), the JSON
carries the same content, files are owner-only, the bundle holds what it promises, and the
sections fed by other probes' facts appear as those facts do."""

import json
import os
import re
import socket
import stat
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from gpudoctor import registry, report
from gpudoctor.snapshot import Snapshot

REPO = Path(__file__).resolve().parent.parent
SNAPSHOTS = REPO / "tests" / "fixtures" / "snapshots"
H200 = SNAPSHOTS / "h200.json"
BUSY = SNAPSHOTS / "h200x2-busy.json"

VLLM_LOG = """INFO 07-28 15:07:20 [api_server.py:1] vLLM API server version 0.11.0
INFO 07-28 15:07:21 [gpu_worker.py:9] Loading weights took 3.21 seconds
(EngineCore_DP0 pid=6940) ValueError: Free memory on device cuda:1 (19.77/22.05 GiB) on startup is less than desired GPU memory utilization (0.9, 19.84 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.
INFO 07-28 15:07:22 [launcher.py:1] Shutting down
"""


def gd(*args, cwd=None):
    proc = subprocess.run([sys.executable, "-m", "gpudoctor", *args], capture_output=True, text=True, encoding="utf-8",
                          env=dict(os.environ, PYTHONIOENCODING="utf-8"), cwd=str(cwd or REPO), timeout=120)
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    return proc


# --- parsing the Markdown ------------------------------------------------------------------
def parse(text):
    return MarkdownIt("commonmark").enable("table").parse(text)


def headings(tokens):
    out = []
    for i, tok in enumerate(tokens):
        if tok.type == "heading_open":
            out.append((int(tok.tag[1]), tokens[i + 1].content))
    return out


def tables(tokens):
    """Each table as a list of rows; each row the list of its cells' inline source."""
    found, rows, row, inside = [], [], None, False
    for i, tok in enumerate(tokens):
        if tok.type == "table_open":
            rows, inside = [], True
        elif tok.type == "table_close":
            found.append(rows)
            inside = False
        elif inside and tok.type == "tr_open":
            row = []
        elif inside and tok.type == "tr_close":
            rows.append(row)
        elif inside and tok.type in ("th_open", "td_open"):
            row.append(tokens[i + 1].content if tokens[i + 1].type == "inline" else "")
    return found


def cell_text(source):
    """What a reader sees in a cell: the code span's content, or the text."""
    tokens = MarkdownIt("commonmark").parseInline(source)[0].children
    return "".join(t.content for t in tokens if t.type in ("text", "code_inline"))


def details_blocks(tokens):
    """(summary html, the fenced blocks inside) for every <details> block."""
    blocks, current = [], None
    for tok in tokens:
        if tok.type == "html_block" and tok.content.lstrip().startswith("<details>"):
            current = (tok.content.strip(), [])
        elif tok.type == "html_block" and tok.content.strip() == "</details>":
            blocks.append(current)
            current = None
        elif current is not None and tok.type == "fence":
            current[1].append(tok)
    assert current is None, "a <details> block was not closed"
    return blocks


@pytest.fixture(scope="module")
def busy_report(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("report")
    log = tmp / "vllm.log"
    log.write_text(VLLM_LOG, encoding="utf-8")
    md = gd("report", "--snapshot", str(BUSY), "--log", str(log))
    js = gd("report", "--snapshot", str(BUSY), "--log", str(log), "--format", "json")
    assert md.returncode == 0 and js.returncode == 0, md.stderr + js.stderr
    return md.stdout, json.loads(js.stdout)


def test_markdown_headings(busy_report):
    tokens = parse(busy_report[0])
    found = headings(tokens)
    assert found[0] == (2, "gpudoctor report")
    sections = [text for level, text in found if level == 3]
    # laid out like vLLM's bug template: the bug, then the environment
    assert sections == ["Verdict", "🐛 Describe the bug", "Your current environment", "GPUs", "Processes", "Smoke check",
                        "Log: vllm.log", "Other findings", "Environment"]
    assert (4, "WARNING GD302 gpu-memory-in-use (GPU 1)") in found


def test_markdown_tables(busy_report):
    all_tables = tables(parse(busy_report[0]))
    versions, gpus = all_tables[0], all_tables[1]
    assert [cell_text(c) for c in versions[0]] == ["component", "version", "fact"]
    assert all(len(row) == 3 for row in versions)
    as_dict = {cell_text(r[2]): cell_text(r[1]) for r in versions[1:]}
    assert as_dict["driver.version"] == "580.159.04"
    assert as_dict["torch.version"] == "2.11.0+cu130 (CUDA 13.0)"
    assert as_dict["vllm.*"] == "not collected" and as_dict["flash_attn.*"] == "not collected" and as_dict["cuda.*"] == "not collected"
    assert [cell_text(c) for c in gpus[0]][:3] == ["#", "name", "cc"]
    assert len(gpus) == 3  # header + the two H200s
    for row, uuid in zip(gpus[1:], ("GPU-51cb1330-e3cd-8754-4de9-1759daa5809f", "GPU-486fb5a3-f83f-ba19-e43c-cfb34303ac5f")):
        assert len(row) == 10 and cell_text(row[1]) == "NVIDIA H200" and cell_text(row[2]) == "9.0" and cell_text(row[5]) == uuid
    procs = all_tables[2]
    assert [cell_text(c) for c in procs[0]] == ["gpu", "pid", "name", "user", "memory", "type"]
    assert [cell_text(r[1]) for r in procs[1:]] == ["896", "896"]
    assert all(cell_text(r[4]).endswith(("MiB", "GiB")) for r in procs[1:])  # units people read, not bytes


def test_markdown_details_block_holds_the_outcomes_and_the_snapshot_is_not_inlined(busy_report):
    tokens = parse(busy_report[0])
    blocks = details_blocks(tokens)
    assert [summary.split("</summary>")[0] for summary, _ in blocks] == [
        f"<details><summary>All rule outcomes ({len(registry.load_rules())})",
    ]
    assert "`gpudoctor report --bundle` writes it" in busy_report[0]  # says where the snapshot goes
    outcome_rows = [t for t in tables(tokens) if [cell_text(c) for c in t[0]] == ["rule", "name", "outcome", "note"]][0]
    assert [cell_text(r[0]) for r in outcome_rows[1:]] == [m.id for m in registry.load_rules()]


def test_markdown_log_excerpt_marks_signatures(busy_report):
    tokens = parse(busy_report[0])
    fences = [t for t in tokens if t.type == "fence" and t.info == "text"]
    log_lines = fences[0].content.splitlines()
    assert len(log_lines) == 4
    assert log_lines[2].startswith(">> 3  (EngineCore_DP0 pid=6940) ValueError: Free memory")
    assert log_lines[2].endswith("<- SIG-free-memory-below-utilization")
    assert all(line.startswith("   ") for i, line in enumerate(log_lines) if i != 2)
    text = busy_report[0]
    # GD302 sees the process holding GPU 1 in the recorded snapshot: the cause is confirmed
    assert "confirmed here by GD302" in text and "confirmed by GD302 gpu-memory-in-use" in text


def test_json_carries_the_same_report(busy_report):
    text, doc = busy_report
    assert doc["kind"] == "gpudoctor.report" and doc["schema_version"] == 1
    assert doc["verdict"]["blocking"] is False and doc["verdict"]["summary"]["warning"] >= 1
    assert "GD302" in [f["id"] for f in doc["findings"]]
    assert len(doc["outcomes"]) == len(registry.load_rules())
    assert [g["name"] for g in doc["gpus"]] == ["NVIDIA H200", "NVIDIA H200"]
    assert {r["fact"]: r["value"] for r in doc["versions"]}["driver.version"] == "580.159.04"
    assert doc["log"]["signatures"][0]["id"] == "SIG-free-memory-below-utilization"
    assert doc["log"]["signatures"][0]["confirmation"]["verdict"] == "confirmed"
    assert [e["signatures"] for e in doc["log"]["excerpt"]] == [[], [], ["SIG-free-memory-below-utilization"], []]
    assert doc["smoke"] == {"requested": False, "url": None, "status": "not_requested", "note": "", "facts": {}}
    assert doc["snapshot"] == json.loads(Snapshot.load(str(BUSY)).dumps())


def test_hostile_values_cannot_break_the_markdown(tmp_path):
    """Fact values with pipes, backticks, fences and HTML stay inside their cell or block."""
    data = json.loads(H200.read_text(encoding="utf-8"))
    nasty = "git+https://x | `y` ``` </details> <b>bold</b>\nsecond line"
    data["facts"]["vllm.origin"] = {"status": "ok", "source": "direct_url.json", "value": nasty}
    data["facts"]["gpu.0.name"]["value"] = "NVIDIA | H200 ``` </details>"
    snap = tmp_path / "nasty.json"
    snap.write_text(json.dumps(data), encoding="utf-8")
    log = tmp_path / "nasty.log"
    log.write_text("```\n</details>\n<details>\n| a | b |\n", encoding="utf-8")
    proc = gd("report", "--snapshot", str(snap), "--log", str(log))
    tokens = parse(proc.stdout)
    assert [t for _, t in headings(tokens) if _ == 3][:4] == ["Verdict", "🐛 Describe the bug", "Your current environment", "GPUs"]
    versions, gpus = tables(tokens)[:2]
    assert all(len(row) == 3 for row in versions)
    origin = [r for r in versions if cell_text(r[2]) == "vllm.origin"][0]
    assert cell_text(origin[1]) == nasty.replace("\n", " ")
    assert cell_text(gpus[1][1]) == "NVIDIA | H200 ``` </details>"
    blocks = details_blocks(tokens)
    assert len(blocks) == 1
    log_fence = [t for t in tokens if t.type == "fence" and t.info == "text"][0]
    assert "</details>" in log_fence.content and "| a | b |" in log_fence.content


def test_facts_from_other_probes_appear_by_prefix(tmp_path):
    data = json.loads(H200.read_text(encoding="utf-8"))
    data["facts"].update(
        {
            "cuda.nvcc_version": {"status": "ok", "source": "nvcc --version", "value": "13.0.88"},
            "vllm.version": {"status": "ok", "source": "importlib.metadata", "value": "0.11.1.dev42+g1234abc"},
            "vllm.origin": {"status": "ok", "source": "direct_url.json", "value": {"kind": "git", "url": "https://github.com/vllm-project/vllm", "commit": "1234abc"}},
            "flash_attn.variants": {"status": "ok", "source": "importlib.metadata", "value": [{"dist": "flash-attn", "version": "2.8.3"}, {"dist": "flash-attn-4", "version": "4.0.0b36"}]},
            "processes.serving": {"status": "ok", "source": "/proc", "value": [{"pid": 4242, "user": "svc", "stack": "vllm", "role": "EngineCore", "cmdline": "vllm serve Qwen/Qwen3-8B"}]},
            "processes.port": {"status": "ok", "source": "/proc/net/tcp", "value": {"port": 8000, "listeners": [{"address": "0.0.0.0", "family": "ipv4", "pids": [4242]}]}},
            "processes.index": {"status": "ok", "source": "/proc", "value": {str(pid): [1, 0, "S", "bash", 0.0] for pid in range(2, 3000)}},
            # the Python-environment probe's view of the stack
            "packages.stack": {"status": "ok", "source": "dist-info", "value": {
                "vllm": {"name": "vllm", "version": "0.11.1.dev42+g1234abc", "location": "/venv/lib/python3.12/site-packages"},
                "flash-attn": {"name": "flash-attn", "version": "2.8.3", "location": "/venv/lib/python3.12/site-packages", "missing_count": 3},
                "flash-attn-4": {"name": "flash-attn-4", "version": "4.0.0b36", "location": "/venv/lib/python3.12/site-packages"},
                "xformers": {"name": "xformers", "version": "0.0.35", "location": "/venv/lib/python3.12/site-packages"},
            }},
            "packages.editable": {"status": "ok", "source": "__editable__ finders", "value": {"vllm": "/src/vllm"}},
        }
    )
    snap = tmp_path / "more.json"
    snap.write_text(json.dumps(data), encoding="utf-8")
    out = gd("report", "--snapshot", str(snap)).stdout
    all_tables = tables(parse(out))
    versions = {cell_text(r[2]): (cell_text(r[0]), cell_text(r[1])) for r in all_tables[0][1:]}
    assert versions["cuda.nvcc_version"] == ("CUDA toolkit", "13.0.88")
    assert versions["packages.stack.vllm"] == ("vLLM", "vllm 0.11.1.dev42+g1234abc, editable from /src/vllm")
    assert versions["vllm.version"] == ("", "0.11.1.dev42+g1234abc")  # one "vLLM" label for the group
    assert versions["vllm.origin"] == ("", "kind: git; url: https://github.com/vllm-project/vllm; commit: 1234abc")
    assert versions["packages.stack.flash-attn"] == ("flash-attn variants", "flash-attn 2.8.3, 3 files from its RECORD missing")
    assert versions["packages.stack.flash-attn-4"] == ("", "flash-attn-4 4.0.0b36")
    assert versions["flash_attn.variants"] == ("", "flash-attn 2.8.3; flash-attn-4 4.0.0b36")
    assert versions["packages.stack.xformers"] == ("other stack packages", "xformers 0.0.35")
    assert "vllm.*" not in versions  # no "not collected" once facts exist
    serving = [t for t in all_tables if [cell_text(c) for c in t[0]][:4] == ["pid", "ppid", "user", "what"]][0]
    assert cell_text(serving[1][0]) == "4242" and cell_text(serving[1][-1]) == "vllm serve Qwen/Qwen3-8B"
    assert cell_text(serving[1][3]) == "vllm EngineCore"
    assert "processes.index" not in out and "[1, 0" not in out  # the probe's internal lists are not shown
    listeners = [t for t in all_tables if [cell_text(c) for c in t[0]] == ["address", "family", "pids"]]
    assert listeners and cell_text(listeners[0][1][2]) == "[4242]"


def test_the_environment_table_shows_versions_not_internal_structures(tmp_path):
    """issue 31: the table showed `{"file": "v1/worker/gpu_model_runner.py", "read": […]`,
    `dirs: none; importable: no; path: none`, `{}` and `library: …; ptx: none; sm: …`."""
    data = json.loads(H200.read_text(encoding="utf-8"))
    data["facts"].update({
        "vllm.version": {"status": "ok", "source": "dist-info", "value": "0.33.0"},
        "vllm.code_markers": {"status": "ok", "source": "vllm source", "value": [
            {"file": "v1/worker/gpu_model_runner.py", "read": ["v1/worker/gpu_model_runner.py"], "state": "fixed"}]},
        "vllm.env_vars": {"status": "ok", "source": "environ", "value": {}},
        "vllm.import_check": {"status": "not_supported", "source": "gpudoctor", "detail": "not run (use --deep)"},
        "flash_attn.namespace": {"status": "ok", "source": "dist-info", "value": {"dirs": [], "importable": False, "path": None}},
        "torch.arch_list": json.loads((SNAPSHOTS / "h200-full.json").read_text(encoding="utf-8"))["facts"]["torch.arch_list"],
    })
    snap = tmp_path / "internal.json"
    snap.write_text(json.dumps(data), encoding="utf-8")
    out = gd("report", "--snapshot", str(snap)).stdout
    versions = {cell_text(r[2]): (cell_text(r[0]), cell_text(r[1])) for r in tables(parse(out))[0][1:]}
    assert versions["vllm.version"] == ("vLLM", "0.33.0")
    for internal in ("vllm.code_markers", "vllm.env_vars", "vllm.import_check", "flash_attn.namespace"):
        assert internal not in versions, versions[internal]
    assert versions["torch.arch_list"][1].startswith("sm_75 sm_80 sm_86 sm_89 sm_90 sm_90a") and "(from libtorch_cuda.so)" in versions["torch.arch_list"][1]
    assert not [value for _, value in versions.values() if "{" in value or "importable" in value]


# --- files and the bundle --------------------------------------------------------------------
def _mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def test_output_file_is_owner_only_even_when_it_existed(tmp_path):
    out = tmp_path / "report.md"
    out.write_text("old", encoding="utf-8")
    os.chmod(out, 0o644)
    proc = gd("report", "--snapshot", str(H200), "-o", str(out))
    assert proc.returncode == 0 and proc.stdout == ""
    assert _mode(out) == 0o600
    assert out.read_text(encoding="utf-8").startswith("## gpudoctor report")


def test_bundle_holds_report_snapshot_log_and_nvidia_smi(tmp_path):
    log = tmp_path / "vllm.log"
    log.write_text(VLLM_LOG, encoding="utf-8")
    out = tmp_path / "issue.md"
    proc = gd("report", "--snapshot", str(BUSY), "--log", str(log), "--bundle", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    bundle = tmp_path / "issue.tar.gz"
    assert _mode(out) == 0o600 and _mode(bundle) == 0o600
    with tarfile.open(bundle) as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert sorted(members) == sorted(f"gpudoctor-report/{n}" for n in
                                         ("report.md", "report.json", "snapshot.json", "log-excerpt.txt", "nvidia-smi-q.txt"))
        for member in members.values():
            assert member.mode == 0o600 and member.uid == 0 and member.uname == "" and member.isfile()
        read = lambda name: tar.extractfile(members[f"gpudoctor-report/{name}"]).read().decode()  # noqa: E731
        assert read("report.md") == out.read_text(encoding="utf-8")
        assert json.loads(read("report.json"))["kind"] == "gpudoctor.report"
        assert Snapshot.from_json(json.loads(read("snapshot.json"))).to_json() == Snapshot.load(str(BUSY)).to_json()
        assert read("log-excerpt.txt") == VLLM_LOG
        assert "made from a snapshot" in read("nvidia-smi-q.txt")


def test_bundle_on_this_machine_notes_a_missing_nvidia_smi(tmp_path):
    env_path = str(tmp_path)  # no nvidia-smi on this PATH
    proc = subprocess.run([sys.executable, "-m", "gpudoctor", "report", "--root", str(tmp_path), "--bundle", "-o", str(tmp_path / "b.tgz")],
                          capture_output=True, text=True, env=dict(os.environ, PATH=env_path), cwd=str(tmp_path), timeout=120)
    assert proc.returncode in (0, 1), proc.stderr
    with tarfile.open(tmp_path / "b.tgz") as tar:
        note = tar.extractfile("gpudoctor-report/nvidia-smi-q.txt").read().decode()
    assert note.startswith("nvidia-smi -q could not be run: nvidia-smi not found")


def test_bundle_default_name(tmp_path):
    proc = gd("report", "--snapshot", str(H200), "--bundle", cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout == ""
    (bundle,) = list(tmp_path.glob("gpudoctor-report-*.tar.gz"))
    assert _mode(bundle) == 0o600 and str(bundle.name) in proc.stderr


# --- inputs, exit codes ----------------------------------------------------------------------
def test_huge_and_binary_logs(tmp_path):
    log = tmp_path / "huge.log"
    with open(log, "wb") as handle:
        while handle.tell() < (5 << 20):
            handle.write(os.urandom(700) + b"\n")
        handle.write(b"OSError: [Errno 98] Address already in use\n")
    proc = gd("report", "--snapshot", str(H200), "--log", str(log), "--log-lines", "20", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)["log"]
    assert doc["truncated"] is True and len(doc["excerpt"]) == 20
    assert [s["id"] for s in doc["signatures"]] == ["SIG-address-in-use"]
    assert doc["excerpt"][-1]["signatures"] == ["SIG-address-in-use"]


@pytest.mark.parametrize("args", [["--log", "/nonexistent/file.log"], ["--log", "."], ["--log-lines", "-1"], ["--snapshot", "/nonexistent.json"]])
def test_bad_inputs_are_usage_errors(args):
    proc = gd("report", *args)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("gpudoctor: error: ") and len(proc.stderr.splitlines()) == 1


def test_unwritable_output_is_a_usage_error(tmp_path):
    proc = gd("report", "--snapshot", str(H200), "-o", str(tmp_path / "missing-dir" / "r.md"))
    assert proc.returncode == 2 and "cannot write" in proc.stderr


def test_exit_code_follows_fail_on():
    assert gd("report", "--snapshot", str(BUSY)).returncode == 0
    proc = gd("report", "--snapshot", str(BUSY), "--fail-on", "warning")
    assert proc.returncode == 1 and re.search(r"\*\*Blocking: \d+ findings? at or above warning\*\*", proc.stdout)
    # the blocking finding sits at the top, under the verdict, with its fix
    top = proc.stdout.split("### Versions")[0]
    assert "#### WARNING GD302 gpu-memory-in-use (GPU 1)" in top and "nvidia-smi --query-compute-apps" in top


def test_smoke_against_a_closed_port_is_reported(tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again when the block ends
    proc = gd("report", "--snapshot", str(H200), "--url", f"http://127.0.0.1:{port}", "--smoke-timeout", "1", "--format", "json")
    assert proc.returncode in (0, 1), proc.stderr
    smoke = json.loads(proc.stdout)["smoke"]
    assert smoke["requested"] is True and smoke["url"] == f"http://127.0.0.1:{port}"
    if smoke["status"] == "ok":  # this gpudoctor has the smoke probe
        assert smoke["facts"]["server.ready"]["status"] != "ok"
    else:
        assert smoke["status"] == "unavailable" and "smoke check unavailable" in smoke["note"]


def test_report_module_is_usable_without_the_cli():
    snap = Snapshot.load(str(H200))
    rep = report.build(snap, registry.load_rules())
    md = report.to_markdown(rep)
    assert md.startswith("## gpudoctor report") and "**Nothing blocking**" in md
    assert report.to_json(rep)["verdict"]["blocking"] is False


def test_every_value_renders_as_written_not_as_markdown():
    """A specifier such as protobuf!=6.30.*,!=6.31.* rendered on GitHub as 6.30.<em>,!=6.31.</em> (issue 31):
    the message, subject, fix and rule notes are escaped; a code span of our own prose stays code."""
    from gpudoctor.engine import Result
    from gpudoctor.rule import FAIL, Evidence, Finding, Fix, Outcome

    snap = Snapshot.load(str(H200))
    meta = registry.load_rules()[0]
    spec = "protobuf!=6.30.*,!=6.31.*"
    finding = Finding(meta.id, meta.name, "error", meta.area, meta.title,
                      f"vllm requires {spec}; __init__ of [the] ~~module~~ & <b>",
                      [Evidence("packages.dists.protobuf", spec)],
                      Fix(f"install {spec}: `pip install \"{spec}\"`", [f"pip install '{spec}'"]), subject=f"needs {spec}")
    rep = report.Report(Result(snap, [Outcome(meta, FAIL, [finding])]), "error", "test *run*", "now")
    html = MarkdownIt("commonmark").enable(["table", "strikethrough"]).render(report.to_markdown(rep))
    for literal in (f"vllm requires {spec}; __init__ of [the] ~~module~~ &amp; &lt;b&gt;",  # message
                    f"needs {spec}",  # subject, in the heading
                    f"install {spec}: <code>pip install &quot;{spec}&quot;</code>",  # fix: code span kept
                    "test *run*"):  # the source line
        assert literal in html, literal
    assert "6.30.<em>" not in html and "<em>run</em>" not in html and "<s>" not in html and "<b>" not in html


def test_a_report_from_a_snapshot_carries_the_capture_time_not_the_current_one(tmp_path):
    """issue 31: snapshots carried no capture time, so `report --snapshot` stamped the current one."""
    data = json.loads(H200.read_text(encoding="utf-8"))
    data["meta"]["captured_at"] = "2025-01-02T03:04:05Z"
    path = tmp_path / "then.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    md = gd("report", "--snapshot", str(path)).stdout
    assert "· captured 2025-01-02 03:04:05 UTC ·" in md.splitlines()[2]
    doc = json.loads(gd("report", "--snapshot", str(path), "--format", "json").stdout)
    assert doc["captured"] == "2025-01-02 03:04:05 UTC" and doc["generated"] != doc["captured"]
    # an older snapshot without one says so instead of passing the current time off as the capture time
    assert "the snapshot records no capture time" in gd("report", "--snapshot", str(H200)).stdout.splitlines()[2]
