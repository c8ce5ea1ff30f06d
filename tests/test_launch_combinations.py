"""vllm_combinations: cross-flag checks of vLLM's config classes, in the shapes of 0.34.0's source
(ModelConfig.__post_init__: checkpoint_prepare_on_startup requires enable_sleep_mode; ParallelConfig's
after-validator: NUMA binding lists cannot be combined with numa_bind=False), and the checks it must
leave alone: a field the function assigns before the test, a field EngineArgs passes as something
else than the flag's value, a class vLLM builds only under a condition, a test after a return."""

import textwrap

import pytest

from gpudoctor.probes.launch import parser, probe, vllm_args, vllm_source

CONFIG = '''
from pydantic import Field, model_validator
from vllm.config.utils import config

@config
class ModelConfig:
    checkpoint_prepare_on_startup: bool = False
    enable_sleep_mode: bool = False
    tokenizer_mode: str = "auto"

    def __post_init__(self):
        if self.checkpoint_prepare_on_startup and not self.enable_sleep_mode:
            raise ValueError("checkpoint_prepare_on_startup requires enable_sleep_mode")
        self.tokenizer_mode = "slow"
        if self.tokenizer_mode == "fast":
            raise ValueError("never: assigned before the test")

@config
class ParallelConfig:
    numa_bind: bool | None = None
    numa_bind_nodes: list[int] | None = None
    data_parallel_size: int = 1
    data_parallel_external_lb: bool = False

    @model_validator(mode="after")
    def _validate_parallel_config(self):
        if self.data_parallel_size <= 1 and self.data_parallel_external_lb:
            raise ValueError("data_parallel_external_lb can only be set when data_parallel_size > 1")
        if self.numa_bind_nodes is not None:
            if self.numa_bind is False:
                raise ValueError("NUMA binding lists cannot be combined with numa_bind=False.")
            self.numa_bind = True
        return self

@config
class LoRAConfig:
    max_loras: int = 1
    max_lora_rank: int = 16

    def __post_init__(self):
        if self.max_loras > self.max_lora_rank:
            raise ValueError("never read: LoRAConfig is built only with --enable-lora")
'''

ARG_UTILS = '''
from vllm.config import LoRAConfig, ModelConfig, ParallelConfig

class EngineArgs:
    enable_lora: bool = False

    @staticmethod
    def add_cli_args(parser):
        model_kwargs = get_kwargs(ModelConfig)
        parser.add_argument("--checkpoint-prepare-on-startup", **model_kwargs["checkpoint_prepare_on_startup"])
        parser.add_argument("--enable-sleep-mode", **model_kwargs["enable_sleep_mode"])
        parser.add_argument("--tokenizer-mode", **model_kwargs["tokenizer_mode"])
        parallel_kwargs = get_kwargs(ParallelConfig)
        parser.add_argument("--numa-bind", **parallel_kwargs["numa_bind"])
        parser.add_argument("--numa-bind-nodes", **parallel_kwargs["numa_bind_nodes"])
        parser.add_argument("--data-parallel-size", **parallel_kwargs["data_parallel_size"])
        parser.add_argument("--data-parallel-external-lb", **parallel_kwargs["data_parallel_external_lb"])
        lora_kwargs = get_kwargs(LoRAConfig)
        parser.add_argument("--enable-lora", action=argparse.BooleanOptionalAction)
        parser.add_argument("--max-loras", **lora_kwargs["max_loras"])
        parser.add_argument("--max-lora-rank", **lora_kwargs["max_lora_rank"])
        return parser

    def create_engine_config(self):
        model_config = ModelConfig(checkpoint_prepare_on_startup=self.checkpoint_prepare_on_startup,
                                   enable_sleep_mode=self.enable_sleep_mode, tokenizer_mode=self.tokenizer_mode)
        data_parallel_external_lb = self.data_parallel_external_lb or self.data_parallel_rank is not None
        parallel_config = ParallelConfig(numa_bind=self.numa_bind, numa_bind_nodes=self.numa_bind_nodes,
                                         data_parallel_size=self.data_parallel_size,
                                         data_parallel_external_lb=data_parallel_external_lb)
        lora_config = LoRAConfig(max_loras=self.max_loras, max_lora_rank=self.max_lora_rank) if self.enable_lora else None
'''


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("vllm-combinations")
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


def test_only_the_decidable_checks_are_read(tree):
    table = vllm_args.read_args(tree["pkg"], vllm_source.flag_files(tree["pkg"]))
    tests = sorted(c["test"] for c in table.combinations)
    assert tests == ["self.checkpoint_prepare_on_startup and (not self.enable_sleep_mode)",
                     "self.numa_bind_nodes is not None and self.numa_bind is False"], tests


def errors(tree, *flags):
    table = probe.flag_table(vllm_source.everything(tree["pkg"]))
    launch = parser.parse([tree["vllm"], "serve", "m", *flags], table)
    parser.typed_options(launch, table)
    return [e["problem"] for e in launch.errors]


@pytest.mark.parametrize("flags, problem", [
    (("--checkpoint-prepare-on-startup",), "checkpoint_prepare_on_startup requires enable_sleep_mode"),
    (("--checkpoint-prepare-on-startup", "--no-enable-sleep-mode"), "requires enable_sleep_mode"),
    (("--numa-bind-nodes", "0", "1", "--no-numa-bind"), "NUMA binding lists cannot be combined with numa_bind=False."),
])
def test_refused_combinations_are_errors(tree, flags, problem):
    found = errors(tree, *flags)
    assert len(found) == 1 and problem in found[0] and ("ModelConfig.__post_init__" in found[0]
                                                        or "ParallelConfig._validate_parallel_config" in found[0]), found


@pytest.mark.parametrize("flags", [
    ("--checkpoint-prepare-on-startup", "--enable-sleep-mode"),
    ("--numa-bind-nodes", "0"),  # numa_bind None: vLLM turns it on
    ("--numa-bind-nodes", "0", "--numa-bind"),
    ("--no-numa-bind",),
    ("--data-parallel-external-lb",),  # passed as a local (… or data_parallel_rank is not None): not read
    ("--tokenizer-mode", "fast"),  # assigned before its test
    ("--max-loras", "32", "--max-lora-rank", "8"),  # LoRAConfig only with --enable-lora
])
def test_accepted_or_undecidable_combinations_pass(tree, flags):
    assert errors(tree, *flags) == []
