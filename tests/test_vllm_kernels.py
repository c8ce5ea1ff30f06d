"""Which vLLM extensions are needed on every GPU and which only on some (probes/vllm_kernels.py + GD201).

The vLLM tree here is real files laid out as pip installs them (dist-info + RECORD), with the
import lines copied verbatim from vLLM 0.33.0's source (vllm/platforms/cuda.py,
model_executor/layers/indexer_topk.py, model_executor/kernels/attention/dsa/sparse_mqa_logits.py,
vllm_flash_attn/flash_attn_interface.py) and real nvcc-built binaries standing in for the
extensions. The real wheel itself is checked in tests/real/test_real_kernels.py.
"""

from pathlib import Path

import pytest

from gpudoctor import registry
from gpudoctor.engine import run_rules
from gpudoctor.probes import fatbin, python_stack_collect, scancache, vllm_kernels
from gpudoctor.snapshot import Fact, Snapshot, ok

from fakes.site_packages import SM86, SitePackages

REPO = Path(__file__).resolve().parent.parent
VARIANTS = REPO / "tests" / "fixtures" / "fatbin" / "libvariants.so"  # nvcc 13.5, see cuobjdump.txt there
CONCAT = REPO / "tests" / "fixtures" / "fatbin" / "libconcat.so"
H200 = REPO / "tests" / "fixtures" / "snapshots" / "h200.json"

# vllm/platforms/cuda.py of 0.33.0, lines 22-27 and 239-251 (the shape that matters: an
# unguarded import, a suppressed one, and import_kernels()).
PLATFORM_CUDA = '''import contextlib

import torch

# import custom ops, trigger op registration
import vllm._C_stable_libtorch  # noqa

with contextlib.suppress(ImportError):
    import vllm._qutlass_C  # noqa
import vllm.envs as envs


class CudaPlatformBase:
    @classmethod
    def import_kernels(cls) -> None:
        """Import CUDA kernel extensions (_C_stable_libtorch, optional _qutlass_C)."""
        try:
            import vllm._C_stable_libtorch  # noqa: F401
        except ImportError as e:
            logger.warning_once(
                "Failed to import from vllm._C_stable_libtorch: %s", repr(e)
            )
        with contextlib.suppress(ImportError):
            import vllm._moe_C_stable_libtorch  # noqa: F401
        with contextlib.suppress(ImportError):
            import vllm._qutlass_C  # noqa: F401
'''
INDEXER_TOPK = '''try:
    import vllm._deepselect_C  # noqa: F401  (registers torch.ops.deep_select)

    _HAS_DEEP_SELECT_C = True
except ImportError:
    _HAS_DEEP_SELECT_C = False
'''
SPARSE_MQA_LOGITS = '''import importlib.util

from vllm.platforms import current_platform


def has_deep_select() -> bool:
    """Whether the DeepSelect top-k extension is built and this GPU runs it."""
    return (
        importlib.util.find_spec("vllm._deepselect_C") is not None
        and current_platform.is_cuda()
        and current_platform.is_device_capability_family(100)
    )
'''
FA_INTERFACE = '''try:
    from . import _vllm_fa2_C  # type: ignore[attr-defined]  # noqa: F401

    FA2_UNAVAILABLE_REASON = None
    FA2_AVAILABLE = True
except ImportError as e:
    FA2_UNAVAILABLE_REASON = str(e)
    FA2_AVAILABLE = False
'''


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUDOCTOR_CACHE_DIR", str(tmp_path / "cache"))
    scancache.forget()
    yield
    scancache.forget()


def install_vllm(site, main=None, qutlass=None, deepselect=SM86, fa2=None):
    main, qutlass, fa2 = main or VARIANTS, qutlass or CONCAT, fa2 or VARIANTS
    return site.dist("vllm", "0.33.0", files={
        "vllm/__init__.py": "",
        "vllm/platforms/__init__.py": "",
        "vllm/platforms/cuda.py": PLATFORM_CUDA,
        "vllm/model_executor/layers/indexer_topk.py": INDEXER_TOPK,
        "vllm/model_executor/kernels/attention/dsa/sparse_mqa_logits.py": SPARSE_MQA_LOGITS,
        "vllm/vllm_flash_attn/__init__.py": "",
        "vllm/vllm_flash_attn/flash_attn_interface.py": FA_INTERFACE,
        "vllm/_C_stable_libtorch.abi3.so": main,
        "vllm/_moe_C_stable_libtorch.abi3.so": main,
        "vllm/_qutlass_C.abi3.so": qutlass,
        "vllm/_deepselect_C.abi3.so": deepselect,
        "vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so": fa2,
    })


def facts_of(site):
    return python_stack_collect.collect_plain([str(site.path)], "none", fatbin.scan, [vllm_kernels.collect_plain])


def by_module(facts):
    return {e["module"]: e for e in facts["vllm.extensions"]["value"]["extensions"]}


