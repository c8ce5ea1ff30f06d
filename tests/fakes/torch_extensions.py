"""Torch and its CUDA extensions as shared objects made by gcc with the symbols they import and export
(libc10.so's torch ABI, an extension's undefined c10 symbols), installed the way pip lays them out."""

from __future__ import annotations

import subprocess
from pathlib import Path

from fakes.site_packages import TORCH_VERSION_PY, SitePackages
from gpudoctor.probes import fatbin, python_stack_collect

CXX11 = "_ZN3c106detail23torchInternalAssertFailEPKcS2_jS2_RKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE"
OLD_ABI = "_ZN3c106detail23torchInternalAssertFailEPKcS2_jS2_RKSs"
CHECK = "_ZN3c106detail14torchCheckFailEPKcS2_jRKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE"
CPU_TORCH = TORCH_VERSION_PY.replace("'13.0'", "None").replace("+cu130", "+cpu")


def cc(out: Path, source: str, *args: str) -> Path:
    src = out.with_suffix(".c")
    src.write_text(source, encoding="utf-8")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(out), str(src), *args], check=True, capture_output=True)
    src.unlink()
    return out


def libc10(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    defs = "".join(f'void f{i}(void) __asm__("{name}");\nvoid f{i}(void) {{}}\n' for i, name in enumerate((CXX11, CHECK)))
    # plenty of other symbols, so the GNU hash table has real buckets and chains
    defs += "".join(f"void _ZN3c104misc{i}f{i}v(void) {{}}\n" for i in range(300))
    return cc(directory / "libc10.so", defs, "-Wl,-soname,libc10.so", "-Wl,--hash-style=gnu")


def extension(out: Path, symbols, torch_lib: Path, *extra: str) -> Path:
    decls = "".join(f'extern void u{i}(void) __asm__("{name}");\n' for i, name in enumerate(symbols))
    calls = "".join(f"u{i}();" for i in range(len(symbols)))
    return cc(out, decls + f"void call(void) {{ {calls} }}\n", f"-L{torch_lib}", "-Wl,--no-as-needed", "-lc10", *extra)


def install(site: SitePackages, lib: Path, name: str, version: str, symbols, *extra: str, requires=()) -> str:
    rel = f"{name}/_C.cpython-311-x86_64-linux-gnu.so"
    scratch = site.path.parent / f"{name}.so"
    extension(scratch, symbols, lib, *extra)
    site.dist(name, version, requires=requires, files={rel: scratch, f"{name}/__init__.py": ""})
    return str(site.path / rel)


def extensions_fact(site: SitePackages) -> dict:
    facts = python_stack_collect.collect_plain([str(site.path)], "stack", fatbin.scan)
    fact = facts["torch.extensions"]
    assert fact["status"] == "ok", fact
    return fact["value"]
