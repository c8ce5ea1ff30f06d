"""nvidia-smi -q -x fallback: recorded XML from real drivers, garbage, and a fake nvidia-smi."""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import stat
from pathlib import Path
from typing import Any, Dict

import pytest

from gpudoctor.probes import Context, nvidia_smi, nvml
from gpudoctor.snapshot import ABSENT, ERROR, NO_PERMISSION, NOT_SUPPORTED, OK, STATUSES

GROUND_TRUTH = Path(__file__).parent / "fixtures" / "ground_truth"
H200_XML = GROUND_TRUTH / "h200" / "nvidia-smi-q.xml"
H200_LOG = GROUND_TRUTH / "h200" / "capture.log"
PUBLIC = GROUND_TRUTH / "public" / "nvidia-smi-xml"
PUBLIC_FILES = sorted(glob.glob(str(PUBLIC / "*.xml")))
MIB = 1048576


def _parse(name: str) -> Dict[str, Any]:
    return nvidia_smi.parse_xml((PUBLIC / name).read_text(encoding="utf-8"))


def _nvml_ground_truth() -> Dict[str, Any]:
    """The JSON object printed under "===== nvml" in the H200 capture (read via NVML)."""
    log = H200_LOG.read_text(encoding="utf-8")
    section = log.split("===== nvml", 1)[1].split("\n===== ", 1)[0]
    data, _ = json.JSONDecoder().raw_decode(section[section.index("{"):])
    return data


def _nvml_gpu_keys() -> set:
    """The per-GPU keys probes.nvml documents; the fallback must write the same ones."""
    match = re.search(r"gpu\.N\.\{([^}]*)\}", nvml.__doc__ or "")
    assert match, "probes.nvml docstring no longer lists gpu.N.{...}"
    return {key.strip() for key in match.group(1).replace("\n", " ").split(",") if key.strip()}


# --- 1. the recorded H200 -------------------------------------------------------------------
def test_h200_matches_expected_values():
    facts = nvidia_smi.parse_xml(H200_XML.read_text(encoding="utf-8"))
    value = {path: fact.value for path, fact in facts.items() if fact.ok}
    assert value["driver.version"] == "580.159.04"
    assert value["driver.cuda_max"] == "13.0"
    assert value["gpu.count"] == 1
    assert value["gpu.0.name"] == "NVIDIA H200"
    assert value["gpu.0.uuid"] == "GPU-740e6113-8957-3bf6-e279-a173014b3718"
    assert value["gpu.0.pci_bus_id"] == "00000000:00:06.0"
    assert value["gpu.0.memory_total"] == 143771 * MIB
    assert value["gpu.0.memory_reserved"] == 616 * MIB
    assert value["gpu.0.memory_used"] == 0
    assert value["gpu.0.memory_free"] == 143156 * MIB
    assert (value["gpu.0.pcie_gen_current"], value["gpu.0.pcie_gen_max"]) == (5, 5)
    assert (value["gpu.0.pcie_width_current"], value["gpu.0.pcie_width_max"]) == (16, 16)
    assert value["gpu.0.ecc_mode"] is True
    assert value["gpu.0.ecc_uncorrected_volatile"] == 0
    assert value["gpu.0.persistence_mode"] is True
    assert value["gpu.0.compute_mode"] == "Default"
    assert value["gpu.0.mig_mode"] is False
    assert value["gpu.0.throttle_reasons"] == ["gpu_idle"]
    assert value["gpu.0.processes"] == []
    # The XML has no compute capability; it comes from the product name (gpudoctor.knowledge.gpus).
    assert (facts["gpu.0.compute_capability"].value, facts["gpu.0.compute_capability"].source) == ("9.0", "nvidia-smi+name table")
    assert facts["gpu.0.nvlink_active"].status == NOT_SUPPORTED


