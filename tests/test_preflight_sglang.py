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
from gpudoctor.snapshot import Snapshot, ok
from fakes.site_packages import SitePackages
from fakes.sglang_tree import MODEL, SERVER_ARGS, SERVING

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


# Lines of sglang 0.5.23's fields/model.py and fields/spec.py, for the model checks.
MODEL_MORE = '''
    context_length: A[
        Optional[int],
        Arg(
            help="The model's maximum context length. Defaults to None (will use the value from the model's config.json instead).",
            type_parser=human_readable_int,
        ),
    ] = None
    revision: A[
        Optional[str],
        "The specific model version to use. It can be a branch name, a tag name, or a commit id. If unspecified, will use the default version.",
    ] = None
    dtype: A[
        str,
        Arg(
            help="Data type for model weights and activations.",
            choices=["auto", "half", "float16", "bfloat16", "float", "float32"],
            resolvable=True,
        ),
    ] = "auto"
    ep_dispatch_algorithm: A[
        Optional[Literal["static", "dynamic", "fake", "lp"]],
        "The algorithm to choose ranks for redundant experts in expert parallel.",
    ] = None
'''
SPEC = '''class Spec(msgspec.Struct):
    _NS_PATH = "spec"
    speculative_algorithm: A[
        Optional[str],
        "Speculative algorithm. Builtins: EAGLE, EAGLE3, NEXTN, STANDALONE, NGRAM, DFLASH, DSPARK, UNO.",
    ] = None
    speculative_draft_model_path: A[
        Optional[str],
        Arg(
            help="The path of the draft model weights. This can be a local folder or a Hugging Face repo ID.",
            aliases=["--speculative-draft-model"],
        ),
    ] = None
'''


def install_sglang(site, model_fields: bool = False):
    more = {"sglang/srt/arg_groups/fields/spec.py": SPEC, "sglang/srt/arg_groups/fields/parallel.py": LAYOUT,
            "sglang/srt/arg_groups/fields/device.py": DEVICE} if model_fields else {}
    site.dist("sglang", "0.5.23", files={
        "sglang/__init__.py": "", "sglang/version.py": '__version__ = "0.5.23"\n',
        "sglang/srt/server_args.py": SERVER_ARGS,
        "sglang/srt/arg_groups/fields/__init__.py": "",
        "sglang/srt/arg_groups/fields/serving.py": SERVING,
        "sglang/srt/arg_groups/fields/model.py": MODEL + (MODEL_MORE if model_fields else ""),
        "sglang/srt/arg_groups/fields/parallel.py": PARALLEL,
        **more,
    })


def facts_for(site, *argv):
    _, facts, _ = probe.inspect(list(argv), environ={"PATH": "", "GPUDOCTOR_HUB": "0"}, own_paths=[str(site.path)])  # never the real Hub
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


# sglang 0.5.23's own lines: fields/parallel.py (nnodes, tp_size, pp_size, dp_size, attn_dp_size),
# fields/device.py (base_gpu_id, gpu_id_step) and server_args.py's deprecated --enable-dp-attention.
LAYOUT = '''class Parallel(msgspec.Struct):
    _NS_PATH = "parallel"
    nnodes: A[int, "The number of nodes."] = 1
    node_rank: A[int, "The node rank."] = 0
    tp_size: A[
        int,
        Arg(
            help="The tensor parallelism size.",
            aliases=["--tensor-parallel-size"],
        ),
    ] = 1
    pp_size: A[
        int,
        Arg(
            help="The pipeline parallelism size.",
            aliases=["--pipeline-parallel-size"],
        ),
    ] = 1
    dp_size: A[
        int,
        Arg(
            help="The number of data-parallel replicas of the model.",
            aliases=["--data-parallel-size"],
            resolvable=True,
        ),
    ] = 1
    attn_dp_size: A[
        int,
        Arg(
            help="The attention data parallelism size: the number of "
            "data-parallel attention groups inside the TP group, one scheduler "
            "each, while the FFN stays tensor parallel.",
            aliases=["--attention-data-parallel-size"],
            resolvable=True,
        ),
    ] = 1
'''
DEVICE = '''class Device(msgspec.Struct):
    _NS_PATH = "device"
    base_gpu_id: A[
        int,
        "The base GPU ID to start allocating GPUs from. Useful when running multiple instances on the same machine.",
    ] = 0
    gpu_id_step: A[
        int,
        "The delta between consecutive GPU IDs that are used. For example, setting it to 2 will use GPU 0,2,4,...",
    ] = 1
'''
DP_ATTENTION = '''
        parser.add_argument(
            "--enable-dp-attention",
            action=DeprecatedStoreTrueAction,
            new_flag="--attn-dp-size <dp-size>",
            help="Deprecated. Use --attn-dp-size <dp-size> instead of "
            "--dp-size <dp-size> --enable-dp-attention.",
        )
'''


