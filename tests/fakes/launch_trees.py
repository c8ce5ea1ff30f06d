"""Real files for the launch tests: model directories with real safetensors files, and small
vLLM trees (dist-info + source files in the layouts of real releases) in a venv layout.

Safetensors files follow the format spec (huggingface/safetensors): an 8-byte little-endian
header length, the JSON header with each tensor's dtype, shape and data_offsets, then the
data. Big models are written as sparse files (the data area is a hole), so a 27B-parameter
model costs a few kilobytes of disk and its headers still describe every byte.

The vLLM source files are written in the shapes read from real releases (0.8.5, 0.11, 0.19,
0.33 wheels): ``group.add_argument("--flag", **kwargs["field"])`` with config dataclasses
whose bool fields become switches, the ``FrontendArgs`` loop over ``get_kwargs(cls)``,
``SpeculativeMethod = Literal[…]`` with aliases, parser registries as a dict or as
``register_module`` decorators, the model registry dicts, quantization configs'
``get_name`` / ``get_min_capability``, and ``AttentionBackendEnum``.
"""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from fakes.launch_memory import CACHE_CONFIG_034, MEMORY_CHECK_033, MEMORY_CHECK_034, RESOLVE_EXTENSIBLE_034

DTYPE_SIZE = {"BF16": 2, "F16": 2, "F32": 4, "F8_E4M3": 1, "I8": 1, "U8": 1, "I32": 4}
GIB = 1 << 30


# --- models ---------------------------------------------------------------------------------------
def write_safetensors(path: Path, tensors: Dict[str, Tuple[str, Sequence[int]]], sparse: bool = True) -> int:
    """Write a real safetensors file; returns the data bytes."""
    header: Dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, (dtype, shape) in tensors.items():
        size = math.prod(shape) * DTYPE_SIZE[dtype]
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as handle:
        handle.write(struct.pack("<Q", len(raw)))
        handle.write(raw)
        if sparse:
            handle.truncate(8 + len(raw) + offset)
        else:
            handle.write(b"\0" * offset)
    return offset


def write_model(folder: Path, config: Optional[dict], tensors: Dict[str, Tuple[str, Sequence[int]]], shards: int = 1,
                sparse: bool = True) -> Path:
    """config.json + model-0000N-of-0000M.safetensors (+ the index when sharded)."""
    folder.mkdir(parents=True, exist_ok=True)
    if config is not None:
        (folder / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    names = list(tensors)
    per = max(1, math.ceil(len(names) / shards))
    weight_map, total = {}, 0
    for k in range(shards):
        part = names[k * per:(k + 1) * per]
        if not part:
            continue
        file = f"model-{k + 1:05d}-of-{shards:05d}.safetensors" if shards > 1 else "model.safetensors"
        total += write_safetensors(folder / file, {n: tensors[n] for n in part}, sparse)
        weight_map.update({n: file for n in part})
    if shards > 1:
        (folder / "model.safetensors.index.json").write_text(
            json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=1), encoding="utf-8")
    return folder


def dense_tensors(layers: int, hidden: int, heads: int, kv_heads: int, head_dim: int, intermediate: int, vocab: int,
                  dtype: str = "BF16", prefix: str = "model.") -> Dict[str, Tuple[str, Sequence[int]]]:
    """The weights of a decoder-only transformer (names as in HF checkpoints)."""
    out: Dict[str, Tuple[str, Sequence[int]]] = {f"{prefix}embed_tokens.weight": (dtype, [vocab, hidden])}
    for i in range(layers):
        p = f"{prefix}layers.{i}."
        out[p + "self_attn.q_proj.weight"] = (dtype, [heads * head_dim, hidden])
        out[p + "self_attn.k_proj.weight"] = (dtype, [kv_heads * head_dim, hidden])
        out[p + "self_attn.v_proj.weight"] = (dtype, [kv_heads * head_dim, hidden])
        out[p + "self_attn.o_proj.weight"] = (dtype, [hidden, heads * head_dim])
        out[p + "mlp.gate_proj.weight"] = (dtype, [intermediate, hidden])
        out[p + "mlp.up_proj.weight"] = (dtype, [intermediate, hidden])
        out[p + "mlp.down_proj.weight"] = (dtype, [hidden, intermediate])
        out[p + "input_layernorm.weight"] = (dtype, [hidden])
    out[f"{prefix}norm.weight"] = (dtype, [hidden])
    out["lm_head.weight"] = (dtype, [vocab, hidden])
    return out


