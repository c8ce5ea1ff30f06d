"""Typed fix actions: data a rule attaches to its Fix, carried out only by ``gpudoctor fix``.

Plain data with no machine access, so rules (which never touch the machine) can build them;
gpudoctor/fix.py checks each against the live machine again and acts.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple


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

    ``kind``: "uninstall" (``dist`` at ``version`` goes), "replace" (``dist`` at ``version`` is
    swapped for what ``requirements`` resolve to: ``torchvision!=0.27.0 torch==2.13.0``, the build
    for the installed torch) or "install" (``requirements`` at the versions an installed package
    pins; ``dist``/``version`` name what is there now, version "" when it is missing).
    ``index_url`` is an index the action adds on top of the environment's own pip configuration
    (PyTorch's, for a ``+cpu``/``+cuXXX`` torch), ``replace_index`` when it takes the place of the
    environment's index (a torch build that only PyTorch's index has); empty: the environment's
    own pip configuration decides, untouched.
    """

    kind: str
    dist: str
    version: str
    python: str
    rule: str  # the rule whose finding asks for it: "GD401"
    why: str
    requirements: Tuple[str, ...] = ()
    index_url: str = ""
    replace_index: bool = False
    flags: Tuple[str, ...] = ()  # "--force-reinstall", "--no-deps": as the finding's command has them
    index_last: bool = False  # the index option after the requirements, as torch's install commands have always read

    type = "stack"

    @property
    def argv(self) -> List[str]:
        if self.kind == "uninstall":
            return [self.python, "-m", "pip", "uninstall", "-y", self.dist]
        if self.kind in ("replace", "install") and self.requirements:
            if self.index_last:
                return [self.python, "-m", "pip", "install", *self.flags, *self.requirements, *self.pip_options[len(self.flags):]]
            return [self.python, "-m", "pip", "install", *self.pip_options, *self.requirements]
        raise ValueError(f"unknown stack action kind {self.kind!r} (or nothing to install)")

    @property
    def pip_options(self) -> List[str]:
        index = [("--index-url" if self.replace_index else "--extra-index-url"), self.index_url] if self.index_url else []
        return [*self.flags, *index]

    @property
    def command(self) -> str:
        return " ".join(shlex.quote(part) for part in self.argv)

    @property
    def key(self) -> Tuple[Any, ...]:
        return (self.type, self.kind, self.python, self.dist.lower().replace("_", "-"), self.requirements)

    @property
    def index_note(self) -> str:
        """Where pip looks: said in the plan, since an added or replaced index is the action's doing."""
        if not self.index_url:
            return "the environment's own pip configuration (index, extra index, find-links), unchanged"
        if self.replace_index:
            return f"{self.index_url} instead of the environment's index (find-links kept): the build needed is only there"
        return f"the environment's own pip configuration plus {self.index_url} (where the installed torch's build is)"

    def describe(self) -> str:
        if self.kind == "uninstall":
            return f"{self.kind} {self.dist} {self.version} (with {self.python}'s pip)"
        what = " ".join(self.requirements)
        if self.kind == "replace":
            return f"replace {self.dist} {self.version} with {what} (with {self.python}'s pip)"
        now = f"{self.dist} {self.version}" if self.version else f"{self.dist}, not installed"
        return f"install {what} ({now}; with {self.python}'s pip)"

    def to_json(self) -> Dict[str, Any]:
        out = {"type": self.type, "kind": self.kind, "dist": self.dist, "version": self.version, "python": self.python,
               "rule": self.rule, "why": self.why, "command": self.command}
        if self.kind != "uninstall":
            out.update(requirements=list(self.requirements), index=self.index_note)
        return out


def uninstall(snap: Any, dist: str, version: str, rule: str, why: str) -> Optional[StackAction]:
    """The uninstall of ``dist`` with the checked environment's own pip; None when that
    interpreter is not known (the command then names ``python3`` and nothing can be acted on)."""
    python = _python(snap)
    return StackAction("uninstall", dist, str(version), python, rule, why) if python else None


def install(snap: Any, kind: str, dist: str, version: str, requirements: Sequence[str], rule: str, why: str,
            index_url: str = "", replace_index: bool = False, flags: Sequence[str] = (), index_last: bool = False) -> Optional[StackAction]:
    """A replace / install with the checked environment's own pip; None when its interpreter is
    not known, or when an index is only a placeholder (``cuXYZ``: a tag gpudoctor could not read)."""
    python = _python(snap)
    if not python or not requirements or "cuXYZ" in index_url:
        return None
    return StackAction(kind, dist, str(version or ""), python, rule, why, tuple(requirements), index_url, replace_index, tuple(flags),
                       index_last)


def _python(snap: Any) -> Optional[str]:
    python = snap.value("python.executable")
    return str(python) if python and snap.get("python.executable").ok else None


Action = Any  # StopProcess | RemoveFile | StackAction


def _size(nbytes: int) -> str:
    if nbytes >= 1 << 20:
        return f"{nbytes / 1048576:.1f} MiB"
    return f"{nbytes / 1024:.0f} KiB"


# --- the plan ------------------------------------------------------------------------------------
