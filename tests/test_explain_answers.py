"""The answers explain gives: the first cause of a log, "the cause is not in this excerpt",
and confirmations that only ever name the same cause ("different cause found" and "not
confirmed" are different answers from "confirmed").

Snapshots are the ones recorded on a real H200 (tests/fixtures/snapshots), changed where a
test needs a machine without a driver; texts are real (the corpus records named by id).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

from gpudoctor import explain
from gpudoctor.snapshot import Snapshot

REPO = Path(__file__).resolve().parent.parent
H200 = REPO / "tests" / "fixtures" / "snapshots" / "h200.json"
CORPUS = REPO / "tests" / "explain_corpus"


def corpus_text(record_id):
    for path in CORPUS.glob("*.jsonl"):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                record = json.loads(line)
                if record["id"] == record_id:
                    return record["text"]
    raise KeyError(record_id)


def no_driver():
    """The H200 snapshot as this machine would be without its driver: NVML's LibraryNotFound, no versions."""
    data = json.loads(H200.read_text(encoding="utf-8"))
    facts = data["facts"]
    facts["driver.nvml"] = {"status": "error", "source": "nvml", "detail": "NVML LibraryNotFound: NVML Shared Library Not Found",
                            "value": {"code": 12, "name": "LibraryNotFound"}}
    for path in ("driver.version", "driver.cuda_max", "driver.library_path"):
        facts[path] = {"status": "absent", "source": "nvml", "detail": "no driver", "value": None}
    facts["driver.kernel_module_version"] = {"status": "absent", "source": "/proc/driver/nvidia/version",
                                             "detail": "NVIDIA kernel module not loaded", "value": None}
    return Snapshot.from_json(data)


INSUFFICIENT = "RuntimeError: CUDA error: CUDA driver version is insufficient for CUDA runtime version"


def test_driver_too_old_is_not_confirmed_by_a_missing_driver():
    """The issue's example: on a machine with no driver, "the driver is too old" must not be
    "confirmed by GD101 no-driver": that is a different cause, said as such."""
    (match,) = explain.match_text(INSUFFICIENT)
    conf = explain.confirm(match.signature, no_driver())
    assert conf.verdict == "different_cause"
    assert conf.of_kind("confirmed") == []
    (different,) = conf.of_kind("different_cause")
    assert different.rule == "GD101" and "libnvidia-ml.so.1 was not found" in different.text
    # GD103 and GD204 themselves could not look: they need the driver's version
    assert [c.rule for c in conf.of_kind("could_not_check")] == ["GD103", "GD204"]


def test_driver_too_old_on_the_healthy_h200_is_not_confirmed():
    (match,) = explain.match_text(INSUFFICIENT)
    conf = explain.confirm(match.signature, Snapshot.load(str(H200)))
    assert conf.verdict == "not_confirmed" and "GD103" in [c.rule for c in conf.of_kind("not_confirmed")]
    assert conf.of_kind("different_cause") == []


def test_no_driver_itself_is_confirmed_by_gd101():
    (match,) = explain.match_text("RuntimeError: Found no NVIDIA driver on your system.")
    conf = explain.confirm(match.signature, no_driver())
    assert conf.verdict == "confirmed" and [c.rule for c in conf.of_kind("confirmed")] == ["GD101"]


def test_the_cli_says_different_cause_not_confirmed(tmp_path):
    snap = tmp_path / "no-driver.json"
    snap.write_text(no_driver().dumps(), encoding="utf-8")
    out = run("explain", INSUFFICIENT, "--snapshot", str(snap)).stdout
    assert "different cause found by GD101 no-driver" in out and "not this cause here" in out
    assert "confirmed by GD101" not in out.replace("different cause found by GD101", "")
    assert "that is it" not in out


def test_a_finding_about_something_else_does_not_confirm():
    """GD503 failing for a package that has nothing to do with torch does not confirm a torch ABI error."""
    from gpudoctor import registry
    from gpudoctor.rule import Fail, RuleMeta

    def fake_gd503(snap):
        return Fail("transformers 4.57.0 requires tokenizers<0.23,>=0.22, 0.21.1 is installed", [])

    catalogue = [RuleMeta("GD503", "requirement-not-satisfied", "error", "vllm", (), fake_gd503, "t")]
    sig = explain.find_signature("SIG-torch-extension-undefined-symbol")
    conf = explain.confirm(sig, Snapshot.load(str(H200)), catalogue)
    assert conf.verdict != "confirmed"
    assert any(c.rule == "GD503" and "not this one" in c.text for c in conf.of_kind("not_confirmed"))
    assert registry.find("GD503") is not None  # the real rule exists under that ID


