"""GD7xx launch rules: pass, fail and not-applicable cases.

Each case runs the real preflight (``gpudoctor preflight --snapshot MACHINE -- VENV/bin/vllm
serve MODEL …``) on real files — vLLM trees and model folders with real safetensors headers
from tests/fakes/launch_trees.py, machines recorded on real GPUs — and judges the snapshot it
recorded. tests/test_preflight_rules.py has the detailed assertions.
"""

from __future__ import annotations

import io
import json
import os
import socket
import tempfile
from pathlib import Path
from typing import Any, Callable, Dict, Optional

from gpudoctor import cli
from gpudoctor.snapshot import Snapshot

from cases import Case, h200
from fakes.launch_trees import dense_tensors, dflash_drafter, fake_vllm, qwen36_model, replace_in, small_model, write_model

SNAPSHOTS = Path(__file__).resolve().parent.parent / "fixtures" / "snapshots"
H200, H200X2, A100, T4, RTX, MIXED, A100X2, H200X2_BUSY = (str(SNAPSHOTS / n) for n in (
    "h200.json", "h200x2.json", "a100.json", "t4.json", "rtx4090.json", "mixed.json", "a100x2-40gb.json", "h200x2-busy.json"))

_WORLD: Dict[str, Any] = {}


def world() -> Dict[str, Any]:
    """vLLM trees and models shared by every case (built once per test session)."""
    if not _WORLD:
        holder = tempfile.TemporaryDirectory(prefix="gpudoctor-launch-cases-")
        root = Path(holder.name)
        _WORLD.update(holder=holder, home=root / "home", vllm=fake_vllm(root / "venv"),
                      old_vllm=fake_vllm(root / "old-venv", version="0.8.5", layout="old", tool_parsers=("hermes", "llama3_json"),
                                         reasoning_parsers=("deepseek_r1",), spec_methods=("ngram", "medusa", "mlp_speculator", "draft_model"),
                                         eagle_methods=("eagle",), backends=("FLASH_ATTN", "XFORMERS", "FLASHINFER"), dflash_fixed=None,
                                         reads_attention_backend_env=True),
                      vllm033=fake_vllm(root / "venv-033", version="0.33.0", memory="0.33"),
                      vllm034=fake_vllm(root / "venv-034", version="0.34.0", memory="0.34"),
                      small=small_model(root / "models" / "small"), qwen=qwen36_model(root / "models" / "Qwen3.6-27B"),
                      drafter=dflash_drafter(root / "models" / "Qwen3.6-27B-DFlash"))
        # An 8B-class dense model with a 1M-token context: 32 full-attention layers, 8 KV heads of 128.
        _WORLD["long"] = write_model(root / "models" / "long-8b", {
            "architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
            "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256, "max_position_embeddings": 1048576,
            "torch_dtype": "bfloat16"}, dense_tensors(32, 4096, 32, 8, 128, 14336, 128256), shards=4)
        # 0.33.0's default fraction: CacheConfig.gpu_memory_utilization = Field(default=0.92, gt=0, le=1)
        replace_in(Path(_WORLD["vllm033"]).parent.parent / "lib" / "python3.11" / "site-packages" / "vllm" / "config" / "parallel.py",
                   "    gpu_memory_utilization: float = 0.9\n", "    gpu_memory_utilization: float = Field(default=0.92, gt=0, le=1)\n")
        _WORLD["home"].mkdir()
    return _WORLD


def spec(drafter=None, **extra) -> str:
    config = {"method": "dflash", "model": str(drafter or world()["drafter"]), "num_speculative_tokens": 15}
    config.update(extra)
    return json.dumps({k: v for k, v in config.items() if v is not None})


