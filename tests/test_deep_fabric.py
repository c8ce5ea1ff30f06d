"""probes/deep_fabric.py: the child's output recorded on a lent 2xH200, parsed; the child itself run
against a torch that hangs or fails, to show it answers before its deadline and leaves nothing behind."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from gpudoctor import runner
from gpudoctor.probes import Context, deep_fabric
from gpudoctor.snapshot import Snapshot

RECORDED = Path(__file__).resolve().parent / "fixtures" / "deep_fabric"
SNAPSHOT = Path(__file__).resolve().parent / "fixtures" / "snapshots" / "h200x2-deep.json"


def parsed(name: str, world: int = 2):
    out = (RECORDED / f"raw-{name}.jsonl").read_text(encoding="utf-8")
    snap = Snapshot.from_json(json.loads(SNAPSHOT.read_text(encoding="utf-8")))
    return deep_fabric.parse(runner.Completed("ok", 0, out, ""), snap, world, "the 2 visible GPU(s)")


def test_healthy_nvlink_pair_as_recorded():
    facts = parsed("healthy")
    p2p = facts["gpu.p2p_check"].value
    assert p2p["gpus"] == [0, 1]  # torch's devices matched to NVML's by PCI bus id (0000:00:06.0, 0000:00:07.0)
    assert p2p["pairs"] == {"0->1": {"peer_access": True, "verified": True, "wrong_words": 0, "gbps": 304.2},
                            "1->0": {"peer_access": True, "verified": True, "wrong_words": 0, "gbps": 304.4}}
    nccl = facts["nccl.allreduce_check"].value
    assert (nccl["outcome"], nccl["transports"], nccl["busbw_gbps"], nccl["nccl_version"]) == ("ok", ["P2P/CUMEM"], 268.53, "2.28.9")


def test_p2p_disabled_goes_through_host_memory_ten_times_slower():
    nccl = parsed("p2p-disable")["nccl.allreduce_check"].value
    assert (nccl["outcome"], nccl["transports"], nccl["busbw_gbps"]) == ("ok", ["SHM/direct/direct"], 26.21)
    assert nccl["init_s"] == 0.529


def test_missing_interface_is_nccls_own_error():
    nccl = parsed("ifname-missing")["nccl.allreduce_check"].value
    assert nccl["outcome"] == "error"
    assert "ncclInvalidUsage" in nccl["error"]  # the rank's line was cut at 300 characters by the first child: still read
    assert nccl["nccl_warning"].endswith("NCCL WARN Bootstrap : no socket interface found")


def test_a_failing_rank_stopped_the_other_within_seconds_on_the_2xh200():
    out = (RECORDED / "raw-ifname-missing-early-stop.jsonl").read_text(encoding="utf-8")
    summary = json.loads(out.splitlines()[-1])
    assert summary["late_ranks"] == [1] and summary["seconds"] < 5  # 40 s (the deadline) before the early stop
    nccl = parsed("ifname-missing-early-stop")["nccl.allreduce_check"].value
    assert nccl["outcome"] == "error" and nccl["error"].startswith("rank 0: DistBackendError")
    assert nccl["error"].endswith("Bootstrap : no socket interface found")  # whole: the rank's line is no longer cut


def test_one_gpu_runs_a_one_rank_all_reduce():
    facts = parsed("one-gpu", world=1)
    assert facts["gpu.p2p_check"].status == "not_supported" and "1 GPU" in facts["gpu.p2p_check"].detail
    nccl = facts["nccl.allreduce_check"].value
    assert (nccl["outcome"], nccl["world"], nccl["transports"], nccl["gpus"]) == ("ok", 1, [], [0])


def test_nothing_printed_is_an_error_fact_not_a_crash():
    snap = Snapshot.from_json(json.loads(SNAPSHOT.read_text(encoding="utf-8")))
    facts = deep_fabric.parse(runner.Completed("error", 1, "", "Traceback …\nSyntaxError: bad"), snap, 2, "g")
    assert facts["gpu.p2p_check"].status == "error" and "SyntaxError" in facts["gpu.p2p_check"].detail
    facts = deep_fabric.parse(runner.Completed("timeout", None, "", "", "killed after 9 s"), snap, 2, "g")
    assert facts["nccl.allreduce_check"].status == "timeout"


def fake_torch(tmp_path: Path, body: str) -> str:
    package = tmp_path / "site" / "torch"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(body, encoding="utf-8")
    return str(tmp_path / "site")


def run_child(tmp_path: Path, site: str, seconds: float, world: int = 2):
    config = {"world": world, "seconds": seconds, "nccl": True, "numel": 16, "iters": 1, "p2p_numel": 16}
    env = dict(os.environ, TMPDIR=str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    began = time.monotonic()
    done = runner.run([sys.executable, "-I", "-c", deep_fabric.PROGRAM, json.dumps(config), deep_fabric.RANK_PROGRAM, site],
                      timeout=seconds + 10, env=env)
    return done, time.monotonic() - began


def alive_with(marker: str):
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(pid)
        except OSError:
            pass
    return found


def test_hanging_ranks_are_killed_at_the_childs_own_deadline(tmp_path):
    site = fake_torch(tmp_path, "import time\ntime.sleep(3600)\n")  # import torch never returns
    done, took = run_child(tmp_path, site, 2.0)
    assert done.status == "ok" and took < 8
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    summary = lines[-1]
    assert summary["late_ranks"] == [0, 1] and summary["p2p_done"] is False
    assert alive_with(site) == []  # the ranks (their argv names the site) are gone
    assert os.listdir(tmp_path / "tmp") == []  # the rendezvous directory too
    snap = Snapshot.from_json(json.loads(SNAPSHOT.read_text(encoding="utf-8")))
    facts = deep_fabric.parse(done, snap, 2, "g")
    assert facts["nccl.allreduce_check"].status == "error"  # torch never answered: nothing to judge
    assert "torch did not answer" in facts["nccl.allreduce_check"].detail


def test_a_failing_rank_stops_the_others_instead_of_leaving_them_in_the_rendezvous(tmp_path):
    # Rank 0 fails at once; rank 1 would wait for it for ever (as rank 1 did on the 2xH200 with
    # NCCL_SOCKET_IFNAME=nosuch0, until the 40 s deadline).
    site = fake_torch(tmp_path, "import os, sys, time\n"  # a rank's argv: -c, config, RANK, PYTHONPATH
                                "if sys.argv[2:3] == ['0']:\n    raise ImportError('libnccl.so.2: cannot open shared object file')\n"
                                "if sys.argv[2:3] == ['1']:\n    time.sleep(3600)\n"
                                "raise ImportError('no CUDA here')\n")
    done, took = run_child(tmp_path, site, 30.0)
    assert took < 10
    facts = deep_fabric.parse(done, Snapshot.from_json(json.loads(SNAPSHOT.read_text(encoding="utf-8"))), 2, "g")
    assert facts["nccl.allreduce_check"].status == "error" and "no CUDA here" in facts["nccl.allreduce_check"].detail
    assert alive_with(site) == []


@pytest.mark.parametrize("live", [False])
def test_not_this_machine_runs_nothing(live):
    snap = Snapshot.from_json(json.loads(SNAPSHOT.read_text(encoding="utf-8")))
    ctx = Context(root="/nonexistent")
    facts = deep_fabric.load(snap, ctx)
    assert facts["gpu.p2p_check"].status == "not_supported" and "--root" in facts["gpu.p2p_check"].detail


def test_planned_group_is_the_launchs_tp_times_pp():
    snap = Snapshot.from_json(json.loads(SNAPSHOT.read_text(encoding="utf-8")))
    assert deep_fabric.planned_world(snap) == (2, "the 2 visible GPU(s)")
    snap.facts["launch.args"] = snap.facts["gpu.count"].__class__({"--tensor-parallel-size": 2}, "ok", "argv")
    assert deep_fabric.planned_world(snap)[0] == 2


def test_preflight_deep_tests_the_commands_group_with_its_assignments(monkeypatch, tmp_path):
    """The launch's facts are laid over the machine before the --deep children run: TP 2 of 4 GPUs,
    and the command's NCCL_P2P_DISABLE=1 in the child's environment, as in the server's."""
    import io

    from gpudoctor import cli

    seen = {}

    def start(snapshot, ctx):
        seen["world"], seen["env"] = deep_fabric.planned_world(snapshot), ctx.environ.get("NCCL_P2P_DISABLE")

    monkeypatch.setattr(deep_fabric, "start", start)
    monkeypatch.setattr(deep_fabric, "load", lambda snapshot, ctx, started=None: {})
    out = io.StringIO()
    cli.main(["preflight", "--deep", "--root", str(tmp_path), "--gpu", "4xH200", "--", "NCCL_P2P_DISABLE=1", "vllm", "serve", "m", "-tp", "2"],
             environ={"PATH": os.environ.get("PATH", "")}, stdout=out, stderr=io.StringIO())
    assert seen == {"world": (2, "the launch's 2 GPU(s) (tensor × pipeline parallel)"), "env": "1"}