def test_launch_rules_without_a_launch_command_could_not_check():
    (match,) = explain.match_text(corpus_text("maxlen-vllm-3676"))
    conf = explain.confirm(match.signature, Snapshot.load(str(H200)))
    assert conf.verdict == "could_not_check"
    (check,) = conf.checks
    assert check.rule == "GD715" and "--launch" in check.text and "gpudoctor preflight -- vllm serve" in check.text


def test_a_cause_no_machine_can_show_says_so():
    (match,) = explain.match_text(corpus_text("gated-llm2vec-130"))
    conf = explain.confirm(match.signature, Snapshot.load(str(H200)))
    assert conf.verdict == "could_not_check" and "Hugging Face Hub" in conf.checks[0].text


# --- the first cause, not the last symptom -----------------------------------------------------
def test_truncated_log_at_workerproc_says_the_cause_is_not_in_it():
    text = corpus_text("sym-workerproc-failed-workervllm-276")
    diagnosis = explain.diagnose(text)
    assert diagnosis.root is None and diagnosis.incomplete
    assert diagnosis.first_error is not None and "WorkerProc failed to start" in diagnosis.first_error[1]
    out = run("explain", text, "--no-confirm").stdout
    assert "A failure is visible" in out and "its cause is not in this excerpt" in out
    assert "Send the log from the first ERROR line" in out and "Look for: the first ERROR line of a worker" in out
    assert "This excerpt starts at the failure itself (line 1)" in out


def test_the_first_cause_wins_over_later_errors():
    """An OOM in a worker, then the executor's WorkerProc failure, then a NCCL shm error while tearing down."""
    text = "\n".join([
        "INFO 03-19 07:27:40 [model_runner.py:1110] Loading model weights took 14.99 GB",
        corpus_text("oom-vllm-15105").splitlines()[0],
        "(EngineCore_DP0 pid=469) ERROR 03-11 17:57:10 [multiproc_executor.py:783] WorkerProc failed to start.",
        "ubuntu:9621:9688 [3] misc/shmutils.cc:112 NCCL WARN Error while creating shared memory segment /dev/shm/nccl-KWfVyt (size 5967872)",
    ])
    diagnosis = explain.diagnose(text)
    assert diagnosis.root.signature.id == "SIG-cuda-oom" and diagnosis.root.line == 2
    assert [m.signature.id for m in diagnosis.matches] == ["SIG-cuda-oom", "SIG-nccl-shm", "SIG-worker-failed-to-start"]
    out = run("explain", "-", "--no-confirm", stdin=text).stdout
    assert out.startswith("Root cause in stdin: line 2: CUDA out of memory")
    assert "[1] SIG-cuda-oom: CUDA out of memory (loading, profiling, warm-up or a request) [root cause]" in out
    assert "[3] SIG-worker-failed-to-start" in out and "[symptom]" in out


def test_fixes_cite_the_threads():
    sig = explain.find_signature("SIG-k8s-device-plugin-nvml")
    out = run("explain", "SIG-k8s-device-plugin-nvml").stdout
    assert "## What fixed it in the threads" in out
    assert "https://github.com/NVIDIA/k8s-device-plugin/issues/23" in out and sig.thread_fixes


def test_rule_docs_still_work():
    proc = run("explain", "GD101")
    assert proc.returncode == 0 and proc.stdout.startswith("GD101 no-driver (error, area driver)")


