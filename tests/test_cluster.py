"""The cluster check without Ray: the Slurm/ssh path (one snapshot file per node), the cross-node
rules (GD9xx) on files derived from the snapshots recorded on real H200 hosts, the renderers,
and the command's refusals. The real multi-node Ray cluster is in tests/test_cluster_ray.py.
"""

import copy
import io
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from gpudoctor import cluster, registry
from gpudoctor.cli import main
from gpudoctor.commands.cluster import evaluate
from gpudoctor.engine import run_rules
from gpudoctor.render import fleet_json, matrix
from gpudoctor.rule import NOT_APPLICABLE
from gpudoctor.snapshot import Snapshot, ok
from helpers import private_env

REPO = Path(__file__).resolve().parent.parent
SNAPSHOTS = REPO / "tests" / "fixtures" / "snapshots"
RULES = registry.load_rules()
CLUSTER_IDS = [m.id for m in RULES if m.area == "cluster"]


def load(name):
    return json.loads((SNAPSHOTS / name).read_text(encoding="utf-8"))


def put(data, path, value, status="ok", detail=""):
    fact = {"value": value, "status": status}
    if detail:
        fact["detail"] = detail
    data["facts"][path] = fact
    return data


def write(tmp_path, name, data):
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return str(path)


def dists(**versions):
    return {key: {"name": key, "version": version, "location": "/venv/lib/python3.12/site-packages"} for key, version in versions.items()}


def gd(*argv, environ=None):
    out, err = io.StringIO(), io.StringIO()
    env = private_env(NO_COLOR="1")  # the session's scan cache: a node's probe never writes to ~/.cache
    env.update(environ or {})
    code = main(list(argv), environ=env, stdout=out, stderr=err)
    assert "Traceback" not in out.getvalue() + err.getvalue()
    return code, out.getvalue(), err.getvalue()


def gd_json(*argv):
    code, out, err = gd(*argv, "--format", "json")
    return code, json.loads(out), err


def by_id(doc, rule_id):
    return [f for f in doc["across_nodes"]["findings"] if f["id"] == rule_id]


def values(row):
    """A schema-2 matrix row's groups as {node: text}."""
    return {node: group["value"] for group in row["groups"] for node in group["nodes"]}


# --- the representation ---------------------------------------------------------------------
def test_safe_and_unique_names():
    assert cluster.safe_name("gpu-node-1.example.com") == "gpu-node-1-example-com"
    assert cluster.safe_name("10.0.0.7") == "10-0-0-7"
    assert cluster.safe_name("///") == "node"
    assert cluster.unique_names(["a", "a", "b", "a"]) == ["a", "a-2", "b", "a-3"]


def test_merge_and_split_round_trip():
    a, b = Snapshot.from_json(load("h200.json")), Snapshot.from_json(load("h200x2.json"))
    merged = cluster.merge([cluster.Member("a", snapshot=a), cluster.Member("b", snapshot=b),
                            cluster.Member("c", cluster.UNREACHABLE, "gone")], "test")
    assert cluster.is_cluster(merged) and not cluster.is_cluster(a)
    assert [name for name, _ in cluster.reachable(merged)] == ["a", "b"]
    assert cluster.node_snapshot(merged, "b").facts == b.facts
    assert merged.value("node.a.gpu.0.name") == "NVIDIA H200"
    assert [e["status"] for e in cluster.node_entries(merged)] == ["ok", "ok", "unreachable"]
    # It survives JSON like any snapshot.
    again = Snapshot.from_json(json.loads(merged.dumps()))
    assert cluster.node_snapshot(again, "a").to_json()["facts"] == a.to_json()["facts"]
    with pytest.raises(ValueError):
        cluster.merge([cluster.Member("x.y")])



def test_a_hand_edited_node_list_keeps_only_well_formed_entries():
    merged = cluster.merge([cluster.Member("a", snapshot=Snapshot.from_json(load("h200.json"))),
                            cluster.Member("b", cluster.UNREACHABLE, "gone")], "test")
    merged.facts[cluster.NODES_FACT].value += [
        "not a node", {"name": "bad.name", "status": "ok"}, {"name": "a", "status": "ok"}, {"name": "c", "status": "asleep"}]
    assert [(e["name"], e["status"]) for e in cluster.node_entries(merged)] == [("a", "ok"), ("b", "unreachable")]
    assert [name for name, _ in cluster.reachable(merged)] == ["a"]
    merged.facts[cluster.NODES_FACT] = ok({"a": "ok"}, "hand-edited")
    assert cluster.node_entries(merged) == [] and cluster.reachable(merged) == []