def preflight(machine: Optional[str], model: Any, *flags: Any, vllm: str = "vllm", assign=(), env=None,
              prepare: Optional[Callable[[Path], Any]] = None):
    """The snapshot preflight records for ``[assign…] VENV/bin/vllm serve MODEL flags…`` on ``machine``.
    ``model``/``flags`` may be callables of (tmp, prepared) for files made per case."""
    def build(tmp):
        w = world()
        made = prepare(tmp) if prepare else None
        value = lambda x: str(x(tmp, made)) if callable(x) else (str(w[x]) if isinstance(x, str) and x in ("small", "qwen", "long") else str(x))  # noqa: E731
        argv = ["preflight", "--format", "json"] + (["--snapshot", machine] if machine else ["--timeout", "20"])
        argv += ["--", *assign, str(w[vllm]) if vllm in w else str(made), "serve", value(model), *[value(f) for f in flags]]
        environ = {"PATH": os.environ.get("PATH", ""), "HOME": str(w["home"])}
        environ.update(env(tmp) if callable(env) else env or {})
        out = io.StringIO()
        cli.main(argv, environ=environ, stdout=out, stderr=io.StringIO())
        return Snapshot.from_json(json.loads(out.getvalue())["snapshot"])
    return build


def model_in(tmp_name: str, **config):
    return lambda tmp, made: str(small_model(tmp / tmp_name, **config))


def hf_cache(tmp):
    commit = "a" * 40
    repo = tmp / "hf" / "hub" / "models--org--not-downloaded"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit, encoding="utf-8")
    small_model(repo / "snapshots" / commit)
    return {"HF_HOME": str(tmp / "hf")}


def modelopt(tmp, made):
    folder = small_model(tmp / "modelopt")
    (folder / "hf_quant_config.json").write_text(json.dumps({"quantization": {"quant_algo": "FP8"}}), encoding="utf-8")
    return str(folder)


def drafter_with(**kw):
    return lambda tmp, made: spec(dflash_drafter(tmp / "d", **kw))


def port_held(tmp):
    """A socket listening on 127.0.0.1 for the whole session: GD722 probes this machine live."""
    if "held" not in _WORLD:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        _WORLD["held"] = sock
    return _WORLD["held"].getsockname()[1]


# sglang 0.5.23's own definition of the flag (sglang/srt/arg_groups/fields/schedule.py lines 27-30).
SCHEDULE = '''class Schedule(msgspec.Struct):
    _NS_PATH = "schedule"
    mem_fraction_static: A[
        Optional[float],
        "The fraction of the memory used for static allocation (model weights and KV cache memory pool). Use a smaller value if you see out-of-memory errors.",
    ] = None
'''


def sglang_serve(*flags: str):
    """The facts preflight records for ``sglang serve Qwen/Qwen3-8B flags…`` on the H200, the installed
    SGLang laid out as pip installs 0.5.23 (tests/test_preflight_sglang.py has its other fields)."""
    def build(tmp):
        from gpudoctor.probes.launch import probe
        from fakes.sglang_tree import MODEL, SERVER_ARGS, SERVING
        from fakes.site_packages import SitePackages

        site = SitePackages(tmp / "site")
        site.dist("sglang", "0.5.23", files={
            "sglang/__init__.py": "", "sglang/version.py": '__version__ = "0.5.23"\n', "sglang/srt/server_args.py": SERVER_ARGS,
            "sglang/srt/arg_groups/fields/serving.py": SERVING, "sglang/srt/arg_groups/fields/model.py": MODEL,
            "sglang/srt/arg_groups/fields/schedule.py": SCHEDULE})
        _, facts, _ = probe.inspect(["sglang", "serve", "Qwen/Qwen3-8B", *flags], environ={"PATH": "", "GPUDOCTOR_HUB": "0"},
                                    own_paths=[str(site.path)])  # never the real Hub
        snap = Snapshot.load(H200)
        snap.facts.update(facts)
        return snap
    return build


CUSTOM = dict(architectures=["AcmeForCausalLM"], auto_map={"AutoModelForCausalLM": "modeling_acme.AcmeForCausalLM"})
FP8 = dict(quantization_config={"quant_method": "fp8", "activation_scheme": "dynamic"})
CLEAN = preflight(H200, "small", "--max-model-len", "4096", "--port", "8123")

