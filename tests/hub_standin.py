"""A local stand-in for the Hugging Face Hub: a real HTTP server on 127.0.0.1 that answers the
Hub's file URLs, ``GET /ORG/NAME/resolve/REVISION/FILE``, from tests/fixtures/hub (real config.json
files of public models, cited in its README).

As the Hub does: 200 with the file; 404 for a file or repo it does not have; 401 for a gated repo
without the right ``Authorization: Bearer TOKEN``; a redirect when ``redirect_to`` names another
host for a file (as the Hub sends LFS files to its CDN). It records each request's path and
Authorization header, so a test can say what was sent where.
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Dict, List, Optional, Tuple

FILES = Path(__file__).resolve().parent / "fixtures" / "hub"


class StandIn:
    def __init__(self, gated: Dict[str, str] = None, extra: Dict[str, bytes] = None, redirect_to: Optional[str] = None,
                 delay_s: float = 0.0):
        self.gated = dict({"meta-llama/Llama-3.1-8B": "hf_standin_secret_token_0123456789"} if gated is None else gated)
        self.extra = dict(extra or {})  # "ORG/NAME/FILE" -> bytes, beside the fixtures
        self.redirect_to = redirect_to  # "http://HOST:PORT": send every file there (307)
        self.delay_s = delay_s
        self.requests: List[Tuple[str, Optional[str]]] = []  # (path, Authorization)
        standin = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_GET(self):
                standin.requests.append((self.path, self.headers.get("Authorization")))
                if standin.delay_s:
                    threading.Event().wait(standin.delay_s)
                parts = self.path.split("?")[0].strip("/").split("/")
                if len(parts) < 5 or parts[2] != "resolve":
                    return self._answer(404, b'{"error":"Not Found"}')
                repo, name = "/".join(parts[:2]), "/".join(parts[4:])
                secret = standin.gated.get(repo)
                if secret and self.headers.get("Authorization") != f"Bearer {secret}":
                    return self._answer(401, b'{"error":"Access to model is restricted. You must have access to it and be authenticated."}')
                if standin.redirect_to:
                    self.send_response(307)
                    self.send_header("Location", standin.redirect_to + self.path)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return None
                body = standin.extra.get(f"{repo}/{name}")
                path = FILES / repo / name
                if body is None and path.is_file():
                    body = path.read_bytes()
                if body is None:
                    return self._answer(404, b'{"error":"Entry not found"}', {"X-Error-Code": "EntryNotFound"})
                return self._answer(200, body)

            def _answer(self, code, body, headers=None):
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(body)

        class Server(ThreadingHTTPServer):
            def handle_error(self, request, client_address):  # a client that left (the timeout test) is no error here
                pass

        self.server = Server(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> "StandIn":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
