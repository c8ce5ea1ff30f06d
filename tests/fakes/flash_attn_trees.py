"""Real site-packages trees with flash-attn variants, torch and vLLM, shared by the flash-attn and
vLLM-build tests.

Everything is files the way pip lays them out (tests/fakes/site_packages.SitePackages writes
METADATA and a RECORD with the real sha256 of each file): FA2 2.8.3 with its own old copy of
``flash_attn/cute`` (as the 2.8.3 / 2.8.3.post1 tags package it, research/facts.md §3.3 #2)
and its extension (a real ELF with sm_80/sm_90 cubins from the H200, or the gcc-built
stand-ins of tests/fixtures/torchabi); flash-attn-4 4.0.0b36 with only ``flash_attn/cute``
(facts.md Addendum); vLLM's rotary embedding and DFlash code in the shapes the stored vLLM
versions have (facts.md §3.3 #5, §4.4).
"""

import os
from pathlib import Path

from gpudoctor.gpu_target import override_snapshot, parse_spec
from gpudoctor.probes import fatbin, flash_attn, python_stack_collect, python_stack, vllm_build
from gpudoctor.snapshot import Fact, Snapshot, ok
from fakes.site_packages import FA2_SO, SM80_SM90_PTX90, TORCH_VERSION_PY, SitePackages

REPO = Path(__file__).resolve().parent.parent.parent
TORCHABI = REPO / "tests" / "fixtures" / "torchabi"
EXT_OLD = TORCHABI / "ext_old.so"  # references c10::cuda::SetDevice(signed char) (_ZN3c104cuda9SetDeviceEa)
EXT_GOOD = TORCHABI / "ext_good.so"  # references SetDevice(signed char, bool), which the stand-in libc10_cuda exports

FA4_REQUIRES = ["nvidia-cutlass-dsl>=4.6.2", "torch", "einops", "typing_extensions", "apache-tvm-ffi<0.2,>=0.1.11",
                "torch-c-dlpack-ext", "quack-kernels>=0.5.3", 'nvidia-cutlass-dsl[cu13]; extra == "cu13"']

# vLLM's rotary embedding before PR #42679 (vllm/model_executor/layers/rotary_embedding/common.py).
ROTARY_UNGUARDED = '''from importlib.util import find_spec

from vllm.model_executor.custom_op import CustomOp
from vllm.platforms import current_platform


class ApplyRotaryEmb(CustomOp):
    def __init__(self, enforce_enable: bool = False, is_neox_style: bool = True, enable_fp32_compute: bool = False) -> None:
        super().__init__(enforce_enable=enforce_enable)
        self.is_neox_style = is_neox_style
        self.apply_rotary_emb_flash_attn = None
        if not current_platform.is_cpu() and find_spec("flash_attn") is not None:
            from flash_attn.ops.triton.rotary import apply_rotary

            self.apply_rotary_emb_flash_attn = apply_rotary

    def forward_hip(self, x, cos, sin):
        if find_spec("flash_attn") is not None:
            from flash_attn.ops.triton.rotary import apply_rotary
            return apply_rotary(x, cos, sin)
        return self.forward_native(x, cos, sin)
'''
# ... and after it: the import inside try/except ModuleNotFoundError.
ROTARY_GUARDED = ROTARY_UNGUARDED.replace(
    '''            from flash_attn.ops.triton.rotary import apply_rotary

            self.apply_rotary_emb_flash_attn = apply_rotary
''',
    '''            try:
                from flash_attn.ops.triton.rotary import apply_rotary
            except ModuleNotFoundError:
                apply_rotary = None
            self.apply_rotary_emb_flash_attn = apply_rotary
''')

# The DFlash aux-layer code of vllm/v1/worker/gpu_model_runner.py before and after PR #40727.
RUNNER_BEFORE_40727 = '''class GPUModelRunner:
    def _get_eagle3_aux_layers_from_config(self):
        hf_config = self.speculative_config.draft_model_config.hf_config
        layer_ids = getattr(hf_config, "eagle_aux_hidden_state_layer_ids", None)
        if not layer_ids:
            dflash_config = getattr(hf_config, "dflash_config", None)
            if dflash_config and isinstance(dflash_config, dict):
                layer_ids = dflash_config.get("target_layer_ids")
        return tuple(layer_ids) if layer_ids else None
'''
RUNNER_AFTER_40727 = RUNNER_BEFORE_40727.replace(
    '''                layer_ids = dflash_config.get("target_layer_ids")''',
    '''                # Add 1 to convert DFlash's aux layer id semantics
                layer_ids = [
                    i + 1 for i in (dflash_config.get("target_layer_ids") or [])
                ]''')
# vllm/model_executor/models/qwen3_dflash.py without and with PR #46104's sliding-window support.
DFLASH_BEFORE_46104 = '''class DFlashQwen3Attention:
    def __init__(self, config, layer_idx):
        self.causal = False


class DFlashQwen3ForCausalLM:
    pass
'''
DFLASH_AFTER_46104 = DFLASH_BEFORE_46104 + '''

def _resolve_layer_attention(config, layer_idx):
    dflash_config = getattr(config, "dflash_config", None) or {}
    use_swa = dflash_config.get("use_swa", False)
    return (dflash_config.get("swa_window_size") if use_swa else None), False
'''


