"""A tiny HTTP and Server-Sent-Events client for the smoke check (stdlib only).

Owned rather than borrowed because the smoke check must never hang and never leak:

- every request runs under a hard deadline: the socket timeout bounds the connect and each
  read, and a watchdog timer shuts the socket down when the whole request is past its
  deadline (a server that dribbles a byte a second cannot keep us waiting);
- every body is capped (``max_body`` for a JSON answer, ``max_stream`` for a whole stream,
  ``MAX_LINE`` for one SSE line); going over is an error, never an unbounded read;
- the API key goes in an ``Authorization`` header to the origin the user gave and nowhere
  else: requests are built from paths on that origin, redirects are never followed, and
  the key is never part of an error message or a fact.

Failures are ``ClientError(kind, message)`` with a kind the probe turns into a verdict:
refused, timeout, dns, closed, tls, protocol, too_large, cut, not_sse.
"""

from __future__ import annotations

import http.client
import json
import re
import socket
import ssl
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, Optional, Tuple
from urllib.parse import urlsplit

from gpudoctor import __version__, bounded  # bounded: JSON from a server, depth and number caps

MAX_BODY = 4 << 20  # a JSON answer (a 4096-token completion is ~20 KB)
MAX_STREAM = 16 << 20  # a whole SSE stream
MAX_LINE = 1 << 20  # one SSE line

REFUSED = "refused"
TIMEOUT = "timeout"
DNS = "dns"
CLOSED = "closed"  # connection closed or reset before a complete response
TLS = "tls"
PROTOCOL = "protocol"  # not HTTP / malformed HTTP
TOO_LARGE = "too_large"
CUT = "cut"  # a body or stream that ended early
NOT_SSE = "not_sse"  # a streamed request answered with something other than text/event-stream


class ClientError(Exception):
    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind
        self.message = message


class URLError(ValueError):
    """A --url that cannot be used (exit 2)."""


def normalize_url(url: str) -> str:
    """``127.0.0.1:8000``, ``http://host:8000/``, ``http://host:8000/v1`` → ``http://host:8000``.

    A path prefix other than /v1 is kept (a server behind a reverse proxy under /llm).
    Credentials inside the URL are refused: they would end up in output and in facts.
    """
    text = (url or "").strip()
    if not text:
        raise URLError("empty URL")
    if "://" not in text:
        text = "http://" + text
    try:
        parts = urlsplit(text)
    except ValueError as exc:  # "http://[::1": Invalid IPv6 URL
        raise URLError(f"{exc} in {url!r}") from None
    if parts.scheme not in ("http", "https"):
        raise URLError(f"unsupported scheme {parts.scheme!r} (use http:// or https://)")
    if not parts.hostname:
        raise URLError(f"no host in {url!r}")
    if parts.username or parts.password:
        raise URLError("credentials inside the URL are not accepted; pass the API key with --api-key-env VAR")
    try:
        parts.port
    except ValueError:
        raise URLError(f"bad port in {url!r}") from None
    if parts.query or parts.fragment:
        raise URLError(f"the URL should be the server's base address, without ?query or #fragment: {url!r}")
    path = parts.path.rstrip("/")
    if path.endswith("/v1"):
        path = path[: -len("/v1")]
    return f"{parts.scheme}://{parts.netloc}{path}"


def origin_of(url: str) -> Tuple[str, str, int]:
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return parts.scheme, (parts.hostname or "").lower(), port


@dataclass
class Response:
    status: int
    reason: str
    headers: Dict[str, str]
    body: bytes
    elapsed: float

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "").split(";")[0].strip().lower()

    def text(self) -> str:
        return self.body.decode("utf-8", "replace")

    def looks_like_html(self) -> bool:
        head = self.body[:512].lstrip().lower()
        return self.content_type in ("text/html", "application/xhtml+xml") or head.startswith((b"<!doctype html", b"<html"))


@dataclass
class SSEEvent:
    data: str
    at: float  # time.perf_counter() when the event's last line arrived


@dataclass
class StreamResult:
    """Filled while a stream is read, so the caller keeps what arrived before a failure."""

    status: int = 0
    events: int = 0
    done: bool = False  # saw "data: [DONE]"
    bytes_read: int = 0
    headers: Dict[str, str] = field(default_factory=dict)


