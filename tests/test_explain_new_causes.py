"""The causes of issue 32: the facts that confirm them (probes/host_limits.py, explain_checks.py) and
"confirmed" only where this machine's own figure shows the cause."""

import json
import os
from pathlib import Path

import pytest

from gpudoctor import explain, explain_checks, registry
from gpudoctor.probes import Context, host_limits
from gpudoctor.snapshot import Snapshot

SNAPSHOTS = Path(__file__).resolve().parent / "fixtures" / "snapshots"
CORPUS = Path(__file__).resolve().parent / "explain_corpus"
# /proc/PID/limits as Linux prints it (a vLLM worker in a default Docker container).
LIMITS = """Limit                     Soft Limit           Hard Limit           Units
Max cpu time              unlimited            unlimited            seconds
Max open files            1024                 1048576              files
Max locked memory         8388608              8388608              bytes
"""


def snapshot(name="h200.json", **facts):
    data = json.loads((SNAPSHOTS / name).read_text(encoding="utf-8"))
    for path, value in facts.items():
        data["facts"][path.replace("__", ".")] = {"value": value, "status": "ok", "source": "test"}
    return Snapshot.from_json(data)


def confirm_text(text, snap):
    diagnosis = explain.diagnose(explain.clean(text))
    assert diagnosis.root is not None, text
    return diagnosis.root.signature.key, explain.confirm(diagnosis.root.signature, snap, details=diagnosis.root.details)


# --- the probe ---------------------------------------------------------------------------
def test_limits_line_is_parsed_and_unlimited_is_none():
    assert host_limits.parse_limits(LIMITS) == {"soft": 1024, "hard": 1048576}
    assert host_limits.parse_limits(LIMITS.replace("1024                 1048576", "unlimited            unlimited")) == {
        "soft": None, "hard": None}
    assert host_limits.parse_limits("garbage") is None


def test_this_process_limit_is_read_live():
    fact = host_limits.nofile(Context())
    assert fact.ok and set(fact.value) == {"soft", "hard"}


def test_a_fake_root_gives_devices_toolkit_and_limits(tmp_path):
    (tmp_path / "dev").mkdir()
    for name in ("nvidia0", "nvidiactl", "nvidia-uvm", "null"):
        (tmp_path / "dev" / name).write_text("")
    (tmp_path / "usr" / "bin").mkdir(parents=True)
    (tmp_path / "usr" / "bin" / "nvidia-ctk").write_text("")
    (tmp_path / "usr" / "bin" / "docker").write_text("")
    (tmp_path / "etc" / "docker").mkdir(parents=True)
    (tmp_path / "etc" / "docker" / "daemon.json").write_text('{"runtimes": {"nvidia": {"path": "nvidia-container-runtime"}}}')
    (tmp_path / "proc" / "self").mkdir(parents=True)
    (tmp_path / "proc" / "self" / "limits").write_text(LIMITS)
    (tmp_path / "proc" / "77").mkdir()
    (tmp_path / "proc" / "77" / "limits").write_text(LIMITS)
    ctx = Context(root=str(tmp_path), environ={"PATH": "/usr/bin"})
    facts = host_limits.collect(ctx)
    assert facts["host.nvidia_devices"].value == {"dev": ["nvidia-uvm", "nvidia0", "nvidiactl"], "proc_driver": False}
    toolkit = facts["host.nvidia_container_toolkit"].value
    assert toolkit["docker"] and toolkit["found"] == ["/usr/bin/nvidia-ctk"] and toolkit["daemon_json_nvidia"] is True
    assert facts["host.nofile"].value == {"soft": 1024, "hard": 1048576}
    assert host_limits.read_nofile(str(tmp_path / "proc"), 77) == {"soft": 1024, "hard": 1048576}
    assert host_limits.read_nofile(str(tmp_path / "proc"), 78) is None  # vanished: no answer, no raise


def test_an_unreadable_root_is_a_reason_not_a_crash(tmp_path):
    facts = host_limits.collect(Context(root=str(tmp_path / "absent"), environ={}))
    assert not facts["host.nvidia_devices"].ok
    assert facts["host.nvidia_container_toolkit"].value["found"] == []


# --- the numbers in the text against this machine ---------------------------------------------
SMEM = "triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 81920, Hardware limit: 65536."


def test_shared_memory_is_confirmed_only_on_a_gpu_with_less():
    key, conf = confirm_text(SMEM, snapshot(gpu__0__name="Tesla T4", gpu__0__compute_capability="7.5"))
    assert key == "triton_shared_memory_exceeded" and conf.verdict == explain.CONFIRMED
    assert "needs 81920" in conf.checks[0].text and "allows 65536" in conf.checks[0].text
    _, conf = confirm_text(SMEM, snapshot())  # an H200 allows 232448 per block
    assert conf.verdict == explain.NOT_CONFIRMED and "every GPU here allows" in conf.checks[0].text


def test_shared_memory_without_numbers_or_table_entry_cannot_be_checked():
    _, conf = confirm_text("triton.runtime.autotuner.OutOfResources: out of resource: shared memory", snapshot())
    assert conf.verdict == explain.COULD_NOT_CHECK
    _, conf = confirm_text(SMEM, snapshot(gpu__0__compute_capability="11.0"))
    assert conf.verdict == explain.COULD_NOT_CHECK and "no shared-memory figure" in conf.checks[0].text


