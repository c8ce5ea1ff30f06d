"""Every CUDA binary on the path (probes/kernel_scan.py), the scan cache (probes/scancache.py) and GD201 on them.

Real venvs (``python -m venv``) with packages gpudoctor has never heard of, laid out as pip
installs them (dist-info + RECORD), holding the real nvcc-built binaries of
tests/fixtures/ground_truth/h200 (cuobjdump's listing of them is in capture.log there) several
directory levels deep; the doctor runs as the CLI, the probe inside the venv's interpreter.
"""

import json
import multiprocessing
import os
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpudoctor.probes import fatbin, kernel_scan, python_stack_read, scancache

from fakes.site_packages import COMPRESSED, SM80_SM90_PTX90, SM86, SitePackages, make_venv, venv_site
from helpers import gd

DEEP = "teamkernels/ops/cuda/impl/v2"


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    where = tmp_path / "cache"
    monkeypatch.setenv("GPUDOCTOR_CACHE_DIR", str(where))
    scancache.forget()
    yield where
    scancache.forget()


@pytest.fixture(scope="module")
def unknown_venv(tmp_path_factory):
    """Three distributions nobody told gpudoctor about, plus an nvidia-* style library wheel."""
    root = tmp_path_factory.mktemp("unknown")
    python = make_venv(root / "venv")
    site = SitePackages(venv_site(root / "venv"))
    site.dist("team-kernels", "0.3.1", files={"teamkernels/__init__.py": "", f"{DEEP}/_sm86_only.cpython-311-x86_64-linux-gnu.so": SM86})
    site.dist("jit-friendly", "1.0", files={"jitfriendly/__init__.py": "", "jitfriendly/a/b/c/_ops.so": SM80_SM90_PTX90})
    site.dist("squeezed", "2.0", files={"squeezed/__init__.py": "", "squeezed/x/y/libsq.so": COMPRESSED})
    site.dist("nvidia-fake-cu13", "13.0.1", files={"nvidia/fake/lib/libfake.so.13": SM80_SM90_PTX90})
    return python, site


def check(python, gpu, *extra):
    proc = gd("check", "--python", str(python), "--gpu", gpu, "--select", "GD201", "--format", "json", *extra)
    assert proc.returncode in (0, 1), proc.stderr
    doc = json.loads(proc.stdout)
    return proc.returncode, doc, {o["id"]: o for o in doc["outcomes"]}["GD201"]


def test_binaries_of_unknown_packages_are_found_and_owned(unknown_venv):
    python, site = unknown_venv
    _, doc, _ = check(python, "sm_90")
    binaries = {Path(b["path"]).name: b for b in doc["snapshot"]["facts"]["kernels.binaries"]["value"]}
    assert set(binaries) == {"_sm86_only.cpython-311-x86_64-linux-gnu.so", "_ops.so", "libsq.so", "libfake.so.13"}
    deep = binaries["_sm86_only.cpython-311-x86_64-linux-gnu.so"]
    assert (deep["dist"], deep["package"], deep["owner"]) == ("team-kernels", "teamkernels", "RECORD")
    assert deep["path"] == str(site.path / DEEP / "_sm86_only.cpython-311-x86_64-linux-gnu.so")
    assert binaries["libfake.so.13"]["dist"] == "nvidia-fake-cu13"  # */lib/ of an nvidia-* wheel
    assert binaries["libsq.so"]["scan"]["compressed"] == binaries["libsq.so"]["scan"]["entries"] > 0


def test_sm86_only_binary_checked_for_sm90_is_an_error_naming_its_distribution(unknown_venv):
    python, _ = unknown_venv
    code, _, gd201 = check(python, "sm_90")
    assert code == 1
    [finding] = gd201["findings"]
    assert finding["severity"] == "error"
    assert finding["message"].startswith("team-kernels 0.3.1 has no code for GPU 0 (a GPU with cc 9.0 (Hopper), cc 9.0): "
                                         f"{DEEP}/_sm86_only.cpython-311-x86_64-linux-gnu.so (sm_86)")
    commands = "\n".join(finding["fix"]["commands"])
    assert 'TORCH_CUDA_ARCH_LIST="9.0"' in commands and "team-kernels==0.3.1" in commands
    assert "-gencode arch=compute_90,code=sm_90" in commands