def test_roles_imports_and_gates_are_read_from_the_source(tmp_path):
    site = SitePackages(tmp_path / "site")
    install_vllm(site)
    exts = by_module(facts_of(site))
    assert exts["vllm._C_stable_libtorch"]["role"] == "required"
    assert exts["vllm._C_stable_libtorch"]["imports"][0] == {"where": "platforms/cuda.py:6", "how": "import"}
    assert exts["vllm._qutlass_C"]["role"] == "optional"
    assert exts["vllm._qutlass_C"]["imports"][0]["guard"] == "with at line 8"
    assert exts["vllm._moe_C_stable_libtorch"]["role"] == "optional"
    assert exts["vllm._moe_C_stable_libtorch"]["imports"][0]["function"] == "import_kernels"
    deep = exts["vllm._deepselect_C"]
    assert deep["role"] == "optional"
    assert {i["how"] for i in deep["imports"]} == {"import", "find_spec"}
    assert deep["gates"] == [{"check": "is_device_capability_family", "arch": 100,
                              "where": "model_executor/kernels/attention/dsa/sparse_mqa_logits.py:11"}]
    fa2 = exts["vllm.vllm_flash_attn._vllm_fa2_C"]
    assert fa2["role"] == "optional" and fa2["imports"][0]["where"] == "vllm_flash_attn/flash_attn_interface.py:2"


def test_the_result_is_cached_by_vllms_record_and_a_reinstall_invalidates_it(tmp_path):
    site = SitePackages(tmp_path / "site")
    info = install_vllm(site)
    first = facts_of(site)["vllm.extensions"]
    cache = scancache.shared()
    assert cache.hits == 0 and any(k.startswith(vllm_kernels.CACHE_KIND + "\0") for k in cache.entries)
    scancache.forget()
    assert facts_of(site)["vllm.extensions"] == first
    assert scancache.shared().misses == 0 and scancache.shared().hits > 0  # nothing read again
    # A reinstall rewrites RECORD (new size/mtime/inode): the source is read again.
    (site.path / "vllm" / "platforms" / "cuda.py").write_text(PLATFORM_CUDA.replace("import vllm._C_stable_libtorch  # noqa\n", ""))
    record = info / "RECORD"
    text = record.read_text()
    record.unlink()
    record.write_text(text + "\n")
    scancache.forget()
    exts = by_module(facts_of(site))
    assert exts["vllm._C_stable_libtorch"]["role"] == "optional"


def snapshot_for(site, cc, name):
    snap = Snapshot.load(str(H200))
    for path, data in facts_of(site).items():
        snap.facts[path] = Fact.from_json(data)
    snap.facts["gpu.count"] = ok(1, "test")
    for path in [p for p in snap.facts if p.startswith("gpu.") and p != "gpu.count"]:
        del snap.facts[path]
    snap.facts["gpu.0.compute_capability"] = ok(cc, "test")
    snap.facts["gpu.0.name"] = ok(name, "test")
    return snap


def gd201(snap):
    return run_rules(snap, [registry.find("GD201")]).outcomes[0]


def test_extensions_vllm_loads_only_elsewhere_are_not_applicable(tmp_path):
    # The required one: sm_90, sm_90a, sm_100a, sm_103a, sm_120, sm_121a + PTX 9.0 (runs on 11.0 by JIT);
    # _qutlass_C: sm_90a, sm_100a, sm_103, sm_120 (+ PTX 10.0a, 12.0): built for a subset, nothing for 11.0.
    site = SitePackages(tmp_path / "site")
    install_vllm(site)
    result = gd201(snapshot_for(site, "11.0", "Jetson Thor"))
    assert result.status == "pass", [f.message for f in result.findings]
    assert ("vllm._qutlass_C: built for sm_90a, sm_100a, sm_103, sm_120, compute_100, compute_120 only, a subset of "
            "what vLLM's required _C_stable_libtorch.abi3.so has") in result.reason
    assert "imported at vllm/platforms/cuda.py:9 (guarded by with)" in result.reason
    assert "vllm._deepselect_C: vLLM uses it only on a 10.x GPU (is_device_capability_family(100)" in result.reason
    # The same tree on an H100: everything vLLM uses there has sm_90 code; _deepselect_C is gated off.
    result = gd201(snapshot_for(site, "9.0", "H100"))
    assert result.status == "pass" and "_qutlass_C" not in result.reason and "_deepselect_C" in result.reason


def test_an_extension_vllm_uses_on_this_gpu_without_its_code_is_an_error(tmp_path):
    site = SitePackages(tmp_path / "site")
    install_vllm(site)
    # B200: _deepselect_C's gate (10.x family) says vLLM uses it there, and it has sm_86 only.
    [finding] = gd201(snapshot_for(site, "10.0", "B200")).findings
    assert finding.message.startswith("vllm 0.33.0 has no code for GPU 0 (B200, cc 10.0): vllm/_deepselect_C.abi3.so (sm_86)")
    assert "_qutlass_C" not in finding.message  # no gate, a subset build: not used there


def test_the_required_extension_without_code_for_the_gpu_is_an_error(tmp_path):
    site = SitePackages(tmp_path / "site")
    install_vllm(site, main=SM86)
    [finding] = gd201(snapshot_for(site, "9.0", "H100")).findings
    assert "_C_stable_libtorch.abi3.so (sm_86)" in finding.message
    assert "_moe_C_stable_libtorch.abi3.so (sm_86)" in finding.message  # same archs as the main one: not a subset build


def test_module_names_of_extension_files():
    assert vllm_kernels.module_name("vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so") == "vllm.vllm_flash_attn._vllm_fa2_C"
    assert vllm_kernels.module_name("vllm/third_party/deep_gemm/_C.cpython-312-x86_64-linux-gnu.so") == "vllm.third_party.deep_gemm._C"
    assert vllm_kernels.module_name("vllm/libfoo.so.1") is None
    assert vllm_kernels.module_name("vllm/lib-bar.so") is None
