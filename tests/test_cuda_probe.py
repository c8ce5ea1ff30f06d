"""The CUDA toolkit probe (probes/cuda.py): discovery the way torch does it, nvcc, gcc, LD_LIBRARY_PATH.

Toolkits are real directory trees under a fake root (``--root``), with ``nvcc`` and ``gcc``
as small executables that print what the real programs print (texts recorded on the H200,
capture.log, and in research/facts.md §5.1), run as real subprocesses by the probe.
Where this machine has a real toolkit (/usr/local/cuda), one test reads it too.
"""

import json
import os
import shutil
from pathlib import Path

import pytest

from gpudoctor.probes import Context, cuda
from fakes.cuda_toolkit import GCC_13, NVCC_12_4, NVCC_13_0, executable, toolkit

CLANG_18 = "Ubuntu clang version 18.1.3 (1ubuntu1)\nTarget: x86_64-pc-linux-gnu\n"


@pytest.fixture
def machine(tmp_path):
    """A root with CUDA 12.4 and 13.0 under /usr/local, /usr/local/cuda -> cuda-13.0, gcc 13 on PATH."""
    root = tmp_path / "root"
    toolkit(root, "12.4", NVCC_12_4)
    toolkit(root, "13.0", NVCC_13_0)
    os.symlink("cuda-13.0", root / "usr" / "local" / "cuda")
    bindir = tmp_path / "bin"
    executable(bindir / "gcc", GCC_13)
    return root, bindir


def probe(root, environ):
    return cuda.collect(Context(root=str(root), environ=environ))


def test_every_toolkit_is_found_once_with_its_version(machine):
    root, bindir = machine
    facts = probe(root, {"PATH": str(bindir)})
    kits = {Path(t["realpath"]).name: t for t in facts["cuda.toolkits"].value}
    assert set(kits) == {"cuda-12.4", "cuda-13.0"}
    assert kits["cuda-13.0"]["path"] == str(root / "usr/local/cuda")
    assert kits["cuda-13.0"]["aliases"] == [str(root / "usr/local/cuda-13.0")]
    assert (kits["cuda-13.0"]["version"], kits["cuda-13.0"]["version_source"]) == ("13.0.2", "version.json")
    assert (kits["cuda-13.0"]["nvcc_version"], kits["cuda-13.0"]["nvcc_full"]) == ("13.0", "13.0.88")  # capture.log
    assert (kits["cuda-12.4"]["nvcc_version"], kits["cuda-12.4"]["nvcc_full"]) == ("12.4", "12.4.99")


def test_nvcc_version_from_version_json_without_running_nvcc(tmp_path):
    """A real CUDA install's version.json names its nvcc component: no process needed."""
    home = tmp_path / "usr" / "local" / "cuda-12.8"
    executable(home / "bin" / "nvcc", "must not be run\n", exit_code=1)
    (home / "include").mkdir()
    (home / "include" / "cuda_runtime_api.h").write_text("", encoding="utf-8")
    (home / "version.json").write_text(json.dumps({"cuda": {"name": "CUDA SDK", "version": "12.8.1"},
                                                   "cuda_nvcc": {"name": "CUDA NVCC", "version": "12.8.93"}}), encoding="utf-8")
    facts = probe(tmp_path, {"PATH": str(home / "bin"), "CUDA_HOME": str(home)})
    assert (facts["cuda.home"].value["nvcc_version"], facts["cuda.home"].value["nvcc_full"]) == ("12.8", "12.8.93")
    assert facts["cuda.home"].value["nvcc_version_source"] == "version.json"
    assert (facts["cuda.nvcc"].value["version"], facts["cuda.nvcc"].source) == ("12.8", "version.json")


def test_home_falls_back_to_usr_local_cuda_like_torch(machine):
    root, bindir = machine
    home = probe(root, {"PATH": str(bindir)})["cuda.home"]
    assert home.ok and home.value["source"] == "/usr/local/cuda"
    assert home.value["path"] == str(root / "usr/local/cuda")
    assert home.value["nvcc_version"] == "13.0" and home.value["headers"] is True


def test_home_order_cuda_home_then_cuda_path_then_nvcc_on_path(machine):
    root, bindir = machine
    kit124 = str(root / "usr/local/cuda-12.4")
    kit130 = str(root / "usr/local/cuda-13.0")
    env = {"PATH": f"{kit130}/bin:{bindir}", "CUDA_PATH": kit124}
    assert probe(root, env)["cuda.home"].value["source"] == "CUDA_PATH"
    home = probe(root, dict(env, CUDA_HOME=kit130))["cuda.home"].value
    assert (home["source"], home["path"], home["env"]) == ("CUDA_HOME", kit130, {"CUDA_HOME": kit130, "CUDA_PATH": kit124})
    home = probe(root, {"PATH": f"{kit124}/bin:{bindir}"})["cuda.home"].value
    assert (home["source"], home["path"], home["nvcc_version"]) == ("nvcc on PATH", kit124, "12.4")


def test_nvcc_wrapper_outside_a_toolkit_gives_a_home_without_headers(machine):
    """This dev machine's shape: /usr/local/bin/nvcc is a script that execs the real nvcc."""
    root, bindir = machine
    wrapper_dir = root / "usr" / "local" / "bin"
    executable(wrapper_dir / "nvcc", NVCC_13_0)
    facts = probe(root, {"PATH": f"{wrapper_dir}:{bindir}"})
    home = facts["cuda.home"].value
    assert (home["path"], home["source"], home["headers"]) == (str(root / "usr/local"), "nvcc on PATH", False)
    assert facts["cuda.nvcc"].value["toolkit"] == str(root / "usr/local")
    # /usr/local is not listed as a toolkit: it has an nvcc but no CUDA headers.
    assert str(root / "usr/local") not in [t["path"] for t in facts["cuda.toolkits"].value]