def test_sm80_with_ptx90_passes_on_sm100_by_jit_and_compressed_code_is_read(unknown_venv):
    python, _ = unknown_venv
    code, doc, gd201 = check(python, "sm_100")
    names = " ".join(f["message"] for f in gd201["findings"])
    assert "jit-friendly" not in names and "nvidia-fake-cu13" not in names  # compute_90 PTX JITs on 10.0
    assert "squeezed 2.0 has no code for GPU 0" in names and "squeezed/x/y/libsq.so (sm_80, sm_90)" in names
    code, _, gd201 = check(python, "sm_86")
    assert gd201["status"] == "pass"  # sm_86 cubin, sm_80 cubins run on 8.6


def test_a_warm_run_takes_every_scan_from_the_cache(unknown_venv, tmp_path, monkeypatch):
    python, _ = unknown_venv
    # monkeypatch puts the session's value back (conftest): every later test of this worker keeps its private cache.
    monkeypatch.setenv("GPUDOCTOR_CACHE_DIR", str(tmp_path / "warm-cache"))
    _, cold, _ = check(python, "sm_90")
    _, warm, _ = check(python, "sm_90")
    cold_stats = cold["snapshot"]["facts"]["kernels.scan"]["value"]
    warm_stats = warm["snapshot"]["facts"]["kernels.scan"]["value"]
    assert cold_stats["read"] == cold_stats["shared_objects"] >= 4 and cold_stats["cached"] == 0
    assert warm_stats["read"] == 0 and warm_stats["cached"] == warm_stats["shared_objects"]
    assert warm_stats["bytes_read"] == 0
    assert cold["snapshot"]["facts"]["kernels.binaries"]["value"] == [
        {k: v for k, v in b.items() if k not in ("cached", "elapsed_s")} | {"elapsed_s": c["elapsed_s"]}
        for b, c in zip(warm["snapshot"]["facts"]["kernels.binaries"]["value"], cold["snapshot"]["facts"]["kernels.binaries"]["value"])]
    # A cold run reads headers only: a few KB of files that are hundreds of KB.
    sizes = sum(os.path.getsize(b["path"]) for b in cold["snapshot"]["facts"]["kernels.binaries"]["value"])
    assert cold_stats["bytes_read"] < sizes / 10, (cold_stats["bytes_read"], sizes)


# --- the cache itself -------------------------------------------------------------------------
def scan_site(site):
    first, _, _ = python_stack_read.scan_dists([str(site.path)], read_all=False)
    return kernel_scan.collect([str(site.path)], first, {}, fatbin.scan)


def test_a_changed_file_is_scanned_again(tmp_path, cache_dir):
    site = SitePackages(tmp_path / "site")
    site.dist("one", "1.0", files={"one/deep/er/_k.so": SM86})
    assert scan_site(site)["kernels.binaries"]["value"][0]["scan"]["sm_variants"] == ["sm_86"]
    scancache.forget()
    target = site.path / "one" / "deep" / "er" / "_k.so"
    target.write_bytes(SM80_SM90_PTX90.read_bytes())  # same path, new content (size and mtime change)
    facts = scan_site(site)
    assert facts["kernels.binaries"]["value"][0]["scan"]["sm_variants"] == ["sm_80", "sm_90"]
    assert facts["kernels.scan"]["value"]["read"] == 1


@pytest.mark.parametrize("content", [
    b"", b"{not json", b"\xff\xfe garbage", b"[]", json.dumps({"format": "someone-else", "version": 1}).encode(),
    json.dumps({"format": scancache.FORMAT, "version": 999, "entries": {}}).encode(),
    json.dumps({"format": scancache.FORMAT, "version": scancache.VERSION, "entries": {"x": 1, "fatbin-1\0/a": {"key": "k", "value": {}}}}).encode(),
    b"[" * 100000 + b"]" * 100000,
])
def test_a_corrupt_or_foreign_cache_file_is_ignored_and_rewritten(tmp_path, cache_dir, content):
    site = SitePackages(tmp_path / "site")
    site.dist("one", "1.0", files={"one/_k.so": SM86})
    cache_dir.mkdir()
    (cache_dir / scancache.file_name()).write_bytes(content)
    facts = scan_site(site)
    assert facts["kernels.binaries"]["value"][0]["scan"]["sm_variants"] == ["sm_86"]
    assert facts["kernels.scan"]["value"]["cache"] in ("ignored", "loaded")
    doc = json.loads((cache_dir / scancache.file_name()).read_text())
    assert doc["format"] == scancache.FORMAT and any(k.endswith(str(site.path / "one" / "_k.so")) for k in doc["entries"])


