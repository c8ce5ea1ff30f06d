"""Which of an engine's kernel files run on a GPU, for GD201: SGLang's sgl_kernel, as its own loader picks them.

A helper of rules/cuda.py (it registers no rule). The facts come from
probes/sglang_kernels.py (``sglang.extensions``), read from sgl_kernel's installed source:
``sgl_kernel/load_utils.py`` picks one ``common_ops`` per GPU by compute capability
(sglang-kernel 0.4.10: ``sm90/`` on cc 9.0, ``sm100/`` on every other GPU), ``flash_ops``
(SGLang's FA3) runs only where ``is_fa3_supported`` says (cc 8.x and 9.x), and the rest is
imported guarded or lazily by the code that uses it
(https://github.com/sgl-project/sglang/blob/main/sgl-kernel/python/sgl_kernel/load_utils.py).
A file the loader does not pick on a GPU is not used there, whatever code it carries; the one
it picks is needed, and without code for the GPU it is an error. A package SGLang imports only
under ``try: … except Exception`` and runs without (DeepEP: sglang/srt/layers/moe/token_dispatcher/
deepep.py, "defer any failure to the first DeepEP use so other models still start") is an
optional backend: its missing code is not an error of the install (fact ``sglang.optional_imports``).
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Tuple

from gpudoctor.knowledge.gpus import describe_archs

from . import engines
from .driver import version_tuple

Verdict = Tuple[Optional[str], Optional[str]]  # ("needed", None) | ("skip", why) | (None, None): not sgl_kernel's


class SGLang:
    """What GD201 needs of SGLang: sgl_kernel's extensions by path, its loader's branches, and the
    packages SGLang imports only under try/except (when no other engine is installed that might
    import them otherwise: vLLM's imports of other packages are not read)."""

    def __init__(self, snap) -> None:
        value = snap.value("sglang.extensions")
        value = value if isinstance(value, dict) else {}
        self.exts = {str(e["path"]): e for e in value.get("extensions") or [] if isinstance(e, dict) and isinstance(e.get("path"), str)}
        self.loader = value.get("loader") if isinstance(value.get("loader"), dict) else None
        optional = snap.value("sglang.optional_imports")
        alone = [e["dist"] for e in engines.installed(snap)] == ["sglang"]
        self.optional = {str(k): v for k, v in optional.items() if isinstance(v, list)} if isinstance(optional, dict) and alone else {}
        gates = snap.value("sglang.capability_gates")
        self.gates = {str(k): v for k, v in gates.items() if isinstance(v, dict) and isinstance(v.get("min_sm"), int)} if isinstance(gates, dict) else {}


def _capability_gate(binary: Dict[str, Any], cc: str, sglang: "SGLang") -> Verdict:
    """An extension its own package uses only from a compute capability on (probes/sglang_kernels.py
    capability_gates: torchao's _C_mxfp8 behind is_sm_at_least_100())."""
    gate = sglang.gates.get(str(binary.get("path")))
    number = _cc_number(cc)
    if gate is None or number is None:
        return None, None
    if number >= gate["min_sm"]:
        return "needed", None
    return "skip", (f"{os.path.basename(str(binary.get('path')))} ({binary.get('dist') or '?'}): its package uses it only from "
                    f"cc {gate['min_sm'] // 10}.{gate['min_sm'] % 10} on ({gate.get('site')}: {gate.get('name')} = … {gate.get('gate')} …)")


def _optional_package(binary: Dict[str, Any], sglang: "SGLang") -> Verdict:
    package = str(binary.get("package") or "")
    sites = sglang.optional.get(package)
    if not sites:
        return None, None
    return "skip", (f"{package} ({binary.get('dist') or '?'}): SGLang imports it only under try/except ({', '.join(sites[:2])}) "
                    "and runs without it: an optional backend, loaded only when asked for")


def _cc_number(cc: str) -> Optional[int]:
    parts = version_tuple(cc)
    return parts[0] * 10 + (parts[1] if len(parts) > 1 else 0) if parts else None


def _holds(clause: Dict[str, Any], number: int) -> Optional[bool]:
    op, value = clause.get("op"), clause.get("value")
    if op == "else" or (op == "is not" and value is None):
        return True
    if op == "is" and value is None:
        return False
    if not isinstance(value, int):
        return None
    return {"==": number == value, "!=": number != value, ">=": number >= value, ">": number > value,
            "<=": number <= value, "<": number < value}.get(str(op))


def loaded_branch(loader: Optional[Dict[str, Any]], cc: str) -> Optional[Dict[str, Any]]:
    """The loader's branch for a GPU (the first whose conditions hold), or None if not decidable."""
    number = _cc_number(cc)
    if loader is None or number is None:
        return None
    for branch in loader.get("branches") or []:
        verdicts = [_holds(c, number) for c in branch.get("when") or [] if isinstance(c, dict)]
        if None in verdicts:
            return None
        if all(verdicts):
            return branch
    return None


def _archs(binary: Dict[str, Any]) -> frozenset:
    scan = binary.get("scan") or {}
    out = set()
    for arch in list(scan.get("sm_variants") or []) + list(scan.get("ptx_variants") or []):
        digits = "".join(ch for ch in str(arch).split("_")[-1] if ch.isdigit())
        if digits:
            out.add(int(digits))
    return frozenset(out)


def sglang_scope(binary: Dict[str, Any], cc: str, sglang: SGLang, binaries: List[Dict[str, Any]]) -> Verdict:
    """Whether SGLang uses ``binary`` on a GPU of ``cc`` (one without code for it)."""
    exts, loader = sglang.exts, sglang.loader
    ext = exts.get(str(binary.get("path")))
    if ext is None:
        gated = _capability_gate(binary, cc, sglang)
        return gated if gated[0] else _optional_package(binary, sglang)
    module = ext.get("module")
    branch = loaded_branch(loader, cc)
    if ext.get("role") == "loader":
        if branch is None or branch.get("subdir") == ext.get("subdir"):
            return "needed", None
        return "skip", (f"{module}: sgl_kernel's loader ({(loader or {}).get('where')}:{branch.get('line')}) loads "
                        f"{branch.get('subdir')}/common_ops on cc {cc}, not {ext.get('subdir')}/")
    if ext.get("role") == "gated":
        majors = [m for m in ext.get("majors") or [] if isinstance(m, int)]
        if not majors or version_tuple(cc)[:1] and version_tuple(cc)[0] in majors:
            return "needed", None
        return "skip", (f"{module}: used only on cc {' and '.join(f'{m}.x' for m in majors)} ({ext.get('gate')}), "
                        f"not on cc {cc}")
    if ext.get("role") == "optional" and branch is not None:
        # Imported only guarded or lazily, and built for a subset of what the loader's common_ops
        # here has: sgl-kernel's build made it for the GPUs its users run on (as for vLLM's).
        main = [b for b in binaries if (exts.get(str(b.get("path"))) or {}).get("subdir") == branch.get("subdir")
                and (exts.get(str(b.get("path"))) or {}).get("role") == "loader"]
        mine = _archs(binary)
        if main and mine and all(mine < _archs(b) for b in main):
            scan = binary.get("scan") or {}
            site = next((i for i in ext.get("imports") or [] if isinstance(i, dict)), {})
            how = f"in {site['function']}()" if site.get("function") else f"guarded by {str(site.get('guard', '?')).split(' at ')[0]}"
            return "skip", (f"{module}: built for {describe_archs(scan.get('sm_variants', []), scan.get('ptx_variants', []))} only, "
                            f"a subset of {os.path.basename(str(main[0].get('path')))} ({branch.get('subdir')}/); imported at "
                            f"{site.get('where', '?')} ({how})")
    return None, None

