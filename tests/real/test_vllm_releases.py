"""Real vLLM releases from PyPI are the oracle for preflight's flag, value and config checks.

For each release: a venv with that vLLM wheel and CPU torch (tests/realenv.py, cached), in which
vLLM's own parser (tests/real/vllm_oracle.py, a child process under VLLM_TARGET_DEVICE=cpu) builds a
corpus from every action `vllm serve` defines (each option string with a value it accepts, plus
typos, missing values, wrong types, out-of-range numbers, bad choices, bad JSON, unknown config
keys) and decides each command. gpudoctor's preflight (the launch probe + every launch rule, no
machine facts) on the `bin/vllm` of the same release as `pip install vllm==X` installs it
(realenv.release_venv; preflight reads its source, never imports it) must agree: no valid command
blocked, and at least 95 % of the refused ones blocked. The corpus and vLLM's verdicts are
computed once per release and oracle version and cached beside the venvs (the oracle's own venv
is built only to compute them).

Releases, chosen for layouts that differ: 0.8.5 (vllm/utils.py's FlexibleArgumentParser, config.py,
explicit add_argument for most flags), 0.11.0 (vllm/config/ package, literal-list loop of deprecated
flags), 0.20.0 (utils/argparse_utils.py, tool_parsers/ registry), 0.33.0 (entrypoints/common/
cli_args.py, EnableDisableAction pairing --enable-x with --disable-x, pydantic Field ranges), 0.34.0
(the extensible KV cache, kwargs edited through other names, ranges checked only when a class is
built under a condition, cross-flag checks of the config classes).

A release without a closure lock (0.34.0: `pip install vllm==0.34.0` cannot be resolved from PyPI,
its pin flashinfer-python==0.7.3 is not published there) is preflighted on a venv of its wheel alone,
installed --no-deps, whose source preflight reads (never imports); the launch rules read nothing else
of the venv.
"""

import hashlib
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import realenv  # noqa: E402

from gpudoctor import registry  # noqa: E402
from gpudoctor.engine import run_rules  # noqa: E402
from gpudoctor.probes.launch import probe  # noqa: E402
from gpudoctor.snapshot import Snapshot  # noqa: E402

pytestmark = pytest.mark.real

RELEASES = ["0.34.0", "0.33.0", "0.20.0", "0.11.0", "0.8.5"]
# Commands preflight blocks and vLLM's parser passes, on purpose: a lone --spec-tokens 0 is ignored
# by vLLM (no speculative method, so SpeculativeConfig(num_speculative_tokens >= 1) is never built),
# but it is still a wrong value the moment a method is added.
# And a lone --checkpoint-prepare-on-startup (0.34.0): ModelConfig.__post_init__ raises
# "checkpoint_prepare_on_startup requires enable_sleep_mode" (vllm/config/model.py), which the oracle
# cannot see: it cannot build a ModelConfig without the model's files.
EXPECTED_DISAGREEMENT = {("--spec-tokens", "0"), ("--spec-tokens", "-1"), ("--checkpoint-prepare-on-startup",)}
CPU_TORCH = "2.13.0"  # the CPU wheel for cp311 in the machine's local wheel directory
ORACLE = Path(__file__).resolve().parent / "vllm_oracle.py"


def locked(version: str) -> bool:
    return (realenv.CLOSURES / f"vllm-{version}.txt").is_file()


def vllm_script(version: str) -> Path:
    """The `vllm` script of the release as `pip install vllm==X` installs it (preflight reads its source, never
    imports it); for a release without a lock, of a venv holding its wheel alone."""
    return (realenv.release_venv(version) if locked(version) else realenv.venv_with(f"vllm=={version}")).parent / "vllm"


def oracle_python(version: str) -> Path:
    """A venv with this vLLM, CPU torch and the rest of what `pip install vllm==X` installs, less the GPU
    stack (realenv.parser_venv): from its closure lock; for a release without one, its wheel and vLLM's
    requirements less the GPU packages, as pip resolves them now."""
    if locked(version):
        return realenv.parser_venv(version, torch=CPU_TORCH)
    items = realenv.pip_resolve([f"vllm=={version}"], realenv.SCRATCH, no_deps=True)
    items += realenv.pip_resolve(realenv.requires_dist(realenv.wheel("vllm", version)), realenv.SCRATCH)
    return realenv.parser_venv(version, torch=CPU_TORCH, items=items)


