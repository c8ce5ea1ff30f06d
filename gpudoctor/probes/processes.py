"""Processes: serving stacks, orphans and zombies, the serving port, leftover shared memory.

Reads ``ROOT/proc`` directly, in one pass: per process one read of ``/proc/PID/stat``
(comm, state, ppid, process group, flags, start time), one ``stat()`` of ``/proc/PID``
(owner) and, for userland processes, one read of ``/proc/PID/cmdline``. That is what
``psutil.process_iter(attrs=[name, cmdline, ppid, uids, create_time, status])`` reads too,
without building a Process object per PID and parsing ``/proc/PID/status`` for the uids:
0.05 s instead of 0.23 s for 2,000 processes on a two-core box
(benchmarks/process_probe.py). Reading through ``ctx.path`` also lets tests use fake roots
(a ``proc`` symlink to the real one, or garbage text). Kernel threads are counted, not
recorded.

NVML's per-GPU PIDs (``gpu.N.processes``) come from the gpus probe, which runs in another
thread at the same time: this probe cannot read them, so it records a compact line for
every userland process and the rules join the two.

Facts (source "/proc"):
  processes.scan     {time, boot_time, clk_tck, count, pid_namespace: {inode, initial},
                      kernel_threads, vanished, unreadable}
  processes.self     {pid, uid, user, ancestors}: the doctor and its ancestors, never touched
  processes.index    {"PID": [ppid, uid, state, comm, create_time]} for userland processes
  processes.users    {"UID": name}
  processes.serving  [{pid, ppid, pgid, uid, user, state, comm, title, cmdline (secrets
                       masked), start_ticks, create_time, stack, role}] for vLLM / SGLang /
                       llama.cpp processes (stack: vllm | sglang | llama.cpp)
  processes.port     {port, listeners: [{address, family, uid, inode, pids}]} (ROOT/proc/net/tcp*)
  processes.shm      {dir, files: [{name, path, kind, size, uid, user, mtime, dev, inode, in_use_by,
                      creator_pid (SGLang's PID-stamped names)}],
                      maps_unreadable_uids, maps_unreadable_pids}

Anything can vanish or deny access between two reads: a process that is gone is
counted in ``vanished``, one that cannot be read in ``unreadable``; nothing here raises.

One process's reads are in procfs.py, the serving port's listeners in listeners.py; this module
classifies, records, and finds leftover shared memory.
"""

from __future__ import annotations

import os
import re
import stat as stat_module
import time
from typing import Any, Dict, Iterable, List, Optional, Set, Tuple

from gpudoctor.probes import host_limits
from gpudoctor.probes.listeners import _port
from gpudoctor.probes.procfs import COMM_LEN, SOURCE, ancestors, boot_time, clock_ticks, parse_stat, pid_namespace, read_argv, read_stat
# Read from here by gpudoctor fix, the smoke check and the tests (their home is the module named):
from gpudoctor.probes.listeners import listeners_netlink as listeners_netlink, listening_processes as listening_processes
from gpudoctor.probes.listeners import matching_processes as matching_processes, parse_net_tcp as parse_net_tcp, process_name as process_name
from gpudoctor.probes.procfs import read_uids as read_uids
from gpudoctor.snapshot import ABSENT, ERROR, NO_PERMISSION, Fact, missing, ok

TITLE_LIMIT = 512  # characters of a serving process's command line kept in the snapshot

