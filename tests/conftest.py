"""Fixtures every test module can use. Plain helper functions are in helpers.py.

The suite is hermetic: it must pass on a CI box without a GPU and on a GPU host that
has its own toolkits, compilers and servers. Tests build the machine they describe
(tmp_path trees, snapshots, the recorded NVML below) instead of reading this one.
"""

from __future__ import annotations

import os
import sys

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
