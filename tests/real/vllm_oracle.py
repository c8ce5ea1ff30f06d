"""Runs INSIDE a venv holding a real vLLM (+ CPU torch), under VLLM_TARGET_DEVICE=cpu: vLLM's own
parser decides which `vllm serve` commands it refuses. Never imported by gpudoctor or the tests;
tests/real/test_vllm_releases.py runs it as a child process.

    python vllm_oracle.py corpus OUT.json           # commands built from every action it defines
    python vllm_oracle.py judge < commands.json     # [{"argv": [...], "refused": bool, "why": str}]

"Refused" means what vLLM does with the command before it loads a model:
1. its argparse parser (`vllm serve` = FlexibleArgumentParser subparser + make_arg_parser) exits;
2. `validate_parsed_serve_args` raises;
3. a value the config class refuses when vLLM builds it: pydantic's validation of that one field
   (`__pydantic_validator__.validate_assignment`: `Field(gt=0, le=1)` ranges, field validators such
   as CacheConfig's kv-cache dtype check), a JSON config object with a key its dataclass does not
   have (pydantic extra="forbid" / a plain dataclass's __init__), and `--quantization` outside
   QUANTIZATION_METHODS (ModelConfig._verify_quantization).
"""

import argparse
import contextlib
import dataclasses
import io
import json
import sys
import typing


def _import_parser():
    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:
        from vllm.utils import FlexibleArgumentParser
    try:
        from vllm.entrypoints.common.cli_args import make_arg_parser, validate_parsed_serve_args
    except ImportError:
        from vllm.entrypoints.openai.cli_args import make_arg_parser, validate_parsed_serve_args
    return FlexibleArgumentParser, make_arg_parser, validate_parsed_serve_args


def build():
    flexible, make, validate = _import_parser()
    top = flexible(prog="vllm")
    subs = top.add_subparsers(dest="subparser")
    serve = subs.add_parser("serve", prog="vllm serve")
    if "model_tag" not in make.__code__.co_consts:  # 0.8: cli/serve.py adds the positional first
        serve.add_argument("model_tag", type=str, nargs="?")
    make(serve)
    return top, serve, validate


def config_classes():
    import vllm.config as config

    out = []
    for name in dir(config):
        obj = getattr(config, name)
        if isinstance(obj, type) and dataclasses.is_dataclass(obj) and name.endswith("Config"):
            out.append(obj)
    return out


def _dataclass_of(hint):
    if dataclasses.is_dataclass(hint):
        return hint
    for arg in typing.get_args(hint):
        found = _dataclass_of(arg)
        if found:
            return found
    return None


def json_config_classes():
    """dest -> the config dataclass a JSON flag becomes (VllmConfig's fields)."""
    import vllm.config as config

    out = {}
    vllm_config = getattr(config, "VllmConfig", None)
    if vllm_config is None:
        return out
    try:
        hints = typing.get_type_hints(vllm_config)
    except Exception:
        hints = {f.name: f.type for f in dataclasses.fields(vllm_config)}
    for name, hint in hints.items():
        cls = _dataclass_of(hint)
        if cls is not None:
            # pydantic dataclasses ignore unknown keys unless extra="forbid" (0.33's @config sets
            # it); a plain dataclass's __init__ refuses them.
            if hasattr(cls, "__pydantic_config__"):
                if (cls.__pydantic_config__ or {}).get("extra") == "forbid":
                    out[name] = cls
            else:
                out[name] = cls
    return out


def spec_shortcuts():
    """dest -> SpeculativeConfig key of the --spec-method / --spec-model / --spec-tokens shortcuts, read
    from EngineArgs.create_speculative_config's own `("--spec-tokens", "num_speculative_tokens",
    self.spec_tokens)` table (0.34); vLLM builds a SpeculativeConfig from them, which validates them."""
    import inspect
    import re

    try:
        from vllm.engine.arg_utils import EngineArgs

        text = inspect.getsource(EngineArgs.create_speculative_config)
    except Exception:
        return {}
    return {dest: key for _, key, dest in re.findall(r'\(\s*"(--spec-[\w-]+)",\s*"(\w+)",\s*self\.(\w+)\s*\)', text)}


