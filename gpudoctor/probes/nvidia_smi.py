"""The fallback when NVML cannot be used: parse ``nvidia-smi -q -x``.

It writes the same fact keys, value types and units as probes.nvml (see its docstring), with
source "nvidia-smi", so rules never need to know which one answered. The XML layout has
changed across drivers (DTD v7 … v13); each field below notes the variants seen in
tests/fixtures/ground_truth. Values nvidia-smi prints as "N/A", "[Not Supported]" and the like
become facts with status not_supported, never string values. Nothing here raises: a driver
that prints garbage must not take the doctor down.

When nvidia-smi itself fails, its first output line ("Failed to initialize NVML:
Driver/library version mismatch") is the diagnosis; it is kept in driver.nvidia_smi_error.

``nvidia_smi_q`` is the plain ``nvidia-smi -q`` text that ``report --bundle`` carries (run by
commands/report.py while the probes run, under the same deadline).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Tuple

from gpudoctor import runner
from gpudoctor.snapshot import ABSENT, ERROR, NO_PERMISSION, NOT_SUPPORTED, OK, Fact, missing, ok

if TYPE_CHECKING:  # the annotations only; the parser is imported when there is XML to parse
    import xml.etree.ElementTree as ET

SOURCE = "nvidia-smi"
ARGV = ["nvidia-smi", "-q", "-x"]

# The DOCTYPE names an external DTD that is never fetched, and may carry an internal subset
# (rai-project example2.xml); dropping it also rules out entity-expansion tricks.
_DOCTYPE = re.compile(r"<!DOCTYPE[^\[>]*(\[.*?\]\s*)?>", re.DOTALL)

_UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30}

# XML child tag suffix (after "clocks_event_reason_" / "clocks_throttle_reason_") -> the
# names probes.nvml uses. nvidia-smi says "display_clocks_setting", NVML's bit is
# display_clock_setting; "unknown" has no NVML bit in that table and is dropped.
_REASONS = {
    "gpu_idle": "gpu_idle",
    "applications_clocks_setting": "applications_clocks_setting",
    "sw_power_cap": "sw_power_cap",
    "hw_slowdown": "hw_slowdown",
    "sync_boost": "sync_boost",
    "sw_thermal_slowdown": "sw_thermal_slowdown",
    "hw_thermal_slowdown": "hw_thermal_slowdown",
    "hw_power_brake_slowdown": "hw_power_brake_slowdown",
    "display_clocks_setting": "display_clock_setting",
    "display_clock_setting": "display_clock_setting",
}


# --- text -> status ------------------------------------------------------------------------
def _unavailable(text: str) -> Optional[str]:
    """The status for nvidia-smi's placeholder texts, or None for a real value."""
    low = text.strip().strip("[]").strip().lower()
    if low in ("", "n/a", "not supported", "not available", "unknown", "none") or "deprecated" in low:
        return NOT_SUPPORTED
    if "permission" in low:
        return NO_PERMISSION
    if "error" in low or "requires reset" in low or "is lost" in low:
        return ERROR
    return None


def _field(parent: Optional[ET.Element], path: str, convert: Callable[[str], Any] = str) -> Fact:
    """One leaf as a fact: absent (naming the element), not_supported, or ok(convert(text))."""
    node = parent.find(path) if parent is not None else None
    if node is None:
        return missing(ABSENT, f"no <{path}> in nvidia-smi XML", SOURCE)
    text = (node.text or "").strip()
    status = _unavailable(text)
    if status is not None:
        return missing(status, f"<{path}> is {text or 'empty'!r}", SOURCE)
    try:
        return ok(convert(text), SOURCE)
    except Exception as exc:  # a value we do not understand is an error fact, not a crash
        return missing(ERROR, f"<{path}> = {text[:60]!r}: {exc}", SOURCE)


def _first_ok(parent: Optional[ET.Element], paths: List[str], convert: Callable[[str], Any]) -> Fact:
    """The first path that gives a value; otherwise what the first present one said."""
    facts = [_field(parent, path, convert) for path in paths]
    for fact in facts:
        if fact.ok:
            return fact
    present = [f for f in facts if f.status != ABSENT]
    if present:
        return present[0]
    return missing(ABSENT, "no " + " or ".join(f"<{p}>" for p in paths) + " in nvidia-smi XML", SOURCE)


