"""GD701, GD702, GD722: the command line itself (values, flags, the port it will listen on)."""

from __future__ import annotations

from gpudoctor.rule import ERROR, Fail, Fix, NotApplicable, Unknown, rule
from .common import _applies_server, _command_with, _engine

# --- the rules ------------------------------------------------------------------------------------------
@rule("GD701", "launch-command-invalid", severity=ERROR, area="launch", applies=_applies_server)
def launch_command_invalid(snap):
    """The launch command has values vLLM's argument parser refuses.

    ## Why
    vLLM parses its flags before anything else: a JSON-valued flag that is not valid JSON
    (`--speculative-config`, `--compilation-config`, `--attention-config` …), a number that is
    not a number (`--tensor-parallel-size two`), a flag without its value, or a second
    positional word makes `vllm serve` print a usage error and exit with status 2 — in a
    container restart loop, over and over. Shell quoting is the usual cause: JSON needs single
    quotes around it in a shell, and YAML / systemd lines often eat the inner double quotes.
    The same goes for values outside what the installed vLLM defines, read from its source
    (gpudoctor/probes/launch/vllm_args.py): a `choices` list (`--dtype bfloat17`), a `Literal` of
    `--quantization` / `--kv-cache-dtype` names, a numeric range of its config field
    (`--gpu-memory-utilization` must be in (0, 1], `-tp` >= 1: pydantic `Field(gt=0, le=1)`),
    an unknown key inside a JSON config whose class forbids extra keys, a switch given a value.
    Those that argparse does not catch, vLLM refuses when it builds its config, before loading
    the model. A range of a config class vLLM builds only under a condition counts only under it
    (gpudoctor/probes/launch/vllm_conditions.py): `--max-loras 0` only with `--enable-lora`
    (`LoRAConfig(...) if self.enable_lora else None`, vllm/engine/arg_utils.py), and
    `--video-pruning-rate 1` only for a multimodal model (`if self._model_info.supports_multimodal:
    MultiModalConfig(...)`, vllm/config/model.py): that one is unknown here, never an error.

    ## Fix
    Quote JSON with single quotes (`--speculative-config '{"method": "dflash", …}'`) or set
    keys one by one (`--speculative-config.method dflash`); give numbers as numbers.

    ## References
    - vLLM `FlexibleArgumentParser` (vllm/utils/argparse_utils.py): `--json-arg.key value`,
      underscores as dashes, `optional_type(json.loads)` for `--speculative-config`
      (vllm/engine/arg_utils.py).
    - https://github.com/vllm-project/vllm/blob/main/vllm/engine/arg_utils.py
    - https://github.com/vllm-project/vllm/blob/main/vllm/config/model.py
    - SGLang: `add_cli_args_from_dataclass` (python/sglang/srt/arg_groups/arg_utils.py) gives each
      field its argparse type and choices; gpudoctor/probes/launch/sglang_values.py reads them.
    """
    if snap.value("launch.kind") == "sglang-serve":
        return _sglang_values(snap)
    entries = [e for e in snap.value("launch.errors") or [] if isinstance(e, dict)]
    errors = [e for e in entries if not e.get("condition")]
    unsure = [e for e in entries if e.get("condition")]
    if not errors and unsure:
        first = unsure[0]
        return Unknown(f"{first.get('flag')} {str(first.get('value'))[:60]!r}: {first.get('problem')}, but vLLM checks that only "
                       f"when {first.get('condition')}, which depends on the model (not read here)"
                       + (f"; {len(unsure) - 1} more such value(s)" if len(unsure) > 1 else ""))
    if not errors:
        return None
    fails = []
    for item in errors:
        flag = item.get("flag") or "argument"
        value = item.get("value")
        shown = "" if value is None else f" {str(value)[:120]!r}"
        problem = str(item.get("problem") or "")
        if "JSON" in problem:
            fix = Fix("Correct the value (JSON in single quotes in a shell, or one key per flag).",
                      ["--speculative-config '{\"method\": \"dflash\", \"model\": \"ORG/DRAFTER\", \"num_speculative_tokens\": 15}'"]
                      if flag in ("--speculative-config", "-sc") else [])
        else:  # `--tensor-parallel-size two` is about the value, not about JSON quoting (issue 31)
            kind = problem[len("not a valid "):].split(":")[0] if problem.startswith("not a valid ") else ""
            fix = Fix(f"Give {flag} a valid {kind}." if kind else f"Correct the value of {flag} ({problem or 'see above'}).")
        fails.append(Fail(f"{flag}{shown}: {item.get('problem')}; vLLM refuses it before loading the model (a usage error, exit status 2, or a config validation error)",
                          [("launch.errors", item), "launch.command"], fix, subject=str(flag)))
    return fails


