"""vllm_conditions: a range vLLM checks only when it builds its config class under a condition.

The tree copies the shapes of vLLM 0.34.0 (the same in 0.33.0): MultiModalConfig is built in
ModelConfig.__post_init__ under ``if self._model_info.supports_multimodal:`` (vllm/config/model.py),
LoRAConfig in EngineArgs.create_engine_config as ``LoRAConfig(...) if self.enable_lora else None``,
CacheConfig always. So `--video-pruning-rate 1` passes for a text model (vLLM accepts it),
`--max-loras 0` passes without --enable-lora and is refused with it.
"""

import textwrap

import pytest

from gpudoctor.engine import run_rules
from gpudoctor import registry
from gpudoctor.probes.launch import parser, probe, vllm_args, vllm_conditions, vllm_source
from gpudoctor.snapshot import Snapshot

CONFIG = '''
from pydantic import Field
from vllm.config.utils import config

@config
class CacheConfig:
    gpu_memory_utilization: float = Field(default=0.92, gt=0, le=1)

@config
class MultiModalConfig:
    video_pruning_rate: float | None = Field(default=None, ge=0.0, lt=1.0)
    mm_processor_cache_gb: float = Field(default=4, ge=0)

@config
class LoRAConfig:
    max_loras: int = Field(default=1, ge=1)

@config
class ModelConfig:
    model: str = "m"

    def __post_init__(self, video_pruning_rate, mm_processor_cache_gb):
        if self._model_info.supports_multimodal:
            mm_config_kwargs = dict(video_pruning_rate=video_pruning_rate, mm_processor_cache_gb=mm_processor_cache_gb)
            self.multimodal_config = MultiModalConfig(**mm_config_kwargs)
'''

ARG_UTILS = '''
from vllm.config import CacheConfig, LoRAConfig, ModelConfig, MultiModalConfig

class EngineArgs:
    enable_lora: bool = False

    @staticmethod
    def add_cli_args(parser):
        cache_kwargs = get_kwargs(CacheConfig)
        parser.add_argument("--gpu-memory-utilization", **cache_kwargs["gpu_memory_utilization"])
        multimodal_kwargs = get_kwargs(MultiModalConfig)
        parser.add_argument("--video-pruning-rate", **multimodal_kwargs["video_pruning_rate"])
        parser.add_argument("--mm-processor-cache-gb", **multimodal_kwargs["mm_processor_cache_gb"])
        lora_kwargs = get_kwargs(LoRAConfig)
        parser.add_argument("--enable-lora", action=argparse.BooleanOptionalAction)
        parser.add_argument("--max-loras", **lora_kwargs["max_loras"])
        return parser

    def create_engine_config(self):
        cache_config = CacheConfig(gpu_memory_utilization=self.gpu_memory_utilization)
        lora_config = (
            LoRAConfig(max_loras=self.max_loras)
            if self.enable_lora
            else None
        )
'''


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("vllm-conditions")
    site = root / "venv" / "lib" / "python3.11" / "site-packages"
    pkg = site / "vllm"
    for rel, text in {"__init__.py": "", "config/__init__.py": CONFIG, "engine/arg_utils.py": ARG_UTILS}.items():
        path = pkg / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    (site / "vllm-0.34.0.dist-info").mkdir()
    (site / "vllm-0.34.0.dist-info" / "METADATA").write_text("Name: vllm\nVersion: 0.34.0\n")
    (root / "venv" / "bin").mkdir(parents=True)
    script = root / "venv" / "bin" / "vllm"
    script.write_text("#!/nonexistent/python\n")
    script.chmod(0o755)
    return {"pkg": str(pkg), "vllm": str(script)}


def test_conditions_are_read_from_where_vllm_builds_the_class(tree):
    args = vllm_args.read_args(tree["pkg"], vllm_source.flag_files(tree["pkg"])).args
    assert args["--gpu-memory-utilization"].condition is None  # CacheConfig is built for every command
    multimodal = args["--video-pruning-rate"].condition
    assert multimodal["text"] == "self._model_info.supports_multimodal" and multimodal["flags"] == []
    assert multimodal["where"].startswith("config/__init__.py:")
    assert args["--mm-processor-cache-gb"].condition == multimodal
    lora = args["--max-loras"].condition
    assert lora["dest"] == "enable_lora" and lora["flags"] == ["--enable-lora"] and lora["default"] is False


def test_holds_decides_switches_and_leaves_the_rest_open():
    lora = {"flags": ["--enable-lora"], "default": False, "negated": False}
    assert vllm_conditions.holds(lora, {}) is False
    assert vllm_conditions.holds(lora, {"--enable-lora": True}) is True
    assert vllm_conditions.holds(lora, {"--enable-lora": False}) is False
    assert vllm_conditions.holds({**lora, "default": None}, {}) is None  # default not read: not decided
    assert vllm_conditions.holds({"flags": [], "text": "self._model_info.supports_multimodal"}, {}) is None


def gd701(tree, *flags):
    rules = registry.select(registry.load_rules(), ["GD701"])
    _, facts, _ = probe.inspect([tree["vllm"], "serve", "m", *flags], environ={"PATH": "", "GPUDOCTOR_HUB": "0"}, own_paths=None, timeout=10.0)
    result = run_rules(Snapshot(dict(facts)), rules)
    return [o for o in result.outcomes if o.rule.id == "GD701"][0], [f for f in result.findings if f.rule_id == "GD701"]


def test_video_pruning_rate_one_is_unknown_not_a_block(tree):
    outcome, findings = gd701(tree, "--video-pruning-rate", "1")
    assert findings == [] and outcome.status == "unknown"
    assert "supports_multimodal" in outcome.reason and "--video-pruning-rate" in outcome.reason


def test_an_unconditional_range_still_blocks_beside_a_conditional_one(tree):
    _, findings = gd701(tree, "--video-pruning-rate", "1", "--gpu-memory-utilization", "1.5")
    assert [f.subject for f in findings] == ["--gpu-memory-utilization"]


@pytest.mark.parametrize("flags, blocked", [
    (("--max-loras", "0"), False),  # LoRAConfig is not built: vLLM accepts it
    (("--max-loras", "0", "--no-enable-lora"), False),
    (("--enable-lora", "--max-loras", "0"), True),  # built: pydantic refuses max_loras >= 1
    (("--max-loras", "0", "--enable-lora"), True),
    (("--enable-lora", "--max-loras", "2"), False),
])
def test_lora_range_only_with_enable_lora(tree, flags, blocked):
    found = vllm_source.everything(tree["pkg"])
    table = probe.flag_table(found)
    launch = parser.parse([tree["vllm"], "serve", "m", *flags], table)
    parser.typed_options(launch, table)
    assert bool(launch.errors) is blocked, launch.errors
    assert not any(e.get("condition") for e in launch.errors)
