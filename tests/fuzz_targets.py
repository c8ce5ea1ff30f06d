"""Every parser of untrusted input, with its seeds and what it may raise (issue 14).

Shared by the property tests (tests/test_property_parsers.py: a few hundred cases each, in
CI) and the fuzz driver (benchmarks/fuzz_parsers.py: 100,000+ cases each, by hand). A
target is ``(name, function(bytes), allowed exception types, seeds)``; anything else the
function raises is a bug, and so is an input that takes seconds.

Seeds are real: the public nvidia-smi XML and /proc/driver/nvidia/version texts recorded
from other machines, the snapshots in tests/fixtures, real vLLM command lines, METADATA
headers of the distributions installed here.
"""

from __future__ import annotations

import io
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, List, Sequence, Tuple, Type

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"
PUBLIC = FIXTURES / "ground_truth" / "public"
SHARED_PUBLIC = Path("/work/shared/fixtures/public")


@dataclass
class Target:
    name: str
    run: Callable[[bytes], object]
    allowed: Tuple[Type[BaseException], ...]
    seeds: List[bytes]


def _files(*patterns: str, limit: int = 40) -> List[bytes]:
    out: List[bytes] = []
    for pattern in patterns:
        for base in (FIXTURES, PUBLIC, SHARED_PUBLIC):
            for path in sorted(base.glob(pattern))[:limit]:
                if path.is_file() and path.stat().st_size < (1 << 20):
                    out.append(path.read_bytes())
    return out[:limit] or [b""]


def _text(data: bytes) -> str:
    return data.decode("utf-8", "replace")


COMMANDS = [
    b"vllm serve Qwen/Qwen3-8B --tensor-parallel-size 2 --max-model-len 32k --gpu-memory-utilization 0.9",
    b"vllm serve m --speculative-config '{\"method\": \"eagle3\", \"num_speculative_tokens\": 3}' --port 8000",
    b"python -m vllm.entrypoints.openai.api_server --model m --max-num-seqs 64 --dtype bfloat16",
    b"CUDA_VISIBLE_DEVICES=0,1 VLLM_USE_V1=1 vllm serve m --speculative-config.method dflash --enforce-eager",
    b"A=1\nB=$A$A\nexport HF_HOME=/data\nvllm serve m --max-model-len $B --served-model-name ${NAME:-x}\n",
]
METRICS = [
    b"# HELP vllm:spec_decode_num_drafts_total x\n# TYPE vllm:spec_decode_num_drafts_total counter\n"
    b'vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 12.0\n'
    b'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 9\n',
    b"llamacpp:prompt_tokens_total 42\nllamacpp:n_decode_total 7 1690000000000\n",
]
URLS = [b"http://127.0.0.1:8000", b"https://host:443/v1", b"localhost:30000/llm/v1", b"http://[::1]:8000/"]
STAT = [b"645 (VLLM::EngineCor) S 1 645 645 0 -1 4194560 1 0 0 0 1 2 0 0 20 0 9 0 12345 1000 10 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 3 0 0 0 0 0"]
NET_TCP = [b"  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
           b"   0: 0100007F:1F40 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 123 1 0 100 0 0 10 0\n"]
NVCC = [b"nvcc: NVIDIA (R) Cuda compiler driver\nCuda compilation tools, release 12.8, V12.8.93\nBuild cuda_12.8.r12.8/compiler.35583870_0"]
VERSIONS = [b"__version__ = '2.9.0+cu128'\ndebug = False\ncuda: Optional[str] = '12.8'\ngit_version = 'abc'\nhip = None\n"]
LOGS = [
    b"RuntimeError: CUDA error: no kernel image is available for execution on the device\n",
    b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n",
    b"ImportError: /x/flash_attn_2_cuda.cpython-311-x86_64-linux-gnu.so: undefined symbol: _ZN3c104cuda9SetDeviceEi\n",
    b"OSError: [Errno 98] Address already in use\n",
]


def _metadata_seeds() -> List[bytes]:
    import importlib.metadata

    out = []
    for dist in list(importlib.metadata.distributions())[:20]:
        text = dist.read_text("METADATA") or ""
        out.append(text[:4000].encode())
    return out or [b"Name: x\nVersion: 1\n"]


def _snapshot_seeds() -> List[bytes]:
    return [p.read_bytes() for p in sorted((FIXTURES / "snapshots").glob("*.json"))[:6]]


def _fatbin_seeds() -> List[bytes]:
    return [p.read_bytes()[: 256 << 10] for p in sorted((FIXTURES / "fatbin").glob("*.so"))[:4]] or [b"\x7fELF"]


# --- the functions under test ---------------------------------------------------------------------
def _loads(data: bytes):
    from gpudoctor import bounded

    return bounded.loads(data)


