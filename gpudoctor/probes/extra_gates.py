"""The Python child's extra collectors as the doctor's process needs them, without running them:
what each looks at (distributions, or directories on the path) and its facts when none of that
is there.

Standard library only and Python 3.8-compatible: a child module (python_stack's design
constraints). The collectors read their own gate and empty facts from here, and the doctor
builds the child's gates from here, so its process never imports the collectors: that import
(flash_attn, vllm_build, vllm_kernels, sglang_kernels and what they import) came before the
child's spawn, the start of a check's longest wait.
"""

from __future__ import annotations

from typing import Any, Dict, Tuple

# gpudoctor.probes.NAME -> (distributions, directories on the path): the collector runs when any is
# there; else its facts are empty_facts(NAME). flash_attn's: its VARIANTS' names and vLLM (whose
# vllm_flash_attn it reads), tests/test_python_stack_child.py holds them equal.
GATES: Dict[str, Tuple[Tuple[str, ...], Tuple[str, ...]]] = {
    "flash_attn": (("flash-attn", "flash-attn-3", "flashattn-hopper", "flash-attn-4", "fa4", "vllm-flash-attn", "vllm"),
                   ("flash_attn",)),
    "vllm_build": (("vllm",), ()),
    "vllm_kernels": (("vllm",), ("vllm",)),
    "sglang_kernels": (("sglang", "sglang-kernel", "sgl-kernel"), ("sgl_kernel", "sglang")),
}


def _fact(value: Any = None, status: str = "ok", source: str = "", detail: str = "") -> Dict[str, Any]:
    """python_stack_read.fact's shape (not imported: this module is read by the doctor's process too)."""
    out: Dict[str, Any] = {"value": value, "status": status}
    if source:
        out["source"] = source
    if detail:
        out["detail"] = detail
    return out


def empty_facts(name: str) -> Dict[str, Dict[str, Any]]:
    """Collector NAME's facts when nothing it looks at is installed (what its collect_plain returns then)."""
    if name == "flash_attn":
        return {
            "flash_attn.variants": _fact([], source="dist-info, RECORD, ELF", detail="none installed"),
            "flash_attn.namespace": _fact({"path": None, "dirs": [], "importable": False}, source="files"),
            "flash_attn.clashes": _fact([], source="RECORD, file hashes"),
            "flash_attn.vllm_builds": _fact(None, "absent", "vllm", "vllm is not installed"),
            "flash_attn.dependents": _fact([], source="vllm rotary embedding (ast)",
                                           detail="not read: flash_attn.ops present, or no flash_attn / vllm"),
        }
    if name == "vllm_build":
        return {"vllm.build": _fact(None, "absent", "dist-info", "vllm is not installed")}
    if name == "vllm_kernels":
        return {"vllm.extensions": _fact(None, "absent", "vllm", "vLLM is not installed")}
    if name == "sglang_kernels":
        return {"sglang.extensions": _fact(None, "absent", "sgl_kernel", "sgl_kernel (sglang-kernel) is not installed"),
                "sglang.optional_imports": _fact(None, "absent", "sglang", "SGLang is not installed"),
                "sglang.capability_gates": _fact(None, "absent", "sglang", "SGLang is not installed")}
    raise KeyError(name)


def fact_keys(name: str) -> Tuple[str, ...]:
    """Every fact collector NAME gives (its FACT_KEYS)."""
    return tuple(empty_facts(name))