def _bytes(text: str) -> int:
    number, _, unit = text.partition(" ")
    return int(float(number) * _UNITS[unit.strip() or "B"])


def _enabled(text: str) -> bool:
    low = text.lower()
    if low in ("enabled", "yes", "active", "on"):
        return True
    if low in ("disabled", "no", "not active", "off"):
        return False
    raise ValueError("neither enabled nor disabled")


def _width(text: str) -> int:
    return int(text.lower().rstrip("x"))


def _bus_id(text: str) -> str:
    """NVML's form: 8 hex digit domain, upper case ("0000:00:03.0" -> "00000000:00:03.0")."""
    domain, bus, devfn = text.strip().split(":")
    device, function = devfn.split(".")
    return f"{int(domain, 16):08X}:{int(bus, 16):02X}:{int(device, 16):02X}.{int(function, 16):X}"


# --- the document --------------------------------------------------------------------------
def parse_xml(text: str) -> Dict[str, Fact]:
    """Facts from ``nvidia-smi -q -x`` output; any input gives a dict, never an exception."""
    import xml.etree.ElementTree as ET  # ~4 ms, and only the fallback after NVML failed needs it

    try:
        root = ET.fromstring(_DOCTYPE.sub("", text or "", count=1))
    except ET.ParseError as exc:
        return {"gpu.count": missing(ERROR, f"nvidia-smi XML does not parse: {exc}", SOURCE)}
    except Exception as exc:
        return {"gpu.count": missing(ERROR, f"nvidia-smi XML unreadable: {type(exc).__name__}: {exc}", SOURCE)}
    if root.tag != "nvidia_smi_log":
        return {"gpu.count": missing(ERROR, f"not nvidia-smi XML (root <{root.tag}>)", SOURCE)}
    facts: Dict[str, Fact] = {
        "driver.version": _field(root, "driver_version"),
        # Absent before driver ~410 (no <cuda_version> element in DTD v7).
        "driver.cuda_max": _field(root, "cuda_version"),
    }
    gpus = root.findall("gpu")
    # Count <gpu> elements, not <attached_gpus>: the indices below must exist.
    facts["gpu.count"] = ok(len(gpus), SOURCE)
    for index, gpu in enumerate(gpus):
        try:
            gpu_facts = _gpu(gpu)
        except Exception as exc:  # one odd GPU must not hide the others
            gpu_facts = {"name": missing(ERROR, f"cannot read <gpu> {index}: {type(exc).__name__}: {exc}", SOURCE)}
        facts.update({f"gpu.{index}.{key}": fact for key, fact in gpu_facts.items()})
    return facts


def _gpu(gpu: ET.Element) -> Dict[str, Fact]:
    f: Dict[str, Fact] = {}
    f["name"] = _field(gpu, "product_name")
    f["uuid"] = _field(gpu, "uuid")
    f["pci_bus_id"] = _pci_bus_id(gpu)
    f["compute_capability"] = _compute_capability(gpu)
    f.update(_memory(gpu))
    f["ecc_mode"] = _field(gpu, "ecc_mode/current_ecc", _enabled)
    f["ecc_uncorrected_volatile"] = _ecc_uncorrected(gpu.find("ecc_errors/volatile"))
    f["remapped_rows"] = _remapped_rows(gpu.find("remapped_rows"))
    f["mig_mode"] = _field(gpu, "mig_mode/current_mig", _enabled)
    f["persistence_mode"] = _field(gpu, "persistence_mode", _enabled)
    f["compute_mode"] = _field(gpu, "compute_mode")
    f["throttle_reasons"] = _throttle_reasons(gpu)
    link = gpu.find("pci/pci_gpu_link_info")
    # device_* (driver >= 525) are the GPU's own; plain max_link_gen is capped by the host slot,
    # and NVML's nvmlDeviceGetGpuMaxPcieLinkGeneration also reports the GPU's own maximum.
    f["pcie_gen_current"] = _first_ok(link, ["pcie_gen/device_current_link_gen", "pcie_gen/current_link_gen"], int)
    f["pcie_gen_max"] = _first_ok(link, ["pcie_gen/max_device_link_gen", "pcie_gen/max_link_gen"], int)
    f["pcie_width_current"] = _field(link, "link_widths/current_link_width", _width)
    f["pcie_width_max"] = _field(link, "link_widths/max_link_width", _width)
    f["nvlink_active"] = _nvlink(gpu)
    f["processes"] = _processes(gpu.find("processes"))
    return f


