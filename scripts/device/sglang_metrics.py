"""SGLang's own metrics collectors, fed one streamed speculative request, as Prometheus text (issue 25).

    PYTHONPATH=SITE python3 scripts/device/sglang_metrics.py > sglang-VERSION-collector.json

SGLang's HTTP server cannot run on the CPU test machines (its tokenizer manager talks to scheduler
processes, and the release asks for the GPU), so smoke's parsing of SGLang's ``/metrics`` is proven
on what SGLang's own code writes: ``TokenizerMetricsCollector`` and ``SchedulerMetricsCollector``
(sglang/srt/observability/metrics_collector.py) made as the server makes them, with ServerArgs'
own defaults (its dataclass fields; ``__post_init__``, which resolves a model, is not run), then
the calls the tokenizer manager and the scheduler make for one streamed request under speculative
decoding, scraped before and after with prometheus_client (SGLang's exporter). Run on the H200
over SITE (scripts/sglang_oracle_bundle.py), where SGLang's modules import.

The request: 12 prompt tokens, 64 generated (the first from prefill), 20 verify passes of
``--speculative-num-draft-tokens 4`` (SGLang counts one verify pass per step), 0.05 s to the first
token, then 20 chunks of 3 tokens and one of 3 at 0.03 s each; the scheduler's last batch
reports acceptance length 3.2 and rate 0.7333.
"""

import dataclasses
import json
import sys

REQUEST = {"prompt_tokens": 12, "generation_tokens": 64, "spec_verify_ct": 20, "num_draft_tokens": 4, "ttft_s": 0.05,
           "chunks": [(0.03, 3)] * 21, "accept_length": 3.2, "accept_rate": 0.7333}


def server_args():
    from sglang.srt.server_args import ServerArgs

    args = ServerArgs.__new__(ServerArgs)
    for f in dataclasses.fields(ServerArgs):
        if f.default is not dataclasses.MISSING:
            value = f.default
        elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
            value = f.default_factory()  # type: ignore[misc]
        else:
            value = None
        object.__setattr__(args, f.name, value)
    args.model_path = args.served_model_name = "Qwen/Qwen3-8B"
    args.enable_metrics = True
    args.speculative_algorithm, args.speculative_num_draft_tokens = "EAGLE3", REQUEST["num_draft_tokens"]
    return args


def main():
    import prometheus_client

    from sglang.srt.observability import metrics_collector as mc

    args = server_args()
    # As the tokenizer manager (init_metric_collector_watchdog) and the scheduler (init_metrics_collector) make them.
    from types import SimpleNamespace

    from sglang.srt.disaggregation.utils import DisaggregationMode

    labels = {"model_name": args.served_model_name, "engine_type": DisaggregationMode.to_engine_type(args.disaggregation_mode)}
    tokenizer = mc.TokenizerMetricsCollector(server_args=args, labels=labels,
                                             bucket_time_to_first_token=args.bucket_time_to_first_token,
                                             bucket_e2e_request_latency=args.bucket_e2e_request_latency,
                                             bucket_inter_token_latency=args.bucket_inter_token_latency)
    ranks = SimpleNamespace(attn_tp_rank=0, attn_cp_rank=0, pp_rank=0, moe_ep_rank=0)  # one GPU: every rank 0
    scheduler = mc.SchedulerMetricsCollector.init_new(server_args=args, ps=ranks, tp_rank=0, pp_rank=0, dp_rank=None,
                                                      enable_priority_scheduling=False, enable_lora=False,
                                                      enable_hierarchical_cache=False).collector
    before = prometheus_client.generate_latest().decode()
    tokenizer.observe_time_to_first_token(labels, REQUEST["ttft_s"], stream=True)
    for interval, tokens in REQUEST["chunks"]:
        tokenizer.observe_inter_token_latency(labels, interval, tokens)
    tokenizer.observe_one_finished_request(labels, prompt_tokens=REQUEST["prompt_tokens"],
                                           generation_tokens=REQUEST["generation_tokens"], cached_tokens=0, e2e_latency=0.68,
                                           has_grammar=False, spec_verify_ct=REQUEST["spec_verify_ct"], is_streaming=True)
    stats = mc.SchedulerStats(spec_accept_length=REQUEST["accept_length"], spec_accept_rate=REQUEST["accept_rate"],
                              spec_num_draft_tokens=REQUEST["num_draft_tokens"])
    scheduler.log_stats(stats)
    after = prometheus_client.generate_latest().decode()
    import sglang

    print(json.dumps({"sglang": sglang.__version__, "prometheus_client": getattr(prometheus_client, "__version__", None),
                      "request": REQUEST, "before": before, "after": after}))


if __name__ == "__main__":
    sys.exit(main())