# Process titles set with setproctitle: "{prefix}::{name}" (vLLM's process naming). vLLM's default
# prefix is VLLM (VLLM_PROCESS_NAME_PREFIX changes it; forks use e.g. "vLLM-Omni::");
# SGLang uses "sglang::scheduler_TP0", "sglang::detokenizer", ...
TITLE = re.compile(r"^(?P<prefix>[A-Za-z][\w.-]{0,30})::(?P<name>.*)$", re.S)
# Exact prefixes only: "vllm_bench::runner" or "vllmtools::cleanup" are someone else's processes,
# and `gpudoctor fix` stops what is classified here (issue 14).
VLLM_PREFIXES = ("VLLM", "vLLM-Omni")
# SGLang 0.5.23's titles (setproctitle): srt/managers/scheduler.py "sglang::scheduler" + "_DP<n>_PP<n>_ATTN_CP<n>
# _MOE_DP<n>_TP<n>_EP<n>" (parts only when used), detokenizer_manager.py "sglang::detokenizer",
# data_parallel_controller.py "sglang::data_parallel_controller", multi_tokenizer_mixin.py
# "sglang::detokenizer_router" / "sglang::tokenizer_worker:<pid>", and its diffusion runtime
# (multimodal_gen/runtime/managers/gpu_worker.py) "sgl_diffusion::scheduler_<rank>".
SGLANG_PREFIX = re.compile(r"^(?:sglang|sgl_diffusion)$")
# The names vLLM gives its processes (vllm/utils/system_utils.py set_process_title(name, suffix)
# -> "{prefix}::{name}_{suffix}"): v1/engine/core.py "EngineCore" / "EngineCore_DP<n>",
# v1/executor/multiproc_executor.py "Worker" / "Worker_DP0_PP0_TP1_EP0" (parts only when > 1),
# entrypoints/cli/serve.py "APIServer_<n>", v1/engine/coordinator.py "DPCoordinator".
VLLM_NAME = re.compile(r"EngineCore(_DP\d+)?|Worker(_(?:DP|PP|TP|PCP|DCP|EP)\d+)*|APIServer(_\d+)?|DPCoordinator")
VLLM_STEMS = ("EngineCore", "Worker", "APIServer", "DPCoordinator")

# Secrets on a command line: the value after these options is masked before it is stored.
SECRET_OPTIONS = re.compile(r"(?i)^--?(api[-_]?key|hf[-_]?token|token|password|secret)(=.*)?$")

# shm files left by the serving stack: CPython SharedMemory (vLLM's
# broadcast ring buffer and object storage) is "psm_" + 8 hex digits; NCCL's SHM
# transport is "nccl-XXXXXX" (older NCCL: "nccl-shm-recv-…").
SHM_PATTERNS = (
    (re.compile(r"^psm_[0-9a-f]{8}$"), "python_shared_memory"),
    (re.compile(r"^nccl-[\w.-]+$"), "nccl"),
    # SGLang 0.5.23 (srt/utils/stale_shm_cleanup.py make_shm_name: "sgl_shm_<kind>_<pid>_<8 hex>",
    # the multimodal inputs and the node check; managers/multi_tokenizer_mixin.py
    # "multi_tokenizer_args_<pid>"; managers/load_snapshot.py "sglang_loads_<name>_<8 hex>.shm";
    # mem_cache/storage/mmap/mmap_allocator.py "sglang_host_pool_<32 hex>.mmap").
    (re.compile(r"^sgl_shm_\w+_\d+_[0-9a-f]{8}$"), "sglang_shared_memory"),
    (re.compile(r"^multi_tokenizer_args_\d+$"), "sglang_shared_memory"),
    (re.compile(r"^sglang_loads_[\w.-]*_[0-9a-f]{8}\.shm$"), "sglang_load_snapshot"),
    (re.compile(r"^sglang_host_pool_[0-9a-f]{32}\.mmap$"), "sglang_host_pool"),
)
# The PID SGLang stamps into a segment's name is its creator's (the server's main process for
# multi_tokenizer_args_<pid>): while that process lives the segment is not left over, mapped or
# not (SGLang's own sweep, stale_shm_cleanup._creator_pid, keeps it too).
SHM_CREATOR = re.compile(r"^(?:sgl_shm_\w+_(?P<a>\d+)_[0-9a-f]{8}|multi_tokenizer_args_(?P<b>\d+))$")


