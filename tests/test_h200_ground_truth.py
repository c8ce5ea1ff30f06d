"""The recorded H200 snapshots say what the H200 machines really are.

tests/fixtures/snapshots/h200*.json were written by ``gpudoctor snapshot`` on lent H200
machines; tests/fixtures/ground_truth/ holds raw captures of the same kind of machine
taken independently of gpudoctor (NVML through a separate script, ``nvidia-smi -q -x``,
``nvidia-smi --query-gpu`` CSV, ``torch/version.py``, /proc). The captures come from other
sessions (other VMs: UUIDs and serials differ), so only hardware and driver properties are
compared. The truth is read here with the standard library (ElementTree, json), not with
gpudoctor's own parsers.
"""

from __future__ import annotations

import csv
import io
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any, Dict, List

import pytest

from gpudoctor.cli import main
from gpudoctor.snapshot import Snapshot

FIXTURES = Path(__file__).parent / "fixtures"
SNAPSHOTS = FIXTURES / "snapshots"
TRUTH = FIXTURES / "ground_truth"
MIB = 1 << 20
GIB = 1 << 30


# --- reading the ground truth ------------------------------------------------------------------
def _sections(path: Path) -> Dict[str, str]:
    """``===== name`` sections of a capture log."""
    out: Dict[str, str] = {}
    name = None
    for line in path.read_text(encoding="utf-8").splitlines(keepends=True):
        match = re.match(r"^===== (\S+)\s*$", line)
        if match:
            name = match.group(1)
            out[name] = ""
        elif name:
            out[name] += line
    return out


H200_LOG = _sections(TRUTH / "h200" / "capture.log")
X2_LOG = _sections(TRUTH / "h200x2" / "capture2.log")


def _json_in(text: str) -> Any:
    data, _ = json.JSONDecoder().raw_decode(text[text.index("{"):])
    return data


NVML_1 = _json_in(H200_LOG["nvml"])  # one H200, read with pynvml by the capture script
NVML_2 = json.loads((TRUTH / "h200x2" / "nvml-multi.json").read_text(encoding="utf-8"))
XML = ET.parse(str(TRUTH / "h200" / "nvidia-smi-q.xml")).getroot()
XML_GPU = XML.find("gpu")


def _query_csv() -> List[Dict[str, str]]:
    rows = list(csv.reader(io.StringIO(X2_LOG["query"].strip()), skipinitialspace=True))
    return [dict(zip(rows[0], row)) for row in rows[1:]]


def _version_py(text: str) -> Dict[str, str]:
    """Assignments in torch/version.py as recorded (``x = '...'`` and ``x: T = '...'``)."""
    return dict(re.findall(r"^(\w+)(?::[^=]*)? = '([^']*)'$", text, re.M))


def _xml(path: str) -> str:
    node = XML_GPU.find(path)
    assert node is not None, path
    return (node.text or "").strip()


def _mib(text: str) -> int:
    number, unit = text.split()
    assert unit == "MiB"
    return int(number) * MIB


@pytest.fixture(scope="module", params=["h200.json", "h200-full.json"])
def h200(request) -> Snapshot:
    """The first recording (driver and GPU probes) and a later one with every probe."""
    return Snapshot.load(str(SNAPSHOTS / request.param))


@pytest.fixture(scope="module")
def h200x2() -> Snapshot:
    return Snapshot.load(str(SNAPSHOTS / "h200x2.json"))


# --- the expected values, stated once ----------------------------------------------------------
def test_ground_truth_says_what_the_brief_says():
    """Guard against reading the captures wrongly: the headline numbers, literally."""
    assert NVML_1["driver"] == NVML_2["driver"] == XML.findtext("driver_version") == "580.159.04"
    assert NVML_1["cuda_driver"] == NVML_2["cuda_driver"] == 13000
    assert XML.findtext("cuda_version") == "13.0"
    assert _xml("fb_memory_usage/total") == "143771 MiB"
    assert 143771 * MIB == 150754820096 == NVML_2["gpus"][0]["mem_total"]
    assert NVML_1["gpus"][0]["cc"] == [9, 0]
    assert [sum(g["nvlink_active"]) for g in NVML_2["gpus"]] == [18, 18]


