"""`gpudoctor check --python VENV/bin/python --gpu sm_80 [--deep]` on real venvs with flash-attn installed.

Real venvs (``python -m venv``), real ``python -m gpudoctor`` processes; the probe runs inside
the venv's interpreter (which has no gpudoctor), ``--deep`` really loads the extension there.
The extension and torch's libc10 are the gcc-built stand-ins of tests/fixtures/torchabi (real
ELF files: one references a c10 symbol the stand-in libc10_cuda.so does not export).
"""

import json
import shlex
import sys
import sysconfig

import pytest

from gpudoctor.render import headlines
from gpudoctor.snapshot import Snapshot
from fakes.flash_attn_trees import EXT_GOOD, EXT_OLD, fa2, fa4, torch_site, vllm
from fakes.site_packages import SitePackages, make_venv, venv_site
from helpers import private_env
from helpers import doc_findings as findings, doc_outcome as outcome, gd

CP = "cp%d%d" % sys.version_info[:2]
EXT_NAME = "flash_attn_2_cuda" + (sysconfig.get_config_var("EXT_SUFFIX") or ".so")


def check(python, *extra):
    proc = gd("check", "--python", str(python), "--gpu", "sm_80", "--format", "json", *extra, timeout=180)
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode, json.loads(proc.stdout)


@pytest.fixture(scope="module")
def fa2_fa4_venv(tmp_path_factory):
    """The origin story: flash-attn-4 installed over flash-attn 2.8.3 on an Ampere box."""
    root = tmp_path_factory.mktemp("fa2fa4")
    python = make_venv(root / "venv")
    site = SitePackages(venv_site(root / "venv"))
    torch_site(site, version="2.7.1", cuda="12.6")
    site.dist("einops", "0.8.2", files={"einops/__init__.py": ""})
    fa2(site, version="2.8.3", so_name=EXT_NAME)
    fa4(site)
    vllm(site, version="0.10.0", requires=["torch==2.7.1"])
    return python


def test_fa2_and_fa4_on_ampere_name_both_the_clash_and_the_fix(fa2_fa4_venv):
    code, doc = check(fa2_fa4_venv)
    assert code == 1
    py = shlex.quote(str(fa2_fa4_venv))
    wheel = ("https://github.com/Dao-AILab/flash-attention/releases/download/v2.8.3/"
             f"flash_attn-2.8.3+cu12torch2.7cxx11abiTRUE-{CP}-{CP}-linux_x86_64.whl")

    [variant] = findings(doc, "GD401")
    assert variant["severity"] == "warning" and variant["subject"] == "flash-attn-4 / GPU 0"
    assert variant["message"].startswith("flash-attn-4 4.0.0b36 is FlashAttention-4, made for Hopper and Blackwell")
    assert "GPU 0 (a GPU with cc 8.0 (Ampere (GA100)), cc 8.0) is Ampere/Ada: vLLM never uses it here" in variant["message"]
    assert variant["fix"]["commands"] == [
        f"{py} -m pip uninstall -y flash-attn-4 flash-attn  # both: they share files in flash_attn/cute (GD402)",
        f"{py} -m pip install --no-deps --force-reinstall {wheel}",
    ]

    [clash] = findings(doc, "GD402")
    assert clash["severity"] == "error" and clash["subject"] == "flash-attn + flash-attn-4"
    assert clash["message"].startswith("flash-attn 2.8.3 and flash-attn-4 4.0.0b36 both install 2 files into flash_attn/cute "
                                       "(e.g. flash_attn/cute/__init__.py, flash_attn/cute/interface.py)")
    assert "flash-attn-4 was installed last" in clash["message"]
    assert clash["fix"]["commands"] == [
        f"{py} -m pip uninstall -y flash-attn flash-attn-4  # both: each one's uninstall removes the other's files",
        f"{py} -m pip install --no-deps --force-reinstall {wheel}",
    ]
    assert clash["fix"]["safety"] == "disruptive"

    facts = doc["snapshot"]["facts"]
    assert facts["flash_attn.clashes"]["source"].endswith(f"(--python {fa2_fa4_venv})")
    snap = Snapshot.from_json(doc["snapshot"])
    assert headlines.headline("flash_attn", snap) == "FA2 flash-attn 2.8.3, FA4 flash-attn-4 4.0.0b36; vLLM bundles FA2+FA3+FA4; 1 file clash(es)"
    assert "vllm 0.10.0 (index)" in headlines.headline("vllm", snap)
    # The rest of the stack is fine: no kernel-image or torch-pin findings mixed in; and GD503 does
    # not ask to install flash-attn-4's missing dependencies (nvidia-cutlass-dsl …) for the package
    # GD401/GD402 say to remove: one fix per cause.
    for rule_id in ("GD201", "GD404", "GD510"):
        assert outcome(doc, rule_id)["status"] in ("pass", "not_applicable"), rule_id
    assert [f["subject"] for f in findings(doc, "GD503")] == []
    # The explain signature for "No module named 'flash_attn.cute'" names these rules.
    proc = gd("explain", "No module named 'flash_attn.cute'", "--python", str(fa2_fa4_venv), "--gpu", "sm_80")
    assert "GD402" in proc.stdout and "GD403" in proc.stdout


