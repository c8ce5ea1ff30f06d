"""preflight's reading of an SGLang command's GPUs (GD705) and --mem-fraction-static (GD724) on the real
wheels' source, never imported: every field it reads is one sglang 0.5.23 defines, with the defaults
its source gives, and on releases whose arguments are declared another way (0.5.17, before the
``srt/arg_groups/fields`` namespaces) it says it cannot tell instead of judging with defaults.
"""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import realenv  # noqa: E402

from gpudoctor.probes.launch import sglang_args  # noqa: E402

pytestmark = pytest.mark.real


def read(version):
    python = realenv.release_venv(version, engine="sglang")
    return sglang_args.read_flags(str(python.parent.parent / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
                                      / "site-packages" / "sglang"))


def test_the_fields_it_reads_are_sglangs_own():
    flags = read("0.5.23")
    assert flags["problems"] == []
    assert set(sglang_args.LAYOUT_FIELDS) | {"mem_fraction_static"} <= set(flags["fields"].values())
    assert {k: flags["field_defaults"][k] for k in sglang_args.LAYOUT_FIELDS} == {
        "tp_size": 1, "pp_size": 1, "dp_size": 1, "attn_dp_size": 1, "nnodes": 1, "base_gpu_id": 0, "gpu_id_step": 1}
    assert "--enable-dp-attention" in flags["flags"]
    cases = {("--tp", "8", "--dp", "8", "--enable-dp-attention"): (8, 7), ("--tensor-parallel-size", "2", "--data-parallel-size", "2"): (4, 3),
             ("--tp", "4", "--attention-data-parallel-size", "4"): (4, 3), ("--tp", "2", "--base-gpu-id", "6"): (2, 7),
             ("--pp-size", "2", "--tp", "2", "--gpu-id-step", "2"): (4, 4)}
    for words, (gpus, highest) in cases.items():
        layout = sglang_args.parallel_layout(["Qwen/Qwen3-8B", *words], flags)
        assert (layout["gpus"], layout["highest"]) == (gpus, highest), (words, layout)
    assert sglang_args.mem_fraction(["m", "--mem-fraction-static", "0.88"], flags) == {"typed": "0.88", "value": 0.88, "defined": True}
    # the model and speculative fields preflight reads (GD703, GD706, GD715, GD717), as 0.5.23 spells them
    assert set(sglang_args.MODEL_FIELDS) <= set(flags["fields"].values())
    settings = sglang_args.model_settings(["m", "--context-len", "32Ki", "--speculative-draft-model", "d", "--speculative-num-steps",
                                            "3", "--trust-remote-code"], flags)
    assert (settings["context_length"], settings["speculative_draft_model_path"], settings["speculative_num_steps"],
            settings["trust_remote_code"]) == (32768, "d", 3, True)
    assert sglang_args.spelled_as(["m", "--tp", "2", "--context-len", "4k", "--tp-size", "2"], flags) == {
        "--tp": "--tp-size", "--context-len": "--context-length"}


@pytest.mark.parametrize("version", ["0.5.17", "0.5.12"])
def test_the_older_layouts_of_its_arguments_are_read_too(version):
    """0.5.17 declares ``A[…]`` fields on ServerArgs in server_args.py, 0.5.12 ``parser.add_argument`` calls
    (its from_cli_args renames tensor_parallel_size to tp_size): both read, with the defaults in their source."""
    flags = read(version)
    assert flags["problems"] == [] and len(flags["flags"]) > 350
    assert {k: flags["field_defaults"][k] for k in ("tp_size", "pp_size", "dp_size", "nnodes", "base_gpu_id", "gpu_id_step")} == {
        "tp_size": 1, "pp_size": 1, "dp_size": 1, "nnodes": 1, "base_gpu_id": 0, "gpu_id_step": 1}
    assert flags["defaults"]["--port"] == 30000
    layout = sglang_args.parallel_layout(["m", "--tensor-parallel-size", "4", "--dp", "2"], flags)
    assert (layout["gpus"], layout["highest"]) == (8, 7), layout
    assert sglang_args.mem_fraction(["m", "--mem-fraction-static", "85"], flags) == {"typed": "85", "value": 85.0, "defined": True}
    assert sglang_args.model_settings(["m", "--context-length", "32k"], flags)["context_length"] == 32000
