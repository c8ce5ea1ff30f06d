"""GD501-GD507 and GD515 Python environment rules: pass, fail and not-applicable cases.

The H200 snapshot with the Python facts of a site-packages built under tmp_path (real
dist-info folders, the H200's compiled .so files) and collected by the real probe
(probes/python_stack_read.py); tests/test_python_stack_rules.py has the detailed assertions.
"""

from __future__ import annotations

import os

from gpudoctor.snapshot import Fact

from cases import Case
from fakes.site_packages import FA2_SO, SM80_SM90_PTX90, SM86, TORCH_VERSION_PY, SitePackages
from fakes.site_packages import snapshot_of

CPU_TORCH = TORCH_VERSION_PY.replace("'13.0'", "None").replace("+cu130", "+cpu")
NO_DRIVER = Fact(None, "absent", "nvml", "no NVIDIA driver here (--gpu A100)")
UNANSWERED = Fact(None, "timeout", "--python /venv/bin/python", "/venv/bin/python did not answer within 8 s")


def site(*installs, record="stack", **facts):
    def build(tmp):
        packages = SitePackages(tmp / "site-packages")
        for install in installs:
            install(packages)
        return snapshot_of(packages, record, **facts)
    return build


def torch(**kw):
    return lambda s: s.torch(**kw)


def dist(name, version, **kw):
    return lambda s: s.dist(name, version, **kw)


def stale_torch_dist_info(s):
    os.utime(s.dist("torch", "2.9.0"), (1_000_000_000, 1_000_000_000))


def fa2_without_its_extension(s):
    s.dist("flash-attn", "2.8.3", files={FA2_SO: SM86, "flash_attn/__init__.py": "", "flash_attn/ops/__init__.py": ""})
    (s.path / FA2_SO).unlink()


