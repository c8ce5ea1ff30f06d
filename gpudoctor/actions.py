"""Typed fix actions: data a rule attaches to its Fix, carried out only by ``gpudoctor fix``.

Plain data with no machine access, so rules (which never touch the machine) can build them;
gpudoctor/fix.py checks each against the live machine again and acts.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple


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


@dataclass(frozen=True)
class StackAction:
    """Change one distribution of a Python environment with that environment's own pip.

    Built by the rule whose finding asks for it; the finding's fix command is this action's
    ``command``, so the text a user copies and what ``gpudoctor fix`` would run are one thing.
    ``python`` is the interpreter of the checked environment (``python.executable``: the
    ``--python`` venv's own), so its pip acts on that environment and no other.
    """

    kind: str  # "uninstall" (install / replace come with their own safe apply)
    dist: str
    version: str
    python: str
    rule: str  # the rule whose finding asks for it: "GD401"
    why: str

    type = "stack"

    @property
    def argv(self) -> List[str]:
        if self.kind == "uninstall":
            return [self.python, "-m", "pip", "uninstall", "-y", self.dist]
        raise ValueError(f"unknown stack action kind {self.kind!r}")

    @property
    def command(self) -> str:
        return " ".join(shlex.quote(part) for part in self.argv)

    @property
    def key(self) -> Tuple[Any, ...]:
        return (self.type, self.kind, self.python, self.dist.lower().replace("_", "-"))

    def describe(self) -> str:
        return f"{self.kind} {self.dist} {self.version} (with {self.python}'s pip)"

    def to_json(self) -> Dict[str, Any]:
        return {"type": self.type, "kind": self.kind, "dist": self.dist, "version": self.version, "python": self.python,
                "rule": self.rule, "why": self.why, "command": self.command}


def uninstall(snap: Any, dist: str, version: str, rule: str, why: str) -> Optional[StackAction]:
    """The uninstall of ``dist`` with the checked environment's own pip; None when that
    interpreter is not known (the command then names ``python3`` and nothing can be acted on)."""
    python = snap.value("python.executable")
    if not python or not snap.get("python.executable").ok:
        return None
    return StackAction("uninstall", dist, str(version), str(python), rule, why)


Action = Any  # StopProcess | RemoveFile | StackAction


def _size(nbytes: int) -> str:
    if nbytes >= 1 << 20:
        return f"{nbytes / 1048576:.1f} MiB"
    return f"{nbytes / 1024:.0f} KiB"


# --- the plan ------------------------------------------------------------------------------------