class Judge:
    def __init__(self):
        self.top, self.serve, self.validate = build()
        self.classes = config_classes()
        self.json_classes = json_config_classes()
        self.instances = {}
        self.spec_shortcuts = spec_shortcuts()
        try:
            from vllm.model_executor.layers.quantization import QUANTIZATION_METHODS
            self.quantization = list(QUANTIZATION_METHODS)
        except Exception:
            self.quantization = None

    def instance(self, cls):
        if cls not in self.instances:
            try:
                with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                    self.instances[cls] = cls()
            except Exception:
                self.instances[cls] = None
        return self.instances[cls]

    def owner(self, dest):
        """The config class a flag belongs to: vLLM adds each class's flags to an argument group
        titled with the class's name (add_argument_group(title="ModelConfig")); None if not one."""
        if not hasattr(self, "_owners"):
            by_name = {cls.__name__: cls for cls in self.classes}
            self._owners = {}
            for group in self.serve._action_groups:
                fields = getattr(by_name.get(group.title), "__pydantic_fields__", None) or {}
                for action in group._group_actions:
                    # only where that class has the field (the "OffloadConfig" group's --cpu-offload-gb is
                    # UVAOffloadConfig's field)
                    if any(action.dest == f or action.dest.endswith("_" + f) and len(f) > 6 for f in fields):
                        self._owners[action.dest] = group.title
        return self._owners.get(dest)

    def field_refusal(self, dest, value, args=None):
        owner = self.owner(dest)
        for cls in self.classes:
            built = BUILT_ONLY_WHEN.get(cls.__name__)
            if built is not None and not built(args):
                continue  # vLLM never builds this class for this command: its ranges are not checked
            if owner is not None and cls.__name__ != owner and dest not in self.spec_shortcuts:
                continue  # --max-model-len is ModelConfig's, not SpeculativeConfig's field of that name
            fields = getattr(cls, "__pydantic_fields__", None)
            validator = getattr(cls, "__pydantic_validator__", None)
            if not fields or validator is None:
                continue
            # EngineArgs' dest is the config field's name, or ends with it (kv_cache_dtype -> cache_dtype),
            # or is one --spec-* shortcut create_speculative_config copies into a SpeculativeConfig key.
            name = dest if dest in fields else next((f for f in fields if dest.endswith("_" + f) and len(f) > 6), None)
            if dest in self.spec_shortcuts:
                name = self.spec_shortcuts[dest] if cls.__name__ == "SpeculativeConfig" else None
            if name is None:
                continue
            obj = self.instance(cls)
            if obj is None:
                # A class that cannot be built with defaults: its field's type and constraints alone.
                try:
                    from typing import Annotated
                    from pydantic import TypeAdapter

                    info = fields[name]
                    # Annotated needs a type and at least one annotation: a field without
                    # constraints (VllmConfig.optimization_level, an IntEnum) is its annotation alone.
                    hint = Annotated[(info.annotation, *info.metadata)] if info.metadata else info.annotation
                    TypeAdapter(hint).validate_python(value)
                except Exception as exc:
                    if type(exc).__name__ == "ValidationError":
                        return f"{cls.__name__}.{name}: {str(exc).splitlines()[-2 if len(str(exc).splitlines()) > 1 else -1][:200]}"
                continue
            dest_saved, dest = dest, name
            try:
                validator.validate_assignment(obj, dest, value)
            except Exception as exc:
                errors = getattr(exc, "errors", None)
                try:
                    locs = [e.get("loc", ()) for e in errors()] if errors else []
                except Exception:
                    locs = []
                if any(loc[:1] == (dest,) for loc in locs):
                    return f"{cls.__name__}.{dest}: {str(exc).splitlines()[-2 if len(str(exc).splitlines()) > 1 else -1][:200]}"
            finally:
                self.instances.pop(cls, None)  # validate_assignment may have changed it
                dest = dest_saved
        return None

    def startup_refusal(self, dest, value, args):
        """Names vLLM looks up in its registries at startup (before loading a model)."""
        if not isinstance(value, str) or not value:
            return None
        registry = None
        if dest == "spec_method":  # 0.34: SpeculativeConfig raises "Unsupported speculative method" for a name
            try:                   # neither in _CONFIG_BY_METHOD nor registered by a plugin
                from vllm.v1.worker.gpu.spec_decode import speculator_config as speculators
            except Exception:
                return None
            known = set(getattr(speculators, "_CONFIG_BY_METHOD", {})) | set(getattr(speculators, "_CUSTOM_CONFIGS", {}))
            return None if not known or value in known else f"Unsupported speculative method: '{value}'"
        if dest == "reasoning_parser":
            try:
                from vllm.reasoning import ReasoningParserManager as registry
            except Exception:
                return None
        elif dest == "tool_call_parser" and getattr(args, "enable_auto_tool_choice", False):
            try:
                from vllm.tool_parsers import ToolParserManager as registry
            except Exception:
                try:
                    from vllm.entrypoints.openai.tool_parsers import ToolParserManager as registry
                except Exception:
                    return None
        elif dest == "attention_backend":
            for module in ("vllm.v1.attention.backends.registry", "vllm.attention.backends.registry"):
                try:
                    enum = getattr(__import__(module, fromlist=["AttentionBackendEnum"]), "AttentionBackendEnum")
                except Exception:
                    continue
                names = {m.name for m in enum}
                return None if value.upper() in names else f"unknown attention backend {value}"
            return None
        if registry is None:
            return None
        names = None
        for attr in ("list_registered", "get_registered"):
            if hasattr(registry, attr):
                try:
                    names = set(getattr(registry, attr)())
                except Exception:
                    names = None
        if names is None:
            for attr in ("reasoning_parsers", "tool_parsers", "lazy_parsers"):
                names = (names or set()) | set(getattr(registry, attr, {}) or {})
        return None if not names or value in names else f"{dest} {value} is not registered"

    def combination_refusal(self, args):
        """Cross-field checks of the config classes vLLM builds from these flags (ParallelConfig's
        "NUMA binding lists cannot be combined with numa_bind=False.", ObservabilityConfig's …): each
        class that can be built here with its defaults (and that vLLM builds for this command) is built
        with the command's own values for its fields. (refused, why); refused None: a refusal about
        this CPU platform ("only supported on CUDA …"), so what vLLM does on a GPU is not known."""
        given = {dest: value for dest, value in vars(args).items()
                 if value is not None and value != self.serve.get_default(dest)}
        for cls in self.classes:
            fields = getattr(cls, "__pydantic_fields__", None)
            built = BUILT_ONLY_WHEN.get(cls.__name__)
            if not fields or built is not None and not built(args) or self.instance(cls) is None:
                continue
            kwargs = {dest: value for dest, value in given.items() if dest in fields and self.owner(dest) in (None, cls.__name__)}
            if len(kwargs) < 1:
                continue
            try:
                with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                    cls(**kwargs)
            except Exception as exc:
                text = str(exc)
                if type(exc).__name__ == "ValidationError" and "Value error" in text:
                    line = next((x for x in text.splitlines() if "Value error" in x), text)
                    if "supported on" in line:  # about this CPU platform: what CUDA does is not known here
                        return None, f"{cls.__name__}: {line.strip()[:200]} (on this CPU platform)"
                    return True, f"{cls.__name__}: {line.strip()[:200]}"
        return False, ""

    def judge(self, argv):
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                args = self.top.parse_args(["serve", *argv])
        except SystemExit:
            return True, "argparse: " + err.getvalue().strip().splitlines()[-1][:300] if err.getvalue().strip() else "argparse"
        except Exception as exc:
            return True, f"parse_args raised {type(exc).__name__}: {exc}"[:300]
        try:
            with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
                self.validate(args)
        except Exception as exc:
            return True, f"validate_parsed_serve_args: {exc}"[:300]
        for dest, value in vars(args).items():
            default = self.serve.get_default(dest)
            if value == default or value is None:
                continue
            startup = self.startup_refusal(dest, value, args)
            if startup:
                return True, startup
            if dest == "quantization" and self.quantization is not None and isinstance(value, str) \
                    and value not in self.quantization:
                return True, f"ModelConfig: Unknown quantization method: {value}"
            cls = self.json_classes.get(dest)
            if cls is not None and isinstance(value, dict):
                names = {f.name for f in dataclasses.fields(cls)}
                extra = sorted(k for k in value if k not in names)
                if extra:
                    return True, f"{cls.__name__}: unknown keys {extra}"
            if isinstance(value, (int, float, str)) and not isinstance(value, bool):
                why = self.field_refusal(dest, value, args)
                if why:
                    return True, why
        refused, why = self.combination_refusal(args)
        if refused is not False:
            return refused, why  # True, or None: not decidable on this platform
        return False, ""


