"""The launch probe: a command line, the vLLM it will run and the models it names, as facts.

Facts (source: the command, the model's files, the installed vLLM's source):

  launch.command     {argv (secrets masked), source ("argv" or "FILE:LINE"), display, aliases (short flag as
                     typed -> its long name, so a fix edits the flag the user typed: `-tp 3` stays `-tp`)}
  launch.kind        vllm-serve | vllm-api-server | vllm-other | sglang-serve | sglang-other | other
  launch.sglang      {path, version, found_via, dist_info, flags, files} of the SGLang an sglang-serve command runs
  launch.sglang_parallel  {tp_size, pp_size, dp_size, attn_dp_size, nnodes, base_gpu_id, gpu_id_step, gpus, highest}
  launch.sglang_memory    {typed, value, defined}: the command's --mem-fraction-static
  launch.env         NAME=value assignments before the command (and a script's exports)
  launch.model       the model as given (positional or --model)
  launch.args        canonical flag -> value (numbers and JSON parsed)
  launch.errors      [{flag, value, problem}]: values vLLM's parser would refuse
  launch.unknown_flags  [{flag, as_typed, suggestion}] (absent: vLLM not found, cannot check)
  launch.port        {host, port, uds}
  launch.notes       what was assumed or could not be read
  launch.vllm        {path, version, found_via, dist_info} of the vLLM the command runs
  launch.vllm.tool_parsers / .reasoning_parsers / .spec_methods / .architectures /
  .quantization / .attention_backends / .markers   (from its source, see vllm_source.py)
  launch.vllm.memory  what this vLLM does with GPU memory for this command: utilization, extensible
                     KV cache, whether its free-memory check runs and its words (vllm_memory.py)
  model.source       {given, kind, path, repo, revision, cache_dir, offline, detail}
  model.config       config.json fields (model.py config_fields)
  model.weights      {bytes, format, source, files, dtypes, missing, problems}
  drafter.*          the same for the speculative drafter named in --speculative-config
"""

from __future__ import annotations

import difflib
import os
import traceback
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

from gpudoctor.probes.launch import model as model_mod
from gpudoctor.probes.launch import command_file, parser, vllm_source
from gpudoctor.probes.launch.vllm_locate import command_python as command_python  # its home: light enough for check (probes.elsewhere)
from gpudoctor.snapshot import ABSENT, ERROR, OK, Fact, missing, ok

SECRET_FLAGS = ("--api-key", "--hf-token", "--ssl-keyfile-password")


def _memory_fact(memory: Optional[Dict[str, Any]], typed: Dict[str, Any], table: Any, where: str) -> Fact:
    from gpudoctor.probes.launch import vllm_memory

    given: Dict[str, Any] = {}
    for name, value in typed.items():
        spec = table.spec(name) if table is not None else None
        if spec is not None and name in spec.negatives:
            continue  # --no-x: the parser already set --x to False
        given[spec.dest if spec is not None else name.lstrip("-").replace("-", "_")] = value
    given["__dests__"] = {spec.dest for spec in (table.specs.values() if table is not None else ())}
    decided = vllm_memory.for_command(memory, given)
    if decided is None:
        return missing(ABSENT, "no memory defaults or free-memory check found in this vLLM's source", where)
    return ok(decided, where)


def _masked_argv(argv: Sequence[str]) -> List[str]:
    from gpudoctor.probes.processes import mask_secrets

    return mask_secrets(list(argv))


def _masked_env(env: Dict[str, str]) -> Dict[str, str]:
    from gpudoctor.redact import is_secret_name

    return {k: ("***" if is_secret_name(k) else v) for k, v in env.items()}


