"""The one-line headline of the launch area: what will be started, with what."""

from __future__ import annotations

from gpudoctor.snapshot import Snapshot, gib, mib


def headline(snap: Snapshot) -> str:
    kind = snap.value("launch.kind")
    if kind is None:
        return ""
    if kind == "sglang-serve":
        sglang = snap.get("launch.sglang")
        info = sglang.value if sglang.ok and isinstance(sglang.value, dict) else {}
        port = (snap.value("launch.port") or {}).get("port")
        return " · ".join([f"SGLang server {snap.value('launch.model') or '(no model)'}"]
                          + ([f"port {port}"] if port else [])
                          + [f"SGLang {info['version']}" if info.get("version") else "SGLang not found"])
    if kind not in ("vllm-serve", "vllm-api-server"):
        argv = (snap.value("launch.command") or {}).get("argv") or []
        return f"not a vLLM server: {argv[0] if argv else '?'}"
    args = snap.value("launch.args") or {}
    parts = [f"{'vllm serve' if kind == 'vllm-serve' else 'api_server'} {snap.value('launch.model') or '(no model)'}"]
    tp, pp = args.get("--tensor-parallel-size") or 1, args.get("--pipeline-parallel-size") or 1
    if tp != 1 or pp != 1:
        parts.append(f"TP {tp}" + (f" × PP {pp}" if pp != 1 else ""))
    spec = args.get("--speculative-config")
    if isinstance(spec, dict) and spec.get("method"):
        parts.append(f"spec {spec['method']}")
    weights = snap.value("model.weights") or {}
    if isinstance(weights, dict) and isinstance(weights.get("bytes"), int):
        dtype = (snap.value("model.config") or {}).get("torch_dtype")
        size = gib(weights["bytes"]) if weights["bytes"] >= 1 << 30 else mib(weights["bytes"])
        parts.append(f"weights {size}" + (f" {dtype}" if dtype else ""))
    vllm = snap.value("launch.vllm") or {}
    if vllm.get("version"):
        parts.append(f"vLLM {vllm['version']}")
    elif snap.get("launch.vllm").status == "absent":
        parts.append("vLLM not found")
    return " · ".join(parts)
