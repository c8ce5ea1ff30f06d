"""Which of sgl_kernel's extensions SGLang uses on which GPU (probes/sglang_kernels.py + GD201).

The sgl_kernel tree here is laid out as pip installs sglang-kernel 0.4.10 (dist-info + RECORD),
its Python source copied verbatim from that wheel (sgl_kernel/load_utils.py lines 1-25 and
48-68, flash_attn.py lines 1-28, infllm_v2/_loader.py's load_infllm_ops fast path,
flash_mla.py lines 1-11), with real nvcc-built binaries standing in for the extensions. The
real wheel on every GPU is checked in tests/real/test_real_sglang.py.
"""

from pathlib import Path

import pytest

from gpudoctor import registry
from gpudoctor.engine import run_rules
from gpudoctor.probes import fatbin, python_stack_collect, scancache, sglang_kernels
from gpudoctor.snapshot import Fact, Snapshot, ok

from fakes.site_packages import SM86, SitePackages

REPO = Path(__file__).resolve().parent.parent
FATBIN = REPO / "tests" / "fixtures" / "fatbin"
VARIANTS = FATBIN / "libvariants.so"  # sm_90, sm_90a, sm_100a, sm_103a, sm_120, sm_121a (+ PTX): no sm_80
CONCAT = FATBIN / "libconcat.so"  # sm_90a, sm_100a, sm_103, sm_120 (+ PTX): a subset of VARIANTS' archs
RDC = FATBIN / "librdc.so"  # sm_80, sm_90
LZ4 = FATBIN / "liblz4.so"  # sm_80, sm_90a (+ PTX)
FAMILY = FATBIN / "libfamily.so"  # sm_80, sm_100, sm_120
H200 = REPO / "tests" / "fixtures" / "snapshots" / "h200.json"

LOAD_UTILS = '''import ctypes
import glob
import importlib.util
import logging
import os
import shutil
from pathlib import Path
from typing import List

import torch

logger = logging.getLogger(__name__)

def _get_compute_capability():
    """Get the compute capability of the current GPU."""
    if not torch.cuda.is_available():
        return None

    # Get the current device
    device = torch.cuda.current_device()
    properties = torch.cuda.get_device_properties(device)

    # Return as integer (major * 10 + minor)
    return properties.major * 10 + properties.minor


def _load_architecture_specific_ops():
    """Load the appropriate common_ops library based on GPU architecture."""
    compute_capability = _get_compute_capability()
    logger.debug(
        f"[sgl_kernel] GPU Detection: compute_capability = {compute_capability}"
    )

    # Get the directory where sgl_kernel is installed
    sgl_kernel_dir = Path(__file__).parent
    logger.debug(f"[sgl_kernel] sgl_kernel directory: {sgl_kernel_dir}")

    # Determine which version to load based on GPU architecture
    if compute_capability == 90:
        ops_subdir = "sm90"
        variant_name = "SM90 (Hopper/H100 with fast math optimization)"
    elif compute_capability is not None:
        ops_subdir = "sm100"
        variant_name = f"SM{compute_capability} (precise math for compatibility)"
    else:
        ops_subdir = "sm100"
        variant_name = "CPU/No GPU detected (using precise math)"

'''
FLASH_ATTN = '''from functools import lru_cache
from typing import Optional, Union

import torch
from sgl_kernel.debug_utils import maybe_wrap_debug_kernel

try:
    from sgl_kernel import flash_ops
except:
    raise ImportError(
        "Can not import FA3 in sgl_kernel. Please check your installation."
    )


@lru_cache(maxsize=1)
def is_fa3_supported(device=None) -> bool:
    #  There some fa3 FYI
    #  FA3 can fail without a enough shared memory for a some shapes, such as higher
    #  hidden_dim or some special cases.
    #  Right now, fa3 is supported for sm80/sm87 and sm86/sm89. The main different
    #  Between sm80/sm87 and sm86/sm89 is the shared memory size. you can follow the link below for more information
    #  https://docs.nvidia.com/cuda/cuda-c-programming-guide/#shared-memory-8-x
    #  And for sgl-kernel right now, we can build fa3 on sm80/sm86/sm89/sm90a.
    #  That means if you use A100/A*0/L20/L40/L40s/4090 you can use fa3.
    return (torch.version.cuda >= "12.3") and (
        torch.cuda.get_device_capability(device)[0] == 9
        or torch.cuda.get_device_capability(device)[0] == 8
    )
'''
INFLLM_LOADER = '''_infllm_ops = None


def load_infllm_ops():
    """Import and return the ``infllm_ops`` extension module (cached)."""
    global _infllm_ops
    if _infllm_ops is not None:
        return _infllm_ops

    # Fast path: a normal import may already work.
    try:
        from sgl_kernel import infllm_ops as _mod  # type: ignore

        _infllm_ops = _mod
        return _infllm_ops
    except Exception:
        pass
'''
FLASH_MLA = '''import dataclasses
from typing import Optional, Tuple

import torch

try:
    from sgl_kernel import flashmla_ops  # triggers TORCH extension registration
except Exception as _e:
    _flashmla_import_error = _e
else:
    _flashmla_import_error = None
'''


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUDOCTOR_CACHE_DIR", str(tmp_path / "cache"))
    scancache.forget()
    yield
    scancache.forget()