# --- one H200 ----------------------------------------------------------------------------------
def test_h200_driver_matches_nvml_and_nvidia_smi(h200):
    assert h200.value("driver.version") == NVML_1["driver"] == XML.findtext("driver_version")
    major, minor = divmod(NVML_1["cuda_driver"], 1000)
    assert h200.value("driver.cuda_max") == f"{major}.{minor // 10}" == XML.findtext("cuda_version")
    assert h200.value("driver.nvml_version") == NVML_1["nvml"]
    assert h200.value("gpu.count") == NVML_1["count"] == int(XML.findtext("attached_gpus"))


def test_h200_kernel_module_and_library_match_the_capture(h200):
    proc_line = H200_LOG["proc-driver"].splitlines()[0]
    assert h200.value("driver.proc_version") == proc_line
    assert h200.value("driver.kernel_module_version") == "580.159.04"
    assert h200.value("driver.kernel_module_type") == "open"
    assert "Open Kernel Module" in proc_line
    # ldconfig/ls in the capture: libnvidia-ml.so.1 -> libnvidia-ml.so.580.159.04 in /usr/local/nvidia/lib64
    assert "libnvidia-ml.so.1 -> libnvidia-ml.so.580.159.04" in H200_LOG["libs"]
    assert "=> /usr/local/nvidia/lib64/libnvidia-ml.so.1" in H200_LOG["libs"]
    assert h200.value("driver.library_path") == "/usr/local/nvidia/lib64/libnvidia-ml.so.580.159.04"


def test_h200_gpu_properties_match_nvml(h200):
    truth = NVML_1["gpus"][0]
    assert h200.value("gpu.0.name") == truth["name"] == "NVIDIA H200"
    assert h200.value("gpu.0.compute_capability") == "{}.{}".format(*truth["cc"]) == "9.0"
    assert h200.value("gpu.0.pci_bus_id") == truth["pci"]
    assert h200.value("gpu.0.persistence_mode") is bool(truth["persistence"]) is True
    assert h200.value("gpu.0.compute_mode") == {0: "Default"}[truth["compute_mode"]]
    assert h200.value("gpu.0.mig_mode") is bool(truth["mig"][0]) is False
    assert h200.value("gpu.0.ecc_mode") is bool(truth["ecc"][0]) is True
    assert h200.value("gpu.0.ecc_uncorrected_volatile") == truth["ecc_uncorrected_volatile"] == 0
    assert h200.value("gpu.0.pcie_gen_current") == truth["pcie_gen"] == 5
    assert h200.value("gpu.0.pcie_gen_max") == truth["pcie_gen_max"] == 5
    assert h200.value("gpu.0.pcie_width_current") == truth["pcie_width"] == 16
    correctable, uncorrectable, pending, failure = truth["remapped_rows"]
    assert h200.value("gpu.0.remapped_rows") == {
        "correctable": correctable, "uncorrectable": uncorrectable, "pending": bool(pending), "failure": bool(failure)
    }
    assert truth["throttle"] == 0x1  # nvmlClocksEventReasonGpuIdle
    assert h200.value("gpu.0.throttle_reasons") == ["gpu_idle"]
    assert h200.value("gpu.0.processes") == truth["procs"] == []


