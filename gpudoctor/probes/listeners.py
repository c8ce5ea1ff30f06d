"""Who listens on the serving port: ``/proc/net/tcp*`` (or the kernel's sock_diag netlink answer)
joined to the processes that hold each socket; and the same scan for the smoke check (who holds a
port, which processes serve). Part of the processes probe (probes/processes.py writes
``processes.port`` from it).
"""

from __future__ import annotations

import os
import re
from typing import Any, Dict, Iterable, List, Optional, Set, Tuple

from gpudoctor.probes.procfs import COMM_LEN, SOURCE, read_argv, read_stat
from gpudoctor.snapshot import ABSENT, Fact, missing, ok


def parse_net_tcp(text: str, port: Optional[int], family: int) -> List[Dict[str, Any]]:
    """LISTEN sockets on ``port`` from /proc/net/tcp or tcp6 text (garbage lines are skipped).
    ``port`` None: on every port, each entry with its ``port``."""
    out = []
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 10 or fields[3] != "0A":  # 0A = TCP_LISTEN
            continue
        try:
            address, _, port_hex = fields[1].partition(":")
            number = int(port_hex, 16)
            if port is not None and number != port:
                continue
            item = {"address": _ip(address, family), "family": family, "uid": int(fields[7]),
                    "inode": int(fields[9]), "pids": []}
            if port is None:
                item["port"] = number
            out.append(item)
        except ValueError:
            continue
    return out


def _socket_module() -> Any:
    """The C socket module: the netlink request needs only it. ``import socket`` adds its enum
    classes and selectors on top, 14 ms of every check's start on a 2-core machine."""
    try:
        import _socket

        return _socket
    except ImportError:  # a Python without it (none known): the public module has the same names
        import socket

        return socket


def _ip(hexaddr: str, family: int) -> str:
    """Kernel hex (host-order 32-bit words) to text."""
    import struct

    socket = _socket_module()

    try:
        words = [int(hexaddr[i : i + 8], 16) for i in range(0, len(hexaddr), 8)]
        packed = b"".join(struct.pack("=I", word) for word in words)
        return socket.inet_ntop(socket.AF_INET if family == 4 else socket.AF_INET6, packed)
    except (ValueError, OSError, struct.error):
        return hexaddr


def socket_owners(proc: str, inodes: Set[int], candidates: Iterable[int]) -> Dict[int, List[int]]:
    """inode -> PIDs holding it, looking only at ``candidates``' file descriptors."""
    wanted = {f"socket:[{inode}]": inode for inode in inodes}
    owners: Dict[int, List[int]] = {}
    for pid in candidates:
        fd_dir = f"{proc}/{pid}/fd"
        try:
            names = os.listdir(fd_dir)
        except OSError:
            continue
        for name in names:
            try:
                target = os.readlink(f"{fd_dir}/{name}")
            except OSError:
                continue
            inode = wanted.get(target)
            if inode is not None:
                owners.setdefault(inode, [])
                if pid not in owners[inode]:
                    owners[inode].append(pid)
    return owners


def listeners_netlink(port: Optional[int]) -> List[Dict[str, Any]]:
    """LISTEN sockets on ``port`` (None: every port, each entry with its ``port``) through
    NETLINK_SOCK_DIAG (what ``ss -lt`` uses).

    Asking for the LISTEN state only, the kernel walks just its listening hash: 0.2 ms,
    where reading /proc/net/tcp + tcp6 walks the whole established-connections table
    (262,144 buckets on a 24 GB box: 9 ms, more on big hosts). Raises OSError where netlink
    is not available (some sandboxes); the caller then reads /proc/net/tcp.
    """
    import struct

    socket = _socket_module()
    out: List[Dict[str, Any]] = []
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 4)  # NETLINK_SOCK_DIAG
    try:
        sock.settimeout(1.0)
        for family, version in ((socket.AF_INET, 4), (socket.AF_INET6, 6)):
            # struct inet_diag_req_v2: family, protocol, ext, pad, states (1 << TCP_LISTEN), inet_diag_sockid
            sockid = bytes(36) + struct.pack("=III", 0, 0xFFFFFFFF, 0xFFFFFFFF)
            request = struct.pack("=BBBBI", family, socket.IPPROTO_TCP, 0, 0, 1 << 10) + sockid
            # struct nlmsghdr: length, SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST | NLM_F_DUMP, seq, pid
            sock.send(struct.pack("=IHHII", 16 + len(request), 20, 0x301, version, 0) + request)
            done = False
            while not done:
                data = sock.recv(1 << 16)
                if not data:
                    break
                offset = 0
                while offset + 16 <= len(data):
                    length, kind = struct.unpack_from("=IH", data, offset)
                    if length < 16:
                        raise OSError("bad netlink message")
                    if kind == 3:  # NLMSG_DONE
                        done = True
                        break
                    if kind == 2:  # NLMSG_ERROR
                        code = -struct.unpack_from("=i", data, offset + 16)[0]
                        raise OSError(code, os.strerror(code))
                    body = offset + 16  # struct inet_diag_msg
                    state = data[body + 1]
                    sport = struct.unpack_from("!H", data, body + 4)[0]
                    if state == 10 and (port is None or sport == port):
                        raw = data[body + 8 : body + 8 + (4 if family == socket.AF_INET else 16)]
                        uid, inode = struct.unpack_from("=II", data, body + 64)
                        item = {"address": socket.inet_ntop(family, raw), "family": version, "uid": uid,
                                "inode": inode, "pids": []}
                        if port is None:
                            item["port"] = sport
                        out.append(item)
                    offset += (length + 3) & ~3
    finally:
        sock.close()
    return out


