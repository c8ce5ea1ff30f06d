"""Knowledge that probes and rules both need, as data plus pure functions.

Modules here import only the standard library: never gpudoctor.probes, never the rules
(gpudoctor_rules), never a renderer (tests/test_layering.py checks it). A probe asks them
what to look for; a rule asks them how to judge what was found.

- ``advisories``: known fixes ("feature X needs PR #N"), the markers a probe looks for and
  their evaluation.
- ``signatures`` (+ ``signatures_build``, ``signatures_serving``): the error texts users paste,
  their cause and fix, and which rules confirm the cause (read by gpudoctor/explain.py).
- ``gpus``: GPU product names, compute capabilities and memory, and which SASS/PTX runs on
  which compute capability (``kernel_support``).
"""
