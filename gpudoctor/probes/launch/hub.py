"""A Hugging Face Hub model's ``config.json``, read from the Hub when it is not in the local cache.

vLLM's first act on ``vllm serve ORG/NAME`` is to fetch that file: huggingface_hub's
``hf_hub_download`` asks ``GET {HF_ENDPOINT}/{repo}/resolve/{revision}/config.json`` (default
endpoint https://huggingface.co), follows the redirects, and sends ``Authorization: Bearer TOKEN``
when a token is set (``HF_TOKEN``, else the token file ``$HF_TOKEN_PATH`` or ``$HF_HOME/token``).
Preflight does the same so that TP divisibility, memory and context length are checked before the
download, not after it; then ``model.safetensors.index.json`` (its ``metadata.total_size`` is the
weights' bytes). Bounded: one deadline for everything (a hung DNS lookup included: the requests
run in a thread the probe stops waiting for), a size cap per file, redirects followed without the
token when they leave the endpoint's host (a CDN never sees it). Never: with ``HF_HUB_OFFLINE`` /
``TRANSFORMERS_OFFLINE`` (vLLM would not download either) or ``GPUDOCTOR_HUB=0``.

The token is never part of a fact, a URL or an error text: only the status and words of the
answer are kept (huggingface_hub ``constants.py`` and ``file_download.py``; the Hub's HTTP API:
https://huggingface.co/docs/hub/api, https://huggingface.co/docs/huggingface_hub/package_reference/environment_variables).
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Dict, Optional

from gpudoctor import bounded

DEFAULT_ENDPOINT = "https://huggingface.co"
DEADLINE_S = 4.0  # for all the requests of one model together
CONFIG_LIMIT = 4 << 20
INDEX_LIMIT = 32 << 20  # the largest MoE indexes list ~100k tensors (a few MB)
OFF = ("0", "OFF", "NO", "FALSE")


def endpoint(environ: Dict[str, str]) -> str:
    return (environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).strip().rstrip("/")


def token(environ: Dict[str, str]) -> Optional[str]:
    """The token huggingface_hub would send: HF_TOKEN (HUGGING_FACE_HUB_TOKEN, its older name), else
    the token file. Kept in memory for the request header only."""
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        value = str(environ.get(name) or "").strip()
        if value:
            return value
    home = environ.get("HOME") or os.path.expanduser("~")
    hf_home = environ.get("HF_HOME") or os.path.join(environ.get("XDG_CACHE_HOME") or os.path.join(home, ".cache"), "huggingface")
    path = environ.get("HF_TOKEN_PATH") or os.path.join(os.path.expanduser(hf_home), "token")
    try:
        text = bounded.read_head(os.path.expanduser(path), 4096, "token").decode("utf-8", "replace").strip()
    except (OSError, ValueError):
        return None
    return text or None


def disabled(environ: Dict[str, str]) -> Optional[str]:
    """Why the Hub is not asked, or None."""
    from gpudoctor.probes.launch.model import is_offline

    if is_offline(environ):
        return "HF offline mode is on"
    if str(environ.get("GPUDOCTOR_HUB", "")).strip().upper() in OFF:
        return "GPUDOCTOR_HUB=0"
    return None


class _TokenStaysHome(urllib.request.HTTPRedirectHandler):
    """Follows redirects as urllib does, but drops the Authorization header when one leaves the
    host it was sent to (urllib keeps it; huggingface_hub sends it to the endpoint only)."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # type: ignore[no-untyped-def]
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and urllib.parse.urlsplit(newurl).netloc != urllib.parse.urlsplit(req.full_url).netloc:
            new.remove_header("Authorization")
        return new


def _get(url: str, secret: Optional[str], timeout: float, limit: int) -> Dict[str, Any]:
    """{status, body} or {status, error}: the answer's code and bytes (at most ``limit``)."""
    from gpudoctor import __version__

    headers = {"User-Agent": f"gpudoctor/{__version__}", "Accept": "application/json"}
    if secret:
        headers["Authorization"] = f"Bearer {secret}"
    opener = urllib.request.build_opener(_TokenStaysHome())
    try:
        with opener.open(urllib.request.Request(url, headers=headers), timeout=max(0.1, timeout)) as answer:
            body = answer.read(limit + 1)
            if len(body) > limit:
                return {"status": answer.status, "error": f"larger than {limit >> 20} MiB"}
            return {"status": answer.status, "body": body}
    except urllib.error.HTTPError as exc:
        return {"status": exc.code, "error": f"HTTP {exc.code} {exc.reason}"}
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", None) or exc
        if isinstance(reason, TimeoutError) or isinstance(exc, TimeoutError) or "timed out" in str(reason):
            return {"status": None, "timeout": True, "error": "no answer in time"}
        return {"status": None, "error": re.sub(r"^\[Errno -?\d+\] ", "", str(reason))}