def test_h200_agrees_with_nvml_ground_truth():
    """Same machine, same moment: what nvidia-smi printed must equal what NVML answered."""
    truth = _nvml_ground_truth()
    gpu = truth["gpus"][0]
    facts = nvidia_smi.parse_xml(H200_XML.read_text(encoding="utf-8"))
    value = {path: fact.value for path, fact in facts.items() if fact.ok}
    assert value["driver.version"] == truth["driver"]
    assert value["driver.cuda_max"] == nvml.cuda_version_string(truth["cuda_driver"])
    assert value["gpu.count"] == truth["count"]
    assert value["gpu.0.name"] == gpu["name"]
    assert value["gpu.0.uuid"] == gpu["uuid"]
    assert value["gpu.0.pci_bus_id"] == gpu["pci"]
    assert value["gpu.0.pcie_gen_current"] == gpu["pcie_gen"]
    assert value["gpu.0.pcie_gen_max"] == gpu["pcie_gen_max"]
    assert value["gpu.0.pcie_width_current"] == gpu["pcie_width"]
    assert value["gpu.0.persistence_mode"] is bool(gpu["persistence"])
    assert value["gpu.0.ecc_mode"] is bool(gpu["ecc"][0])
    assert value["gpu.0.ecc_uncorrected_volatile"] == gpu["ecc_uncorrected_volatile"]
    assert value["gpu.0.mig_mode"] is bool(gpu["mig"][0])
    assert value["gpu.0.compute_mode"] == nvml.COMPUTE_MODES[gpu["compute_mode"]]
    corr, unc, pending, failure = gpu["remapped_rows"]
    assert value["gpu.0.remapped_rows"] == {
        "correctable": corr, "uncorrectable": unc, "pending": bool(pending), "failure": bool(failure)
    }
    assert value["gpu.0.throttle_reasons"] == [n for bit, n in nvml.THROTTLE_REASONS if gpu["throttle"] & bit]
    assert value["gpu.0.processes"] == gpu["procs"]


def test_h200_writes_the_nvml_keys_with_the_nvidia_smi_source():
    facts = nvidia_smi.parse_xml(H200_XML.read_text(encoding="utf-8"))
    gpu_keys = {path[len("gpu.0."):] for path in facts if path.startswith("gpu.0.")}
    assert gpu_keys == _nvml_gpu_keys()
    assert {"driver.version", "driver.cuda_max", "gpu.count"} <= set(facts)
    for path, fact in facts.items():
        assert fact.source == ("nvidia-smi+name table" if path.endswith(".compute_capability") else "nvidia-smi"), path
        assert fact.status in STATUSES, path
        json.dumps(fact.to_json())  # the snapshot must serialise


# --- 2. every public XML --------------------------------------------------------------------
def test_public_fixtures_present():
    assert len(PUBLIC_FILES) >= 30


@pytest.mark.parametrize("path", PUBLIC_FILES, ids=[os.path.basename(p) for p in PUBLIC_FILES])
def test_public_xml_parses(path):
    text = Path(path).read_text(encoding="utf-8")
    facts = nvidia_smi.parse_xml(text)
    count = facts["gpu.count"]
    assert count.ok and isinstance(count.value, int) and count.value >= 1
    # Count the <gpu> elements independently of the parser under test.
    assert count.value == len(re.findall(r"<gpu[\s>]", text))
    gpu_keys = _nvml_gpu_keys()
    for index in range(count.value):
        name = facts[f"gpu.{index}.name"]
        assert name.ok and isinstance(name.value, str) and name.value.strip()
        for key in gpu_keys:
            fact = facts[f"gpu.{index}.{key}"]
            assert fact.status in STATUSES
            if not fact.ok:
                assert fact.value is None and fact.detail, (key, fact)
        _check_types(facts, index)


def _check_types(facts, index):
    """Same value types as probes.nvml: ints are ints (not bools), flags are bools."""
    def get(key):
        fact = facts[f"gpu.{index}.{key}"]
        return fact.value if fact.ok else None

    for key in ("memory_total", "memory_used", "memory_free", "memory_reserved", "ecc_uncorrected_volatile",
                "pcie_gen_current", "pcie_gen_max", "pcie_width_current", "pcie_width_max", "nvlink_active"):
        assert get(key) is None or (isinstance(get(key), int) and not isinstance(get(key), bool)), key
    for key in ("ecc_mode", "mig_mode", "persistence_mode"):
        assert get(key) is None or isinstance(get(key), bool), key
    assert get("compute_mode") in (None, "Default", "Exclusive_Process", "Prohibited", "Exclusive_Thread")
    known = {name for _, name in nvml.THROTTLE_REASONS}
    assert get("throttle_reasons") is None or set(get("throttle_reasons")) <= known
    assert get("pci_bus_id") is None or re.fullmatch(r"[0-9A-F]{8}:[0-9A-F]{2}:[0-9A-F]{2}\.[0-7]", get("pci_bus_id"))
    rows = get("remapped_rows")
    if rows is not None:
        assert set(rows) == {"correctable", "uncorrectable", "pending", "failure"}
        assert isinstance(rows["pending"], bool) and isinstance(rows["failure"], bool)
    for proc in get("processes") or []:
        assert set(proc) == {"pid", "used_memory", "type"} and isinstance(proc["pid"], int)
        assert proc["type"] in ("C", "G", "C+G")
        assert proc["used_memory"] is None or isinstance(proc["used_memory"], int)