def _sglang_values(snap):
    """GD701 for `sglang serve`: argparse refuses a value of a typed field before anything starts."""
    errors = snap.get("launch.errors")
    if not errors.ok:
        return Unknown(f"the command's values were not read ({errors.describe()})")
    fails = []
    for item in [e for e in errors.value or [] if isinstance(e, dict)]:
        flag = str(item.get("flag") or "argument")
        fails.append(Fail(f"{flag} {str(item.get('value'))[:120]!r}: SGLang's parser exits with \"argument {item.get('argument') or flag}: "
                          f"{item.get('problem')}\" (a usage error, exit status 2) before anything starts",
                          [("launch.errors", item)],
                          Fix(f"Give {flag} a value SGLang accepts (`sglang serve --help` lists them)."), subject=flag))
    return fails


@rule("GD702", "launch-unknown-flag", severity=ERROR, area="launch", applies=_applies_server)
def launch_unknown_flag(snap):
    """The launch command uses flags the installed vLLM (or SGLang) does not define.

    ## Why
    `vllm serve` stops at once with "error: unrecognized arguments: --the-flag". Flags come and
    go between releases (`--task` became `--runner`, `VLLM_ATTENTION_BACKEND` became
    `--attention-backend`, `--speculative-model` moved into `--speculative-config`), so a
    command copied from a model card or written for another version fails on this one.
    gpudoctor reads the flags from the installed vLLM's own source (`add_argument` calls in
    vllm/engine/arg_utils.py and the entrypoints' cli_args.py, and the fields of the
    `FrontendArgs` dataclass that recent versions turn into flags); it never imports vLLM.
    For `sglang serve` and `python -m sglang.launch_server`, the flags are read from the
    installed SGLang's source the same way: the fields of its server-argument namespaces
    (`sglang/srt/arg_groups/fields/*.py`, `A[T, "help"]` / `A[T, Arg(...)]`, each
    `--field-name` plus its aliases) and the `add_argument` calls of `ServerArgs.add_cli_args`;
    its parser is plain argparse, so a unique prefix of a flag is accepted, an ambiguous one
    refused ("ambiguous option").

    ## Fix
    Use the flag this vLLM has (the closest one is suggested), remove it, or install the vLLM
    version the command was written for.

    ## References
    - vllm/engine/arg_utils.py `EngineArgs.add_cli_args`; vllm/entrypoints/openai/cli_args.py
      (`FrontendArgs`, `make_arg_parser`); vllm/utils/argparse_utils.py
      (FlexibleArgumentParser).
    - vllm-project/vllm serve docs ("vllm serve --help=all").
    - https://github.com/vllm-project/vllm/blob/main/vllm/engine/arg_utils.py
    - https://github.com/vllm-project/vllm/blob/main/vllm/entrypoints/openai/cli_args.py
    - https://github.com/sgl-project/sglang/blob/main/python/sglang/srt/arg_groups/arg_utils.py
    - https://docs.python.org/3/library/argparse.html#allow-abbrev
    """
    fact = snap.get("launch.unknown_flags")
    if not fact.ok:
        return Unknown(fact.detail or "cannot check flags")
    unknown = [u for u in fact.value or [] if isinstance(u, dict)]
    if not unknown:
        return None
    version, help_command = _engine(snap)
    sglang = snap.value("launch.kind") == "sglang-serve"
    program = "sglang serve" if sglang else "vllm serve"
    fails = []
    for item in unknown:
        hint = f" (did you mean {item['suggestion']}?)" if item.get("suggestion") else ""
        if item.get("ambiguous"):
            message = (f"{item['flag']} is an ambiguous abbreviation for {version} ({', '.join(item['ambiguous'])}): `{program}` exits with "
                       f"\"ambiguous option: {item['as_typed']} could match …\"")
            fix = Fix("Spell the flag out.", [f"{help_command}  # the flags this SGLang has" if sglang else
                                               f"{help_command}{item['flag'].lstrip('-').split('-')[0]}  # the flags this vLLM has"])
        else:
            message = f"{version} does not define {item['flag']}{hint}: `{program}` exits with \"unrecognized arguments: {item['as_typed']}\""
            fix = Fix(f"Use {item['suggestion']} instead." if item.get("suggestion") else
                      f"Remove the flag, or install the {'SGLang' if sglang else 'vLLM'} version it belongs to.",
                      [f"{help_command}  # the flags this SGLang has" if sglang else
                       f"{help_command}{item['flag'].lstrip('-').split('-')[0]}  # the flags this vLLM has"])
        fails.append(Fail(message, [("launch.unknown_flags", item), "launch.sglang" if sglang else "launch.vllm"], fix, subject=item["flag"]))
    return fails