def flag_table(found: Optional[Dict[str, Any]]) -> parser.FlagTable:
    """The flags of the installed vLLM: the syntax-tree walk of vllm_args (names, negatives, types,
    choices, ranges, JSON keys) merged over the text scan of vllm_source.flags (names only)."""
    flags = (found or {}).get("flags")
    args = (found or {}).get("args")
    if flags is None and args is None:
        return parser.FlagTable()
    known = set(flags.known) if flags is not None else set()
    aliases = dict(flags.aliases) if flags is not None else {}
    switches = set(flags.switches) if flags is not None else set()
    specs: Dict[str, Any] = {}
    complete = True
    if args is not None:
        complete = args.complete
        known.update(args.names_only)
        for name, spec in args.args.items():
            known.add(name)
            specs[name] = spec
            longs = [n for n in spec.names if n.startswith("--")]
            if longs and name in spec.names and name != longs[0]:
                aliases[name] = longs[0]
            elif longs and name not in spec.names:
                aliases.pop(name, None)  # a negative form is its own option (it sets the flag False)
    combinations = list(getattr(args, "combinations", None) or []) if args is not None else []
    return parser.FlagTable(known, aliases, switches, specs, complete, combinations)


def unknown_flags(launch: parser.Launch, table: parser.FlagTable) -> List[Dict[str, Any]]:
    """Flags vLLM's parser would refuse ("unrecognized arguments"), with the closest real one."""
    if table.known is None:
        return []
    known = table.known
    out: List[Dict[str, Any]] = []
    seen = set()
    for typed, name in launch.given:
        if name in seen:
            continue
        seen.add(name)
        if name in known or name.startswith("--no-") and ("--" + name[5:]) in known and ("--" + name[5:]) in table.switches:
            continue
        prefixes = [k for k in known if k.startswith(name) and k.startswith("--")]
        if len(prefixes) == 1 and len(name) > 3:
            continue  # argparse accepts an unambiguous prefix (allow_abbrev)
        close = difflib.get_close_matches(name, [k for k in known if k.startswith("--")], n=1, cutoff=0.75)
        out.append({"flag": name, "as_typed": typed.split("=", 1)[0], "suggestion": close[0] if close else None})
    return out


def _model_facts(prefix: str, given: Optional[str], environ: Dict[str, str], revision: Optional[str],
                 download_dir: Optional[str], cwd: Optional[str], what: str) -> Dict[str, Fact]:
    facts: Dict[str, Fact] = {}
    if not given:
        reason = f"no {what} given"
        facts[f"{prefix}.source"] = missing(ABSENT, reason, "command")
        return facts
    resolved = model_mod.resolve(given, environ, revision, download_dir, cwd)
    kind = resolved["kind"]
    if kind == "hf_remote" and not resolved.get("offline"):
        facts.update(_hub_facts(prefix, resolved, environ, revision))
        return facts
    facts[f"{prefix}.source"] = ok(resolved, "command, filesystem", resolved.get("detail", ""))
    if kind in ("local", "hf_cache"):
        info = model_mod.inspect(resolved)
        where = os.path.join(resolved["path"], "config.json") if os.path.isdir(resolved["path"]) else resolved["path"]
        if "config" in info:
            facts[f"{prefix}.config"] = ok(info["config"], where)
        else:
            facts[f"{prefix}.config"] = missing(ERROR, info.get("config_problem", "config.json unreadable"), where)
        weights = info.get("weights") or {}
        if weights.get("bytes") is not None and not weights.get("problems") and not weights.get("missing"):
            facts[f"{prefix}.weights"] = ok(weights, resolved["path"], weights.get("source", ""))
        elif weights.get("bytes"):
            facts[f"{prefix}.weights"] = ok(weights, resolved["path"], "; ".join(weights.get("problems") or [])
                                            or f"missing: {', '.join(weights.get('missing') or [])}")
        else:
            facts[f"{prefix}.weights"] = missing(ERROR, "; ".join(weights.get("problems") or ["no weights found"]),
                                                 resolved["path"], value=weights)
    elif kind == "hf_remote":
        why = "not downloaded yet: the server downloads it at startup" + (" (but HF offline mode is on)" if resolved.get("offline") else "")
        facts[f"{prefix}.config"] = missing(ABSENT, why, "huggingface cache")
        facts[f"{prefix}.weights"] = missing(ABSENT, why, "huggingface cache")
    else:
        facts[f"{prefix}.config"] = missing(ABSENT, resolved.get("detail", "model not found"), "filesystem")
        facts[f"{prefix}.weights"] = missing(ABSENT, resolved.get("detail", "model not found"), "filesystem")
    return facts


