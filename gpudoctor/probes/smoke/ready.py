"""Step 1: wait until the server is ready; which model to use; who holds the port."""


import os
import re
import time
from typing import Any, Dict, List, Optional, Tuple

from gpudoctor.probes.smoke.client import (
    CLOSED,
    PROTOCOL,
    REFUSED,
    TIMEOUT as T_TIMEOUT,
    ClientError,
    parse_json,
)
from gpudoctor.probes.smoke import DEFAULT_URL
from gpudoctor.snapshot import OK, TIMEOUT, Fact
from gpudoctor.probes.smoke.session import SOURCE, Options, Run, error_message

SERVER_PROCESS = re.compile(r"vllm|sglang|llama-server|llama_cpp\.server|xllamacpp|text-generation-launcher|trtllm-serve|lmdeploy", re.I)


def wait_ready(run_: Run) -> Tuple[Fact, Optional[List[Dict[str, Any]]]]:
    opts = run_.opts
    attempts = 0
    interval = 0.25
    seen: List[str] = []
    while True:
        attempts += 1
        state, detail, payload = _ready_once(run_)
        if detail and (not seen or seen[-1] != detail):
            seen.append(detail)
        if state == "ready":
            value = {"ready": True, "waited_s": round(run_.elapsed(), 3), "attempts": attempts,
                     "health": payload["health"], "states_seen": seen[:-1] if len(seen) > 1 else [],
                     "key_sent": bool(opts.api_key)}
            return Fact(value, OK, SOURCE), payload["models"]
        if state == "fatal":
            fact: Fact = payload
            fact.value.update({"ready": False, "waited_s": round(run_.elapsed(), 3), "attempts": attempts})
            _add_port_owner(run_, fact)
            return fact, None
        # still waiting
        left = run_.remaining()
        if not opts.wait or left <= 0:
            fact = payload
            waited = run_.elapsed()
            if opts.wait:
                fact.detail = f"not ready after {waited:.0f} s (--timeout {opts.timeout:g}): last answer: {detail}"
            fact.value.update({"ready": False, "waited_s": round(waited, 3), "attempts": attempts, "states_seen": seen})
            if fact.value.get("error") == "loading":
                fact.status = TIMEOUT
            _add_port_owner(run_, fact)
            return fact, None
        run_.progress("wait", f"waiting for {run_.client.base_url}: {detail}  ({run_.elapsed():.0f} s of {opts.timeout:g} s)")
        time.sleep(max(0.0, min(interval, left)))
        interval = min(interval * 2, 2.0)


def _ready_once(run_: Run) -> Tuple[str, str, Any]:
    """("ready", detail, {"health", "models"}) | ("waiting", detail, fact) | ("fatal", detail, fact)."""
    client = run_.client
    per_try = max(0.05, min(5.0, run_.remaining()))
    health: Any = None
    try:
        response = client.request("GET", "/health", timeout=per_try)
    except ClientError as exc:
        if exc.kind == REFUSED:
            fact = run_.from_client_error(exc)
            fact.detail = fact.value["message"] = f"{exc.message} (is the server running?)"
            return "waiting", fact.detail, fact
        if exc.kind in (T_TIMEOUT, CLOSED):
            return "waiting", exc.message, run_.from_client_error(exc)
        return "fatal", exc.message, run_.from_client_error(exc)
    if response.status == 503:
        first = error_message(response)
        # llama.cpp says "Loading model"; vLLM's /health answers 503 with no such word once its
        # engine core is dead (vLLM PR #24897), which waiting will not fix.
        why = "still loading" if re.search(r"load", first, re.I) else "loading, or a dead engine"
        detail = "503 " + (first or "Service Unavailable") + f" ({why})"
        return "waiting", detail, run_.failure("loading", f"/health: {detail}", 503)
    if response.status in (502, 504):
        fact = run_.from_http(response, "/health")
        return "waiting", fact.detail, fact
    if response.status in (401, 403) or 300 <= response.status < 400 or response.status >= 500:
        fact = run_.from_http(response, "/health")
        return "fatal", fact.detail, fact
    health = response.status if 200 <= response.status < 300 else f"{response.status} (no /health endpoint)"

    per_try = max(0.05, min(10.0, run_.remaining()))
    try:
        response = client.request("GET", "/v1/models", timeout=per_try)
    except ClientError as exc:
        if exc.kind in (REFUSED, T_TIMEOUT, CLOSED):
            return "waiting", f"/v1/models: {exc.message}", run_.from_client_error(exc)
        return "fatal", exc.message, run_.from_client_error(exc)
    if response.status == 503 or response.status in (502, 504):
        fact = run_.from_http(response, "/v1/models")
        if response.status == 503:
            fact.value["error"] = "loading"
        return "waiting", fact.detail, fact
    if not 200 <= response.status < 300:
        fact = run_.from_http(response, "/v1/models")
        if response.status == 404:
            fact.value["error"] = "not_found"
            fact.detail = fact.value["message"] = (
                f"/v1/models: 404 Not Found: not an OpenAI-compatible server at {client.base_url} "
                "(wrong port or path prefix?)"
            )
        return "fatal", fact.detail, fact
    try:
        data = parse_json(response)
    except ClientError as exc:
        fact = run_.failure(exc.kind, f"/v1/models: {exc.message}", response.status)
        return "fatal", fact.detail, fact
    models = data.get("data") if isinstance(data, dict) else None
    if not isinstance(models, list):
        fact = run_.failure("bad_shape", "/v1/models: the answer has no \"data\" list of models", response.status)
        return "fatal", fact.detail, fact
    return "ready", "ready", {"health": health, "models": [m for m in models if isinstance(m, dict)]}