def test_h200_gpu_properties_match_nvidia_smi_xml(h200):
    assert h200.value("gpu.0.name") == _xml("product_name")
    assert h200.value("gpu.0.pci_bus_id") == XML_GPU.get("id")
    assert h200.value("gpu.0.memory_total") == _mib(_xml("fb_memory_usage/total")) == 150754820096
    # nvidia-smi rounds to MiB: reserved/free agree within one MiB.
    assert abs(h200.value("gpu.0.memory_reserved") - _mib(_xml("fb_memory_usage/reserved"))) < MIB
    assert abs(h200.value("gpu.0.memory_free") - _mib(_xml("fb_memory_usage/free"))) < MIB
    assert h200.value("gpu.0.memory_used") == _mib(_xml("fb_memory_usage/used")) == 0
    assert h200.value("gpu.0.persistence_mode") is (_xml("persistence_mode") == "Enabled")
    assert h200.value("gpu.0.ecc_mode") is (_xml("ecc_mode/current_ecc") == "Enabled")
    assert h200.value("gpu.0.compute_mode") == _xml("compute_mode")
    assert h200.value("gpu.0.mig_mode") is (_xml("mig_mode/current_mig") == "Enabled")
    link = "pci/pci_gpu_link_info/"
    assert h200.value("gpu.0.pcie_gen_max") == int(_xml(link + "pcie_gen/max_link_gen"))
    assert h200.value("gpu.0.pcie_gen_current") == int(_xml(link + "pcie_gen/current_link_gen"))
    assert f"{h200.value('gpu.0.pcie_width_max')}x" == _xml(link + "link_widths/max_link_width") == "16x"
    assert f"{h200.value('gpu.0.pcie_width_current')}x" == _xml(link + "link_widths/current_link_width")
    assert h200.value("gpu.0.ecc_uncorrected_volatile") == int(_xml("ecc_errors/volatile/dram_uncorrectable"))
    rows = h200.value("gpu.0.remapped_rows")
    assert rows["pending"] is (_xml("remapped_rows/remapped_row_pending") == "Yes")
    assert rows["failure"] is (_xml("remapped_rows/remapped_row_failure") == "Yes")
    assert _xml("clocks_event_reasons/clocks_event_reason_gpu_idle") == "Active"
    assert "gpu_idle" in h200.value("gpu.0.throttle_reasons")


def test_h200_single_gpu_has_no_nvlink(h200):
    fact = h200.get("gpu.0.nvlink_active")
    assert fact.status == "not_supported"
    assert fact.value == {"code": 3, "name": "NotSupported"}


def test_h200_torch_matches_version_py_text(h200):
    version_py = _version_py(H200_LOG["torch-version-file"])
    assert h200.value("torch.version") == version_py["__version__"] == "2.11.0+cu130"
    assert h200.value("torch.cuda") == version_py["cuda"] == "13.0"
    assert h200.value("torch.git_version") == version_py["git_version"]
    # ... and with what `import torch` printed on that machine.
    assert H200_LOG["torch"].splitlines()[1].split()[:2] == ["2.11.0+cu130", "13.0"]


def test_h200_host_and_python_match_the_capture(h200):
    uname = H200_LOG["uname"].splitlines()[0].split()  # uname -a
    assert h200.value("host.kernel") == uname[2]
    assert h200.value("host.arch") == "x86_64" == uname[-2]
    assert f'PRETTY_NAME="{h200.value("host.os")}"' in H200_LOG["uname"]
    python = H200_LOG["python"].splitlines()
    assert h200.value("python.executable") == python[0]
    assert f"Python {h200.value('python.version')}" == python[1]
    assert re.search(r"^tmpfs\s+128G\s.*\s/dev/shm$", H200_LOG["site"], re.M)
    assert h200.value("host.shm_total") == 128 * GIB


def test_h200_env_matches_the_capture(h200):
    captured = dict(line.split("=", 1) for line in H200_LOG["env"].splitlines() if "=" in line)
    env = h200.value("env")
    shared = set(env) & set(captured)
    assert {"CUDA_VERSION", "NVIDIA_VISIBLE_DEVICES", "LD_LIBRARY_PATH", "NVIDIA_REQUIRE_CUDA"} <= shared
    for key in shared:
        assert env[key] == captured[key], key


# --- two H200s with NVLink ---------------------------------------------------------------------
def test_h200x2_gpus_match_nvml_multi(h200x2):
    assert h200x2.value("driver.version") == NVML_2["driver"]
    assert h200x2.value("gpu.count") == len(NVML_2["gpus"]) == 2
    for truth in NVML_2["gpus"]:
        i = truth["index"]
        assert h200x2.value(f"gpu.{i}.name") == truth["name"]
        assert h200x2.value(f"gpu.{i}.compute_capability") == "{}.{}".format(*truth["cc"])
        assert h200x2.value(f"gpu.{i}.pci_bus_id") == truth["pci"]
        assert h200x2.value(f"gpu.{i}.memory_total") == truth["mem_total"]
        assert h200x2.value(f"gpu.{i}.memory_free") == truth["mem_free"]
        # The capture used NVML memory v1, whose "used" includes the driver's reservation;
        # gpudoctor reads v2, which reports the reservation apart.
        assert h200x2.value(f"gpu.{i}.memory_used") + h200x2.value(f"gpu.{i}.memory_reserved") == truth["mem_used"]
        assert h200x2.value(f"gpu.{i}.nvlink_active") == sum(truth["nvlink_active"]) == 18


