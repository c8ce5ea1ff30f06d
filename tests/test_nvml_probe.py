"""gpudoctor/probes/nvml.py against a recorded NVML (tests/fake_nvml.py) replaying H200 captures.

The strongest check: fed the capture of the 1-GPU H200, the adapter gives the very facts it
recorded on that machine (tests/fixtures/snapshots/h200.json), UUID aside (another session).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import fake_nvml
from gpudoctor.probes import nvml

SNAPSHOTS = Path(__file__).resolve().parent / "fixtures" / "snapshots"


def recorded(name):
    doc = json.loads((SNAPSHOTS / name).read_text(encoding="utf-8"))
    return doc.get("facts", doc)


def plain(facts):
    return {path: fact.to_json() for path, fact in facts.items()}


def test_replaying_the_h200_capture_gives_what_the_adapter_recorded_on_the_h200(fake_nvml_module):
    nv = fake_nvml_module(fake_nvml.h200())
    facts = plain(nvml.collect())
    want = {path: fact for path, fact in recorded("h200.json").items()
            if fact.get("source") == "nvml" or path in ("driver.nvml", "gpu.count")}
    got = {path: fact for path, fact in facts.items() if path in want}
    got.pop("gpu.0.uuid"), want.pop("gpu.0.uuid")
    assert got == want
    # Read by the adapter since that recording (probes.nvml_links; tested against the tapes below).
    later = {"gpu.0.numa_node", "gpu.0.cpu_affinity", "gpu.0.nvlink_links", "gpu.pairs"}
    assert set(facts) - set(want) - {"gpu.0.uuid"} - later == {"driver.library_path"}
    # driver.library_path is read from this process's /proc/self/maps, not from NVML: on a GPU host the real
    # libnvidia-ml may be mapped (an earlier test loaded it), elsewhere nothing is.
    mapped = nvml.loaded_library_path()
    assert facts["driver.library_path"]["status"] == ("ok" if mapped else "absent")
    assert facts["driver.library_path"].get("value") == mapped
    assert nv.calls == ["nvmlInit", "nvmlShutdown"]


def test_the_h200_capture_values(fake_nvml_module):
    fake_nvml_module(fake_nvml.h200())
    facts = nvml.collect()
    assert facts["gpu.0.name"].value == "NVIDIA H200"  # bytes from the binding, decoded
    assert facts["gpu.0.uuid"].value == "GPU-740e6113-8957-3bf6-e279-a173014b3718"
    assert facts["gpu.0.memory_reserved"].value == 644939776
    assert facts["gpu.0.nvlink_active"].status == "not_supported"
    assert facts["gpu.0.nvlink_active"].value == {"code": 3, "name": "NotSupported"}
    assert facts["gpu.0.throttle_reasons"].value == ["gpu_idle"]


def test_two_h200s_with_nvlink(fake_nvml_module):
    fake_nvml_module(fake_nvml.h200x2())
    facts = nvml.collect()
    assert facts["gpu.count"].value == 2
    assert [facts[f"gpu.{i}.pci_bus_id"].value for i in (0, 1)] == ["00000000:00:06.0", "00000000:00:07.0"]
    assert facts["gpu.1.nvlink_active"].value == 18  # all 18 links active; link 18 answers InvalidArgument
    assert facts["gpu.0.memory_total"].value == 150754820096 and facts["gpu.0.memory_used"].value == 0
    # what nvml-multi.json did not record answers NotSupported, never a crash
    for key in ("ecc_mode", "mig_mode", "persistence_mode", "compute_mode", "pcie_gen_current", "processes", "remapped_rows"):
        assert facts[f"gpu.1.{key}"].status == "not_supported", key
        assert "NVML NotSupported: Not Supported" == facts[f"gpu.1.{key}"].detail


def test_the_stale_process_the_h200_showed(fake_nvml_module):
    fake_nvml_module(fake_nvml.h200_stale_process())
    facts = nvml.collect()
    assert facts["gpu.0.processes"].value == [{"pid": 641, "used_memory": 2690646016, "type": "C"}]
    assert facts["gpu.0.memory_used"].value == 2690646016
    assert facts["gpu.0.memory_free"].value == 147409993728


def test_graphics_processes_merge_and_unavailable_memory(fake_nvml_module):
    tape = fake_nvml.h200()
    tape["gpus"][0]["procs"] = [{"pid": 10, "usedGpuMemory": 1 << 30}, {"pid": 11, "usedGpuMemory": None}]
    tape["gpus"][0]["graphics_procs"] = [{"pid": 10, "usedGpuMemory": 1 << 30}, {"pid": 12, "usedGpuMemory": (1 << 64) - 1}]
    fake_nvml_module(tape)
    procs = nvml.collect()["gpu.0.processes"].value
    assert procs == [{"pid": 10, "used_memory": 1 << 30, "type": "C+G"}, {"pid": 11, "used_memory": None, "type": "C"},
                     {"pid": 12, "used_memory": None, "type": "G"}]


@pytest.mark.parametrize("code, status", [("LibraryNotFound", "error"), ("DriverNotLoaded", "error"),
                                          ("LibRmVersionMismatch", "error"), ("NoPermission", "no_permission"),
                                          ("Timeout", "timeout")])
def test_init_failures_become_the_driver_nvml_fact(fake_nvml_module, code, status):
    tape = dict(fake_nvml.h200(), init_error=code)
    nv = fake_nvml_module(tape)
    facts = nvml.collect()
    assert list(facts) == ["driver.nvml"]
    assert facts["driver.nvml"].status == status
    assert facts["driver.nvml"].value["name"] == code
    assert nv.calls == ["nvmlInit"]  # no shutdown after a failed init


def test_one_lost_gpu_does_not_hide_the_other(fake_nvml_module):
    tape = fake_nvml.h200x2()
    tape["gpus"][0]["handle"] = "ERR NVMLError_GpuIsLost GPU is lost"
    fake_nvml_module(tape)
    facts = nvml.collect()
    assert facts["gpu.0.name"].status == "error" and "GpuIsLost" in facts["gpu.0.name"].detail
    assert "gpu.0.memory_total" not in facts
    assert facts["gpu.1.name"].value == "NVIDIA H200"


def test_call_errors_map_to_statuses(fake_nvml_module):
    tape = fake_nvml.h200()
    gpu = tape["gpus"][0]
    gpu["procs"] = "ERR NVMLError_NoPermission Insufficient Permissions"
    gpu["ecc_uncorrected_volatile"] = "ERR NVMLError_Timeout Timeout"
    gpu["cc"] = "ERR NVMLError_Unknown Unknown Error"
    gpu["nvlink_active"] = "ERR NVMLError_Unknown Unknown Error"
    fake_nvml_module(tape)
    facts = nvml.collect()
    assert facts["gpu.0.processes"].status == "no_permission"
    assert facts["gpu.0.ecc_uncorrected_volatile"].status == "timeout"
    assert facts["gpu.0.compute_capability"].status == "error"
    assert facts["gpu.0.compute_capability"].value == {"code": 999, "name": "Unknown"}
    # no link could be read: an unexplained error on link 0 says "not supported", not a false alarm
    assert facts["gpu.0.nvlink_active"].status == "not_supported"


def test_an_unexpected_answer_is_an_error_fact(fake_nvml_module):
    tape = fake_nvml.h200()
    tape["gpus"][0]["cc"] = [9]  # a one-element answer: the conversion fails
    fake_nvml_module(tape)
    fact = nvml.collect()["gpu.0.compute_capability"]
    assert fact.status == "error" and fact.detail.startswith("unexpected NVML answer")


def test_old_binding_and_old_driver_fall_back(fake_nvml_module):
    fake_nvml_module(fake_nvml.h200(), v2_memory=False, missing=("nvmlDeviceGetCurrentClocksEventReasons",
                                                                  "nvmlDeviceGetGpuMaxPcieLinkGeneration"))
    facts = nvml.collect()
    assert facts["gpu.0.memory_used"].value == 644939776  # v1: the reserve counts as used
    assert facts["gpu.0.memory_reserved"].status == "not_supported"
    assert facts["gpu.0.throttle_reasons"].value == ["gpu_idle"]
    assert facts["gpu.0.pcie_gen_max"].value == 5


def test_a_driver_without_the_cuda_version_call(fake_nvml_module):
    tape = dict(fake_nvml.h200(), cuda_driver="ERR NVMLError_FunctionNotFound Function Not Found")
    fake_nvml_module(tape)
    fact = nvml.collect()["driver.cuda_max"]
    assert fact.status == "not_supported" and fact.value["name"] == "FunctionNotFound"


def test_a_pynvml_that_is_not_nvidia_ml_py(fake_nvml_module):
    fake_nvml_module(fake_nvml.h200(), missing=("nvmlDeviceGetCudaComputeCapability",))
    fact = nvml.collect()["driver.nvml"]
    assert fact.status == "error" and "is not nvidia-ml-py" in fact.detail


def test_no_pynvml_at_all(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "pynvml", None)  # what `import pynvml` raises ImportError for
    fact = nvml.collect()["driver.nvml"]
    assert fact.status == "absent" and "pynvml not importable" in fact.detail


def test_a_failing_shutdown_is_ignored(fake_nvml_module):
    nv = fake_nvml_module(fake_nvml.h200())

    def shutdown():
        raise fake_nvml.error("Uninitialized")

    nv.nvmlShutdown = shutdown
    assert nvml.collect()["gpu.count"].value == 1


def test_non_nvml_exceptions_and_the_loaded_library(tmp_path):
    fact = nvml._error_fact(OSError("libnvidia-ml.so.1: cannot open shared object file"))
    assert fact.status == "error" and fact.detail.startswith("OSError")
    maps = tmp_path / "maps"
    maps.write_text("7f00-7f01 r-xp 00000000 08:01 42   /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.580.159.04\n")
    assert nvml.loaded_library_path(str(maps)) == "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.580.159.04"
    assert nvml.loaded_library_path(str(tmp_path / "absent")) is None


# --- how the GPUs reach each other (probes.nvml_links) ------------------------------------------
def test_the_h200_topology_is_what_nvidia_smi_topo_printed_there(fake_nvml_module):
    """ground_truth/h200/fabric: topo -m "CPU Affinity 0-15", "GPU NUMA ID N/A", no NVLink, one GPU."""
    fake_nvml_module(fake_nvml.h200())
    facts = nvml.collect()
    assert facts["gpu.0.cpu_affinity"].value == "0-15"
    assert facts["gpu.0.numa_node"].status == "not_supported"
    assert facts["gpu.0.nvlink_links"].status == "not_supported"
    assert facts["gpu.pairs"].ok and facts["gpu.pairs"].value == {}


def test_the_two_h200s_are_nv18_as_topo_m_printed(fake_nvml_module):
    """ground_truth/h200x2/capture2.log: GPU0-GPU1 "NV18", CPU affinity 0-31; NVML's common ancestor 30 (PHB)."""
    fake_nvml_module(fake_nvml.h200x2())
    facts = nvml.collect()
    pair = facts["gpu.pairs"].value["0-1"]
    assert pair == {"level": "PHB", "nvlinks": 18, "connection": "NV18", "nvswitch": True,
                    "p2p": {"read": "OK", "write": "OK", "nvlink": "OK", "atomics": "OK"}}
    assert facts["gpu.1.cpu_affinity"].value == "0-31"
    links = facts["gpu.0.nvlink_links"].value
    # ground_truth/h200x2-nvswitch/compare.txt: every link ends at the switch, not at the other GPU
    assert len(links) == 18 and all(link["active"] and link["remote"] == "ffff:ff:ff.0" for link in links)