def _hub_facts(prefix: str, resolved: Dict[str, Any], environ: Dict[str, str], revision: Optional[str]) -> Dict[str, Fact]:
    """A Hub model not in the local cache: its config.json (and safetensors index) read from the Hub
    as vLLM would at startup (probes/launch/hub.py); when the Hub cannot say, an unknown with why."""
    from gpudoctor.probes.launch import hub

    facts: Dict[str, Fact] = {}
    fetched = hub.fetch(str(resolved.get("repo") or resolved.get("given")), revision, environ)
    resolved = dict(resolved, hub={k: fetched[k] for k in ("status", "detail", "url") if fetched.get(k)})
    facts[f"{prefix}.source"] = ok(resolved, "command, filesystem, the Hub", resolved.get("detail", ""))
    config = fetched.get("config")
    if not isinstance(config, dict):
        why = f"not downloaded yet; {fetched.get('detail')}"
        status = fetched.get("status") if fetched.get("status") in (ABSENT, "no_permission", "timeout") else ERROR
        facts[f"{prefix}.config"] = missing(status, why, "the Hub")
        facts[f"{prefix}.weights"] = missing(status, why, "the Hub")
        return facts
    fields = model_mod.config_fields(config)
    where = str(fetched.get("url"))
    facts[f"{prefix}.config"] = ok(fields, where, "read from the Hub (not downloaded yet: the server downloads it at startup)")
    index = fetched.get("index")
    estimate = model_mod.estimated_weight_bytes(fields)
    if isinstance(index, dict):
        facts[f"{prefix}.weights"] = ok({"bytes": index["total_size"], "format": "safetensors", "files": index["shards"],
                                         "source": "the Hub's model.safetensors.index.json (metadata.total_size)"}, str(index["url"]))
    elif estimate is not None:
        facts[f"{prefix}.weights"] = ok({"bytes": estimate[0], "format": None, "files": 0, "source": estimate[1], "estimate": True},
                                        where, fetched.get("index_detail") or "no safetensors index on the Hub")
    else:
        facts[f"{prefix}.weights"] = missing(ABSENT, "the Hub has no safetensors index for it and its config.json does not give "
                                             "the weights' size (quantized, MLA or another shape)", where)
    return facts


@dataclass
class Command:
    """The launch command as given, before anything is looked up: what ``probes.launch.collect``
    reads from ``ctx.command``, and what ``preflight --exec`` starts."""

    argv: List[str]  # the whole command line, NAME=value assignments and wrappers included
    source: str = "argv"  # "argv" or "FILE:LINE" (--from-file)
    script_env: Dict[str, str] = field(default_factory=dict)  # a script's exports before the command
    notes: List[str] = field(default_factory=list)  # what reading the file assumed

    @property
    def exec_argv(self) -> List[str]:
        """What --exec runs: argv without the leading NAME=value words."""
        return parser.split_command(self.argv)[1]

    @property
    def program_argv(self) -> List[str]:
        """The program's argv, assignments and wrappers stripped."""
        return parser.split_command(self.argv)[2]

    @property
    def env(self) -> Dict[str, str]:
        """The assignments the command runs with: a script's exports, then its own NAME=value words."""
        merged = dict(self.script_env)
        merged.update(parser.split_command(self.argv)[0])
        return merged


def read_command(argv: Optional[Sequence[str]] = None, from_file: Optional[str] = None,
                 environ: Optional[Dict[str, str]] = None) -> Command:
    """The command from argv or from a file (its first vLLM launch). Raises parser.CommandFileError only."""
    if from_file is not None:
        file_argv, script_env, source, notes = command_file.read_command_file(from_file, dict(environ if environ is not None else os.environ))
        return Command(list(file_argv), source, script_env, notes)
    return Command(list(argv or []))