def install_sgl_kernel(site, sm90=RDC, sm100=FAMILY, flash_ops=LZ4, infllm=CONCAT, flashmla=CONCAT, load_utils=LOAD_UTILS):
    return site.dist("sglang-kernel", "0.4.10", requires=["torch==2.14.1"], files={
        "sgl_kernel/__init__.py": "from sgl_kernel.load_utils import _load_architecture_specific_ops\ncommon_ops = _load_architecture_specific_ops()\n",
        "sgl_kernel/load_utils.py": load_utils,
        "sgl_kernel/flash_attn.py": FLASH_ATTN,
        "sgl_kernel/flash_mla.py": FLASH_MLA,
        "sgl_kernel/infllm_v2/__init__.py": "",
        "sgl_kernel/infllm_v2/_loader.py": INFLLM_LOADER,
        "sgl_kernel/sm90/common_ops.abi3.so": sm90,
        "sgl_kernel/sm100/common_ops.abi3.so": sm100,
        "sgl_kernel/flash_ops.abi3.so": flash_ops,
        "sgl_kernel/infllm_ops.cpython-310-x86_64-linux-gnu.so": infllm,
        "sgl_kernel/flashmla_ops.abi3.so": flashmla,
    })


def facts_of(site):
    return python_stack_collect.collect_plain([str(site.path)], "none", fatbin.scan, [sglang_kernels.collect_plain])


def by_module(facts):
    return {e["module"]: e for e in facts["sglang.extensions"]["value"]["extensions"]}


def gd201(site, cc, name):
    snap = Snapshot.load(str(H200))
    for path, data in facts_of(site).items():
        snap.facts[path] = Fact.from_json(data)
    for path in [p for p in snap.facts if p.startswith("gpu.")]:
        del snap.facts[path]
    snap.facts["gpu.count"] = ok(1, "test")
    snap.facts["gpu.0.compute_capability"] = ok(cc, "test")
    snap.facts["gpu.0.name"] = ok(name, "test")
    return run_rules(snap, [registry.find("GD201")]).outcomes[0]


def test_the_loader_and_the_fa3_gate_are_read_from_sgl_kernels_source(tmp_path):
    site = SitePackages(tmp_path / "site")
    install_sgl_kernel(site)
    value = facts_of(site)["sglang.extensions"]["value"]
    assert value["loader"] == {"where": "sgl_kernel/load_utils.py", "branches": [
        {"subdir": "sm90", "when": [{"op": "==", "value": 90}], "line": 39},
        {"subdir": "sm100", "when": [{"op": "is not", "value": None}], "line": 42},
        {"subdir": "sm100", "when": [{"op": "else", "value": None}], "line": 46}]}
    exts = by_module(facts_of(site))
    assert (exts["sgl_kernel.sm90.common_ops"]["role"], exts["sgl_kernel.sm90.common_ops"]["subdir"]) == ("loader", "sm90")
    assert (exts["sgl_kernel.sm100.common_ops"]["role"], exts["sgl_kernel.sm100.common_ops"]["subdir"]) == ("loader", "sm100")
    fa3 = exts["sgl_kernel.flash_ops"]
    assert (fa3["role"], fa3["majors"], fa3["gate"]) == ("gated", [8, 9], "is_fa3_supported() at sgl_kernel/flash_attn.py:16")
    assert exts["sgl_kernel.infllm_ops"]["role"] == "optional"
    assert exts["sgl_kernel.infllm_ops"]["imports"][0]["function"] == "load_infllm_ops"
    assert exts["sgl_kernel.flashmla_ops"]["role"] == "optional"


def test_a_loader_it_cannot_read_is_not_guessed(tmp_path):
    site = SitePackages(tmp_path / "site")
    install_sgl_kernel(site, load_utils=LOAD_UTILS.replace("compute_capability == 90", "is_hopper(compute_capability)"))
    value = facts_of(site)["sglang.extensions"]["value"]
    assert value["loader"] is None
    assert by_module(facts_of(site))["sgl_kernel.sm90.common_ops"]["role"] == "unreferenced"  # judged everywhere, as before