def _pci_bus_id(gpu: ET.Element) -> Fact:
    raw = gpu.get("id")
    if raw:
        try:
            return ok(_bus_id(raw), SOURCE)
        except Exception:
            pass  # fall back to <pci_bus_id>
    return _field(gpu, "pci/pci_bus_id", _bus_id)


def _compute_capability(gpu: ET.Element) -> Fact:
    # None of the recorded XMLs (DTD v7..v13, drivers 352..595) has it; accept the obvious
    # names in case a future driver adds one.
    for path in ("compute_capability", "cuda_compute_capability", "compute_cap"):
        if gpu.find(path) is not None:
            return _field(gpu, path, lambda t: "%d.%d" % tuple(int(p) for p in t.split(".")))
    from gpudoctor.knowledge.gpus import cc_for_name  # the XML never says it: take it from the product name

    cc = cc_for_name((gpu.findtext("product_name") or "").strip())
    return ok(cc, "nvidia-smi+name table") if cc else missing(NOT_SUPPORTED, "nvidia-smi -q -x does not report compute capability", SOURCE)


def _memory(gpu: ET.Element) -> Dict[str, Fact]:
    out = {f"memory_{name}": _field(gpu, f"fb_memory_usage/{name}", _bytes) for name in ("total", "used", "free")}
    # <reserved> appeared with driver ~510; older XML has the same split as NVML memory v1.
    reserved = _field(gpu, "fb_memory_usage/reserved", _bytes)
    if reserved.status == ABSENT and out["memory_total"].ok:
        reserved = missing(NOT_SUPPORTED, "no <fb_memory_usage/reserved> (driver older than ~510)", SOURCE)
    out["memory_reserved"] = reserved
    return out


def _counter(node: ET.Element) -> Optional[int]:
    text = (node.text or "").strip()
    return int(text) if text.isdigit() else None


def _ecc_uncorrected(volatile: Optional[ET.Element]) -> Fact:
    """Volatile uncorrectable ECC errors, as NVML's total (UNCORRECTED, VOLATILE).

    Old layout (to driver ~450): <double_bit> with per-location counters and a <total>.
    Newer: <sram_uncorrectable> and <dram_uncorrectable>; from ~550 the SRAM count is split
    into <sram_uncorrectable_parity> and <sram_uncorrectable_secded>.
    """
    if volatile is None:
        return missing(ABSENT, "no <ecc_errors/volatile> in nvidia-smi XML", SOURCE)
    double_bit = volatile.find("double_bit")
    if double_bit is not None:
        total = double_bit.find("total")
        if total is not None and _counter(total) is not None:
            return ok(_counter(total), SOURCE)
        counters = [_counter(c) for c in double_bit if c.tag != "total"]
    else:
        counters = [_counter(c) for c in volatile if "uncorrectable" in c.tag]
    numbers = [n for n in counters if n is not None]
    if not numbers:
        return missing(NOT_SUPPORTED, "volatile uncorrectable ECC counters are N/A (ECC off or unsupported)", SOURCE)
    return ok(sum(numbers), SOURCE)


def _remapped_rows(node: Optional[ET.Element]) -> Fact:
    """Row remapping (A100 and later); "N/A" text without children on GPUs without it."""
    if node is None:
        return missing(ABSENT, "no <remapped_rows> in nvidia-smi XML (driver older than ~450)", SOURCE)
    if len(node) == 0:
        return missing(NOT_SUPPORTED, f"<remapped_rows> is {(node.text or '').strip() or 'empty'!r}", SOURCE)
    parts = {
        "correctable": _field(node, "remapped_row_corr", int),
        "uncorrectable": _field(node, "remapped_row_unc", int),
        "pending": _field(node, "remapped_row_pending", _enabled),
        "failure": _field(node, "remapped_row_failure", _enabled),
    }
    for fact in parts.values():
        if not fact.ok:
            return fact
    return ok({key: fact.value for key, fact in parts.items()}, SOURCE)