def env_facts(command: Command) -> Dict[str, Fact]:
    """``env`` with the command's ``NAME=value`` assignments, for ``probes.merge`` to lay over the
    machine's (an additive fact): rules then see the CUDA_VISIBLE_DEVICES / HF_HUB_OFFLINE the
    server will see. Empty when the command assigns nothing."""
    from gpudoctor.probes.host import relevant_env

    env = command.env
    return {"env": Fact(relevant_env(env), OK, "the launch command's assignments")} if env else {}


def inspect(argv: Optional[Sequence[str]] = None, from_file: Optional[str] = None, environ: Optional[Dict[str, str]] = None,
            python: Optional[str] = None, own_paths: Optional[List[str]] = None, cwd: Optional[str] = None,
            timeout: float = 5.0) -> Tuple[parser.Launch, Dict[str, Fact], List[str]]:
    """(the parsed launch, its facts, debug tracebacks). Raises parser.CommandFileError only."""
    environ = dict(environ if environ is not None else os.environ)
    return inspect_command(read_command(argv, from_file, environ), environ, python, own_paths, cwd, timeout)


def inspect_command(command: Command, environ: Dict[str, str], python: Optional[str] = None,
                    own_paths: Optional[List[str]] = None, cwd: Optional[str] = None,
                    timeout: float = 5.0, deadline: Optional[float] = None) -> Tuple[parser.Launch, Dict[str, Fact], List[str]]:
    """(the parsed launch, its facts, debug tracebacks) of a command already read; never raises
    for a readable command (an odd vLLM tree or model is a fact). ``timeout``: for each interpreter
    asked for its sys.path; ``deadline``: the command's (from --timeout), none runs past it."""
    debug: List[str] = []
    script_env, notes, source = dict(command.script_env), list(command.notes), command.source
    argv = list(command.argv)
    assignments, _, program_argv, _ = parser.split_command(argv)
    run_env = dict(environ)
    run_env.update(script_env)
    run_env.update(assignments)
    facts: Dict[str, Fact] = {}
    location = None
    found: Optional[Dict[str, Any]] = None
    kind_guess, _, sglang_words = parser.classify(program_argv)
    if kind_guess.startswith("vllm"):
        try:
            location = vllm_source.locate(program_argv, run_env, python, own_paths, timeout, deadline)
            if location.package:
                found = vllm_source.everything(location.package)
        except Exception as exc:  # never let an odd vLLM tree take the doctor down
            debug.append(f"launch: reading vLLM's source raised:\n{traceback.format_exc()}")
            facts["launch.vllm"] = missing(ERROR, f"cannot read the installed vLLM: {type(exc).__name__}: {exc}", "vllm source")
    table = flag_table(found)
    launch = parser.parse(argv, table, source, env=script_env)
    launch.notes[:0] = notes
    typed = parser.typed_options(launch, table)
    if isinstance(typed.get("--config"), str):
        launch.notes.append(f"flags inside --config {typed['--config']} are not read: checks use the command line only")

    facts["launch.command"] = ok({"argv": _masked_argv(launch.exec_argv), "source": source,
                                  "display": parser.display(_masked_argv(launch.exec_argv)),
                                  **_typed_aliases(launch.exec_argv, table)}, source)
    facts["launch.kind"] = ok(launch.kind, source)
    facts["launch.env"] = ok(_masked_env(launch.env), source)
    if kind_guess == "sglang-serve":
        try:
            facts.update(sglang_facts(program_argv, sglang_words, run_env, python, own_paths, timeout, deadline, source, cwd))
            spelled = facts.pop("launch.sglang_spelled", None)
            if spelled is not None and spelled.ok and spelled.value:  # --tp typed for --tp-size: a fix edits --tp
                command_fact = facts["launch.command"]
                command_fact.value = dict(command_fact.value, aliases=dict(command_fact.value.get("aliases") or {}, **spelled.value))
        except Exception as exc:  # never let an odd SGLang tree take the doctor down
            debug.append(f"launch: reading SGLang's source raised:\n{traceback.format_exc()}")
            facts["launch.sglang"] = missing(ERROR, f"cannot read the installed SGLang: {type(exc).__name__}: {exc}", "sglang source")
    if not launch.is_vllm:
        facts["launch.notes"] = ok(launch.notes, source)
        return launch, facts, debug
    if launch.model:
        facts["launch.model"] = ok(launch.model, source)
    else:
        facts["launch.model"] = missing(ABSENT, "no model in the command (vLLM would serve its built-in default model)", source)
    shown = {k: ("***" if k in SECRET_FLAGS and v is not True else v) for k, v in typed.items()}
    facts["launch.args"] = ok(shown, source)
    facts["launch.errors"] = ok(launch.errors, source)
    port = typed.get("--port", 8000)
    facts["launch.port"] = ok({"port": port if isinstance(port, int) else None, "host": typed.get("--host"),
                               "uds": typed.get("--uds")}, source)

    # The installed vLLM, and what its source says it accepts.
    if "launch.vllm" not in facts:
        if location is None or not location.package:
            looked = "; ".join(location.looked) if location and location.looked else "nowhere to look"
            facts["launch.vllm"] = missing(ABSENT, f"vLLM is not installed where the command runs (looked in: {looked})", "filesystem")
        else:
            facts["launch.vllm"] = ok(location.to_json(), location.package, f"found via {location.how}")
    vllm_ok = facts["launch.vllm"].ok
    vsource = location.package if vllm_ok and location else "vllm source"
    if not vllm_ok:
        why = facts["launch.vllm"].detail
        cannot = missing(ABSENT, f"cannot check flags: {why}", "vllm source")
        facts["launch.unknown_flags"] = cannot
        for key in ("tool_parsers", "reasoning_parsers", "spec_methods", "architectures", "quantization", "attention_backends", "markers",
                    "memory"):
            facts[f"launch.vllm.{key}"] = missing(ABSENT, why, "vllm source")
    else:
        if found and (found.get("flags") is not None or found.get("args") is not None):
            unknown = unknown_flags(launch, table)
            args_table = found.get("args")
            files = args_table.files if args_table is not None else found["flags"].files
            if unknown and not table.complete:
                # Some add_argument calls could not be followed: an unlisted flag may still exist.
                why = "; ".join(args_table.problems[:3]) if args_table is not None else "source not fully readable"
                facts["launch.unknown_flags"] = missing(ABSENT, f"cannot decide whether {', '.join(u['flag'] for u in unknown)} "
                                                        f"exist: part of this vLLM's argument definitions could not be read ({why})",
                                                        vsource)
            else:
                facts["launch.unknown_flags"] = ok(unknown, f"{vsource} ({', '.join(files)})", f"{len(table.known or ())} flags defined")
        else:
            facts["launch.unknown_flags"] = missing(ERROR, "cannot check flags: no add_argument calls found in this vLLM's source", vsource)
        labels = {
            "tool_parsers": "no tool parser registry in this vLLM's source",
            "reasoning_parsers": "no reasoning parser registry in this vLLM's source",
            "spec_methods": "no SpeculativeMethod in this vLLM's config source",
            "architectures": "no model registry in this vLLM's source",
            "quantization": "no quantization configs in this vLLM's source",
            "attention_backends": "no attention backend enum in this vLLM's source",
        }
        for key, absent_reason in labels.items():
            value = (found or {}).get(key)
            facts[f"launch.vllm.{key}"] = ok(value, vsource) if value is not None else missing(ABSENT, absent_reason, vsource)
        facts["launch.vllm.markers"] = ok((found or {}).get("markers") or {}, vsource)
        facts["launch.vllm.memory"] = _memory_fact((found or {}).get("memory"), typed, table, vsource)
        facts.update(build_facts(location, run_env, debug))

    # The model and the drafter.
    download_dir = typed.get("--download-dir") if isinstance(typed.get("--download-dir"), str) else None
    revision = typed.get("--revision") if isinstance(typed.get("--revision"), str) else None
    try:
        facts.update(_model_facts("model", launch.model, run_env, revision, download_dir, cwd, "model"))
    except Exception as exc:
        debug.append(f"launch: reading the model raised:\n{traceback.format_exc()}")
        facts["model.source"] = missing(ERROR, f"cannot inspect the model: {type(exc).__name__}: {exc}", "filesystem")
    spec = typed.get("--speculative-config")
    if isinstance(spec, dict):
        draft = spec.get("model")
        if isinstance(draft, str) and draft:
            try:
                facts.update(_model_facts("drafter", draft, run_env, spec.get("revision") if isinstance(spec.get("revision"), str) else None,
                                          download_dir, cwd, "drafter"))
            except Exception as exc:
                debug.append(f"launch: reading the drafter raised:\n{traceback.format_exc()}")
                facts["drafter.source"] = missing(ERROR, f"cannot inspect the drafter: {type(exc).__name__}: {exc}", "filesystem")
    facts["launch.notes"] = ok(launch.notes, source)
    return launch, facts, debug


