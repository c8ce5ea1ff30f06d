"""vllm_args_cache: vLLM's flag definitions parsed once per set of installed files, then read back.

A small tree in vLLM's layout (a config class, a flag file, a Literal type defined in a module the
parse follows through a star import). File times are set in the past: files written "just now" are
never cached (their mtime may not move on the next write).
"""

import os
import textwrap
import time

import pytest

from gpudoctor.probes.launch import vllm_args, vllm_args_cache, vllm_source

CONFIG = '''
from typing import Literal
from pydantic import Field
from vllm.config.utils import config
from vllm.renderers.chat import ContentFormat

CacheDType = Literal["auto", "fp8"]

@config
class CacheConfig:
    gpu_memory_utilization: float = Field(default=0.9, gt=0, le=1)
    cache_dtype: CacheDType = "auto"
    content_format: ContentFormat = "auto"
'''

ARG_UTILS = '''
from vllm.config import CacheConfig

class EngineArgs:
    @staticmethod
    def add_cli_args(parser):
        cache_kwargs = get_kwargs(CacheConfig)
        group = parser.add_argument_group("CacheConfig")
        group.add_argument("--gpu-memory-utilization", **cache_kwargs["gpu_memory_utilization"])
        group.add_argument("--kv-cache-dtype", "-kvd", **cache_kwargs["cache_dtype"])
        group.add_argument("--content-format", **cache_kwargs["content_format"])
        return parser
'''

TYPES = "from typing import Literal\nContentFormat = Literal['auto', 'string']\n"
PAST = time.time() - 3600


def write(path, text, when=PAST):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    os.utime(path, (when, when))


@pytest.fixture
def tree(tmp_path, monkeypatch):
    pkg = tmp_path / "site-packages" / "vllm"
    for rel, text in {"__init__.py": "", "config/__init__.py": CONFIG, "engine/arg_utils.py": ARG_UTILS,
                      "renderers/chat/__init__.py": "from .types import *\n", "renderers/chat/types.py": TYPES}.items():
        write(pkg / rel, text)
    monkeypatch.setenv("GPUDOCTOR_CACHE_DIR", str(tmp_path / "cache"))
    parses = []
    real = vllm_args.read_args
    monkeypatch.setattr(vllm_args, "read_args", lambda *a: parses.append(a) or real(*a))
    return pkg, parses, tmp_path / "cache"


def read(pkg):
    return vllm_args_cache.read_args(str(pkg), vllm_source.flag_files(str(pkg)))


def test_second_read_comes_from_the_cache_and_equals_a_fresh_parse(tree):
    pkg, parses, cache = tree
    first = read(pkg)
    second = read(pkg)
    assert len(parses) == 1 and len(os.listdir(cache)) == 1
    assert second == first == vllm_args.read_args(str(pkg), vllm_source.flag_files(str(pkg)))
    assert second.args["--kv-cache-dtype"] is second.args["-kvd"]  # one action, two option strings
    assert second.args["--content-format"].choices == ["auto", "string"]


def test_an_edited_flag_file_is_parsed_again(tree):
    pkg, parses, _ = tree
    read(pkg)
    write(pkg / "config" / "__init__.py", CONFIG.replace('["auto", "fp8"]', '["auto", "fp8", "fp8_e5m2"]'), PAST + 60)
    table = read(pkg)
    assert len(parses) == 2 and table.args["--kv-cache-dtype"].choices == ["auto", "fp8", "fp8_e5m2"]


def test_an_edited_module_the_parse_followed_is_parsed_again(tree):
    pkg, parses, _ = tree
    read(pkg)
    write(pkg / "renderers" / "chat" / "types.py", TYPES.replace("'string'", "'string', 'openai'"), PAST + 60)
    table = read(pkg)
    assert len(parses) == 2 and sorted(table.args["--content-format"].choices) == ["auto", "openai", "string"]


def test_a_new_config_module_is_parsed_again(tree):
    pkg, parses, _ = tree
    read(pkg)
    write(pkg / "config" / "extra.py", "X = 1\n")
    read(pkg)
    assert len(parses) == 2


def test_files_written_just_now_are_not_cached(tree):
    pkg, parses, cache = tree
    write(pkg / "engine" / "arg_utils.py", ARG_UTILS, time.time())
    read(pkg)
    read(pkg)
    assert len(parses) == 2 and not cache.exists()


def test_a_damaged_or_foreign_cache_file_is_ignored_and_rewritten(tree):
    pkg, parses, cache = tree
    fresh = read(pkg)
    (entry,) = cache.iterdir()
    for junk in ("{", "[]", '{"format": "gpudoctor-vllm-args", "version": 1, "identity": 3}', "\0" * 10):
        entry.write_text(junk)
        assert read(pkg) == fresh
    assert read(pkg) == fresh and len(parses) == 5  # the last junk was replaced by a good entry


def test_gpudoctor_cache_0_turns_it_off(tree, monkeypatch):
    pkg, parses, cache = tree
    monkeypatch.setenv("GPUDOCTOR_CACHE", "0")
    read(pkg)
    read(pkg)
    assert len(parses) == 2 and not cache.exists()
