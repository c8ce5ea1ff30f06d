"""Issue 26's "Must show" table: each compiled extension checked against the torch it will load with.

Each case is a real artifact combined the way users break it, and its truth is what the real
loader says on this machine: a child ``import torch`` then the import (or ``ctypes.CDLL`` of each
torch-linked file, what ``import`` does), with CPU torch 2.13.0 from PyPI. Against it: gpudoctor's
GD508 without ``--deep`` and with it, and ``explain`` on the error the import printed. Every
broken case must be found without ``--deep``; every correct one must give no finding.

CUDA combinations cannot be imported here (no CUDA torch to import; the closure venvs hold sparse
files): an extension of one real CUDA closure is put over the torch of another (the vLLM 0.33.0
closure's torch 2.14.0+cu130) and checked statically. Their loader truth is for the H200
(scripts/device/stack.sh). Each case writes its row; ``test_the_table`` puts the rows together
(``GPUDOCTOR_EXT_TABLE``: where the Markdown goes; by default the test cache's ``oracle/``).
"""

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Dict, List, Optional

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import realenv  # noqa: E402
from fakes.site_packages import SitePackages  # noqa: E402
from test_real_torch_links import (  # noqa: E402
    OLD_ABI_SYMBOL, SOURCE, build_extension, explain_verdict, gd508, overlay, real_import, site_of, torch_venv)

pytestmark = pytest.mark.real  # conftest puts every real test in one xdist group: this file runs in order

ROWS = realenv.CACHE / "oracle" / "ext-table"
EXT = "cpython-%d%d-x86_64-linux-gnu.so" % sys.version_info[:2]
# What the loader and the packages print when an extension is built for another torch (the texts
# explain knows: SIG-torch-extension-undefined-symbol, SIG-xformers-…, SIG-libstdcxx-too-old, …).
LOADER_LINE = re.compile(r"(undefined symbol: \S+|[\w.+-]+\.so[.\d]*: cannot open shared object file[^\n]*|version `[^']+' not found[^\n]*"
                         r"|operator \S+ does not exist|xFormers can't load[^\n]*)")


def write_row(case: str, **row) -> None:
    ROWS.mkdir(parents=True, exist_ok=True)
    (ROWS / f"{case}.json").write_text(json.dumps(dict(case=case, **row), sort_keys=True), encoding="utf-8")


def finding_text(outcome: dict) -> str:
    if outcome["status"] != "fail":
        return outcome["status"]
    first = outcome["findings"][0]
    return f"fail [{first['subject']}]: {first['message'][:160]}…"


def load_each(python: Path, package: str) -> Dict[str, str]:
    """Each torch-linked file of ``package`` loaded after ``import torch`` (RTLD_NOW, as import does): its error or "ok"."""
    code = ("import ctypes, importlib.util, json, os, sys\nimport torch\n"
            "root = os.path.dirname(importlib.util.find_spec(sys.argv[1]).origin)\nout = {}\n"
            "for d, _, names in os.walk(root):\n"
            "    for n in sorted(names):\n"
            "        if n.endswith('.so'):\n"
            "            p = os.path.join(d, n)\n"
            "            try:\n                ctypes.CDLL(p, mode=2); out[os.path.relpath(p, root)] = 'ok'\n"
            "            except OSError as e:\n                out[os.path.relpath(p, root)] = str(e)\n"
            "print(json.dumps(out))\n")
    done = real_import(python, code.replace("sys.argv[1]", repr(package)))
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def explained(python: Path, error: str) -> str:
    doc = explain_verdict(python, error)
    causes = [m for m in doc.get("matches", []) if m.get("confirmation")]
    if not causes:
        return "no cause matched"
    first = causes[0]
    checks = [c for c in first["confirmation"].get("checks", []) if c.get("kind") == "confirmed"]
    by = f" by {checks[0].get('rule') or checks[0].get('name')}" if checks else ""
    signature = first["signature"].get("id") if isinstance(first["signature"], dict) else first["signature"]
    return f"{first['confirmation']['verdict']}{by} ({signature})"