def small_model(folder: Path, **overrides) -> Path:
    """A small Llama-style model with real (zero-filled) weights: 2 layers, hidden 64."""
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
              "num_attention_heads": 8, "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 256,
              "max_position_embeddings": 4096, "torch_dtype": "bfloat16", "rms_norm_eps": 1e-5}
    config.update(overrides)
    tensors = dense_tensors(2, 64, 8, 2, 8, 128, 256)
    return write_model(folder, config, tensors, sparse=False)


# Qwen3.6-27B-like (the origin story): the language model under text_config, 64 layers of which every
# fourth is full attention (the rest Gated DeltaNet linear attention), 24 query / 4 KV heads of 256, a
# 262144-token context, bfloat16. Weights: ~24.4 B parameters (48.7 GB) in two shards.
QWEN36_LAYERS = 64


def qwen36_config() -> dict:
    layer_types = (["linear_attention"] * 3 + ["full_attention"]) * (QWEN36_LAYERS // 4)
    return {
        "architectures": ["Qwen3_5ForConditionalGeneration"],
        "model_type": "qwen3_5",
        "text_config": {
            "model_type": "qwen3_5_text", "hidden_size": 5120, "num_hidden_layers": QWEN36_LAYERS, "num_attention_heads": 24,
            "num_key_value_heads": 4, "head_dim": 256, "intermediate_size": 17408, "vocab_size": 248320,
            "max_position_embeddings": 262144, "layer_types": layer_types, "full_attention_interval": 4,
            "linear_num_value_heads": 48, "linear_key_head_dim": 128, "linear_value_head_dim": 128,
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000000}, "dtype": "bfloat16",
        },
        "vision_config": {"depth": 27, "hidden_size": 1152},
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }


def qwen36_model(folder: Path) -> Path:
    tensors = dense_tensors(QWEN36_LAYERS, 5120, 24, 4, 256, 17408, 248320, prefix="model.language_model.")
    return write_model(folder, qwen36_config(), tensors, shards=2)


def dflash_drafter(folder: Path, target_layer_ids=(1, 17, 33, 49, 63), block_size: int = 16, **extra) -> Path:
    """A DFlash drafter for the Qwen3.6-like target: 5 layers, its fc reads len(target_layer_ids) taps."""
    config = {"architectures": ["DFlashDraftModel"], "model_type": "qwen3", "hidden_size": 5120, "num_hidden_layers": 5,
              "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 17408,
              "vocab_size": 248320, "max_position_embeddings": 262144, "torch_dtype": "bfloat16", "block_size": block_size,
              "dflash_config": {"target_layer_ids": list(target_layer_ids), "mask_token_id": 248070}}
    config.update(extra)
    tensors = dense_tensors(5, 5120, 32, 8, 128, 17408, 1)
    tensors.pop("model.embed_tokens.weight")
    tensors.pop("lm_head.weight")
    tensors["fc.weight"] = ("BF16", [5120, 5120 * len(target_layer_ids)])
    return write_model(folder, config, tensors)


