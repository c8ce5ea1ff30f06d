"""Redaction: planted secrets never leave gpudoctor, the facts around them do.

A snapshot recorded on a real H200 gets secrets planted where real ones turn up:
environment variables with and without secret-looking names, a serving process's command
line, a log, a password in a URL, an Authorization header, a private key block. Every
output -- terminal (check, explain, compare), JSON (check, snapshot, report, explain,
compare), Markdown (check, report) and every member of the report bundle -- must contain
none of them, and must still show the non-secret facts next to them. The same outputs with
``--no-redact`` do contain them, which proves the planting reaches each output.
"""

import json
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from gpudoctor.redact import DEFAULT, MASK, Identities, Redactor, is_secret_name, redact, redact_data

REPO = Path(__file__).resolve().parent.parent
H200 = REPO / "tests" / "fixtures" / "snapshots" / "h200.json"

# name -> the secret itself. Each value is unique, so finding it anywhere is a leak.
SECRETS = {
    "env HF_TOKEN": "hf_QwErTyUiOpAsDfGhJkLzXcVbNm1234Zq01",
    "env HUGGING_FACE_HUB_TOKEN (no prefix)": "p1aInHubT0kenValueZq02",
    "env VLLM_API_KEY": "vllm-key-Zx81Ks02LmZq03",
    "env AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzq8PZq04",
    "env DB_PASSWORD with &": "Tr0ub4dor&3xZq05",
    "env GITHUB_TOKEN": "ghp_R4nd0mGitHubT0kenAbCdEfGh1234Zq06",
    "HF token in a non-secret name": "hf_TorchHubExtraTokenValue098765Zq07",
    "password in HF_ENDPOINT URL": "MirrorPa55Zq08",
    "OpenAI key in VLLM_EXTRA_ARGS": "sk-proj-AbCdEf1234567890XyZwVuZq09",
    "AWS key id in a CUDA_ variable": "AKIAIOSFODNN7EXAZQ10",
    "bearer token in VLLM_ENDPOINT_AUTH": "plainbearertoken1234Zq11",
    "--api-key on a GPU process cmdline": "cmdlineKey42xyzZq12",
    "--hf-token on a serving cmdline": "hf_CmdLineHubTokenValue11223344Zq13",
    "JWT in an Authorization header on a cmdline": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ2bGxtLXVzZXIifQ.c2lnbmF0dXJlMTIzZq14",
    "HF token in a log line": "hf_LogLineTokenValue5566778899aaZq15",
    "Basic auth header in a log line": "dXNlcjpzM2NyM3RQYXNzZq16",
    "password in a postgres URL in the log": "LogDbPassw0rdZq17",
    "private key body in the log": "MIIEowIBAAKCAQEAprivatekeybodyZq18",
    "Slack token in the log": "xoxb-1234567890-abcdefghijKLZq19",
    "Google API key in the log": "AIzaSyA1234567890abcdefghijklmnopqrZq20",
    "NGC API key in the log": "nvapi-NgcKeyValue_abcdefghij012345Zq21",
    "curl -u password in the log": "CurlPassw0rdZq22",
    "access_token in a URL query": "QueryTok3nValueZq23",
    "api_key on an error line": "ErrLineSecret99Zq24",
    "GitHub fine-grained PAT in the log": "github_pat_11ABCDEFG0123456789_abcdefghijklmZq25",
    "CUDA_VISIBLE_DEVICES with a token (shown by GD308)": "hf_CvdTokenValueShouldNotShow123Zq26",
    # issue 14: formats that leaked before
    "Stripe live key in the log": "sk_live_51HfQz8Kx2mLp4Rt7Vb9Nc3Dw6Zq27",
    "GitLab token in the log": "glpat-Rk3vX9mQ2pL7sT4wY8nZq28",
    "Slack webhook URL in the log": "T01ABCD2EFG/B03HIJK4LMN/x9Y8w7V6u5T4s3R2q1P0Zq29",
    "DSN password with / in the log": "p4ss/w0rd+Zq30",
    "Stripe key on the error line explain matches": "sk_live_ErrLineStr1peKeyValue99Zq31",
    "high-entropy value of a *_KEY variable": "9fQ2xL7mZ4vB8nC1kD6hJ3sR5tYq32",
}