@pytest.fixture(scope="module")
def torch29_venv(tmp_path_factory):
    """flash-attn 2.8.3 built for torch 2.7 (wheel tag and c10 symbols) under torch 2.9."""
    root = tmp_path_factory.mktemp("torch29")
    python = make_venv(root / "venv")
    site = SitePackages(venv_site(root / "venv"))
    torch_site(site, version="2.9.0", cuda="12.8", abi_libs=True)
    fa2(site, version="2.8.3+cu12torch2.7cxx11abiTRUE", ext=EXT_OLD, so_name=EXT_NAME)
    return python


def test_fa2_built_for_torch_27_under_torch_29_with_deep(torch29_venv):
    code, doc = check(torch29_venv, "--deep")
    assert code == 1
    facts = doc["snapshot"]["facts"]
    [loaded] = facts["flash_attn.import_check"]["value"]["extensions"]
    assert loaded["status"] == "error" and loaded["undefined_symbol"] == "_ZN3c104cuda9SetDeviceEa"
    assert facts["vllm.import_check"]["status"] == "absent"

    [finding] = findings(doc, "GD404")
    assert finding["severity"] == "error"
    assert "its wheel tag +cu12torch2.7cxx11abiTRUE says torch 2.7, torch 2.9.0+cu128 is installed" in finding["message"]
    assert "needs 1 c10 symbol(s) the installed torch does not export (e.g. _ZN3c104cuda9SetDeviceEa)" in finding["message"]
    assert '--deep confirms: loading it fails with "undefined symbol: _ZN3c104cuda9SetDeviceEa"' in finding["message"]
    wanted = f"flash_attn-2.8.3+cu12torch2.9cxx11abiTRUE-{CP}-{CP}-linux_x86_64.whl"
    assert finding["fix"]["summary"].startswith(f"No prebuilt flash-attn wheel matches this torch ({wanted}): no release gpudoctor knows has it")
    assert finding["fix"]["commands"][-1].endswith(
        f'FLASH_ATTN_CUDA_ARCHS="80" {shlex.quote(str(torch29_venv))} -m pip install --no-build-isolation --no-cache-dir flash-attn==2.8.3')
    assert outcome(doc, "GD405")["status"] in ("pass", "fail")  # depends on this machine's ninja and nvcc


def test_without_deep_nothing_is_imported(torch29_venv):
    _, doc = check(torch29_venv)
    fact = doc["snapshot"]["facts"]["flash_attn.import_check"]
    assert fact["status"] == "not_supported" and "use --deep" in fact["detail"]
    [finding] = findings(doc, "GD404")
    assert "--deep" not in finding["message"]


def test_matching_build_loads_under_deep(tmp_path):
    python = make_venv(tmp_path / "venv")
    site = SitePackages(venv_site(tmp_path / "venv"))
    torch_site(site, version="2.9.0", cuda="12.8", abi_libs=True)
    fa2(site, version="2.8.3+cu12torch2.9cxx11abiTRUE", ext=EXT_GOOD, so_name=EXT_NAME)
    code, doc = check(python, "--deep")
    [loaded] = doc["snapshot"]["facts"]["flash_attn.import_check"]["value"]["extensions"]
    assert loaded == {"module": "flash_attn_2_cuda", "path": str(site.path / EXT_NAME), "status": "ok"}
    assert outcome(doc, "GD404")["status"] == "pass"


def test_the_child_gives_the_in_process_facts_with_or_without_the_collectors(tmp_path):
    """python_stack's bootstrap compiles the flash-attn / vLLM collectors in the --python child only when
    the environment has something for them; either way the facts are the ones the in-process probe gives."""
    from gpudoctor.probes import flash_attn, python_stack, vllm_build

    python = make_venv(tmp_path / "venv")
    facts = python_stack.collect_other(str(python), private_env(PATH="/nonexistent"), 60)
    for path, data in {**flash_attn.empty_facts(), **vllm_build.empty_facts()}.items():
        assert (facts[path].value, facts[path].status, facts[path].detail) == (data["value"], data["status"], data.get("detail", "")), path
    # A bare flash_attn directory (no distribution) is enough to run the collector: a namespace package.
    (venv_site(tmp_path / "venv") / "flash_attn" / "cute").mkdir(parents=True)
    facts = python_stack.collect_other(str(python), private_env(PATH="/nonexistent"), 60)
    namespace = facts["flash_attn.namespace"].value
    assert namespace["importable"] and namespace["kind"] == "namespace" and not namespace["ops"]
