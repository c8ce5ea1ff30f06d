"""GD7xx: the launch command (``gpudoctor preflight -- vllm serve MODEL …``) against this machine.

The facts come from gpudoctor/probes/launch/probe.py (``launch.*``: the parsed command and what the
installed vLLM's source defines; ``model.*`` / ``drafter.*``: config.json and safetensors
headers) and from the machine probes or a replayed snapshot (``gpu.*``, ``env``,
``processes.*``). Preflight overlays the command's own ``NAME=value`` assignments on ``env``,
so ``CUDA_VISIBLE_DEVICES=0,1 vllm serve …`` is judged with the GPUs it will see.

One module per concern; importing this package registers all of them:

- ``common``: what every rule reads (the parsed flags, the model config, the engine's GPUs)
- ``command``: GD701 invalid values, GD702 unknown flags, GD722 port taken
- ``model``: GD703 model unreadable, GD704 not cached offline, GD715 max-model-len, GD723 trust-remote-code
- ``parallel``: GD705-GD707 tensor / pipeline parallelism against GPUs and model
- ``memory``: the memory plan (weights, KV cache, allowance per GPU) and GD708-GD710
- ``dtype``: GD711-GD714 dtype, FP8, quantization, attention backend against compute capability
- ``speculative``: GD716-GD720 speculative decoding
- ``parsers``: GD721 tool-call / reasoning parsers
"""

from . import command, dtype, memory, model, parallel, parsers, speculative  # noqa: F401  (registers the rules)