# Facts next to the secrets that must survive redaction, per kind of output.
KEPT_EVERYWHERE = ["NVIDIA H200", "580.159.04"]
KEPT_ENV = ["/usr/local/cuda", "hf-mirror.example.com", "mirroruser", "--max-num-batched-tokens 8192"]
KEPT_CMDLINE = ["Qwen/Qwen3-8B"]
KEPT_LOG = ["vLLM API server version 0.11.0", "db.internal:5432", "no kernel image is available for execution on the device"]


def planted_snapshot() -> dict:
    data = json.loads(H200.read_text(encoding="utf-8"))
    facts = data["facts"]
    env = facts["env"]["value"]
    env.update(
        {
            "HF_TOKEN": SECRETS["env HF_TOKEN"],
            "HUGGING_FACE_HUB_TOKEN": SECRETS["env HUGGING_FACE_HUB_TOKEN (no prefix)"],
            "VLLM_API_KEY": SECRETS["env VLLM_API_KEY"],
            "AWS_SECRET_ACCESS_KEY": SECRETS["env AWS_SECRET_ACCESS_KEY"],
            "DB_PASSWORD": SECRETS["env DB_PASSWORD with &"],
            "GITHUB_TOKEN": SECRETS["env GITHUB_TOKEN"],
            "TORCH_HUB_EXTRA": SECRETS["HF token in a non-secret name"],
            "HF_ENDPOINT": f"https://mirroruser:{SECRETS['password in HF_ENDPOINT URL']}@hf-mirror.example.com",
            "VLLM_EXTRA_ARGS": f"--api-key {SECRETS['OpenAI key in VLLM_EXTRA_ARGS']} --max-num-batched-tokens 8192",
            "CUDA_CACHE_HINT": SECRETS["AWS key id in a CUDA_ variable"],
            "VLLM_ENDPOINT_AUTH": f"Authorization: Bearer {SECRETS['bearer token in VLLM_ENDPOINT_AUTH']}",
            "CUDA_VISIBLE_DEVICES": f"0,{SECRETS['CUDA_VISIBLE_DEVICES with a token (shown by GD308)']}",
        }
    )
    # A process holding 80 GiB (so GD302 fires and prints it), with its command line.
    facts["gpu.0.memory_used"]["value"] = 80 << 30
    facts["gpu.0.processes"]["value"] = [
        {"pid": 4242, "used_memory": 80 << 30, "cmdline": f"vllm serve Qwen/Qwen3-8B --api-key {SECRETS['--api-key on a GPU process cmdline']}"}
    ]
    facts["processes.serving"] = {
        "status": "ok",
        "source": "/proc",
        "value": [
            {
                "pid": 4242,
                "user": "alice",
                "stack": "vllm",
                "cmdline": (
                    f"vllm serve Qwen/Qwen3-8B --hf-token {SECRETS['--hf-token on a serving cmdline']} "
                    f"--middleware-header 'Authorization: Bearer {SECRETS['JWT in an Authorization header on a cmdline']}'"
                ),
            }
        ],
    }
    facts["host.hostname"] = {"status": "ok", "source": "uname", "value": "gpu-node-17.corp.example.com"}
    facts["host.user"] = {"status": "ok", "source": "getpwuid", "value": "alice"}
    return data