def test_every_table_figure_is_what_triton_printed_where_the_corpus_shows_it():
    # T4 (7.5) 65536, RTX 3090/A6000 (8.6) 101376, Pascal (6.1) 49152: the "Hardware limit" of real texts.
    assert explain_checks.SHARED_MEMORY_PER_BLOCK["7.5"] == 65536
    assert explain_checks.SHARED_MEMORY_PER_BLOCK["8.6"] == 101376
    assert explain_checks.SHARED_MEMORY_PER_BLOCK["6.1"] == 49152


# --- the rules, through explain ------------------------------------------------------------
def test_open_files_is_confirmed_by_a_server_stuck_at_1024_and_not_by_a_shell_default():
    stuck = [{"pid": 9, "stack": "vllm", "nofile": {"soft": 1024, "hard": 1024}}]
    _, conf = confirm_text("OSError: [Errno 24] Too many open files", snapshot(host__nofile={"soft": 1024, "hard": 1048576},
                                                                               processes__serving=stuck))
    assert conf.verdict == explain.CONFIRMED and conf.checks[0].rule == "GD320"
    _, conf = confirm_text("ZMQError: Too many open files", snapshot(host__nofile={"soft": 1024, "hard": 1048576}))
    assert conf.verdict == explain.NOT_CONFIRMED


def test_docker_runtime_is_confirmed_on_a_host_without_the_toolkit_only():
    text = 'docker: Error response from daemon: could not select device driver "" with capabilities: [[gpu]].'
    bare = {"docker": True, "found": [], "daemon_json": None, "daemon_json_nvidia": None}
    _, conf = confirm_text(text, snapshot(host__container=None, host__nvidia_container_toolkit=bare,
                                          host__nvidia_devices={"dev": ["nvidia0", "nvidiactl"], "proc_driver": True}))
    assert conf.verdict == explain.CONFIRMED and conf.checks[0].rule == "GD321"
    installed = dict(bare, found=["/usr/bin/nvidia-container-runtime-hook"])
    _, conf = confirm_text(text, snapshot(host__container=None, host__nvidia_container_toolkit=installed,
                                          host__nvidia_devices={"dev": ["nvidia0", "nvidiactl"], "proc_driver": True}))
    assert conf.verdict == explain.NOT_CONFIRMED


# --- no wrong "confirmed" over the whole corpus on a healthy H200 ---------------------------------------
def _positives():
    out = []
    for path in sorted(CORPUS.glob("*.jsonl")):
        out += [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [r for r in out if r["kind"] == "positive"]


# A Triton kernel asking for 589824 bytes per block cannot run on any GPU (an H200 allows 232448): true here too.
TRUE_EVERYWHERE = {"smem-dest3d-2"}


@pytest.mark.parametrize("name", ["h200.json", "h200x2.json"])
def test_no_wrong_confirmed_on_a_healthy_h200(name):
    healthy = snapshot(name, host__nofile={"soft": 1048576, "hard": 1048576},
                       host__nvidia_devices={"dev": ["nvidia-uvm", "nvidia0", "nvidiactl"], "proc_driver": True},
                       host__nvidia_container_toolkit={"docker": False, "found": [], "daemon_json": None, "daemon_json_nvidia": None})
    catalogue = registry.load_rules()
    wrong = []
    for record in _positives():
        diagnosis = explain.diagnose(explain.clean(record["text"]))
        if diagnosis.root is None:
            continue
        conf = explain.confirm(diagnosis.root.signature, healthy, catalogue, details=diagnosis.root.details)
        if conf.verdict == explain.CONFIRMED and record["id"] not in TRUE_EVERYWHERE:
            wrong.append((record["id"], [c.text for c in conf.of_kind(explain.CONFIRMED)]))
    assert wrong == []


def test_the_probe_module_is_stdlib_only():
    source = Path(host_limits.__file__).read_text(encoding="utf-8")
    imports = {line.split()[1].split(".")[0] for line in source.splitlines() if line.startswith(("import ", "from "))}
    assert imports <= {"__future__", "os", "re", "typing", "gpudoctor"}, imports
    assert os.path.basename(host_limits.__file__) == "host_limits.py"


def test_tokenizers_before_0_20_is_confirmed_for_model_wrapper_only():
    text = "Exception: data did not match any variant of untagged enum ModelWrapper at line 1251012 column 3"
    old = {"tokenizers": {"name": "tokenizers", "version": "0.19.1", "location": "/x"}}
    _, conf = confirm_text(text, snapshot(packages__dists=old))
    assert conf.verdict == explain.CONFIRMED and "tokenizers 0.19.1 is installed" in conf.of_kind(explain.CONFIRMED)[0].text
    new = {"tokenizers": {"name": "tokenizers", "version": "0.21.0", "location": "/x"}}
    _, conf = confirm_text(text, snapshot(packages__dists=new))
    assert conf.verdict != explain.CONFIRMED
    _, conf = confirm_text("data did not match any variant of untagged enum PyPreTokenizerTypeWrapper", snapshot(packages__dists=old))
    assert conf.verdict != explain.CONFIRMED
    _, conf = confirm_text(text, snapshot(packages__dists={}))
    assert conf.verdict != explain.CONFIRMED
