"""What the installed vLLM accepts, read from its source text (gpudoctor/probes/launch/vllm_source.py).

The trees are written by tests/fakes/launch_trees.py in the two layouts of real releases (the
extractor was also run on the 0.8.5, 0.11.0, 0.19.0 and 0.33.0 wheels while it was written:
157, 242, 317 and 436 flags). Nothing is imported from them: the files even contain code that
would not import.
"""

import os
import sys

import pytest

from gpudoctor.probes.launch import vllm_source
from fakes.launch_trees import fake_vllm


@pytest.fixture(scope="module")
def new_tree(tmp_path_factory):
    return fake_vllm(tmp_path_factory.mktemp("new") / "venv")


@pytest.fixture(scope="module")
def old_tree(tmp_path_factory):
    return fake_vllm(tmp_path_factory.mktemp("old") / "venv", version="0.8.5", layout="old",
                     tool_parsers=("hermes", "llama3_json"), reasoning_parsers=("deepseek_r1",),
                     spec_methods=("ngram", "medusa", "mlp_speculator", "draft_model"), eagle_methods=("eagle",),
                     backends=("FLASH_ATTN", "XFORMERS", "FLASHINFER"), dflash_fixed=None, reads_attention_backend_env=True)


def package(script):
    location = vllm_source.locate([str(script)], {"PATH": ""})
    assert location.package, location.looked
    return location


def test_locates_the_vllm_of_the_script_and_its_version(new_tree):
    location = package(new_tree)
    assert location.version == "0.19.1.dev42+g2f3f441f8"
    assert location.package.endswith(os.path.join("site-packages", "vllm"))
    assert location.how == f"the environment of {new_tree}"


def test_locates_a_vllm_found_on_path(new_tree):
    location = vllm_source.locate(["vllm"], {"PATH": str(new_tree.parent)})
    assert location.package and location.version.startswith("0.19")


def test_not_installed_says_where_it_looked(tmp_path):
    location = vllm_source.locate(["vllm"], {"PATH": str(tmp_path)}, own_paths=[str(tmp_path)])
    assert location.package is None
    assert location.looked == ["vllm (not found on PATH)", "gpudoctor's own interpreter"]


def test_python_dash_m_asks_that_interpreter_for_its_path(new_tree):
    """A real interpreter (this one) whose PYTHONPATH holds the fake site-packages."""
    site = new_tree.parent.parent / "lib" / "python3.11" / "site-packages"
    env = {"PYTHONPATH": str(site), "PATH": os.environ.get("PATH", "")}
    location = vllm_source.locate([sys.executable, "-m", "vllm.entrypoints.openai.api_server"], env, timeout=30)
    assert location.package == str(site / "vllm") and location.how == sys.executable
    # Without that PYTHONPATH the same interpreter has no vLLM.
    assert vllm_source.locate([sys.executable, "-m", "vllm.entrypoints.openai.api_server"], {"PATH": ""}, timeout=30).package is None


def test_flags_of_the_new_layout(new_tree):
    flags = vllm_source.flags(package(new_tree).package)
    # Literal add_argument names, with their short aliases.
    assert {"--model", "--max-model-len", "--tensor-parallel-size", "--speculative-config", "--attention-backend"} <= flags.known
    assert flags.aliases["-tp"] == "--tensor-parallel-size" and flags.aliases["-sc"] == "--speculative-config"
    # Fields of FrontendArgs and its base class, added in the get_kwargs(cls) loop.
    assert {"--host", "--port", "--tool-call-parser", "--enable-auto-tool-choice", "--api-key", "--uds"} <= flags.known
    # Bool fields become BooleanOptionalAction switches (and --no-…); others take values.
    assert {"--trust-remote-code", "--enforce-eager", "--enable-auto-tool-choice", "--enable-prefix-caching", "--headless"} <= flags.switches
    assert "--no-enable-prefix-caching" in flags.known
    assert "--max-model-len" not in flags.switches and "--port" not in flags.switches
    assert "--chat-template-kwargs" not in flags.known


def test_flags_of_the_old_layout(old_tree):
    flags = vllm_source.flags(package(old_tree).package)
    assert {"--model", "--host", "--port", "--tool-call-parser", "--speculative-config", "--reasoning-parser"} <= flags.known
    assert "--attention-backend" not in flags.known
    assert flags.aliases["-O"] == "--compilation-config"
    assert {"--trust-remote-code", "--enforce-eager", "--enable-auto-tool-choice", "--enable-prefix-caching"} <= flags.switches
    assert "--no-enable-prefix-caching" in flags.known  # argparse.BooleanOptionalAction


def test_parsers_methods_architectures_quantization_backends(new_tree, old_tree):
    new = vllm_source.everything(package(new_tree).package)
    assert new["tool_parsers"]["names"] == ["hermes", "llama3_json", "qwen3_coder", "qwen3_xml"]
    assert new["tool_parsers"]["where"] == ["tool_parsers"]
    assert new["reasoning_parsers"]["names"] == ["deepseek_r1", "qwen3"]
    assert new["spec_methods"] == sorted(["ngram", "medusa", "mlp_speculator", "draft_model", "suffix", "eagle", "eagle3", "dflash",
                                          "deepseek_mtp", "mtp", "qwen3_5_mtp", "ngram_gpu"])
    assert "Qwen3_5ForConditionalGeneration" in new["architectures"] and "DFlashDraftModel" in new["architectures"]
    assert new["quantization"] == {"fp8": 75, "awq": 75, "gptq": 60, "modelopt": 89, "modelopt_fp4": 75}
    assert new["attention_backends"] == sorted(["FLASH_ATTN", "TRITON_ATTN", "FLASHINFER", "FLASHMLA", "CUTLASS_MLA", "FLEX_ATTENTION"])
    assert new["markers"] == {"reads_vllm_attention_backend_env": False}

    old = vllm_source.everything(package(old_tree).package)
    assert old["tool_parsers"] == {"names": ["hermes", "llama3_json"], "where": ["entrypoints/openai/tool_parsers"]}
    assert old["reasoning_parsers"]["names"] == ["deepseek_r1"]
    assert old["spec_methods"] == ["draft_model", "eagle", "medusa", "mlp_speculator", "ngram"]
    assert old["attention_backends"] == ["FLASHINFER", "FLASH_ATTN", "XFORMERS"]
    assert old["markers"] == {"reads_vllm_attention_backend_env": True}


def test_a_tree_without_those_places_gives_none(tmp_path):
    pkg = tmp_path / "vllm"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("", encoding="utf-8")
    found = vllm_source.everything(str(pkg))
    assert found["flags"] is None and found["tool_parsers"] is None and found["spec_methods"] is None
    assert found["architectures"] is None and found["quantization"] is None and found["attention_backends"] is None


def test_garbage_source_does_not_raise(tmp_path):
    pkg = tmp_path / "vllm"
    for rel in ("engine/arg_utils.py", "config/speculative.py", "tool_parsers/__init__.py", "model_executor/models/registry.py"):
        path = pkg / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"add_argument(\"--ok\", \x00\xff( [ { \"\nSpeculativeMethod = Literal[\n_TOOL_PARSERS_TO_REGISTER = {\n\"a\": (\n")
    found = vllm_source.everything(str(pkg))
    assert "--ok" in found["flags"].known
