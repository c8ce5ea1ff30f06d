"""probes.node (kernel-log Xid, interfaces, RDMA) and probes.fabric (the fabric state, read in a child)."""

from __future__ import annotations

import errno
import os
import signal
import sys
import time
from pathlib import Path

import pytest

import fake_nvml
from gpudoctor import runner
from gpudoctor.knowledge import xid
from gpudoctor.probes import Context, fabric, node, nvml

GROUND = Path(__file__).resolve().parent / "fixtures" / "ground_truth" / "h200" / "fabric"


def rooted(tmp_path: Path, files: dict) -> Context:
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return Context(root=str(tmp_path), environ={})


# --- the kernel log -------------------------------------------------------------------------------
def test_the_h200_kernel_log_has_no_xid(tmp_path):
    """ground_truth/h200/fabric/kmsg.txt: the real /dev/kmsg records of a healthy H200."""
    records = GROUND.joinpath("kmsg.txt").read_text(encoding="utf-8").splitlines()[1:]
    fact = node.kernel_xids(rooted(tmp_path, {"dev/kmsg": "\n".join(records)}))
    assert fact.ok and fact.value == [] and f"{len(records)} kernel-log records" in fact.detail


def test_xid_lines_from_public_reports_are_parsed():
    # gist ZackMattor/34b6e600e6dc6a1a2b5cb3fc91a0d438; NVIDIA/open-gpu-kernel-modules#1151; stas00/ml-engineering
    assert xid.parse_line("kernel: NVRM: Xid (PCI:0000:10:00): 79, pid=0, GPU has fallen off the bus.") == \
        {"pci": "0000:10:00", "code": 79, "text": "pid=0, GPU has fallen off the bus."}
    assert xid.parse_line("NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off the bus.")["code"] == 79
    assert xid.parse_line("NVRM: Xid (PCI:0000:10:1c): 63, pid=1896, Row Remapper: New row marked for remapping")["code"] == 63
    assert xid.parse_line("NVRM: GPU at PCI:0000:2b:00: GPU-0b11d014") is None
    assert xid.describe(79)[1] == xid.RESTART_BM and xid.describe(999)[1] == ""


def test_xid_records_keep_their_boot_time(tmp_path):
    text = "6,1,0,-;Linux version\n3,900,61234567,-;NVRM: Xid (PCI:0000:00:06): 48, pid=12, DBE (0x1) has been detected\n"
    fact = node.kernel_xids(rooted(tmp_path, {"dev/kmsg": text}))
    assert fact.value == [{"pci": "0000:00:06", "code": 48, "text": "pid=12, DBE (0x1) has been detected", "seconds": 61.235}]


def test_no_kernel_log_and_a_refused_one(tmp_path, monkeypatch):
    assert node.kernel_xids(Context(root=str(tmp_path), environ={})).status == "absent"
    ctx = rooted(tmp_path, {"dev/kmsg": "", "proc/sys/kernel/dmesg_restrict": "1\n"})
    real_open = os.open

    def refuse(path, flags, *args):
        if str(path).endswith("/dev/kmsg"):
            raise PermissionError(errno.EPERM, "Operation not permitted")
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", refuse)
    fact = node.kernel_xids(ctx)
    assert fact.status == "no_permission" and "dmesg_restrict=1" in fact.detail


@pytest.mark.skipif(not os.access("/dev/kmsg", os.R_OK), reason="this machine's kernel log is not readable")
def test_the_live_kernel_log_reads_without_blocking_and_fast():
    start = time.monotonic()
    fact = node.kernel_xids(Context())
    assert fact.ok, fact.detail
    assert time.monotonic() - start < node.TIME_BUDGET + 0.1  # never waits for new records


def test_interfaces_and_rdma_ports(tmp_path):
    ctx = rooted(tmp_path, {"sys/class/net/eth0/operstate": "up\n", "sys/class/net/lo/operstate": "unknown\n",
                            "sys/class/infiniband/mlx5_0/ports/1/state": "4: ACTIVE\n",
                            "sys/class/infiniband/mlx5_0/ports/1/link_layer": "InfiniBand\n",
                            "sys/class/infiniband/mlx5_0/ports/1/rate": "400 Gb/sec (4X NDR)\n"})
    assert node.interfaces(ctx).value == {"eth0": "up", "lo": "unknown"}
    assert node.rdma(ctx).value == {"mlx5_0": {"1": {"state": "4: ACTIVE", "link_layer": "InfiniBand", "rate": "400 Gb/sec (4X NDR)"}}}
    empty = Context(root=str(tmp_path / "none"), environ={})
    assert node.rdma(empty).ok and node.rdma(empty).value == {}  # the H200: no /sys/class/infiniband
    assert node.interfaces(empty).status == "absent"


# --- the fabric -------------------------------------------------------------------------------------
def test_the_fabric_child_runs_only_where_a_fabric_can_be(fake_nvml_module):
    fake_nvml_module(fake_nvml.h200())
    assert "1 GPU" in fabric.needed(nvml.collect())
    fake_nvml_module(fake_nvml.h200x2())
    assert fabric.needed(nvml.collect()) is None  # two GPUs with NVLink (NV18)
    tape = fake_nvml.h200x2()
    for gpu in tape["gpus"]:
        del gpu["nvlink_active"]
    fake_nvml_module(tape)
    assert "no NVLink" in fabric.needed(nvml.collect())


def test_a_reader_killed_by_sigsegv_costs_only_the_fact():
    """What the H200 did to pynvml's process (ground_truth/h200/fabric): here a real child that segfaults."""
    done = runner.run([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"], timeout=20)
    facts = fabric.parse(done)
    assert facts["fabric.reason"].status == "error"
    assert f"signal {int(signal.SIGSEGV)}" in facts["fabric.reason"].detail


def test_the_real_child_without_a_driver_says_why(tmp_path):
    """This machine has no libnvidia-ml: the real child fails, the probe says so (never raises)."""
    facts = {"gpu.count": nvml.ok(2, "nvml"), "gpu.0.nvlink_links": nvml.ok([], "nvml")}
    out = fabric.collect(Context(timeout=20), facts)
    reason = out.get("fabric.reason")
    if reason is not None:  # no GPU here
        assert reason.status in ("error", "timeout") and reason.detail
    assert out["fabric.manager"].ok


def test_the_child_answer_becomes_facts():
    done = runner.Completed("ok", 0, '{"0": {"state": "in_progress", "status": 0, "status_name": "Success", "clique": 0},'
                                     ' "1": {"error": "NotSupported"}}')
    facts = fabric.parse(done)
    assert facts["gpu.0.fabric"].value["state"] == "in_progress"
    assert facts["gpu.1.fabric"].status == "not_supported"
    assert fabric.parse(runner.Completed("ok", 1, "Traceback …", "NVMLError_LibraryNotFound"))["fabric.reason"].status == "error"
    assert fabric.parse(runner.Completed("timeout", None, "", "", "no answer in 3 s"))["fabric.reason"].status == "timeout"
