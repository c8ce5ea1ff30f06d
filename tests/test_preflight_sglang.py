"""preflight of SGLang commands: `sglang serve …` and `python -m sglang.launch_server …` are recognised, their
flags checked against the installed SGLang's own definitions (read from its source, never imported).

The SGLang tree is laid out as pip installs sglang 0.5.23 (dist-info + files); the argument definitions are
lines of that wheel: sglang/srt/arg_groups/fields/serving.py (host, port), model.py (model_path and its
alias), parallel.py (tp_size with --tensor-parallel-size, enable_tp_lm_head_all_to_all with
argparse.BooleanOptionalAction, a no_cli field) and server_args.py's ServerArgs.add_cli_args (--config).
"""

from __future__ import annotations

from gpudoctor import registry
from gpudoctor.engine import run_rules
from gpudoctor.gates import preflight_notes
from gpudoctor.probes.launch import parser, probe, sglang_args
from gpudoctor.render.launch import headline
from gpudoctor.snapshot import Snapshot
from test_pystack_env import SitePackages

SERVING = '''from __future__ import annotations

import msgspec

from sglang.srt.arg_groups.arg_utils import A, Arg


class Serving(msgspec.Struct):
    """Namespace ``serving``."""

    _NS_PATH = "serving"
    host: A[str, "The host of the HTTP server."] = "127.0.0.1"
    port: A[int, "The port of the HTTP server."] = 30000
'''
MODEL = '''class Model(msgspec.Struct):
    _NS_PATH = "model"
    model_path: A[
        str,
        Arg(
            help="The path of the model weights. This can be a local folder or a Hugging Face repo ID.",
            aliases=["--model"],
        ),
    ]
'''
PARALLEL = '''class Parallel(msgspec.Struct):
    _NS_PATH = "parallel"
    tp_size: A[
        int,
        Arg(
            help="The tensor parallelism size.",
            aliases=["--tensor-parallel-size"],
        ),
    ] = 1
    enable_tp_lm_head_all_to_all: A[
        Optional[bool],
        Arg(
            help="Use all-to-all instead of TP all-gather followed by DP scatter ",
            action=argparse.BooleanOptionalAction,
            resolvable=True,
        ),
    ] = None
    disable_cuda_graph: A[bool, Arg(help="Disable cuda graph.", no_cli=True)] = False
    tp_rank: int = 0
'''
SERVER_ARGS = '''class ServerArgs:
    @staticmethod
    def add_cli_args(parser: argparse.ArgumentParser):

        add_cli_args_from_dataclass(parser, ServerArgs)

        # --- Configuration file support ---
        parser.add_argument(
            "--config",
            type=str,
            help="Read CLI options from a config file. Must be a YAML file with configuration options.",
        )
'''


def install_sglang(site):
    site.dist("sglang", "0.5.23", files={
        "sglang/__init__.py": "", "sglang/version.py": '__version__ = "0.5.23"\n',
        "sglang/srt/server_args.py": SERVER_ARGS,
        "sglang/srt/arg_groups/fields/__init__.py": "",
        "sglang/srt/arg_groups/fields/serving.py": SERVING,
        "sglang/srt/arg_groups/fields/model.py": MODEL,
        "sglang/srt/arg_groups/fields/parallel.py": PARALLEL,
    })


def facts_for(site, *argv):
    _, facts, _ = probe.inspect(list(argv), environ={"PATH": ""}, own_paths=[str(site.path)])
    return facts


def snap_of(facts):
    return Snapshot(dict(facts))


def test_sglang_commands_are_recognised():
    assert parser.classify(["sglang", "serve", "m"])[0] == "sglang-serve"
    assert parser.classify(["/opt/venv/bin/sglang", "serve", "--model-path", "m"])[:2] == ("sglang-serve", "/opt/venv/bin/sglang")
    assert parser.classify(["python3", "-m", "sglang.launch_server", "--model-path", "m"])[0] == "sglang-serve"
    assert parser.classify(["sglang", "version"])[0] == "sglang-other"
    assert parser.classify(["vllm", "serve", "m"])[0] == "vllm-serve"


