"""Engine statistics and their Prometheus text rendering with vLLM 0.33 metric names.

Hand-written because the hot path only bumps plain ints and one bisect per
observation; `prometheus_client` parses what this writes (tests check it).
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field

# vLLM's bucket boundaries (seconds) for the request histograms.
TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
    2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
ITL_BUCKETS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0,
    2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
)  # fmt: skip
REQUEST_BUCKETS = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
    60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip


class Histogram:
    """Fixed-bucket histogram (non-cumulative counts; rendered cumulative)."""

    __slots__ = ("bounds", "counts", "sum", "count")

    def __init__(self, bounds: tuple[float, ...]):
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        """Add one observation."""
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value
        self.count += 1


@dataclass
class EngineStats:
    """Counters the engine bumps; equal to sums over requests by construction."""

    k: int = 0
    prompt_tokens: int = 0
    generation_tokens: int = 0
    prefix_queries: int = 0
    prefix_hits: int = 0
    preemptions: int = 0
    success: dict[str, int] = field(
        default_factory=lambda: {"abort": 0, "error": 0, "length": 0, "repetition": 0, "stop": 0}
    )
    spec_drafts: int = 0
    spec_draft_tokens: int = 0
    spec_accepted: int = 0
    spec_accepted_per_pos: list[int] = field(default_factory=list)
    ttft: Histogram = field(default_factory=lambda: Histogram(TTFT_BUCKETS))
    itl: Histogram = field(default_factory=lambda: Histogram(ITL_BUCKETS))
    e2e: Histogram = field(default_factory=lambda: Histogram(REQUEST_BUCKETS))
    queue: Histogram = field(default_factory=lambda: Histogram(REQUEST_BUCKETS))
    prefill: Histogram = field(default_factory=lambda: Histogram(REQUEST_BUCKETS))
    decode: Histogram = field(default_factory=lambda: Histogram(REQUEST_BUCKETS))

    def __post_init__(self) -> None:
        if not self.spec_accepted_per_pos:
            self.spec_accepted_per_pos = [0] * self.k


def _fmt(v: float) -> str:
    return repr(float(v)) if isinstance(v, float) else f"{v}.0"


def render(
    stats: EngineStats,
    *,
    labels: str,
    running: int,
    waiting: int,
    kv_usage: float,
    cache_info: dict[str, str],
) -> str:
    """Prometheus text exposition of the engine's state (`labels` like 'engine="0",...')."""
    out: list[str] = []
    add = out.append

    def gauge(name: str, help_: str, value: float, extra: str = "") -> None:
        add(f"# HELP {name} {help_}\n# TYPE {name} gauge\n")
        add(f"{name}{{{extra}{labels}}} {_fmt(value)}\n")

    def counter(name: str, help_: str, values: list[tuple[str, float]]) -> None:
        add(f"# HELP {name}_total {help_}\n# TYPE {name}_total counter\n")
        for extra, value in values:
            add(f"{name}_total{{{extra}{labels}}} {_fmt(value)}\n")

    def histogram(name: str, help_: str, h: Histogram) -> None:
        add(f"# HELP {name} {help_}\n# TYPE {name} histogram\n")
        cum = 0
        for bound, c in zip(h.bounds, h.counts, strict=False):
            cum += c
            add(f'{name}_bucket{{le="{bound}",{labels}}} {cum}.0\n')
        add(f'{name}_bucket{{le="+Inf",{labels}}} {h.count}.0\n')
        add(f"{name}_count{{{labels}}} {h.count}.0\n{name}_sum{{{labels}}} {_fmt(h.sum)}\n")

    gauge("vllm:num_requests_running", "Number of requests in model execution batches.", running)
    gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", waiting)
    gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", kv_usage)
    info = "".join(f'{k}="{v}",' for k, v in sorted(cache_info.items()))
    gauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig", 1.0, info)
    counter("vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens.", [("", stats.prefix_queries)])  # fmt: skip
    counter("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.", [("", stats.prefix_hits)])  # fmt: skip
    counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.", [("", stats.preemptions)])  # fmt: skip
    counter("vllm:prompt_tokens", "Number of prefill tokens processed.", [("", stats.prompt_tokens)])  # fmt: skip
    counter("vllm:generation_tokens", "Number of generation tokens processed.", [("", stats.generation_tokens)])  # fmt: skip
    counter(
        "vllm:request_success",
        "Count of successfully processed requests.",
        [(f'finished_reason="{r}",', n) for r, n in sorted(stats.success.items())],
    )
    if stats.k:
        counter("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", [("", stats.spec_drafts)])  # fmt: skip
        counter("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.", [("", stats.spec_draft_tokens)])  # fmt: skip
        counter("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.", [("", stats.spec_accepted)])  # fmt: skip
        counter(
            "vllm:spec_decode_num_accepted_tokens_per_pos",
            "Accepted tokens per draft position.",
            [(f'position="{i}",', n) for i, n in enumerate(stats.spec_accepted_per_pos)],
        )
    histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", stats.ttft)  # fmt: skip
    histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", stats.itl)  # fmt: skip
    histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", stats.e2e)  # fmt: skip
    histogram("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", stats.queue)  # fmt: skip
    histogram("vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.", stats.prefill)  # fmt: skip
    histogram("vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.", stats.decode)  # fmt: skip
    return "".join(out)
