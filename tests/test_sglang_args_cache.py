"""sglang_args_cache: SGLang's flag definitions read once per set of installed files, then read back.

A small tree in SGLang 0.5.23's layout (srt/arg_groups/fields/*.py, srt/server_args.py), its lines
taken from that wheel. File times are set in the past: files written "just now" are never cached
(their mtime may not move on the next write).
"""

import os
import time

import pytest

from gpudoctor.probes.launch import sglang_args, sglang_args_cache

SERVING = '''from sglang.srt.arg_groups.arg_utils import A, Arg


class Serving(msgspec.Struct):
    _NS_PATH = "serving"
    host: A[str, "The host of the HTTP server."] = "127.0.0.1"
    port: A[int, "The port of the HTTP server."] = 30000
'''
PARALLEL = '''class Parallel(msgspec.Struct):
    _NS_PATH = "parallel"
    tp_size: A[int, Arg(help="The tensor parallelism size.", aliases=["--tensor-parallel-size"])] = 1
'''
SERVER_ARGS = '''class ServerArgs:
    @staticmethod
    def add_cli_args(parser):
        parser.add_argument("--config", type=str, help="Read CLI options from a config file.")
'''
PAST = time.time() - 3600


def write(path, text, when=PAST):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    os.utime(path, (when, when))


@pytest.fixture
def tree(tmp_path, monkeypatch):
    pkg = tmp_path / "site-packages" / "sglang"
    for rel, text in {"__init__.py": "", "srt/arg_groups/fields/__init__.py": "", "srt/arg_groups/fields/serving.py": SERVING,
                      "srt/arg_groups/fields/parallel.py": PARALLEL, "srt/server_args.py": SERVER_ARGS}.items():
        write(pkg / rel, text)
    monkeypatch.setenv("GPUDOCTOR_CACHE_DIR", str(tmp_path / "cache"))
    parses = []
    real = sglang_args.read_flags
    monkeypatch.setattr(sglang_args, "read_flags", lambda *a: parses.append(a) or real(*a))
    return pkg, parses, tmp_path / "cache"


def read(pkg):
    return sglang_args_cache.read_flags(str(pkg))


def test_second_read_comes_from_the_cache_and_equals_a_fresh_parse(tree):
    pkg, parses, cache = tree
    first = read(pkg)
    second = read(pkg)
    assert len(parses) == 1 and len(os.listdir(cache)) == 1
    assert second == first == sglang_args.read_flags(str(pkg))
    assert "--tensor-parallel-size" in second["flags"] and second["defaults"]["--port"] == 30000


def test_an_edited_field_module_is_parsed_again(tree):
    pkg, parses, _ = tree
    read(pkg)
    write(pkg / "srt/arg_groups/fields/serving.py", SERVING.replace("30000", "30001"), PAST + 60)
    assert read(pkg)["defaults"]["--port"] == 30001 and len(parses) == 2


def test_a_new_field_module_is_parsed_again(tree):
    pkg, parses, _ = tree
    read(pkg)
    write(pkg / "srt/arg_groups/fields/lora.py", 'class Lora:\n    lora_paths: A[str, "LoRA adapters."] = ""\n')
    assert "--lora-paths" in read(pkg)["flags"] and len(parses) == 2


def test_an_edited_server_args_is_parsed_again(tree):
    pkg, parses, _ = tree
    read(pkg)
    write(pkg / "srt/server_args.py", SERVER_ARGS.replace('"--config"', '"--config", "--cfg"'), PAST + 60)
    assert "--cfg" in read(pkg)["flags"] and len(parses) == 2


def test_files_written_just_now_are_not_cached(tree):
    pkg, parses, cache = tree
    write(pkg / "srt/server_args.py", SERVER_ARGS, time.time())
    read(pkg)
    read(pkg)
    assert len(parses) == 2 and not cache.exists()


def test_a_tree_read_in_part_is_not_cached(tree):
    pkg, parses, cache = tree
    write(pkg / "srt/arg_groups/fields/broken.py", "class Broken(:\n")
    assert read(pkg)["problems"] == ["broken.py: SyntaxError"]
    read(pkg)
    assert len(parses) == 2 and not cache.exists()


def test_a_damaged_or_foreign_cache_file_is_ignored_and_rewritten(tree):
    pkg, parses, cache = tree
    fresh = read(pkg)
    (entry,) = cache.iterdir()
    for junk in ("{", "[]", '{"format": "gpudoctor-sglang-args", "version": 1, "identity": 3}', "\0" * 10):
        entry.write_text(junk)
        assert read(pkg) == fresh
    good = entry.read_text()
    entry.write_text(good.replace('"flags":[', '"flags":{"x":[').replace('],"defaults"', ']},"defaults"', 1))
    assert read(pkg) == fresh  # the identity matches but the answer is not of the right shape
    assert read(pkg) == fresh and len(parses) == 6  # the last junk was replaced by a good entry


def test_gpudoctor_cache_0_turns_it_off(tree, monkeypatch):
    pkg, parses, cache = tree
    monkeypatch.setenv("GPUDOCTOR_CACHE", "0")
    read(pkg)
    read(pkg)
    assert len(parses) == 2 and not cache.exists()
