"""The GPU fabric (NVSwitch systems): each GPU's registration state, and the fabric manager.

On an HGX/NVSwitch machine every CUDA call fails with error 802 "system not yet initialized"
until the fabric manager has registered the GPUs with the fabric; NVML says how far that got
(nvmlDeviceGetGpuFabricInfo: not started / in progress / completed, and the registration's
own status). That call crashed pynvml's process with SIGSEGV on the real H200 (ground_truth/
h200/fabric), so it runs in a child (``python -m gpudoctor.probes.nvml fabric``) under the
check's deadline: a crash there costs this fact only. The child runs only where a fabric can
exist: two or more GPUs with NVLink (a machine without NVLink has no NVSwitch fabric); the
1-GPU H200 pays nothing.

Facts:
  gpu.N.fabric      {"state": completed|in_progress|not_started|not_supported, "status",
                     "status_name", "clique"} (source "nvml (child)")
  fabric.manager    {"installed": bool, "running": bool}: the nv-fabricmanager binary and process
  fabric.reason     why the fabric was not read (not_supported / error), when it was not

References: https://docs.nvidia.com/datacenter/tesla/fabric-manager-user-guide/index.html;
https://docs.nvidia.com/deploy/nvml-api/ (nvmlDeviceGetGpuFabricInfo, nvmlGpuFabricState_t).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Callable, Dict, Mapping, Optional

from gpudoctor.snapshot import ERROR, NOT_SUPPORTED, TIMEOUT, Fact, missing, ok

SOURCE = "nvml (child)"
CHILD_TIMEOUT = 3.0  # NVML init (~0.1 s on an H200) plus one call per GPU
FM_BINARIES = ("/usr/bin/nv-fabricmanager", "/usr/sbin/nv-fabricmanager")


def needed(facts: Mapping[str, Fact]) -> Optional[str]:
    """None when the fabric may exist here, else why it cannot (no child is started then)."""
    count = facts.get("gpu.count")
    if count is None or not count.ok:
        return "GPUs were not enumerated"
    if count.value < 2:
        return f"{count.value} GPU: no NVSwitch fabric"
    if not any((facts.get(f"gpu.{i}.nvlink_links") or missing(ERROR, "")).ok for i in range(count.value)):
        return "no NVLink on these GPUs: no NVSwitch fabric"
    return None


def collect(ctx, facts: Mapping[str, Fact], run: Optional[Callable[..., Any]] = None) -> Dict[str, Fact]:
    why = needed(facts)
    if why is not None:
        return {"fabric.reason": missing(NOT_SUPPORTED, why, "gpudoctor")}
    out: Dict[str, Fact] = {"fabric.manager": _manager(ctx)}
    if run is None:
        from gpudoctor import runner

        run = runner.run
    package_parent = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, LC_ALL="C", PYTHONPATH=os.pathsep.join(filter(None, (package_parent, os.environ.get("PYTHONPATH")))))
    done = run([sys.executable, "-m", "gpudoctor.probes.nvml", "fabric"], timeout=CHILD_TIMEOUT, env=env, deadline=ctx.deadline)
    out.update(parse(done))
    return out


def parse(done: Any) -> Dict[str, Fact]:
    """The child's answer as facts; a crash, a timeout or garbage is ``fabric.reason``."""
    code = done.returncode
    if done.status == TIMEOUT:
        return {"fabric.reason": missing(TIMEOUT, f"the fabric-info child did not answer: {done.detail}", SOURCE)}
    if isinstance(code, int) and code < 0:
        return {"fabric.reason": missing(ERROR, f"NVML's fabric-info call killed its reader (signal {-code}); the check went on", SOURCE)}
    try:
        answer = json.loads(done.stdout)
        assert isinstance(answer, dict)
    except (ValueError, AssertionError):
        tail = (done.stderr or done.detail or "").strip().splitlines()[-1:] or ["no output"]
        return {"fabric.reason": missing(ERROR, f"the fabric-info child exited {code}: {tail[0][:200]}", SOURCE)}
    out: Dict[str, Fact] = {}
    for index, info in answer.items():
        if not str(index).isdigit() or not isinstance(info, dict):
            continue
        if "error" in info:
            status = NOT_SUPPORTED if info["error"] in ("NotSupported", "FunctionNotFound") else ERROR
            out[f"gpu.{index}.fabric"] = missing(status, f"NVML {info['error']}", SOURCE)
        else:
            out[f"gpu.{index}.fabric"] = ok(info, SOURCE)
    return out


def _manager(ctx) -> Fact:
    installed = any(os.path.exists(ctx.path(path)) for path in FM_BINARIES)
    running = False
    try:
        for pid in os.listdir(ctx.path("/proc")):
            if pid.isdigit() and (ctx.read_text("/proc", pid, "comm", limit=64) or "").strip() == "nv-fabricmanage":
                running = True  # comm is cut at 15 characters
                break
    except OSError:
        return missing(ERROR, "cannot list /proc", "/proc")
    return ok({"installed": installed, "running": running}, "/proc, " + ", ".join(FM_BINARIES))