def sglang_facts(program_argv: Sequence[str], words: Sequence[str], environ: Dict[str, str], python: Optional[str],
                 own_paths: Optional[List[str]], timeout: float, deadline: Optional[float], source: str,
                 cwd: Optional[str] = None) -> Dict[str, Fact]:
    """``launch.sglang`` (where the command's SGLang is), ``launch.model``, ``launch.port`` (its default read
    from SGLang's source), ``launch.unknown_flags`` for `sglang serve …` / `python -m sglang.launch_server …`,
    and the model's and the drafter's config (``model.*``, ``drafter.*``) as for vLLM."""
    from gpudoctor.probes.launch import sglang_args, sglang_args_cache

    facts: Dict[str, Fact] = {}
    location = vllm_source.locate(program_argv, environ, python, own_paths, timeout, deadline, package="sglang")
    if not location.package:
        looked = "; ".join(location.looked) if location.looked else "nowhere to look"
        why = f"SGLang is not installed where the command runs (looked in: {looked})"
        facts["launch.sglang"] = missing(ABSENT, why, "filesystem")
        facts["launch.unknown_flags"] = missing(ABSENT, f"cannot check flags: {why}", "sglang source")
        return facts
    read = sglang_args_cache.read_flags(location.package)
    facts["launch.sglang"] = ok(dict(location.to_json(), flags=len(read["flags"]), files=read["files"]), location.package,
                                f"found via {location.how}")
    known = read["flags"]
    # Only `sglang serve` takes the model as its first word (cli/serve.py); sglang.launch_server hands
    # its argv to prepare_server_args as it is, and argparse refuses a positional there.
    positional = bool(program_argv) and os.path.basename(program_argv[0]) == "sglang"
    model = sglang_args.model_of(words, known, positional)
    facts["launch.model"] = ok(model, source) if model else missing(ABSENT, "no model in the command (--model-path)", source)
    port_text = sglang_args.value_of(words, known, ("--port",))
    default = read["defaults"].get("--port")
    port = int(port_text) if port_text is not None and port_text.isdigit() else default if isinstance(default, int) else None
    facts["launch.port"] = ok({"port": port, "host": sglang_args.value_of(words, known, ("--host",)), "uds": None}, source,
                              "the command's --port" if port_text is not None else "SGLang's default port (serving.py)")
    layout = sglang_args.parallel_layout(words, read)
    facts["launch.sglang_parallel"] = ok(layout, source, "the GPUs this command's schedulers take, as SGLang places them")
    facts["launch.sglang_memory"] = ok(sglang_args.mem_fraction(words, read), source, "--mem-fraction-static as typed")
    settings = sglang_args.model_settings(words, read)
    facts["launch.sglang_model"] = ok(settings, source, "the model and speculative settings, as SGLang parses them")
    facts["launch.sglang_spelled"] = ok(sglang_args.spelled_as(words, read), source)
    revision = settings.get("revision") if isinstance(settings.get("revision"), str) else None
    facts.update(_model_facts("model", model, environ, revision, None, cwd, "model"))
    draft = settings.get("speculative_draft_model_path")
    if isinstance(draft, str) and draft:
        draft_revision = settings.get("speculative_draft_model_revision")
        facts.update(_model_facts("drafter", draft, environ, draft_revision if isinstance(draft_revision, str) else None,
                                  None, cwd, "drafter"))
    from gpudoctor.probes.launch.sglang_values import value_errors

    facts["launch.errors"] = ok(value_errors(words, read), source, "values SGLang's parser refuses (types and choices of its fields)")
    unknown = sglang_args.unknown_flags(words, known)
    if not positional and words and not words[0].startswith("-"):
        unknown.insert(0, {"flag": words[0], "as_typed": words[0], "suggestion": "--model-path " + words[0]})
    if read["problems"] or not known:
        facts["launch.unknown_flags"] = missing(ABSENT, "cannot decide: part of SGLang's argument definitions could not be read ("
                                                + "; ".join(read["problems"][:3] or ["no flags found"]) + ")", location.package)
    else:
        facts["launch.unknown_flags"] = ok(unknown, f"{location.package} ({', '.join(read['files'][:2])}, …)", f"{len(known)} flags defined")
    return facts