def test_a_saved_cluster_file_contributes_its_nodes(tmp_path):
    saved = tmp_path / "saved.json"
    saved.write_text(cluster.merge(
        [cluster.Member("n1", snapshot=Snapshot.from_json(load("h200.json")), head=True, address="10.0.0.1"),
         cluster.Member("n2", cluster.UNREACHABLE, "Ray marks this node dead")], "ray 10.0.0.1:6379").dumps(), encoding="utf-8")
    other = write(tmp_path, "third", put(load("h200x2.json"), "host.hostname", "n3.cluster.example"))
    merged = cluster.from_files([str(saved), other])
    entries = cluster.node_entries(merged)
    assert [(e["name"], e["status"]) for e in entries] == [("n1", "ok"), ("n2", "unreachable"), ("n3", "ok")]
    assert entries[0]["head"] and entries[0]["source"] == f"{saved}: n1" and entries[2]["source"] == other
    assert cluster.node_snapshot(merged, "n1").value("gpu.count") == 1 and cluster.node_snapshot(merged, "n3").value("gpu.count") == 2
    code, out, _ = gd("check", "--snapshot", str(saved), "--snapshot", other)
    assert code == 1 and "GD901 cluster-node-unreachable [n2]" in out and "Node n1 (head)" in out


def test_verbose_lists_what_was_not_applicable_across_nodes_and_on_each(tmp_path):
    a, b = write(tmp_path, "a", load("h200.json")), write(tmp_path, "b", load("h200.json"))
    quiet = gd("check", "--snapshot", a, "--snapshot", b)[1]
    code, out, _ = gd("check", "--snapshot", a, "--snapshot", b, "-v")
    assert "GD907 cluster-parallel-plan-does-not-fit: not applicable: " in out and "GD907" not in quiet
    per_node = [line for line in out.splitlines() if line.startswith("    ") and ": not applicable: " in line and " GD9" not in line]
    assert len(per_node) >= 2 and len(per_node) % 2 == 0  # the same single-node rules on both nodes


def test_gpu_target_applies_to_every_node_file(tmp_path):
    a, b = write(tmp_path, "a", load("h200.json")), write(tmp_path, "b", load("h200x2.json"))
    code, doc, _ = gd_json("check", "--snapshot", a, "--snapshot", b, "--gpu", "2xA100-80GB")
    row = next(r for r in doc["matrix"]["rows"] if r["label"] == "GPUs (visible)")
    assert values(row) == {"a": "2 × A100 (cc 8.0)", "b": "2 × A100 (cc 8.0)"} and not row["differs"]
    assert fleet_json.node_facts(doc, "a")["gpu.1.memory_total"]["value"] == 80 << 30
    assert not by_id(doc, "GD905") and not by_id(doc, "GD906")

def test_cluster_rules_are_not_applicable_on_one_node():
    result = run_rules(Snapshot.from_json(load("h200.json")), [m for m in RULES if m.area == "cluster"])
    assert len(result.outcomes) == len(CLUSTER_IDS) >= 8
    assert {o.status for o in result.outcomes} == {NOT_APPLICABLE}, [(o.rule.id, o.status, o.reason) for o in result.outcomes]


