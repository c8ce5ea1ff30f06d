"""GD508 against real artifacts, the real import in a child as the oracle (CPU torch 2.13.0 from PyPI).

- A torch C++ extension compiled here (g++, torch's own headers from the wheel) with the other C++ ABI
  (``-D_GLIBCXX_USE_CXX11_ABI=0``): its import fails with the real "undefined symbol:
  _ZN3c106detail23torchInternalAssertFailEPKcS2_jS2_RKSs" (the symbol of the issue's H200 report);
  gpudoctor names it without --deep, and ``explain`` confirms the error text. The same source built
  with the right ABI imports, and gives no finding.
- torchvision wheels from PyPI over torch 2.13.0+cpu: 0.27.0 (pins torch 2.12.0) and 0.28.0 (pins
  2.13.0, a CUDA build): ``import torchvision`` fails with "operator torchvision::nms does not
  exist" for both; gpudoctor finds both and ``explain`` confirms that text.
"""

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import realenv  # noqa: E402
from fakes.site_packages import SitePackages  # noqa: E402

pytestmark = pytest.mark.real

CPU_TORCH = "2.13.0"
PY = f"python{sys.version_info[0]}.{sys.version_info[1]}"
OLD_ABI_SYMBOL = "_ZN3c106detail23torchInternalAssertFailEPKcS2_jS2_RKSs"
SOURCE = r"""
// A torch C++ extension: a CPython module that calls into c10 (TORCH_INTERNAL_ASSERT, TORCH_CHECK).
#include <Python.h>
#include <c10/util/Exception.h>

static PyObject* check(PyObject*, PyObject* args) {
  int value = 0;
  if (!PyArg_ParseTuple(args, "i", &value)) return nullptr;
  try {
    TORCH_INTERNAL_ASSERT(value >= 0, "value must be >= 0, got ", value);
    TORCH_CHECK(value < 100, "value must be < 100, got ", value);
  } catch (const c10::Error& e) {
    PyErr_SetString(PyExc_ValueError, e.what_without_backtrace());
    return nullptr;
  }
  return PyLong_FromLong(value * 2);
}

static PyMethodDef methods[] = {{"check", check, METH_VARARGS, "c10 checks"}, {nullptr, nullptr, 0, nullptr}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "abiext", nullptr, -1, methods};
PyMODINIT_FUNC PyInit_abiext(void) { return PyModule_Create(&module); }
"""


def torch_venv(*more):
    extra = realenv.requires_dist(realenv.wheel("torch", CPU_TORCH)) + (["numpy", "pillow"] if more else [])
    return realenv.venv_with(f"torch=={CPU_TORCH}", *more, extra=extra)


def site_of(python: Path) -> Path:
    return python.parent.parent / "lib" / PY / "site-packages"


def overlay(tmp_path: Path, base: Path) -> Path:
    """A venv of our own on top of the cached one (which stays untouched): its site-packages via a .pth."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "venv")], check=True, timeout=120)
    (tmp_path / "venv" / "lib" / PY / "site-packages" / "base.pth").write_text(str(site_of(base)) + "\n", encoding="utf-8")
    return tmp_path / "venv" / "bin" / "python"


def build_extension(tmp_path: Path, base: Path, abi: int) -> Path:
    if shutil.which("g++") is None:
        pytest.skip("needs g++")
    src = tmp_path / "abiext.cpp"
    src.write_text(SOURCE, encoding="utf-8")
    out = tmp_path / f"abiext_abi{abi}.so"
    torch_dir = site_of(base) / "torch"
    subprocess.run(["g++", "-O1", "-shared", "-fPIC", "-std=c++17", f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
                    f"-I{torch_dir / 'include'}", f"-I{sysconfig.get_paths()['include']}", str(src),
                    f"-L{torch_dir / 'lib'}", "-lc10", "-o", str(out)], check=True, capture_output=True, timeout=300)
    return out


def real_import(python: Path, code: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=300)


def gpudoctor(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpudoctor", *args], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ))


def gd508(python: Path, deep: bool = False) -> dict:
    done = gpudoctor("check", "--python", str(python), "--select", "GD508", "--format", "json", "--timeout", "60",
                     *(["--deep"] if deep else []))
    assert done.returncode in (0, 1), done.stderr
    [outcome] = [o for o in json.loads(done.stdout)["outcomes"] if o["id"] == "GD508"]
    return outcome


def explain_verdict(python: Path, text: str) -> dict:
    done = gpudoctor("explain", "--python", str(python), "--format", "json", text)
    assert done.returncode in (0, 1), done.stderr
    return json.loads(done.stdout)


def _confirmed_by(doc: dict) -> list:
    checks = [c for m in doc.get("matches", []) for c in (m.get("confirmation") or {}).get("checks", [])]
    return [c.get("rule") for c in checks if c.get("kind") == "confirmed"]


@pytest.mark.parametrize("abi", [0, 1])
def test_extension_built_with_either_cxx_abi(tmp_path, abi):
    base = torch_venv()
    so = build_extension(tmp_path, base, abi)
    python = overlay(tmp_path, base)
    SitePackages(site_of(python)).dist("abiext", "0.1", requires=["torch"],
                                       files={"abiext.cpython-%d%d-x86_64-linux-gnu.so" % sys.version_info[:2]: so})
    imported = real_import(python, "import torch, abiext; print(abiext.check(3))")
    for deep in (False, True):
        outcome = gd508(python, deep)
        if abi == 0:
            assert imported.returncode != 0 and f"undefined symbol: {OLD_ABI_SYMBOL}" in imported.stderr
            assert outcome["status"] == "fail", outcome
            [finding] = outcome["findings"]
            assert finding["subject"] == "abiext" and "c10::detail::torchInternalAssertFail(…)" in finding["message"]
            assert OLD_ABI_SYMBOL in finding["message"] and "_GLIBCXX_USE_CXX11_ABI=0" in finding["message"]
            assert ("--deep confirms: loading" in finding["message"]) == deep
            if deep:  # the loader's own words, as the real import printed them
                assert f"undefined symbol: {OLD_ABI_SYMBOL}" in finding["message"].split("--deep confirms")[1]
        else:
            assert imported.returncode == 0 and imported.stdout.strip() == "6", imported.stderr
            assert outcome["status"] == "pass", outcome
    error_line = imported.stderr.strip().splitlines()[-1] if abi == 0 else f"ImportError: abiext.so: undefined symbol: {OLD_ABI_SYMBOL}"
    doc = explain_verdict(python, error_line)
    assert ("GD508" in _confirmed_by(doc)) == (abi == 0), doc


@pytest.mark.parametrize("torchvision", ["0.27.0", "0.28.0"])
def test_pypi_torchvision_over_cpu_torch(torchvision):
    python = torch_venv(f"torchvision=={torchvision}")
    imported = real_import(python, "import torch, torchvision")
    assert imported.returncode != 0 and "operator torchvision::nms does not exist" in imported.stderr
    for deep in (False, True):
        outcome = gd508(python, deep)
        assert outcome["status"] == "fail", outcome
        [finding] = outcome["findings"]
        assert finding["subject"] == "torchvision"
        assert "it is a CUDA build" in finding["message"] and "libc10_cuda.so" in finding["message"]
        assert ("--deep confirms: loading _C.so after import torch fails with \"libc10_cuda.so: cannot open shared object file"
                in finding["message"]) == deep
    doc = explain_verdict(python, "RuntimeError: operator torchvision::nms does not exist")
    assert "GD508" in _confirmed_by(doc), doc