def planted_log() -> str:
    return "\n".join(
        [
            "INFO 07-28 15:07:20 [api_server.py:1] vLLM API server version 0.11.0",
            f"INFO 07-28 15:07:21 [hub.py:60] Using token {SECRETS['HF token in a log line']} for Qwen/Qwen3-8B",
            f"DEBUG request headers: Authorization: Basic {SECRETS['Basic auth header in a log line']}",
            f"INFO connecting to postgres://svc:{SECRETS['password in a postgres URL in the log']}@db.internal:5432/metrics",
            "-----BEGIN RSA PRIVATE KEY-----",
            SECRETS["private key body in the log"],
            "b64morekeymaterialAAAABBBBCCCC==",
            "-----END RSA PRIVATE KEY-----",
            f"WARNING slack notify failed with token {SECRETS['Slack token in the log']}",
            f"INFO maps key {SECRETS['Google API key in the log']} loaded",
            f"INFO NGC_API_KEY={SECRETS['NGC API key in the log']}",
            f"+ curl -u admin:{SECRETS['curl -u password in the log']} http://127.0.0.1:8000/metrics",
            f"INFO GET https://hub.example.com/api/models?access_token={SECRETS['access_token in a URL query']}&model=qwen",
            f"INFO git clone https://{SECRETS['GitHub fine-grained PAT in the log']}@github.com/org/repo",
            f"INFO billing with {SECRETS['Stripe live key in the log']} and registry {SECRETS['GitLab token in the log']}",
            f"INFO alerts to https://hooks.slack.com/services/{SECRETS['Slack webhook URL in the log']}",
            f"INFO DATABASE_URL=postgresql://svc:{SECRETS['DSN password with / in the log']}@db.internal:5432/metrics",
            f"INFO WANDB_KEY={SECRETS['high-entropy value of a *_KEY variable']}",
            "ERROR 07-28 15:07:22 [core.py:632] RuntimeError: CUDA error: no kernel image is available for execution "
            f"on the device (request api_key={SECRETS['api_key on an error line']} billing {SECRETS['Stripe key on the error line explain matches']})",
            "",
        ]
    )


def test_at_least_twenty_distinct_secrets_are_planted():
    assert len(SECRETS) >= 20
    assert len({secret[-4:].lower() for secret in SECRETS.values()}) == len(SECRETS)
    assert len(SECRETS["Google API key in the log"]) == 39  # the real format: AIza + 35


def gd(*args, stdin=None, cwd=None):
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR", "TERM")}
    env["PYTHONIOENCODING"] = "utf-8"
    proc = subprocess.run(
        [sys.executable, "-m", "gpudoctor", *args],
        input=stdin,
        capture_output=True,
        text=True,
        encoding="utf-8",
        env=env,
        cwd=str(cwd or REPO),
        timeout=120,
    )
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr
    return proc


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    """Every output gpudoctor writes about the planted snapshot, redacted (and a few without)."""
    tmp = tmp_path_factory.mktemp("planted")
    snap = tmp / "planted.json"
    snap.write_text(json.dumps(planted_snapshot()), encoding="utf-8")
    log = tmp / "vllm.log"
    log.write_text(planted_log(), encoding="utf-8")
    out = {}
    for fmt in ("text", "json", "markdown"):
        proc = gd("check", "--snapshot", str(snap), "--format", fmt, "--color", "never")
        assert proc.returncode == 1, proc.stderr  # GD308 is an error
        out[f"check {fmt}"] = proc.stdout
    proc = gd("check", "--snapshot", str(snap), "--color", "always")
    assert proc.returncode == 1 and "\x1b[" in proc.stdout, proc.stderr
    out["check text colour"] = proc.stdout
    for fmt in ("text", "json"):
        proc = gd("explain", "--log", str(log), "--snapshot", str(snap), "--format", fmt)
        assert proc.returncode == 0, proc.stderr
        out[f"explain --log {fmt}"] = proc.stdout
        proc = gd("explain", "-", "--snapshot", str(snap), "--format", fmt, stdin=planted_log())
        assert proc.returncode == 0, proc.stderr
        out[f"explain stdin {fmt}"] = proc.stdout
        proc = gd("compare", str(H200), str(snap), "--format", fmt)
        assert proc.returncode == 1, proc.stderr
        out[f"compare {fmt}"] = proc.stdout
    for fmt in ("markdown", "json"):
        proc = gd("report", "--snapshot", str(snap), "--log", str(log), "--format", fmt)
        assert proc.returncode == 1, proc.stderr
        out[f"report {fmt}"] = proc.stdout
    bundle = tmp / "support.tar.gz"
    proc = gd("report", "--snapshot", str(snap), "--log", str(log), "--bundle", "-o", str(bundle))
    assert proc.returncode == 1, proc.stderr
    with tarfile.open(bundle) as tar:
        for member in tar.getmembers():
            out[f"bundle {member.name}"] = tar.extractfile(member).read().decode("utf-8")
    return out