def test_no_toolkit_at_all(tmp_path):
    facts = probe(tmp_path, {"PATH": str(tmp_path / "nothing")})
    assert facts["cuda.home"].status == "absent" and "no /usr/local/cuda" in facts["cuda.home"].detail
    assert facts["cuda.toolkits"].value == []
    assert facts["cuda.nvcc"].status == "absent"


def test_broken_nvcc_is_an_error_fact(tmp_path):
    bindir = tmp_path / "bin"
    executable(bindir / "nvcc", "Segmentation fault\n", exit_code=139)
    fact = probe(tmp_path, {"PATH": str(bindir)})["cuda.nvcc"]
    assert fact.status == "error" and "exited 139" in fact.detail


def test_compilers_from_cc_cudahostcxx_and_path(machine, tmp_path):
    root, bindir = machine
    clang = executable(tmp_path / "llvm" / "clang", CLANG_18)
    facts = probe(root, {"PATH": str(bindir), "CC": str(clang), "CUDAHOSTCXX": "gcc"})
    compilers = facts["cuda.gcc"].value
    assert [(c["via"], c.get("kind"), c.get("version")) for c in compilers] == [
        (["CC"], "clang", "18.1.3"),
        (["CUDAHOSTCXX", "gcc on PATH"], "gcc", "13.3.0"),
    ]


def test_compiler_that_does_not_exist(tmp_path):
    # A path under tmp_path: a real-looking /opt/gcc/bin/gcc exists on some GPU machines.
    fact = probe(tmp_path, {"PATH": str(tmp_path), "CC": str(tmp_path / "no-such-gcc" / "bin" / "gcc")})["cuda.gcc"]
    assert fact.status == "absent"
    assert any(c.get("error") for c in fact.value)


@pytest.mark.parametrize("line, expected", [
    ("gcc (Ubuntu 13.3.0-6ubuntu2~24.04.1) 13.3.0", ("gcc", "13.3.0")),  # capture.log, the H200
    ("gcc (Debian 12.2.0-14+deb12u1) 12.2.0", ("gcc", "12.2.0")),
    ("gcc (GCC) 15.3.0", ("gcc", "15.3.0")),
    ("g++ (GCC) 11.4.1 20231218 (Red Hat 11.4.1-3)", ("gcc", "11.4.1")),
    ("Ubuntu clang version 18.1.3 (1ubuntu1)", ("clang", "18.1.3")),
    ("clang version 17.0.6", ("clang", "17.0.6")),
    ("cc: command not understood", None),
])
def test_parse_compiler_version(line, expected):
    assert cuda.parse_compiler_version(line) == expected


def test_parse_nvcc_version_matches_torch_and_capture():
    assert cuda.parse_nvcc_version(NVCC_13_0) == ("13.0", "13.0.88")
    assert cuda.parse_nvcc_version(NVCC_12_4) == ("12.4", "12.4.99")
    assert cuda.parse_nvcc_version("nvcc: something else") is None


def test_ld_library_path_cuda_libraries(tmp_path):
    lib = tmp_path / "cuda-12.1" / "lib64"
    lib.mkdir(parents=True)
    for real, link in (("libnvJitLink.so.12.1.105", "libnvJitLink.so.12"), ("libcudart.so.12.1.105", "libcudart.so.12"),
                       ("libcublasLt.so.12.1.3.1", "libcublasLt.so.12"), ("libnccl.so.2.18.1", "libnccl.so.2")):
        (lib / real).write_bytes(b"")
        os.symlink(real, lib / link)
    (lib / "libcudart.so").symlink_to("libcudart.so.12")
    (lib / "libunrelated.so.1").write_bytes(b"")
    fact = probe(tmp_path, {"PATH": "", "LD_LIBRARY_PATH": f"{tmp_path / 'missing'}::{lib}"})["cuda.ld_library_path_shadows"]
    found = {(item["soname"], item["lib"], item["version"]) for item in fact.value}
    assert found == {
        ("libnvJitLink.so.12", "nvjitlink", "12.1.105"),
        ("libcudart.so.12", "cudart", "12.1.105"),
        ("libcublasLt.so.12", "cublas", "12.1.3.1"),
        ("libnccl.so.2", "nccl", "2.18.1"),
    }
    assert all(item["dir"] == str(lib) for item in fact.value)


def test_ld_library_path_unset(tmp_path):
    fact = probe(tmp_path, {"PATH": ""})["cuda.ld_library_path_shadows"]
    assert fact.ok and fact.value == [] and "not set" in fact.detail


REAL_NVCC = Path("/usr/local/cuda/bin/nvcc")


@pytest.mark.skipif(not REAL_NVCC.exists(), reason="no CUDA toolkit at /usr/local/cuda on this machine")
def test_the_real_toolkit_of_this_machine():
    facts = cuda.collect(Context(environ={"PATH": "/usr/bin:/bin", "CUDA_HOME": "/usr/local/cuda"}))
    home = facts["cuda.home"].value
    real = cuda.parse_nvcc_version(os.popen(f"{REAL_NVCC} --version").read())
    assert home["nvcc_version"] == real[0] and home["source"] == "CUDA_HOME"
    assert home["path"] == "/usr/local/cuda" and shutil.which("nvcc", path=str(REAL_NVCC.parent))
