"""Reading launch commands the way vLLM's FlexibleArgumentParser reads them (gpudoctor/probes/launch/parser.py)."""

import pytest

from gpudoctor.probes.launch import parser
from gpudoctor.probes.launch.command_file import read_command_file
from gpudoctor.probes.launch.parser import FlagTable, parse, typed_options
from gpudoctor.probes.launch.vllm_values import human_readable_int as human_int

JSON_SPEC = '{"method": "dflash", "model": "z-lab/Qwen3-8B-DFlash-b16", "num_speculative_tokens": 15}'


def typed(argv, table=None):
    launch = parse(argv, table)
    return launch, typed_options(launch)


def test_vllm_serve_with_positional_model_and_both_flag_forms():
    launch, args = typed(["vllm", "serve", "Qwen/Qwen3-8B", "--tensor-parallel-size", "2", "--max-model-len=32768",
                          "--gpu-memory-utilization", "0.85", "--trust-remote-code", "--port", "8001"])
    assert launch.kind == "vllm-serve" and launch.model == "Qwen/Qwen3-8B"
    assert args["--tensor-parallel-size"] == 2 and args["--max-model-len"] == 32768
    assert args["--gpu-memory-utilization"] == 0.85 and args["--trust-remote-code"] is True and args["--port"] == 8001
    assert launch.errors == [] and launch.positionals == []


def test_a_switch_before_the_model_does_not_swallow_it():
    launch = parse(["vllm", "serve", "--trust-remote-code", "org/model", "--enforce-eager"])
    assert launch.model == "org/model"
    assert launch.options["--trust-remote-code"] is True and launch.options["--enforce-eager"] is True