def _leaks(text):
    """Secrets found whole, or in part: every secret ends with a unique tail (Zq01 …)."""
    return [name for name, secret in SECRETS.items() if secret in text or secret[-4:] in text]


def test_every_output_was_produced(outputs):
    names = set(outputs)
    for expected in ("check text", "check json", "check markdown", "explain --log text", "explain stdin json",
                     "compare text", "compare json", "report markdown", "report json",
                     "bundle gpudoctor-report/report.md", "bundle gpudoctor-report/report.json",
                     "bundle gpudoctor-report/snapshot.json", "bundle gpudoctor-report/log-excerpt.txt",
                     "bundle gpudoctor-report/nvidia-smi-q.txt"):
        assert expected in names, sorted(names)


def test_no_secret_in_any_output(outputs):
    leaks = {name: _leaks(text) for name, text in outputs.items()}
    assert {name: found for name, found in leaks.items() if found} == {}


def test_json_outputs_stay_valid_json(outputs):
    for name, text in outputs.items():
        if name.endswith(" json") or name.endswith(".json"):
            json.loads(text)


@pytest.mark.parametrize(
    "name, kept",
    [
        ("check text", KEPT_EVERYWHERE[:1] + ["CUDA_VISIBLE_DEVICES", "Qwen/Qwen3-8B", "GD308", "GD302"]),
        ("check json", KEPT_EVERYWHERE + KEPT_ENV + KEPT_CMDLINE),
        ("check markdown", KEPT_EVERYWHERE + KEPT_ENV + KEPT_CMDLINE),
        ("explain --log text", ["SIG-no-kernel-image", KEPT_LOG[2], "GD2"]),
        ("explain stdin json", ["SIG-no-kernel-image", KEPT_LOG[2]]),
        ("compare text", ["env.HF_ENDPOINT", "hf-mirror.example.com", "mirroruser", "env.HF_TOKEN", "env.CUDA_CACHE_HINT", "AKIA***"]),
        ("compare json", ["env.VLLM_EXTRA_ARGS", "--max-num-batched-tokens 8192"]),
        ("report markdown", KEPT_EVERYWHERE + KEPT_ENV + KEPT_CMDLINE + KEPT_LOG),
        ("report json", KEPT_EVERYWHERE + KEPT_ENV + KEPT_CMDLINE + KEPT_LOG),
        ("bundle gpudoctor-report/report.md", KEPT_EVERYWHERE + KEPT_ENV + KEPT_LOG),
        ("bundle gpudoctor-report/snapshot.json", KEPT_EVERYWHERE + KEPT_ENV + KEPT_CMDLINE),
        ("bundle gpudoctor-report/log-excerpt.txt", KEPT_LOG),
    ],
)
def test_non_secret_facts_around_them_are_kept(outputs, name, kept):
    missing = [fact for fact in kept if fact not in outputs[name]]
    assert missing == [], outputs[name][:3000]