def test_links_straight_to_the_other_gpu_are_counted_as_such(fake_nvml_module):
    """An NVLink bridge between two cards: each link's remote end is the other GPU."""
    tape = fake_nvml.h200x2()
    for gpu, other in zip(tape["gpus"], reversed(tape["gpus"])):
        gpu["nvlink_remote"] = [other["pci"] if active else None for active in gpu["nvlink_active"]][:4] + [None] * 14
        gpu["nvlink_active"] = [1] * 4 + [0] * 14
    fake_nvml_module(tape)
    pair = nvml.collect()["gpu.pairs"].value["0-1"]
    assert (pair["nvlinks"], pair["connection"], "nvswitch" in pair) == (4, "NV4", False)


def test_p2p_failures_and_a_down_link_are_facts(fake_nvml_module):
    tape = fake_nvml.h200x2()
    tape["p2p_status"]["0-1"] = {0: 3, 1: 3, 2: 5, 3: "ERR NVMLError_Unknown"}  # topology not supported
    fake_nvml_module(tape)
    pair = nvml.collect()["gpu.pairs"].value["0-1"]
    assert pair["p2p"]["read"] == "TNS" and pair["p2p"]["nvlink"] == "NS" and pair["p2p"]["atomics"].startswith("ERR ")
    assert not pair["nvlinks"] and pair["connection"] == "PHB"  # links into a switch NVML says the pair cannot use
    tape = fake_nvml.h200x2()
    tape["gpus"][0]["nvlink_active"][5] = 0
    fake_nvml_module(tape)
    facts = nvml.collect()
    pair = facts["gpu.pairs"].value["0-1"]
    assert pair["nvlinks"] == 17 and pair["connection"] == "NV17"  # the fewer links of the two into the switch
    assert [link["link"] for link in facts["gpu.0.nvlink_links"].value if not link["active"]] == [5]