class _Watchdog:
    """Shut a connection's socket down once its deadline passes, whatever it is doing."""

    def __init__(self, conn: http.client.HTTPConnection, seconds: float):
        self.conn = conn
        self.fired = False
        self._timer = threading.Timer(max(0.0, seconds), self._fire)
        self._timer.daemon = True

    def __enter__(self) -> "_Watchdog":
        self._timer.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._timer.cancel()

    def _fire(self) -> None:
        self.fired = True
        sock = self.conn.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class Client:
    def __init__(self, base_url: str, api_key: Optional[str] = None, max_body: int = MAX_BODY,
                 max_stream: int = MAX_STREAM):
        self.base_url = normalize_url(base_url)
        parts = urlsplit(self.base_url)
        self.scheme = parts.scheme
        self.host = parts.hostname or ""
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.prefix = parts.path
        self.origin = origin_of(self.base_url)
        self._api_key = api_key or None
        self.max_body = max_body
        self.max_stream = max_stream

    # --- plumbing -----------------------------------------------------------------
    def _connection(self, timeout: float) -> http.client.HTTPConnection:
        timeout = max(0.05, timeout)
        if self.scheme == "https":
            return http.client.HTTPSConnection(self.host, self.port, timeout=timeout, context=ssl.create_default_context())
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def _headers(self, target: Tuple[str, str, int], body: Optional[bytes], stream: bool) -> Dict[str, str]:
        headers = {"User-Agent": f"gpudoctor/{__version__}", "Accept": "text/event-stream" if stream else "application/json"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        # The one place the key is used, and only for the origin the user gave; it is
        # never logged, stored in a fact or part of an error message.
        if self._api_key and target == self.origin:
            headers["Authorization"] = f"Bearer {self._api_key}"
        return headers

    def _start(self, method: str, path: str, payload: Any, timeout: float, stream: bool):
        if not path.startswith("/") or "://" in path:
            raise ValueError("a request path must be a path on the server's origin")
        body = None if payload is None else json.dumps(payload).encode("utf-8")
        conn = self._connection(timeout)
        target = (self.scheme, str(conn.host).lower(), int(conn.port))
        return conn, body, self._headers(target, body, stream)

    def _error(self, exc: BaseException, watchdog: _Watchdog, timeout: float, what: str) -> ClientError:
        where = f"{self.host}:{self.port}"
        if watchdog.fired or isinstance(exc, socket.timeout) or isinstance(exc, TimeoutError):
            return ClientError(TIMEOUT, f"{what}: no complete answer from {where} within {timeout:.3g} s")
        if isinstance(exc, ConnectionRefusedError):
            return ClientError(REFUSED, f"connection refused by {where}")
        if isinstance(exc, socket.gaierror):
            return ClientError(DNS, f"cannot resolve host {self.host!r}")
        if isinstance(exc, ssl.SSLError):
            return ClientError(TLS, f"TLS error talking to {where}: {exc.reason or exc}")
        if isinstance(exc, http.client.IncompleteRead):
            return ClientError(CUT, f"{what}: the response was cut after {len(exc.partial)} bytes")
        if isinstance(exc, (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError, ConnectionAbortedError)):
            return ClientError(CLOSED, f"{what}: {where} closed the connection without a complete response")
        if isinstance(exc, (http.client.HTTPException, UnicodeError)):
            return ClientError(PROTOCOL, f"{what}: {where} did not answer with valid HTTP ({type(exc).__name__})")
        if isinstance(exc, OSError):
            return ClientError(CLOSED, f"{what}: network error talking to {where}: {exc.strerror or exc}")
        return ClientError(PROTOCOL, f"{what}: {type(exc).__name__}: {exc}")

    # --- one request, one JSON (or other) body -----------------------------------
    def request(self, method: str, path: str, payload: Any = None, timeout: float = 10.0) -> Response:
        conn, body, headers = self._start(method, path, payload, timeout, stream=False)
        started = time.perf_counter()
        what = f"{method} {path}"
        with _Watchdog(conn, timeout) as watchdog:
            try:
                conn.request(method, self.prefix + path, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read(self.max_body + 1)
                if len(data) > self.max_body:
                    raise ClientError(TOO_LARGE, f"{what}: the response is larger than the {self.max_body >> 20} MiB cap")
                result = Response(resp.status, resp.reason, _lower(resp.getheaders()), data, time.perf_counter() - started)
            except ClientError:
                raise
            except Exception as exc:
                raise self._error(exc, watchdog, timeout, what) from None
            finally:
                conn.close()
        return result

    # --- a streamed request: yields SSE events ------------------------------------
    def stream(self, path: str, payload: Any, timeout: float, result: StreamResult,
               on_response: Optional[Any] = None) -> Iterator[SSEEvent]:
        """Yield each SSE event's data. A non-2xx answer is raised as ``HTTPStatus``.

        ``result`` is filled as the stream goes (status, events, bytes, [DONE] seen) so the
        caller keeps the measurements made before a failure. ``on_response(t)`` is called
        with the time the response headers arrived.
        """
        conn, body, headers = self._start("POST", path, payload, timeout, stream=True)
        what = f"stream {path}"
        with _Watchdog(conn, timeout) as watchdog:
            try:
                conn.request("POST", self.prefix + path, body=body, headers=headers)
                resp = conn.getresponse()
                result.status = resp.status
                result.headers = _lower(resp.getheaders())
                if on_response is not None:
                    on_response(time.perf_counter())
                if not 200 <= resp.status < 300:
                    data = resp.read(self.max_body + 1)[: self.max_body]
                    raise HTTPStatus(Response(resp.status, resp.reason, result.headers, data, 0.0))
                ctype = result.headers.get("content-type", "").split(";")[0].strip().lower()
                if ctype and ctype != "text/event-stream":
                    data = resp.read(self.max_body + 1)[: self.max_body]
                    first = data.decode("utf-8", "replace").strip().splitlines()[:1]
                    raise ClientError(NOT_SSE, f"{what}: answered {ctype} instead of text/event-stream (stream: true ignored?)"
                                               + (f": {first[0][:120]!r}" if first else ""))
                data_lines = []
                while True:
                    line = resp.readline(MAX_LINE + 1)
                    now = time.perf_counter()
                    if watchdog.fired:
                        raise socket.timeout()
                    if not line:  # EOF: a clean end, or a body cut short of its Content-Length
                        if isinstance(resp.length, int) and resp.length > 0:
                            raise ClientError(CUT, f"{what}: the connection closed {resp.length} bytes short of the announced length")
                        break
                    result.bytes_read += len(line)
                    if len(line) > MAX_LINE:
                        raise ClientError(TOO_LARGE, f"{what}: one SSE line is longer than {MAX_LINE >> 20} MiB")
                    if result.bytes_read > self.max_stream:
                        raise ClientError(TOO_LARGE, f"{what}: the stream is larger than the {self.max_stream >> 20} MiB cap")
                    text = line.decode("utf-8", "replace").rstrip("\r\n")
                    if text == "":
                        if data_lines:
                            event = SSEEvent("\n".join(data_lines), now)
                            data_lines = []
                            result.events += 1
                            if event.data.strip() == "[DONE]":
                                result.done = True
                            yield event
                        continue
                    if text.startswith(":"):
                        continue  # SSE comment (keep-alive ping)
                    name, _, value = text.partition(":")
                    if name == "data":
                        data_lines.append(value[1:] if value.startswith(" ") else value)
                if data_lines:  # a last event without its blank line
                    event = SSEEvent("\n".join(data_lines), time.perf_counter())
                    result.events += 1
                    if event.data.strip() == "[DONE]":
                        result.done = True
                    yield event
            except (ClientError, HTTPStatus):
                raise
            except GeneratorExit:
                raise
            except Exception as exc:
                raise self._error(exc, watchdog, timeout, what) from None
            finally:
                conn.close()


class HTTPStatus(Exception):
    """A streamed request answered with a non-2xx status (the body is in ``response``)."""

    def __init__(self, response: Response):
        super().__init__(f"HTTP {response.status}")
        self.response = response


def _lower(headers) -> Dict[str, str]:
    return {str(name).lower(): str(value) for name, value in headers}


def html_title(body: bytes) -> str:
    match = re.search(rb"<title[^>]*>(.*?)</title>", body[:65536], re.I | re.S)
    return " ".join(match.group(1).decode("utf-8", "replace").split())[:80] if match else ""


def parse_json(response: Response) -> Any:
    """The body as JSON, or ClientError('html' / 'invalid_json')."""
    if response.looks_like_html():
        title = html_title(response.body)
        raise ClientError("html", f"HTML instead of JSON ({response.status} {response.reason}, "
                                  f"content-type {response.content_type or 'none'}"
                                  f"{f', page title {title!r}' if title else ''})")
    try:
        return bounded.loads(response.body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        preview = response.text().strip().splitlines()[:1]
        shown = f": {preview[0][:120]!r}" if preview else " (empty body)"
        raise ClientError("invalid_json", f"invalid JSON ({type(exc).__name__}){shown}") from None