def _snapshot(data: bytes):
    from gpudoctor import bounded
    from gpudoctor.snapshot import Snapshot

    return Snapshot.from_json(bounded.loads(data))


def _nvidia_smi(data: bytes):
    from gpudoctor.probes.nvidia_smi import parse_xml

    return parse_xml(_text(data))


def _proc_version(data: bytes):
    from gpudoctor.probes.driver import parse_proc_version

    return parse_proc_version(_text(data))


def _version_py(data: bytes):
    from gpudoctor.probes.python_stack_read import read_version_py

    return read_version_py(_text(data))


def _headers(data: bytes):
    from gpudoctor.probes.python_stack_read import parse_headers

    return parse_headers(_text(data))


def _launch(data: bytes):
    import shlex

    from gpudoctor.probes.launch import parser

    try:
        words = shlex.split(_text(data)[:4000])
    except ValueError:
        words = _text(data).split()
    launch = parser.parse(words)
    if launch.is_vllm:
        parser.typed_options(launch)
    return launch


def _command_lines(data: bytes):
    from gpudoctor.probes.launch import command_file, parser

    variables = {}
    for line in _text(data).splitlines()[:200]:
        words = command_file._split(command_file._expand(line, variables, set()))
        for word in words:
            if parser._ASSIGNMENT.match(word):
                name, _, value = word.partition("=")
                variables[name] = value
    return variables


def _visible(data: bytes):
    from gpudoctor.visible import resolve

    return resolve(_text(data), ["GPU-1b2f0c3e-aaaa-bbbb-cccc-000000000000", "GPU-9f00", None])


def _nvcc(data: bytes):
    from gpudoctor.probes.cuda import parse_compiler_version, parse_nvcc_version

    text = _text(data)
    return parse_nvcc_version(text), parse_compiler_version(text.splitlines()[0] if text else "")


def _explain(data: bytes):
    from gpudoctor import explain

    return explain.match_text(explain.clean(_text(data)))


def _url(data: bytes):
    from gpudoctor.probes.smoke.client import normalize_url

    return normalize_url(_text(data))


def _metrics(data: bytes):
    from gpudoctor.probes.smoke import metrics

    return metrics.parse(_text(data))


def _redact(data: bytes):
    from gpudoctor.redact import redact

    text = _text(data)
    once = redact(text)
    if redact(once) != once:
        raise AssertionError(f"redaction is not idempotent on {text[:200]!r}")
    return once


def _stat(data: bytes):
    from gpudoctor.probes.processes import parse_net_tcp, parse_stat

    return parse_stat(645, data), parse_net_tcp(_text(data), 8000, 4)


def _fatbin(data: bytes):
    from gpudoctor.probes import fatbin

    return fatbin.scan("fuzz.so", opener=lambda path: io.BytesIO(data))


def _versions(data: bytes):
    from gpudoctor.probes.flash_attn import parse_local_tag
    from gpudoctor.probes.vllm_build import parse_version

    text = _text(data)[:2000]
    return parse_version(text), parse_local_tag(text)


def _gpu_spec(data: bytes):
    from gpudoctor.gpu_target import parse_spec

    return parse_spec(_text(data)[:200])


def _int(data: bytes):
    from gpudoctor import bounded
    from gpudoctor.probes.launch.vllm_values import human_readable_int as human_int

    text = _text(data)
    try:
        bounded.parse_int(text)
    except bounded.InputError:
        pass
    return human_int(text)


_SCRATCH: List[str] = []


def _scratch(data: bytes) -> str:
    """One temp file, rewritten for each case: for readers that take a path or a descriptor."""
    import os
    import tempfile

    if not _SCRATCH:
        fd, path = tempfile.mkstemp(prefix="gpudoctor-fuzz-")
        os.close(fd)
        _SCRATCH.append(path)
    with open(_SCRATCH[0], "wb") as handle:
        handle.write(data)
    return _SCRATCH[0]


def _safetensors(data: bytes):
    from gpudoctor.probes.launch.model import safetensors_header

    return safetensors_header(_scratch(data))


def _stdin_file(data: bytes):
    from gpudoctor.explain import read_stream

    with open(_scratch(data), "rb") as handle:  # `explain - < file`: bounded.read_fd_tail's file path
        return read_stream(handle, max_bytes=1 << 16)


def _config(data: bytes):
    from gpudoctor.config import _load

    return _load(_scratch(data))


def _safetensors_seed(header: dict) -> bytes:
    import json
    import struct

    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + b"\0" * 16


