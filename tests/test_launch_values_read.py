"""vllm_args reads the values vLLM 0.34.0 computes (the shapes of its own source, in a small tree):
a kwargs entry edited through another name (`moe_backend_kwargs = kernel_kwargs["moe_backend"]`)
with a lower-casing `type=lambda`, `get_kwargs(VllmConfig)["logging_config"]`, a choice removed by a
constant named in another module (`.remove(PASSTHROUGH_ALL2ALL_BACKEND)`), a bound written as an
expression (`le=2**32 - 1`) and choices that depend on the platform (`current_platform.device_type`,
read from vllm/platforms/cuda.py)."""

import textwrap

import pytest

from gpudoctor.probes.launch import parser, probe, vllm_args, vllm_source

KERNEL = '''
from typing import Final, Literal
from pydantic import Field
from vllm.config.utils import config

MoEBackend = Literal["auto", "triton", "deep_gemm", "flashinfer_cutlass"]
PASSTHROUGH_ALL2ALL_BACKEND: Final = "passthrough"
All2AllBackend = Literal["naive", "pplx", "passthrough"]

@config
class KernelConfig:
    moe_backend: MoEBackend = "auto"

@config
class ParallelConfig:
    all2all_backend: All2AllBackend = "naive"

@config
class ModelConfig:
    seed: int = Field(default=0, ge=0, le=2**32 - 1)

@config
class LoggingConfig:
    log_level: str = "INFO"
    pylogging_config_file: str | None = None

@config
class VllmConfig:
    logging_config: LoggingConfig | None = None
'''

ARG_UTILS = '''
from vllm.config import KernelConfig, ModelConfig, ParallelConfig, VllmConfig
from vllm.config.kernel import PASSTHROUGH_ALL2ALL_BACKEND
from vllm.platforms import current_platform

class EngineArgs:
    @staticmethod
    def add_cli_args(parser):
        kernel_kwargs = get_kwargs(KernelConfig)
        moe_backend_kwargs = kernel_kwargs["moe_backend"]
        moe_backend_kwargs["type"] = lambda s: s.lower().replace("-", "_")
        parser.add_argument("--moe-backend", **moe_backend_kwargs)
        parallel_kwargs = get_kwargs(ParallelConfig)
        parallel_kwargs["all2all_backend"]["choices"].remove(
            PASSTHROUGH_ALL2ALL_BACKEND
        )
        parser.add_argument("--all2all-backend", **parallel_kwargs["all2all_backend"])
        model_kwargs = get_kwargs(ModelConfig)
        parser.add_argument("--seed", **model_kwargs["seed"])
        logging_config_kwargs = get_kwargs(VllmConfig)["logging_config"]
        logging_config_kwargs["default"] = argparse.SUPPRESS
        parser.add_argument("--logging-config", **logging_config_kwargs)
        parser.add_argument(
            "--mm-processor-device",
            choices=["auto", "cpu"]
            + (
                [current_platform.device_type]
                if current_platform.device_type not in ("", "cpu")
                else []
            ),
            default="auto",
        )
        return parser
'''

CUDA = '''
class CudaPlatformBase(Platform):
    _enum = PlatformEnum.CUDA
    device_name: str = "cuda"
    device_type: str = "cuda"
'''


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("vllm-values")
    site = root / "venv" / "lib" / "python3.11" / "site-packages"
    pkg = site / "vllm"
    for rel, text in {"__init__.py": "", "config/__init__.py": "from vllm.config.kernel import *\n", "config/kernel.py": KERNEL,
                      "engine/arg_utils.py": ARG_UTILS, "platforms/cuda.py": CUDA}.items():
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


def test_the_table_reads_computed_values(tree):
    table = vllm_args.read_args(tree["pkg"], vllm_source.flag_files(tree["pkg"]))
    args = table.args
    assert table.complete and not table.names_only
    assert args["--moe-backend"].choices == ["auto", "deep_gemm", "flashinfer_cutlass", "triton"]
    assert args["--moe-backend"].type == "lower_snake"
    assert args["--all2all-backend"].choices == ["naive", "pplx"]
    assert args["--seed"].bounds == {"ge": 0, "le": 2**32 - 1}
    assert args["--logging-config"].type == "config" and args["--logging-config"].keys == ["log_level", "pylogging_config_file"]
    assert args["--mm-processor-device"].choices == ["auto", "cpu", "cuda"]


def errors(tree, *flags):
    table = probe.flag_table(vllm_source.everything(tree["pkg"]))
    launch = parser.parse([tree["vllm"], "serve", "m", *flags], table)
    parser.typed_options(launch, table)
    return [e["problem"] for e in launch.errors]


@pytest.mark.parametrize("flags, problem", [
    (("--moe-backend", "tritonx"), "invalid choice 'tritonx'"),
    (("--all2all-backend", "passthrough"), "invalid choice 'passthrough'"),
    (("--seed", str(2**32)), "out of range: must be >= 0 and <= 4294967295"),
    (("--logging-config", '{"log_levl": "DEBUG"}'), "unknown key 'log_levl'"),
    (("--mm-processor-device", "xpu"), "invalid choice 'xpu'"),
])
def test_refused_values_are_errors(tree, flags, problem):
    assert any(problem in p for p in errors(tree, *flags)), errors(tree, *flags)


@pytest.mark.parametrize("flags", [
    ("--moe-backend", "Flashinfer-Cutlass"),  # vLLM lower-cases and turns dashes into underscores first
    ("--all2all-backend", "pplx"),
    ("--seed", str(2**32 - 1)),
    ("--logging-config", '{"log_level": "DEBUG"}'),
    ("--mm-processor-device", "cuda"),
])
def test_accepted_values_pass(tree, flags):
    assert errors(tree, *flags) == []