def judge(case: str, python: Path, broken: bool, truth: str, error: Optional[str], deep: bool = True, subject: Optional[str] = None,
          expect_explain: str = "confirmed") -> None:
    """GD508 static and --deep, explain on the real error; the row written; every broken case found statically."""
    static = gd508(python)
    with_deep = gd508(python, deep=True) if deep else None
    verdict = explained(python, error) if error else "—"
    write_row(case, truth=truth, static=finding_text(static), deep=finding_text(with_deep) if with_deep else
              "not run (sparse CUDA files: the H200 imports them)", explain=verdict, broken=broken)
    if broken:
        assert static["status"] == "fail", static
        if subject:
            assert subject in {f["subject"] for f in static["findings"]}, static
        if with_deep is not None:
            assert with_deep["status"] == "fail" and all(f["severity"] == "error" for f in with_deep["findings"]), with_deep
            assert any("--deep confirms" in f["message"] for f in with_deep["findings"]), with_deep
        if error:
            assert verdict.startswith(expect_explain), verdict
    else:
        assert static["status"] in ("pass", "not_applicable"), static
        if with_deep is not None:
            assert with_deep["status"] in ("pass", "not_applicable"), with_deep


# --- extensions compiled here against the CPU torch -------------------------------------------------
GLIBCXX_SOURCE = SOURCE.replace('#include <Python.h>', '#include <Python.h>\nextern "C" void gd_stub_glibcxx(void);').replace(
    "return PyModule_Create(&module);", "gd_stub_glibcxx(); return PyModule_Create(&module);")


@pytest.mark.parametrize("abi", [0, 1])
def test_extension_built_here_with_either_cxx_abi(tmp_path, abi):
    base = torch_venv()
    so = build_extension(tmp_path, base, abi)
    python = overlay(tmp_path, base)
    SitePackages(site_of(python)).dist("abiext", "0.1", requires=["torch"], files={f"abiext.{EXT}": so})
    imported = real_import(python, "import torch, abiext; print(abiext.check(3))")
    error = imported.stderr.strip().splitlines()[-1] if imported.returncode else f"ImportError: abiext.so: undefined symbol: {OLD_ABI_SYMBOL}"
    truth = "imports, works" if imported.returncode == 0 else error
    judge(f"a-abiext-cxx11-abi-{abi}", python, abi == 0, truth, error, subject="abiext")
    if abi == 1:
        assert imported.returncode == 0 and "not_confirmed" in explained(python, error)


def test_extension_built_with_a_newer_libstdcxx_than_this_system_has(tmp_path):
    """A torch extension compiled here, linked against a libstdc++.so.6 whose version script says
    GLIBCXX_3.4.99 (what a newer GCC's runtime defines): loaded after import torch, it meets the
    system's libstdc++ (torch loaded it) and the loader refuses it with its own words."""
    base = torch_venv()
    stubs = tmp_path / "newer-gcc"
    stubs.mkdir()
    (stubs / "v.map").write_text("GLIBCXX_3.4.99 { global: gd_stub_glibcxx; local: *; };\n", encoding="utf-8")
    (stubs / "s.c").write_text("void gd_stub_glibcxx(void) {}\n", encoding="utf-8")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(stubs / "libstdc++.so.6"), str(stubs / "s.c"), "-Wl,-soname,libstdc++.so.6",
                    f"-Wl,--version-script={stubs / 'v.map'}"], check=True, capture_output=True, timeout=120)
    src = tmp_path / "newgcc.cpp"
    src.write_text(GLIBCXX_SOURCE.replace("abiext", "newgcc"), encoding="utf-8")
    so = tmp_path / "newgcc.so"
    torch_dir = site_of(base) / "torch"
    subprocess.run(["g++", "-O1", "-shared", "-fPIC", "-std=c++17", f"-I{torch_dir / 'include'}", f"-I{sysconfig.get_paths()['include']}",
                    str(src), f"-L{torch_dir / 'lib'}", "-lc10", str(stubs / "libstdc++.so.6"), "-o", str(so)],
                   check=True, capture_output=True, timeout=300)
    python = overlay(tmp_path, base)
    SitePackages(site_of(python)).dist("newgcc", "0.1", requires=["torch"], files={f"newgcc.{EXT}": so})
    imported = real_import(python, "import torch, newgcc")
    assert imported.returncode != 0 and "version `GLIBCXX_3.4.99' not found" in imported.stderr, imported.stderr
    error = imported.stderr.strip().splitlines()[-1]
    judge("b-newer-libstdcxx", python, True, error, error, subject="newgcc")