def read_listeners(ctx, port: Optional[int]) -> Optional[Tuple[List[Dict[str, Any]], str]]:
    """(LISTEN sockets on ``port``, where they were read): netlink on the live root, else
    ``ROOT/proc/net/tcp`` and ``tcp6``; None when neither can be read. ``port`` None: every port."""
    proc = ctx.path("/proc")
    try:
        if not ctx.live:
            raise OSError("fake root: read its proc/net/tcp")
        return listeners_netlink(port), "netlink sock_diag"
    except (OSError, ValueError, IndexError, AttributeError):
        listeners: List[Dict[str, Any]] = []
        read_any = False
        for name, family in (("tcp", 4), ("tcp6", 6)):
            text = ctx.read_text(f"/proc/net/{name}", limit=64 << 20)
            if text is None:
                continue
            read_any = True
            listeners.extend(parse_net_tcp(text, port, family))
        return (listeners, f"{proc}/net/tcp") if read_any else None


def _port(ctx, proc: str, index: Dict[str, List[Any]], serving: List[Dict[str, Any]]) -> Fact:
    port = int(getattr(ctx, "port", 8000) or 8000)
    read = read_listeners(ctx, port)
    if read is None:
        return missing(ABSENT, f"cannot read {proc}/net/tcp", SOURCE, value={"port": port})
    listeners, source = read
    if listeners:
        # The socket's uid says whose process holds it: look at that user's processes first
        # (serving ones before the rest), instead of every file descriptor on the machine.
        socket_uids = {item["uid"] for item in listeners}
        serving_pids = [r["pid"] for r in serving]
        others = [int(pid) for pid, row in index.items() if row[1] in socket_uids and int(pid) not in serving_pids]
        owners = socket_owners(proc, {item["inode"] for item in listeners}, serving_pids + others)
        for item in listeners:
            item["pids"] = sorted(owners.get(item["inode"], []))
    return ok({"port": port, "listeners": listeners}, f"{source}, {proc}/PID/fd")


# --- the same scan for the smoke check: who holds a port, which processes serve ---------------------
def listening_processes(port: Optional[int], ctx=None) -> List[Dict[str, Any]]:
    """LISTEN sockets of this machine on ``port`` (None: every port, each with its ``port``) and the
    PIDs holding each (``pids``), read as ``processes.port`` reads them. Only file descriptors we
    may read are seen: another user's socket has no PIDs unless gpudoctor runs as root."""
    if ctx is None:
        from gpudoctor.probes import Context

        ctx = Context(environ={})
    proc = ctx.path("/proc")
    read = read_listeners(ctx, port)
    listeners = read[0] if read is not None else []
    if not listeners:
        return listeners
    uids = {item["uid"] for item in listeners}
    candidates = []
    for pid in _pids(proc):
        try:
            if os.stat(f"{proc}/{pid}").st_uid in uids:
                candidates.append(pid)
        except OSError:
            continue
    owners = socket_owners(proc, {item["inode"] for item in listeners}, candidates)
    for item in listeners:
        item["pids"] = sorted(owners.get(item["inode"], []))
    return listeners


def matching_processes(pattern: "re.Pattern[str]", limit: int, proc: str = "/proc") -> List[int]:
    """PIDs (ascending, at most ``limit``) whose command line, or else name, matches ``pattern``;
    never the doctor itself."""
    me = os.getpid()
    found: List[int] = []
    for pid in _pids(proc):
        if pid == me:
            continue
        argv = read_argv(proc, pid)
        text = " ".join(argv or []) or process_name(pid, proc) or ""
        if text and pattern.search(text):
            found.append(pid)
            if len(found) >= limit:
                break
    return found


def process_name(pid: int, proc: str = "/proc") -> Optional[str]:
    """The process name as ps shows it: ``comm``, completed from argv[0] when the kernel cut it at 15 bytes."""
    st = read_stat(proc, pid)
    if st is None:
        return None
    if len(st.comm) >= COMM_LEN:
        argv = read_argv(proc, pid) or []
        base = os.path.basename(argv[0]) if argv else ""
        if base.startswith(st.comm):
            return base
    return st.comm


def _pids(proc: str) -> List[int]:
    try:
        return sorted(int(name) for name in os.listdir(proc) if name.isdigit())
    except OSError:
        return []