CASES = [
    # GD501 torch-without-cuda
    Case("cu130-torch", "GD501", site(torch()), "pass"),
    Case("cpu-torch-on-the-h200", "GD501", site(torch(version_py=CPU_TORCH, lib=None)), "fail", "error",
         ("torch 2.11.0+cpu is a CPU-only build",), commands=("--index-url https://download.pytorch.org/whl/cu130",)),
    # --gpu A100 on a CPU box: no driver, a CPU torch, no vLLM build tag: a placeholder, never a made-up cu128.
    Case("cpu-torch-no-driver", "GD501", site(torch(version_py=CPU_TORCH, lib=None), driver__cuda_max=NO_DRIVER), "fail", "error",
         ("is a CPU-only build",), commands=("--index-url https://download.pytorch.org/whl/cuXYZ  # cuXYZ: the CUDA of your driver",)),
    Case("no-gpu", "GD501", site(torch(version_py=CPU_TORCH, lib=None), gpu__count=0), "not_applicable"),
    # GD502 torch-arch-list-misses-gpu
    Case("sm90-cubin-for-the-h200", "GD502", site(torch(lib=SM80_SM90_PTX90)), "pass"),
    Case("sm86-only-torch-on-the-h200", "GD502", site(torch(lib=SM86)), "fail", "error", ("has GPU code for sm_86", "is sm_90"),
         subject="GPU 0"),
    # GD503 requirement-not-satisfied
    Case("markers-not-for-linux", "GD503",
         site(torch(), dist("vllm", "0.20.0", requires=['pywin32; sys_platform == "win32"', "torch==2.11.0"])), "pass"),
    Case("vllm-needs-xgrammar", "GD503", site(torch(), dist("vllm", "0.20.0", requires=["torch==2.11.0", "xgrammar==0.1.21"])),
         "fail", "warning", ("vllm 0.20.0 requires xgrammar==0.1.21 (not installed)",), subject="vllm"),
    # vLLM 0.33.0's first requirements (its METADATA), none installed: `pip install --no-deps vllm`. One
    # statement of the cause (GD510 says the same; engine.fold shows them as one), one fix.
    Case("vllm-installed-with-no-deps", "GD503",
         site(torch(), dist("vllm", "0.33.0", requires=["regex", "cachetools", "psutil", "numpy", "torch==2.11.0"])),
         "fail", "error", ("vllm 0.33.0 was installed without its requirements (as `pip install --no-deps` leaves it): "
                           "4 of its requirements are not installed (regex, cachetools, psutil, numpy)",),
         subject="vllm", commands=("-m pip install vllm==0.33.0  # keeps this vllm",)),
    # SGLang's exact pins (sglang 0.5.23's METADATA: torch==2.14.1, sglang-kernel==0.4.10): its compiled kernels, an error.
    Case("sglang-on-another-torch-and-kernel", "GD503",
         site(torch(), dist("sglang-kernel", "0.4.9"),
              dist("sglang", "0.5.23", requires=["torch==2.14.1", "sglang-kernel==0.4.10"])), "fail", "error",
         ("sglang 0.5.23 requires torch==2.14.1, 2.11.0 is installed; sglang-kernel==0.4.10, 0.4.9 is installed",), subject="sglang"),
    # GD504 duplicate-distribution
    Case("one-torch", "GD504", site(torch()), "pass"),
    Case("stale-torch-dist-info-beside-the-real-one", "GD504", site(torch(), stale_torch_dist_info), "fail", "error",
         ("torch is installed 2 times",), subject="torch"),
    # GD505 distribution-files-missing
    Case("complete-install", "GD505", site(dist("flash-attn", "2.8.3", files={FA2_SO: SM86})), "pass"),
    Case("flash-attn-extension-deleted", "GD505", site(fa2_without_its_extension), "fail", "error",
         ("1 of the 2 files checked against its RECORD are missing",), subject="flash-attn"),
    # GD506 distribution-metadata-unreadable
    Case("clean-metadata", "GD506", site(), "pass"),
    Case("latin-1-metadata", "GD506",
         site(dist("brokenpkg", "1.0", metadata=b"Metadata-Version: 2.1\nName: brokenpkg\nVersion: 1.0\nSummary: caf\xe9\n\n"),
              record="stack-full"), "fail", "warning", ("METADATA is not UTF-8",), subject="brokenpkg-1.0.dist-info"),
    # GD507 python-environment-unreadable
    Case("no-python-option", "GD507", site(), "not_applicable"),
    Case("python-answered", "GD507", site(python__requested="/venv/bin/python"), "pass"),
    Case("python-did-not-answer", "GD507", site(python__requested="/venv/bin/python", python__executable=UNANSWERED), "fail",
         "error", ("cannot inspect /venv/bin/python: /venv/bin/python did not answer within 8 s",)),
    # GD515 engine-pins-conflict: the pins of vLLM 0.33.0 and SGLang 0.5.23 as their wheels declare them.
    Case("one-engine", "GD515", site(dist("sglang", "0.5.23", requires=["torch==2.14.1"])), "not_applicable"),
    Case("engines-that-agree", "GD515", site(dist("vllm", "0.33.0", requires=["torch==2.14.1", "flashinfer-python>=0.7"]),
                                            dist("sglang", "0.5.23", requires=["torch==2.14.1", "flashinfer-python==0.7.2"])), "pass"),
    Case("vllm-and-sglang-pin-another-torch", "GD515",
         site(dist("vllm", "0.33.0", requires=["torch==2.14.0", "flashinfer-python==0.7.2.post1", 'numba==0.61.2; python_version < "3"']),
              dist("sglang", "0.5.23", requires=["torch==2.14.1", "flashinfer-python==0.7.2", "numba==0.65.1"])), "fail", "warning",
         ("vllm 0.33.0 and sglang 0.5.23 pin versions no one environment can hold: flashinfer-python==0.7.2.post1 vs "
          "flashinfer-python==0.7.2; torch==2.14.0 vs torch==2.14.1",), subject="vllm + sglang", commands=("venv",)),
]