# Config classes vLLM builds only under a condition (0.33.0 and 0.34.0 source; 0.11 and 0.20 the same
# shape): MultiModalConfig in ModelConfig.__post_init__ under `if self._model_info.supports_multimodal`
# (vllm/config/model.py) — MODEL is a text model, so never; LoRAConfig in create_engine_config as
# `LoRAConfig(...) if self.enable_lora else None` (vllm/engine/arg_utils.py).
BUILT_ONLY_WHEN = {
    "MultiModalConfig": lambda args: False,
    "LoRAConfig": lambda args: bool(getattr(args, "enable_lora", False)),
}
CANDIDATES = ["2", "1", "0.5", "{}", "auto", "x", "true", "[]", "none"]
MODEL = "facebook/opt-125m"


def _accepted_value(judge, action):
    """The first candidate value vLLM accepts for this action (None: a switch; False: none)."""
    opt = action.option_strings[0]
    if action.nargs == 0:
        return None if not judge.judge([MODEL, opt])[0] else False
    choices = [str(c) for c in (action.choices or []) if c is not None]
    for text in choices[:1] + CANDIDATES:
        words = [text] * action.nargs if isinstance(action.nargs, int) else [text]
        if not judge.judge([MODEL, opt, *words])[0]:
            return words
    return False


