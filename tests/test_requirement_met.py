"""gpudoctor/requirement_met.py: GD503's packaging-free path never calls a requirement met that packaging calls unmet."""

from __future__ import annotations

import json
import os

from hypothesis import given, settings
from hypothesis import strategies as st

from gpudoctor import requirement_met
from gpudoctor.snapshot import dist_key
from gpudoctor_rules.python_stack import _applies, _parse_requirement, _satisfied

HERE = os.path.dirname(__file__)
LINUX_312 = {"implementation_name": "cpython", "implementation_version": "3.12.3", "os_name": "posix", "platform_machine": "x86_64",
             "platform_python_implementation": "CPython", "platform_release": "6.8.0", "platform_system": "Linux",
             "platform_version": "#1 SMP", "python_full_version": "3.12.3", "python_version": "3.12", "sys_platform": "linux"}


def packaging_says(text, dists, env):
    """What GD503 decided before the fast path: skip (invalid or not for this platform), unmet or met."""
    req = _parse_requirement(text)
    if req is None or not _applies(req, env):
        return "skip"
    installed = dists.get(dist_key(req.name))
    if not isinstance(installed, dict) or not installed.get("version"):
        return "unmet"
    return "unmet" if _satisfied(req, str(installed["version"])) is False else "met"


def test_the_recorded_h200_stack_needs_no_packaging():
    """Every applicable requirement of torch/torchvision/transformers/triton on the H200 is decided here."""
    with open(os.path.join(HERE, "fixtures", "snapshots", "h200-every-cuda-binary.json"), encoding="utf-8") as handle:
        facts = json.load(handle)["facts"]
    stack, dists, env = facts["packages.stack"]["value"], facts["packages.dists"]["value"], facts["python.marker_env"]["value"]
    decided = 0
    for entry in stack.values():
        for text in entry.get("requires", []):
            if "extra ==" in text:
                continue
            verdict = packaging_says(text, dists, env)
            fast = requirement_met.satisfied(text, dists, env)
            if verdict == "met" or (verdict == "skip" and _parse_requirement(text) is not None):
                decided += fast is True
            assert fast is None or verdict != "unmet", text
    assert decided >= 25


def test_the_common_shapes():
    dists = {"torch": {"version": "2.11.0+cu130"}, "pillow": {"version": "11.3.0"}, "numpy": {"version": "2.1"}}
    assert requirement_met.satisfied("torch (==2.11.0)", dists, LINUX_312) is True  # the local label is ignored
    assert requirement_met.satisfied("torch==2.11", dists, LINUX_312) is True  # trailing zeros
    assert requirement_met.satisfied("pillow (!=8.3.*,>=5.3.0)", dists, LINUX_312) is True
    assert requirement_met.satisfied("cuda-toolkit[cublas,nvrtc]==13.0.2; platform_system == \"Windows\"", dists, LINUX_312) is True
    assert requirement_met.satisfied("importlib-metadata; python_version < \"3.10\"", dists, LINUX_312) is True
    assert requirement_met.satisfied("numpy", dists, LINUX_312) is True
    assert requirement_met.satisfied("numpy~=2.1", dists, LINUX_312) is True
    assert requirement_met.satisfied("numpy>=2.0rc1", dists, LINUX_312) is True  # a final release is above its pre-releases
    assert requirement_met.satisfied("numpy; python_version < \"3.10\" or platform_system == \"Linux\"", dists, LINUX_312) is True
    assert requirement_met.satisfied("numpy>=9; python_version < \"3.10\" or platform_system == \"Windows\"", dists, LINUX_312) is True  # not here
    # Not met, not installed, or not the common shape: packaging decides (and words the finding).
    for text in ("torch==2.12.0", "torch>2.11.0", "torch<2.11", "missing>=1", "numpy~=2.2", "numpy>2.0rc1", "numpy~=2",
                 "numpy @ https://x/y.whl",
                 "numpy; platform_release >= \"6\"", "numpy>=1.*", "numpy; (os_name == \"posix\") or (os_name"):
        assert requirement_met.satisfied(text, dists, LINUX_312) is None, text


# What a real vLLM 0.33.0 install (the wheel closure pip resolves, tests/real/closure) requires that
# the first fast path left to packaging, with what that install has: post-releases, ~=, a
# pre-release floor and `or` markers (~45 ms of importing packaging after the probes, every check).
VLLM_033 = [("nvidia-cutlass-dsl>=4.6.2a0", "nvidia-cutlass-dsl", "4.6.2"),
            ('triton~=3.8.0; platform_system == "Linux" and python_version < "3.15"', "triton", "3.8.0"),
            ("certifi>=2026.10.19", "certifi", "2026.10.19.post1"),
            ('llguidance<1.8.0,>=1.7.0; platform_machine == "x86_64" or platform_machine == "arm64" or platform_machine == "aarch64" '
             'or platform_machine == "ppc64le" or platform_machine == "s390x"', "llguidance", "1.7.3"),
            ('xgrammar==0.2.8; platform_machine == "x86_64" or platform_machine == "aarch64" or platform_machine == "arm64" '
             'or platform_machine == "s390x" or platform_machine == "ppc64le"', "xgrammar", "0.2.8"),
            ("flashinfer-python==0.7.2.post1", "flashinfer-python", "0.7.2.post1")]


def test_the_shapes_of_a_real_vllm_install_need_no_packaging():
    for text, name, version in VLLM_033:
        dists = {dist_key(name): {"version": version}}
        assert packaging_says(text, dists, LINUX_312) == "met", text
        assert requirement_met.satisfied(text, dists, LINUX_312) is True, text
        # One step off, and packaging decides: the fast path never says met.
        older = {dist_key(name): {"version": "0.0.1"}}
        assert packaging_says(text, older, LINUX_312) == "unmet" and requirement_met.satisfied(text, older, LINUX_312) is None, text