def gd705(tmp_path, gpus, *flags, env=None):

    site = SitePackages(tmp_path / "site")
    site.dist("sglang", "0.5.23", files={
        "sglang/__init__.py": "", "sglang/version.py": '__version__ = "0.5.23"\n',
        "sglang/srt/server_args.py": SERVER_ARGS + DP_ATTENTION,
        "sglang/srt/arg_groups/fields/serving.py": SERVING, "sglang/srt/arg_groups/fields/model.py": MODEL,
        "sglang/srt/arg_groups/fields/parallel.py": LAYOUT, "sglang/srt/arg_groups/fields/device.py": DEVICE})
    facts = facts_for(site, "sglang", "serve", "Qwen/Qwen3-8B", *flags)
    assert facts["launch.unknown_flags"].value == [], facts["launch.unknown_flags"].value
    snap = snap_of(facts)
    snap.facts["gpu.count"] = ok(gpus, "test")
    for index in range(gpus):
        snap.facts[f"gpu.{index}.name"] = ok("NVIDIA H200", "test")
    if env is not None:
        snap.facts["env"] = ok(env, "test")
    return snap.value("launch.sglang_parallel"), run_rules(snap, [registry.find("GD705")]).outcomes[0]


def test_the_gpus_an_sglang_command_takes_fit_the_visible_ones(tmp_path):
    for gpus, flags in ((1, ()), (2, ("--tp", "2")), (8, ("--tp-size", "8", "--dp", "8", "--enable-dp-attention")),
                        (8, ("--tp", "4", "--attn-dp-size", "4", "--pp-size", "2")), (4, ("--tp", "2", "--data-parallel-size", "2")),
                        (4, ("--tp", "2", "--base-gpu-id", "2")), (2, ("--tp", "4", "--nnodes", "2", "--node-rank", "1"))):
        layout, outcome = gd705(tmp_path / f"ok{len(flags)}{gpus}", gpus, *flags)
        assert outcome.status == "pass", (flags, layout, [f.message for f in outcome.findings])


def test_more_gpus_than_visible_is_an_error(tmp_path):
    layout, outcome = gd705(tmp_path / "a", 1, "--tp", "2")
    [finding] = outcome.findings
    assert finding.message == "TP 2 × PP 1 = 2 GPUs: SGLang's schedulers would use GPU index 1, and 1 are visible"
    # the flag is edited where it was typed (--tp abbreviates --tp-size), not appended after it
    assert finding.fix.commands[-1].endswith(" --tp 1") and "--tp-size" not in finding.fix.commands[-1]
    # DP replicas each take TP × PP GPUs (data_parallel_controller.py), unlike attention DP.
    layout, outcome = gd705(tmp_path / "b", 4, "--tp", "2", "--dp-size", "4")
    assert layout["gpus"] == 8 and outcome.findings[0].message.startswith("TP 2 × PP 1 × DP 4 = 8 GPUs")
    # --base-gpu-id and --gpu-id-step move the GPUs it takes.
    layout, outcome = gd705(tmp_path / "c", 4, "--tp", "2", "--base-gpu-id", "3")
    assert layout["highest"] == 4 and outcome.findings[0].message.startswith("TP 2 × PP 1 = 2 GPUs, from GPU 3 in steps of 1")
    layout, outcome = gd705(tmp_path / "d", 4, "--tp", "4", "--gpu-id-step", "2")
    assert layout["highest"] == 6 and outcome.findings
    # What is not a plain integer is the parser's to refuse, not judged here.
    layout, outcome = gd705(tmp_path / "e", 4, "--tp", "two")
    assert outcome.status == "unknown" and "not an integer" in outcome.reason


# --- the model and the drafter (issue 25: preflight of SGLang checked no model) ----------------------
QWEN3_8B = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "num_attention_heads": 32, "num_key_value_heads": 8,
            "num_hidden_layers": 36, "hidden_size": 4096, "max_position_embeddings": 40960, "torch_dtype": "bfloat16",
            "vocab_size": 151936, "head_dim": 128}


def model_dir(tmp_path, config=QWEN3_8B):
    import json

    folder = tmp_path / "Qwen3-8B"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}      ")
    return str(folder)