# --- vLLM trees -------------------------------------------------------------------------------------
NEW_ARG_UTILS = '''\
# SPDX-License-Identifier: Apache-2.0
import argparse
import dataclasses
import json
from dataclasses import dataclass

from vllm.config import (AttentionConfig, CacheConfig, LoadConfig, ModelConfig, ParallelConfig,
                         SchedulerConfig, SpeculativeConfig, VllmConfig)
from vllm.utils.argparse_utils import FlexibleArgumentParser


def get_kwargs(cls):
    return {f.name: {} for f in dataclasses.fields(cls)}


@dataclass
class EngineArgs:
    """Arguments for vLLM engine."""

    model: str = ModelConfig.model
    tokenizer: str | None = ModelConfig.tokenizer
    trust_remote_code: bool = ModelConfig.trust_remote_code
    max_model_len: int | None = ModelConfig.max_model_len
    tensor_parallel_size: int = ParallelConfig.tensor_parallel_size
    enable_prefix_caching: bool | None = CacheConfig.enable_prefix_caching

    @staticmethod
    def add_cli_args(parser: FlexibleArgumentParser) -> FlexibleArgumentParser:
        """Shared CLI arguments for vLLM engine."""
        model_kwargs = get_kwargs(ModelConfig)
        model_group = parser.add_argument_group(
            title="ModelConfig",
            description=ModelConfig.__doc__,
        )
        model_group.add_argument("--model", **model_kwargs["model"])
        model_group.add_argument("--tokenizer", **model_kwargs["tokenizer"])
        model_group.add_argument("--trust-remote-code", **model_kwargs["trust_remote_code"])
        model_group.add_argument("--dtype", **model_kwargs["dtype"])
        model_group.add_argument("--seed", **model_kwargs["seed"])
        model_group.add_argument("--revision", **model_kwargs["revision"])
        model_group.add_argument("--max-model-len", **model_kwargs["max_model_len"])
        model_group.add_argument("--quantization", "-q", **model_kwargs["quantization"])
        model_group.add_argument("--enforce-eager", **model_kwargs["enforce_eager"])
        model_group.add_argument("--served-model-name", **model_kwargs["served_model_name"])
        model_group.add_argument("--hf-overrides", **model_kwargs["hf_overrides"])

        load_kwargs = get_kwargs(LoadConfig)
        load_group = parser.add_argument_group(title="LoadConfig")
        load_group.add_argument("--download-dir", **load_kwargs["download_dir"])

        parallel_kwargs = get_kwargs(ParallelConfig)
        parallel_group = parser.add_argument_group(title="ParallelConfig")
        parallel_group.add_argument(
            "--tensor-parallel-size", "-tp", **parallel_kwargs["tensor_parallel_size"]
        )
        parallel_group.add_argument(
            "--pipeline-parallel-size", "-pp", **parallel_kwargs["pipeline_parallel_size"]
        )
        parallel_group.add_argument(
            "--data-parallel-size", "-dp", **parallel_kwargs["data_parallel_size"]
        )
        parallel_group.add_argument(
            "--enable-expert-parallel", "-ep", **parallel_kwargs["enable_expert_parallel"]
        )

        cache_kwargs = get_kwargs(CacheConfig)
        cache_group = parser.add_argument_group(title="CacheConfig")
        cache_group.add_argument("--gpu-memory-utilization", **cache_kwargs["gpu_memory_utilization"])
        cache_group.add_argument("--kv-cache-dtype", **cache_kwargs["cache_dtype"])
        cache_group.add_argument("--enable-prefix-caching", **cache_kwargs["enable_prefix_caching"])
        cache_group.add_argument("--cpu-offload-gb", **cache_kwargs["cpu_offload_gb"])

        scheduler_kwargs = get_kwargs(SchedulerConfig)
        scheduler_group = parser.add_argument_group(title="SchedulerConfig")
        scheduler_group.add_argument("--max-num-seqs", **scheduler_kwargs["max_num_seqs"])
        scheduler_group.add_argument("--max-num-batched-tokens", **scheduler_kwargs["max_num_batched_tokens"])

        structured_outputs_group = parser.add_argument_group(title="StructuredOutputsConfig")
        structured_outputs_group.add_argument(
            "--reasoning-parser",
            # This choice is a special case because it's not static
            choices=list(ReasoningParserManager.list_registered()),
            **structured_outputs_kwargs["reasoning_parser"],
        )

        vllm_kwargs = get_kwargs(VllmConfig)
        vllm_group = parser.add_argument_group(title="VllmConfig")
        vllm_kwargs["speculative_config"]["type"] = optional_type(json.loads)
        vllm_group.add_argument(
            "--speculative-config", "-sc", **vllm_kwargs["speculative_config"]
        )
        vllm_group.add_argument(
            "--compilation-config", "-cc", **vllm_kwargs["compilation_config"]
        )
        vllm_group.add_argument(
            "--attention-config", "-ac", **vllm_kwargs["attention_config"]
        )
        attention_kwargs = get_kwargs(AttentionConfig)
        vllm_group.add_argument("--attention-backend", **attention_kwargs["backend"])
        return parser
'''