def run(*args, stdin=None):
    proc = subprocess.run(
        [sys.executable, "-m", "gpudoctor", *args], input=stdin, capture_output=True, text=True, encoding="utf-8",
        env=dict(os.environ, PYTHONIOENCODING="utf-8"), cwd=str(REPO), timeout=120,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def test_explain_log_on_a_whole_real_vllm_startup_log_names_the_root_line():
    """A real 223-line `vllm serve` log (vLLM 0.25.1, DGX Spark; source in the sidecar): the root error is
    line 127, the last line is the API server's generic "Engine core initialization failed"."""
    log = CORPUS / "logs" / "vllm-kv-cache-too-small-dgx-spark.log"
    side = json.loads(log.with_suffix(".json").read_text(encoding="utf-8"))
    doc = json.loads(run("explain", "--log", str(log), "--no-confirm", "--format", "json").stdout)
    assert doc["answer"]["root_cause"] == "SIG-kv-cache-no-room" and doc["answer"]["cause_key"] == side["cause"]
    root = doc["matches"][0]
    assert root["line"] == side["root_cause_line_number"] == 127
    assert side["root_cause_line"].startswith(root["text"].rstrip("…"))
    # vLLM logs "EngineCore failed to start." (line 104) *above* the traceback that ends in the cause: a symptom,
    # listed last whatever its line, and never the answer
    symptom = doc["matches"][-1]
    assert symptom["id"] == "SIG-worker-failed-to-start" and symptom["line"] == 104 and symptom["count"] >= 2
    out = run("explain", "--log", str(log), "--no-confirm").stdout
    assert out.startswith(f"Root cause in {log}: line 127: vLLM: no memory left for the KV cache")


def test_an_unterminated_terminal_title_does_not_swallow_the_lines_after_it():
    # Binary garbage can hold an OSC start (ESC ]) whose BEL comes lines later: only its own line is cleaned.
    text = explain.clean("\x1b]0;garbage\nRuntimeError: Failed to infer device type\n\x07 more")
    assert [m.signature.id for m in explain.match_text(text)] == ["SIG-failed-to-infer-device-type"]


def model_dir(tmp_path, **config):
    model = tmp_path / "model"
    model.mkdir()
    base = {"architectures": ["LlamaForCausalLM"], "max_position_embeddings": 8192, "num_attention_heads": 32,
            "num_key_value_heads": 8, "hidden_size": 4096, "num_hidden_layers": 32, "torch_dtype": "bfloat16", "vocab_size": 128256}
    (model / "config.json").write_text(json.dumps(dict(base, **config)), encoding="utf-8")
    return model


def test_launch_causes_are_confirmed_with_the_launch_command(tmp_path):
    model = model_dir(tmp_path)
    text = corpus_text("maxlen-vllm-3676")
    out = run("explain", text, "--snapshot", str(H200), "--launch", f"vllm serve {model} --max-model-len 131072").stdout
    assert "checked on the snapshot" in out and "and the launch command" in out
    assert "confirmed by GD715 max-model-len-exceeds-context: --max-model-len 131072 is more than the model's 8192" in out
    # the same text with a command that stays inside the context: not this command's problem
    out = run("explain", text, "--snapshot", str(H200), "--launch", f"vllm serve {model} --max-model-len 4096").stdout
    assert "not confirmed here: GD715" in out and "that is it" not in out


def test_tensor_parallel_text_is_confirmed_only_by_a_command_that_does_not_divide(tmp_path):
    model = model_dir(tmp_path)
    text = corpus_text("tpdiv-vllm-2652")
    out = run("explain", text, "--snapshot", str(H200), "--launch", f"vllm serve {model} --tensor-parallel-size 3").stdout
    assert "confirmed by GD706" in out
    out = run("explain", text, "--snapshot", str(H200), "--launch", f"vllm serve {model} --tensor-parallel-size 4").stdout
    assert "confirmed by GD706" not in out
    proc = run("explain", text, "--snapshot", str(H200), "--launch", "vllm serve 'unclosed")
    assert proc.returncode == 2 and proc.stderr.startswith("gpudoctor: error: --launch:")


def confirmed_causes(snapshot):
    """Every corpus text's first cause, confirmed on ``snapshot``: {(cause key, confirming rule)}."""
    out = set()
    for path in sorted(CORPUS.glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            diagnosis = explain.diagnose(explain.clean(json.loads(line)["text"]))
            if diagnosis.root is not None:
                conf = explain.confirm(diagnosis.root.signature, snapshot)
                out.update((diagnosis.root.signature.key, check.rule) for check in conf.of_kind("confirmed"))
    return out


def test_the_whole_corpus_on_the_recorded_h200_confirms_nothing():
    """The stock H200 as recorded by the coordinator's device run (every CUDA binary scanned): healthy,
    so no real error text may be "confirmed" on it (run 2 found 9, all GD201's false error on cuFFT) —
    but for its one true finding: its hard open-files limit is 20000 (recorded since host.nofile), so a
    server started there cannot raise its own to the 65535 vLLM and SGLang ask for (GD320)."""
    recorded = REPO / "tests" / "fixtures" / "snapshots" / "h200-every-cuda-binary.json"
    snapshot = Snapshot.load(str(recorded))
    assert snapshot.facts["host.nofile"].value == {"soft": 20000, "hard": 20000}
    assert confirmed_causes(snapshot) == {("open_files_limit", "GD320")}


def test_on_a_machine_without_a_driver_only_driver_causes_are_confirmed():
    keys = {key for key, _ in confirmed_causes(no_driver())}
    assert keys == {"no_driver", "container_nvml_driver_not_loaded", "container_nvml_library_missing", "k8s_device_plugin_nvml",
                    "cuda_driver_init_failed", "vllm_device_type_unknown"}, keys


def test_on_the_busy_h200_only_memory_causes_are_confirmed_by_the_process_holding_memory():
    busy = Snapshot.load(str(REPO / "tests" / "fixtures" / "snapshots" / "h200x2-busy.json"))
    assert confirmed_causes(busy) == {(key, "GD302") for key in ("cuda_oom", "kv_cache_insufficient", "gpu_memory_utilization_exceeds_free")}
