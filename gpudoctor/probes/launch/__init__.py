"""The launch command and the model it serves, as facts (``launch.*``, ``model.*``, ``drafter.*``).

- ``parser``: split a command line (argv, or a line of a shell script) into environment
  assignments, the program and its flags, the way vLLM's own argument parser reads them.
- ``vllm_source``: what the installed vLLM accepts (flags, parser names, speculative
  methods, architectures, quantization methods, attention backends), read from its source
  text, never imported.
- ``model``: a model directory or the Hugging Face cache: config.json fields and the weight
  bytes from safetensors headers, without loading a tensor.
- ``probe``: the three together, as snapshot facts for rules/launch/.

``collect(ctx)`` is the probe (the contract of gpudoctor/probes/__init__.py): the facts of
``ctx.command`` (a ``probe.Command``, read by ``probe.read_command``). Standard library only:
nothing here imports vLLM, torch or transformers.
"""

from __future__ import annotations

from typing import Any, Dict


def collect(ctx: Any) -> Dict[str, Any]:
    """``launch.*``, ``model.*`` and ``drafter.*`` facts of ``ctx.command`` (none without one);
    tracebacks of what could not be read go to ``ctx.debug``. An interpreter asked for its sys.path gets
    half of ctx.timeout (at most 30 s) and never runs past ctx.deadline: the machine's probes share it.
    vLLM's source is read, never run."""
    from gpudoctor.probes.launch.probe import inspect_command
    from gpudoctor.probes.python_stack_read import search_paths

    if ctx.command is None:
        return {}
    _, facts, debug = inspect_command(ctx.command, dict(ctx.environ), ctx.python, search_paths(), ctx.cwd,
                                      min(ctx.timeout * 0.5, 30.0), getattr(ctx, "deadline", None))
    ctx.debug.extend(debug)
    return facts