def test_an_entry_whose_value_is_not_a_scan_is_not_trusted(tmp_path, cache_dir):
    site = SitePackages(tmp_path / "site")
    site.dist("one", "1.0", files={"one/_k.so": SM86})
    path = str(site.path / "one" / "_k.so")
    cache_dir.mkdir()
    forged = {"format": scancache.FORMAT, "version": scancache.VERSION, "entries": {
        "fatbin-1\0" + path: {"key": scancache.file_key(path), "value": {"status": "ok", "sm_variants": "sm_90"}, "used": 1}}}
    (cache_dir / scancache.file_name()).write_text(json.dumps(forged))
    assert scan_site(site)["kernels.binaries"]["value"][0]["scan"]["sm_variants"] == ["sm_86"]


def _writer(directory, index, rounds):
    os.environ["GPUDOCTOR_CACHE_DIR"] = directory
    for n in range(rounds):
        cache = scancache.ScanCache(directory)
        path = os.path.join(os.path.dirname(directory), f"file-{index}-{n}")  # an entry of a file that exists
        open(path, "w").close()
        cache.put("test", path, [n, n, n, n], {"status": "ok"})
        cache.save()


def test_concurrent_runs_leave_a_whole_cache_file(tmp_path):
    directory = str(tmp_path / "cache")
    procs = [multiprocessing.get_context("fork").Process(target=_writer, args=(directory, i, 15)) for i in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert all(p.exitcode == 0 for p in procs)
    doc = json.loads((tmp_path / "cache" / scancache.file_name()).read_text())
    assert doc["format"] == scancache.FORMAT
    # Every run merges with what is on disk under the lock: at most the runs that found the lock
    # taken skipped saving, so most entries of all writers are there, and no temp file is left.
    assert len(doc["entries"]) >= 30
    assert not [p for p in (tmp_path / "cache").iterdir() if p.name.endswith(".tmp")]


def test_cache_dir_follows_xdg_and_can_be_turned_off(tmp_path):
    assert scancache.cache_dir({"HOME": "/home/u"}) == "/home/u/.cache/gpudoctor"
    assert scancache.cache_dir({"HOME": "/home/u", "XDG_CACHE_HOME": "/x"}) == "/x/gpudoctor"
    assert scancache.cache_dir({"HOME": "/home/u", "XDG_CACHE_HOME": "relative"}) == "/home/u/.cache/gpudoctor"
    assert scancache.cache_dir({"GPUDOCTOR_CACHE_DIR": "/c", "XDG_CACHE_HOME": "/x"}) == "/c"
    assert scancache.cache_dir({"GPUDOCTOR_CACHE": "0", "HOME": "/home/u"}) is None
    off = scancache.ScanCache(None)
    off.put("k", "/p", [1, 2, 3, 4], {"status": "ok"})
    assert off.get("k", "/p", [1, 2, 3, 4]) is None and off.save() == "unchanged"


def test_an_unwritable_cache_dir_costs_nothing_but_the_cache(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    monkeypatch.setenv("GPUDOCTOR_CACHE_DIR", str(blocker / "sub"))  # a file where a directory should be
    scancache.forget()
    site = SitePackages(tmp_path / "site")
    site.dist("one", "1.0", files={"one/_k.so": SM86})
    facts = scan_site(site)
    assert facts["kernels.binaries"]["value"][0]["scan"]["sm_variants"] == ["sm_86"]
    assert facts["kernels.scan"]["value"]["cache_save"].startswith("not saved")
    scancache.forget()


def test_unowned_directories_are_walked_and_the_stdlib_is_not(tmp_path, cache_dir):
    site = SitePackages(tmp_path / "site")
    loose = site.path / "copied_in" / "a" / "b"
    loose.mkdir(parents=True)
    (loose / "_x.so").write_bytes(SM86.read_bytes())
    (site.path / "toplevel_ext.so").write_bytes(SM86.read_bytes())
    [a, b] = sorted(scan_site(site)["kernels.binaries"]["value"], key=lambda x: x["path"])
    assert (a["package"], a["owner"], a["dist"]) == ("copied_in", "directory", None)
    assert (b["package"], b["owner"]) == ("toplevel_ext", "directory")
    stdlib = os.path.dirname(os.__file__)
    items, _ = kernel_scan.candidates([stdlib], {}, {}, scancache.ScanCache(None))
    assert all(os.path.dirname(i["path"]) == stdlib for i in items)  # top-level files only, no walk


def test_shared_object_names():
    assert kernel_scan.is_shared_object("libcublas.so.12")
    assert kernel_scan.is_shared_object("libnccl.so.2.21.5")
    assert kernel_scan.is_shared_object("_C.abi3.so")
    assert not kernel_scan.is_shared_object("libfoo.so.bak")
    assert not kernel_scan.is_shared_object("notes.sources")


def test_cuda_13_libraries_on_a_gpu_cuda_13_removed_are_one_error(unknown_venv):
    python, _ = unknown_venv
    _, _, gd201 = check(python, "V100")
    [finding] = [f for f in gd201["findings"] if f["message"].startswith("1 CUDA library wheel has")]
    assert "nvidia-fake-cu13 (libfake.so.13)" in finding["message"]
    assert finding["fix"]["commands"][0].endswith("-m pip install nvidia-fake-cu12  # with a CUDA 12 torch")


def test_explain_no_kernel_image_is_confirmed_naming_the_binary(unknown_venv):
    python, _ = unknown_venv
    proc = gd("explain", "CUDA error: no kernel image is available for execution on the device",
              "--python", str(python), "--gpu", "H100")
    assert "confirmed by GD201 kernel-image-missing: team-kernels 0.3.1 has no code for GPU 0" in proc.stdout
    assert f"{DEEP}/_sm86_only.cpython-311-x86_64-linux-gnu.so (sm_86)" in proc.stdout


def test_the_probe_code_cache_of_the_child_survives_garbage(unknown_venv, tmp_path):
    from gpudoctor.probes import python_stack

    python, _ = unknown_venv
    env = dict(os.environ, GPUDOCTOR_CACHE_DIR=str(tmp_path / "c"), PYTHONPATH="")
    first = python_stack.collect_other(str(python), env, timeout=60)
    code = sorted((tmp_path / "c" / "probe-code").iterdir())
    # Every module of the bootstrap: this venv is made from the test's own Python, so the parent
    # seeded the compiled code it has (python_stack.seed_code) instead of the child compiling six.
    assert [p.name.split("-")[0] for p in code] == sorted(name for name, _ in python_stack._BOOTSTRAPPED)
    for path in code:
        path.write_bytes(b"\x00garbage")  # corrupt: compiled again, never a crash
    again = python_stack.collect_other(str(python), env, timeout=60)
    assert again["kernels.binaries"].value == first["kernels.binaries"].value or all(
        a["path"] == b["path"] for a, b in zip(again["kernels.binaries"].value, first["kernels.binaries"].value))
    assert again["python.executable"].ok


def test_cuda_library_wheels_without_the_gpu_are_one_finding(tmp_path):
    python = make_venv(tmp_path / "venv")
    site = SitePackages(venv_site(tmp_path / "venv"))
    site.dist("nvidia-cublas", "13.1.0", files={"nvidia/cu13/lib/libcublas.so.13": SM80_SM90_PTX90})
    site.dist("nvidia-nccl-cu13", "2.28.0", files={"nvidia/nccl/lib/libnccl.so.2": COMPRESSED})
    _, _, gd201 = check(python, "V100")
    [finding] = gd201["findings"]
    assert finding["message"].startswith("2 CUDA library wheels have no code for GPU 0 (V100, cc 7.0): "
                                         "nvidia-cublas (libcublas.so.13), nvidia-nccl-cu13 (libnccl.so.2)")
    assert "CUDA 13 removed Maxwell, Pascal and Volta" in finding["fix"]["summary"]
    assert finding["fix"]["commands"][0].endswith("-m pip install nvidia-cublas-cu12 nvidia-nccl-cu12  # with a CUDA 12 torch")


def test_the_real_h200_stock_python_has_no_kernel_error():
    """Replayed from the H200 (the recorded snapshot of tests/test_cuda_libraries_on_h200.py): torch 2.11 cu130, cupy, JAX's CUDA 13
    plugins and 13 nvidia-* wheels; nvidia-cufft 12.0.0.61 has sm_75 cubins only and runs there."""
    fixture = Path(__file__).resolve().parent / "fixtures" / "snapshots" / "h200-every-cuda-binary.json"
    proc = gd("check", "--snapshot", str(fixture), "--select", "GD201,GD202,GD502", "--format", "json")
    doc = json.loads(proc.stdout)
    binaries = doc["snapshot"]["facts"]["kernels.binaries"]["value"]
    assert len(binaries) == 31 and {"cupy-cuda13x", "jax-cuda13-plugin", "nvidia-cufft"} <= {b["dist"] for b in binaries}
    outcomes = {o["id"]: o for o in doc["outcomes"]}
    assert [f["message"] for o in outcomes.values() for f in o["findings"] if f["severity"] == "error"] == []
    assert "libcufft.so.12 (nvidia-cufft): part of a CUDA release whose libraries have this GPU's code" in outcomes["GD201"]["reason"]
    proc = gd("check", "--snapshot", str(fixture), "--gpu", "V100", "--select", "GD201", "--format", "json")
    messages = [f["message"] for f in json.loads(proc.stdout)["findings"]]
    assert any(m.startswith("10 CUDA library wheels have no code for GPU 0 (V100, cc 7.0): nvidia-cublas") for m in messages), messages
    assert any(m.startswith("cupy-cuda13x 14.2.0 has no code for GPU 0 (V100") for m in messages)


def test_a_binary_in_a_record_directory_but_not_in_record_is_scanned_and_owned(tmp_path, cache_dir):
    """Built in place or copied in by a team's script after pip install: the directory is the
    distribution's (its RECORD lists files there), the file is not in RECORD."""
    python = make_venv(tmp_path / "venv")
    site = SitePackages(venv_site(tmp_path / "venv"))
    site.dist("team-kernels", "0.3.1", files={"teamkernels/__init__.py": "", "teamkernels/ops/__init__.py": "",
                                              "teamkernels/lib/_ok.so": SM80_SM90_PTX90})
    site.dist("nvidia-shared-a", "1.0", files={"nvidia/shared/lib/liba.so.1": SM80_SM90_PTX90})
    site.dist("pure-python", "1.0", files={"purepython/__init__.py": ""})
    (site.path / "purepython" / "_ignored.so").write_bytes(SM86.read_bytes())  # its directories are not checked
    (site.path / "teamkernels" / "include" / "x").mkdir(parents=True)  # a header tree is not walked
    (site.path / "teamkernels" / "include" / "x" / "_hdr.so").write_bytes(SM86.read_bytes())
    copied = site.path / "teamkernels" / "ops" / "_copied.so"
    copied.write_bytes(SM86.read_bytes())
    built = site.path / "teamkernels" / "ops" / "build" / "lib.linux" / "_built.so"  # a directory made after the install
    built.parent.mkdir(parents=True)
    built.write_bytes(SM86.read_bytes())
    code, doc, gd201 = check(python, "sm_90")
    binaries = {Path(b["path"]).name: b for b in doc["snapshot"]["facts"]["kernels.binaries"]["value"]}
    assert {n: (b["dist"], b["package"], b["owner"]) for n, b in binaries.items()} == {
        "_copied.so": ("team-kernels", "teamkernels", "not in RECORD"),
        "_built.so": ("team-kernels", "teamkernels", "not in RECORD"),
        "_ok.so": ("team-kernels", "teamkernels", "RECORD"),
        "liba.so.1": ("nvidia-shared-a", "nvidia", "RECORD")}
    assert code == 1
    [finding] = gd201["findings"]
    assert finding["message"].startswith("team-kernels 0.3.1 has no code for GPU 0")
    assert "teamkernels/ops/_copied.so (not in RECORD) (sm_86)" in finding["message"]
    assert "teamkernels/ops/build/lib.linux/_built.so (not in RECORD) (sm_86)" in finding["message"]
    assert "_copied.so, _built.so are not in team-kernels's RECORD" in finding["fix"]["summary"]
    proc = gd("explain", "CUDA error: no kernel image is available for execution on the device", "--python", str(python), "--gpu", "H100")
    assert "confirmed by GD201 kernel-image-missing: team-kernels 0.3.1 has no code for GPU 0" in proc.stdout, proc.stdout
    assert "teamkernels/ops/_copied.so (not in RECORD) (sm_86)" in proc.stdout


def test_record_directories_older_than_record_are_not_listed(tmp_path, cache_dir):
    """Cost: a directory untouched since its RECORD was written is one stat, not a listing."""
    site = SitePackages(tmp_path / "site")
    site.dist("team-kernels", "0.3.1", files={"teamkernels/__init__.py": "", "teamkernels/ops/_k.so": SM86})
    record = next(site.path.glob("team_kernels-*.dist-info")) / "RECORD"
    later = record.stat().st_mtime_ns
    for directory in (site.path / "teamkernels", site.path / "teamkernels" / "ops"):
        os.utime(directory, ns=(later - 10**9, later - 10**9))
    cache = scancache.ScanCache(str(cache_dir))
    first, _, _ = python_stack_read.scan_dists([str(site.path)], read_all=False)
    items, _ = kernel_scan.candidates([str(site.path)], first, {}, cache)
    assert [(Path(i["path"]).name, i["owner"]) for i in items] == [("_k.so", "RECORD")]
    assert not any(k.startswith(kernel_scan.DIR_KIND) for k in cache.changed)
    os.utime(site.path / "teamkernels" / "ops", ns=(later + 10**9, later + 10**9))  # touched after the install
    items, _ = kernel_scan.candidates([str(site.path)], first, {}, cache)
    assert [(Path(i["path"]).name, i["owner"]) for i in items] == [("_k.so", "RECORD")]
    assert [k for k in cache.changed if k.startswith(kernel_scan.DIR_KIND)] == [
        kernel_scan.DIR_KIND + "\0" + str(site.path / "teamkernels" / "ops")]


def _record_tree_by_the_definition(text):
    """Every row judged on its own (what _record_tree must equal; it judges each directory once)."""
    tops, dirs = set(), {}
    for line in text.splitlines():
        rel = line.split(",", 1)[0].strip('"')
        if rel and not rel.startswith(("../", "/")):
            tops.add(kernel_scan._top(rel))
            directory = kernel_scan._record_dir(rel)
            if directory:
                dirs[directory] = dirs.get(directory, 0) + 1
                while "/" in directory:
                    directory = directory.rsplit("/", 1)[0]
                    dirs.setdefault(directory, 0)
    return tops, dirs


_PARTS = ["torch", "lib", "nvidia", "cu13", "include", "__pycache__", "x.dist-info", "pkg.data", "..", "", "a b", "ops"]
_NAMES = ["__init__.py", "_C.so", "libcublas.so.13", "six.py", "RECORD", "x.pyc", "h.h", "q,uoted.so"]


@settings(max_examples=300, deadline=None, database=None)
@given(st.lists(st.tuples(st.lists(st.sampled_from(_PARTS), max_size=4), st.sampled_from(_NAMES), st.booleans()), max_size=40))
def test_record_tree_equals_judging_every_row(rows):
    lines = []
    for parts, name, quoted in rows:
        rel = "/".join(parts + [name])
        lines.append((f'"{rel}"' if quoted or "," in rel else rel) + ",sha256=abc,12")
    text = "\n".join(lines)
    assert kernel_scan._record_tree(text) == _record_tree_by_the_definition(text)


def test_record_tree_on_real_records():
    """The RECORDs of this interpreter's own distributions (pip wrote them)."""
    import glob
    import sysconfig

    records = glob.glob(os.path.join(sysconfig.get_paths()["purelib"], "*.dist-info", "RECORD"))
    assert len(records) >= 10
    for record in records:
        text = Path(record).read_text(encoding="utf-8", errors="replace")
        assert kernel_scan._record_tree(text) == _record_tree_by_the_definition(text), record


def test_each_environment_has_its_own_cache_file_and_old_ones_go(tmp_path, monkeypatch):
    directory = tmp_path / "cache"
    directory.mkdir()
    (directory / scancache.LEGACY_FILENAME).write_text("{}")  # the one file of every venv, before shards
    one, two = scancache.ScanCache(str(directory), "/venvs/one"), scancache.ScanCache(str(directory), "/venvs/two")
    assert one.filename != two.filename
    one.put("test", "/a.so", [1, 2, 3, 4], {"status": "ok"})
    two.put("test", "/b.so", [1, 2, 3, 4], {"status": "ok"})
    assert one.save().startswith("saved 1") and two.save().startswith("saved 1")
    assert not (directory / scancache.LEGACY_FILENAME).exists()
    again = scancache.ScanCache(str(directory), "/venvs/one")
    assert again.get("test", "/a.so", [1, 2, 3, 4]) == {"status": "ok"} and again.get("test", "/b.so", [1, 2, 3, 4]) is None
    # Past MAX_SHARDS environments, the least recently written files go, never the one just written.
    monkeypatch.setattr(scancache, "MAX_SHARDS", 3)
    for n in range(5):
        cache = scancache.ScanCache(str(directory), f"/venvs/more{n}")
        cache.put("test", "/c.so", [1, 2, 3, 4], {"status": "ok"})
        cache.save()
        os.utime(directory / cache.filename, ns=(n * 10**9 + 10**18, n * 10**9 + 10**18))
    shards = sorted(p.name for p in directory.glob("scan-v1-*.json"))
    assert len(shards) == 3 and scancache.file_name("/venvs/more4") in shards


def test_the_python_probe_and_the_doctor_share_the_file_of_the_inspected_environment(unknown_venv, tmp_path):
    from gpudoctor.probes import python_stack

    python, _ = unknown_venv
    env = dict(os.environ, GPUDOCTOR_CACHE_DIR=str(tmp_path / "c"), PYTHONPATH="")
    python_stack.collect_other(str(python), env, timeout=60)
    prefix = subprocess.run([str(python), "-I", "-c", "import sys; print(sys.prefix)"], capture_output=True, text=True).stdout.strip()
    assert (tmp_path / "c" / scancache.file_name(prefix)).is_file()
    assert not (tmp_path / "c" / scancache.file_name()).exists()  # not the test interpreter's


def test_two_threads_asking_for_the_shared_cache_get_the_same_one(tmp_path, monkeypatch):
    """The kernel scan's thread and the RECORD checks ask at the same moment (python_stack_collect.collect_plain);
    two objects would each keep half of what was found (test_vllm_kernels lost its entry so)."""
    import threading
    import time as _time

    monkeypatch.setenv("GPUDOCTOR_CACHE_DIR", str(tmp_path / "c"))
    scancache.forget()
    real = scancache.ScanCache._load

    def slow(self, path):
        _time.sleep(0.2)  # a big cache file being read
        return real(self, path)

    monkeypatch.setattr(scancache.ScanCache, "_load", slow)
    got = []
    threads = [threading.Thread(target=lambda: got.append(scancache.shared())) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 2 and got[0] is got[1] is scancache.shared()
    scancache.forget()


def test_entries_of_files_that_are_gone_are_dropped_when_the_cache_is_written(tmp_path):
    """An uninstalled package's files would otherwise stay in the environment's file until
    MAX_ENTRIES (~8 MB), loaded by every later check."""
    directory = str(tmp_path / "cache")
    kept, gone = tmp_path / "kept.so", tmp_path / "gone.so"
    kept.write_bytes(b"x")
    gone.write_bytes(b"x")
    first = scancache.ScanCache(directory)
    for path in (kept, gone):
        first.put("test", str(path), scancache.file_key(str(path)), {"status": "ok"})
    assert first.save() == "saved 2 entries"
    gone.unlink()
    second = scancache.ScanCache(directory)
    assert second.get("test", str(kept), scancache.file_key(str(kept))) == {"status": "ok"}
    assert scancache.ScanCache(directory).save() == "unchanged"  # nothing new: not written, nothing checked
    second.put("test", "/a/path/put/this/run", [1, 2, 3, 4], {"status": "ok"})  # put by this run: kept as it is
    assert second.save() == "saved 2 entries"
    entries = json.loads((tmp_path / "cache" / scancache.file_name()).read_text())["entries"]
    assert sorted(name.partition("\0")[2] for name in entries) == sorted([str(kept), "/a/path/put/this/run"])
