"""The host: OS, kernel, glibc, CPUs, RAM, container hints, /dev/shm, relevant environment.

``host.hostname`` and ``host.user`` are recorded so that ``--anonymize`` knows which words
to hash (gpudoctor/redact.py); they are never judged by a rule.
"""

from __future__ import annotations

import os
import re
from typing import Dict, Mapping

from gpudoctor.probes import host_limits
from gpudoctor.snapshot import ABSENT, ERROR, Fact, missing, ok

# Environment variables worth recording, by prefix. Anything secret-looking is dropped
# even when its prefix matches (HF_TOKEN, VLLM_API_KEY ...).
ENV_PREFIXES = ("CUDA_", "NVIDIA_", "NCCL_", "VLLM_", "TORCH_", "PYTORCH_", "HF_", "TRANSFORMERS_", "FLASH_ATTN")
ENV_NAMES = ("LD_LIBRARY_PATH", "PATH", "LIBRARY_PATH", "MAX_JOBS", "OMP_NUM_THREADS", "CUDAHOSTCXX", "CC", "CXX")
SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|APIKEY|CREDENTIAL|PRIVATE", re.I)


def collect(ctx) -> Dict[str, Fact]:
    facts: Dict[str, Fact] = {}
    facts["host.os"] = _os_release(ctx)
    facts["host.hostname"] = ok(os.uname().nodename, "uname") if ctx.live else _file_line(ctx, "/proc/sys/kernel/hostname")
    facts["host.user"] = _user(ctx)
    facts["host.kernel"] = ok(os.uname().release, "uname") if ctx.live else _file_line(ctx, "/proc/sys/kernel/osrelease")
    facts["host.arch"] = ok(os.uname().machine, "uname")
    facts["host.glibc"] = _glibc()
    facts["host.cpus"] = _cpus(ctx)
    facts["host.memory_total"] = _meminfo(ctx, "MemTotal")
    facts["host.memory_available"] = _meminfo(ctx, "MemAvailable")
    facts["host.container"] = _container(ctx)
    facts["host.shm_total"] = _statvfs_total(ctx, "/dev/shm")
    facts.update(host_limits.collect(ctx))  # open-files limit, /dev/nvidia*, the container toolkit
    facts["env"] = ok(relevant_env(ctx.environ), "environ")
    return facts


def relevant_env(environ: Mapping[str, str]) -> Dict[str, str]:
    return {
        name: value
        for name, value in sorted(environ.items())
        if (name in ENV_NAMES or name.startswith(ENV_PREFIXES)) and not SECRET_NAME.search(name)
    }


def _os_release(ctx) -> Fact:
    for path in ("/etc/os-release", "/usr/lib/os-release"):
        text = ctx.read_text(path)
        if text is None:
            continue
        fields = dict(
            (key, value.strip().strip('"'))
            for key, _, value in (line.partition("=") for line in text.splitlines())
            if key and value
        )
        name = fields.get("PRETTY_NAME") or " ".join(filter(None, (fields.get("NAME"), fields.get("VERSION_ID"))))
        return ok(name or "unknown", path)
    return missing(ABSENT, "no /etc/os-release", "/etc/os-release")


def _user(ctx) -> Fact:
    """The user gpudoctor runs as (the account that owns the processes it can stop)."""
    try:
        import pwd

        uid = os.geteuid()
        return ok(pwd.getpwuid(uid).pw_name, "getpwuid", f"uid {uid}")
    except (ImportError, KeyError, OSError, AttributeError):
        name = ctx.environ.get("USER") or ctx.environ.get("LOGNAME")
        return ok(name, "environ") if name else missing(ABSENT, "no passwd entry and no USER", "getpwuid")


def _file_line(ctx, path: str) -> Fact:
    text = ctx.read_text(path)
    if text is None:
        return missing(ABSENT, f"cannot read {path}", path)
    return ok(text.strip().splitlines()[0] if text.strip() else "", path)


def _glibc() -> Fact:
    try:
        value = os.confstr("CS_GNU_LIBC_VERSION")  # "glibc 2.39"
    except (ValueError, OSError, AttributeError):
        value = None
    if not value:
        return missing(ABSENT, "not a glibc system", "confstr")
    return ok(value.split()[-1], "confstr")


def _cpus(ctx) -> Fact:
    if not ctx.live:
        text = ctx.read_text("/proc/cpuinfo") or ""
        count = sum(1 for line in text.splitlines() if line.startswith("processor"))
        return ok(count, "/proc/cpuinfo") if count else missing(ABSENT, "no /proc/cpuinfo", "/proc/cpuinfo")
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = os.cpu_count() or 0
    return ok(usable, "sched_getaffinity", f"{os.cpu_count()} online")


def _meminfo(ctx, key: str) -> Fact:
    text = ctx.read_text("/proc/meminfo")
    if text is None:
        return missing(ABSENT, "cannot read /proc/meminfo", "/proc/meminfo")
    match = re.search(rf"^{key}:\s+(\d+)\s*kB", text, re.M)
    if not match:
        return missing(ERROR, f"no {key} line in /proc/meminfo", "/proc/meminfo")
    return ok(int(match.group(1)) * 1024, "/proc/meminfo")


def _container(ctx) -> Fact:
    """Which container runtime (if any) this looks like; None means bare metal or VM."""
    hints = []
    if os.path.exists(ctx.path("/.dockerenv")):
        hints.append("docker")
    if os.path.exists(ctx.path("/run/.containerenv")):
        hints.append("podman")
    if ctx.environ.get("KUBERNETES_SERVICE_HOST"):
        hints.append("kubernetes")
    cgroup = ctx.read_text("/proc/1/cgroup") or ""
    for word in ("docker", "kubepods", "containerd", "lxc"):
        if word in cgroup and word not in hints:
            hints.append(word)
    if ctx.environ.get("container"):
        hints.append(ctx.environ["container"])
    return ok(", ".join(dict.fromkeys(hints)) or None, "/.dockerenv, /proc/1/cgroup, environ")


def _statvfs_total(ctx, path: str) -> Fact:
    try:
        st = os.statvfs(ctx.path(path))
    except OSError as exc:
        return missing(ABSENT, f"{path}: {exc.strerror}", "statvfs")
    return ok(st.f_blocks * st.f_frsize, "statvfs", f"{st.f_bavail * st.f_frsize} bytes free")
