"""vllm_args: vLLM's argument definitions read from its syntax tree, on a small tree written in
vLLM's own layout (the real releases are in tests/real/test_vllm_releases.py)."""

import textwrap
from pathlib import Path

import pytest

from gpudoctor.probes.launch import parser, probe, vllm_args, vllm_source

CONFIG = '''
import enum
from enum import IntEnum
from typing import Literal, Optional
from pydantic import Field, ConfigDict
from vllm.config.utils import config
from vllm.renderers.chat import ContentFormat

CacheDType = Literal["auto", "fp8", "fp8_e5m2"]
ModelDType = Literal["auto", "half", "bfloat16"]

@config
class CacheConfig:
    gpu_memory_utilization: float = Field(default=0.9, gt=0, le=1)
    cache_dtype: CacheDType = "auto"
    enable_prefix_caching: bool = True

@config
class ParallelConfig:
    tensor_parallel_size: int = Field(default=1, ge=1)
    data_parallel_rpc_port: int = Field(default=29550, ge=1, le=65535)

class LoadFormat(str, enum.Enum):
    AUTO = "auto"
    PT = "pt"

class OptimizationLevel(IntEnum):
    O0 = 0
    O1 = 1
    O2 = 2

@config
class SpeculativeConfig:
    method: Optional[str] = None
    model: Optional[str] = None
    num_speculative_tokens: int = 1

QuantizationMethods = Literal["awq", "fp8", "awq_marlin"]
QUANTIZATION_METHODS: list[str] = list(get_args(QuantizationMethods))

@config
class ModelConfig:
    dtype: ModelDType | torch.dtype = "auto"
    quantization: QuantizationMethods | str | None = None
    served_model_name: list[str] | None = None
    max_model_len: int = Field(default=-1, ge=-1)
    content_format: ContentFormat = "auto"

@config
class VllmConfig:
    speculative_config: SpeculativeConfig | None = None
    optimization_level: OptimizationLevel = OptimizationLevel.O2
'''

ARG_UTILS = '''
import argparse
from vllm.config import CacheConfig, ParallelConfig, ModelConfig, VllmConfig

def optional_type(t):
    return t

class EngineArgs:
    @staticmethod
    def add_cli_args(parser):
        cache_kwargs = get_kwargs(CacheConfig)
        group = parser.add_argument_group("CacheConfig")
        group.add_argument("--gpu-memory-utilization", **cache_kwargs["gpu_memory_utilization"])
        group.add_argument("--kv-cache-dtype", **cache_kwargs["cache_dtype"])
        group.add_argument("--enable-prefix-caching", **{**cache_kwargs["enable_prefix_caching"], "default": None})
        parallel_kwargs = get_kwargs(ParallelConfig)
        group.add_argument("--tensor-parallel-size", "-tp", **parallel_kwargs["tensor_parallel_size"])
        model_kwargs = get_kwargs(ModelConfig)
        group.add_argument("--dtype", **model_kwargs["dtype"])
        group.add_argument("--quantization", "-q", **model_kwargs["quantization"])
        group.add_argument("--served-model-name", **model_kwargs["served_model_name"])
        group.add_argument("--max-model-len", **model_kwargs["max_model_len"])
        group.add_argument("--content-format", **model_kwargs["content_format"])
        group.add_argument("--data-parallel-rpc-port", "-dpp", type=int)
        group.add_argument("--sse-keep-alive-interval", type=int, default=0)
        group.add_argument("--load-format", type=str, choices=[f.value for f in LoadFormat])  # 0.8.5
        group.add_argument("--quantization-085", type=optional_type(str), choices=[*QUANTIZATION_METHODS, None])
        vllm_kwargs = get_kwargs(VllmConfig)
        vllm_kwargs["speculative_config"]["type"] = optional_type(json.loads)
        group.add_argument("--optimization-level", **vllm_kwargs["optimization_level"])
        group.add_argument("--speculative-config", "-sc", **vllm_kwargs["speculative_config"])
        group.add_argument("--enable-log-requests", action=argparse.BooleanOptionalAction, default=False)
        group.add_argument("--mystery", **unknown_thing["x"])
        return parser
'''

# A type defined outside the files read, re-exported through a star import; a check of serve's own.
CHAT = {"renderers/chat/__init__.py": "from .types import *\n",
        "renderers/chat/types.py": "from typing import Literal\nContentFormat = Literal['auto', 'string', 'openai']\n",
        "entrypoints/openai/cli_args.py": "def validate_parsed_serve_args(args):\n"
                                         "    if getattr(args, 'sse_keep_alive_interval', 0) < 0:\n"
                                         "        raise ValueError('--sse-keep-alive-interval must be a non-negative integer')\n"}

ARGPARSE_UTILS = '''
from argparse import ArgumentParser, BooleanOptionalAction

class EnableDisableAction(BooleanOptionalAction):
    pass

class FlexibleArgumentParser(ArgumentParser):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.register("action", BooleanOptionalAction, EnableDisableAction)
'''


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("vllm-args")
    site = root / "venv" / "lib" / "python3.11" / "site-packages"
    pkg = site / "vllm"
    for rel, text in {"__init__.py": "", "config/__init__.py": CONFIG, "engine/arg_utils.py": ARG_UTILS,
                      "utils/argparse_utils.py": ARGPARSE_UTILS, **CHAT}.items():
        path = pkg / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    (site / "vllm-0.33.0.dist-info").mkdir()
    (site / "vllm-0.33.0.dist-info" / "METADATA").write_text("Name: vllm\nVersion: 0.33.0\n")
    (root / "venv" / "bin").mkdir(parents=True)
    script = root / "venv" / "bin" / "vllm"
    script.write_text("#!/nonexistent/python\n")
    script.chmod(0o755)
    return {"pkg": str(pkg), "vllm": str(script)}


