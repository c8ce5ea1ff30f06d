"""The host's limits and NVIDIA container plumbing: open-files limits, /dev/nvidia*, the container toolkit.

Stdlib only, every read bounded and guarded (a denied or vanished file is a reason, never a raise).
Called by probes/host.py (this process's facts) and probes/processes.py (a serving process's limit).

Facts (source "getrlimit" or the file read):
  host.nofile                    {soft, hard}: RLIMIT_NOFILE of this process (None = unlimited)
  host.nvidia_devices            {dev: ["nvidia0", "nvidiactl", "nvidia-uvm", …], proc_driver: bool}
  host.nvidia_container_toolkit  {docker: bool (a docker binary or /var/run/docker.sock),
                                  found: [paths of its binaries], daemon_json: path or None,
                                  daemon_json_nvidia: bool or None (None: not readable)}
"""

from __future__ import annotations

import os
import re
from typing import Any, Dict, List, Optional

from gpudoctor.snapshot import ABSENT, ERROR, Fact, missing, ok

# The binaries the NVIDIA Container Toolkit installs; Docker's --gpus finds the hook on PATH.
TOOLKIT_BINARIES = ("nvidia-container-runtime-hook", "nvidia-container-runtime", "nvidia-ctk", "nvidia-container-cli")
TOOLKIT_DIRS = ("/usr/bin", "/usr/local/bin", "/usr/sbin", "/bin")
DAEMON_JSON = ("/etc/docker/daemon.json",)
_LIMIT_LINE = re.compile(r"^Max open files\s+(?P<soft>\d+|unlimited)\s+(?P<hard>\d+|unlimited)\s+files", re.M)
_DEVICE = re.compile(r"^nvidia(?:\d+|ctl|-uvm|-uvm-tools|-modeset|-caps)$")


def parse_limits(text: str) -> Optional[Dict[str, Optional[int]]]:
    """The 'Max open files' line of /proc/PID/limits -> {soft, hard} (None = unlimited)."""
    m = _LIMIT_LINE.search(text or "")
    if not m:
        return None
    return {key: None if m.group(key) == "unlimited" else int(m.group(key)) for key in ("soft", "hard")}


def read_nofile(proc: str, pid: int) -> Optional[Dict[str, Optional[int]]]:
    """RLIMIT_NOFILE of another process from PROC/PID/limits (world-readable), or None."""
    try:
        with open(f"{proc}/{pid}/limits", "r", encoding="ascii", errors="replace") as handle:
            return parse_limits(handle.read(8192))
    except OSError:
        return None


def nofile(ctx) -> Fact:
    if ctx.live:
        try:
            import resource  # POSIX only; absent on Windows

            soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        except (ImportError, OSError, ValueError) as exc:
            return missing(ERROR, f"getrlimit(RLIMIT_NOFILE) failed: {exc}", "getrlimit")
        infinity = getattr(resource, "RLIM_INFINITY", -1)
        value = {"soft": None if soft == infinity else soft, "hard": None if hard == infinity else hard}
        return ok(value, "getrlimit")
    parsed = parse_limits(ctx.read_text("/proc/self/limits", limit=8192) or "")
    if parsed is None:
        return missing(ABSENT, "no 'Max open files' line in /proc/self/limits", "/proc/self/limits")
    return ok(parsed, "/proc/self/limits")


def nvidia_devices(ctx) -> Fact:
    try:
        names = sorted(name for name in os.listdir(ctx.path("/dev")) if _DEVICE.match(name))[:64]
    except OSError as exc:
        return missing(ABSENT, f"cannot list /dev: {exc.strerror or exc}", "/dev")
    proc_driver = os.path.isdir(ctx.path("/proc/driver/nvidia"))
    return ok({"dev": names, "proc_driver": proc_driver}, "/dev, /proc/driver/nvidia")


def container_toolkit(ctx) -> Fact:
    found: List[str] = []
    dirs = list(TOOLKIT_DIRS) + [d for d in (ctx.environ.get("PATH") or "").split(os.pathsep)[:32] if d.startswith("/")]
    for name in TOOLKIT_BINARIES:
        for directory in dict.fromkeys(dirs):
            path = os.path.join(directory, name)
            if os.path.isfile(ctx.path(path)):
                found.append(path)
                break
    docker = os.path.exists(ctx.path("/var/run/docker.sock")) or any(
        os.path.isfile(ctx.path(os.path.join(d, "docker"))) for d in dict.fromkeys(dirs)
    )
    value: Dict[str, Any] = {"docker": docker, "found": found, "daemon_json": None, "daemon_json_nvidia": None}
    for path in DAEMON_JSON:
        if os.path.exists(ctx.path(path)):
            value["daemon_json"] = path
            text = ctx.read_text(path, limit=1 << 16)
            value["daemon_json_nvidia"] = None if text is None else bool(re.search(r'"nvidia"\s*:', text))
            break
    return ok(value, f"{', '.join(TOOLKIT_DIRS)}, PATH, {DAEMON_JSON[0]}")


def collect(ctx) -> Dict[str, Fact]:
    return {
        "host.nofile": nofile(ctx),
        "host.nvidia_devices": nvidia_devices(ctx),
        "host.nvidia_container_toolkit": container_toolkit(ctx),
    }
