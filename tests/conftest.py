"""Fixtures every test module can use. Plain helper functions are in helpers.py.

The suite is hermetic: it must pass on a CI box without a GPU and on a GPU host that
has its own toolkits, compilers and servers. Tests build the machine they describe
(tmp_path trees, snapshots, the recorded NVML below) instead of reading this one.
"""

from __future__ import annotations

import os
import sys
import threading
import time

import pytest

import fake_nvml


@pytest.fixture
def fake_nvml_module(monkeypatch):
    """Install a recorded NVML as ``pynvml``: ``nv = fake_nvml_module(fake_nvml.h200())``.

    The adapter (gpudoctor/probes/nvml.py) imports ``pynvml`` at call time, so it finds the
    replacement; nothing of gpudoctor is patched. Returns the module (``nv.calls`` records
    init/shutdown)."""

    def install(tape, **options):
        module = fake_nvml.module(tape, **options)
        monkeypatch.setitem(sys.modules, "pynvml", module)
        return module

    return install


@pytest.fixture(autouse=True, scope="session")
def _private_scan_cache(tmp_path_factory):
    """The persistent scan cache (gpudoctor/probes/scancache.py) goes to a session directory,
    not the user's ~/.cache: child processes (--python, CLI runs) inherit the variable."""
    os.environ["GPUDOCTOR_CACHE_DIR"] = str(tmp_path_factory.mktemp("gpudoctor-scan-cache"))
    return os.environ["GPUDOCTOR_CACHE_DIR"]


@pytest.fixture(autouse=True)
def _scan_cache_kept(_private_scan_cache):
    """A test that removes or replaces the session's cache variable (instead of monkeypatch.setenv,
    which puts it back) fails here: every later test of its worker would write to ~/.cache."""
    yield
    assert os.environ.get("GPUDOCTOR_CACHE_DIR") == _private_scan_cache, "GPUDOCTOR_CACHE_DIR was not restored"


# --- the real tier in one worker; what it cost, printed at the end of a run that ran any of it --------
# pytest-xdist spreads the suite over the machine's cores (pyproject: -n auto --dist loadgroup). The real
# tier's tests share a cache they fill as they go (downloads, sparse forms, venvs, oracle verdicts), so
# they run in one worker, in their order, while the others take the rest. Each worker sends what it
# counted to the controller (workeroutput), which prints the sum: CI's cold-cache cost.
_TIERS = {"real": [0, 0.0], "other": [0, 0.0]}  # tests, seconds
_DISK = {"path": "", "start": 0, "peak": 0}
_RUN = {"started": time.monotonic(), "workers": 0, "stats": {}}


# The parser oracles first: each builds a venv it discards (CPU torch beside the engine, ~1.7 GB of whole
# libraries restored) — built while the cache holds little more than what it needs, the cold cache's peak is
# lower (a cold run with them last peaked at 8.2 GB, 6.4 GB kept and one oracle's venv).
_FIRST = ("tests/real/test_vllm_releases.py", "tests/real/test_sglang_flags_oracle.py")


def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda item: 0 if item.nodeid.split("::", 1)[0] in _FIRST else 1)


def pytest_itemcollected(item):
    # As each test is collected: xdist reads the group in its own pytest_collection_modifyitems, which
    # some pytest releases call before a conftest's (9.2), tryfirst or not.
    if item.get_closest_marker("real") is not None:
        item.add_marker(pytest.mark.xdist_group("real"))


def _fs_used(path: str) -> int:
    info = os.statvfs(path)
    return (info.f_blocks - info.f_bfree) * info.f_frsize


def _sample_disk() -> None:
    """The file system's used bytes each second while the tier runs: the peak a cold cache reaches."""
    while True:
        try:
            _DISK["peak"] = max(_DISK["peak"], _fs_used(_DISK["path"]) - _DISK["start"])
        except OSError:
            return
        time.sleep(1.0)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    real = item.get_closest_marker("real") is not None
    if real and not _DISK["path"]:
        import realenv

        path = realenv.CACHE
        while not path.exists():
            path = path.parent
        _DISK.update(path=str(path), start=_fs_used(str(path)))
        threading.Thread(target=_sample_disk, name="real-tier-disk", daemon=True).start()
    started = time.monotonic()
    yield
    tier = _TIERS["real" if real else "other"]
    tier[0] += 1
    tier[1] += time.monotonic() - started


def _counted() -> dict:
    """What this process counted: tests and seconds per tier, the disk peak, realenv.STATS."""
    realenv = sys.modules.get("realenv")
    return {"tiers": _TIERS, "peak": _DISK["peak"], "stats": dict(realenv.STATS) if realenv else {}}


def _add(counted: dict) -> None:
    for tier, (count, seconds) in counted["tiers"].items():
        _TIERS[tier][0] += count
        _TIERS[tier][1] += seconds
    _DISK["peak"] = max(_DISK["peak"], counted["peak"])
    for key, value in counted["stats"].items():
        _RUN["stats"][key] = _RUN["stats"].get(key, 0) + value
    _RUN["workers"] += 1


def pytest_sessionfinish(session):
    if hasattr(session.config, "workeroutput"):  # an xdist worker: the controller prints
        session.config.workeroutput["gpudoctor_counted"] = _counted()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    counted = getattr(node, "workeroutput", {}).get("gpudoctor_counted")
    if counted:
        _add(counted)


def pytest_terminal_summary(terminalreporter):
    if not _TIERS["real"][0]:
        return
    import realenv

    stats = _RUN["stats"] if _RUN["workers"] else realenv.STATS
    parts = {"sparse forms and their trees": [realenv.SPARSE, realenv.OBJECTS], "whole wheels": [realenv.WHEELS],
             "venvs (beyond their links)": [realenv.VENVS]}
    linked: set = set()  # a venv's files are mostly links to the trees: counted once, where they are first seen
    sizes = {name: sum(realenv.disk_bytes(path, linked) for path in paths) / 1e9 for name, paths in parts.items()}
    write = terminalreporter.write_line
    spread = f" (summed over {_RUN['workers']} workers)" if _RUN["workers"] > 1 else ""
    write(f"real tier: {_TIERS['real'][0]} tests in {_TIERS['real'][1]:.0f} s, the other {_TIERS['other'][0]} in "
          f"{_TIERS['other'][1]:.0f} s{spread}; {time.monotonic() - _RUN['started']:.0f} s wall; cache {realenv.CACHE}")
    if stats.get("wheels_downloaded"):
        write(f"  downloaded {stats['downloaded_bytes'] / 1e9:.2f} GB ({stats['wheels_downloaded']:.0f} wheels, "
              f"{stats['download_s']:.0f} s summed over {realenv.DOWNLOADS_AT_ONCE} at once), cut {stats.get('cut_files', 0):.0f} "
              f"libraries ({stats.get('cut_s', 0):.0f} s summed)")
    else:
        write("  downloaded nothing: every wheel was in the cache")
    write(f"  built {stats.get('venvs_built', 0):.0f} venvs in {stats.get('build_s', 0):.0f} s; cache now {sum(sizes.values()):.2f} GB on disk ("
          + ", ".join(f"{name} {size:.2f} GB" for name, size in sizes.items())
          + f"), file system peak +{_DISK['peak'] / 1e9:.2f} GB during the run")
