"""What each real vLLM release does with GPU memory at startup, read from its wheel's source by
gpudoctor/probes/launch/vllm_memory.py (the facts GD708 decides with), checked against the source
as published: the default --gpu-memory-utilization, the extensible KV cache (0.34.0) and the
free-memory check's condition and words.

Expected values, from each release's own files: 0.8.5 vllm/config.py ``gpu_memory_utilization: float
= 0.9`` and no "less than desired GPU memory utilization" anywhere; 0.11.0 vllm/config/cache.py 0.9
and the check in vllm/v1/worker/gpu_worker.py ("Free memory on device (…)", no device name);
0.20.0 and 0.33.0 ``Field(default=0.92, gt=0, le=1)`` and ``request_memory`` in
vllm/v1/worker/utils.py; 0.34.0 ``Field(default=None, …)`` resolved to 1.0 with the extensible KV
cache, else ``DEFAULT_GPU_MEMORY_UTILIZATION = 0.92``, and the check ``and not
cache_config.enable_extensible_kv_cache``.
"""

import sys
import zipfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import realenv  # noqa: E402

from gpudoctor.probes.launch import vllm_memory  # noqa: E402

pytestmark = pytest.mark.real

WORDS = ("Free memory on device {device} ({free}/{total} GiB) on startup is less than desired GPU memory utilization "
         "({utilization}, {requested} GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.")
EXPECTED = {
    "0.8.5": (0.9, None, None),
    "0.11.0": (0.9, None, WORDS.replace("device {device} ", "device ")),
    "0.20.0": (0.92, None, WORDS),
    "0.33.0": (0.92, None, WORDS),
    "0.34.0": (0.92, 1.0, WORDS),
}


def source_of(version: str, into: Path) -> Path:
    """The wheel's vllm/**.py files (what preflight reads in an installed vLLM)."""
    with zipfile.ZipFile(realenv.wheel("vllm", version)) as archive:
        for name in archive.namelist():
            if name.startswith("vllm/") and name.endswith(".py"):
                archive.extract(name, into)
    return into / "vllm"


@pytest.mark.parametrize("version", sorted(EXPECTED))
def test_memory_facts_of_each_release(version, tmp_path):
    default, with_extensible, words = EXPECTED[version]
    found = vllm_memory.read(str(source_of(version, tmp_path)))
    assert found is not None
    assert found["utilization"]["default"] == default and found["utilization"]["with_extensible"] == with_extensible
    check = found["check"]
    assert (check or {}).get("words") == words
    dests = {"__dests__": {"gpu_memory_utilization", "enable_extensible_kv_cache", "kv_cache_memory_bytes", "num_gpu_blocks_override",
                           "enable_elastic_ep", "kv_transfer_config"}}
    plain = vllm_memory.for_command(found, dict(dests))
    if version != "0.34.0":
        assert found["extensible"] is None and plain["extensible"] is False
        assert plain["utilization"] == default and plain["check_runs"] is (None if words is None else True)
        return
    assert check["skipped_with_extensible"] and check["where"].startswith("vllm/v1/worker/utils.py:")
    assert plain["extensible"] is True and plain["utilization"] == 1.0 and plain["check_runs"] is False
    for off in ({"enable_extensible_kv_cache": False}, {"kv_cache_memory_bytes": 8 << 30}, {"num_gpu_blocks_override": 1000},
                {"enable_elastic_ep": True}):
        decided = vllm_memory.for_command(found, {**dests, **off})
        assert decided["extensible"] is False and decided["utilization"] == 0.92 and decided["check_runs"] is True, off
    decided = vllm_memory.for_command(found, {**dests, "gpu_memory_utilization": 0.97})
    assert decided["utilization"] == 0.97 and decided["check_runs"] is False
    # A KV connector: whether vLLM keeps the extensible cache depends on the connector, not read here.
    decided = vllm_memory.for_command(found, {**dests, "kv_transfer_config": {"kv_connector": "NixlConnector"}})
    assert decided["extensible"] is None and decided["check_runs"] is None