CASES = [
    Case("no-launch-command", "GD701", h200(), "not_applicable"),
    # GD701 launch-command-invalid
    Case("valid-json-config", "GD701", preflight(H200, "small", "--speculative-config",
                                                 '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}'), "pass"),
    Case("tp-two", "GD701", preflight(H200, "small", "--tensor-parallel-size", "two"), "fail", "error", ("not a valid integer",),
         subject="--tensor-parallel-size", fix_commands=False),
    # GD702 launch-unknown-flag
    Case("known-flags", "GD702", CLEAN, "pass"),
    Case("max-modle-len-typo", "GD702", preflight(H200, "small", "--max-modle-len", "4096"), "fail", "error", ("--max-modle-len",),
         subject="--max-modle-len"),
    # GD703 model-unreadable
    Case("small-model", "GD703", CLEAN, "pass"),
    Case("model-folder-missing", "GD703", preflight(H200, lambda tmp, made: str(tmp / "no-such-model")), "fail", "error",
         ("does not exist",), subject="model"),
    # GD704 model-not-cached-offline
    Case("offline-and-cached", "GD704", preflight(H200, "org/not-downloaded", assign=("HF_HUB_OFFLINE=1",), env=hf_cache), "pass"),
    Case("offline-and-not-cached", "GD704", preflight(H200, "org/not-downloaded", assign=("HF_HUB_OFFLINE=1",)), "fail", "error",
         ("HF offline mode is on", "org/not-downloaded"), subject="model"),
    # GD705 parallel-size-exceeds-gpus
    Case("tp2-on-two-h200", "GD705", preflight(H200X2, "small", "--tensor-parallel-size", "2"), "pass"),
    Case("tp2-on-one-h200", "GD705", preflight(H200, "small", "--tensor-parallel-size", "2"), "fail", "error",
         ("2 GPUs needed, 1 visible",)),
    # GD706 tensor-parallel-does-not-divide-model
    Case("32-heads-over-tp2", "GD706", preflight(H200X2, "small", "--tensor-parallel-size", "2"), "pass"),
    Case("7-heads-over-tp2", "GD706", preflight(H200X2, model_in("odd", num_attention_heads=7, num_key_value_heads=7),
                                                "--tensor-parallel-size", "2"), "fail", "error", subject="attention heads"),
    # GD707 tensor-parallel-group-mixed-gpus
    Case("tp2-over-two-h200", "GD707", preflight(H200X2, "small", "-tp", "2"), "pass"),
    Case("tp2-over-mixed-gpus", "GD707", preflight(MIXED, "small", "--tensor-parallel-size", "2"), "fail", "error"),
    Case("tp1-on-mixed-gpus", "GD707", preflight(MIXED, "small"), "not_applicable"),
    # GD708 gpu-memory-utilization-exceeds-free
    Case("0.89-fits-the-free-memory", "GD708", preflight(A100X2, "small", "-tp", "2", "--gpu-memory-utilization", "0.89"), "pass"),
    Case("0.92-more-than-free", "GD708", preflight(A100X2, "small", "-tp", "2", "--gpu-memory-utilization", "0.92"), "fail", "error",
         subject="GPU 1"),
    # The release decides (its source, read by vllm_memory): 0.33.0's default 0.92 is more than the
    # A100's GPU 1 has free; 0.34.0 turns the extensible KV cache on and skips the check, unless
    # it is turned off (the flag, or --kv-cache-memory-bytes), then with its default 0.92.
    Case("0.33-default-0.92-more-than-free", "GD708", preflight(A100X2, "small", "-tp", "2", vllm="vllm033"), "fail", "error",
         subject="GPU 1", message=("is less than desired GPU memory utilization (0.92, 36.26 GiB)", "Free memory on device cuda:1 (35.8/39.41 GiB)")),
    Case("0.33-default-fits-the-busy-h200", "GD708", preflight(H200X2_BUSY, "small", "-tp", "2", vllm="vllm033"), "pass"),
    Case("0.33-0.98-on-the-busy-h200", "GD708", preflight(H200X2_BUSY, "small", "-tp", "2", "--gpu-memory-utilization", "0.98",
                                                          vllm="vllm033"), "fail", "error", subject="GPU 1",
         message=("Free memory on device cuda:1 (136.2/139.8 GiB) on startup is less than desired GPU memory utilization (0.98, 137.0 GiB)",)),
    Case("0.34-extensible-kv-cache-skips-the-check", "GD708", preflight(A100X2, "small", "-tp", "2", vllm="vllm034"), "not_applicable",
         message=("enable_extensible_kv_cache",)),
    Case("0.34-0.98-with-the-extensible-kv-cache", "GD708", preflight(H200X2_BUSY, "small", "-tp", "2", "--gpu-memory-utilization", "0.98",
                                                                      vllm="vllm034"), "not_applicable"),
    Case("0.34-without-the-extensible-kv-cache", "GD708", preflight(A100X2, "small", "-tp", "2", "--no-enable-extensible-kv-cache",
                                                                    vllm="vllm034"), "fail", "error", subject="GPU 1",
         message=("(0.92, 36.26 GiB)",)),
    Case("0.34-kv-cache-memory-bytes-turns-it-off", "GD708", preflight(A100X2, "small", "-tp", "2", "--kv-cache-memory-bytes", "8G",
                                                                      vllm="vllm034"), "fail", "error", subject="GPU 1"),
    Case("0.34-without-it-at-0.85", "GD708", preflight(A100X2, "small", "-tp", "2", "--no-enable-extensible-kv-cache",
                                                       "--gpu-memory-utilization", "0.85", vllm="vllm034"), "pass"),
    # GD709 weights-exceed-memory-budget
    Case("27b-on-an-h200", "GD709", preflight(H200, "qwen", "--max-model-len", "8192"), "pass"),
    Case("27b-on-an-rtx-4090", "GD709", preflight(RTX, "qwen", "--max-model-len", "8192"), "fail", "error"),
    # GD710 kv-cache-too-small-for-max-model-len
    Case("4k-context", "GD710", preflight(H200, "qwen", "--max-model-len", "8192"), "pass"),
    Case("1m-context-of-an-8b-at-0.8", "GD710", preflight(H200, "long", "--gpu-memory-utilization", "0.8"), "fail", "error"),
    Case("max-model-len-auto", "GD710", preflight(H200, "qwen", "--max-model-len", "auto"), "not_applicable"),
    # GD711 dtype-unsupported-by-gpu
    Case("half-on-a-t4", "GD711", preflight(T4, "small", "--dtype", "half"), "pass"),
    Case("bfloat16-on-a-t4", "GD711", preflight(T4, "small", "--dtype", "bfloat16"), "fail", "error"),
    # GD712 fp8-without-native-support
    Case("fp8-on-ada", "GD712", preflight(RTX, model_in("fp8", **FP8), "--kv-cache-dtype", "fp8"), "pass"),
    Case("fp8-checkpoint-on-ampere", "GD712", preflight(A100, model_in("fp8", **FP8)), "fail", "warning", ("FP8 Marlin",),
         subject="weights", fix_commands=False),
    # GD713 quantization-unsupported-by-gpu
    Case("modelopt-fp8-on-an-h200", "GD713", preflight(H200, modelopt), "pass"),
    Case("modelopt-fp8-on-an-a100", "GD713", preflight(A100, modelopt), "fail", "error",
         ("The quantization method modelopt is not supported for the current GPU. Minimum capability: 89.",), subject="GPU 0",
         fix_commands=False),
    # GD714 attention-backend-unsupported
    Case("flash-attn-on-an-a100", "GD714", preflight(A100, "small", "--attention-backend", "flash_attn"), "pass"),
    Case("flash-attn-on-a-t4", "GD714", preflight(T4, "small", "--dtype", "half", "--attention-backend", "FLASH_ATTN"), "fail",
         "error", ("needs compute capability 8.0+; GPU 0 (Tesla T4) is 7.5",), subject="GPU 0"),
    # GD715 max-model-len-exceeds-context
    Case("4096-of-4096", "GD715", preflight(H200, "small", "--max-model-len", "4096"), "pass"),
    Case("8192-of-4096", "GD715", preflight(H200, "small", "--max-model-len", "8192"), "fail", "error"),
    # GD716 speculative-method-unknown
    Case("dflash-in-a-vllm-that-has-it", "GD716", preflight(H200, "qwen", "--max-model-len", "8192", "--speculative-config",
                                                            lambda tmp, made: spec()), "pass"),
    Case("dflash-in-vllm-0.8.5", "GD716", preflight(H200, "qwen", "--max-model-len", "8192", "--speculative-config",
                                                    lambda tmp, made: spec(), vllm="old_vllm"), "fail", "error", fix_commands=False),
    Case("no-speculation", "GD716", CLEAN, "not_applicable"),
    # GD717 speculative-drafter-unreadable
    Case("drafter-readable", "GD717", preflight(H200, "qwen", "--speculative-config", lambda tmp, made: spec()), "pass"),
    Case("drafter-missing", "GD717", preflight(H200, "qwen", "--speculative-config", lambda tmp, made: spec(tmp / "no-drafter")),
         "fail", "error", ("does not exist",), fix_commands=False),
    # GD718 speculative-target-layers-invalid
    Case("layer-ids-in-range", "GD718", preflight(H200, "qwen", "--speculative-config", lambda tmp, made: spec()), "pass"),
    Case("layer-64-of-64", "GD718", preflight(H200, "qwen", "--speculative-config", drafter_with(target_layer_ids=[1, 17, 33, 49, 64])),
         "fail", "error", subject="range", fix_commands=False),
    # GD719 speculative-method-needs-fixes
    Case("no-speculation", "GD719", CLEAN, "not_applicable"),
    Case("vllm-with-the-dflash-fixes", "GD719", preflight(H200, "qwen", "--speculative-config", lambda tmp, made: spec()), "pass"),
    Case("branch-without-the-dflash-fix", "GD719",
         preflight(H200, "qwen", "--speculative-config", lambda tmp, made: spec(), vllm="made",
                   prepare=lambda tmp: fake_vllm(tmp / "branch", dflash_fixed=False)), "fail", "error", ("PR #40727",),
         subject="PR #40727", fix_commands=False),
    # GD720 num-speculative-tokens-invalid
    Case("block-size-minus-one", "GD720", preflight(H200, "qwen", "--speculative-config", lambda tmp, made: spec()), "pass"),
    Case("zero-tokens", "GD720", preflight(H200, "qwen", "--speculative-config", lambda tmp, made: spec(num_speculative_tokens=0)),
         "fail", "error"),
    # GD721 parser-unknown
    Case("qwen3-parsers-exist", "GD721", preflight(H200, "small", "--enable-auto-tool-choice", "--tool-call-parser", "qwen3_coder",
                                                   "--reasoning-parser", "qwen3"), "pass"),
    Case("qwen3-coder-parser-in-vllm-0.8.5", "GD721",
         preflight(H200, "small", "--enable-auto-tool-choice", "--tool-call-parser", "qwen3_coder", vllm="old_vllm"), "fail", "error",
         ("vLLM 0.8.5 has no such parser",), subject="--tool-call-parser",
         fix_commands=False),
    # GD722 launch-port-taken
    Case("port-free-on-another-address", "GD722",
         preflight(None, "small", "--host", "127.0.0.2", "--port", lambda tmp, made: port_held(tmp)), "pass"),
    Case("port-held-here", "GD722", preflight(None, "small", "--host", "127.0.0.1", "--port", lambda tmp, made: port_held(tmp)),
         "fail", "error", ("is taken",), subject="port *"),
    # GD723 architecture-needs-trust-remote-code
    Case("custom-code-trusted", "GD723", preflight(H200, model_in("custom", **CUSTOM), "--trust-remote-code"), "pass"),
    Case("custom-code-not-trusted", "GD723", preflight(H200, model_in("custom", **CUSTOM)), "fail", "error"),
    # GD724 sglang-mem-fraction-static-out-of-range
    Case("sglang-chooses-it", "GD724", sglang_serve(), "pass"),
    Case("sglang-0.85", "GD724", sglang_serve("--mem-fraction-static", "0.85"), "pass"),
    Case("sglang-1.0", "GD724", sglang_serve("--mem-fraction-static=1"), "pass"),
    Case("sglang-85-meant-as-percent", "GD724", sglang_serve("--mem-frac", "85"), "fail", "error",
         ("--mem-fraction-static 85 sizes the KV cache from more memory than is free",), commands=("--mem-frac 0.85",)),
    Case("sglang-zero", "GD724", sglang_serve("--mem-fraction-static", "0"), "fail", "error",
         ("leaves no GPU memory for the KV cache",)),
    Case("sglang-not-a-number", "GD724", sglang_serve("--mem-fraction-static", "high"), "unknown"),
    Case("a-vllm-command", "GD724", CLEAN, "not_applicable"),
]
