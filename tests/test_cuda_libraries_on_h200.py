"""GD201 on NVIDIA's own CUDA library wheels, judged on a snapshot recorded on a real H200.

The stock Python of the lent H200 (driver 580.159.04, torch 2.11.0+cu130, 199 distributions)
has 31 CUDA binaries. cuFFT 12.0.0.61 of its CUDA 13 wheels registers sm_75 cubins only
(cuobjdump --list-elf agrees) and runs on that H200 all the same: a library of NVIDIA's CUDA
wheels is judged as the CUDA release it belongs to, and a blocking error there was a false one
(seen in the H200 run of 2026-12-01, scripts/device/kernel.sh).
"""

from __future__ import annotations

import json
from pathlib import Path

from helpers import outcome

from gpudoctor.rule import FAIL, PASS
from gpudoctor.snapshot import Snapshot

RECORDED = Path(__file__).parent / "fixtures" / "snapshots" / "h200-every-cuda-binary.json"


def recorded() -> dict:
    return json.loads(RECORDED.read_text(encoding="utf-8"))


def test_the_recorded_h200_has_cufft_with_sm75_only_and_cublas_with_sm90():
    binaries = recorded()["facts"]["kernels.binaries"]["value"]
    by_name = {Path(b["path"]).name: b for b in binaries}
    assert by_name["libcufft.so.12"]["dist"] == "nvidia-cufft"
    assert by_name["libcufft.so.12"]["scan"]["sm_variants"] == ["sm_75"]
    assert "sm_90" in by_name["libcublasLt.so.13"]["scan"]["sm_variants"]


def test_cuda_libraries_of_a_release_that_has_hopper_code_pass_on_the_h200():
    result = outcome(Snapshot.from_json(recorded()), "GD201")
    assert result.status == PASS, result
    assert not result.findings


def test_a_cuda_library_whose_release_has_no_code_for_the_gpu_is_still_an_error():
    data = recorded()
    binaries = data["facts"]["kernels.binaries"]["value"]
    data["facts"]["kernels.binaries"]["value"] = [b for b in binaries if b["dist"] == "nvidia-cufft"]
    result = outcome(Snapshot.from_json(data), "GD201")
    assert result.status == FAIL
    assert "nvidia-cufft" in result.findings[0].message and "libcufft.so.12" in result.findings[0].message