def test_the_planted_secrets_do_reach_the_outputs_without_redaction(tmp_path):
    """Without this, a secret that simply never reached an output would pass the test above."""
    snap = tmp_path / "planted.json"
    snap.write_text(json.dumps(planted_snapshot()), encoding="utf-8")
    log = tmp_path / "vllm.log"
    log.write_text(planted_log(), encoding="utf-8")
    proc = gd("report", "--snapshot", str(snap), "--log", str(log), "--no-redact")
    assert "--no-redact" in proc.stderr
    missing = sorted(set(SECRETS) - set(_leaks(proc.stdout)))
    assert missing == [], missing


def test_secret_named_variables_are_never_collected(tmp_path):
    """Layer 1: the probe's allowlist. HF_TOKEN / VLLM_API_KEY never enter the snapshot."""
    env = dict(
        os.environ,
        HF_TOKEN="hf_CollectedNeverAbcdefghijklmnop12",
        VLLM_API_KEY="neverCollectedKey77",
        NCCL_SOCKET_PASSWORD="ncclPass88",
        CUDA_HOME="/opt/cuda-13.0",
        HF_HOME="/data/hf-home",
        SOME_OTHER_VAR="not-relevant-value",
    )
    proc = subprocess.run([sys.executable, "-m", "gpudoctor", "snapshot", "--root", str(tmp_path)],
                          capture_output=True, text=True, env=env, cwd=str(REPO), timeout=120)
    assert proc.returncode == 0, proc.stderr
    facts = json.loads(proc.stdout)["facts"]
    collected = facts["env"]["value"]
    assert "HF_TOKEN" not in collected and "VLLM_API_KEY" not in collected and "NCCL_SOCKET_PASSWORD" not in collected
    assert "SOME_OTHER_VAR" not in collected  # not on the allowlist
    assert collected["CUDA_HOME"] == "/opt/cuda-13.0" and collected["HF_HOME"] == "/data/hf-home"
    for value in ("hf_CollectedNeverAbcdefghijklmnop12", "neverCollectedKey77", "ncclPass88"):
        assert value not in proc.stdout


# --- the patterns, one by one --------------------------------------------------------------
@pytest.mark.parametrize(
    "text, secret, kept",
    [
        ("export HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz0123", "abcdefghijklmnop", "export HF_TOKEN="),
        ('{"HF_TOKEN": "abc123secret", "CUDA_HOME": "/usr/local/cuda"}', "abc123secret", '"CUDA_HOME": "/usr/local/cuda"'),
        ("{'api_key': 'pyReprSecret1'}", "pyReprSecret1", "'api_key'"),
        ("vllm serve m --api-key s3cr3tvalue --max-num-batched-tokens 8192", "s3cr3tvalue", "--max-num-batched-tokens 8192"),
        ("vllm serve m --api-key=s3cr3tvalue2 --port 8000", "s3cr3tvalue2", "--port 8000"),
        ('curl -H "Authorization: Bearer abcdefghijklmnop" http://x', "abcdefghijklmnop", "Authorization: Bearer"),
        ("Authorization: Basic dXNlcjpwYXNzd29yZA==", "dXNlcjpwYXNzd29yZA", "Authorization: Basic"),
        ("Authorization: sk-abcdefghijklmnopqrstu", "abcdefghijklmnopqrstu", "Authorization:"),
        ("x-api-key: headerKey123", "headerKey123", "x-api-key"),
        ("postgres://admin:S3cr3tPw@db:5432/x", "S3cr3tPw", "postgres://admin:"),
        ("AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCY", "wJalrXUtnFEMI", "AWS_SECRET_ACCESS_KEY="),
        ("key AKIAIOSFODNN7EXAMPLE here", "AKIAIOSFODNN7EXAMPLE", "here"),
        ('password: "my secret phrase" ok', "secret phrase", "ok"),
        ("https://x.com/a?token=abcd1234&model=qwen", "abcd1234", "model=qwen"),
        ("curl -u alice:hunter2 http://x", "hunter2", "http://x"),
        ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk\n-----END OPENSSH PRIVATE KEY-----", "b3BlbnNzaC1rZXk", "private key"),
        ('{"log": "-----BEGIN PRIVATE KEY-----\\nMIIEvQIBADANBgkq\\nabc"}', "MIIEvQIBADANBgkq", '{"log": "'),
        ("token eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.abcdefghijklmn", "eyJzdWIiOiIxMjM0NTY3ODkwIn0", "token"),
        ("ghp_abcdefghijklmnopqrstuvwxyz0123456789", "abcdefghijklmnopqrstuvwxyz01", ""),
        ("xoxb-1234567890-abcdefghijkl", "1234567890-abcdefghijkl", ""),
        ("OPENAI_API_KEY=sk-proj-abcdefghijklmnop1234", "abcdefghijklmnop1234", "OPENAI_API_KEY="),
        ('{"cmd": "--env PASSWORD=\\"hunter2\\" --x"}', "hunter2", "--x"),
        ("DB_PASSWORD=Tr0ub4dor&3x next", "3x", "next"),
    ],
)
def test_pattern(text, secret, kept):
    out = redact(text)
    assert secret not in out, out
    assert kept in out, out
    assert redact(out) == out  # idempotent


