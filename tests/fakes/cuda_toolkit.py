"""A CUDA toolkit laid out as the installers lay it out (bin/nvcc answering --version as the real one
does, the libraries under lib64), and executables that print a recorded text."""

import json
import stat
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
CAPTURE = (REPO / "tests" / "fixtures" / "ground_truth" / "h200" / "capture.log").read_text(encoding="utf-8")
NVCC_13_0 = CAPTURE.split("===== nvcc\n", 1)[1].split("/usr/local/cuda\n", 1)[0].split("\n", 1)[1]  # drop the `which` line
NVCC_12_4 = """nvcc: NVIDIA (R) Cuda compiler driver
Copyright (c) 2005-2024 NVIDIA Corporation
Built on Tue_Feb_27_16:19:38_PST_2024
Cuda compilation tools, release 12.4, V12.4.99
Build cuda_12.4.r12.4/compiler.33961263_0
"""


GCC_13 = "gcc (Ubuntu 13.3.0-6ubuntu2~24.04.1) 13.3.0\nCopyright (C) 2023 Free Software Foundation, Inc.\n"


def executable(path: Path, output: str, exit_code: int = 0) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\n/bin/cat <<'EOF'\n{output}EOF\nexit {exit_code}\n", encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def toolkit(root: Path, version: str, nvcc_text: str, version_json: bool = True) -> Path:
    home = root / "usr" / "local" / f"cuda-{version}"
    executable(home / "bin" / "nvcc", nvcc_text)
    (home / "include").mkdir(parents=True)
    (home / "include" / "cuda_runtime_api.h").write_text("/* header */\n", encoding="utf-8")
    if version_json:
        full = {"12.4": "12.4.1", "13.0": "13.0.2"}[version]
        (home / "version.json").write_text(json.dumps({"cuda": {"name": "CUDA SDK", "version": full}}), encoding="utf-8")
    return home
