"""``--deep`` loads each CUDA binary without code for a GPU in a child interpreter (probes/deep_load_check.py)
and GD201 quotes what the loader said.

Real venvs holding real nvcc-built binaries under packages gpudoctor has never heard of:
- the H200's sm_86-only library (it loads: the missing sm_90 code is the cause);
- tests/fixtures/loader/libk_sm86_cudart12.so: NEEDED libcudart.so.12, which is not installed
  ("libcudart.so.12: cannot open shared object file");
- tests/fixtures/loader/libk_sm86_c10.so: calls c10::cuda::SetDevice without torch
  ("undefined symbol: _ZN3c104cuda9SetDeviceEa");
- tests/fixtures/loader/libk_sm86_libc10.so: NEEDED libc10.so, as a torch extension (loads once
  torch is imported: tests/real/test_real_deep_load.py; here torch is not installed).
listing.txt there has cuobjdump's and readelf's view of both (build.sh rebuilds them).
"""

import json
import os
from pathlib import Path

import pytest

from gpudoctor.probes import Context, deep_load_check, fatbin
from gpudoctor.snapshot import Snapshot

from fakes.site_packages import SM86, SitePackages, make_venv, venv_site
from helpers import gd

LOADER = Path(__file__).resolve().parent / "fixtures" / "loader"
CUDART12 = LOADER / "libk_sm86_cudart12.so"
C10 = LOADER / "libk_sm86_c10.so"
LIBC10 = LOADER / "libk_sm86_libc10.so"
HANGS = LOADER / "libk_sm86_hangs.so"


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    root = tmp_path_factory.mktemp("deepload")
    python = make_venv(root / "venv")
    site = SitePackages(venv_site(root / "venv"))
    site.dist("team-kernels", "0.3.1", files={"teamkernels/__init__.py": "", "teamkernels/ops/cuda/_sm86.so": SM86})
    site.dist("cu12-kernels", "1.2", files={"cu12kernels/__init__.py": "", "cu12kernels/lib/_ops.so": CUDART12})
    site.dist("torch-ext", "0.4", files={"torchext/__init__.py": "", "torchext/_C.so": C10})
    site.dist("needs-torch", "0.5", files={"needstorch/__init__.py": "", "needstorch/_C.so": LIBC10})
    return python, site


def check(python, *extra, gpu="H100"):
    proc = gd("check", "--python", str(python), "--gpu", gpu, "--select", "GD201", "--format", "json", *extra)
    assert proc.returncode in (0, 1), proc.stderr
    doc = json.loads(proc.stdout)
    findings = {f["subject"].split(" / ")[0]: f for f in doc["findings"]}
    return doc, findings


def test_the_fixtures_are_what_listing_txt_says():
    listing = (LOADER / "listing.txt").read_text(encoding="utf-8")
    assert "Shared library: [libcudart.so.12]" in listing and "UND _ZN3c104cuda9SetDeviceEa" in listing
    assert listing.count("sm_86.cubin") == 6 and "No PTX file found" in listing and "Shared library: [libc10.so]" in listing
    for path in (CUDART12, C10, LIBC10, HANGS):  # what the kernel scan reads agrees with cuobjdump
        scan = fatbin.scan(str(path)).to_json()
        assert (scan["status"], scan["sm_variants"], scan["ptx_variants"]) == ("ok", ["sm_86"], [])


def test_deep_quotes_the_loader_and_names_the_cause(venv):
    python, site = venv
    doc, findings = check(python, "--deep")
    fact = doc["snapshot"]["facts"]["kernels.load_check"]
    assert fact["status"] == "ok" and "ctypes.CDLL" in fact["source"] and "nothing launched" in fact["source"]
    by_dist = {b["dist"]: b for b in fact["value"]["binaries"]}
    assert by_dist["team-kernels"]["status"] == "ok"
    assert (by_dist["cu12-kernels"]["cause"], by_dist["cu12-kernels"]["missing_library"]) == ("missing_library", "libcudart.so.12")
    assert by_dist["torch-ext"]["undefined_symbol"] == "_ZN3c104cuda9SetDeviceEa"

    loads = findings["team-kernels"]["message"]
    assert loads.startswith("team-kernels 0.3.1 has no code for GPU 0 (H100, cc 9.0): teamkernels/ops/cuda/_sm86.so (sm_86)")
    assert ("--deep loaded _sm86.so in a child interpreter (nothing launched): the loader finds every library and symbol, "
            "so the missing sm_90 code is the cause") in loads

    cudart = findings["cu12-kernels"]
    assert ('--deep: loading _ops.so fails before any kernel runs: "libcudart.so.12: cannot open shared object file: '
            'No such file or directory" — it was built with CUDA 12 and that CUDA runtime (libcudart.so.12) is not on the '
            "loader's path: a different cause than the missing sm_90 code, and it fails first") in cudart["message"]
    assert "It does not load here either" in cudart["fix"]["summary"]
    assert "kernels.load_check" in [e["path"] for e in cudart["evidence"]]

    c10 = findings["torch-ext"]["message"]
    assert '--deep: loading _C.so fails before any kernel runs: "undefined symbol: _ZN3c104cuda9SetDeviceEa"' in c10
    assert "the symbol is torch's (c10/ATen), and torch is not installed here" in c10

    # NEEDED libc10.so: retried after `import torch`, which fails here (no torch in this venv)
    assert fact["value"]["torch"]["status"] == "error" and "No module named 'torch'" in fact["value"]["torch"]["error"]
    assert by_dist["needs-torch"]["missing_library"] == "libc10.so"
    assert ('"libc10.so: cannot open shared object file: No such file or directory" — it is a torch extension and torch '
            "does not import here (ModuleNotFoundError: No module named 'torch')") in findings["needs-torch"]["message"]


