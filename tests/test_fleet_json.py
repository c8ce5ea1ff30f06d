"""A fleet's JSON report (schema 2, gpudoctor/render/fleet_json.py): every node kept, identical facts,
findings and outcomes stored once, so the document grows with the differences, not the nodes."""

from __future__ import annotations

import json

from gpudoctor import cluster, registry
from gpudoctor.commands.cluster import evaluate
from gpudoctor.redact import MASK, Redactor
from gpudoctor.render import fleet_json
from gpudoctor.snapshot import Snapshot
from fakes.fleet import RECORDED, gd, old_driver, snapshot_args, stale_engine, write_fleet


def _document(paths, *extra):
    code, out, _ = gd("check", *snapshot_args(paths), "--format", "json", *extra)
    return code, json.loads(out), out


def _outcomes(document, name):
    node = next(n for n in document["nodes"] if n["name"] == name)
    shared = document["shared"]
    return [shared["outcomes"][i] for i in shared["outcome_lists"][node["outcomes"]]]


def test_every_node_is_kept_and_rebuilt_exactly(tmp_path):
    def lacks_torch(data):
        del data["facts"]["torch.version"]
        return data

    paths = write_fleet(tmp_path, 12, {"node0003": old_driver, "node0005": lacks_torch, "node0009": stale_engine})
    code, document, _ = _document(paths)
    assert document["schema_version"] == 2 and document["kind"] == "gpudoctor.cluster" and code == 1
    assert [n["name"] for n in document["nodes"]] == [f"node{i:04d}" for i in range(12)]
    snapshot = cluster.from_files(paths)
    result = evaluate(snapshot, registry.load_rules())
    for name, snap in cluster.reachable(snapshot):
        assert fleet_json.node_facts(document, name) == {p: f.to_json() for p, f in sorted(snap.facts.items())}, name
        assert _outcomes(document, name) == json.loads(json.dumps([o.to_json() for o in result.per_node[name].outcomes])), name
    nodes = {n["name"]: n for n in document["nodes"]}
    assert [path for path, _ in nodes["node0000"]["facts"]] == ["host.hostname"]  # only what differs is written per node
    assert dict(nodes["node0003"]["facts"])["driver.version"] is not None and dict(nodes["node0005"]["facts"])["torch.version"] is None
    assert len({n["outcomes"] for n in document["nodes"]}) < 12  # nodes of one stack share their outcome list
    groups = {document["shared"]["findings"][g["finding"]]["id"]: g["nodes"] for g in document["finding_groups"]}
    assert groups["GD601"] == ["node0009"]  # the stale engine, named with its node
    driver = next(r for r in document["matrix"]["rows"] if r["label"] == "driver")
    assert driver["differs"] and driver["groups"][0]["nodes"][:3] == ["node0000", "node0001", "node0002"]
    assert {"value": "570.86.15", "nodes": ["node0003"]} in driver["groups"]
    assert [f["id"] for f in document["across_nodes"]["findings"]] and document["across_nodes"]["outcomes"]
    assert document["cluster_facts"]["cluster.source"]["value"] == "files"
    assert not any(path.startswith("node.") for path in document["cluster_facts"])


def test_the_document_grows_with_differences_not_nodes(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    _, _, small = _document(write_fleet(tmp_path / "a", 10))
    _, _, large = _document(write_fleet(tmp_path / "b", 40))
    per_node = (len(large) - len(small)) / 30
    one_node = len((RECORDED / "h200-full.json").read_text())
    # ~1 KB a node (its entry, host name and one outcome-list index) against the ~50 KB of its facts
    # that schema 1 repeated (1,000 nodes: 1.0 MB written instead of ~60 MB).
    assert per_node < 1500 and per_node < one_node / 30, per_node


def test_an_unreachable_node_has_no_facts_and_the_rest_are_judged(tmp_path):
    paths = write_fleet(tmp_path, 3)
    broken = tmp_path / "broken.json"
    broken.write_text("{", encoding="utf-8")
    _, document, _ = _document(paths + [str(broken)])
    node = next(n for n in document["nodes"] if n["name"] == "broken")
    assert node["status"] == "error" and "facts" not in node and "outcomes" not in node
    assert fleet_json.node_facts(document, "broken") == {}
    assert [f["subject"] for f in document["across_nodes"]["findings"] if f["id"] == "GD901"] == ["broken"]


def test_a_secret_named_fact_is_masked_in_the_shared_table(tmp_path):
    def secret_fact(data):
        data["facts"]["launch.api_key"] = {"status": "ok", "value": "plainword", "source": "argv"}
        return data

    paths = write_fleet(tmp_path, 4, {"node0002": secret_fact})
    _, document, out = _document(paths)
    assert "plainword" not in out  # nothing a pattern knows: masked by the fact's name
    assert fleet_json.node_facts(document, "node0002")["launch.api_key"]["value"] == MASK
    redactor = Redactor()
    assert redactor.secret_path("env.HF_TOKEN") and not redactor.secret_path("torch.version")
    assert redactor.fact({"status": "ok", "value": {"x": "Bearer abcdefghijklmnop0123"}}) == {"status": "ok", "value": {"x": "Bearer ***"}}
    assert not Redactor(secrets=False).secret_path("env.HF_TOKEN")


def test_identical_facts_are_held_once_across_node_files(tmp_path):
    paths = write_fleet(tmp_path, 3, {"node0001": old_driver})
    merged = cluster.from_files(paths)
    nodes = dict(cluster.reachable(merged))
    first, second, third = nodes["node0000"], nodes["node0001"], nodes["node0002"]
    assert first.facts["packages.dists"] is third.facts["packages.dists"]  # one object, not three copies
    assert first.facts["driver.version"] is not second.facts["driver.version"]  # a different value stays its own
    assert first.facts["host.hostname"] != third.facts["host.hostname"]
    assert Snapshot.load(paths[1]).facts == second.facts


def test_a_cluster_report_in_json_is_schema_2(tmp_path):
    paths = write_fleet(tmp_path, 3)
    saved = tmp_path / "cluster-saved.json"
    gd("cluster", *snapshot_args(paths), "--save", str(saved))
    code, out, _ = gd("report", "--snapshot", str(saved), "--format", "json")
    document = json.loads(out)
    assert document["schema_version"] == 2 and [n["name"] for n in document["nodes"]] == ["node0000", "node0001", "node0002"]
    assert fleet_json.node_facts(document, "node0001")["host.hostname"]["value"] == "node0001"


def test_unmet_requirements_are_kept_per_facts_and_never_stale():
    from gpudoctor_rules.python_stack import unmet_requirements

    snap = Snapshot.load(str(RECORDED / "h200-full.json"))
    first = unmet_requirements(snap)
    again = unmet_requirements(Snapshot(dict(snap.facts), {}))  # another node holding the same fact objects
    assert again == first and again is not first
    dists = snap.facts["packages.dists"].value
    torch = dists["torch"]
    dists["torch"] = dict(torch, version="1.0.0")  # the same fact object changed in place: computed afresh
    changed = unmet_requirements(snap)
    assert changed != first and any(item["name"] == "torch" and item["installed"] == "1.0.0"
                                    for items in changed.values() for item in items), changed