def torch_site(site: SitePackages, version: str = "2.7.1", cuda: str = "12.6", abi_libs: bool = False, cmake_abi=1):
    """torch with the real version.py text of the H200 rewritten to ``version``+cu``cuda``."""
    tag = "cu" + cuda.replace(".", "")
    text = TORCH_VERSION_PY.replace("2.11.0+cu130", f"{version}+{tag}").replace("'13.0'", repr(cuda))
    info = site.torch(version=version, version_py=text, lib=SM80_SM90_PTX90, cmake_abi=None if abi_libs else cmake_abi)
    if abi_libs:  # the gcc-built stand-ins of libc10 / libc10_cuda / libcudart (a CXX11-ABI torch)
        for name in ("libc10.so", "libc10_cuda.so", "libcudart.so.12"):
            (site.path / "torch" / "lib" / name).write_bytes((TORCHABI / name).read_bytes())
    return info


def fa2(site: SitePackages, version: str = "2.8.3", ext: Path = SM80_SM90_PTX90, so_name: str = FA2_SO):
    files = {
        "flash_attn/__init__.py": f'__version__ = "{version.split("+")[0]}"\n\nfrom flash_attn.flash_attn_interface import flash_attn_func\n',
        "flash_attn/flash_attn_interface.py": "import flash_attn_2_cuda as flash_attn_gpu\n",
        "flash_attn/ops/__init__.py": "",
        "flash_attn/ops/triton/__init__.py": "",
        "flash_attn/ops/triton/rotary.py": "def apply_rotary(x, cos, sin):\n    return x\n",
        "flash_attn/layers/__init__.py": "",
        "flash_attn/layers/rotary.py": "from flash_attn.ops.triton.rotary import apply_rotary\n",
        # FA2 2.8.3 / 2.8.3.post1 package their own (older) flash_attn/cute: facts.md §3.3 #2.
        "flash_attn/cute/__init__.py": '"""FlashAttention CuTe (FA2 2.8.3 copy)."""\n__version__ = "0.1.0"\n',
        "flash_attn/cute/interface.py": "# flash_attn/cute/interface.py as packaged by flash-attn 2.8.3\n",
        so_name: ext,
    }
    return site.dist("flash-attn", version, requires=["torch", "einops"], files=files)


def fa4(site: SitePackages, version: str = "4.0.0b36"):
    files = {
        "flash_attn/cute/__init__.py": '"""FlashAttention-4 (CuTe DSL)."""\ntry:\n    from importlib.metadata import version\n    __version__ = version("fa4")\nexcept Exception:\n    __version__ = "0.0.0"\n',
        "flash_attn/cute/interface.py": "# flash_attn/cute/interface.py of flash-attn-4 4.0.0b36\ndef flash_attn_func(*args):\n    pass\n",
        "flash_attn/cute/flash_fwd_sm100.py": "# SM100 forward kernel\n",
    }
    return site.dist("flash-attn-4", version, requires=FA4_REQUIRES, files=files)


def vllm(site: SitePackages, version: str = "0.20.0", requires=("torch==2.7.1",), rotary: str = ROTARY_UNGUARDED,
         runner: str = RUNNER_AFTER_40727, dflash: str = DFLASH_AFTER_46104, envs: str = 'environment_variables = {"VLLM_HOST_IP": 1}\n',
         extra_files=None):
    files = {
        "vllm/__init__.py": "",
        "vllm/envs.py": envs,
        "vllm/model_executor/layers/rotary_embedding/common.py": rotary,
        "vllm/v1/worker/gpu_model_runner.py": runner,
        "vllm/model_executor/models/qwen3_dflash.py": dflash,
        "vllm/vllm_flash_attn/__init__.py": "",
        "vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so": SM80_SM90_PTX90,
        "vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so": SM80_SM90_PTX90,
        "vllm/vllm_flash_attn/cute/__init__.py": "",
        "vllm/_C.abi3.so": SM80_SM90_PTX90,
    }
    files.update(extra_files or {})
    return site.dist("vllm", version, requires=list(requires), files=files)



def sglang(site: SitePackages, version: str = "0.5.23", requires=("flash-attn-4>=4.0.0b18", "torch==2.14.1", "sglang-kernel==0.4.10")):
    """SGLang as its wheel declares it: 0.5.23 requires flash-attn-4 on every platform (its METADATA)."""
    return site.dist("sglang", version, requires=list(requires), files={"sglang/__init__.py": "", "sglang/version.py": f'__version__ = "{version}"\n'})


def collect(paths, environ=None, options=None):
    """The facts python_stack collects in-process, for these path entries."""
    environ = dict({"PATH": ""} if environ is None else environ)
    if os.environ.get("GPUDOCTOR_CACHE_DIR"):  # the session's scan cache (conftest), never the user's ~/.cache
        environ.setdefault("GPUDOCTOR_CACHE_DIR", os.environ["GPUDOCTOR_CACHE_DIR"])
    return python_stack_collect.collect_plain([str(p) for p in paths], "stack", fatbin.scan,
                               [flash_attn.collect_plain, vllm_build.collect_plain],
                               python_stack.probe_options() if options is None else options, environ)


def snapshot(paths, gpu: str = "sm_80", environ=None, options=None, **facts) -> Snapshot:
    plain = collect(paths if isinstance(paths, (list, tuple)) else [paths], environ, options)
    snap = Snapshot({path: Fact.from_json(data) for path, data in plain.items()})
    if gpu:
        override_snapshot(snap, parse_spec(gpu), gpu)
    for path, value in facts.items():
        snap.facts[path.replace("__", ".")] = value if isinstance(value, Fact) else ok(value, "test")
    return snap