def _add_port_owner(run_: Run, fact: Fact) -> None:
    """Who holds the port (or which server processes run) — only for a server on this machine."""
    if fact.value.get("error") not in (REFUSED, "html", PROTOCOL, "not_found", "invalid_json", "bad_shape", T_TIMEOUT, "loading"):
        return
    try:
        owners = port_owners(run_.client.host, run_.client.port)
    except Exception:  # /proc trouble must not cost the verdict
        owners = None
    if owners is None:
        return
    fact.value["port_owner"] = owners.get("listeners")
    if owners.get("servers"):
        fact.value["server_processes"] = owners["servers"]


def port_owners(host: str, port: int) -> Optional[Dict[str, Any]]:
    """Processes listening on ``port`` and inference-server processes on this machine.

    None when ``host`` is not this machine. Processes of other users show without a pid
    unless gpudoctor runs as root. Read from /proc by probes/processes.py (the scan
    ``processes.port`` uses), so it works where psutil does not import.
    """
    from gpudoctor.probes.processes import listening_processes, matching_processes

    if not is_this_machine(host):
        return None
    listeners: List[Dict[str, Any]] = []
    for item in listening_processes(port):
        address = f"{item['address']}:{port}"
        listeners.extend(_process_info(pid, address) for pid in item["pids"] or [None])
    servers = [_process_info(pid, None) for pid in matching_processes(SERVER_PROCESS, 5)]
    return {"listeners": listeners, "servers": servers}


def is_this_machine(host: str) -> bool:
    """A loopback or unspecified address, ``localhost``, or an address of one of this machine's
    interfaces (the kernel binds a socket only to an address it owns)."""
    import ipaddress
    import socket

    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return host.lower() in ("localhost", "0.0.0.0", "::", "")
    if address.is_loopback or address.is_unspecified:
        return True
    family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.bind((str(address), 0))
        return True
    except OSError:
        return False


def _process_info(pid: Optional[int], address: Optional[str]) -> Dict[str, Any]:
    from gpudoctor.probes.processes import process_name, read_argv

    info: Dict[str, Any] = {"pid": pid}
    if address:
        info["address"] = address
    if pid:
        name = process_name(pid)
        argv = read_argv("/proc", pid)
        if name is not None and argv is not None:
            info["name"] = name
            info["cmdline"] = " ".join(argv)[:160]
    return info


def choose_model(opts: Options, models: Optional[List[Dict[str, Any]]]) -> Tuple[Optional[str], Fact]:
    served = [str(m.get("id")) for m in models or [] if m.get("id") is not None]
    value: Dict[str, Any] = {"served": served, "requested": opts.model}
    if opts.model:
        value["chosen"] = opts.model
        value["listed"] = opts.model in served
    elif served:
        value["chosen"] = served[0]
    else:
        value["chosen"] = None
    for m in models or []:
        if m.get("id") == value["chosen"]:
            meta = m.get("meta") if isinstance(m.get("meta"), dict) else {}
            max_len = m.get("max_model_len") or meta.get("n_ctx")  # vLLM / llama.cpp
            if isinstance(max_len, int):
                value["max_model_len"] = max_len
    return value["chosen"], Fact(value, OK, SOURCE)



# --- check --smoke without a URL -----------------------------------------------------------
def discover_url() -> Tuple[str, str]:
    """(URL, how it was chosen): an inference server listening on this machine, else the default."""
    from gpudoctor.probes.processes import listening_processes, read_argv

    found: List[Tuple[int, str, str]] = []
    try:
        for item in listening_processes(None):
            for pid in item["pids"]:
                cmd = " ".join(read_argv("/proc", pid) or [])
                if not SERVER_PROCESS.search(cmd) or pid == os.getpid():
                    continue
                ip, port = item["address"], item["port"]
                host = "127.0.0.1" if ip in ("", "0.0.0.0", "127.0.0.1") else ("[::1]" if ip in ("::", "::1") else (f"[{ip}]" if ":" in ip else ip))
                found.append((0 if port == 8000 else port, f"http://{host}:{port}", f"pid {pid} listening on port {port}: {cmd[:100]}"))
    except Exception:  # discovery is a convenience; never a failure
        found = []
    if found:
        _, url, how = sorted(found)[0]
        return url, f"found {how}"
    return DEFAULT_URL, "the default (no inference server found listening on this machine)"