NEW_CONFIG_MODEL = '''\
from typing import Literal

from vllm.config.utils import config


@config
class ModelConfig:
    """Configuration for the model."""

    model: str = "Qwen/Qwen3-0.6B"
    tokenizer: str | None = None
    trust_remote_code: bool = False
    """Trust remote code (e.g., from HuggingFace) when downloading the model."""
    dtype: str = "auto"
    seed: int = 0
    revision: str | None = None
    max_model_len: int | None = None
    quantization: str | None = None
    enforce_eager: bool = False
    """Whether to always use eager-mode PyTorch."""
    served_model_name: str | list[str] | None = None
    hf_overrides: dict | None = None

    def compute_hash(self) -> str:
        factors: list = []
        return str(factors)
'''

NEW_CONFIG_OTHERS = '''\
from vllm.config.utils import config


@config
class ParallelConfig:
    pipeline_parallel_size: int = 1
    tensor_parallel_size: int = 1
    data_parallel_size: int = 1
    enable_expert_parallel: bool = False


@config
class CacheConfig:
    gpu_memory_utilization: float = 0.9
    cache_dtype: str = "auto"
    enable_prefix_caching: bool | None = None
    cpu_offload_gb: float = 0


@config
class SchedulerConfig:
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None


@config
class LoadConfig:
    download_dir: str | None = None


@config
class AttentionConfig:
    backend: str | None = None
    flash_attn_version: int | None = None
'''

NEW_CLI_ARGS = '''\
import argparse
import json
from typing import Any, Literal

import vllm.envs as envs
from vllm.config import config
from vllm.engine.arg_utils import AsyncEngineArgs, optional_type
from vllm.tool_parsers import ToolParserManager
from vllm.utils.argparse_utils import FlexibleArgumentParser


@config
class BaseFrontendArgs:
    """Base arguments for the OpenAI-compatible frontend server."""

    lora_modules: list | None = None
    chat_template: str | None = None
    enable_auto_tool_choice: bool = False
    """Enable auto tool choice for supported models."""
    tool_call_parser: str | None = None
    tool_parser_plugin: str = ""
    log_config_file: str | None = envs.VLLM_LOGGING_CONFIG_PATH

    @classmethod
    def _customize_cli_kwargs(cls, frontend_kwargs: dict[str, Any]) -> dict[str, Any]:
        valid_tool_parsers = list(ToolParserManager.list_registered())
        frontend_kwargs["tool_call_parser"]["metavar"] = ",".join(valid_tool_parsers)
        return frontend_kwargs

    @classmethod
    def add_cli_args(cls, parser: FlexibleArgumentParser) -> FlexibleArgumentParser:
        from vllm.engine.arg_utils import get_kwargs

        frontend_kwargs = get_kwargs(cls)
        frontend_kwargs = cls._customize_cli_kwargs(frontend_kwargs)
        frontend_group = parser.add_argument_group(title=cls.__name__.replace("Args", ""))
        for key, value in frontend_kwargs.items():
            extra_flags = value.pop("flags", [])
            frontend_group.add_argument(
                *extra_flags, f"--{key.replace('_', '-')}", **value
            )
        return parser


@config
class FrontendArgs(BaseFrontendArgs):
    """Arguments for the OpenAI-compatible frontend server."""

    host: str | None = None
    """Host name."""
    port: int = 8000
    """Port number."""
    uds: str | None = None
    api_key: list[str] | None = None
    disable_uvicorn_access_log: bool = False


def make_arg_parser(parser: FlexibleArgumentParser) -> FlexibleArgumentParser:
    parser.add_argument(
        "model_tag",
        type=str,
        nargs="?",
        help="The model tag to serve (optional if specified in config)",
    )
    parser.add_argument(
        "--headless",
        action="store_true",
        default=False,
        help="Run in headless mode.",
    )
    parser.add_argument(
        "--api-server-count",
        "-asc",
        type=int,
        default=None,
        help="How many API server processes to run.",
    )
    parser.add_argument("--config", help="Read CLI options from a config file.")
    parser = FrontendArgs.add_cli_args(parser)
    parser = AsyncEngineArgs.add_cli_args(parser)
    return parser
'''

