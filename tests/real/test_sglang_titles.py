"""Every process title the real SGLang wheel sets is one gpudoctor knows as SGLang's, with the role
that decides whether it can be stale (probes/processes.py classify, rules/process_view.py).

Read from the wheel's source with ``ast`` (its ``setproctitle(...)`` calls), never imported. A
title a later release adds shows up here as a difference from TITLES, to be read and added to
tests/test_fix_sglang.py, whose real processes carry these titles.
"""

import ast
import sys
import zipfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import realenv  # noqa: E402

from gpudoctor.probes.processes import classify  # noqa: E402

pytestmark = pytest.mark.real

# (file, title with {} for each formatted part) as sglang 0.5.23 sets them.
TITLES = {
    "0.5.23": {
        ("sglang/srt/managers/scheduler.py", "sglang::scheduler{}"),
        ("sglang/srt/managers/detokenizer_manager.py", "sglang::detokenizer"),
        ("sglang/srt/managers/data_parallel_controller.py", "sglang::data_parallel_controller"),
        ("sglang/srt/managers/multi_tokenizer_mixin.py", "sglang::detokenizer_router"),
        ("sglang/srt/managers/multi_tokenizer_mixin.py", "sglang::tokenizer_worker:{}"),
        ("sglang/multimodal_gen/runtime/managers/gpu_worker.py", "sgl_diffusion::scheduler{}"),
        ("sglang/multimodal_gen/runtime/managers/gpu_worker.py", "sgl_diffusion::scheduler_{}"),
    },
}


def titles_set(source: str):
    """The titles passed to setproctitle(...) in one module, formatted parts as {}."""
    out = set()
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        if name != "setproctitle":
            continue
        arg = node.args[0]
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            out.add(arg.value)
        elif isinstance(arg, ast.JoinedStr):
            out.add("".join(v.value if isinstance(v, ast.Constant) else "{}" for v in arg.values))
        else:
            out.add("<not a literal>")
    return out


@pytest.mark.parametrize("version", sorted(TITLES))
def test_every_title_sglang_sets_is_known(version):
    found = set()
    with zipfile.ZipFile(realenv.source_wheel("sglang", version)) as archive:
        for name in archive.namelist():
            if name.endswith(".py") and "/test" not in name:
                text = archive.read(name).decode("utf-8", "replace")
                if "setproctitle" in text:
                    found |= {(name, title) for title in titles_set(text)}
    assert found == TITLES[version]
    for _, template in found:
        for filled in (template.format(*[""] * template.count("{}")), template.format(*["_DP1_TP3_EP3"] * template.count("{}"))):
            stack, role, title = classify(filled.encode()[:15].decode(), [filled])
            assert (stack, title) == ("sglang", filled)
            assert role == ("worker" if "::scheduler" in filled else "helper"), (filled, role)
