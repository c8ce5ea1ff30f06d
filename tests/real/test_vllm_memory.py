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
sys.path.insert(0, str(Path(__file__).resolve().parent))
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
    with zipfile.ZipFile(realenv.source_wheel("vllm", version)) as archive:
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


SNAPSHOTS = Path(__file__).resolve().parents[1] / "fixtures" / "snapshots"
BUSY_H200 = ("Free memory on device cuda:1 (136.2/139.8 GiB) on startup is less than desired GPU memory utilization "
             "(0.98, 137.0 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.")
BUSY_A100 = ("Free memory on device cuda:1 (35.8/39.41 GiB) on startup is less than desired GPU memory utilization "
             "(0.92, 36.26 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.")


@pytest.mark.parametrize("version, machine, flags, expected", [
    # The recorded busy H200 pair (PID 896 holds 3.6 GiB of GPU 1): 0.33.0's default 0.92 fits, 0.98 does not.
    ("0.33.0", "h200x2-busy.json", [], None),
    ("0.33.0", "h200x2-busy.json", ["--gpu-memory-utilization", "0.98"], BUSY_H200),
    ("0.33.0", "a100x2-40gb.json", [], BUSY_A100),
    # 0.34.0: the extensible KV cache is on by default on CUDA, and the check does not run at all …
    ("0.34.0", "h200x2-busy.json", ["--gpu-memory-utilization", "0.98"], "not_applicable"),
    ("0.34.0", "a100x2-40gb.json", [], "not_applicable"),
    # … unless the cache is off: then 0.34.0 refuses with the same words, at its DEFAULT_GPU_MEMORY_UTILIZATION 0.92.
    ("0.34.0", "h200x2-busy.json", ["--no-enable-extensible-kv-cache", "--gpu-memory-utilization", "0.98"], BUSY_H200),
    ("0.34.0", "a100x2-40gb.json", ["--kv-cache-memory-bytes", "8G"], BUSY_A100),
])
def test_gd708_on_a_busy_gpu_says_what_each_release_does(version, machine, flags, expected):
    import json
    import os
    import subprocess

    import test_vllm_releases

    script = test_vllm_releases.vllm_script(version)  # the real release's source, read only
    done = subprocess.run([sys.executable, "-m", "gpudoctor", "preflight", "--snapshot", str(SNAPSHOTS / machine), "--select", "GD708",
                           "--format", "json", "--", str(script), "serve", "facebook/opt-125m", "-tp", "2", *flags],
                          capture_output=True, text=True, timeout=120, env=dict(os.environ, HF_HUB_OFFLINE="1"))
    (outcome,) = [o for o in json.loads(done.stdout)["outcomes"] if o["id"] == "GD708"]
    if expected is None:
        assert outcome["status"] == "pass", outcome
    elif expected == "not_applicable":
        assert outcome["status"] == "not_applicable" and "enable_extensible_kv_cache" in outcome["reason"], outcome
    else:
        (finding,) = outcome["findings"]
        assert finding["subject"] == "GPU 1" and f'"ValueError: {expected}"' in finding["message"], finding["message"]