def judged(tmp_path, rule_id, *flags, model=None):
    site = SitePackages(tmp_path / "site")
    install_sglang(site, model_fields=True)
    path = model or model_dir(tmp_path)
    facts = facts_for(site, "sglang", "serve", "--model-path", path, *flags)
    snap = snap_of(facts)
    snap.facts["gpu.count"] = ok(8, "test")
    for index in range(8):
        snap.facts[f"gpu.{index}.name"] = ok("NVIDIA H200", "test")
    return facts, run_rules(snap, [registry.find(rule_id)]).outcomes[0]


def test_the_models_heads_against_the_tp_size(tmp_path):
    facts, outcome = judged(tmp_path / "a", "GD706", "--tp", "3")
    assert facts["model.config"].ok and facts["model.config"].value["num_attention_heads"] == 32
    [finding] = outcome.findings
    assert finding.message.startswith('SGLang stops building the attention layers with "AssertionError: 32 is not divisible by 3"')
    assert finding.fix.commands[0].endswith("--tp 2")  # edited where it was typed: --tp abbreviates --tp-size
    for tp in ("1", "2", "4", "8"):
        assert judged(tmp_path / f"ok{tp}", "GD706", "--tp-size", tp)[1].status == "pass", tp
    # 8 KV heads over TP 16: each replicated twice (16 % 8 == 0), as SGLang does
    assert judged(tmp_path / "kv", "GD706", "--tensor-parallel-size", "16")[1].status == "pass"


def test_the_context_length_against_the_models_as_sglang_parses_it(tmp_path):
    _, outcome = judged(tmp_path / "a", "GD715", "--context-length", "128k")
    [finding] = outcome.findings
    assert finding.severity == "error" and "--context-length 128000 is more than the model's 40960" in finding.message
    assert 'greater than the derived context_length (40960)' in finding.message
    assert finding.fix.commands[0].endswith("--context-length 40960")
    assert judged(tmp_path / "b", "GD715", "--context-length", "40Ki")[1].status == "pass"  # 40960: SGLang's IEC suffix
    assert judged(tmp_path / "c", "GD715")[1].status == "not_applicable"
    # YaRN with original_max_position_embeddings: SGLang keeps max_position_embeddings (no factor)
    yarn = dict(QWEN3_8B, rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768})
    model = model_dir(tmp_path / "y", yarn)
    assert judged(tmp_path / "d", "GD715", "--context-length", "131072", model=model)[1].status == "fail"


def test_a_missing_model_or_drafter_is_named_with_sglangs_flag(tmp_path):
    _, outcome = judged(tmp_path / "a", "GD703", model=str(tmp_path / "nowhere"))
    [finding] = outcome.findings
    assert "does not exist" in finding.message and "SGLang would then try it as a Hugging Face repo id" in finding.message
    _, outcome = judged(tmp_path / "b", "GD717", "--speculative-algorithm", "EAGLE3", "--speculative-draft-model", str(tmp_path / "nodraft"))
    [finding] = outcome.findings
    assert "does not exist" in finding.message and "--speculative-draft-model-path" in finding.fix.summary
    assert judged(tmp_path / "c", "GD717")[1].status == "not_applicable"


def test_values_sglangs_parser_refuses_are_blocked_in_its_words(tmp_path):
    """GD701 for SGLang: types and choices of its fields, read from its source (the real parser's
    verdicts on 474 commands are in tests/real/test_sglang_values_oracle.py)."""
    _, outcome = judged(tmp_path / "a", "GD701", "--tp", "two", "--dtype", "bfloat17", "--context-length", "4kk",
                        "--ep-dispatch-algorithm", "random", "--tp-size=-1")
    messages = [f.message for f in outcome.findings]
    assert messages[0] == ("--tp 'two': SGLang's parser exits with \"argument --tp-size/--tensor-parallel-size: invalid int value: "
                           "'two'\" (a usage error, exit status 2) before anything starts")
    assert "invalid choice: 'bfloat17' (choose from 'auto', 'half', 'float16', 'bfloat16', 'float', 'float32')" in messages[1]
    assert "invalid human_readable_int value: '4kk'" in messages[2]
    assert "invalid choice: 'random'" in messages[3]  # Optional[Literal[...]]: its choices
    assert len(messages) == 4  # -1 is an int (the parser's range checks come later, not here)
    _, outcome = judged(tmp_path / "b", "GD701", "--tp", "2", "--dtype", "bfloat16", "--context-length", "32Ki",
                        "--ep-dispatch-algorithm", "lp")
    assert outcome.status == "pass"