# --- classifying -------------------------------------------------------------------------------
def classify(comm: str, argv: List[str], extra_prefix: str = "") -> Optional[Tuple[str, str, str]]:
    """(stack, role, title) for a serving-stack process, else None.

    Roles: "launcher" (vllm serve, python -m vllm.entrypoints…, sglang launch_server,
    llama-server) may legitimately run under init (systemd, a container's entrypoint);
    "engine_core", "worker", "api_server", "coordinator", "helper" are children a launcher
    starts, and are stale once that launcher is gone. The title is the full setproctitle
    title from the command line when there is one (comm is cut at 15 bytes: VLLM::EngineCor).
    """
    for from_comm, candidate in ((False, argv[0] if argv else ""), (True, comm)):
        match = TITLE.match(candidate)
        if not match:
            continue
        prefix, name = match.group("prefix"), match.group("name")
        if prefix in VLLM_PREFIXES or (extra_prefix and prefix == extra_prefix):
            cut = from_comm and len(comm.encode("utf-8", "replace")) >= COMM_LEN
            if _vllm_name(name, cut):
                return "vllm", _vllm_role(name), candidate
            continue
        if SGLANG_PREFIX.match(prefix):
            return "sglang", _sglang_role(name), candidate
    launcher = _launcher(argv, comm)
    if launcher:
        return launcher, "launcher", comm
    return None


def _vllm_name(name: str, cut: bool) -> bool:
    """One of vLLM's own process names; ``cut``: from comm, where only the first bytes survive."""
    if VLLM_NAME.fullmatch(name):
        return True
    if not cut or not name:
        return False
    for stem in VLLM_STEMS:
        if stem.startswith(name) or (name.startswith(stem) and re.fullmatch(r"[_A-Z0-9]*", name[len(stem):])):
            return True
    return False


def _vllm_role(name: str) -> str:
    # Prefixes short enough to survive comm's 15 bytes: "VLLM::EngineCor", "VLLM::DPCoordin".
    for start, role in (("EngineCor", "engine_core"), ("Worker", "worker"), ("APIServ", "api_server"),
                        ("DPCoord", "coordinator")):
        if name.startswith(start):
            return role
    return "helper"


def _sglang_role(name: str) -> str:
    low = name.lower()
    if low.startswith("schedul") or "scheduler" in low or "worker" in low or "runner" in low:  # comm keeps "sglang::schedul"
        return "worker" if "tokenizer" not in low else "helper"
    return "helper"


def _launcher(argv: List[str], comm: str) -> Optional[str]:
    if comm == "llama-server" or (argv and os.path.basename(argv[0]) == "llama-server"):
        return "llama.cpp"
    for position in (0, 1):  # "vllm serve …" or "/usr/bin/python3 /…/bin/vllm serve …"
        if len(argv) > position + 1 and argv[position + 1] == "serve":
            base = os.path.basename(argv[position])
            if base in ("vllm", "sglang"):
                return base
    for position, word in enumerate(argv[:4]):
        if word == "-m" and position + 1 < len(argv):
            module = argv[position + 1]
            if module.startswith("vllm.entrypoints"):
                return "vllm"
            if module in ("sglang.launch_server", "sglang.launch_server_grpc"):
                return "sglang"
    return None


def mask_secrets(argv: List[str]) -> List[str]:
    out: List[str] = []
    hide_next = False
    for word in argv:
        if hide_next:
            out.append("***")
            hide_next = False
            continue
        match = SECRET_OPTIONS.match(word)
        if match:
            if match.group(2):
                out.append(word.split("=", 1)[0] + "=***")
            else:
                out.append(word)
                hide_next = True
            continue
        out.append(word)
    return out