def _throttle_reasons(gpu: ET.Element) -> Fact:
    # <clocks_event_reasons> from driver ~535, <clocks_throttle_reasons> before.
    for tag, prefix in (("clocks_event_reasons", "clocks_event_reason_"), ("clocks_throttle_reasons", "clocks_throttle_reason_")):
        node = gpu.find(tag)
        if node is None:
            continue
        active: List[str] = []
        answered = False
        for child in node:
            text = (child.text or "").strip()
            if _unavailable(text) is not None:
                continue
            answered = True
            name = _REASONS.get(child.tag[len(prefix):] if child.tag.startswith(prefix) else child.tag)
            if name and text.lower() == "active" and name not in active:
                active.append(name)
        if not answered:
            return missing(NOT_SUPPORTED, f"every <{tag}> entry is N/A", SOURCE)
        return ok(active, SOURCE)
    return missing(ABSENT, "no <clocks_event_reasons> or <clocks_throttle_reasons> in nvidia-smi XML", SOURCE)


def _nvlink(gpu: ET.Element) -> Fact:
    """``-q -x`` has no NVLink state in any recorded driver (that is ``nvidia-smi nvlink -s``).

    If a driver ever prints <nvlink><link><state>Active</state>…, count those.
    """
    states = [(s.text or "").strip().lower() for s in gpu.findall("nvlink/*/state")]
    if states:
        return ok(sum(1 for s in states if s == "active"), SOURCE)
    return missing(NOT_SUPPORTED, "nvidia-smi -q -x does not report NVLink link state", SOURCE)


def _processes(node: Optional[ET.Element]) -> Fact:
    """GPU processes with their type ("C" compute, "G" graphics such as Xorg, "C+G"), as probes.nvml lists them.

    used_memory is "N/A" under Windows WDDM and for other users' processes in containers:
    None, as in probes.nvml.
    """
    if node is None:
        return missing(ABSENT, "no <processes> in nvidia-smi XML", SOURCE)
    text = (node.text or "").strip()
    if len(node) == 0 and text and _unavailable(text) is not None:  # "N/A" (GT 730); empty means none
        return missing(_unavailable(text) or NOT_SUPPORTED, f"<processes> is {text!r}", SOURCE)
    out: List[Dict[str, Any]] = []
    for proc in node.findall("process_info"):
        pid = _field(proc, "pid", int)
        if not pid.ok:
            continue
        used = _field(proc, "used_memory", _bytes)
        kind = (proc.findtext("type") or "").strip() or "C"
        out.append({"pid": pid.value, "used_memory": used.value if used.ok else None, "type": kind})
    return ok(out, SOURCE)


# --- running it ----------------------------------------------------------------------------
def collect(ctx: Any) -> Dict[str, Fact]:
    result = runner.run(ARGV, timeout=min(5.0, ctx.timeout), env=ctx.environ, deadline=getattr(ctx, "deadline", None))
    if result.status == OK:
        return parse_xml(result.stdout)
    facts: Dict[str, Fact] = {"gpu.count": missing(result.status, result.detail or f"nvidia-smi {result.status}", SOURCE)}
    output = (result.stdout.strip() or result.stderr.strip()) if result.returncode is not None else ""
    if output:
        # The first line is the diagnosis; the next ones may say more ("NVML library version:
        # 570.124" names the user-space library that disagrees with the kernel module).
        lines = [line.strip() for line in output.splitlines() if line.strip()]
        facts["driver.nvidia_smi_error"] = ok("\n".join(lines[:10])[:2000], SOURCE, f"nvidia-smi exited {result.returncode}")
    return facts


# --- the support bundle's plain-text nvidia-smi -q ---------------------------------------------------
def nvidia_smi_q(live: bool, deadline: Optional[float] = None) -> Tuple[str, str]:
    """(file name, text) of ``nvidia-smi -q`` for the bundle, or a note saying why there is none.

    ``deadline`` is the run's overall one (--timeout): a hung nvidia-smi gets what is left of it.
    """
    if not live:
        return "nvidia-smi-q.txt", "nvidia-smi -q was not run: this report was made from a snapshot, not on the machine.\n"
    # 512 KiB: -q of 8 H200s is ~90 KiB; a flood must not cost seconds of gzip and redaction.
    done = runner.run(["nvidia-smi", "-q"], timeout=30.0, deadline=deadline, max_output=512 << 10)
    if done.status == "ok":
        return "nvidia-smi-q.txt", done.stdout
    note = f"nvidia-smi -q could not be run: {done.detail or done.status}\n"
    if done.stdout or done.stderr:
        note += "\n" + (done.stdout + done.stderr)[-20000:]
    return "nvidia-smi-q.txt", note