def test_table_has_types_choices_ranges_keys_and_negatives(tree):
    table = vllm_args.read_args(tree["pkg"], vllm_source.flag_files(tree["pkg"]))
    args = table.args
    assert args["--gpu-memory-utilization"].bounds == {"gt": 0, "le": 1}
    assert args["-tp"].bounds == {"ge": 1} and args["-tp"].type == "int"
    assert args["--kv-cache-dtype"].choices == ["auto", "fp8", "fp8_e5m2"]
    assert args["--dtype"].choices == ["auto", "bfloat16", "half"]
    assert args["-q"].choices is None and args["-q"].known_values == ["awq", "awq_marlin", "fp8"]
    assert args["--served-model-name"].nargs == "+"
    assert args["--speculative-config"].keys == ["method", "model", "num_speculative_tokens"]
    # BooleanOptionalAction with 0.33's EnableDisableAction: --disable-x and --no-enable-x exist.
    for name in ("--enable-prefix-caching", "--disable-prefix-caching", "--no-enable-prefix-caching",
                 "--enable-log-requests", "--disable-log-requests"):
        assert name in args, name
    assert "--mystery" in table.names_only and table.complete


def launch_of(tree, *flags):
    found = vllm_source.everything(tree["pkg"])
    table = probe.flag_table(found)
    launch = parser.parse([tree["vllm"], "serve", "m", *flags], table)
    typed = parser.typed_options(launch, table)
    return launch, typed, table


def test_negative_forms_are_not_unknown_and_set_the_flag_false(tree):
    launch, typed, table = launch_of(tree, "--disable-prefix-caching", "--disable-log-requests", "--mystery", "x")
    assert probe.unknown_flags(launch, table) == []
    assert typed["--enable-prefix-caching"] is False and typed["--enable-log-requests"] is False
    assert launch.errors == [] and launch.model == "m"


@pytest.mark.parametrize("flags, problem", [
    (("--gpu-memory-utilization", "1.5"), "out of range"),
    (("-tp", "0"), "out of range"),
    (("-tp", "two"), "not a valid integer"),
    (("--kv-cache-dtype", "fp8_e5m2x"), "invalid choice"),
    (("--dtype", "bfloat17"), "invalid choice"),
    (("--quantization", "awq_marlinn"), "not one of"),
    (("--speculative-config", '{"method": "ngram", "num_spec_tokens": 3}'), "unknown key 'num_spec_tokens'"),
    (("--speculative-config", "{bad"), "not valid JSON"),
    (("--enable-prefix-caching=yes",), "takes no value"),
    (("--served-model-name",), "at least one value"),
    (("--content-format", "autox"), "invalid choice"),  # Literal of vllm/renderers/chat/types.py
    (("--optimization-level", "3"), "invalid choice"),  # IntEnum values: 0, 1, 2
    (("--optimization-level", "1.5"), "not a valid integer"),
    (("--data-parallel-rpc-port", "0"), "out of range"),  # explicit add_argument: ParallelConfig's Field range
    (("-dpp", "100000"), "out of range"),
    (("--sse-keep-alive-interval", "-1"), "out of range"),  # validate_parsed_serve_args
    (("--load-format", "autox"), "invalid choice"),  # [f.value for f in LoadFormat]
    (("--quantization-085", "awq_marlinn"), "invalid choice"),  # [*QUANTIZATION_METHODS, None]
])
def test_invalid_values_are_errors(tree, flags, problem):
    launch, _, _ = launch_of(tree, *flags)
    assert any(problem in e["problem"] for e in launch.errors), launch.errors


def test_valid_values_pass(tree):
    launch, typed, _ = launch_of(tree, "--gpu-memory-utilization", "1", "-tp", "2", "--kv-cache-dtype", "fp8",
                                 "--dtype", "half", "-q", "awq_marlin", "--served-model-name", "a", "b", "--max-model-len", "32k",
                                 "--speculative-config", '{"method": "ngram", "num_speculative_tokens": 3}',
                                 "--content-format", "openai", "--optimization-level", "0", "-dpp", "65535",
                                 "--sse-keep-alive-interval", "0", "--load-format", "pt", "--quantization-085", "fp8")
    assert launch.errors == []
    assert typed["--served-model-name"] == ["a", "b"] and typed["--max-model-len"] == 32000
    assert typed["--tensor-parallel-size"] == 2


def test_unreadable_names_make_the_table_incomplete(tree, tmp_path):
    pkg = Path(tmp_path) / "vllm"
    (pkg / "engine").mkdir(parents=True)
    (pkg / "engine" / "arg_utils.py").write_text("def f(p, names):\n    p.add_argument(*names, type=int)\n    p.add_argument('--x', type=int)\n")
    table = vllm_args.read_args(str(pkg), vllm_source.flag_files(str(pkg)))
    assert not table.complete and "computed names" in table.problems[0]