@pytest.mark.parametrize(
    "text",
    [
        "--max-num-batched-tokens 8192 --max-tokens 16 --tokenizer Qwen/Qwen3-8B --tokenizer-mode auto",
        "TOKENIZERS_PARALLELISM=false max_tokens=128 num_tokens: 12",
        "INFO 07-28 [gpu_worker.py:1] Available KV cache memory: 120.5 GiB",
        "https://huggingface.co/Qwen/Qwen3-8B/resolve/main/config.json",
        "LD_LIBRARY_PATH=/usr/local/nvidia/lib64:/usr/local/nvidia/lib",
        "GPU-5068ed7f-58af-5bb6-967a-19484707cdc3 /home/alice/.cache",  # identities: only with anonymize
        "task-1234567890abcdefghij desk-abcdefghijklmnopqrstu",  # "sk-" inside a word is not a key
    ],
)
def test_ordinary_text_is_left_alone(text):
    assert redact(text) == text


def test_redacted_json_stays_parseable():
    doc = {
        "env": {"HF_TOKEN": "hf_abcdefghijklmnopqrstuvwxyz0123", "PASSWORD": 'he said "hi" \\ bye', "CUDA_HOME": "/usr/local/cuda"},
        "cmd": 'run --password "two words" --token=abc "Authorization: Bearer tok12345678"',
        "key": "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIBase64Body\n-----END EC PRIVATE KEY-----",
    }
    text = redact(json.dumps(doc, indent=1))
    parsed = json.loads(text)
    assert parsed["env"]["CUDA_HOME"] == "/usr/local/cuda"
    assert "Base64Body" not in text and "tok12345678" not in text and "hf_abcdefghij" not in text


def test_redact_data_masks_secret_named_keys_and_scrubs_strings():
    data = {"HF_TOKEN": "plainvalue", "nested": {"client_secret": 42, "url": "https://u:pw12345@h"}, "max_tokens": 16}
    out = redact_data(data)
    assert out["HF_TOKEN"] == MASK and out["nested"]["client_secret"] == MASK
    assert "pw12345" not in out["nested"]["url"] and out["max_tokens"] == 16
    assert data["HF_TOKEN"] == "plainvalue"  # a copy, the input is untouched


@pytest.mark.parametrize("name", ["HF_TOKEN", "hf_token", "VLLM_API_KEY", "x-api-key", "AWS_SECRET_ACCESS_KEY", "db_password", "client_secret", "GOOGLE_APPLICATION_CREDENTIALS", "passwd"])
def test_secret_names(name):
    assert is_secret_name(name)


@pytest.mark.parametrize("name", ["max_tokens", "tokenizer", "TOKENIZERS_PARALLELISM", "CUDA_HOME", "num_tokens", "keyboard", "secretary_general"])
def test_not_secret_names(name):
    assert not is_secret_name(name)