def verdicts(version: str) -> list:
    """vLLM's own verdict on the corpus, computed once per release and oracle script."""
    digest = hashlib.sha256(ORACLE.read_bytes()).hexdigest()[:12]
    cache = realenv.CACHE / "oracle" / f"vllm-{version}-{digest}.json"
    if cache.exists():
        return json.loads(cache.read_text())
    python = oracle_python(version)
    env = dict(os.environ, VLLM_TARGET_DEVICE="cpu", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1",
               # vLLM 0.8.5 takes a flag's choices from the first Literal of a set of types: with a random hash
               # seed, --guided-decoding-backend's choices differ from one run to the next
               PYTHONHASHSEED="0")
    cache.parent.mkdir(parents=True, exist_ok=True)
    partial = cache.with_suffix(f".{os.getpid()}.part")
    done = subprocess.run([str(python), str(ORACLE), "corpus", str(partial)], capture_output=True, text=True, env=env,
                          timeout=1800, cwd=str(realenv.CACHE))
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    data = json.loads(partial.read_text())
    partial.replace(cache)
    realenv.discard(python)  # built only to compute these (~2 GB): the verdicts are what is kept
    return data


LAUNCH_RULES = None


def blocked(vllm_script: Path, argv: list) -> list:
    """The ERROR findings preflight gives this command (launch rules only, no machine facts)."""
    global LAUNCH_RULES
    if LAUNCH_RULES is None:
        LAUNCH_RULES = registry.select(registry.load_rules(), ["launch"])
    env = {"PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", "/root"), "HF_HUB_OFFLINE": "0"}
    _, facts, _ = probe.inspect([str(vllm_script), "serve", *argv], environ=env, own_paths=None, timeout=10.0)
    result = run_rules(Snapshot(dict(facts)), LAUNCH_RULES)
    return [f"{f.rule_id} {f.title}"[:300] for f in result.findings if f.severity == "error"]


@pytest.mark.parametrize("version", RELEASES)
def test_preflight_agrees_with_vllms_own_parser(version):
    corpus = verdicts(version)
    # preflight reads the vLLM of the command's venv (source, never imported): the same release as
    # `pip install vllm==X` installs it, so the oracle's own venv is needed only to compute verdicts.
    script = vllm_script(version)
    assert script.exists()
    false_blocks, missed, kinds = [], [], Counter()
    # refused None: the oracle, on CPU, got a refusal about its own platform (ParallelConfig's "Expert
    # parallelism load balancing is only supported on CUDA …"): what vLLM does on a GPU is not known.
    corpus = [c for c in corpus if c["refused"] is not None]
    refused = sum(1 for c in corpus if c["refused"])
    for case in corpus:
        errors = blocked(script, case["argv"])
        kinds[(case["kind"], case["refused"], bool(errors))] += 1
        if tuple(case["argv"][1:]) in EXPECTED_DISAGREEMENT:
            continue
        if errors and not case["refused"]:
            false_blocks.append((case["argv"], errors[:2]))
        elif case["refused"] and not errors:
            missed.append((case["argv"], case["why"]))
    valid = len(corpus) - refused
    caught = refused - len(missed)
    line = (f"vLLM {version}: {len(corpus)} commands, {valid} valid ({len(false_blocks)} blocked), {refused} refused by vLLM "
            f"({caught} blocked = {100.0 * caught / max(refused, 1):.1f} %)")
    print("\n" + line)
    report = realenv.CACHE / "oracle" / f"differential-{version}.txt"
    report.write_text(line + "\n" + "\n".join(f"FALSE BLOCK {a}: {e}" for a, e in false_blocks)
                      + "\n" + "\n".join(f"MISSED {a}: {w}" for a, w in missed) + "\n")
    assert not false_blocks, f"{line}\n" + "\n".join(f"{a}: {e}" for a, e in false_blocks[:20])
    assert caught >= 0.95 * refused, f"{line}\n" + "\n".join(f"{a}: {w}" for a, w in missed[:30])