# --- real wheels from PyPI over CPU torch 2.13.0 -----------------------------------------------------
@pytest.mark.parametrize("dist, version, package, subject", [
    ("torchvision", "0.27.0", "torchvision", "torchvision"),
    ("torchaudio", "2.11.1", "torchaudio", "torchaudio"),
    ("xformers", "0.0.32.post1", "xformers", "xformers"),
    ("sglang-kernel", "0.4.10", "sgl_kernel", "sglang-kernel"),
    ("vllm", "0.33.0", "vllm", "vllm"),
])
def test_pypi_extension_over_cpu_torch(dist, version, package, subject):
    python = torch_venv(f"{dist}=={version}")
    loads = load_each(python, package)
    failed = {k: v for k, v in loads.items() if v != "ok"}
    if dist == "vllm":  # its extension imported as Python would, without vllm/__init__ (which needs vLLM's whole closure)
        imported = real_import(python, "import importlib.util, torch\nspec = importlib.util.find_spec('vllm')\nimport os\n"
                               "path = os.path.join(spec.submodule_search_locations[0], '_C_stable_libtorch.abi3.so')\n"
                               "importlib.util.module_from_spec(importlib.util.spec_from_file_location('vllm._C_stable_libtorch', path))")
    else:
        imported = real_import(python, f"import torch, {package}" + (", xformers.ops" if dist == "xformers" else ""))
    # the loader's words about torch (a torch library or symbol) before any other it printed: on this
    # machine without a driver, a file may first miss libcuda.so.1, which is not this cause
    said = [m.group(0) for text in [imported.stderr, *failed.values()] for m in LOADER_LINE.finditer(text)]
    torchy = [t for t in said if re.search(r"libc10|libtorch|undefined symbol|operator|xFormers", t)]
    error = (torchy or said or [None])[0]
    truth = (f"import {'fails' if imported.returncode else 'succeeds'}; {len(failed)} of {len(loads)} torch-linked .so "
             f"fail to load after import torch" + (f": {error}" if error else ""))
    assert failed, loads  # a CUDA build over a CPU torch: the loader refuses its files
    judge(f"c-{dist}-{version}-over-torch-2.13.0-cpu", python, True, truth, error, subject=subject,
          expect_explain="confirmed" if dist != "sglang-kernel" else "")
    if dist == "xformers":  # a CUDA-only package over a CPU torch: the fix says the torch is the CPU build
        [finding] = [f for f in gd508(python)["findings"] if f["subject"] == subject]
        assert "is a CPU build, over which no CUDA build of xformers loads" in str(finding["fix"]), finding["fix"]


def test_flashinfer_ships_no_torch_extension():
    """flashinfer-python 0.7.2 compiles its kernels at run time (JIT, through apache-tvm-ffi) for the
    torch it finds: no shared object in the wheel links torch, so there is nothing to be built for another."""
    python = torch_venv("flashinfer-python==0.7.2")
    root = site_of(python) / "flashinfer"
    objects = [p for p in root.rglob("*.so*") if p.is_file() and (p.name.endswith(".so") or ".so." in p.name)]
    if shutil.which("readelf") is None:
        pytest.skip("needs readelf (binutils): the truth is read with it, not with gpudoctor's reader")
    needed = {p.name: re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]",
                                 subprocess.run(["readelf", "-d", str(p)], capture_output=True, text=True, timeout=60).stdout)
              for p in objects}
    assert not any(n.startswith(("libc10", "libtorch")) for names in needed.values() for n in names), needed
    judge("d-flashinfer-0.7.2-over-torch-2.13.0-cpu", python, False,
          f"nothing to load: {len(objects)} .so in the wheel, none links torch (readelf -d: {sorted(needed)})", None)