def test_on_a_b200_what_the_loader_does_not_pick_and_fa3_are_not_applicable(tmp_path):
    site = SitePackages(tmp_path / "site")
    install_sgl_kernel(site, flash_ops=SM86)  # sm90/common_ops and flash_ops have no sm_100 code (nor PTX)
    result = gd201(site, "10.0", "B200")
    assert result.status == "pass", [f.message for f in result.findings]
    assert ("sgl_kernel.sm90.common_ops: sgl_kernel's loader (sgl_kernel/load_utils.py:42) loads sm100/common_ops on cc 10.0, "
            "not sm90/") in result.reason
    assert "sgl_kernel.flash_ops: used only on cc 8.x and 9.x (is_fa3_supported() at sgl_kernel/flash_attn.py:16), not on cc 10.0" in result.reason


def test_an_optional_extension_built_for_a_subset_of_the_loaded_one_is_not_applicable(tmp_path):
    site = SitePackages(tmp_path / "site")
    install_sgl_kernel(site, sm100=VARIANTS)  # PTX 9.0 runs on 11.0; infllm_ops (CONCAT) has nothing for 11.0
    result = gd201(site, "11.0", "Jetson Thor")
    assert result.status == "pass", [f.message for f in result.findings]
    assert "sgl_kernel.infllm_ops: built for sm_90a, sm_100a, sm_103, sm_120, compute_100, compute_120 only" in result.reason
    assert "a subset of common_ops.abi3.so (sm100/); imported at sgl_kernel/infllm_v2/_loader.py:12 (in load_infllm_ops())" in result.reason


def test_what_the_loader_picks_or_fa3_uses_without_the_gpus_code_is_an_error(tmp_path):
    site = SitePackages(tmp_path / "site")
    install_sgl_kernel(site, sm100=VARIANTS, flash_ops=SM86)
    # A100: the loader picks sm100/ (no sm_80 there), and FA3 is used on 8.x (sm_86 only: not on 8.0).
    [finding] = gd201(site, "8.0", "A100").findings
    assert finding.message.startswith("sglang-kernel 0.4.10 has no code for GPU 0 (A100, cc 8.0): ")
    assert "sgl_kernel/sm100/common_ops.abi3.so" in finding.message and "sgl_kernel/flash_ops.abi3.so (sm_86)" in finding.message
    assert "sgl_kernel/sm90/common_ops" not in finding.message
    # H100 picks sm90/: there SM86 is an error, and sm100/ is not used.
    site2 = SitePackages(tmp_path / "site2")
    install_sgl_kernel(site2, sm90=SM86, sm100=SM86)
    [finding] = gd201(site2, "9.0", "H100").findings
    assert "sgl_kernel/sm90/common_ops.abi3.so (sm_86)" in finding.message and "sm100/" not in finding.message


def test_a_v100_is_the_true_error(tmp_path):
    site = SitePackages(tmp_path / "site")
    install_sgl_kernel(site)
    [finding] = gd201(site, "7.0", "V100").findings
    assert "sgl_kernel/sm100/common_ops.abi3.so (sm_80, sm_100, sm_120, compute_100, compute_120)" in finding.message
    assert "sm90/" not in finding.message and "flash_ops" not in finding.message


# sglang/srt/layers/moe/token_dispatcher/deepep.py of SGLang 0.5.23, lines 48-64 (verbatim).
DEEPEP_DISPATCHER = '''_deepep_import_error: Optional[BaseException] = None
try:
    if _use_zbal:
        from zbal.zbal.deepep_adaptor import Config
        from zbal.zbal_buffer import Buffer
    else:
        from deep_ep import Buffer, Config

    if not _is_npu:
        from sglang.kernels.ops.quantization.fp8_kernel import (
            sglang_per_token_group_quant_fp8,
        )

    use_deepep = True
except Exception as exc:
    # deep_ep's import-time host checks raise more than ImportError; defer any
    # failure to the first DeepEP use so other models still start.
'''


def install_sglang_with_deep_ep(site, dispatcher=DEEPEP_DISPATCHER):
    site.dist("sgl-deep-ep", "0.1.2.post1", files={"deep_ep/__init__.py": "", "deep_ep/_C.cpython-311-x86_64-linux-gnu.so": CONCAT})
    site.dist("sglang", "0.5.23", requires=["sgl-deep-ep==0.1.2.post1"], files={
        "sglang/__init__.py": "", "sglang/srt/layers/moe/token_dispatcher/deepep.py": dispatcher})