# --- the Slurm / ssh path: real `gpudoctor snapshot` runs, one per "node" ---------------------
def test_slurm_path_real_snapshots_name_the_odd_node(tmp_path):
    """`gpudoctor snapshot -o NODE.json` on each node, then `check --snapshot …` on the files."""
    files = []
    for name, extra in (("node-a", {}), ("node-b", {}), ("node-c", {"NCCL_SOCKET_IFNAME": "eth9"})):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("NCCL_", "VLLM_"))}
        env.update(extra)
        out = tmp_path / f"{name}.json"
        proc = subprocess.run([sys.executable, "-m", "gpudoctor", "snapshot", "-o", str(out)], env=env, cwd=str(tmp_path),
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        files.append(str(out))
    argv = ["check"]
    for path in files:
        argv += ["--snapshot", path]
    code, doc, _ = gd_json(*argv)
    assert doc["kind"] == "gpudoctor.cluster"
    assert [n["name"] for n in doc["nodes"]] == ["node-a", "node-b", "node-c"]  # one host: same hostname, so file names
    skew = by_id(doc, "GD904")
    assert len(skew) == 1 and skew[0]["subject"] == "node-c", skew
    assert "NCCL_SOCKET_IFNAME eth9 on node-c" in skew[0]["message"]
    row = next(r for r in doc["matrix"]["rows"] if r["label"] == "NCCL_SOCKET_IFNAME")
    assert row["differs"] and values(row) == {"node-a": "(unset)", "node-b": "(unset)", "node-c": "eth9"}
    # Same Python on the three: the stack rule compared and passed.
    stack = next(o for o in doc["across_nodes"]["outcomes"] if o["id"] == "GD903")
    assert stack["status"] == "pass", stack
    assert code in (0, 1)  # this machine has no GPU driver: a single-node error (GD101) may block


# --- cross-node rules on files derived from the H200 recordings -----------------------------
def _stack_files(tmp_path):
    base = load("h200x2.json")
    put(base, "packages.dists", dists(vllm="0.11.0", **{"nvidia-nccl-cu13": "2.28.9", "ray": "2.60.0"}))
    names = {}
    for name in ("gpu1", "gpu2", "gpu3"):
        data = copy.deepcopy(base)
        put(data, "host.hostname", f"{name}.cluster.example")
        names[name] = data
    odd = names["gpu3"]
    put(odd, "torch.version", "2.10.0+cu129")
    put(odd, "packages.dists", dists(vllm="0.10.2", **{"nvidia-nccl-cu13": "2.27.3", "ray": "2.60.0", "flash-attn-4": "4.0.0b36"}))
    put(odd, "vllm.commit", "deadbeef")  # a fact another probe may add: compared by pattern, tolerated elsewhere
    return [write(tmp_path, f"file-{name}", data) for name, data in names.items()]


def test_stack_skew_names_the_odd_node_and_pins_the_majority(tmp_path):
    files = _stack_files(tmp_path)
    code, doc, _ = gd_json("check", "--snapshot", files[0], "--snapshot", files[1], "--snapshot", files[2])
    # Distinct hostnames: nodes are named after them (short form), not after the files.
    assert [n["name"] for n in doc["nodes"]] == ["gpu1", "gpu2", "gpu3"]
    [finding] = by_id(doc, "GD903")
    assert finding["subject"] == "gpu3" and finding["severity"] == "error"
    message = finding["message"]
    assert message.startswith("gpu3 differs from the rest of the cluster")
    assert "torch.version 2.10.0+cu129 on gpu3 (the other 2 nodes: 2.11.0+cu130)" in message
    assert "vllm (package) 0.10.2 on gpu3 (the other 2 nodes: 0.11.0)" in message
    assert "nvidia-nccl-cu13 (package) 2.27.3 on gpu3" in message
    assert "flash-attn-4 (package) 4.0.0b36 on gpu3 (the other 2 nodes: (not installed))" in message
    assert "ray (package)" not in message  # equal everywhere
    assert "vllm.commit" not in message  # only one node has the fact: nothing to compare it with
    commands = finding["fix"]["commands"]
    assert commands[0] == "pip install vllm==0.11.0 nvidia-nccl-cu13==2.28.9  # on gpu3"
    assert commands[1] == "pip uninstall -y flash-attn-4  # on gpu3"
    assert code == 1  # an error-severity skew blocks
    rows = {r["label"]: r for r in doc["matrix"]["rows"]}
    assert rows["vLLM"]["differs"] and values(rows["vLLM"])["gpu3"] == "0.10.2"
    assert rows["torch"]["differs"] and not rows["Python"]["differs"]


def test_two_nodes_that_disagree_have_no_majority(tmp_path):
    a = put(load("h200.json"), "torch.version", "2.11.0+cu130")
    b = put(load("h200.json"), "torch.version", "2.9.1+cu128")
    code, doc, _ = gd_json("check", "--snapshot", write(tmp_path, "left", a), "--snapshot", write(tmp_path, "right", b))
    [finding] = by_id(doc, "GD903")
    assert finding["subject"] == "left, right"
    assert "the 2 nodes disagree with no majority: torch.version: 2.11.0+cu130 on left; 2.9.1+cu128 on right" in finding["message"]


def test_a_fact_a_node_could_not_collect_is_not_a_difference(tmp_path):
    a = load("h200.json")
    b = put(load("h200.json"), "driver.version", None, "timeout", "nvml did not answer")
    code, doc, _ = gd_json("check", "--snapshot", write(tmp_path, "a", a), "--snapshot", write(tmp_path, "b", b),
                           "--select", "GD902")
    outcome = next(o for o in doc["across_nodes"]["outcomes"] if o["id"] == "GD902")
    assert outcome["status"] == "pass", outcome
    # The matrix agrees with the rule: the row shows the timeout but is not marked as differing.
    row = next(r for r in doc["matrix"]["rows"] if r["label"] == "driver")
    assert values(row)["b"] == "(timeout)" and not row["differs"], row
    # …but an absent torch on one node is one.
    c = put(load("h200.json"), "torch.version", None, "absent", "no torch/version.py")
    code, doc, _ = gd_json("check", "--snapshot", write(tmp_path, "a", a), "--snapshot", write(tmp_path, "c", c),
                           "--select", "GD903")
    [finding] = by_id(doc, "GD903")
    assert "torch.version: 2.11.0+cu130 on a; (absent) on c" in finding["message"]


def test_gpu_models_and_counts_and_the_parallel_plan(tmp_path):
    h200, a100 = write(tmp_path, "h200", load("h200.json")), write(tmp_path, "a100", load("a100.json"))
    code, doc, _ = gd_json("check", "--snapshot", h200, "--snapshot", a100)
    [models] = by_id(doc, "GD905")
    assert models["severity"] == "error"  # compute capabilities 9.0 and 8.0
    assert "NVIDIA H200 (cc 9.0) on h200" in models["message"] and "(cc 8.0) on a100" in models["message"]

    two, three = write(tmp_path, "two-a", load("h200x2.json")), write(tmp_path, "two-b", load("h200x2.json"))
    one = write(tmp_path, "one", load("h200.json"))
    code, doc, _ = gd_json("cluster", "--snapshot", two, "--snapshot", three, "--snapshot", one)
    [counts] = by_id(doc, "GD906")
    assert counts["subject"] == "one" and "visible GPUs per node differ: 2 on two-a, two-b; 1 on one" in counts["message"]
    assert not by_id(doc, "GD905")  # all H200
    plan = next(o for o in doc["across_nodes"]["outcomes"] if o["id"] == "GD907")
    assert plan["status"] == "not_applicable"

    code, doc, _ = gd_json("cluster", "--snapshot", two, "--snapshot", three, "-tp", "2", "-pp", "2")
    assert next(o for o in doc["across_nodes"]["outcomes"] if o["id"] == "GD907")["status"] == "pass"
    code, doc, _ = gd_json("cluster", "--snapshot", two, "--snapshot", three, "--tensor-parallel-size", "4")
    [spans] = by_id(doc, "GD907")
    assert spans["severity"] == "warning" and "tensor-parallel group of 4 GPUs" in spans["message"]
    code, doc, _ = gd_json("cluster", "--snapshot", two, "--snapshot", three, "-tp", "2", "-pp", "3")
    [short] = by_id(doc, "GD907")
    assert short["severity"] == "error" and "needs 6 GPUs, the nodes that answered have 4" in short["message"]
    assert code == 1


def test_cuda_visible_devices_narrows_a_node(tmp_path):
    narrowed = load("h200x2.json")
    narrowed["facts"]["env"]["value"]["CUDA_VISIBLE_DEVICES"] = "0"
    code, doc, _ = gd_json("check", "--snapshot", write(tmp_path, "full", load("h200x2.json")),
                           "--snapshot", write(tmp_path, "narrow", narrowed), "--select", "GD906")
    [counts] = by_id(doc, "GD906")
    assert "2 on full; 1 on narrow" in counts["message"]


def test_small_dev_shm_for_ray(tmp_path):
    small = put(load("h200.json"), "host.shm_total", 64 << 20)
    code, doc, _ = gd_json("check", "--snapshot", write(tmp_path, "big", load("h200.json")),
                           "--snapshot", write(tmp_path, "small", small), "--select", "GD908")
    [finding] = by_id(doc, "GD908")
    assert finding["subject"] == "small" and "/dev/shm on small is 0.1 GiB" in finding["message"]
    assert "needs 10.0 GiB" not in finding["message"] and "needs 9.3 GiB" in finding["message"]  # 10**10 bytes


def test_unreadable_file_is_a_node_in_error_and_the_rest_still_comes_out(tmp_path):
    bad = tmp_path / "broken.json"
    bad.write_text('{"schema_version": 1, "facts": {', encoding="utf-8")
    code, doc, _ = gd_json("check", "--snapshot", write(tmp_path, "good", load("h200.json")), "--snapshot", str(bad),
                           "--snapshot", str(tmp_path / "missing.json"))
    statuses = {n["name"]: n["status"] for n in doc["nodes"]}
    assert statuses == {"good": "ok", "broken": "error", "missing": "error"}
    unreachable = by_id(doc, "GD901")
    assert {f["subject"] for f in unreachable} == {"broken", "missing"}
    assert all(f["severity"] == "warning" for f in unreachable)
    assert "is not valid JSON" in next(n["detail"] for n in doc["nodes"] if n["name"] == "broken")
    assert next(n for n in doc["nodes"] if n["name"] == "good")["findings"] is not None
    code, out, err = gd("check", "--snapshot", str(bad), "--snapshot", str(tmp_path / "missing.json"))
    assert code == 2 and "no snapshot file could be read" in err and out == ""


def test_single_snapshot_is_unchanged(tmp_path):
    code, doc, _ = gd_json("check", "--snapshot", str(SNAPSHOTS / "h200.json"))
    assert "kind" not in doc and "outcomes" in doc and doc["snapshot"]["facts"]["gpu.0.name"]["value"] == "NVIDIA H200"
    cluster_outcomes = [o for o in doc["outcomes"] if o["area"] == "cluster"]
    assert cluster_outcomes and all(o["status"] == "not_applicable" for o in cluster_outcomes)


def test_saved_cluster_snapshot_replays_with_an_unreachable_node(tmp_path):
    merged = cluster.merge(
        [cluster.Member("n1", snapshot=Snapshot.from_json(load("h200.json")), head=True, address="10.0.0.1"),
         cluster.Member("n2", cluster.UNREACHABLE, "Ray marks this node dead (health check failed)", address="10.0.0.2")],
        "ray 10.0.0.1:6379")
    path = tmp_path / "cluster.json"
    path.write_text(merged.dumps(), encoding="utf-8")
    code, out, _ = gd("check", "--snapshot", str(path))
    assert code == 1
    assert "✗ GD901 cluster-node-unreachable [n2]: node n2 is unreachable: Ray marks this node dead" in out
    assert "Node n2  unreachable: Ray marks this node dead" in out
    assert "Node n1 (head)" in out
    # The matrix shows the dead node's column as gone, and marks the status row.
    status_line = next(line for line in out.splitlines() if line.lstrip("≠ ").startswith("status"))
    assert status_line.startswith("≠") and "unreachable" in status_line
    driver_line = next(line for line in out.splitlines() if line[2:].startswith("driver "))
    assert driver_line.split()[-1] == "—" and "580.159.04" in driver_line


def test_markdown_and_cluster_markdown(tmp_path):
    files = _stack_files(tmp_path)
    code, out, _ = gd("check", "--snapshot", files[0], "--snapshot", files[1], "--snapshot", files[2], "--format", "markdown")
    assert out.startswith("## gpudoctor ")
    assert "| | gpu1 | gpu2 | gpu3 |" in out
    assert "| **≠ torch** | 2.11.0+cu130 (CUDA 13.0) | 2.11.0+cu130 (CUDA 13.0) | 2.10.0+cu129 (CUDA 13.0) |" in out
    assert "#### ERROR GD903 cluster-stack-skew (gpu3)" in out and "### Node gpu2" in out
    result = evaluate(cluster.from_files(files), RULES)
    assert matrix.markdown(result) == out  # what `gpudoctor report` writes for a cluster


def test_anonymize_hashes_the_hostnames(tmp_path):
    files = _stack_files(tmp_path)
    code, out, _ = gd("check", "--snapshot", files[0], "--snapshot", files[1], "--snapshot", files[2], "--anonymize")
    assert "gpu3.cluster.example" not in out and "host-" in out


def test_usage_errors():
    code, out, err = gd("cluster", "--snapshot", str(SNAPSHOTS / "h200.json"), "-tp", "0")
    assert code == 2 and "--tensor-parallel-size must be at least 1" in err
    code, out, err = gd("cluster", "--snapshot", str(SNAPSHOTS / "h200.json"), "--python", sys.executable)
    assert code == 2 and "cannot be combined with --snapshot" in err
    code, out, err = gd("check", "--snapshot", str(SNAPSHOTS / "h200.json"), "--snapshot", str(SNAPSHOTS / "a100.json"), "--smoke")
    assert code == 2 and "--smoke" in err


def test_without_ray_installed_one_line_and_exit_2(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now raises ImportError, as when it is not installed
    code, out, err = gd("cluster", "--address", "127.0.0.1:6379")
    assert code == 2 and out == ""
    assert err == "gpudoctor: error: gpudoctor cluster needs Ray: pip install 'gpudoctor[ray]' (or use --snapshot FILE per node)\n"


def test_max_concurrency_below_one_is_refused_before_ray_is_asked(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # refused before Ray would be imported
    for bad in ("0", "-3"):
        code, out, err = gd("cluster", "--address", "127.0.0.1:6379", "--max-concurrency", bad)
        assert (code, out, err) == (2, "", "gpudoctor: error: --max-concurrency must be at least 1\n")
    # The default is written in three places (--help stays light: it imports neither the probe nor the pipeline).
    from gpudoctor.commands import cluster as command
    from gpudoctor.commands.pipeline import Request
    from gpudoctor.probes import ray as ray_probe

    assert command.DEFAULT_CONCURRENCY == ray_probe.DEFAULT_CONCURRENCY == Request().max_concurrency == 32


def test_importing_gpudoctor_does_not_import_ray():
    code = "import sys, gpudoctor.cli, gpudoctor.cluster, gpudoctor.commands.cluster, gpudoctor.render.matrix; print('ray' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.stdout.strip() == "False", proc.stderr


def test_no_cluster_at_the_address_is_a_usage_error():
    pytest.importorskip("ray")
    with socket.socket() as probe:  # a loopback port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    code, out, err = gd("cluster", "--address", f"127.0.0.1:{port}", "--timeout", "5")
    assert code == 2 and out == ""
    assert err.startswith(f"gpudoctor: error: no Ray cluster answers at 127.0.0.1:{port} (--address)")
    code, out, err = gd("cluster", "--address", "not-an-address")
    assert code == 2 and "--address must be auto or HOST:PORT" in err
    code, out, err = gd("cluster", environ={"RAY_ADDRESS": f"127.0.0.1:{port}"})
    assert code == 2 and "(RAY_ADDRESS)" in err


def test_how_a_failed_node_task_is_classified():
    from gpudoctor.probes.ray import _failure

    class TaskUnschedulableError(Exception):  # the name is what Ray's exception class is called
        pass

    assert _failure(TaskUnschedulableError("The node specified via NodeAffinitySchedulingStrategy doesn't exist any more"),
                    "n1", {"n1"})[0] == "unreachable"
    status, detail = _failure(RuntimeError("Traceback …\nModuleNotFoundError: No module named 'gpudoctor'"), "n1", {"n1"})
    assert status == "error" and detail.startswith("gpudoctor is not installed in that node's Python")
    assert _failure(RuntimeError("worker crashed"), "n1", set())[0] == "unreachable"  # the node is gone now
    assert _failure(RuntimeError("boom\nValueError: bad"), "n1", {"n1"}) == ("error", "RuntimeError: ValueError: bad")
