"""probes/codecache.py: a one-file module Python cannot keep a .pyc for is compiled once, then read back."""

from __future__ import annotations

import os
import sys

import pytest

from gpudoctor.probes import codecache


@pytest.fixture
def module_dir(tmp_path, monkeypatch):
    where = tmp_path / "site"
    where.mkdir()
    (where / "gd_cc_probe.py").write_text("import ctypes\nVALUE = 41 + 1\n")
    monkeypatch.syspath_prepend(str(where))
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    monkeypatch.delitem(sys.modules, "gd_cc_probe", raising=False)
    yield where
    sys.modules.pop("gd_cc_probe", None)


def cached_files(cache):
    directory = cache / "probe-code"
    return sorted(p.name for p in directory.iterdir()) if directory.is_dir() else []


def test_compiled_once_then_read_back(module_dir, tmp_path):
    env = {"GPUDOCTOR_CACHE_DIR": str(tmp_path / "cache")}
    module = codecache.import_module("gd_cc_probe", env)
    assert module.VALUE == 42 and module.__file__ == str(module_dir / "gd_cc_probe.py")
    assert sys.modules["gd_cc_probe"] is module
    [name] = cached_files(tmp_path / "cache")
    assert name.startswith("gd_cc_probe-") and name.endswith(f"-{sys.implementation.cache_tag}.bin")
    assert not (module_dir / "__pycache__").exists()  # PYTHONDONTWRITEBYTECODE is respected
    del sys.modules["gd_cc_probe"]
    compiled = []
    real_compile = compile
    codecache.compile = lambda *a, **k: compiled.append(a) or real_compile(*a, **k)  # type: ignore[attr-defined]
    try:
        assert codecache.import_module("gd_cc_probe", env).VALUE == 42
    finally:
        del codecache.compile  # type: ignore[attr-defined]
    assert compiled == []  # read back, not compiled


def test_an_edited_module_or_a_corrupt_cache_is_compiled_again(module_dir, tmp_path):
    env = {"GPUDOCTOR_CACHE_DIR": str(tmp_path / "cache")}
    codecache.import_module("gd_cc_probe", env)
    [name] = cached_files(tmp_path / "cache")
    (tmp_path / "cache" / "probe-code" / name).write_bytes(b"not marshal")
    del sys.modules["gd_cc_probe"]
    assert codecache.import_module("gd_cc_probe", env).VALUE == 42
    (module_dir / "gd_cc_probe.py").write_text("VALUE = 7\n")
    del sys.modules["gd_cc_probe"]
    assert codecache.import_module("gd_cc_probe", env).VALUE == 7
    assert len(cached_files(tmp_path / "cache")) == 2


def test_a_cache_file_others_may_write_is_not_trusted(module_dir, tmp_path):
    env = {"GPUDOCTOR_CACHE_DIR": str(tmp_path / "cache")}
    codecache.import_module("gd_cc_probe", env)
    [name] = cached_files(tmp_path / "cache")
    path = tmp_path / "cache" / "probe-code" / name
    assert codecache._read(str(path)) is not None
    os.chmod(path, 0o666)
    assert codecache._read(str(path)) is None


def test_plain_import_where_python_keeps_bytecode_or_the_cache_is_off(module_dir, tmp_path, monkeypatch):
    codecache.import_module("gd_cc_probe", {"GPUDOCTOR_CACHE": "0"})
    assert cached_files(tmp_path / "cache") == []
    del sys.modules["gd_cc_probe"]
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    assert codecache.import_module("gd_cc_probe", {"GPUDOCTOR_CACHE_DIR": str(tmp_path / "cache")}).VALUE == 42
    assert cached_files(tmp_path / "cache") == []


def test_import_semantics_kept(module_dir, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "gd_cc_probe", None)
    with pytest.raises(ImportError):
        codecache.import_module("gd_cc_probe", {"GPUDOCTOR_CACHE_DIR": str(tmp_path / "cache")})
    monkeypatch.delitem(sys.modules, "gd_cc_probe")
    (module_dir / "gd_cc_probe.py").write_text("raise ImportError('no NVML here')\n")
    with pytest.raises(ImportError, match="no NVML here"):
        codecache.import_module("gd_cc_probe", {"GPUDOCTOR_CACHE_DIR": str(tmp_path / "cache")})
    assert "gd_cc_probe" not in sys.modules
    with pytest.raises(ModuleNotFoundError):
        codecache.import_module("gd_cc_no_such_module_anywhere", {"GPUDOCTOR_CACHE_DIR": str(tmp_path / "cache")})
