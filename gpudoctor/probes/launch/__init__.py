"""The launch command and the model it serves, as facts (``launch.*``, ``model.*``, ``drafter.*``).

- ``parser``: split a command line (argv, or a line of a shell script) into environment
  assignments, the program and its flags, the way vLLM's own argument parser reads them.
- ``vllm_source``: what the installed vLLM accepts (flags, parser names, speculative
  methods, architectures, quantization methods, attention backends), read from its source
  text, never imported.
- ``model``: a model directory or the Hugging Face cache: config.json fields and the weight
  bytes from safetensors headers, without loading a tensor.
- ``probe``: the three together, as snapshot facts for rules/launch/.

Standard library only: nothing here imports vLLM, torch or transformers.
"""
