"""A stand-in for SGLang's HTTP server (``sglang serve``), for the smoke tests: its wire format,
not its engine. SGLang's own front end cannot run here: ``sglang.srt.entrypoints.http_server``
imports torch, its tokenizer manager and its scheduler IPC at import time, and the release pins a
CUDA torch (2.14.1, cu130) that this CPU box cannot load.

What it answers, each shape from sglang 0.5.23's source (tests/real/test_sglang_wire.py checks
the field and metric names against the real wheel):
- ``/v1/models``: ``ModelCard`` (srt/entrypoints/openai/protocol.py): ``owned_by: "sglang"``,
  ``root``, ``max_model_len``;
- ``/health``: 200 with an empty body (http_server.py ``health_generate``);
- ``/model_info`` and ``/get_model_info``: model_path, served_model_name, tokenizer_path,
  is_generation (http_server.py ``model_info``);
- chat completions with SGLang's ``reasoning_content``, and, asked with
  ``return_spec_tokens_details``, ``sglext.spec_tokens_details`` (``SpecTokensDetails``) on the
  response, or on a chunk with no choices when streamed (serving_chat.py);
- ``/metrics`` only when ``metrics_enabled`` (SGLang's ``--enable-metrics``, off by default):
  ``sglang:generation_tokens_total{…,is_streaming}``, ``sglang:spec_verify_calls_total``
  (observability/metrics_collector.py ``TokenizerMetricsCollector``) and the scheduler's gauges
  ``sglang:spec_accept_length``, ``sglang:spec_accept_rate``, ``sglang:spec_num_draft_tokens``.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

from fakes.smoke_servers import WireServer


class SGLangWireServer(WireServer):
    """``spec``: None, or (num_draft_tokens, accepted drafts per verify pass): SGLang's
    ``--speculative-num-draft-tokens`` (one verified token plus its drafts) and what the drafter
    gets right; each completion's first token comes from prefill, the rest from verify passes of
    accepted + 1 tokens."""

    def __init__(self) -> None:
        super().__init__()
        self.model = "Qwen/Qwen3-8B"
        self.reasoning_field = "reasoning_content"
        self.metrics_enabled = False
        self.sglang_spec: Optional[tuple] = None
        self.totals = {"verify": 0, "generated": 0, "prompt": 0}

    def models_payload(self) -> Dict[str, Any]:
        return {"object": "list", "data": [{"id": self.model, "object": "model", "created": 1796000000,
                                            "owned_by": "sglang", "root": self.model, "max_model_len": 32768}]}

    def native_get(self, path: str) -> Optional[Dict[str, Any]]:
        if path in ("/model_info", "/get_model_info"):
            return {"model_path": self.model, "served_model_name": self.model, "tokenizer_path": self.model,
                    "is_generation": True, "preferred_sampling_params": None, "weight_version": "default"}
        return None

    def bump_spec(self, tokens: int) -> Dict[str, int]:
        with self.lock:
            self.totals["generated"] += tokens
            self.totals["prompt"] += 20
        if not self.sglang_spec:
            return {}
        per_pass, accepted = self.sglang_spec
        passes = max(1, (tokens - 1) // (accepted + 1))
        with self.lock:
            self.totals["verify"] += passes
        return {"spec_verify_ct": passes, "spec_num_proposed_drafts": passes * (per_pass - 1),
                "spec_num_correct_drafts": passes * accepted, "completion_tokens": tokens}

    def per_request(self, body: Dict[str, Any], spec: Dict[str, int]) -> Dict[str, Any]:
        if not spec or not body.get("return_spec_tokens_details"):
            return {}
        verify = spec["spec_verify_ct"]
        details = {"spec_accept_rate": spec["spec_num_correct_drafts"] / spec["spec_num_proposed_drafts"],
                   "spec_accept_length": spec["completion_tokens"] / verify,  # SGLang's: completion tokens / verify passes
                   "spec_cap_length": 0.0, "spec_block_accept_length": 0.0,
                   "spec_num_correct_drafts": spec["spec_num_correct_drafts"],
                   "spec_num_proposed_drafts": spec["spec_num_proposed_drafts"], "spec_verify_ct": verify,
                   "spec_correct_drafts_histogram": [], "spec_cap_lens_histogram": []}
        return {"sglext": {"spec_tokens_details": details}}

    def metrics_text(self) -> str:
        labels = f'engine_type="unified",model_name="{self.model}"'
        t = self.totals
        lines = [
            "# HELP sglang:prompt_tokens_total Number of prefill tokens processed.",
            "# TYPE sglang:prompt_tokens_total counter",
            f'sglang:prompt_tokens_total{{{labels},is_streaming="false"}} {float(t["prompt"])}',
            "# HELP sglang:generation_tokens_total Number of generation tokens processed.",
            "# TYPE sglang:generation_tokens_total counter",
            # prometheus_client's multiprocess collector splits a total by label set: here streamed and not
            f'sglang:generation_tokens_total{{{labels},is_streaming="false"}} {float(t["generated"] - t["generated"] // 3)}',
            f'sglang:generation_tokens_total{{{labels},is_streaming="true"}} {float(t["generated"] // 3)}',
            "# HELP sglang:num_running_reqs The number of running requests.",
            "# TYPE sglang:num_running_reqs gauge",
            f'sglang:num_running_reqs{{{labels},pp_rank="0",tp_rank="0"}} 0.0',
        ]
        if self.sglang_spec and t["verify"]:
            per_pass, accepted = self.sglang_spec
            lines += [
                "# HELP sglang:spec_verify_calls_total Number of speculative decoding verification calls.",
                "# TYPE sglang:spec_verify_calls_total counter",
                f"sglang:spec_verify_calls_total{{{labels}}} {float(t['verify'])}",
                "# TYPE sglang:spec_accept_length gauge",
                f'sglang:spec_accept_length{{{labels},pp_rank="0",tp_rank="0"}} {float(accepted + 1)}',
                "# TYPE sglang:spec_accept_rate gauge",
                f'sglang:spec_accept_rate{{{labels},pp_rank="0",tp_rank="0"}} {accepted / (per_pass - 1)}',
                "# TYPE sglang:spec_num_draft_tokens gauge",
                f'sglang:spec_num_draft_tokens{{{labels},pp_rank="0",tp_rank="0"}} {float(per_pass)}',
            ]
        return "\n".join(lines) + "\n"