def test_a_package_sglang_imports_only_under_try_is_an_optional_backend(tmp_path):
    site = SitePackages(tmp_path / "site")
    install_sgl_kernel(site)
    install_sglang_with_deep_ep(site)
    facts = facts_of(site)
    assert facts["sglang.optional_imports"]["value"] == {"deep_ep": ["sglang/srt/layers/moe/token_dispatcher/deepep.py:7"]}
    result = gd201(site, "8.0", "A100")  # deep_ep/_C has sm_90a and newer only
    assert result.status == "pass", [f.message for f in result.findings]
    assert ("deep_ep (sgl-deep-ep): SGLang imports it only under try/except (sglang/srt/layers/moe/token_dispatcher/deepep.py:7) "
            "and runs without it") in result.reason


def test_imported_unguarded_or_beside_vllm_it_is_judged_as_before(tmp_path):
    site = SitePackages(tmp_path / "site")
    install_sgl_kernel(site)
    install_sglang_with_deep_ep(site, dispatcher="from deep_ep import Buffer, Config\n")
    [finding] = gd201(site, "8.0", "A100").findings
    assert finding.message.startswith("sgl-deep-ep 0.1.2.post1 has no code for GPU 0 (A100, cc 8.0)")
    site2 = SitePackages(tmp_path / "site2")
    install_sgl_kernel(site2)
    install_sglang_with_deep_ep(site2)
    site2.dist("vllm", "0.33.0", files={"vllm/__init__.py": ""})  # vLLM's own imports of deep_ep are not read: not decidable
    [finding] = gd201(site2, "8.0", "A100").findings
    assert finding.subject == "sgl-deep-ep / GPU 0"


# torchao 0.17.0's gate, verbatim (torchao/prototype/mx_formats/kernels.py lines 1010-1014).
TORCHAO_GATE = '''import torch
from torchao.utils import is_cuda_version_at_least, is_sm_at_least_100

_mxfp8_cuda_kernels_available = (
    torch.cuda.is_available()
    and is_sm_at_least_100()
    and is_cuda_version_at_least(12, 8)
)
'''


def install_torchao(site, gate=TORCHAO_GATE):
    """torchao as SGLang 0.5.12-0.5.17 pull it in: it loads every torchao/_C*.so; _C_mxfp8 stands in here
    for its sm_100-only MX-FP8 extension (CONCAT has no A100 or L40S code)."""
    site.dist("torchao", "0.17.0", files={"torchao/__init__.py": "", "torchao/_C_mxfp8.cpython-310-x86_64-linux-gnu.so": CONCAT,
                                          "torchao/prototype/mx_formats/kernels.py": gate})
    site.dist("sglang", "0.5.17", requires=["torchao==0.17.0"], files={
        "sglang/__init__.py": "", "sglang/srt/layers/torchao_utils.py": "def apply():\n    from torchao.quantization import quantize_\n"})


def test_an_extension_its_package_uses_only_on_newer_gpus_is_not_applicable(tmp_path):
    site = SitePackages(tmp_path / "site")
    install_sgl_kernel(site)
    install_torchao(site)
    [(path, gate)] = facts_of(site)["sglang.capability_gates"]["value"].items()
    assert path.endswith("torchao/_C_mxfp8.cpython-310-x86_64-linux-gnu.so")
    assert gate == {"min_sm": 100, "gate": "is_sm_at_least_100()", "name": "_mxfp8_cuda_kernels_available",
                    "site": "torchao/prototype/mx_formats/kernels.py:4"}
    for cc, name in (("8.0", "A100"), ("8.9", "L40S")):
        result = gd201(site, cc, name)
        assert result.status == "pass", [f.message for f in result.findings]
        assert ("_C_mxfp8.cpython-310-x86_64-linux-gnu.so (torchao): its package uses it only from cc 10.0 on "
                "(torchao/prototype/mx_formats/kernels.py:4: _mxfp8_cuda_kernels_available = … is_sm_at_least_100() …)") in result.reason


def test_a_gate_the_gpu_passes_keeps_the_missing_code_an_error(tmp_path):
    site = SitePackages(tmp_path / "site")
    install_sgl_kernel(site)
    install_torchao(site, TORCHAO_GATE.replace("is_sm_at_least_100", "is_sm_at_least_80"))
    [finding] = gd201(site, "8.0", "A100").findings
    assert finding.message.startswith("torchao 0.17.0 has no code for GPU 0 (A100, cc 8.0)"), finding.message
    site2 = SitePackages(tmp_path / "site2")
    install_sgl_kernel(site2)
    install_torchao(site2, "import torch\nmxfp8_enabled = torch.cuda.is_available()\n")  # no capability named: judged as before
    assert facts_of(site2)["sglang.capability_gates"]["value"] == {}
    assert [f.message[:40] for f in gd201(site2, "8.0", "A100").findings] == ["torchao 0.17.0 has no code for GPU 0 (A1"]