def test_a100_mig():
    facts = _parse("netdata-go.d__a100-sxm4-mig.xml")
    assert facts["gpu.0.name"].value == "NVIDIA A100-SXM4-40GB"
    assert facts["gpu.0.mig_mode"].value is True
    assert facts["gpu.0.ecc_mode"].value is True
    # In MIG mode the GPU-level volatile counters read N/A (they move to <mig_device>).
    assert facts["gpu.0.ecc_uncorrected_volatile"].status == NOT_SUPPORTED
    assert facts["gpu.0.memory_total"].value == 40960 * MIB
    assert _parse("telegraf__a100-sxm4-v12.xml")["gpu.0.mig_mode"].value is True


def test_a100_trimmed_file_counts_gpu_elements_not_attached_gpus():
    facts = _parse("telegraf__a100-sxm4-v12.xml")  # attached_gpus says 4, one <gpu> kept
    assert facts["gpu.count"].value == 1
    assert "gpu.1.name" not in facts


def test_tesla_t4_processes_keep_their_type():
    facts = _parse("telegraf__tesla-t4.xml")
    assert facts["gpu.0.name"].value == "Tesla T4"
    assert facts["driver.version"].value == "515.105.01"
    assert facts["gpu.0.pci_bus_id"].value == "00000000:00:1E.0"
    assert facts["gpu.0.ecc_uncorrected_volatile"].value == 0
    # Xorg is a graphics process (type G), listed as probes.nvml lists it.
    assert facts["gpu.0.processes"].value == [
        {"pid": 675, "used_memory": 22 * MIB, "type": "G"},
        {"pid": 5762, "used_memory": 1005 * MIB, "type": "C"},
    ]


def test_rtx_4090_driver_535():
    facts = _parse("netdata-go.d__rtx-4090-driver-535.xml")
    assert facts["driver.version"].value == "535.86.05"
    assert facts["driver.cuda_max"].value == "12.2"
    assert facts["gpu.0.name"].value == "NVIDIA GeForce RTX 4090"
    # max_link_gen 3 is the host slot's limit; the GPU's own maximum (NVML's answer) is 4.
    assert facts["gpu.0.pcie_gen_max"].value == 4
    assert facts["gpu.0.pcie_gen_current"].value == 1
    assert facts["gpu.0.ecc_mode"].value is False
    assert facts["gpu.0.remapped_rows"].value == {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False}
    assert facts["gpu.0.throttle_reasons"].value == ["gpu_idle"]  # <clocks_event_reasons> layout


def test_old_layouts():
    facts = _parse("netdata-go.d__tesla-p100.xml")  # <double_bit><total>
    assert facts["gpu.0.ecc_uncorrected_volatile"].value == 0
    assert facts["gpu.0.memory_reserved"].value == 103 * MIB
    facts = _parse("lampaa__smi_test_3.xml")  # <clocks_throttle_reasons> layout
    assert facts["gpu.0.throttle_reasons"].value == ["sw_power_cap"]
    assert facts["gpu.0.mig_mode"].status == ABSENT and "mig_mode" in facts["gpu.0.mig_mode"].detail
    assert facts["gpu.0.memory_reserved"].status == NOT_SUPPORTED
    facts = _parse("lampaa__smi_test_2.xml")
    assert facts["gpu.count"].value == 2
    assert facts["gpu.1.name"].value == "GeForce RTX 2080 Ti"


def test_driver_352_short_domain_and_inline_dtd():
    for name in ("rai-project__example.xml", "rai-project__example2.xml"):
        facts = _parse(name)
        assert facts["driver.version"].value == "352.99"
        assert facts["driver.cuda_max"].status == ABSENT
        assert facts["gpu.0.name"].value == "GRID K520"
        assert facts["gpu.0.pci_bus_id"].value == "00000000:00:03.0"  # XML says 0000:00:03.0