_release = st.lists(st.integers(0, 12), min_size=1, max_size=4).map(lambda parts: ".".join(map(str, parts)))
_op = st.sampled_from(["==", "!=", ">=", "<=", ">", "<", "~=", "==="])
_spec = st.tuples(_op, _release, st.sampled_from(["", ".*", "rc1", "a0", "b2", ".post1", ".post0", ".post2", ".dev0"])).map(lambda t: t[0] + t[1] + t[2])
_specs = st.lists(_spec, min_size=0, max_size=3).map(",".join)
_key = st.sampled_from(["platform_system", "sys_platform", "platform_machine", "python_version", "python_full_version",
                        "os_name", "platform_release", "implementation_name"])
_value = st.one_of(_release, st.sampled_from(["Linux", "linux", "Windows", "x86_64", "aarch64", "posix", "cpython", "v1", "3.12", "3.9"]))
_clause = st.tuples(_key, st.sampled_from(["==", "!=", "<", ">=", "in"]), _value).map(lambda t: f'{t[0]} {t[1]} "{t[2]}"')
_marker = st.lists(_clause, min_size=0, max_size=3).flatmap(
    lambda cs: st.sampled_from([" and ", " or "]).map(lambda joint: joint.join(cs)))
_installed = st.one_of(_release, st.tuples(_release, st.sampled_from(["+cu130", "+cpu", "rc1", ".post2", ".post1", ".post0", ".dev0",
                                                                    ".post1+cu130", "a1", ".post1.dev0"])).map("".join))


@settings(max_examples=1000, deadline=None)
@given(name=st.sampled_from(["torch", "Torch_X", "numpy"]), paren=st.booleans(), extras=st.booleans(), specs=_specs, marker=_marker,
       version=st.one_of(st.none(), _installed), python=st.sampled_from(["3.12", "3.9", "3.10"]), system=st.sampled_from(["Linux", "Windows"]))
def test_never_met_where_packaging_says_unmet(name, paren, extras, specs, marker, version, python, system):
    text = name + ("[a,b-c]" if extras else "") + (f" ({specs})" if paren and specs else specs) + (f"; {marker}" if marker else "")
    env = dict(LINUX_312, python_version=python, python_full_version=python + ".1", platform_system=system)
    dists = {} if version is None else {dist_key(name): {"version": version}}
    fast = requirement_met.satisfied(text, dists, env)
    assert fast in (True, None)
    if fast:
        assert packaging_says(text, dists, env) != "unmet", text


# SGLang 0.5.23's Requires-Dist lines that the fast path once left to packaging (parenthesised
# markers, an installed pre-release), with what its closure installs.
SGLANG_0523 = [
    ('av==16.1.0; sys_platform == "linux" and (platform_machine == "aarch64" or platform_machine == "arm64" or '
     'platform_machine == "armv7l")', "av", None),
    ('deepseek-recipe==0.2.0; (sys_platform == "linux" and (platform_machine == "x86_64" or platform_machine == "aarch64")) '
     'or sys_platform == "darwin"', "deepseek-recipe", "0.2.0"),
    ("flash-attn-4>=4.0.0b18", "flash-attn-4", "4.0.0b36"),
    ('torchcodec==0.17.0; sys_platform != "linux" or (sys_platform == "linux" and platform_machine != "aarch64" and '
     'platform_machine != "arm64" and platform_machine != "armv7l")', "torchcodec", "0.17.0"),
]


def test_sglangs_parenthesised_markers_and_prerelease_need_no_packaging():
    for text, name, version in SGLANG_0523:
        dists = {dist_key(name): {"version": version}} if version else {}
        assert packaging_says(text, dists, LINUX_312) in ("met", "skip"), text
        assert requirement_met.satisfied(text, dists, LINUX_312) is True, text
    older = {dist_key("flash-attn-4"): {"version": "4.0.0b9"}}
    assert packaging_says("flash-attn-4>=4.0.0b18", older, LINUX_312) == "unmet"
    assert requirement_met.satisfied("flash-attn-4>=4.0.0b18", older, LINUX_312) is None
    assert requirement_met.satisfied('x; platform_machine == "a(b" or (python_version >= "3"', {}, LINUX_312) is None  # unbalanced


_nested = st.recursive(_clause, lambda inner: st.tuples(inner, st.sampled_from([" and ", " or "]), inner, st.booleans()).map(
    lambda t: (f"({t[0]}{t[1]}{t[2]})" if t[3] else f"{t[0]}{t[1]}{t[2]}")), max_leaves=5)
_pre_installed = st.tuples(_release, st.sampled_from(["a1", "b2", "b36", "rc1", "rc10", ""])).map("".join)


@settings(max_examples=1000, deadline=None)
@given(specs=_specs, marker=_nested, version=st.one_of(st.none(), _installed, _pre_installed),
       python=st.sampled_from(["3.12", "3.9"]), machine=st.sampled_from(["x86_64", "aarch64"]))
def test_parentheses_and_prereleases_never_met_where_packaging_says_unmet(specs, marker, version, python, machine):
    text = "torch" + specs + f"; {marker}"
    env = dict(LINUX_312, python_version=python, python_full_version=python + ".1", platform_machine=machine)
    dists = {} if version is None else {"torch": {"version": version}}
    fast = requirement_met.satisfied(text, dists, env)
    assert fast in (True, None)
    if fast:
        assert packaging_says(text, dists, env) != "unmet", text
    bare = requirement_met.satisfied("torch" + specs, dists, env)
    if bare:
        assert packaging_says("torch" + specs, dists, env) != "unmet", specs