OLD_ARG_UTILS = '''\
# SPDX-License-Identifier: Apache-2.0
import argparse
from dataclasses import dataclass


@dataclass
class EngineArgs:
    """Arguments for vLLM engine."""
    model: str = 'facebook/opt-125m'
    trust_remote_code: bool = False
    max_model_len: Optional[int] = None
    enforce_eager: Optional[bool] = None

    @staticmethod
    def add_cli_args(parser: FlexibleArgumentParser) -> FlexibleArgumentParser:
        """Shared CLI arguments for vLLM engine."""
        parser.add_argument(
            '--model',
            type=str,
            default=EngineArgs.model,
            help='Name or path of the huggingface model to use.')
        parser.add_argument('--trust-remote-code',
                            action='store_true',
                            help='Trust remote code from huggingface.')
        parser.add_argument('--dtype', type=str, default='auto',
                            choices=['auto', 'half', 'float16', 'bfloat16', 'float', 'float32'],
                            help='Data type for model weights and activations.')
        parser.add_argument('--kv-cache-dtype', type=str, default='auto',
                            help='Data type for kv cache storage.')
        parser.add_argument('--max-model-len', type=int, default=None,
                            help='Model context length.')
        parser.add_argument('--tensor-parallel-size', '-tp', type=int, default=1,
                            help='Number of tensor parallel replicas.')
        parser.add_argument('--pipeline-parallel-size', '-pp', type=int, default=1,
                            help='Number of pipeline stages.')
        parser.add_argument('--gpu-memory-utilization', type=float, default=0.90,
                            help='The fraction of GPU memory to be used.')
        parser.add_argument('--enforce-eager', action='store_true',
                            help='Always use eager-mode PyTorch.')
        parser.add_argument('--enable-prefix-caching', action=argparse.BooleanOptionalAction,
                            default=None, help="Enables automatic prefix caching.")
        parser.add_argument('--quantization', '-q', type=nullable_str, default=None,
                            help='Method used to quantize the weights.')
        parser.add_argument('--speculative-config', type=json.loads, default=None,
                            help='The configurations for speculative decoding.')
        parser.add_argument('--reasoning-parser', type=str, default=None,
                            choices=list(ReasoningParserManager.reasoning_parsers),
                            help='Select the reasoning parser.')
        parser.add_argument("--compilation-config", "-O", type=CompilationConfig.from_cli, default=None,
                            help="torch.compile configuration for the model.")
        return parser
'''