# --- the probe -----------------------------------------------------------------------------------
def collect(ctx) -> Dict[str, Fact]:
    proc = ctx.path("/proc")
    facts: Dict[str, Fact] = {}
    started = time.monotonic()
    try:
        entries = [int(name) for name in os.listdir(proc) if name.isdigit()]
    except OSError as exc:
        reason = missing(ABSENT, f"cannot list {proc}: {exc.strerror or exc}", SOURCE)
        for key in ("scan", "self", "index", "users", "serving", "port", "shm"):
            facts[f"processes.{key}"] = reason
        return facts

    btime = boot_time(proc)
    hz = clock_ticks()
    extra_prefix = (ctx.environ.get("VLLM_PROCESS_NAME_PREFIX") or "").strip()
    index: Dict[str, List[Any]] = {}
    serving: List[Dict[str, Any]] = []
    uids: Set[int] = set()
    kernel_threads = vanished = unreadable = 0
    for pid in entries:
        base = f"{proc}/{pid}"
        try:
            with open(base + "/stat", "rb") as handle:
                data = handle.read(4096)
            owner = os.stat(base).st_uid
        except FileNotFoundError:
            vanished += 1
            continue
        except OSError:
            unreadable += 1
            continue
        st = parse_stat(pid, data)
        if st is None:
            unreadable += 1
            continue
        if st.kernel_thread:
            kernel_threads += 1
            continue
        created = round(btime + st.start_ticks / hz, 2) if btime is not None else None
        index[str(pid)] = [st.ppid, owner, st.state, st.comm, created]
        uids.add(owner)
        argv = read_argv(proc, pid)
        if argv is None:
            argv = []  # vanished or denied between the two reads: classify on comm alone
        found = classify(st.comm, argv, extra_prefix)
        if found:
            stack, role, title = found
            serving.append(
                {
                    "pid": pid, "ppid": st.ppid, "pgid": st.pgid, "uid": owner, "state": st.state,
                    "comm": st.comm, "title": title[:TITLE_LIMIT],
                    "cmdline": " ".join(mask_secrets(argv))[:TITLE_LIMIT],
                    "start_ticks": st.start_ticks, "create_time": created, "stack": stack, "role": role,
                }
            )
    users = _user_names(uids)
    for number, record in enumerate(serving):
        record["user"] = users.get(str(record["uid"]), str(record["uid"]))
        if number < 64:  # its open-files limit (rule GD320); /proc/PID/limits is world-readable
            record["nofile"] = host_limits.read_nofile(proc, record["pid"])
    now = time.time()
    facts["processes.scan"] = ok(
        {"time": round(now, 2), "boot_time": btime, "clk_tck": hz, "count": len(index), "pid_namespace": pid_namespace(proc),
         "kernel_threads": kernel_threads, "vanished": vanished, "unreadable": unreadable,
         "elapsed_s": round(time.monotonic() - started, 4)},
        SOURCE,
    )
    me = os.getpid()
    facts["processes.self"] = ok(
        {"pid": me, "uid": os.geteuid(), "user": _user_names({os.geteuid()}).get(str(os.geteuid())),
         "ancestors": ancestors(proc, me)},
        SOURCE,
    )
    facts["processes.index"] = ok(index, SOURCE, f"{len(index)} userland processes, {kernel_threads} kernel threads")
    facts["processes.users"] = ok(users, "pwd")
    facts["processes.serving"] = ok(sorted(serving, key=lambda r: r["pid"]), SOURCE)
    facts["processes.port"] = _port(ctx, proc, index, serving)
    facts["processes.shm"] = _shm(ctx, proc, index)
    return facts


def _user_names(uids: Iterable[int]) -> Dict[str, str]:
    try:
        import pwd
    except ImportError:  # not on Linux
        return {}
    names: Dict[str, str] = {}
    for uid in uids:
        try:
            names[str(uid)] = pwd.getpwuid(uid).pw_name
        except (KeyError, OverflowError):
            names[str(uid)] = str(uid)
    return names


# --- leftover shared memory -----------------------------------------------------------------------
def shm_kind(name: str) -> Optional[str]:
    for pattern, kind in SHM_PATTERNS:
        if pattern.match(name):
            return kind
    return None


def shm_creator(name: str) -> Optional[int]:
    match = SHM_CREATOR.match(name)
    if not match:
        return None
    pid = int(match.group("a") or match.group("b"))
    return pid if pid > 0 else None


def mapped_paths(proc: str, pid: int, paths: Set[str]) -> Optional[Set[str]]:
    """Which of ``paths`` /proc/PID/maps shows mapped; None when maps cannot be read."""
    found: Set[str] = set()
    try:
        with open(f"{proc}/{pid}/maps", "rb") as handle:
            for line in handle:
                if b"/" not in line:
                    continue
                path = line.split(None, 5)[-1].rstrip(b"\n").decode("utf-8", "replace")
                if path in paths:
                    found.add(path)
    except OSError:
        return None
    return found


# The initial (host) PID namespace has this fixed inode: PROC_PID_INIT_INO in include/linux/proc_ns.h.
HOST_PID_NS = "pid:[4026531836]"


