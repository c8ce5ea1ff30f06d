"""NVIDIA's Xid codes: what each means and what to do, for the ones a serving machine meets.

An Xid is the NVIDIA kernel driver's report of a GPU error, printed to the kernel log as
``NVRM: Xid (PCI:0000:10:00): 79, pid=0, GPU has fallen off the bus.``. The meaning and the
recommended action come from NVIDIA's Xid documentation:

- Xid catalog (Ampere and newer: description, "Resolution Bucket (Immediate Action)"):
  https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html
- Xid errors overview and per-code notes: https://docs.nvidia.com/deploy/xid-errors/index.html
- Xid 48/63/64 and page retirement: https://docs.nvidia.com/deploy/dynamic-page-retirement/visibility.html
- Xid 63/64 and row remapping (A100 and newer): https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/index.html

``action`` is the catalog's immediate-action bucket: RESTART_APP (the application that hit it
must restart; the GPU is fine), RESET_GPU (reset the GPU: ``nvidia-smi -r`` or a reboot),
RESTART_BM (reboot the machine), IGNORE (informational, follows another event). A code not in
this table is shown with its number and a pointer to the catalog.
"""

from __future__ import annotations

import re
from typing import Dict, Iterable, Optional, Tuple

CATALOG_URL = "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"

RESTART_APP = "RESTART_APP"
RESET_GPU = "RESET_GPU"
RESTART_BM = "RESTART_BM"
IGNORE = "IGNORE"

ACTION_TEXT = {
    RESTART_APP: "restart the application that hit it; the GPU itself is healthy (if it repeats across applications, suspect the hardware)",
    RESET_GPU: "reset the GPU (stop its processes, `sudo nvidia-smi -r -i N`) or reboot before serving on it again",
    RESTART_BM: "reboot the machine; if it repeats, check the GPU's seating, power and cooling and contact the vendor",
    IGNORE: "informational: look at the Xid logged just before it",
}

# code: (description, immediate action)
XIDS: Dict[int, Tuple[str, str]] = {
    8: ("GPU stopped processing", RESTART_APP),
    11: ("Invalid or corrupted push buffer stream", RESTART_APP),
    13: ("Graphics Engine Exception (usually an out-of-bounds access or illegal instruction in a kernel)", RESTART_APP),
    31: ("GPU memory page fault (an illegal address access, usually by the application)", RESTART_APP),
    32: ("Invalid or corrupted push buffer stream (DMA/PCIe fault)", RESET_GPU),
    38: ("Driver firmware error", RESET_GPU),
    43: ("GPU stopped processing (the application hit a software-induced fault; the GPU stays healthy)", RESTART_APP),
    45: ("Preemptive cleanup, due to previous errors (the application was stopped: Ctrl-C, kill, a reset, or an earlier Xid)", IGNORE),
    48: ("Double Bit ECC Error: an uncorrectable memory error", RESET_GPU),
    61: ("Internal micro-controller breakpoint/warning", RESET_GPU),
    62: ("Internal micro-controller halt", RESET_GPU),
    63: ("ECC page retirement or row remapping recording event (takes effect after a GPU reset)", RESET_GPU),
    64: ("ECC page retirement or row remapper recording failure", RESET_GPU),
    68: ("NVDEC0 Exception (video decoder)", RESTART_APP),
    69: ("Graphics Engine class error", RESTART_APP),
    74: ("NVLink Error: a link between this GPU and another GPU or NVSwitch failed", RESET_GPU),
    79: ("GPU has fallen off the bus: the GPU stopped answering on PCIe", RESTART_BM),
    92: ("High single-bit ECC error rate", IGNORE),
    94: ("Contained ECC error: only the applications using the affected memory were stopped", RESTART_APP),
    95: ("Uncontained ECC error: every application on the GPU is affected", RESET_GPU),
    109: ("Context Switch Timeout Error", RESTART_APP),
    119: ("GSP RPC Timeout: the GPU's system processor stopped answering the driver", RESET_GPU),
    120: ("GSP Error", RESET_GPU),
    121: ("C2C (chip-to-chip) link error", RESET_GPU),
    122: ("SPI PMU RPC read failure", RESET_GPU),
    123: ("SPI PMU RPC write failure", RESET_GPU),
    136: ("Link training failed on a PCIe/C2C link", RESTART_BM),
    140: ("Unrecovered ECC Error: an uncorrectable memory error the GPU could not contain", RESET_GPU),
    143: ("GPU Initialization Failure", RESTART_BM),
    154: ("GPU Recovery Action Changed: the driver says which recovery the GPU now needs (printed in the line)", RESET_GPU),
}

# "NVRM: Xid (PCI:0000:10:00): 79, pid=0, GPU has fallen off the bus." (also without "PCI:")
PCI = r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?"
LINE = re.compile(r"NVRM: Xid \((?:PCI:)?(" + PCI + r")\): (\d{1,4}),\s*(.*)")


def line_pattern(codes: Iterable[int]) -> str:
    """A regex for the Xid lines of ``codes`` (explain's signatures), the code in group ``xid``."""
    return r"NVRM: Xid \((?:PCI:)?" + PCI + r"\): (?P<xid>" + "|".join(str(c) for c in sorted(codes)) + r"),"


def describe(code: int) -> Tuple[str, str]:
    """(description, immediate action) of an Xid; unknown codes point to the catalog."""
    return XIDS.get(code, (f"Xid {code} (see NVIDIA's Xid catalog)", ""))


def parse_line(text: str) -> Optional[Dict[str, object]]:
    """An Xid kernel-log line as {"pci", "code", "text"}, or None."""
    match = LINE.search(text)
    if not match:
        return None
    return {"pci": match.group(1).lower(), "code": int(match.group(2)), "text": match.group(3).strip()[:300]}
