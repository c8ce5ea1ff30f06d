"""gpudoctor's rule catalogue (installed as ``gpudoctor_rules``).

One module per area, or a few split by job (cuda and cuda_toolkit, server and
server_features). To add a rule, add a function decorated with ``@rule`` to the module of
its area (see gpudoctor/rule.py for the contract); to add an area or a module of rules, add
its name here.
"""

import importlib

MODULES = (
    "internal", "driver", "cuda", "cuda_toolkit", "gpu", "fabric", "fabric_deep", "fabric_pcie", "host_limits", "flash_attn",
    "python_stack", "requirements",
    "torch_extensions", "vllm_build", "processes",
    "launch", "server", "server_features", "server_config", "cluster", "cluster_fabric",
)


def load() -> None:
    for name in MODULES:
        importlib.import_module(f"{__name__}.{name}")