def pid_namespace_problem(proc: str) -> str:
    """Why this process cannot see every process on the host ("" when it can).

    A /dev/shm segment can be mapped by any process sharing that tmpfs: a container started
    with --ipc=host, or a private PID namespace around gpudoctor, hides the processes that use
    it, and "no process maps it" would be a lie.
    """
    try:
        ns = os.readlink(f"{proc}/self/ns/pid")
    except OSError as exc:
        return f"cannot tell which PID namespace gpudoctor runs in ({exc.strerror or exc})"
    if ns != HOST_PID_NS:
        return (f"gpudoctor runs in a private PID namespace ({ns}, e.g. a container): processes outside it "
                "that may map this segment are invisible from here")
    return ""


def init_is_serving(proc: str) -> bool:
    st = read_stat(proc, 1)
    return st is not None and classify(st.comm, read_argv(proc, 1) or []) is not None


def shm_users(proc: str, paths: Set[str], pids: Iterable[int]) -> Tuple[Dict[str, List[int]], Set[int]]:
    """path -> PIDs that map it, and the PIDs whose maps could not be read.

    PID 1 whose maps cannot be read does not count as "unreadable" unless it is a serving
    process: init (or a container's entrypoint) does not map these segments, and sandboxes
    hide its maps even from root.
    """
    users: Dict[str, List[int]] = {}
    unreadable: Set[int] = set()
    for pid in pids:
        found = mapped_paths(proc, pid, paths)
        if found is None:
            if os.path.exists(f"{proc}/{pid}") and (pid != 1 or init_is_serving(proc)):
                unreadable.add(pid)  # (a process that exited meanwhile maps nothing)
            continue
        for path in found:
            users.setdefault(path, []).append(pid)
    return users, unreadable


def _shm(ctx, proc: str, index: Dict[str, List[Any]]) -> Fact:
    directory = ctx.path("/dev/shm")
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return missing(ABSENT, f"no {directory}", "/dev/shm")
    except OSError as exc:
        status = NO_PERMISSION if isinstance(exc, PermissionError) else ERROR
        return missing(status, f"{directory}: {exc.strerror or exc}", "/dev/shm")
    files: List[Dict[str, Any]] = []
    for name in names:
        kind = shm_kind(name)
        if kind is None:
            continue
        path = os.path.join(directory, name)
        try:
            info = os.lstat(path)
        except OSError:
            continue  # removed meanwhile
        if not stat_module.S_ISREG(info.st_mode):
            continue
        item = {"name": name, "path": path, "kind": kind, "size": info.st_size, "uid": info.st_uid,
                "mtime": round(info.st_mtime, 2), "dev": info.st_dev, "inode": info.st_ino, "in_use_by": []}
        creator = shm_creator(name)
        if creator is not None:
            item["creator_pid"] = creator
        files.append(item)
    unreadable_uids: List[int] = []
    unreadable_pids: List[int] = []
    if files:
        # Only processes of the files' owners can map them (the files are 0600 by default).
        owners = {item["uid"] for item in files}
        pids = [int(pid) for pid, row in index.items() if row[1] in owners and row[2] not in ("Z", "X")]
        users, unreadable = shm_users(proc, {item["path"] for item in files}, pids)
        for item in files:
            item["in_use_by"] = sorted(users.get(item["path"], []))
        unreadable_uids = sorted({index[str(pid)][1] for pid in unreadable if str(pid) in index})
        unreadable_pids = sorted(unreadable)
    names_by_uid = _user_names({item["uid"] for item in files})
    for item in files:
        item["user"] = names_by_uid.get(str(item["uid"]), str(item["uid"]))
    value = {"dir": directory, "files": sorted(files, key=lambda f: f["name"]), "maps_unreadable_uids": unreadable_uids,
             "maps_unreadable_pids": unreadable_pids[:50]}
    hidden = pid_namespace_problem(proc) if files and ctx.live else ""
    if hidden:  # processes in other PID namespaces may map these files: "unused" cannot be known here
        value["processes_hidden"] = hidden
    return ok(value, "/dev/shm, /proc/PID/maps")