def test_na_values_are_not_supported():
    facts = _parse("lampaa__smi_test_5.xml")  # GT 730: PCIe, processes and throttle all N/A
    for key in ("pcie_gen_current", "pcie_gen_max", "pcie_width_current", "processes", "throttle_reasons"):
        assert facts[f"gpu.0.{key}"].status == NOT_SUPPORTED, key
    facts = _parse("netdata-go.d__rtx-2080-win.xml")  # Windows WDDM
    assert facts["gpu.0.persistence_mode"].status == NOT_SUPPORTED
    assert all(p["used_memory"] is None for p in facts["gpu.0.processes"].value)


def test_fragment_without_driver():
    facts = _parse("telegraf__gtx-1070-ti.xml")
    assert facts["driver.version"].status == ABSENT and "driver_version" in facts["driver.version"].detail
    assert facts["gpu.0.name"].value == "GeForce GTX 1070 Ti"
    assert facts["gpu.0.pcie_gen_max"].status == ABSENT


# --- synthetic layouts the recorded files lack (no fixture has an uncorrectable error) -----
def _one_gpu(body: str) -> Dict[str, Any]:
    return nvidia_smi.parse_xml(f"<nvidia_smi_log><gpu id='0000:3b:00.0'>{body}</gpu></nvidia_smi_log>")


def test_ecc_sums_new_and_old_layouts():
    new = "<ecc_errors><volatile><sram_correctable>9</sram_correctable><sram_uncorrectable_parity>1</sram_uncorrectable_parity>" \
          "<sram_uncorrectable_secded>2</sram_uncorrectable_secded><dram_correctable>7</dram_correctable>" \
          "<dram_uncorrectable>4</dram_uncorrectable></volatile></ecc_errors>"
    assert _one_gpu(new)["gpu.0.ecc_uncorrected_volatile"].value == 7
    mid = "<ecc_errors><volatile><sram_uncorrectable>3</sram_uncorrectable><dram_uncorrectable>N/A</dram_uncorrectable>" \
          "</volatile></ecc_errors>"
    assert _one_gpu(mid)["gpu.0.ecc_uncorrected_volatile"].value == 3
    old = "<ecc_errors><volatile><single_bit><device_memory>5</device_memory><total>5</total></single_bit>" \
          "<double_bit><device_memory>2</device_memory><l2_cache>1</l2_cache><total>3</total></double_bit>" \
          "</volatile></ecc_errors>"
    assert _one_gpu(old)["gpu.0.ecc_uncorrected_volatile"].value == 3
    old_no_total = old.replace("<total>3</total>", "<total>N/A</total>")
    assert _one_gpu(old_no_total)["gpu.0.ecc_uncorrected_volatile"].value == 3


def test_placeholders_and_names():
    facts = _one_gpu(
        "<product_name>X</product_name><persistence_mode>[Insufficient Permissions]</persistence_mode>"
        "<compute_mode>Exclusive_Process</compute_mode><mig_mode><current_mig>[N/A]</current_mig></mig_mode>"
        "<ecc_mode><current_ecc>[Not Supported]</current_ecc></ecc_mode><uuid>[Unknown Error]</uuid>"
        "<remapped_rows><remapped_row_corr>2</remapped_row_corr><remapped_row_unc>1</remapped_row_unc>"
        "<remapped_row_pending>Yes</remapped_row_pending><remapped_row_failure>No</remapped_row_failure></remapped_rows>"
        "<clocks_event_reasons><clocks_event_reason_hw_slowdown>Active</clocks_event_reason_hw_slowdown>"
        "<clocks_event_reason_display_clocks_setting>Active</clocks_event_reason_display_clocks_setting>"
        "<clocks_event_reason_sync_boost>Not Active</clocks_event_reason_sync_boost></clocks_event_reasons>"
    )
    assert facts["gpu.0.pci_bus_id"].value == "00000000:3B:00.0"
    assert facts["gpu.0.persistence_mode"].status == NO_PERMISSION
    assert facts["gpu.0.mig_mode"].status == NOT_SUPPORTED
    assert facts["gpu.0.ecc_mode"].status == NOT_SUPPORTED
    assert facts["gpu.0.uuid"].status == ERROR
    assert facts["gpu.0.compute_mode"].value == "Exclusive_Process"
    assert facts["gpu.0.remapped_rows"].value == {"correctable": 2, "uncorrectable": 1, "pending": True, "failure": False}
    assert facts["gpu.0.throttle_reasons"].value == ["hw_slowdown", "display_clock_setting"]
    assert facts["gpu.0.processes"].status == ABSENT and "processes" in facts["gpu.0.processes"].detail


