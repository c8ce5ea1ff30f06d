"""A fleet judged from recorded snapshots: each node split and judged once, the grouped text view
naming the odd nodes in its first screen, secrets still masked in a fleet's JSON."""

from __future__ import annotations

import json

import pytest

from gpudoctor import cluster
from gpudoctor.render import fleet_json
from gpudoctor.snapshot import Snapshot
from fakes.fleet import RECORDED, gd, old_driver, old_torch, snapshot_args, stale_engine, write_fleet

def test_256_nodes_three_planted_differences_are_named_in_the_first_screen(tmp_path):
    paths = write_fleet(tmp_path, 256, {"node0017": old_driver, "node0044": old_torch, "node0101": stale_engine})
    code, out, _ = gd("check", *snapshot_args(paths))
    screen = "\n".join(out.splitlines()[:12])
    assert code == 1
    assert "driver" in screen and "580.159.04 on 255 nodes; 570.86.15 on node0017" in screen, screen
    assert "2.11.0+cu130 (CUDA 13.0) on 255 nodes; 2.9.0+cu128 (CUDA 13.0) on node0044" in screen, screen
    assert "serving processes" in screen and "0 on 255 nodes; 1 on node0101" in screen, screen
    assert "253 nodes: the most common stack, 0 findings" in out
    assert "1 node: driver 570.86.15, 2 findings  node0017" in out
    assert "GD601 stale-serving-process" in out and out.count("GD601 stale-serving-process") == 1
    assert len(out.splitlines()) < 120  # not one block per node
    # The JSON report names the same three nodes: the matrix rows' values with their nodes, the
    # stale engine's finding with its node.
    _, out, _ = gd("check", *snapshot_args(paths), "--format", "json")
    document = json.loads(out)
    rows = {row["label"]: row["groups"] for row in document["matrix"]["rows"]}
    assert {"value": "570.86.15", "nodes": ["node0017"]} in rows["driver"] and len(rows["driver"][0]["nodes"]) == 255
    assert ["node0044"] in [group["nodes"] for group in rows["torch"]]
    stale = [g["nodes"] for g in document["finding_groups"] if document["shared"]["findings"][g["finding"]]["id"] == "GD601"]
    assert stale == [["node0101"]]


def test_identical_nodes_form_one_group(tmp_path):
    paths = write_fleet(tmp_path, 20)
    _, out, _ = gd("check", *snapshot_args(paths))
    assert "20 nodes: identical, 0 findings" in out
    assert "Differences" not in out
    code, verbose, _ = gd("check", *snapshot_args(paths), "-v")
    assert "20 nodes: identical" in verbose and "not applicable" in verbose


def test_a_dozen_nodes_keep_the_matrix(tmp_path):
    paths = write_fleet(tmp_path, 3, {"node0001": old_driver})
    _, out, _ = gd("check", *snapshot_args(paths))
    header = next(line for line in out.splitlines() if "node0000" in line)
    assert "node0001" in header and "node0002" in header  # one column per node
    assert "identical" not in out


def test_a_fleet_json_keeps_secrets_masked(tmp_path):
    def secret(data):
        data["facts"]["env"]["value"]["HF_TOKEN"] = "hf_abcdefghijklmnopqrstuvwxyz0123"
        data["facts"]["env"]["value"]["NCCL_DEBUG"] = "INFO --api-key s3cr3tvalue"
        return data

    paths = write_fleet(tmp_path, 40, {"node0007": secret})
    _, out, _ = gd("check", *snapshot_args(paths), "--format", "json")
    assert "abcdefghijklmnop" not in out and "s3cr3tvalue" not in out
    document = json.loads(out)
    assert [n["name"] for n in document["nodes"]] == [f"node{i:04d}" for i in range(40)]
    masked = fleet_json.node_facts(document, "node0007")["env"]["value"]
    assert masked["HF_TOKEN"] == "***" and masked["NCCL_DEBUG"] == "INFO --api-key ***"
    assert dict(document["nodes"][7]["facts"])["env"] is not None  # its env differs from the others'


def test_nodes_are_split_once_per_facts_dict():
    members = [cluster.Member(f"n{i}", snapshot=Snapshot.load(str(RECORDED / "h200.json"))) for i in range(3)]
    merged = cluster.merge(members, "files")
    first = cluster.reachable(merged)
    again = cluster.reachable(Snapshot(merged.facts, merged.meta))  # a rule's view shares the dict
    assert [s for _, s in first] == [s for _, s in again] and first[1][1] is again[1][1]
    masked = Snapshot(dict(merged.facts), merged.meta)  # a masked view is a new dict: split afresh
    assert cluster.reachable(masked)[1][1] is not first[1][1]
    assert cluster.node_snapshot(merged, "n2").facts == members[2].snapshot.facts
    merged.facts["node.n2.extra"] = merged.facts["node.n2.host.arch"]  # a fact added: split afresh
    assert "extra" in cluster.node_snapshot(merged, "n2").facts


@pytest.mark.parametrize("count", [8, 64])
def test_cost_per_node_does_not_grow(tmp_path, count):
    import time

    paths = write_fleet(tmp_path, count)
    start = time.perf_counter()
    gd("check", *snapshot_args(paths))
    per_node = (time.perf_counter() - start) / count
    assert per_node < 0.05, per_node  # measured 4-7 ms a node on a loaded 2-core box (was 26 ms at 256)


def test_a_directory_or_a_glob_of_snapshots_is_a_fleet(tmp_path):
    write_fleet(tmp_path, 14, {"node0003": old_driver})
    (tmp_path / "notes.txt").write_text("not a snapshot")
    code, from_dir, _ = gd("check", "--snapshot", str(tmp_path))
    assert "14 nodes via files: 14 ok" in from_dir and "570.86.15 on node0003" in from_dir
    _, from_glob, _ = gd("check", "--snapshot", str(tmp_path / "node000*.json"), "--snapshot", str(tmp_path / "node0013.json"))
    assert "11 nodes via files: 11 ok" in from_glob and "570.86.15 on node0003" in from_glob
    _, cluster_cmd, _ = gd("cluster", "--snapshot", str(tmp_path))
    assert "14 nodes via files" in cluster_cmd


def test_expand_paths_keeps_what_matches_nothing(tmp_path):
    (tmp_path / "b.json").write_text("{}")
    (tmp_path / "a.json").write_text("{}")
    (tmp_path / "sub").mkdir()
    assert cluster.expand_paths([str(tmp_path)]) == [str(tmp_path / "a.json"), str(tmp_path / "b.json")]
    assert cluster.expand_paths([str(tmp_path / "*.json"), str(tmp_path / "a.json")]) == [str(tmp_path / "a.json"), str(tmp_path / "b.json")]
    assert cluster.expand_paths([str(tmp_path / "sub")]) == [str(tmp_path / "sub")]
    assert cluster.expand_paths([str(tmp_path / "none*.json")]) == [str(tmp_path / "none*.json")]


def test_one_snapshot_in_a_directory_is_the_single_node_path(tmp_path):
    write_fleet(tmp_path, 1)
    _, out, _ = gd("check", "--snapshot", str(tmp_path))
    assert "cluster of" not in out