OLD_CLI_ARGS = '''\
import argparse
import json


def make_arg_parser(parser: FlexibleArgumentParser) -> FlexibleArgumentParser:
    parser.add_argument("model_tag", type=str, nargs="?", help="The model tag to serve")
    parser.add_argument("--host", type=nullable_str, default=None, help="Host name.")
    parser.add_argument("--port", type=int, default=8000, help="Port number.")
    parser.add_argument("--api-key", type=str, default=None,
                        help="If provided, the server will require this key to be presented in the header.")
    parser.add_argument(
        "--enable-auto-tool-choice",
        action="store_true",
        default=False,
        help="Enable auto tool choice for supported models. Use --tool-call-parser to specify which parser to use.")
    valid_tool_parsers = ToolParserManager.tool_parsers.keys()
    parser.add_argument(
        "--tool-call-parser",
        type=str,
        metavar="{" + ",".join(valid_tool_parsers) + "} or name registered in --tool-parser-plugin",
        default=None,
        help="Select the tool call parser depending on the model that you're using.")
    parser.add_argument("--tool-parser-plugin", type=str, default="",
                        help="Special the tool parser plugin write to parse the model-generated tool into OpenAI API format.")
    parser = AsyncEngineArgs.add_cli_args(parser)
    return parser
'''


def _literal(name: str, items: Iterable[str]) -> str:
    inner = "".join(f'    {item},\n' for item in items)
    return f"{name} = Literal[\n{inner}]\n"