def _typo(opt):
    return opt[:-1] + ("x" if opt[-1] != "x" else "y") + "z"


def corpus(judge):
    """Commands built from every action vLLM's serve parser defines: each option string with a
    value it accepts, and mutations of it."""
    commands = []

    def add(kind, argv):
        refused, why = judge.judge(argv)
        commands.append({"kind": kind, "argv": argv, "refused": refused, "why": why})

    for action in judge.serve._actions:
        if not action.option_strings or isinstance(action, argparse._HelpAction):
            continue
        value = _accepted_value(judge, action)
        longs = [o for o in action.option_strings if o.startswith("--")] or action.option_strings
        opt = longs[0]
        if value is False:
            add("no-valid-value", [MODEL, opt, "x"])
            continue
        for name in action.option_strings:
            add("valid", [MODEL, name, *(value or [])])
        add("typo", [MODEL, _typo(opt), *(value or [])])
        if value is None:
            add("switch-with-value", [MODEL, f"{opt}=maybe"])
            continue
        add("missing-value", [MODEL, opt])
        choices = [c for c in (action.choices or []) if c is not None]
        if choices:
            add("bad-choice", [MODEL, opt, f"{choices[0]}x"])
        type_name = getattr(action.type, "__name__", "") or ""
        if value[0] in ("2", "1", "0.5"):
            add("wrong-type", [MODEL, opt, "abc"])
            for number in ("0", "-1", "1.5", "100000000000"):
                add("number", [MODEL, opt, number])
        if value[0] in ("{}", "[]") or "json" in type_name or action.dest in judge.json_classes:
            add("bad-json", [MODEL, opt, '{"a": '])
            if action.dest in judge.json_classes:
                add("bad-key", [MODEL, opt, '{"no_such_key_xyz": 1}'])
    for extra in (["--dtype", "bfloat17"], ["--quantization", "awq_marlinn"], ["--kv-cache-dtype", "fp8_e5m2x"],
                  ["--gpu-memory-utilization", "1.5"], ["-tp", "0"], ["--tool-call-parser", "hermes"],
                  ["--enable-auto-tool-choice"], ["--enable-auto-tool-choice", "--tool-call-parser", "hermes"],
                  # ranges vLLM checks only when it builds their class (issue 27)
                  ["--video-pruning-rate", "1"], ["--video-pruning-rate", "-1"], ["--max-loras", "0"],
                  ["--enable-lora", "--max-loras", "0"], ["--enable-lora", "--max-loras", "2"],
                  # values computed from enums, registries and constants elsewhere; bounds written as expressions
                  ["--seed", str(2**32)], ["--seed", str(2**32 - 1)], ["--all2all-backend", "passthrough"],
                  ["--moe-backend", "tritonx"], ["--moe-backend", "Triton"], ["--linear-backend", "cutlassx"],
                  ["--sparse-indexer-topk-backend", "torchx"], ["--mm-processor-device", "cpu"],
                  ["--mm-processor-device", "xpu"], ["--logging-config", '{"log_levl": "DEBUG"}'],
                  ["--spec-method", "ngramx"], ["--optimization-level", "4"],
                  # cross-flag checks of the config classes
                  ["--numa-bind-nodes", "0", "--no-numa-bind"], ["--numa-bind-nodes", "0"], ["--numa-bind-cpus", "0-3", "--no-numa-bind"],
                  ["--collect-detailed-traces", "all"], ["--data-parallel-external-lb"]):
        add("named", [MODEL, *extra])
    return commands


def force_cpu_platform():
    """Older vLLM (< 0.33) picks the CPU platform only for a CPU build or macOS, whatever
    VLLM_TARGET_DEVICE says: set it, as a CPU build would."""
    try:
        import vllm.platforms as platforms
        from vllm.platforms.cpu import CpuPlatform

        if getattr(platforms, "_current_platform", None) is None:
            platforms._current_platform = CpuPlatform()
    except Exception:
        pass


def main():
    force_cpu_platform()
    mode = sys.argv[1]
    judge = Judge()
    if mode == "corpus":  # vLLM logs to stdout: the result goes to the file named next
        with open(sys.argv[2], "w") as handle:
            json.dump(corpus(judge), handle)
        return
    out = []
    for argv in json.load(sys.stdin):
        refused, why = judge.judge(argv)
        out.append({"argv": argv, "refused": refused, "why": why})
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