def test_without_deep_nothing_is_loaded(venv):
    python, _ = venv
    doc, findings = check(python)
    fact = doc["snapshot"]["facts"]["kernels.load_check"]
    assert fact["status"] == "not_supported" and "use --deep" in fact["detail"]
    assert all("--deep" not in f["message"] for f in findings.values())


def test_a_gpu_the_binaries_have_code_for_loads_nothing(venv):
    python, _ = venv
    doc, findings = check(python, "--deep", gpu="sm_86")
    assert findings == {}
    fact = doc["snapshot"]["facts"]["kernels.load_check"]
    assert fact["status"] == "absent" and "nothing to load" in fact["detail"]


def _snapshot(python) -> Snapshot:
    doc, _ = check(python)
    return Snapshot.from_json(doc["snapshot"])


def test_never_loaded_in_the_doctors_process_and_bounded(venv, monkeypatch):
    python, site = venv
    snap = _snapshot(python)
    monkeypatch.setattr(deep_load_check, "MAX_LOADS", 2)
    facts = deep_load_check.load(snap, Context(python=str(python), deep=True, environ=dict(os.environ), timeout=30))
    value = facts["kernels.load_check"].value
    assert [Path(b["path"]).name for b in value["binaries"]] == ["_ops.so", "_C.so"]  # by path: cu12kernels, needstorch
    assert value["left_out"] == 2 and "2 more not loaded (at most 2)" in facts["kernels.load_check"].detail
    with open("/proc/self/maps", encoding="utf-8") as maps:
        mapped = maps.read()
    assert str(site.path) not in mapped  # the child loaded them, this process did not


def test_a_child_that_dies_loading_a_library_names_it(venv, tmp_path):
    """The loader's child is killed while loading (here: its interpreter exits at once): the binary it
    was loading gets that as its outcome, never a hang or a crash of the doctor."""
    python, _ = venv
    snap = _snapshot(python)
    quitter = tmp_path / "python"
    quitter.write_text("#!/bin/sh\nexit 3\n", encoding="utf-8")
    quitter.chmod(0o755)
    facts = deep_load_check.load(snap, Context(python=str(quitter), deep=True, environ=dict(os.environ), timeout=5))
    fact = facts["kernels.load_check"]
    assert fact.status == "error" and "exited 3" in fact.detail
    assert all(b["status"] == "not_loaded" for b in fact.value["binaries"])


def test_the_load_check_gets_only_what_is_left_of_the_deadline(venv):
    """After the probes, the load check shares the command's deadline (issue 14): with none left it is not
    run at all (before, it took its own 0.8 x --timeout on top, so `check --deep` answered late)."""
    import time

    python, _ = venv
    snap = _snapshot(python)
    ctx = Context(python=str(python), deep=True, environ=dict(os.environ), timeout=30, deadline=time.monotonic() - 1)
    fact = deep_load_check.load(snap, ctx)["kernels.load_check"]
    assert fact.status == "timeout" and "no time left" in fact.detail, fact
    assert all(b["status"] == "not_loaded" for b in fact.value["binaries"])


def test_a_library_that_hangs_on_load_is_cut_off_and_named(tmp_path):
    """Its static initializer never returns: the child is killed at the load check's limit, that
    binary's outcome is the timeout, the ones after it are not loaded, and nothing is left running."""
    import psutil

    python = make_venv(tmp_path / "venv")
    site = SitePackages(venv_site(tmp_path / "venv"))
    site.dist("hangs", "0.1", files={"hangs/__init__.py": "", "hangs/_k.so": HANGS})
    site.dist("team-kernels", "0.3.1", files={"teamkernels/__init__.py": "", "teamkernels/_sm86.so": SM86})
    # 6 s: the load check shares --timeout (from the process start) with the probes before it
    doc, findings = check(python, "--deep", "--timeout", "6")
    fact = doc["snapshot"]["facts"]["kernels.load_check"]
    assert fact["status"] == "ok" and "_k.so: timeout" in fact["detail"]  # what was learnt is kept
    by_dist = {b["dist"]: b for b in fact["value"]["binaries"]}
    assert by_dist["hangs"]["status"] == "timeout" and "did not finish within" in by_dist["hangs"]["error"]
    assert by_dist["team-kernels"]["status"] == "not_loaded"
    assert '--deep: loading _k.so fails before any kernel runs: "loading it did not finish within' in findings["hangs"]["message"]
    assert "--deep" not in findings["team-kernels"]["message"]  # not loaded: nothing said
    left = [p for p in psutil.process_iter(["cmdline"]) if str(HANGS) in " ".join(p.info["cmdline"] or [])
            or any(str(tmp_path) in part for part in (p.info["cmdline"] or []))]
    assert left == []