# --- CUDA extensions of one real closure over another closure's CUDA torch (static) ----------------
def graft(target: Path, base: Path, donor: Path, dist: str) -> Path:
    """A venv of our own: ``base``'s site-packages hard-linked, ``dist`` swapped for ``donor``'s (by RECORD)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(target)], check=True, timeout=120)
    site = site_of(target / "bin" / "python")
    shutil.rmtree(site)
    subprocess.run(["cp", "-al", str(site_of(base)), str(site)], check=True, timeout=600)
    wanted = re.sub(r"[-_.]+", "_", dist).lower()

    def dist_info(root: Path) -> Optional[Path]:
        found = [p for p in root.glob("*.dist-info") if p.name.split("-", 1)[0].lower() == wanted]
        return found[0] if found else None

    def record(info: Path) -> List[str]:
        return [line.split(",", 1)[0] for line in (info / "RECORD").read_text(encoding="utf-8").splitlines() if line]

    old = dist_info(site)
    for rel in record(old) if old else []:  # the base's own copy of it, if it has one
        path = site / rel
        if ".." not in Path(rel).parts and (path.is_file() or path.is_symlink()):
            path.unlink()
    if old:
        shutil.rmtree(old, ignore_errors=True)
    donor_site = site_of(donor)
    given = dist_info(donor_site)
    assert given is not None, donor_site
    for rel in record(given):
        src, dst = donor_site / rel, site / rel
        if ".." in Path(rel).parts or not src.is_file():
            continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        if dst.exists():
            dst.unlink()
        os.link(src, dst)
    return target / "bin" / "python"


TORCH_OF = {"0.33.0": "2.14.0+cu130", "0.20.0": "2.11.0+cu130"}  # the base closures' torch


@pytest.mark.parametrize("dist, engine, release, base_release, broken", [
    ("vllm", "vllm", "0.20.0", "0.33.0", True),  # built for torch 2.11.0+cu130
    ("xformers", "vllm", "0.11.0", "0.33.0", True),  # 0.0.32.post1, built for torch 2.8.0+cu128
    ("xformers", "vllm", "0.11.0", "0.20.0", True),
    ("sglang-kernel", "sglang", "0.5.23", "0.33.0", None),  # 0.4.10, built for torch 2.14.1+cu130: the truth is the H200's
    ("sglang-kernel", "sglang", "0.5.23", "0.20.0", True),  # over torch 2.11 (the H200's torch: scripts/device/stack.sh step 5)
])
def test_cuda_extension_over_another_closures_torch(tmp_path, dist, engine, release, base_release, broken):
    base = realenv.release_venv(base_release)
    donor = realenv.release_venv(release) if engine == "vllm" else realenv.closure_venv(release, engine=engine)
    python = graft(tmp_path / "venv", base, donor, dist)
    static = gd508(python)
    finding = [f for f in static["findings"] if f["subject"] == dist]
    write_row(f"e-{dist}-from-{engine}-{release}-over-torch-{TORCH_OF[base_release]}",
              truth="not importable here (sparse CUDA files); the H200 imports them",
              static=finding_text(dict(static, findings=finding)) if finding else static["status"],
              deep="not run (sparse CUDA files)", explain="—", broken=bool(broken))
    if broken:
        assert finding, static
    # the rest of the closure stays clean: only the swapped distribution is named
    assert {f["subject"] for f in static["findings"]} <= {dist}, static


# --- correct installs ---------------------------------------------------------------------------------
@pytest.mark.parametrize("engine, release", [("vllm", "0.33.0"), ("sglang", "0.5.23")])
def test_correct_closure_has_no_finding(engine, release):
    python = realenv.release_venv(release) if engine == "vllm" else realenv.closure_venv(release, engine=engine)
    static = gd508(python)
    done = subprocess.run([sys.executable, "-m", "gpudoctor", "snapshot", "--python", str(python)], capture_output=True, text=True,
                          timeout=300)
    value = json.loads(done.stdout)["facts"]["torch.extensions"]["value"]
    write_row(f"f-{engine}-{release}-closure", truth=f"correct install ({len(value['extensions'])} torch-linked .so)",
              static=finding_text(static), deep="not run (sparse CUDA files)", explain="—", broken=False)
    assert static["status"] == "pass", static


def test_the_table():
    """Every case's row, as Markdown (after the cases: same xdist group, this file's order)."""
    rows = [json.loads(p.read_text(encoding="utf-8")) for p in sorted(ROWS.glob("*.json"))]
    if not rows:
        pytest.skip("no case ran")
    lines = ["| case | real import (truth) | GD508 without --deep | GD508 with --deep | explain on the error |",
             "|---|---|---|---|---|"]
    for row in rows:
        cells = [row["case"], row["truth"], row["static"], row["deep"], row["explain"]]
        lines.append("| " + " | ".join(str(c).replace("|", "\\|").replace("\n", " ") for c in cells) + " |")
    table = "\n".join(lines) + "\n"
    out = Path(os.environ.get("GPUDOCTOR_EXT_TABLE") or (realenv.CACHE / "oracle" / "ext-table.md"))
    out.write_text(table, encoding="utf-8")
    print(table)
    for row in rows:  # every broken case found without --deep
        assert not row["broken"] or row["static"].startswith("fail"), row
