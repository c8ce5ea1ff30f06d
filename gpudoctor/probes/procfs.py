"""One process read from ``/proc``: its stat line, uids, command line; the boot time, the clock
tick, the PID namespace and a process's ancestors. Every read is guarded: a process that is gone
or unreadable gives None, nothing here raises.

Shared by probes/processes.py (the process table), probes/listeners.py (who holds the serving
port), the smoke check and ``gpudoctor fix``.
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Tuple

SOURCE = "/proc"
PF_KTHREAD = 0x00200000  # include/linux/sched.h: the task is a kernel thread
CMDLINE_LIMIT = 4096  # bytes of /proc/PID/cmdline read per process
COMM_LEN = 15  # /proc/PID/comm keeps 15 bytes of a title


class Stat:
    """The parts of /proc/PID/stat we use."""

    __slots__ = ("pid", "comm", "state", "ppid", "pgid", "sid", "flags", "start_ticks")

    def __init__(self, pid: int, comm: str, state: str, ppid: int, pgid: int, sid: int, flags: int, start_ticks: int):
        self.pid, self.comm, self.state, self.ppid = pid, comm, state, ppid
        self.pgid, self.sid, self.flags, self.start_ticks = pgid, sid, flags, start_ticks

    @property
    def kernel_thread(self) -> bool:
        return bool(self.flags & PF_KTHREAD) or self.pid == 2 or self.ppid == 2


def parse_stat(pid: int, data: bytes) -> Optional[Stat]:
    """Parse /proc/PID/stat; None for text that is not a stat line. comm may hold spaces and ')'."""
    try:
        open_at, close_at = data.index(b"("), data.rindex(b")")
        comm = data[open_at + 1 : close_at].decode("utf-8", "replace")
        rest = data[close_at + 2 :].split()
        return Stat(pid, comm, rest[0].decode("ascii", "replace"), int(rest[1]), int(rest[2]), int(rest[3]),
                    int(rest[6]), int(rest[19]))
    except (ValueError, IndexError):
        return None


def read_stat(proc: str, pid: int) -> Optional[Stat]:
    """One process's stat, or None when it is gone or unreadable (never raises)."""
    try:
        with open(f"{proc}/{pid}/stat", "rb") as handle:
            data = handle.read(4096)
    except OSError:
        return None
    return parse_stat(pid, data)


def read_uids(proc: str, pid: int) -> Optional[Tuple[int, int, int]]:
    """Real, effective and saved uid from /proc/PID/status (what kill(2) permission checks)."""
    try:
        with open(f"{proc}/{pid}/status", "rb") as handle:
            for line in handle:
                if line.startswith(b"Uid:"):
                    real, effective, saved = (int(v) for v in line.split()[1:4])
                    return real, effective, saved
    except (OSError, ValueError):
        return None
    return None


def read_argv(proc: str, pid: int, limit: int = CMDLINE_LIMIT) -> Optional[List[str]]:
    try:
        with open(f"{proc}/{pid}/cmdline", "rb") as handle:
            data = handle.read(limit)
    except OSError:
        return None
    return [part.decode("utf-8", "replace") for part in data.split(b"\0") if part]


def boot_time(proc: str) -> Optional[int]:
    try:
        with open(f"{proc}/stat", "rb") as handle:
            for line in handle:
                if line.startswith(b"btime "):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def clock_ticks() -> int:
    try:
        return int(os.sysconf("SC_CLK_TCK")) or 100
    except (ValueError, OSError, AttributeError):
        return 100


PROC_PID_INIT_INO = 0xEFFFFFFC  # include/linux/proc_ns.h: the inode of the initial PID namespace


def pid_namespace(proc: str) -> Dict[str, Any]:
    """Which PID namespace this is. NVML reports host PIDs whatever the caller's namespace
    (NVIDIA/nvidia-docker#1483, #179), so inside a container its PIDs cannot be looked up here."""
    try:
        link = os.readlink(f"{proc}/self/ns/pid")  # "pid:[4026531836]"
        inode = int(link[link.index("[") + 1 : link.index("]")])
    except (OSError, ValueError):
        return {"inode": None, "initial": None}
    return {"inode": inode, "initial": inode == PROC_PID_INIT_INO}


def ancestors(proc: str, pid: int) -> List[int]:
    """PIDs above ``pid`` up to the namespace's root (ppid 0), read live."""
    chain: List[int] = []
    current = pid
    while len(chain) < 256:
        st = read_stat(proc, current)
        if st is None or st.ppid <= 0 or st.ppid in chain:
            break
        chain.append(st.ppid)
        current = st.ppid
    return chain