def fake_vllm(root: Path, version: str = "0.19.1.dev42+g2f3f441f8", layout: str = "new",
              tool_parsers: Sequence[str] = ("hermes", "qwen3_coder", "qwen3_xml", "llama3_json"),
              reasoning_parsers: Sequence[str] = ("deepseek_r1", "qwen3"),
              spec_methods: Sequence[str] = ("ngram", "medusa", "mlp_speculator", "draft_model", "suffix"),
              eagle_methods: Sequence[str] = ("eagle", "eagle3", "dflash"),
              architectures: Sequence[str] = ("LlamaForCausalLM", "Qwen3ForCausalLM", "Qwen3_5ForConditionalGeneration"),
              quant_min: Optional[Dict[str, int]] = None,
              backends: Sequence[str] = ("FLASH_ATTN", "TRITON_ATTN", "FLASHINFER", "FLASHMLA", "CUTLASS_MLA", "FLEX_ATTENTION"),
              dflash_fixed: Optional[bool] = True, reads_attention_backend_env: bool = False,
              python: str = "python3.11", memory: Optional[str] = "0.33") -> Path:
    """A venv at ROOT with a vLLM source tree and its ``bin/vllm`` script; returns the script.
    ``memory``: the startup free-memory check as 0.33 writes it ("0.33"), 0.34's with the extensible
    KV cache ("0.34"), or none (None, as 0.8.5)."""
    root = Path(root)
    site = root / "lib" / python / "site-packages"
    pkg = site / "vllm"
    files: Dict[str, str] = {
        "__init__.py": '"""vLLM: a high-throughput and memory-efficient inference engine for LLMs"""\nfrom vllm.version import __version__\n',
        "_version.py": f"__version__ = version = '{version}'\n",
        "envs.py": "import os\n\nenvironment_variables = {\n    \"VLLM_HOST_IP\": lambda: os.getenv(\"VLLM_HOST_IP\", \"\"),\n"
                   + ("    \"VLLM_ATTENTION_BACKEND\": lambda: os.getenv(\"VLLM_ATTENTION_BACKEND\", None),\n" if reads_attention_backend_env else "")
                   + "}\n",
    }
    methods_block = (_literal("MTPModelTypes", ['"deepseek_mtp"', '"mtp"', '"qwen3_5_mtp"'])
                     + _literal("EagleModelTypes", [f'"{m}"' for m in eagle_methods] + ["MTPModelTypes"])
                     + "NgramGPUTypes = Literal[\"ngram_gpu\"]\n"
                     + _literal("SpeculativeMethod", [f'"{m}"' for m in spec_methods] + ["EagleModelTypes", "NgramGPUTypes"]))
    if layout == "new":
        files["engine/arg_utils.py"] = NEW_ARG_UTILS
        files["config/__init__.py"] = "from vllm.config.model import ModelConfig\n"
        files["config/model.py"] = NEW_CONFIG_MODEL
        files["config/parallel.py"] = NEW_CONFIG_OTHERS
        files["config/speculative.py"] = "from typing import Literal\n\n" + methods_block + (
            "\n\n@config\nclass SpeculativeConfig:\n    num_speculative_tokens: int = Field(default=None, gt=0)\n"
            "    model: str | None = None\n    method: SpeculativeMethod | None = None\n")
        files["entrypoints/openai/cli_args.py"] = NEW_CLI_ARGS
        files["tool_parsers/__init__.py"] = (
            "from vllm.tool_parsers.abstract_tool_parser import ToolParser, ToolParserManager\n\n"
            "_TOOL_PARSERS_TO_REGISTER = {\n"
            + "".join(f'    "{n}": (  # name\n        "{n}_tool_parser",  # filename\n        "{n.title()}ToolParser",\n    ),\n' for n in tool_parsers)
            + "}\n\n\ndef register_lazy_tool_parsers():\n    for name, (file_name, class_name) in _TOOL_PARSERS_TO_REGISTER.items():\n"
            "        ToolParserManager.register_lazy_module(name, f\"vllm.tool_parsers.{file_name}\", class_name)\n")
        files["reasoning/__init__.py"] = (
            "from vllm.reasoning.abs_reasoning_parsers import ReasoningParser, ReasoningParserManager\n\n"
            "_REASONING_PARSERS_TO_REGISTER = {\n"
            + "".join(f'    "{n}": ("{n}_reasoning_parser", "{n.title()}ReasoningParser"),\n' for n in reasoning_parsers)
            + "}\n")
        files["v1/attention/backends/registry.py"] = (
            "import enum\n\n\nclass AttentionBackendEnum(enum.Enum, metaclass=_AttentionBackendEnumMeta):\n"
            "    \"\"\"Enumeration of all supported attention backends.\"\"\"\n\n"
            + "".join(f'    {b} = "vllm.v1.attention.backends.{b.lower()}.Backend"\n' for b in backends)
            + "\n    def get_path(self) -> str:\n        return self.value\n")
    else:
        files["engine/arg_utils.py"] = OLD_ARG_UTILS
        files["config.py"] = "from typing import Literal\n\n" + _literal("SpeculativeMethod", [f'"{m}"' for m in list(spec_methods) + list(eagle_methods)])
        files["entrypoints/openai/cli_args.py"] = OLD_CLI_ARGS
        for name in tool_parsers:
            files[f"entrypoints/openai/tool_parsers/{name}_tool_parser.py"] = (
                "from vllm.entrypoints.openai.tool_parsers.abstract_tool_parser import ToolParser, ToolParserManager\n\n\n"
                f'@ToolParserManager.register_module("{name}")\nclass {name.title()}ToolParser(ToolParser):\n    pass\n')
        for name in reasoning_parsers:
            files[f"reasoning/{name}_reasoning_parser.py"] = (
                "from vllm.reasoning import ReasoningParser, ReasoningParserManager\n\n\n"
                f'@ReasoningParserManager.register_module("{name}")\nclass {name.title()}ReasoningParser(ReasoningParser):\n    pass\n')
        files["platforms/interface.py"] = ("import enum\n\n\nclass _Backend(enum.Enum):\n"
                                           + "".join(f"    {b} = enum.auto()\n" for b in backends) + "\n\nclass Platform:\n    pass\n")
    files["model_executor/models/registry.py"] = (
        "_TEXT_GENERATION_MODELS = {\n"
        + "".join(f'    "{a}": ("{a.lower()}", "{a}"),\n' for a in architectures)
        + "}\n\n_SPECULATIVE_DECODING_MODELS = {\n    \"DFlashDraftModel\": (\"qwen3_dflash\", \"DFlashQwen3ForCausalLM\"),\n}\n\n"
        "_VLLM_MODELS = {\n    **_TEXT_GENERATION_MODELS,\n    **_SPECULATIVE_DECODING_MODELS,\n}\n")
    for method, cap in (quant_min or {"fp8": 75, "awq": 75, "gptq": 60, "modelopt": 89, "modelopt_fp4": 75}).items():
        cls = "".join(part.title() for part in method.split("_")) + "Config"
        files[f"model_executor/layers/quantization/{method}.py"] = (
            f"class {cls}(QuantizationConfig):\n    \"\"\"Config class for {method}.\"\"\"\n\n"
            f"    @classmethod\n    def get_name(cls) -> QuantizationMethods:\n        return \"{method}\"\n\n"
            f"    @classmethod\n    def get_min_capability(cls) -> int:\n        return {cap}\n")
    if dflash_fixed is not None:
        ids = ("[\n                    i + 1 for i in (dflash_config.get(\"target_layer_ids\") or [])\n                ]"
               if dflash_fixed else "dflash_config.get(\"target_layer_ids\")")
        files["v1/worker/gpu_model_runner.py"] = (
            "class GPUModelRunner:\n    def _get_eagle3_aux_layers_from_config(self):\n"
            "        hf_config = self.speculative_config.draft_model_config.hf_config\n"
            "        layer_ids = getattr(hf_config, \"eagle_aux_hidden_state_layer_ids\", None)\n"
            "        if not layer_ids:\n            dflash_config = getattr(hf_config, \"dflash_config\", None)\n"
            "            if dflash_config and isinstance(dflash_config, dict):\n"
            + ("                # Add 1 to convert DFlash's aux layer id semantics\n" if dflash_fixed else "")
            + f"                layer_ids = {ids}\n        return layer_ids\n")
        files["model_executor/models/qwen3_dflash.py"] = (
            "class DFlashQwen3ForCausalLM:\n    def __init__(self, config):\n"
            "        dflash = config.dflash_config or {}\n        self.use_swa = dflash.get(\"use_swa\", False)\n")
    if memory is not None and layout == "new":
        files["v1/worker/utils.py"] = MEMORY_CHECK_034 if memory == "0.34" else MEMORY_CHECK_033
    if memory == "0.34" and layout == "new":
        files["config/parallel.py"] = files["config/parallel.py"].replace(
            "    gpu_memory_utilization: float = 0.9\n", CACHE_CONFIG_034)
        files["config/vllm.py"] = RESOLVE_EXTENSIBLE_034
        files["engine/arg_utils.py"] = files["engine/arg_utils.py"].replace(
            '        cache_group.add_argument("--kv-cache-dtype"',
            '        cache_group.add_argument("--enable-extensible-kv-cache", **cache_kwargs["enable_extensible_kv_cache"])\n'
            '        cache_group.add_argument("--kv-cache-memory-bytes", **cache_kwargs["kv_cache_memory_bytes"])\n'
            '        cache_group.add_argument("--kv-cache-dtype"')
    for rel, text in files.items():
        path = pkg / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    dist = site / f"vllm-{version}.dist-info"
    dist.mkdir(parents=True, exist_ok=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.4\nName: vllm\nVersion: {version}\nRequires-Python: >=3.10\n\n", encoding="utf-8")
    (dist / "INSTALLER").write_text("pip\n", encoding="utf-8")
    (dist / "RECORD").write_text("".join(f"vllm/{rel},,\n" for rel in files), encoding="utf-8")
    bindir = root / "bin"
    bindir.mkdir(parents=True, exist_ok=True)
    script = bindir / "vllm"
    script.write_text(f"#!{root / 'bin' / 'python'}\nimport sys\nfrom vllm.entrypoints.cli.main import main\nif __name__ == '__main__':\n    sys.exit(main())\n",
                      encoding="utf-8")
    script.chmod(0o755)
    return script


def replace_in(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new), encoding="utf-8")


def flags_used_by_origin_story() -> List[str]:
    return ["--tensor-parallel-size", "--max-model-len", "--gpu-memory-utilization", "--speculative-config", "--attention-backend",
            "--enable-auto-tool-choice", "--tool-call-parser", "--reasoning-parser", "--host", "--port", "--served-model-name"]