@rule("GD722", "launch-port-taken", severity=ERROR, area="launch", applies=_applies_server)
def launch_port_taken(snap):
    """The port the command will listen on is already taken.

    ## Why
    The API server binds its port only after the engine is up — after loading weights and
    capturing CUDA graphs — and then dies with "OSError: [Errno 98] Address already in use"
    (uvicorn: "error while attempting to bind on address"), throwing that startup away. A
    previous server that is still running, or a stale one (GD601), is the usual holder; GD602
    tells who it is.

    ## Fix
    Stop the holder if it is stale, or give the new server another `--port`.

    ## References
    - GD602 (rules/processes.py).
    - https://github.com/vllm-project/vllm/blob/main/vllm/engine/arg_utils.py
    """
    launch = snap.value("launch.port") or {}
    if launch.get("uds"):
        return NotApplicable("--uds: the server listens on a Unix socket")
    port = launch.get("port")
    if not isinstance(port, int):
        return Unknown("the launch port is not a number")
    probed = snap.get("processes.port")
    if not probed.ok:
        return Unknown(f"listening sockets not read ({probed.describe()})")
    data = probed.value or {}
    if data.get("port") != port:
        return Unknown(f"the snapshot checked port {data.get('port')}, the command uses {port} (preflight checks the command's port "
                       "when it probes this machine)")
    host = launch.get("host")
    wildcard = host in (None, "", "0.0.0.0", "::")
    hosts = {"127.0.0.1", "::1"} if host == "localhost" else {host}
    clashes = [item for item in data.get("listeners") or [] if isinstance(item, dict)
               and (wildcard or item.get("address") in ("0.0.0.0", "::") or item.get("address") in hosts)]
    if not clashes:
        return None
    holders = []
    for item in clashes:
        pids = item.get("pids") or []
        holders.append(f"{item.get('address')}:{port} by " + (f"PID {', '.join(map(str, pids))}" if pids else "a process not visible here"))
    return Fail(
        f"port {port} is taken ({'; '.join(holders)}): the server would load the model and then fail with \"[Errno 98] Address "
        "already in use\" (GD602 names the holder and whether it is stale)",
        ["processes.port", "launch.port"],
        Fix("Stop the holder if it is stale, or use another port.",
            [f"ss -ltnp 'sport = :{port}'", "gpudoctor fix  # if the holder is a stale serving process", _command_with(snap, "--port", port + 1)]),
        subject=f"port {port}",
    )