def _json(raw: bytes) -> Optional[Any]:
    if bounded.depth_exceeds(raw):
        return None
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None


def _words(answer: Dict[str, Any], repo: str, revision: str, has_token: bool, where: str) -> Dict[str, str]:
    """{status (a fact status), detail} for an answer that carries no config."""
    code = answer.get("status")
    if answer.get("timeout"):
        return {"status": "timeout", "detail": f"the Hub ({where}) did not answer within the deadline"}
    if code == 401:
        return {"status": "no_permission", "detail": f"the Hub ({where}) answered 401 for {repo}: a gated or private repo "
                + ("and the token is not valid for it" if has_token else "and no HF_TOKEN is set")}
    if code == 403:
        return {"status": "no_permission", "detail": f"the Hub ({where}) answered 403 for {repo}: gated, and this token has not been "
                "granted access (accept the conditions on the model's page)"}
    if code == 404:
        return {"status": "absent", "detail": f"the Hub ({where}) has no config.json for {repo} at revision {revision} (404)"}
    if code is None:
        return {"status": "error", "detail": f"the Hub ({where}) could not be reached ({answer.get('error')})"}
    return {"status": "error", "detail": f"the Hub ({where}) answered {answer.get('error') or code} for {repo}'s config.json"}


def _ask(repo: str, revision: str, environ: Dict[str, str], deadline: float, out: Dict[str, Any]) -> None:
    where = endpoint(environ)
    secret = token(environ)
    base = f"{where}/{urllib.parse.quote(repo, safe='/')}/resolve/{urllib.parse.quote(revision, safe='')}"
    out["url"] = base + "/config.json"
    answer = _get(out["url"], secret, deadline - time.monotonic(), CONFIG_LIMIT)
    if "body" not in answer:
        out.update(_words(answer, repo, revision, bool(secret), where))
        return
    data = _json(answer["body"])
    if not isinstance(data, dict):
        out.update(status="error", detail=f"the Hub's config.json for {repo} is not a JSON object")
        return
    out.update(status="ok", config=data)
    index = _get(base + "/model.safetensors.index.json", secret, deadline - time.monotonic(), INDEX_LIMIT)
    parsed = _json(index["body"]) if "body" in index else None
    if isinstance(parsed, dict):
        meta = parsed.get("metadata") if isinstance(parsed.get("metadata"), dict) else {}
        shards = parsed.get("weight_map") if isinstance(parsed.get("weight_map"), dict) else {}
        total = meta.get("total_size")
        if isinstance(total, int) and not isinstance(total, bool) and total > 0:
            out["index"] = {"total_size": total, "shards": len({str(v) for v in shards.values()}),
                            "url": base + "/model.safetensors.index.json"}
    else:
        out["index_detail"] = index.get("error") or "model.safetensors.index.json is not JSON"


def fetch(repo: str, revision: Optional[str], environ: Dict[str, str], deadline_s: float = DEADLINE_S) -> Dict[str, Any]:
    """{status, detail, url, config, index}: ``status`` ok | no_permission | absent | timeout | error."""
    revision = revision or "main"
    why = disabled(environ)
    if why:
        return {"status": "absent", "detail": f"not asked: {why}"}
    out: Dict[str, Any] = {}
    deadline = time.monotonic() + deadline_s
    worker = threading.Thread(target=_ask, args=(repo, revision, environ, deadline, out), name="gpudoctor-hub", daemon=True)
    worker.start()
    worker.join(max(0.0, deadline - time.monotonic()) + 0.2)
    got = dict(out)  # the thread may still be writing: read what it had written by now
    if got.get("config") is not None:
        if worker.is_alive():
            got["index_detail"] = f"model.safetensors.index.json: no answer within {deadline_s:g} s"
        return got
    if worker.is_alive() or "status" not in got or got.get("status") == "timeout":
        return {"status": "timeout", "url": got.get("url"),
                "detail": f"the Hub ({endpoint(environ)}) did not answer within {deadline_s:g} s"}
    return got