def test_flags_are_read_from_sglangs_source(tmp_path):
    site = SitePackages(tmp_path / "site")
    install_sglang(site)
    read = sglang_args.read_flags(str(site.path / "sglang"))
    assert read["problems"] == []
    assert read["flags"] == sorted(["--host", "--port", "--model-path", "--model", "--tp-size", "--tensor-parallel-size",
                                    "--enable-tp-lm-head-all-to-all", "--no-enable-tp-lm-head-all-to-all", "--config",
                                    "--model-type", "-h", "--help"])
    assert read["defaults"]["--port"] == 30000


def test_unknown_flags_with_did_you_mean_and_argparse_abbreviations(tmp_path):
    site = SitePackages(tmp_path / "site")
    install_sglang(site)
    facts = facts_for(site, "sglang", "serve", "Qwen/Qwen3-8B", "--tp", "2", "--tensor-parallel-sise", "2",
                      "--no-enable-tp-lm-head-all-to-all", "--disable-cuda-graph", "--mod", "x")
    assert facts["launch.kind"].value == "sglang-serve"
    assert facts["launch.sglang"].ok and facts["launch.sglang"].value["version"] == "0.5.23"
    assert facts["launch.model"].value == "Qwen/Qwen3-8B"
    assert facts["launch.port"].value["port"] == 30000  # SGLang's default, read from serving.py
    unknown = facts["launch.unknown_flags"].value
    assert [(u["flag"], u.get("suggestion"), u.get("ambiguous")) for u in unknown] == [
        ("--tensor-parallel-sise", "--tensor-parallel-size", None),
        ("--disable-cuda-graph", None, None),  # no_cli: no such flag
        ("--mod", None, ["--model", "--model-path", "--model-type"]),
    ]
    snap = snap_of(facts)
    outcome = run_rules(snap, [registry.find("GD702")]).outcomes[0]
    messages = [f.message for f in outcome.findings]
    assert messages[0] == ("SGLang 0.5.23 does not define --tensor-parallel-sise (did you mean --tensor-parallel-size?): "
                           "`sglang serve` exits with \"unrecognized arguments: --tensor-parallel-sise\"")
    assert messages[2].startswith("--mod is an ambiguous abbreviation for SGLang 0.5.23 (--model, --model-path, --model-type)")
    assert headline(snap) == "SGLang server Qwen/Qwen3-8B · port 30000 · SGLang 0.5.23"
    [note] = preflight_notes(snap)
    assert note.startswith("SGLang server command: flags checked against SGLang 0.5.23's server arguments (12 flags")


def test_launch_server_takes_no_positional_and_a_correct_command_passes(tmp_path):
    site = SitePackages(tmp_path / "site")
    install_sglang(site)
    facts = facts_for(site, "python3", "-m", "sglang.launch_server", "Qwen/Qwen3-8B", "--port", "30001")
    assert facts["launch.model"].status == "absent"
    assert facts["launch.port"].value["port"] == 30001
    assert facts["launch.unknown_flags"].value[0]["suggestion"] == "--model-path Qwen/Qwen3-8B"
    facts = facts_for(site, "python3", "-m", "sglang.launch_server", "--model-path", "Qwen/Qwen3-8B", "--tensor-parallel", "2")
    assert facts["launch.unknown_flags"].value == []
    assert run_rules(snap_of(facts), [registry.find("GD702")]).outcomes[0].status == "pass"


def test_without_sglang_installed_it_says_so_visibly(tmp_path):
    site = SitePackages(tmp_path / "site")
    facts = facts_for(site, "sglang", "serve", "m")
    assert facts["launch.sglang"].status == "absent"
    snap = snap_of(facts)
    assert run_rules(snap, [registry.find("GD702")]).outcomes[0].status == "unknown"
    [note] = preflight_notes(snap)
    assert note.startswith("SGLang server command: its flags were NOT checked: SGLang is not installed where the command runs")
    assert headline(snap).endswith("SGLang not found")