def test_api_server_module_and_cli_main():
    launch, args = typed(["python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "/models/m", "--port", "9000"])
    assert (launch.kind, launch.model, args["--port"]) == ("vllm-api-server", "/models/m", 9000)
    launch = parse(["/usr/bin/python3.11", "-u", "-m", "vllm.entrypoints.cli.main", "serve", "m", "-tp", "4"])
    assert (launch.kind, launch.model, launch.options["--tensor-parallel-size"]) == ("vllm-serve", "m", "4")


def test_model_given_with_the_model_flag_is_the_model():
    launch = parse(["vllm", "serve", "--model", "org/m", "--port", "1"])
    assert launch.model == "org/m" and launch.errors == []


def test_underscores_count_as_dashes_before_the_first_dot_only():
    launch, args = typed(["vllm", "serve", "m", "--max_model_len", "4096", "--speculative_config.num_speculative_tokens", "5",
                          "--speculative-config.draft_tensor_parallel_size", "1"])
    assert args["--max-model-len"] == 4096
    assert args["--speculative-config"] == {"num_speculative_tokens": 5, "draft_tensor_parallel_size": 1}


def test_json_flag_whole_and_by_key_merge():
    launch, args = typed(["vllm", "serve", "m", "--speculative-config", JSON_SPEC, "--speculative-config.num_speculative_tokens=7",
                          "-ac", '{"backend": "FLASH_ATTN"}', "--attention-config.flash_attn_version", "2"])
    assert args["--speculative-config"] == {"method": "dflash", "model": "z-lab/Qwen3-8B-DFlash-b16", "num_speculative_tokens": 7}
    assert args["--attention-config"] == {"backend": "FLASH_ATTN", "flash_attn_version": 2}
    assert launch.errors == []


def test_unparseable_json_is_one_error_with_the_position():
    launch, args = typed(["vllm", "serve", "m", "--speculative-config", '{"method": "dflash", "model": x}'])
    assert "--speculative-config" not in args
    (error,) = launch.errors
    assert error["flag"] == "--speculative-config" and "not valid JSON" in error["problem"] and "column" in error["problem"]


def test_json_that_is_not_an_object_is_an_error():
    launch, _ = typed(["vllm", "serve", "m", "--speculative-config", "[1, 2]"])
    assert launch.errors[0]["problem"].startswith("must be a JSON object")


@pytest.mark.parametrize("argv, flag", [
    (["vllm", "serve", "m", "--tensor-parallel-size", "two"], "--tensor-parallel-size"),
    (["vllm", "serve", "m", "--gpu-memory-utilization=nan"], "--gpu-memory-utilization"),
    (["vllm", "serve", "m", "--max-model-len", "1.5K"], "--max-model-len"),
])
def test_values_that_are_not_numbers(argv, flag):
    launch, args = typed(argv)
    assert [e["flag"] for e in launch.errors] == [flag] and flag not in args


def test_a_value_flag_without_its_value():
    launch, _ = typed(["vllm", "serve", "m", "--max-model-len", "--enforce-eager"])
    assert launch.errors[0] == {"flag": "--max-model-len", "value": None, "problem": "expected a value"}


def test_a_second_positional_is_an_error():
    launch = parse(["vllm", "serve", "m", "extra"])
    assert launch.model == "m" and "unexpected word" in launch.errors[0]["problem"]


def test_negative_numbers_are_values():
    _, args = typed(["vllm", "serve", "m", "--max-model-len", "-1"])
    assert args["--max-model-len"] == -1


@pytest.mark.parametrize("text, value", [("32k", 32000), ("32K", 32768), ("1M", 1 << 20), ("1.5k", 1500), ("auto", -1), ("4096", 4096)])
def test_human_readable_ints(text, value):
    assert human_int(text) == value


def test_environment_assignments_and_wrappers_are_kept_for_exec():
    argv = ["CUDA_VISIBLE_DEVICES=0,1", "HF_HUB_OFFLINE=1", "nohup", "env", "VLLM_USE_V2_MODEL_RUNNER=1", "vllm", "serve", "m"]
    launch = parse(argv)
    assert launch.env == {"CUDA_VISIBLE_DEVICES": "0,1", "HF_HUB_OFFLINE": "1", "VLLM_USE_V2_MODEL_RUNNER": "1"}
    assert launch.exec_argv == argv[2:]  # what --exec runs: the wrappers stay, the leading assignments go to the environment
    assert launch.kind == "vllm-serve" and launch.model == "m"


def test_uv_run_wrapper():
    launch = parse(["uv", "run", "--with", "vllm", "vllm", "serve", "m"])
    assert launch.kind == "vllm-serve" and launch.model == "m"


def test_optimization_level_short_forms():
    assert parse(["vllm", "serve", "m", "-O3"]).options["--optimization-level"] == "3"
    assert parse(["vllm", "serve", "m", "-O", "2"]).options["--optimization-level"] == "2"
    # An older vLLM defines -O as --compilation-config: its table says so.
    old = FlagTable({"--compilation-config", "-O", "--model"}, {"-O": "--compilation-config"}, set())
    launch, args = typed(["vllm", "serve", "m", "-O3"], old)
    assert args["--compilation-config"] == {"level": 3}


def test_switches_from_the_vllm_table_and_no_prefix():
    table = FlagTable({"--my-switch", "--no-my-switch", "--model"}, {}, {"--my-switch"})
    launch = parse(["vllm", "serve", "--my-switch", "m", "--no-my-switch"], table)
    assert launch.model == "m" and launch.options["--my-switch"] is False


def test_other_commands_are_not_parsed_as_vllm():
    launch = parse(["A=1", "python3", "server.py", "--port", "8000"])
    assert launch.kind == "other" and launch.options == {} and launch.exec_argv == ["python3", "server.py", "--port", "8000"]
    assert parse(["vllm", "bench", "serve"]).kind == "vllm-other"


# --- --from-file -----------------------------------------------------------------------------------
SCRIPT = r"""#!/usr/bin/env bash
set -euo pipefail
# start the server
export CUDA_VISIBLE_DEVICES=0,1
MODEL=/models/Qwen3.6-27B
export PORT=8000
echo "starting $MODEL"
exec vllm serve "$MODEL" \
    --tensor-parallel-size 2 \
    --speculative-config '{"method": "dflash", "model": "/models/drafter", "num_speculative_tokens": 15}' \
    --port "${PORT}" --served-model-name "${NAME:-qwen}" "$@"
"""


def test_a_shell_script_line_with_continuations_exports_and_variables(tmp_path):
    path = tmp_path / "start.sh"
    path.write_text(SCRIPT, encoding="utf-8")
    argv, env, source, notes = read_command_file(str(path), {})
    assert source == f"{path}:8"
    assert env == {"CUDA_VISIBLE_DEVICES": "0,1", "PORT": "8000"}
    assert argv[:4] == ["exec", "vllm", "serve", "/models/Qwen3.6-27B"]
    launch = parse(argv, env=env, source=source)
    args = typed_options(launch)
    assert args["--speculative-config"]["method"] == "dflash" and args["--port"] == 8000
    assert args["--served-model-name"] == "qwen"  # ${NAME:-qwen}
    assert launch.env["CUDA_VISIBLE_DEVICES"] == "0,1" and notes == []


def test_a_one_line_file_and_unresolved_variables_are_noted(tmp_path):
    path = tmp_path / "cmd.txt"
    path.write_text("vllm serve $MODEL_DIR --port 8000\n", encoding="utf-8")
    argv, _, _, notes = read_command_file(str(path), {})
    assert argv == ["vllm", "serve", "$MODEL_DIR", "--port", "8000"]
    assert "MODEL_DIR" in notes[0]


@pytest.mark.parametrize("content, message", [
    ("echo hello\nls\n", "no vLLM launch command"),
    ("vllm serve 'unclosed\n", "cannot split the command line"),
    (b"\x00\x01binary", "binary file"),
])
def test_files_without_a_command(tmp_path, content, message):
    path = tmp_path / "f"
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    with pytest.raises(parser.CommandFileError, match=message):
        read_command_file(str(path), {})


def test_missing_file(tmp_path):
    with pytest.raises(parser.CommandFileError, match="No such file"):
        read_command_file(str(tmp_path / "nope.sh"), {})
