"""Typed fix actions: data a rule attaches to its Fix, carried out only by ``gpudoctor fix``.

Plain data with no machine access, so rules (which never touch the machine) can build them;
gpudoctor/fix.py checks each against the live machine again and acts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Tuple


@dataclass(frozen=True)
class StopProcess:
    """Stop one process: SIGTERM, a grace period, then SIGKILL."""

    pid: int
    start_ticks: int  # field 22 of /proc/PID/stat: who the PID belonged to when checked
    uid: int
    title: str = ""
    user: str = ""

    type = "stop_process"

    @property
    def key(self) -> Tuple[Any, ...]:
        return (self.type, self.pid, self.start_ticks)

    def describe(self) -> str:
        return f"stop PID {self.pid} {self.title} (user {self.user or self.uid})".replace("  ", " ")

    def to_json(self) -> Dict[str, Any]:
        return {"type": self.type, "pid": self.pid, "start_ticks": self.start_ticks, "uid": self.uid,
                "title": self.title, "user": self.user}


@dataclass(frozen=True)
class RemoveFile:
    """Remove one leftover file (a shared-memory segment in /dev/shm)."""

    path: str
    dev: int
    inode: int
    uid: int
    size: int = 0
    user: str = ""

    type = "remove_file"

    @property
    def key(self) -> Tuple[Any, ...]:
        return (self.type, self.path, self.dev, self.inode)

    def describe(self) -> str:
        return f"remove {self.path} ({_size(self.size)}, user {self.user or self.uid})"

    def to_json(self) -> Dict[str, Any]:
        return {"type": self.type, "path": self.path, "dev": self.dev, "inode": self.inode, "uid": self.uid,
                "size": self.size, "user": self.user}


Action = Any  # StopProcess | RemoveFile


def _size(nbytes: int) -> str:
    if nbytes >= 1 << 20:
        return f"{nbytes / 1048576:.1f} MiB"
    return f"{nbytes / 1024:.0f} KiB"


# --- the plan ------------------------------------------------------------------------------------