def build_facts(location: "vllm_source.Location", environ: Dict[str, str], debug: List[str]) -> Dict[str, Fact]:
    """``launch.vllm.build`` / ``.code_markers`` / ``.fix_commits``: what probes/vllm_build.py
    reports as ``vllm.*`` for gpudoctor's own environment, for the vLLM the *command* runs
    (gpudoctor/knowledge/advisories.py evaluates known fixes on them; GD719). Skipped quietly when those
    modules are not there."""
    try:
        from gpudoctor.probes import vllm_build
        from gpudoctor.knowledge.advisories import probe_options
    except ImportError:
        return {}
    if not location.dist_info:
        return {}
    dist = {"name": "vllm", "version": location.version, "location": os.path.dirname(location.dist_info),
            "meta": os.path.basename(location.dist_info)}
    ctx = {"dists": {"vllm": dist}, "paths": list(location.paths), "editable": {}, "environ": dict(environ),
           "options": probe_options()}
    try:
        plain = vllm_build.collect_plain(ctx)
    except Exception as exc:
        debug.append(f"launch: vllm_build on the command's vLLM raised:\n{traceback.format_exc()}")
        return {"launch.vllm.build": missing(ERROR, f"{type(exc).__name__}: {exc}", location.package or "")}
    out: Dict[str, Fact] = {}
    for path, data in plain.items():
        if not path.startswith("vllm.") or not isinstance(data, dict):
            continue
        try:
            out["launch." + path] = Fact.from_json(data)
        except Exception:
            continue
    return out


def exec_env(launch: "parser.Launch | Command", environ: Dict[str, str]) -> Dict[str, str]:
    """The environment --exec gives the command: ours plus its NAME=value assignments."""
    env = dict(environ)
    env.update(launch.env)
    return env


def _typed_aliases(argv: Sequence[str], table: parser.FlagTable) -> Dict[str, Dict[str, str]]:
    """{"aliases": {short flag as typed: its long name}} for the short aliases in the command (``-tp`` ->
    ``--tensor-parallel-size``); {} when there are none (evidence then shows no empty key)."""
    out: Dict[str, str] = {}
    for word in argv:
        if word.startswith("-") and not word.startswith("--") and len(word) > 1:
            name = word.split("=", 1)[0]
            long = table.canonical(name)
            if long != name and long.startswith("--"):
                out[name] = long
    return {"aliases": out} if out else {}