# --- anonymize -----------------------------------------------------------------------------
IDS = Identities(("gpu-node-17.corp.example.com", "gpu-node-17"), ("alice",))


def test_anonymize_hashes_identities_stably():
    text = "alice@gpu-node-17: /home/alice/models GPU-5068ed7f-58af-5bb6-967a-19484707cdc3 GPU-node-17.corp.example.com"
    out = redact(text, anonymize=True, identities=IDS)
    for word in ("alice", "gpu-node-17", "5068ed7f", "corp.example.com"):
        assert word not in out.lower(), out
    assert re.search(r"user-[0-9a-f]{8}@host-[0-9a-f]{8}: /home/user-[0-9a-f]{8}/models GPU-anon-[0-9a-f]{8}", out), out
    assert out == redact(text, anonymize=True, identities=IDS)  # stable
    assert redact(out, anonymize=True, identities=IDS) == out  # idempotent
    # the same user in a path and as a word gets the same tag
    tags = re.findall(r"user-([0-9a-f]{8})", out)
    assert len(set(tags)) == 1


def test_anonymize_keeps_uuid_matching_consistent():
    uuid = "GPU-5068ed7f-58af-5bb6-967a-19484707cdc3"
    a = redact(f'"uuid": "{uuid}"', anonymize=True)
    b = redact(f"CUDA_VISIBLE_DEVICES={uuid}", anonymize=True)
    assert a.split('"')[3] == b.split("=")[1]


def test_generic_names_are_not_hashed():
    ids = Identities.from_snapshot(None, extra_hostnames=["localhost", "gpu"], extra_users=["root", "ubuntu", "al"])
    assert ids == Identities((), ())
    assert redact("root ran on localhost with Ubuntu", anonymize=True, identities=ids) == "root ran on localhost with Ubuntu"


def test_anonymize_cli_on_snapshot_check_and_report(tmp_path):
    snap = tmp_path / "planted.json"
    snap.write_text(json.dumps(planted_snapshot()), encoding="utf-8")
    for args in (["check", "--snapshot", str(snap), "--format", "json", "--anonymize"],
                 ["check", "--snapshot", str(snap), "--format", "markdown", "--anonymize"],
                 ["report", "--snapshot", str(snap), "--anonymize"],
                 ["report", "--snapshot", str(snap), "--anonymize", "--format", "json"],
                 ["compare", str(H200), str(snap), "--anonymize"]):
        proc = gd(*args)
        assert proc.returncode in (0, 1), proc.stderr
        for identity in ("gpu-node-17", "corp.example.com", "alice", "5068ed7f-58af"):
            assert identity not in proc.stdout, (args, identity)
        assert "NVIDIA H200" in proc.stdout and "580.159.04" in proc.stdout
    plain = gd("report", "--snapshot", str(snap), "--format", "json")  # the Markdown no longer inlines the snapshot
    assert "gpu-node-17.corp.example.com" in plain.stdout  # only --anonymize hides identities


def test_snapshot_records_hostname_and_user_and_anonymize_hides_them():
    proc = gd("snapshot")
    facts = json.loads(proc.stdout)["facts"]
    assert facts["host.hostname"]["status"] == "ok" and facts["host.user"]["status"] == "ok"
    hostname, user = facts["host.hostname"]["value"], facts["host.user"]["value"]
    anon = gd("snapshot", "--anonymize")
    data = json.loads(anon.stdout)["facts"]
    if len(hostname) >= 3 and hostname.lower() not in ("localhost",):
        assert data["host.hostname"]["value"].startswith("host-")
    if user not in ("root",) and len(user) >= 3:
        assert data["host.user"]["value"].startswith("user-")


