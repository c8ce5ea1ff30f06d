"""``vllm serve`` with one factory replaced: the engine core is scripted, the rest is vLLM.

    VLLM_TARGET_DEVICE=cpu PEER_SCENARIO='{"step_ms": 15}' python serve.py serve MODEL_DIR --port 8123 …

Runs inside a venv holding the real vLLM wheel and CPU torch. It replaces
``EngineCoreClient.make_async_mp_client`` (the one place AsyncLLM gets its engine core
from, vllm/v1/engine/async_llm.py) with a factory returning ``ScriptedCore`` and then hands
control to vLLM's own CLI (``vllm.entrypoints.cli.main``): argument parsing, config
building, the FastAPI app, chat serving, the detokenizer, reasoning and tool parsers, SSE
framing and the Prometheus stat loggers are all vLLM's.

``ScriptedCore`` is a scheduler that steps every ``step_ms``: each running request gets
one new token on its prefill step, then ``1 + accepted`` tokens per step with speculative
decoding (drafting ``num_speculative_tokens`` tokens and accepting the scripted number), and
each step's ``EngineCoreOutputs`` carries real ``SchedulerStats`` with
``SpecDecodingStats`` — so ``vllm:spec_decode_*`` counters move exactly by what was drafted
and accepted. Answers come from script.py, tokenised with the model's own tokenizer.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import script  # noqa: E402

SCENARIO = json.loads(os.environ.get("PEER_SCENARIO") or "{}")
# Accepted draft tokens per verify step, cycled; "low" accepts one draft in twenty steps.
ACCEPT_HIGH = [2, 1, 3, 2, 0, 3, 1, 2]
ACCEPT_LOW = [0] * 19 + [1]
LEDGER = os.environ.get("PEER_LEDGER")  # a file: the exact drafted/accepted totals, for tests


def _make_scripted(vllm_config, *args, **kwargs):
    return ScriptedCore(vllm_config)


class ScriptedCore:
    """The engine-core client AsyncLLM talks to, with no engine behind it."""

    def __init__(self, vllm_config):
        from vllm.tokenizers.registry import cached_tokenizer_from_config
        from vllm.v1.engine.core_client import EngineCoreClient

        self._base = EngineCoreClient
        self.vllm_config = vllm_config
        model_config = vllm_config.model_config
        self.tokenizer = cached_tokenizer_from_config(model_config)
        self.eos = self.tokenizer.convert_tokens_to_ids("<|im_end|>")
        spec = vllm_config.speculative_config
        self.num_spec = int(spec.num_speculative_tokens) if spec is not None else 0
        self.accept = ACCEPT_LOW if SCENARIO.get("acceptance") == "low" else ACCEPT_HIGH
        self.step_s = float(SCENARIO.get("step_ms", 15)) / 1000.0
        cache = vllm_config.cache_config
        # What the real engine core reports in its ready response (core_client.py
        # _apply_ready_response): KV-cache blocks and block size.
        cache.block_size = cache.block_size or 16
        cache.num_gpu_blocks = max(1, model_config.max_model_len * 8 // cache.block_size)
        self.engine_ranks_managed = [0]
        self.resources = type("Resources", (), {"engine_dead": False})()
        self.outputs: asyncio.Queue = asyncio.Queue()
        self.waiting: list = []
        self.running: dict = {}
        self.step_counter = 0
        self.ledger = {"drafts": 0, "draft_tokens": 0, "accepted_tokens": 0, "requests": 0}
        self.loop_task = None
        self._write_ledger()

    # --- what AsyncLLM calls -----------------------------------------------------------
    def __getattr__(self, name):
        # Everything else AsyncLLM may call (sleep, LoRA, profiling, …): a harmless no-op.
        if name.endswith("_async"):
            async def noop(*args, **kwargs):
                return None
            return noop
        raise AttributeError(name)

    async def get_supported_tasks_async(self):
        return ("generate",)

    def get_kv_event_sources(self):
        return {}

    def dp_engines_running(self):
        return False

    async def is_sleeping_async(self):
        return False

    def shutdown(self, timeout=None):
        if self.loop_task:
            self.loop_task.cancel()

    async def add_request_async(self, request) -> None:
        from vllm.v1.engine import EngineCoreEvent, EngineCoreEventType

        prompt = self.tokenizer.decode(request.prompt_token_ids or [])
        params = request.sampling_params
        text = script.answer(prompt, "<tools>" in prompt, SCENARIO)
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        self.waiting.append({
            "request": request, "ids": ids, "sent": 0, "steps": 0, "spec": None,
            "max_tokens": params.max_tokens if params and params.max_tokens else len(ids) + 1,
            "events": [EngineCoreEvent.new_event(EngineCoreEventType.QUEUED)],
        })
        self.ledger["requests"] += 1
        if self.loop_task is None:
            self.loop_task = asyncio.get_running_loop().create_task(self._loop())

    async def abort_requests_async(self, request_ids) -> None:
        for rid in request_ids:
            self.running.pop(rid, None)
        self.waiting = [w for w in self.waiting if w["request"].request_id not in request_ids]

    async def get_output_async(self):
        return await self.outputs.get()

    # --- the scripted scheduler ----------------------------------------------------------
    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.step_s)
            if self.waiting or self.running:
                self.outputs.put_nowait(self._step())

    def _step(self):
        from vllm.v1.engine import EngineCoreEvent, EngineCoreEventType, EngineCoreOutput, EngineCoreOutputs, FinishReason
        from vllm.v1.metrics.stats import PrefillStats, RequestSpecDecodeMetrics, SchedulerStats
        from vllm.v1.spec_decode.metrics import SpecDecodingStats

        self.step_counter += 1
        spec_stats = SpecDecodingStats.new(self.num_spec) if self.num_spec else None
        outs = []
        for state in self.waiting:
            state["events"].append(EngineCoreEvent.new_event(EngineCoreEventType.SCHEDULED))
            self.running[state["request"].request_id] = state
        new = {s["request"].request_id for s in self.waiting}
        self.waiting = []
        for rid, state in list(self.running.items()):
            take = 1
            if rid not in new and self.num_spec:
                accepted = min(self.accept[state["steps"] % len(self.accept)], self.num_spec)
                spec_stats.observe_draft(self.num_spec, accepted)
                if state["spec"] is None:
                    state["spec"] = RequestSpecDecodeMetrics.new(self.num_spec)
                state["spec"].observe(self.num_spec, accepted)
                self.ledger["drafts"] += 1
                self.ledger["draft_tokens"] += self.num_spec
                self.ledger["accepted_tokens"] += accepted
                take = 1 + accepted
            state["steps"] += 1
            stream = state["ids"] + [self.eos]
            left = state["max_tokens"] - state["sent"]
            chunk = stream[state["sent"]:state["sent"] + min(take, left)]
            state["sent"] += len(chunk)
            finish = None
            if chunk and chunk[-1] == self.eos:
                finish = FinishReason.STOP
            elif state["sent"] >= state["max_tokens"]:
                finish = FinishReason.LENGTH
            out = EngineCoreOutput(request_id=rid, new_token_ids=chunk, finish_reason=finish,
                                   events=state["events"] or None)
            state["events"] = []
            if rid in new:
                n_prompt = len(state["request"].prompt_token_ids or [])
                out.prefill_stats = PrefillStats()
                out.prefill_stats.set(n_prompt, 0, 0)
            if finish is not None:
                out.spec_decode_metrics = state["spec"]
                del self.running[rid]
            outs.append(out)
        self._write_ledger()
        stats = SchedulerStats(num_running_reqs=len(self.running), num_waiting_reqs=len(self.waiting),
                               step_counter=self.step_counter, kv_cache_usage=0.01 * len(self.running),
                               spec_decoding_stats=spec_stats)
        return EngineCoreOutputs(engine_index=0, outputs=outs, scheduler_stats=stats, timestamp=time.monotonic())

    def _write_ledger(self) -> None:
        if LEDGER:
            Path(LEDGER).write_text(json.dumps(self.ledger), encoding="utf-8")


def main() -> None:
    from vllm.v1.engine.core_client import EngineCoreClient

    EngineCoreClient.make_async_mp_client = staticmethod(_make_scripted)
    from vllm.entrypoints.cli.main import main as vllm_main

    sys.argv = ["vllm", *sys.argv[1:]]
    vllm_main()


if __name__ == "__main__":
    main()
