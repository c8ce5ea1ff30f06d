"""The node around the GPUs: the kernel log's Xid events, network interfaces, RDMA ports.

Facts:
  node.xid          Xid events in the kernel ring buffer since boot: [{"code", "pci", "text",
                    "seconds"}] (seconds since boot), read from /dev/kmsg without blocking and
                    bounded (records, bytes, time); no_permission with the reason where the
                    kernel refuses (kernel.dmesg_restrict=1 without CAP_SYSLOG, a sandbox) and
                    ``journalctl -k`` cannot read them either (it can for the systemd-journal
                    and adm groups)
  net.interfaces    {name: operstate} from /sys/class/net (what NCCL_SOCKET_IFNAME must name)
  rdma.devices      {device: {port: {"state", "link_layer", "rate"}}} from /sys/class/infiniband
                    ({} with a detail where there is none)

NCCL's own settings are in the ``env`` fact (probes.host records NCCL_* with secrets dropped).
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import stat
import time
from typing import Any, Dict, List, Optional

from gpudoctor.knowledge import xid
from gpudoctor.snapshot import ABSENT, ERROR, NO_PERMISSION, TIMEOUT, Fact, missing, ok

KMSG = "/dev/kmsg"
MAX_RECORDS = 50_000  # the ring buffer holds a few thousand records on a typical host
MAX_BYTES = 8 << 20
TIME_BUDGET = 0.15  # seconds: the ring buffer reads in ~10 ms; never more than this
MAX_EVENTS = 200  # kept Xid events (the last ones)
JOURNAL_TIMEOUT = 2.0  # journalctl --grep over one boot's kernel messages: well under a second
JOURNAL_BYTES = 1 << 20
_MONOTONIC = re.compile(r"^\[\s*(\d+\.\d+)\]")  # short-monotonic: "[  123.456789] host kernel: …"


def collect(ctx) -> Dict[str, Fact]:
    return {"node.xid": kernel_xids(ctx), "net.interfaces": interfaces(ctx), "rdma.devices": rdma(ctx)}


def kernel_xids(ctx) -> Fact:
    path = ctx.path(KMSG)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except PermissionError:
        restrict = (ctx.read_text("/proc/sys/kernel/dmesg_restrict") or "?").strip()
        refused = f"{KMSG}: permission denied (kernel.dmesg_restrict={restrict})"
        return journal_xids(ctx, refused) or missing(NO_PERMISSION, f"{refused}; run as root or `sudo dmesg | grep Xid`", KMSG)
    except FileNotFoundError:
        return missing(ABSENT, f"no {KMSG} here (a sandbox or container without the kernel log)", KMSG)
    except OSError as exc:
        return missing(ERROR, f"{KMSG}: {exc.strerror}", KMSG)
    try:
        if stat.S_ISCHR(os.fstat(fd).st_mode):
            lines, note = _records(fd)
        else:  # a recorded kernel log under --root (tests): one record a line
            lines, note = os.read(fd, MAX_BYTES).decode("utf-8", "replace").splitlines(), ""
    except OSError as exc:
        status = NO_PERMISSION if exc.errno in (errno.EPERM, errno.EACCES) else ERROR
        return missing(status, f"{KMSG}: {exc.strerror}", KMSG)
    finally:
        os.close(fd)
    events: List[Dict[str, Any]] = []
    for line in lines:
        if "NVRM: Xid" not in line:
            continue
        event = xid.parse_line(line)
        if event is None:
            continue
        event["seconds"] = _seconds(line)
        events.append(event)
    detail = f"{len(lines)} kernel-log records read{note}"
    return ok(events[-MAX_EVENTS:], KMSG, detail)


def journal_xids(ctx, refused: str) -> Optional[Fact]:
    """The kernel log through the journal when /dev/kmsg refuses: members of the systemd-journal or
    adm groups may read ``journalctl -k`` where dmesg_restrict=1 keeps them out of the ring buffer.
    None when there is no journalctl (or no live machine) to ask."""
    exe = shutil.which("journalctl", path=ctx.environ.get("PATH")) if ctx.live else None
    if not exe:
        return None
    from gpudoctor import runner

    argv = [exe, "-k", "-b", "-o", "short-monotonic", "--no-pager", "-q"]
    done = runner.run(argv + ["--grep", "NVRM: Xid"], timeout=JOURNAL_TIMEOUT, env=ctx.environ,
                      deadline=getattr(ctx, "deadline", None), max_output=JOURNAL_BYTES)
    if "pattern matching" in done.stderr:  # a journalctl built without PCRE2: read the boot's kernel lines
        done = runner.run(argv, timeout=JOURNAL_TIMEOUT, env=ctx.environ, deadline=getattr(ctx, "deadline", None),
                          max_output=JOURNAL_BYTES)
    source = "journalctl -k -b"
    if done.status == "timeout":
        return missing(TIMEOUT, f"{refused}; journalctl -k did not answer: {done.detail}", source)
    said = (done.stderr or "").strip().splitlines()
    if any("insufficient permissions" in line or "No journal files were opened" in line for line in said):
        return missing(NO_PERMISSION, f"{refused}; journalctl -k: {said[0][:160]} (the systemd-journal or adm group "
                       "can read it); run as root or `sudo dmesg | grep Xid`", source)
    # exit 1 with nothing on stderr: --grep matched no line (journalctl's way of saying "no entries")
    if done.status != "ok" and not (done.returncode == 1 and not said):
        return missing(ERROR, f"{refused}; journalctl -k: {(said or [done.detail])[0][:200]}", source)
    events: List[Dict[str, Any]] = []
    lines = done.stdout.splitlines()
    for line in lines:
        event = xid.parse_line(line) if "NVRM: Xid" in line else None
        if event is not None:
            match = _MONOTONIC.match(line)
            event["seconds"] = round(float(match.group(1)), 3) if match else None
            events.append(event)
    return ok(events[-MAX_EVENTS:], source, f"{refused}: read the journal's kernel messages of this boot instead "
                                            f"({len(lines)} line(s) with an Xid pattern)")


def _records(fd: int):
    """/dev/kmsg gives one record per read(); EAGAIN: the end; EPIPE: a record was overwritten."""
    lines: List[str] = []
    size = 0
    until = time.monotonic() + TIME_BUDGET
    note = ""
    while len(lines) < MAX_RECORDS and size < MAX_BYTES:
        if time.monotonic() > until:
            note = f" (stopped after {TIME_BUDGET:g} s)"
            break
        try:
            record = os.read(fd, 8192)
        except BlockingIOError:
            break
        except OSError as exc:
            if exc.errno == errno.EPIPE:
                continue
            raise
        if not record:
            break
        size += len(record)
        lines.append(record.decode("utf-8", "replace").split("\n", 1)[0])
    return lines, note


def _seconds(record: str) -> Any:
    """The timestamp field of a /dev/kmsg record ("6,1234,5678901,-;text": microseconds since boot)."""
    head = record.split(";", 1)[0].split(",")
    try:
        return round(int(head[2]) / 1e6, 3)
    except (IndexError, ValueError):
        return None


def interfaces(ctx) -> Fact:
    base = ctx.path("/sys/class/net")
    try:
        names = sorted(os.listdir(base))
    except OSError as exc:
        return missing(ABSENT if exc.errno == errno.ENOENT else ERROR, f"/sys/class/net: {exc.strerror}", "/sys/class/net")
    return ok({name: (ctx.read_text("/sys/class/net", name, "operstate", limit=64) or "").strip() or None
               for name in names[:256]}, "/sys/class/net")


def rdma(ctx) -> Fact:
    base = ctx.path("/sys/class/infiniband")
    try:
        devices = sorted(os.listdir(base))
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            return ok({}, "/sys/class/infiniband", "no /sys/class/infiniband: no RDMA device")
        return missing(ERROR, f"/sys/class/infiniband: {exc.strerror}", "/sys/class/infiniband")
    out: Dict[str, Dict[str, Dict[str, Any]]] = {}
    for device in devices[:64]:
        ports: Dict[str, Dict[str, Any]] = {}
        try:
            port_names = sorted(os.listdir(os.path.join(base, device, "ports")))
        except OSError:
            port_names = []
        for port in port_names[:16]:
            def read(name: str) -> Any:
                text = ctx.read_text("/sys/class/infiniband", device, "ports", port, name, limit=128)
                return text.strip() if text else None

            ports[port] = {"state": read("state"), "link_layer": read("link_layer"), "rate": read("rate")}
        out[device] = ports
    return ok(out, "/sys/class/infiniband")

