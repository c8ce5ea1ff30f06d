"""The processes judged by rules/processes.py (GD6xx) and rules/gpu.py (GD302), joined from
two probes: NVML's per-GPU PIDs (``gpu.N.processes``, probes/nvml.py) and the process table
(``processes.*``, probes/processes.py). Which serving processes are stale (their launcher is
gone) or zombies, who holds how much GPU memory, and the commands that stop them.

A helper module: it registers no rule.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from gpudoctor.actions import StopProcess
from gpudoctor.snapshot import gib
from gpudoctor.visible import visible_gpus

# Memory a GPU may show as used with nothing of ours on it: NVML v1 counts the driver's
# reservation (~0.6 GiB on an H200) as used; v2 reports it apart. (GD302 in rules/gpu.py uses it too.)
IN_USE_THRESHOLD = 1 << 30

# Roles a launcher starts (probes/processes.py classify): stale once the launcher is gone.
CHILD_ROLES = {"engine_core", "worker", "api_server", "coordinator", "helper"}

# Who adopts orphans: PID 1 of the namespace, or a child subreaper (prctl
# PR_SET_CHILD_SUBREAPER). The kernel does not show which processes are subreapers, so these
# are the usual ones by name.
SUBREAPERS = {"init", "systemd", "tini", "dumb-init", "docker-init", "catatonit", "s6-svscan", "s6-supervise",
              "runsv", "runsvdir", "openrc-init", "conmon", "bwrap"}


def size_text(nbytes: Any) -> str:
    if not isinstance(nbytes, int):
        return "?"
    if nbytes >= 1 << 30:
        return gib(nbytes)
    if nbytes >= 1 << 20:
        return f"{nbytes / 1048576:.1f} MiB"
    return f"{nbytes / 1024:.0f} KiB"


def _is_subreaper(comm: str) -> bool:
    return comm in SUBREAPERS or comm.startswith("containerd-shim") or comm.startswith("systemd")


# PID 1 as a Python program: a container whose entrypoint is the user's own script. PyTorch names
# the main thread of a process that imported it "pt_main_thread", which is what comm then shows.
PYTHON_INIT = re.compile(r"^(?:python[\d.]*|pytest|pt_main_thread)$")


def _may_be_init_child(init: Proc, top: Proc) -> bool:
    """An engine that PID 1 started itself: the user's script is the container's PID 1 and runs
    an offline engine (vLLM's ``LLM()``, SGLang's ``sgl.Engine``). Its children are in PID 1's
    process group (0 when that group's leader is outside this PID namespace); an orphan of a
    launcher started from a shell is in that launcher's group. Telling them apart is not
    possible from here, so such a process is never called stale."""
    if _is_subreaper(init.comm) or not PYTHON_INIT.match(init.comm):
        return False
    pgid = (top.record or {}).get("pgid")
    return pgid in (0, 1)


def age_text(seconds: Optional[float]) -> str:
    if not isinstance(seconds, (int, float)) or seconds < 0:
        return "?"
    seconds = int(seconds)
    if seconds < 120:
        return f"{seconds} s"
    minutes = seconds // 60
    if minutes < 120:
        return f"{minutes} min"
    hours = minutes // 60
    if hours < 48:
        return f"{hours} h {minutes % 60} min"
    return f"{hours // 24} d {hours % 24} h"


# --- the joined view -----------------------------------------------------------------------------
@dataclass
class Proc:
    pid: int
    ppid: int
    uid: int
    state: str
    comm: str
    created: Optional[float]
    record: Optional[Dict[str, Any]] = None  # the processes.serving record, for serving processes

    @property
    def serving(self) -> bool:
        return self.record is not None

    @property
    def role(self) -> str:
        return self.record.get("role", "") if self.record else ""

    @property
    def title(self) -> str:
        return (self.record.get("title") if self.record else None) or self.comm

    @property
    def zombie(self) -> bool:
        return self.state in ("Z", "X")


@dataclass
class View:
    procs: Dict[int, Proc]
    users: Dict[str, str]
    now: Optional[float]
    self_uid: Optional[int]
    self_pids: List[int]
    # NVML reports host PIDs; only in the initial PID namespace do they name processes here.
    host_pids: bool = True
    stale: Dict[int, int] = field(default_factory=dict)  # pid -> the top of its stale stack
    reasons: Dict[int, str] = field(default_factory=dict)  # top pid -> why it is stale

    def user(self, uid: Any) -> str:
        return self.users.get(str(uid), str(uid))

    def age(self, proc: Proc) -> str:
        return age_text(self.now - proc.created) if self.now and proc.created else "?"

    def describe(self, proc: Proc) -> str:
        """'VLLM::EngineCore · user root · up 3 min · state S · parent 1 (process_api)'"""
        parent = self.procs.get(proc.ppid)
        parts = [proc.title, f"user {self.user(proc.uid)}", f"up {self.age(proc)}", f"state {proc.state}",
                 f"parent {proc.ppid}" + (f" ({parent.comm})" if parent else " (gone)")]
        return " · ".join(parts)

    def stack_of(self, top: int) -> List[Proc]:
        return sorted((self.procs[p] for p, t in self.stale.items() if t == top), key=lambda p: p.pid)


def view(snap) -> Optional[View]:
    index = snap.value("processes.index")
    if not isinstance(index, dict):
        return None
    serving = {r.get("pid"): r for r in (snap.value("processes.serving") or []) if isinstance(r, dict)}
    procs: Dict[int, Proc] = {}
    for key, row in index.items():
        try:
            pid = int(key)
            ppid, uid, state, comm, created = row[:5]
            procs[pid] = Proc(pid, int(ppid), int(uid), str(state), str(comm), created, serving.get(pid))
        except (ValueError, TypeError):
            continue  # a hand-edited or truncated snapshot: skip the row, keep the rest
    scan = snap.value("processes.scan") or {}
    me = snap.value("processes.self") or {}
    result = View(procs, snap.value("processes.users") or {}, scan.get("time"), me.get("uid"),
                  [me.get("pid")] + list(me.get("ancestors") or []) if me.get("pid") else [],
                  (scan.get("pid_namespace") or {}).get("initial") is not False)
    _find_stale(result)
    return result


def _find_stale(v: View) -> None:
    """A child-role serving process is stale when the launcher above it is gone: walking up
    through serving processes, the topmost one is itself a child role and its parent is
    PID 1, a subreaper, or no longer exists. Launchers may run under init on purpose
    (systemd, a container's entrypoint); an engine core under a live user script (offline
    LLM()) is fine too."""
    for proc in v.procs.values():
        if not proc.serving or proc.role not in CHILD_ROLES or proc.zombie or proc.pid in v.self_pids:
            continue
        top, seen = proc, {proc.pid}
        while True:
            parent = v.procs.get(top.ppid)
            if parent is None or not parent.serving or parent.pid in seen:
                break
            seen.add(parent.pid)
            top = parent
        if top.role not in CHILD_ROLES:
            continue
        reason = _orphan_reason(v, top)
        if reason:
            v.stale[proc.pid] = top.pid
            v.reasons[top.pid] = reason


def _orphan_reason(v: View, top: Proc) -> str:
    if top.ppid <= 0:
        return ""  # its parent is outside this PID namespace (docker exec): cannot tell
    parent = v.procs.get(top.ppid)
    if parent is None:
        reason = f"its parent PID {top.ppid} no longer exists"
    elif top.ppid == 1 and _may_be_init_child(parent, top):
        return ""
    elif top.ppid == 1:
        reason = f"its parent is gone and PID 1 ({parent.comm}) adopted it"
    elif _is_subreaper(parent.comm):
        reason = f"its parent is gone and the subreaper PID {parent.pid} ({parent.comm}) adopted it"
    else:
        return ""
    pgid = (top.record or {}).get("pgid")
    if isinstance(pgid, int) and pgid != top.pid and pgid not in v.procs:
        reason += f"; its launcher (process group leader PID {pgid}) has exited"
    return reason


# --- GPU memory per process ------------------------------------------------------------------------
@dataclass
class GpuShare:
    """How one GPU's used memory splits between the findings."""

    index: int
    used: int
    live: List[Dict[str, Any]]  # NVML entries of visible, live, non-stale processes
    stale: int = 0
    zombie: int = 0
    hidden: int = 0  # held by PIDs not in this namespace, or by no listed process
    hidden_pids: List[int] = field(default_factory=list)
    unlisted: int = 0  # used memory that no NVML entry accounts for
    hidden_reported: bool = False  # GD604 reports it

    @property
    def reported_elsewhere(self) -> int:
        return self.stale + self.zombie + (self.hidden if self.hidden_reported else 0)


def gpu_memory_by_pid(snap, v: Optional[View] = None) -> Dict[int, Dict[int, Optional[int]]]:
    """pid -> {gpu index: bytes (None when NVML would not say)} from gpu.N.processes; empty in
    a container's PID namespace, where NVML's (host) PIDs name nothing here."""
    out: Dict[int, Dict[int, Optional[int]]] = {}
    if v is not None and not v.host_pids:
        return out
    for index in snap.gpu_indices():
        for entry in snap.value(f"gpu.{index}.processes") or []:
            if isinstance(entry, dict) and isinstance(entry.get("pid"), int):
                out.setdefault(entry["pid"], {})[index] = entry.get("used_memory")
    return out


def gpu_shares(snap, v: Optional[View] = None) -> Optional[List[GpuShare]]:
    """Per visible GPU, who holds its memory; None without the process table."""
    v = v or view(snap)
    if v is None:
        return None
    shares = []
    for index in visible_gpus(snap):
        used = snap.value(f"gpu.{index}.memory_used")
        procs_fact = snap.get(f"gpu.{index}.processes")
        if not isinstance(used, int) or not procs_fact.ok:
            continue
        share = GpuShare(index, used, [])
        listed, unknown_size = 0, False
        for entry in procs_fact.value or []:
            if not isinstance(entry, dict):
                continue
            pid, size = entry.get("pid"), entry.get("used_memory")
            if isinstance(size, int):
                listed += size
            else:
                unknown_size = True
            proc = v.procs.get(pid) if isinstance(pid, int) and v.host_pids else None
            amount = size if isinstance(size, int) else 0
            if proc is None:
                share.hidden += amount
                share.hidden_pids.append(pid)
            elif proc.zombie:
                share.zombie += amount
            elif pid in v.stale:
                share.stale += amount
            else:
                share.live.append(entry)
        if not unknown_size:
            # NVML v2 counts the driver's reservation apart; v1 counts it as used.
            reserved = snap.get(f"gpu.{index}.memory_reserved")
            slack = 0 if reserved.ok else 1 << 30
            share.unlisted = max(0, used - listed - slack)
            share.hidden += share.unlisted
        share.hidden_reported = share.hidden >= IN_USE_THRESHOLD
        shares.append(share)
    return shares


def _gpu_note(snap, v: View, pids: List[int]) -> Tuple[str, bool]:
    """'holds 2.5 GiB on GPU 0' for these PIDs, and whether any GPU memory is held."""
    if not v.host_pids:
        return "; this is a container's PID namespace, where NVML's PIDs (the host's) cannot be matched", False
    memory = gpu_memory_by_pid(snap, v)
    per_gpu: Dict[int, int] = {}
    held = False
    for pid in pids:
        for index, size in memory.get(pid, {}).items():
            held = True
            per_gpu[index] = per_gpu.get(index, 0) + (size or 0)
    if held:
        return "; holding " + ", ".join(f"{gib(size)} on GPU {i}" for i, size in sorted(per_gpu.items())), True
    gpu_known = snap.get("gpu.count").ok and all(snap.get(f"gpu.{i}.processes").ok for i in snap.gpu_indices())
    return ("; NVML shows no GPU memory held by it" if gpu_known and snap.gpu_indices() else ""), False


def _stop_actions(v: View, procs: List[Proc]) -> List[StopProcess]:
    return [
        StopProcess(p.pid, int(p.record.get("start_ticks", -1)), p.uid, p.title[:80], v.user(p.uid))
        for p in procs
        if p.record and isinstance(p.record.get("start_ticks"), int) and not p.zombie
    ]


def _kill_commands(v: View, procs: List[Proc]) -> List[str]:
    pids = " ".join(str(p.pid) for p in procs if not p.zombie)
    if not pids:
        return []
    foreign = v.self_uid is not None and v.self_uid != 0 and any(p.uid != v.self_uid for p in procs)
    sudo = "sudo " if foreign else ""
    return [f"{sudo}kill -TERM {pids}  # then, if any is still there after 10 s: {sudo}kill -KILL {pids}"]
