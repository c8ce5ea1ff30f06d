"""GD6xx process rules: pass, fail and unknown cases.

They start from the snapshot recorded on the H200 while a real orphaned vLLM engine core
(PID 1147, ``VLLM::EngineCor``, parent 1) was left over (h200-stale-engine.json), and from
the same machine after ``gpudoctor fix`` (h200-after-fix.json). tests/test_processes_rules.py
has the cases with real processes spawned on this machine.
"""

from __future__ import annotations

import copy
from typing import Any, Dict

from cases import GIB, Case, drop, put, snap

STALE = "h200-stale-engine.json"
AFTER = "h200-after-fix.json"
NOW = 1796003994.36  # processes.scan.time of the recording


def stale(*edits):
    return snap(STALE, *edits)


def zombie_worker(data: Dict[str, Any]) -> None:
    """A vLLM worker (PID 2000) that exited under a live parent that never reaped it."""
    facts = data["facts"]
    facts["processes.index"]["value"]["2000"] = [1145, 0, "Z", "VLLM::Worker", NOW - 60]
    record = copy.deepcopy(facts["processes.serving"]["value"][0])
    record.update(pid=2000, ppid=1145, comm="VLLM::Worker", title="VLLM::Worker", cmdline="VLLM::Worker", role="worker", state="Z")
    facts["processes.serving"]["value"].append(record)


CASES = [
    # GD601 stale-serving-process
    Case("after-gpudoctor-fix", "GD601", snap(AFTER), "pass"),
    Case("orphaned-engine-core-on-the-h200", "GD601", stale(), "fail", "error", ("VLLM::EngineCore",), subject="PID 1147"),
    Case("no-process-table", "GD601", stale(drop("processes")), "unknown"),
    # GD602 serving-port-in-use
    Case("port-8000-free", "GD602", stale(), "pass"),
    Case("port-8000-held-by-the-stale-engine", "GD602",
         stale(put("processes.port", {"port": 8000, "listeners": [{"address": "0.0.0.0", "pids": [1147], "uid": 0}]})),
         "fail", "error", ("0.0.0.0:8000",), subject="port 8000"),
    Case("port-not-probed", "GD602", stale(drop("processes.port")), "unknown"),
    # GD603 leftover-shared-memory
    Case("dev-shm-empty", "GD603", stale(), "pass"),
    Case("an-hour-old-vllm-shm-file", "GD603",
         stale(put("processes.shm", {"dir": "/dev/shm", "maps_unreadable_pids": [], "maps_unreadable_uids": [],
                                     "files": [{"path": "/dev/shm/psm_0123abcd", "name": "psm_0123abcd", "size": 4 << 20,
                                                "mtime": NOW - 3600, "uid": 0, "in_use_by": []}]})),
         "fail", "warning", ("psm_0123abcd",), subject="/dev/shm"),
    # SGLang's PID-stamped segments: left over once their creator is gone, never while it runs
    # (PID 1147 is in the recording's process table, 424242 is not).
    Case("sglang-mm-segment-of-a-dead-scheduler", "GD603",
         stale(put("processes.shm", {"dir": "/dev/shm", "maps_unreadable_pids": [], "maps_unreadable_uids": [],
                                     "files": [{"path": "/dev/shm/sgl_shm_mm_424242_0badf00d", "name": "sgl_shm_mm_424242_0badf00d",
                                                "size": 8 << 20, "mtime": NOW - 3600, "uid": 0, "in_use_by": [],
                                                "creator_pid": 424242, "kind": "sglang_shared_memory"}]})),
         "fail", "warning", ("sgl_shm_mm_424242_0badf00d",), subject="/dev/shm"),
    Case("sglang-tokenizer-args-of-a-live-server", "GD603",
         stale(put("processes.shm", {"dir": "/dev/shm", "maps_unreadable_pids": [], "maps_unreadable_uids": [],
                                     "files": [{"path": "/dev/shm/multi_tokenizer_args_1147", "name": "multi_tokenizer_args_1147",
                                                "size": 4096, "mtime": NOW - 3600, "uid": 0, "in_use_by": [],
                                                "creator_pid": 1147, "kind": "sglang_shared_memory"}]})),
         "pass"),
    # GD604 gpu-memory-invisible-process
    Case("after-gpudoctor-fix", "GD604", snap(AFTER), "pass"),
    Case("4-gib-held-by-a-pid-not-here", "GD604",
         stale(put("gpu.0.processes", [{"pid": 99999, "used_memory": 4 * GIB, "type": "C"}]),
               put("gpu.0.memory_used", 4 * GIB)), "fail", "warning", ("not visible here",), subject="GPU 0"),
    # GD605 zombie-serving-process
    Case("no-zombie", "GD605", stale(), "pass"),
    Case("worker-not-reaped-by-its-parent", "GD605", stale(zombie_worker), "fail", "warning", ("VLLM::Worker (PID 2000)",),
         subject="PID 1145"),
    Case("no-process-table", "GD605", stale(drop("processes")), "unknown"),
]