def test_cpulist_spelling():
    from gpudoctor.probes.nvml_links import cpulist

    assert cpulist([0xFFFF]) == "0-15"
    assert cpulist([0b1011, 1]) == "0-1,3,64"
    assert cpulist([0, 0]) == ""


def test_nvlink_speed_and_error_totals_in_one_field_values_call(fake_nvml_module):
    tape = fake_nvml.h200x2()
    for gpu in tape["gpus"]:  # the speed NVML gives in MB/s for nvidia-smi nvlink -s's "26.562 GB/s"; no errors
        gpu["nvlink_fields"] = {90: 26562, 52: 0, 59: 0, 38: 0}  # CRC data (45) left out: NotSupported on its own
    fake_nvml_module(tape)
    facts = nvml.collect()
    assert facts["gpu.1.nvlink_counters"].value == {"speed_mbps": 26562, "replay_errors": 0, "recovery_errors": 0, "crc_flit_errors": 0}


def test_nvlink_counters_not_asked_without_nvlink(fake_nvml_module):
    fake_nvml_module(fake_nvml.h200())
    facts = nvml.collect()
    assert "gpu.0.nvlink_counters" not in facts and facts["gpu.0.nvlink_links"].status == "not_supported"


def test_nvlink_error_counters_link_by_link_where_the_totals_are_not_supported_equal_nvidia_smi(fake_nvml_module):
    """The lent 2xH200 (NVSwitch, driver 580) answers every *_COUNT_TOTAL field NotSupported, and nvidia-smi
    nvlink -e still prints each link's Replay, Recovery and CRC errors: gpudoctor said "not supported". It now
    asks nvmlDeviceGetNvLinkErrorCounter link by link (recorded there: nvlink-errors.json) and sums, which must
    equal what nvidia-smi printed on that machine (nvlink-e.txt)."""
    import re

    text = (fake_nvml.GROUND / "h200x2-nvswitch" / "nvlink-e.txt").read_text(encoding="utf-8")
    smi = {}
    gpus = re.split(r"^GPU \d+:.*$", text, flags=re.M)[1:]
    for index, block in enumerate(gpus):
        smi[index] = {key: sum(int(n) for n in re.findall(rf"{label} Errors: (\d+)", block))
                      for key, label in (("replay_errors", "Replay"), ("recovery_errors", "Recovery"), ("crc_flit_errors", "CRC"))}
        assert len(re.findall(r"Link \d+: Replay", block)) == 18
    fake_nvml_module(fake_nvml.h200x2())  # no nvlink_fields: every total field NotSupported, as there
    facts = nvml.collect()
    for index in (0, 1):
        fact = facts[f"gpu.{index}.nvlink_counters"]
        assert fact.ok and fact.value == dict(smi[index], links_read=18), fact
        assert "per-link" in fact.detail
