"""GD6xx: processes — stale serving stacks, zombies, the serving port, leftover shared
memory, and GPU memory held by processes this namespace cannot see.

The facts come from two probes that run at the same time: NVML's per-GPU PIDs
(``gpu.N.processes``, probes/nvml.py) and the process table (``processes.*``,
probes/processes.py). The join happens here.

Who reports which GPU memory (so that no two findings say the same thing):
GD601 the memory of stale serving processes, GD605 that of zombies, GD604 memory no
visible process holds, and GD302 (rules/gpu.py) what is left: memory of live, visible
processes — a running server, a notebook, another user's job — named with user and age.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from gpudoctor.actions import RemoveFile, StopProcess
from gpudoctor.rule import ERROR, INFO, WARNING, Fail, Fix, Unknown, rule
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

# A leftover shm file must also be this old (seconds since its last write): a process that
# is starting may not have mapped its segment yet.
SHM_MIN_AGE = 10.0

ROLE_NAMES = {"launcher": "server", "engine_core": "engine core", "worker": "worker", "api_server": "API server",
              "coordinator": "coordinator", "helper": "helper"}


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


# --- rules ------------------------------------------------------------------------------------------
@rule("GD601", "stale-serving-process", severity=ERROR, area="processes", requires=("processes.index",))
def stale_serving_process(snap):
    """A vLLM / SGLang process outlived the server that started it.

    ## Why
    vLLM runs the model in child processes titled `VLLM::EngineCore` and
    `VLLM::Worker_TP<n>`; when the API server (`vllm serve`) is killed hard (SIGKILL, OOM
    killer, a crashed supervisor) these children can survive, adopted by PID 1 or a
    subreaper, and keep their GPU memory, shared memory and sometimes ports. The next
    launch then fails with "Free memory on device … is less than desired GPU memory
    utilization" with no hint that an orphan holds the memory. gpudoctor calls a serving
    child stale when the topmost serving process above it is itself a child (not a
    launcher) whose parent is PID 1, a subreaper or gone. A launcher under init (systemd,
    a container entrypoint) and an engine under a live script (offline `LLM()`) are fine.
    Error when the stack holds GPU memory, warning otherwise.

    ## Fix
    `gpudoctor fix` stops them (SIGTERM, then SIGKILL after a grace period), only your
    own processes and only after checking that each PID still belongs to the same process.
    By hand: `kill -TERM PID…`, then `kill -KILL PID…` for what is left.

    ## References
    - https://github.com/vllm-project/vllm/issues/55510 (EngineCore and TP workers survive a
      SIGKILLed API server and keep the GPUs),
      https://github.com/vllm-project/vllm/issues/42017,
      https://github.com/vllm-project/vllm/issues/20305;
      https://github.com/ai-dynamo/dynamo/issues/2894.
    - tests/fixtures/ground_truth/h200x2/capture2.log (a real orphan `VLLM::EngineCor`, ppid
      1).
    """
    v = view(snap)
    if v is None:
        return Unknown("no process table")
    fails = []
    for top_pid in sorted(set(v.stale.values())):
        stack = v.stack_of(top_pid)
        top = v.procs[top_pid]
        others = [p for p in stack if p.pid != top_pid]
        note, holds_gpu = _gpu_note(snap, v, [p.pid for p in stack])
        more = f"; {len(others)} more under it (PID {', '.join(str(p.pid) for p in others)})" if others else ""
        role = ROLE_NAMES.get(top.role, top.role)
        message = (f"stale vLLM {role} {top.title} (PID {top.pid}, user {v.user(top.uid)}, up {v.age(top)}): "
                   f"{v.reasons[top_pid]}{more}{note}")
        if (top.record or {}).get("stack") == "sglang":
            message = message.replace("stale vLLM", "stale SGLang", 1)
        memory = gpu_memory_by_pid(snap, v)
        evidence: List[Any] = [
            (f"PID {p.pid}", v.describe(p) + "".join(f" · GPU {i}: {gib(size)}" for i, size in sorted(memory.get(p.pid, {}).items())))
            for p in stack
        ]
        evidence += [f"gpu.{i}.processes" for i in sorted({i for p in stack for i in memory.get(p.pid, {})})]
        fails.append(
            Fail(
                message,
                evidence,
                Fix(
                    "Stop the stale processes (your own ones: `gpudoctor fix` does it after asking).",
                    ["gpudoctor fix"] + _kill_commands(v, stack),
                    "disruptive",
                    actions=_stop_actions(v, stack),
                ),
                subject=f"PID {top_pid}",
                severity=ERROR if holds_gpu else WARNING,
            )
        )
    return fails


@rule("GD602", "serving-port-in-use", severity=WARNING, area="processes", requires=("processes.port",))
def serving_port_in_use(snap):
    """The serving port is already taken.

    ## Why
    A new server on that port fails at start with `OSError: [Errno 98] Address already in
    use` (uvicorn: "error while attempting to bind on address ('0.0.0.0', 8000): address
    already in use"), often after the model has spent minutes loading. The usual holder is
    a previous vLLM still running or a stale API server. Error when the holder is stale
    (see GD601), info when it is a live serving process (the server you may want to use),
    warning for anything else.

    ## Fix
    Stop the holder if it is stale (`gpudoctor fix`), or start the new server on another
    port (`vllm serve … --port 8001`). Check with `ss -ltnp 'sport = :8000'`.
    `gpudoctor check --port N` checks another port.

    ## References
    - https://man7.org/linux/man-pages/man5/proc.5.html
    """
    data = snap.value("processes.port") or {}
    port = data.get("port")
    listeners = [item for item in data.get("listeners") or [] if isinstance(item, dict)]
    if not listeners:
        return None
    v = view(snap)
    holders: List[str] = []
    stale: List[Proc] = []
    severity = INFO
    pids_seen: List[int] = []
    for item in listeners:
        where = f"{item.get('address')}:{port}"
        pids = [p for p in item.get("pids") or [] if isinstance(p, int)]
        if not pids:
            holders.append(f"{where} by a process not visible here (socket owner {v.user(item.get('uid')) if v else item.get('uid')}: "
                           "another user's process, or another PID namespace sharing this network)")
            severity = WARNING if severity != ERROR else severity
            continue
        for pid in pids:
            if pid in pids_seen:
                continue
            pids_seen.append(pid)
            proc = v.procs.get(pid) if v else None
            if proc is None:
                holders.append(f"{where} by PID {pid}")
                severity = WARNING if severity != ERROR else severity
            elif pid in v.stale:
                stale.append(proc)
                holders.append(f"{where} by stale PID {pid} {proc.title} (user {v.user(proc.uid)}, up {v.age(proc)}; see GD601)")
                severity = ERROR
            elif proc.serving:
                holders.append(f"{where} by a running server, PID {pid} {proc.title} (user {v.user(proc.uid)}, up {v.age(proc)})")
            else:
                holders.append(f"{where} by PID {pid} {proc.comm} (user {v.user(proc.uid)}, up {v.age(proc)})")
                severity = WARNING if severity != ERROR else severity
    message = f"port {port} is taken: " + "; ".join(holders)
    if severity == INFO:
        message += ". A second server on this port would fail with 'Address already in use'"
    else:
        message += ". A server started on this port fails with 'OSError: [Errno 98] Address already in use'"
    commands = [f"ss -ltnp 'sport = :{port}'"]
    if stale:
        commands = ["gpudoctor fix"] + _kill_commands(v, stale) + commands
    commands.append(f"vllm serve MODEL --port {int(port) + 1 if isinstance(port, int) else 8001}  # or serve on another port")
    return Fail(
        message,
        ["processes.port"] + [(f"PID {pid}", v.describe(v.procs[pid])) for pid in pids_seen if v and pid in v.procs],
        Fix("Stop the holder if it is stale, or use another port.", commands, "disruptive" if stale else "safe",
            actions=_stop_actions(v, stale) if v else []),
        subject=f"port {port}",
        severity=severity,
    )


@rule("GD603", "leftover-shared-memory", severity=WARNING, area="processes", requires=("processes.shm",))
def leftover_shared_memory(snap):
    """Shared-memory segments from the serving stack are left in /dev/shm with nobody using them.

    ## Why
    vLLM's worker broadcast ring buffer and object storage are CPython
    `SharedMemory` segments (`/dev/shm/psm_<8 hex>`), NCCL's shared-memory transport uses
    `/dev/shm/nccl-*`. Their creator removes them when it exits cleanly; a killed process
    leaves them behind. /dev/shm is RAM (tmpfs): leftovers take memory and, in containers
    with a small /dev/shm, make the next run fail with NCCL "Error while creating shared
    memory segment" / "No space left on device". gpudoctor reports a file when no running
    process maps it (from /proc/PID/maps of its owner's processes) and it was not written
    in the last 10 s.

    ## Fix
    `gpudoctor fix` removes your own leftovers (checking again that nobody maps them), or
    `rm /dev/shm/psm_…`. Stop stale processes first (GD601): their segments become
    leftovers when they exit.

    ## References
    - https://man7.org/linux/man-pages/man5/proc.5.html
    """
    data = snap.value("processes.shm") or {}
    files = [f for f in data.get("files") or [] if isinstance(f, dict)]
    if not files:
        return None
    now = (snap.value("processes.scan") or {}).get("time")
    unverifiable = set(data.get("maps_unreadable_uids") or [])
    v = view(snap)
    leftovers, undecided = [], []
    for item in files:
        if item.get("in_use_by"):
            continue
        if isinstance(now, (int, float)) and isinstance(item.get("mtime"), (int, float)) and now - item["mtime"] < SHM_MIN_AGE:
            continue
        (undecided if item.get("uid") in unverifiable else leftovers).append(item)
    if not leftovers:
        return Unknown(f"cannot read every process's maps to tell whether {len(undecided)} shm file(s) are in use") if undecided else None
    if data.get("processes_hidden"):
        return Unknown(f"cannot tell whether {len(leftovers)} shm file(s) are in use: {data['processes_hidden']}")
    total = sum(int(item.get("size") or 0) for item in leftovers)

    def line(item):
        age = age_text(now - item["mtime"]) if isinstance(now, (int, float)) and isinstance(item.get("mtime"), (int, float)) else "?"
        return f"{item.get('name')} ({size_text(item.get('size'))}, {item.get('kind')}, user {item.get('user')}, last written {age} ago)"

    self_uid = v.self_uid if v else None
    foreign = [i for i in leftovers if self_uid is not None and self_uid != 0 and i.get("uid") != self_uid]
    paths = " ".join(shlex.quote(str(i.get("path"))) for i in leftovers)
    return Fail(
        f"{len(leftovers)} leftover shared-memory file(s) in {data.get('dir')} that no running process uses "
        f"({size_text(total)} of RAM): " + ", ".join(line(i) for i in leftovers[:8]) + (" …" if len(leftovers) > 8 else ""),
        [(str(i.get("path")), line(i)) for i in leftovers],
        Fix(
            "Remove them (your own ones: `gpudoctor fix` does it after checking again that nobody uses them).",
            ["gpudoctor fix", ("sudo " if foreign else "") + f"rm -f {paths}"],
            "safe",
            actions=[
                RemoveFile(str(i["path"]), int(i["dev"]), int(i["inode"]), int(i["uid"]), int(i.get("size") or 0), str(i.get("user", "")))
                for i in leftovers
                if all(isinstance(i.get(k), int) for k in ("dev", "inode", "uid")) and i.get("path")
            ],
        ),
        subject=str(data.get("dir", "")),
    )


@rule("GD604", "gpu-memory-invisible-process", severity=WARNING, area="processes",
      requires=("gpu.count", "processes.index"))
def gpu_memory_invisible_process(snap):
    """GPU memory is held by processes that are not visible from here.

    ## Why
    Inside a container (its own PID namespace) NVML shows memory used on a shared GPU but
    lists no process for it, or lists host PIDs that do not exist in the container: another
    container, a host process or another user's job holds it. It still counts against
    vLLM's `--gpu-memory-utilization` ("Free memory on device … is less than desired")
    and nothing inside the container can free it.

    ## Fix
    Look from the host: `nvidia-smi --query-compute-apps=pid,process_name,used_memory
    --format=csv`, then `ps -o pid,user,etime,args -p PID`; `docker top CONTAINER` or
    `crictl ps` tells which container runs it. Stop it there, or lower
    `--gpu-memory-utilization` to fit the memory that is free.

    ## References
    - https://github.com/NVIDIA/nvidia-docker/issues/179,
      https://github.com/NVIDIA/nvidia-docker/issues/1483 ("the nvidia-driver itself does not
      support pid-namespaces … you will always get the host pids"),
      https://github.com/NVIDIA/gpu-monitoring-tools/issues/63: inside a container NVML's PIDs
      are the host's, so gpudoctor joins them with the process table only in the initial PID
      namespace (/proc/self/ns/pid inode 0xEFFFFFFC).
    """
    v = view(snap)
    shares = gpu_shares(snap, v)
    if shares is None:
        return Unknown("no process table")
    container = snap.value("host.container")
    where = f" (this is a {container} container)" if container else ""
    fails = []
    for share in shares:
        if not share.hidden_reported:
            continue
        parts = []
        if share.hidden_pids and v is not None and not v.host_pids:
            parts.append(f"NVML lists PID {', '.join(map(str, share.hidden_pids))}: host PIDs, which the driver "
                         "does not translate into this container's PID namespace")
        elif share.hidden_pids:
            parts.append(f"NVML lists PID {', '.join(map(str, share.hidden_pids))}, which do(es) not exist in this PID namespace")
        if share.unlisted >= (1 << 30):
            parts.append(f"{gib(share.unlisted)} is not listed under any process")
        fails.append(
            Fail(
                f"GPU {share.index}: {gib(share.hidden)} in use by processes not visible here{where}: "
                + "; ".join(parts) + ". They run in another container or on the host",
                [f"gpu.{share.index}.memory_used", f"gpu.{share.index}.processes", "host.container"],
                Fix(
                    "Find the holder from the host and stop it there, or lower --gpu-memory-utilization.",
                    [
                        "nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv  # on the host",
                        "ps -o pid,user,etime,args -p PID  # on the host, PID from the line above",
                        "docker ps -q | xargs -n1 docker top  # which container runs it",
                    ],
                ),
                subject=f"GPU {share.index}",
            )
        )
    return fails


@rule("GD605", "zombie-serving-process", severity=WARNING, area="processes", requires=("processes.index",))
def zombie_serving_process(snap):
    """A serving process has exited but its parent never reaped it (a zombie, `<defunct>`).

    ## Why
    A zombie keeps only its PID, but it shows that its parent — usually a vLLM engine or
    API server — stopped looking after its children: the stack is half dead and will not
    serve. A zombie that NVML still lists with GPU memory means the driver has not finished
    tearing its context down. Zombies adopted by PID 1 or a subreaper are left out: those
    are reaped in a moment.

    ## Fix
    A zombie cannot be killed; its parent must reap it or exit. Stop the parent (if it is a
    stale serving process `gpudoctor fix` does it), then init reaps the zombie. Memory that
    stays on the GPU after that needs `sudo nvidia-smi -r -i N` or a reboot.

    ## References
    - proc(5), "/proc/PID/stat" state Z; wait(2), "a child that terminates, but has not been
      waited for becomes a zombie".
    - https://github.com/vllm-project/vllm/issues/25127 (an EngineCore stuck, GPU unusable
      until reboot).
    - https://man7.org/linux/man-pages/man5/proc.5.html
    """
    v = view(snap)
    if v is None:
        return Unknown("no process table")
    memory = gpu_memory_by_pid(snap, v)
    by_parent: Dict[int, List[Proc]] = {}
    for proc in v.procs.values():
        if not (proc.serving and proc.zombie):
            continue
        parent = v.procs.get(proc.ppid)
        adopted = proc.ppid <= 1 or (parent is not None and _is_subreaper(parent.comm) and not parent.serving)
        if adopted and proc.pid not in memory:
            continue  # init reaps it in a moment
        by_parent.setdefault(proc.ppid, []).append(proc)
    fails = []
    for ppid, zombies in sorted(by_parent.items()):
        parent = v.procs.get(ppid)
        holds = [z for z in zombies if z.pid in memory]
        names = ", ".join(f"{z.title} (PID {z.pid})" for z in sorted(zombies, key=lambda z: z.pid))
        who = f"PID {ppid} ({parent.title if parent.serving else parent.comm}, user {v.user(parent.uid)})" if parent else f"PID {ppid}"
        message = f"zombie serving process(es) {names}: exited, but the parent {who} has not reaped them"
        if holds:
            message += "; NVML still lists " + "; ".join(
                f"PID {z.pid} with " + ", ".join(f"{gib(size)} on GPU {i}" for i, size in sorted(memory[z.pid].items()))
                for z in holds
            )
        actions: List[StopProcess] = []
        if parent is not None and parent.pid in v.stale:
            actions = _stop_actions(v, [parent])
            message += "; the parent is stale (see GD601): stopping it lets init reap them"
        commands = [f"ps -o pid,ppid,stat,etime,args -p {','.join(str(z.pid) for z in zombies)},{ppid}"]
        if parent is not None and parent.pid > 1:
            commands.append(f"kill -TERM {parent.pid}  # the parent; init then reaps the zombies")
        fails.append(
            Fail(
                message,
                [(f"PID {z.pid}", v.describe(z)) for z in zombies] + ([(f"PID {ppid}", v.describe(parent))] if parent else []),
                Fix("Stop or restart the parent so the zombies are reaped.", commands, "disruptive", actions=actions),
                subject=f"PID {ppid}",
                severity=ERROR if holds else WARNING,
            )
        )
    return fails