# --- 3. garbage -----------------------------------------------------------------------------
GARBAGE = {
    "empty": "",
    "not xml": "not xml",
    "truncated h200": H200_XML.read_bytes()[:3000].decode("utf-8", "replace"),
    "nvml error text": "Failed to initialize NVML: Driver/library version mismatch\n",
    "other root": "<html><body>hi</body></html>",
    "entity bomb": '<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "aaaa"><!ENTITY b "&a;&a;&a;">]>'
                   "<nvidia_smi_log><driver_version>&b;</driver_version></nvidia_smi_log>",
}


@pytest.mark.parametrize("text", list(GARBAGE.values()), ids=list(GARBAGE))
def test_garbage_gives_an_error_fact(text):
    facts = nvidia_smi.parse_xml(text)
    assert facts["gpu.count"].status == ERROR
    assert facts["gpu.count"].detail and facts["gpu.count"].source == "nvidia-smi"
    assert not any(path.startswith("gpu.0.") for path in facts)


def test_gpu_without_children():
    facts = nvidia_smi.parse_xml("<nvidia_smi_log><gpu></gpu></nvidia_smi_log>")
    assert facts["gpu.count"].value == 1
    assert facts["driver.version"].status == ABSENT
    for key in _nvml_gpu_keys() - {"compute_capability", "nvlink_active"}:
        assert facts[f"gpu.0.{key}"].status == ABSENT, key
    assert not facts["gpu.0.name"].ok


def test_no_gpus():
    facts = nvidia_smi.parse_xml("<nvidia_smi_log><driver_version>580.1</driver_version><attached_gpus>0</attached_gpus></nvidia_smi_log>")
    assert facts["gpu.count"].value == 0 and facts["driver.version"].value == "580.1"


# --- 4. collect() with a real fake nvidia-smi ------------------------------------------------
def _fake_nvidia_smi(directory: Path, script: str) -> None:
    exe = directory / "nvidia-smi"
    exe.write_text("#!/bin/sh\n" + script, encoding="utf-8")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def test_collect_version_mismatch(tmp_path):
    _fake_nvidia_smi(
        tmp_path,
        'echo "Failed to initialize NVML: Driver/library version mismatch"\n'
        'echo "NVML library version: 570.124"\n'
        "exit 18\n",
    )
    facts = nvidia_smi.collect(Context(environ={"PATH": str(tmp_path)}))
    count = facts["gpu.count"]
    assert count.status == ERROR and count.source == "nvidia-smi"
    assert "Driver/library version mismatch" in count.detail
    error = facts["driver.nvidia_smi_error"]
    assert error.status == OK
    assert error.value.splitlines()[0] == "Failed to initialize NVML: Driver/library version mismatch"
    assert "NVML library version: 570.124" in error.value


def test_collect_parses_xml(tmp_path):
    cat = shutil.which("cat")
    assert cat, "no cat on this machine"
    _fake_nvidia_smi(tmp_path, f'[ "$1 $2" = "-q -x" ] || exit 2\nexec {cat} "{H200_XML}"\n')
    facts = nvidia_smi.collect(Context(environ={"PATH": str(tmp_path)}))
    assert facts["gpu.count"].value == 1
    assert facts["gpu.0.uuid"].value == "GPU-740e6113-8957-3bf6-e279-a173014b3718"
    assert facts["driver.version"].value == "580.159.04"
    assert "driver.nvidia_smi_error" not in facts


def test_collect_without_nvidia_smi(tmp_path):
    facts = nvidia_smi.collect(Context(environ={"PATH": str(tmp_path)}))
    assert facts["gpu.count"].status == ABSENT
    assert "nvidia-smi" in facts["gpu.count"].detail
    assert "driver.nvidia_smi_error" not in facts


def test_collect_timeout(tmp_path):
    _fake_nvidia_smi(tmp_path, "exec /bin/sleep 30\n" if os.path.exists("/bin/sleep") else "while :; do :; done\n")
    facts = nvidia_smi.collect(Context(environ={"PATH": str(tmp_path)}, timeout=0.5))
    assert facts["gpu.count"].status == "timeout"