SAFETENSORS = [_safetensors_seed({"w": {"dtype": "BF16", "shape": [2, 4], "data_offsets": [0, 16]}}),
               _safetensors_seed({"__metadata__": {"format": "pt"}, "a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})]
TOMLS = [b'[tool.gpudoctor]\nfail-on = "warning"\nselect = ["GD1", "GD5"]\n', b'timeout = 20\nformat = "json"\n']


def targets() -> List[Target]:
    from gpudoctor.bounded import InputError
    from gpudoctor.config import ConfigError
    from gpudoctor.gpu_target import SpecError
    from gpudoctor.probes.smoke.client import URLError
    from gpudoctor.snapshot import SnapshotError

    return [
        Target("bounded.loads", _loads, (InputError,), _snapshot_seeds() + [b'{"a": [1, 2.5, "x", null]}']),
        Target("snapshot", _snapshot, (InputError, SnapshotError), _snapshot_seeds()),
        Target("nvidia_smi.parse_xml", _nvidia_smi, (), _files("nvidia-smi-xml/*.xml", "ground_truth/h200/*.xml")),
        Target("driver.parse_proc_version", _proc_version, (), _files("proc-driver-version/*.txt")),
        Target("python_stack_read.read_version_py", _version_py, (SyntaxError, ValueError, MemoryError, RecursionError), VERSIONS),
        Target("python_stack_read.parse_headers", _headers, (), _metadata_seeds()),
        Target("launch.parse", _launch, (), COMMANDS),
        Target("launch.expand_split", _command_lines, (ValueError,), COMMANDS),
        Target("visible.resolve", _visible, (), [b"0,1", b"GPU-1b2f", b"MIG-x,0", b""]),
        Target("cuda.nvcc_version", _nvcc, (), NVCC),
        Target("explain.match_text", _explain, (), LOGS),
        Target("smoke.normalize_url", _url, (URLError,), URLS),
        Target("smoke.metrics.parse", _metrics, (), METRICS),
        Target("redact.idempotent", _redact, (), LOGS + COMMANDS + [b"postgres://u:p/w@h/db hf_abcdefghijklmnopqrstuvwx"]),
        Target("processes.parse_stat_net_tcp", _stat, (), STAT + NET_TCP),
        Target("fatbin.scan", _fatbin, (), _fatbin_seeds()),
        Target("versions", _versions, (), [b"0.11.0+cu128", b"2.8.3+cu12torch2.7cxx11abiTRUE", b"0.10.2.dev123+g1234abc"]),
        Target("gpu_target.parse_spec", _gpu_spec, (SpecError,), [b"sm_80", b"8.6", b"A100", b"RTX 4090", b"2xH100-80GB"]),
        Target("human_int", _int, (ValueError,), [b"32k", b"32K", b"auto", b"1.5m", b"-1"]),
        Target("model.safetensors_header", _safetensors, (), SAFETENSORS),
        Target("explain.read_stream_file", _stdin_file, (), LOGS),
        Target("config.load", _config, (ConfigError,), TOMLS),
    ]


# --- mutation (the fuzz driver; the property tests use hypothesis instead) -------------------------
INTERESTING = [b"[" * 5000, b"{\"a\":" * 2000, b"9" * 5000, b"\0", b"-" * 2000, b"\xff\xfe", b"\n" * 1000,
               b"'", b"\"", b"\\", b"$A$A$A", b"${", b"<gpu>" * 500, b"e400", b"NaN", b"-0", b"\x7fELF",
               b"a" * 70000, b"::", b"@", b"%", b"\r", b"\t" * 100, b"\x1b[31m"]


def mutate(rng: random.Random, seed: bytes, seeds: Sequence[bytes]) -> bytes:
    data = bytearray(seed)
    for _ in range(rng.randint(1, 4)):
        choice = rng.random()
        at = rng.randint(0, len(data)) if data else 0
        if choice < 0.25 and data:
            data[at % len(data)] = rng.randrange(256)
        elif choice < 0.45:
            data[at:at] = rng.choice(INTERESTING)
        elif choice < 0.6 and data:
            end = min(len(data), at + rng.randint(1, 64))
            del data[at:end]
        elif choice < 0.75 and data:
            end = min(len(data), at + rng.randint(1, 256))
            data[at:at] = data[at:end] * rng.randint(1, 20)
        elif choice < 0.9:
            other = rng.choice(seeds)
            if other:
                start = rng.randint(0, len(other) - 1)
                data[at:at] = other[start:start + rng.randint(1, 512)]
        else:
            data[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 32)))
    return bytes(data[: 4 << 20])


def snapshot_mutations(rng: random.Random, data: dict, count: int = 3) -> dict:
    """A real snapshot with ``count`` facts given values of other types (the engine's input)."""
    values = [None, "x", 7, -1, 2.5, True, [], {}, [1, "a"], {"a": 1}, "9" * 50, [[{}]], {"x": [None]}, 10 ** 30]
    out = json.loads(json.dumps(data))
    for path in rng.sample(sorted(out["facts"]), min(count, len(out["facts"]))):
        out["facts"][path]["value"] = rng.choice(values)
        out["facts"][path]["status"] = "ok"
    return out
