"""The kernel side of the driver: /proc/driver/nvidia/version and /sys/module/nvidia/version.

The user-space side (libnvidia-ml, NVML) is read by probes.gpus; a rule compares the two.
"""

from __future__ import annotations

import re
from typing import Dict, Optional, Tuple

from gpudoctor.snapshot import ABSENT, ERROR, Fact, missing, ok

PROC_VERSION = "/proc/driver/nvidia/version"
SYS_VERSION = "/sys/module/nvidia/version"
_VERSION = re.compile(r"\b(\d+\.\d+(?:\.\d+)?)\b", re.ASCII)  # ASCII: \d also matches "٥" otherwise


def parse_proc_version(text: str) -> Optional[Tuple[str, str]]:
    """``(version, "open"|"proprietary")`` from the NVRM line, or None if it is not one.

    Proprietary: ``NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.90.07  Fri May 31 …``
    Open:        ``NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build …``
    The open line has ``x86_64`` before the version, so take the first version after "Module".
    """
    for line in text.splitlines():
        if not line.startswith("NVRM version:"):
            continue
        _, found, rest = line.partition("Module")
        if not found:
            return None
        kind = "open" if "Open Kernel Module" in line else "proprietary"
        for token in rest.split():
            if _VERSION.fullmatch(token):
                return token, kind
        return None
    return None


def collect(ctx) -> Dict[str, Fact]:
    facts: Dict[str, Fact] = {}
    text = ctx.read_text(PROC_VERSION, limit=4096)
    sys_text = ctx.read_text(SYS_VERSION, limit=256)
    if text is None:
        facts["driver.proc_version"] = missing(ABSENT, f"{PROC_VERSION} does not exist (kernel module not loaded?)", PROC_VERSION)
    else:
        first = text.strip().splitlines()[0][:300] if text.strip() else ""
        facts["driver.proc_version"] = ok(first, PROC_VERSION)
    parsed = parse_proc_version(text) if text is not None else None
    if parsed:
        facts["driver.kernel_module_version"] = ok(parsed[0], PROC_VERSION)
        facts["driver.kernel_module_type"] = ok(parsed[1], PROC_VERSION)
    elif sys_text and _VERSION.fullmatch(sys_text.strip()):
        facts["driver.kernel_module_version"] = ok(sys_text.strip(), SYS_VERSION)
    elif text is not None:
        facts["driver.kernel_module_version"] = missing(
            ERROR, f"{PROC_VERSION} has no NVRM version line: {text.strip()[:80]!r}", PROC_VERSION
        )
    else:
        facts["driver.kernel_module_version"] = missing(ABSENT, "NVIDIA kernel module not loaded", PROC_VERSION)
    return facts
