"""--gpu [COUNTx]GPU[-MEMORY]: a target machine that is not this one. TP/PP and the memory-fit
rules judge against its count and memory (a saved H200 snapshot stands in for the rest)."""

import io
import json
import os
from pathlib import Path

import pytest

from gpudoctor import cli
from gpudoctor.gpu_target import SpecError, parse_spec
from fakes.launch_trees import fake_vllm, qwen36_model, small_model

H200 = str(Path(__file__).resolve().parent / "fixtures" / "snapshots" / "h200.json")
GIB = 2**30


@pytest.mark.parametrize("text, cc, count, memory", [
    ("2xH100-80GB", "9.0", 2, 80 * GIB),
    ("8xA100-40GB", "8.0", 8, 40 * GIB),
    ("A100 80GB", "8.0", 1, 80 * GIB),
    ("H200", "9.0", 1, 143771 * 2**20),  # table memory (NVML's memory.total on a real H200)
    ("A100", "8.0", 1, 81920 * 2**20),  # 40 or 80 GB: judged as the 80 GB, and said so (issue 31)
    ("4 x L40S", "8.9", 4, 46068 * 2**20),
    ("sm_80", "8.0", 1, None),
])
def test_parse_count_and_memory(text, cc, count, memory):
    spec = parse_spec(text)
    assert (spec.cc, spec.count, spec.memory) == (cc, count, memory)
    assert bool(spec.assumed) == (text == "A100")  # a size is assumed (and said) only for a name made with several


@pytest.mark.parametrize("text", ["0xH100", "2xH100-0GB", "2xFOO", "9000xH100"])
def test_bad_specs_are_usage_errors(text):
    with pytest.raises(SpecError):
        parse_spec(text)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("target")
    return {"vllm": fake_vllm(root / "venv"), "small": small_model(root / "models" / "small"),
            "qwen": qwen36_model(root / "models" / "Qwen3.6-27B"), "home": root}


def preflight(world, gpu, *flags, model="qwen"):
    out, err = io.StringIO(), io.StringIO()
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(world["home"])}
    code = cli.main(["preflight", "--format", "json", "--snapshot", H200, "--gpu", gpu, "--", str(world["vllm"]), "serve",
                     str(world[model]), *flags], environ=env, stdout=out, stderr=err)
    assert "Traceback" not in err.getvalue(), err.getvalue()
    doc = json.loads(out.getvalue())
    return code, {o["id"]: o for o in doc["outcomes"]}


def test_tensor_parallel_runs_against_the_target_count(world):
    _, outcomes = preflight(world, "2xH100-80GB", "-tp", "2", "--max-model-len", "8192")
    assert outcomes["GD705"]["status"] == "pass"
    _, outcomes = preflight(world, "H100", "-tp", "2", "--max-model-len", "8192")
    assert outcomes["GD705"]["status"] == "fail"


def test_memory_fit_runs_against_the_target_memory(world):
    # Qwen3.6-27B in bf16 (~45 GiB of weights): too big for one 24 GiB A10G, fits a 2xH100-80GB at TP 2.
    _, outcomes = preflight(world, "A10G", "--max-model-len", "8192")
    assert outcomes["GD709"]["status"] == "fail"
    _, outcomes = preflight(world, "2xH100-80GB", "-tp", "2", "--max-model-len", "8192")
    assert outcomes["GD709"]["status"] == "pass" and outcomes["GD710"]["status"] in ("pass", "not_applicable")
    # A100 without its size: judged as the larger board (never a false block on an 80 GB one), the 40 GB when given.
    _, outcomes = preflight(world, "A100", "--max-model-len", "8192")
    assert outcomes["GD709"]["status"] == "pass"
    _, outcomes = preflight(world, "A100-40GB", "--max-model-len", "8192")
    assert outcomes["GD709"]["status"] == "fail"