def test_default_redactor_is_plain_secret_scrubbing():
    assert DEFAULT == Redactor()
    assert DEFAULT("GPU-5068ed7f-58af-5bb6-967a-19484707cdc3") == "GPU-5068ed7f-58af-5bb6-967a-19484707cdc3"
    assert "hunter2" not in DEFAULT("password=hunter2")


def test_evidence_with_a_secret_name_is_masked_in_data_and_in_text():
    from gpudoctor.redact import shown_value

    finding = {"id": "GD999", "evidence": [{"path": "env.HF_TOKEN", "value": "plainvalue1"}, {"path": "env.CUDA_HOME", "value": "/usr/local/cuda"}]}
    out = redact_data(finding)
    assert out["evidence"][0]["value"] == MASK and out["evidence"][1]["value"] == "/usr/local/cuda"
    assert shown_value("env.VLLM_API_KEY", "k") == MASK and shown_value("env.CUDA_HOME", "/x") == "/x"
    assert shown_value("gpu.0.name", "NVIDIA H200") == "NVIDIA H200"


# --- issue 14 -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("text, secret", [
    ("key sk_live_4eC39HqLyjWDarjtT1zdp7dc here", "4eC39HqLyjWDarjtT1zdp7dc"),
    ("rk_test_51HxxxAbCdEfGhIjKlMn", "51HxxxAbCdEfGhIjKlMn"),
    ("CI_JOB_TOKEN glpat-AbCdEfGhIjKlMnOpQrSt", "AbCdEfGhIjKlMnOpQrSt"),
    ("https://hooks.slack.com/services/T000/B000/XXXXXXXXXXXXXXXXXXXX", "XXXXXXXXXXXXXXXXXXXX"),
    ("postgres://admin:pa/ss@w0rd@db.example.com:5432/app", "pa/ss@w0rd"),
    ("redis://:Sup3r/Secret#1@cache:6379/0", "Sup3r/Secret#1"),
    ('{"dsn": "mysql://root:s3cr/et@localhost/db"}', "s3cr/et"),
    ('"signing_key": "Zx9QpL2mN7vR4tY8uI1oP3aS6dF0gH5j"', "Zx9QpL2mN7vR4tY8uI1oP3aS6dF0gH5j"),
    ("WANDB_KEY=8f2c1e9a7b3d4f6e0a1b2c3d4e5f6a7b8c9d0e1f", "8f2c1e9a7b3d4f6e0a1b2c3d4e5f6a7b8c9d0e1f"),
    ("--auth-secret Qm9vZ2llV29vZ2llMTIzNDU2Nzg5", "Qm9vZ2llV29vZ2llMTIzNDU2Nzg5"),
])
def test_issue_14_secret_formats(text, secret):
    once = redact(text)
    assert secret not in once, once
    assert redact(once) == once  # idempotent


@pytest.mark.parametrize("text", [
    "packages.dists.tiktoken 0.7.0",
    "tiktoken==0.7.0 max_tokens=512 tokenizer=Qwen/Qwen3-8B",
    "model_key=Qwen/Qwen3-Coder-30B-A3B-Instruct-FP8",
    "cache_key: /root/.cache/vllm/torch_compile_cache/3f2a9c1b7e",
    "git_sha=3f2a9c1b7e4d8f6a0b5c2e1d9f8a7b6c5d4e3f2a",
    "http://127.0.0.1:8000/v1/models",
    "git+https://github.com/vllm-project/vllm@v0.11.0",
])
def test_issue_14_package_names_and_ordinary_values_are_kept(text):
    assert redact(text) == text


def test_tiktoken_is_not_a_secret_name():
    assert not is_secret_name("tiktoken") and not is_secret_name("packages.dists.tiktoken".rsplit(".", 1)[-1])
    assert is_secret_name("HF_TOKEN") and is_secret_name("PGPASSWORD") and is_secret_name("x-api-key")
    from gpudoctor.redact import shown_value

    assert shown_value("packages.dists.tiktoken", {"version": "0.7.0"}) == {"version": "0.7.0"}