def test_h200x2_gpus_match_nvidia_smi_query_and_topology(h200x2):
    rows = _query_csv()
    assert len(rows) == 2
    for row in rows:
        i = int(row["index"])
        assert h200x2.value(f"gpu.{i}.name") == row["name"]
        assert h200x2.value(f"gpu.{i}.compute_capability") == row["compute_cap"] == "9.0"
        assert h200x2.value("driver.version") == row["driver_version"]
        assert h200x2.value(f"gpu.{i}.memory_total") == _mib(row["memory.total [MiB]"])
        assert h200x2.value(f"gpu.{i}.pcie_gen_current") == int(row["pcie.link.gen.current"]) == 5
        assert h200x2.value(f"gpu.{i}.pcie_width_current") == int(row["pcie.link.width.current"]) == 16
        assert h200x2.value(f"gpu.{i}.ecc_mode") is (row["ecc.mode.current"] == "Enabled") is True
        assert h200x2.value(f"gpu.{i}.persistence_mode") is (row["persistence_mode"] == "Enabled") is True
        assert int(row["clocks_event_reasons.active"], 16) == 0x1
        assert h200x2.value(f"gpu.{i}.throttle_reasons") == ["gpu_idle"]
    # `nvidia-smi topo -m`: the two GPUs are joined by a bonded set of 18 NVLinks.
    assert re.search(r"^GPU0\s+X\s+NV18\s", X2_LOG["topo"], re.M)
    assert re.search(r"^GPU1\s+NV18\s+X\s", X2_LOG["topo"], re.M)
    assert X2_LOG["nvlink"].count("Link ") == 2 * 18


def test_h200x2_host_memory_matches_meminfo(h200x2):
    mem_total_kb = int(re.search(r"^MemTotal:\s+(\d+) kB", X2_LOG["shm"], re.M).group(1))
    assert h200x2.value("host.memory_total") == mem_total_kb * 1024


# --- gpudoctor check on the real machines ------------------------------------------------------
def _check(snapshot: str, *extra: str):
    out, err = io.StringIO(), io.StringIO()
    code = main(["check", "--snapshot", str(SNAPSHOTS / snapshot), "--format", "json", *extra], {}, out, err)
    return code, json.loads(out.getvalue()), err.getvalue()


@pytest.mark.parametrize("name", ["h200.json", "h200-full.json", "h200x2.json"])
def test_check_on_healthy_h200_exits_0_with_nothing_to_report(name):
    code, doc, err = _check(name, "--fail-on", "warning")
    assert code == 0, doc["findings"]
    assert err == ""
    assert [f for f in doc["findings"] if f["severity"] in ("error", "warning")] == []
    assert [f for f in doc["findings"] if f["area"] in ("internal", "driver", "gpu")] == []
    statuses = {o["id"]: o["status"] for o in doc["outcomes"]}
    assert statuses["GD101"] == statuses["GD102"] == statuses["GD103"] == "pass"
    assert statuses["GD302"] == statuses["GD305"] == "pass"
    assert "unknown" not in {statuses[rule] for rule in statuses if rule[2] in "013"}


def test_check_on_busy_h200x2_reports_the_real_torch_process_on_gpu_1():
    code, doc, _ = _check("h200x2-busy.json")
    assert code == 0  # a warning does not block by default
    assert [(f["id"], f["subject"], f["severity"]) for f in doc["findings"]] == [("GD302", "GPU 1", "warning")]
    finding = doc["findings"][0]
    assert "PID 896" in finding["message"]
    assert "3.6 GiB" in finding["message"] and "140.4 GiB" in finding["message"]
    evidence = {e["path"]: e["value"] for e in finding["evidence"]}
    assert evidence["gpu.1.memory_used"] == 3870097408
    assert evidence["gpu.1.processes"] == [{"pid": 896, "used_memory": 3860856832}]
    assert "ps -o pid,user,etime,args -p 896" in finding["fix"]["commands"]
    # --fail-on warning makes it blocking.
    assert _check("h200x2-busy.json", "--fail-on", "warning")[0] == 1
