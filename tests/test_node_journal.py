"""probes/node.py: when /dev/kmsg refuses (kernel.dmesg_restrict=1 without CAP_SYSLOG), the Xid
lines come from ``journalctl -k``: the real journalctl of this machine (no journal here), and a
stand-in printing journalctl's short-monotonic format with a real Xid line (a public report)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from gpudoctor.probes import Context, node

XID_79 = "NVRM: Xid (PCI:0000:00:07): 79, pid=0, GPU has fallen off the bus."  # gist ZackMattor/34b6e600… (bus changed)


@pytest.fixture
def kmsg_refused(monkeypatch):
    real_open = os.open

    def refuse(path, *args, **kwargs):
        if str(path).endswith("/dev/kmsg"):
            raise PermissionError(1, "Operation not permitted")
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(node.os, "open", refuse)


def stand_in(tmp_path: Path, stdout: str, stderr: str = "", code: int = 0) -> str:
    script = tmp_path / "bin" / "journalctl"
    script.parent.mkdir()
    (tmp_path / "out.txt").write_text(stdout)
    (tmp_path / "err.txt").write_text(stderr)
    script.write_text(f"#!/bin/sh\n/bin/cat {tmp_path / 'out.txt'}\n/bin/cat {tmp_path / 'err.txt'} >&2\nexit {code}\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script.parent)


def test_xids_from_the_journal_when_kmsg_refuses(kmsg_refused, tmp_path):
    path = stand_in(tmp_path, f"[ 8361.442211] gpu-host-7 kernel: {XID_79}\n")
    fact = node.kernel_xids(Context(root="/", environ={"PATH": path}))
    assert fact.ok and fact.source == "journalctl -k -b"
    assert fact.value == [{"pci": "0000:00:07", "code": 79, "text": "pid=0, GPU has fallen off the bus.", "seconds": 8361.442}]
    assert "permission denied" in fact.detail and "journal" in fact.detail


def test_a_journal_the_user_may_not_read_is_no_permission(kmsg_refused, tmp_path):
    path = stand_in(tmp_path, "", "No journal files were opened due to insufficient permissions.\n", 1)
    fact = node.kernel_xids(Context(root="/", environ={"PATH": path}))
    assert fact.status == "no_permission" and "systemd-journal or adm group" in fact.detail


def test_without_journalctl_the_refusal_stands(kmsg_refused, tmp_path):
    fact = node.kernel_xids(Context(root="/", environ={"PATH": str(tmp_path)}))
    assert fact.status == "no_permission" and "sudo dmesg" in fact.detail


@pytest.mark.skipif(not any(os.access(os.path.join(d, "journalctl"), os.X_OK) for d in os.environ.get("PATH", "").split(os.pathsep)),
                    reason="no journalctl on this machine")
def test_the_real_journalctl_with_no_xid_lines(kmsg_refused):
    fact = node.kernel_xids(Context(root="/", environ={"PATH": os.environ["PATH"]}))
    assert fact.ok and fact.value == []  # --grep matched nothing: exit 1 with an empty stderr is "no entries", not an error
