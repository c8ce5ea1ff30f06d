"""GD6xx: processes — stale serving stacks, zombies, the serving port, leftover shared
memory, and GPU memory held by processes this namespace cannot see.

The facts come from two probes that run at the same time: NVML's per-GPU PIDs
(``gpu.N.processes``, probes/nvml.py) and the process table (``processes.*``,
probes/processes.py), joined in rules/process_view.py.

Who reports which GPU memory (so that no two findings say the same thing):
GD601 the memory of stale serving processes, GD605 that of zombies, GD604 memory no
visible process holds, and GD302 (rules/gpu.py) what is left: memory of live, visible
processes — a running server, a notebook, another user's job — named with user and age.
"""

from __future__ import annotations

import shlex
from typing import Any, Dict, List

from gpudoctor.actions import RemoveFile, StopProcess
from gpudoctor.rule import ERROR, INFO, WARNING, Fail, Fix, Unknown, rule
from gpudoctor.snapshot import gib

from .process_view import (
    Proc, _gpu_note, _is_subreaper, _kill_commands, _stop_actions, age_text, gpu_memory_by_pid, gpu_shares, size_text, view,
)

# A leftover shm file must also be this old (seconds since its last write): a process that
# is starting may not have mapped its segment yet.
SHM_MIN_AGE = 10.0

ROLE_NAMES = {"launcher": "server", "engine_core": "engine core", "worker": "worker", "api_server": "API server",
              "coordinator": "coordinator", "helper": "helper"}


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
    a container entrypoint) and an engine under a live script (offline `LLM()`) are fine; so
    is one whose parent is a Python PID 1 (the user's script as a container's entrypoint
    running `sgl.Engine` or `LLM()`) while it stays in PID 1's process group, which an
    adopted orphan of a launcher started from a shell does not. SGLang's children are
    `sglang::scheduler[_DP<n>…_TP<n>_EP<n>]`, `sglang::detokenizer`,
    `sglang::data_parallel_controller` (the schedulers' parent under plain DP),
    `sglang::detokenizer_router` and `sglang::tokenizer_worker:<pid>`; they ask for SIGKILL
    when their parent dies, and those that outlive it anyway are reported the same way.
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
    - https://github.com/sgl-project/sglang/blob/main/python/sglang/srt/managers/scheduler.py
      (`setproctitle(f"sglang::scheduler{prefix}")`, `kill_itself_when_parent_died()`).
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

    ## Severity
    An error when a stale serving process (GD601) holds the port; a warning when another
    process, or one not visible here, holds it; info when a running server holds it (probably
    the one you mean).
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
    `/dev/shm/nccl-*`. SGLang names its own: `sgl_shm_<kind>_<pid>_<hex>` (multimodal
    inputs, the node check), `multi_tokenizer_args_<pid>`, `sglang_loads_*.shm` (load
    snapshots), `sglang_host_pool_*.mmap` (the host KV pool); one stamped with a PID is
    kept while that process runs, as SGLang's own sweep does. Their creator removes them when it exits cleanly; a killed process
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
    - https://github.com/sgl-project/sglang/blob/main/python/sglang/srt/utils/stale_shm_cleanup.py
      (SGLang's names, and why its segments leak: SIGKILL skips every unlink)
    """
    data = snap.value("processes.shm") or {}
    files = [f for f in data.get("files") or [] if isinstance(f, dict)]
    if not files:
        return None
    now = (snap.value("processes.scan") or {}).get("time")
    unverifiable = set(data.get("maps_unreadable_uids") or [])
    v = view(snap)
    leftovers, undecided = [], []
    index = snap.value("processes.index") or {}
    for item in files:
        if item.get("in_use_by"):
            continue
        if isinstance(item.get("creator_pid"), int) and (str(item["creator_pid"]) in index or not isinstance(index, dict) or not index):
            continue  # SGLang's PID-stamped segment whose creator still runs (or no table to tell)
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
