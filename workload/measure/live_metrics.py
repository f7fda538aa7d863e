"""The run's own numbers as Prometheus metric families, read from what the run already keeps.

Nothing here runs per request or per SSE chunk: a scrape reads the run's ``Aggregate`` (the
one ``stats.json`` is written from) and a few live counters, and turns them into metric
families at scrape time. So the counts a scrape shows at the end of a run are the counts in
``stats.json``; latency buckets come from the same HDR histograms (a value counts under a
bound when its HDR bucket starts at or below it: within 0.1 % of the bound).

Names follow Prometheus conventions (base units, ``_total`` counters, ``_seconds``
histograms); where the OpenTelemetry GenAI semantic conventions name a metric, the family is
also exported under that name, mapped the standard way (dots to underscores, unit suffix;
``gen_ai.request.model`` -> label ``gen_ai_request_model``). docs/live-metrics.md lists them.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from workload.measure.histogram import SESSION_MAX_US, LatencyHistogram
from workload.measure.records import SESSION_OUTCOMES, RequestRecord
from workload.measure.stats import Aggregate, View

PREFIX = "agentload"

# Bucket bounds in seconds. The GenAI ones are the conventions' advised boundaries.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
TOKEN_GAP_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.015,
    0.02,
    0.03,
    0.05,
    0.075,
    0.1,
    0.25,
    0.5,
    1.0,
)
SESSION_BUCKETS = (1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)
# 1-2.5-5 steps to 2 min: with 1, 5, 10, 60 the dashboard's p99 drew 55 s once a session
# started over 10 s late (histogram_quantile interpolates inside the 10-60 s bucket)
LATENESS_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0,
                    50.0, 120.0)  # fmt: skip
GENAI_DURATION_BUCKETS = (
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
)  # fmt: skip
GENAI_TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
)  # fmt: skip
GENAI_TOKEN_BUCKETS = (
    1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864,
)  # fmt: skip
GENAI_TPOT_BUCKETS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
)  # fmt: skip

# (histogram in each class view, metric name, help, bounds)
CLASS_HISTOGRAMS = (
    ("ttft", "ttft_seconds", "time to first token of successful requests", LATENCY_BUCKETS),
    ("tpot", "tpot_seconds", "time per output token after the first (successful requests)",
     TOKEN_GAP_BUCKETS),
    ("itl", "itl_seconds", "gap between content-bearing chunks (successful requests)",
     TOKEN_GAP_BUCKETS),
    ("e2e", "e2e_seconds", "request end-to-end latency of successful requests", LATENCY_BUCKETS),
    ("session_duration", "session_duration_seconds",
     "agent session (task) time, think time and tool waits included", SESSION_BUCKETS),
)  # fmt: skip
GENAI_HISTOGRAMS = (
    ("e2e", "gen_ai_client_operation_duration_seconds",
     "GenAI operation duration (successful requests)", GENAI_DURATION_BUCKETS),
    ("ttft", "gen_ai_server_time_to_first_token_seconds",
     "time to first token, measured by the client", GENAI_TTFT_BUCKETS),
    ("tpot", "gen_ai_server_time_per_output_token_seconds",
     "time per output token after the first, measured by the client", GENAI_TPOT_BUCKETS),
)  # fmt: skip


@dataclass(slots=True)
class TokenUsage:
    """Tokens per successful request by (class, input/output), in GENAI_TOKEN_BUCKETS: exact
    integer counts (mergeable), for ``gen_ai.client.token.usage`` (the stats keep only sums)."""

    series: dict[str, list[int]] = field(default_factory=dict)  # "class\tkind" -> counts + sum

    def record(self, rec: RequestRecord) -> None:
        for kind, n in (("input", rec.prompt_tokens), ("output", rec.completion_tokens)):
            if n is not None:
                key = f"{rec.user_class}\t{kind}"
                row = self.series.get(key)
                if row is None:
                    row = self.series[key] = [0] * (len(GENAI_TOKEN_BUCKETS) + 2)
                row[bisect_left(GENAI_TOKEN_BUCKETS, n)] += 1  # the first bound >= n
                row[-1] += n

    def add(self, other: TokenUsage) -> None:
        for key, theirs in other.series.items():
            mine = self.series.setdefault(key, [0] * len(theirs))
            for i, x in enumerate(theirs):
                mine[i] += x

    def rows(self) -> Iterator[tuple[str, str, list[int]]]:
        for key in sorted(self.series):
            cls, _, kind = key.partition("\t")
            yield cls, kind, self.series[key]


@dataclass(slots=True)
class LiveCounts:
    """What the stats aggregate does not hold: starts, arrivals, lateness (cumulative)."""

    sessions_started: int = 0
    sessions_ended: int = 0
    requests_started: int = 0
    requests_ended: int = 0
    arrivals_due: int = 0  # open loop: sessions whose scheduled start came
    arrivals_dropped: int = 0  # open loop: dropped at max_in_flight or never started
    lateness: LatencyHistogram = field(default_factory=lambda: LatencyHistogram(SESSION_MAX_US))
    tokens: TokenUsage = field(default_factory=TokenUsage)

    _INTS = (
        "sessions_started",
        "sessions_ended",
        "requests_started",
        "requests_ended",
        "arrivals_due",
        "arrivals_dropped",
    )

    def to_dict(self) -> dict[str, Any]:
        """JSON-able (a worker sends its cumulative counts with every report)."""
        out: dict[str, Any] = {k: getattr(self, k) for k in self._INTS}
        out["lateness"] = self.lateness.to_dict()
        out["tokens"] = {k: list(v) for k, v in self.tokens.series.items()}
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> LiveCounts:
        live = cls()
        for k in cls._INTS:
            setattr(live, k, int(d.get(k) or 0))
        if d.get("lateness"):
            live.lateness = LatencyHistogram.from_dict(d["lateness"])
        for key, row in (d.get("tokens") or {}).items():
            live.tokens.series[str(key)] = [int(x) for x in row]
        return live

    def add(self, other: LiveCounts) -> None:
        """Add another process's counts into these."""
        for k in self._INTS:
            setattr(self, k, getattr(self, k) + getattr(other, k))
        self.lateness.merge(other.lateness)
        self.tokens.add(other.tokens)


@dataclass(slots=True)
class Snapshot:
    """What one scrape reads: the run's aggregate, live counts and the run's facts."""

    total: Aggregate
    live: LiveCounts
    info: dict[str, str]
    model: str = ""
    users: int | None = None  # Locust users running (None: open loop, where it says nothing)


class RunCollector(Collector):
    """A prometheus_client collector over ``snapshot()`` (None: no test yet, nothing shown)."""

    def __init__(self, snapshot: Callable[[], Snapshot | None]) -> None:
        self.snapshot = snapshot

    def collect(self) -> Iterator[Metric]:
        snap = self.snapshot()
        if snap is None:
            return
        yield from families(snap)


def families(snap: Snapshot) -> Iterator[Metric]:
    """Every metric family of one snapshot."""
    yield _info(snap)
    yield from _request_families(snap.total)
    yield from _class_families(snap.total)
    yield from _session_families(snap)
    yield from _histograms(snap.total)
    yield from _genai(snap)


def _name(short: str) -> str:
    return f"{PREFIX}_{short}"


def _info(snap: Snapshot) -> Metric:
    info = InfoMetricFamily(_name("run"), "the run's facts and operator labels (--label)")
    info.add_metric([], {_label_name(k): str(v) for k, v in snap.info.items()})
    return info


_BAD_LABEL = re.compile(r"[^a-zA-Z0-9_]")


def _label_name(key: str) -> str:
    """A Prometheus label name for an operator label key (container.tag -> container_tag)."""
    name = _BAD_LABEL.sub("_", key)
    return f"_{name}" if not name or name[0].isdigit() else name


def _steps(total: Aggregate) -> Iterable[tuple[str, str, View]]:
    for (cls, step), view in sorted(total.steps.items()):
        yield cls, str(step), view


def _request_families(total: Aggregate) -> Iterator[Metric]:
    requests = CounterMetricFamily(
        _name("requests"), "request attempts by outcome", labels=["class", "step", "status"]
    )
    errors = CounterMetricFamily(
        _name("request_errors"), "failed request attempts by error kind",
        labels=["class", "step", "kind"],
    )  # fmt: skip
    loops = CounterMetricFamily(
        _name("tool_loop_failures"), "requests whose step failed the agent's tool loop",
        labels=["class", "step"],
    )  # fmt: skip
    for cls, step, view in _steps(total):
        c = view.counters
        requests.add_metric([cls, step, "ok"], c["ok"])
        requests.add_metric([cls, step, "error"], c["errors"])
        requests.add_metric([cls, step, "cancelled"], c["cancelled"])
        for kind, n in sorted(view.errors_by_kind.items()):
            errors.add_metric([cls, step, kind], n)
        loops.add_metric([cls, step], c["tool_loop_failures"])
    yield from (requests, errors, loops)


def _class_families(total: Aggregate) -> Iterator[Metric]:
    good = CounterMetricFamily(
        _name("good_requests"), "successful requests that met every request SLO of their class",
        labels=["class"],
    )  # fmt: skip
    tokens = CounterMetricFamily(
        _name("tokens"), "tokens the server reported (input = prompt, output = completion, "
        "cached = prompt tokens served from the prefix cache)", labels=["class", "type"],
    )  # fmt: skip
    cached_prompt = CounterMetricFamily(
        _name("cached_prompt_tokens"),
        "prompt tokens of requests that reported cached tokens (the cache ratio's denominator)",
        labels=["class"],
    )
    ratio = GaugeMetricFamily(
        _name("cached_token_ratio"), "cached / prompt tokens over requests that reported cache",
        labels=["class"],
    )  # fmt: skip
    tools = CounterMetricFamily(
        _name("tool_calls"), "tool calls: returned by the server, or planned by the session",
        labels=["class", "source"],
    )  # fmt: skip
    spec = {
        key: CounterMetricFamily(_name(f"spec_decode_{key}"), text, labels=["class"])
        for key, text in (
            ("accepted_tokens", "speculative decoding: draft tokens accepted (client-reported)"),
            ("draft_tokens", "speculative decoding: draft tokens proposed (client-reported)"),
            ("steps", "speculative decoding: spec-decode steps (client-reported)"),
        )
    }
    for cls, view in sorted(total.classes.items()):
        c = view.counters
        good.add_metric([cls], c["good_requests"])
        for kind, key in (("input", "prompt_tokens"), ("output", "completion_tokens")):
            tokens.add_metric([cls, kind], c[key])
        tokens.add_metric([cls, "cached"], c["cached_tokens"])
        cached_prompt.add_metric([cls], c["cached_prompt_tokens"])
        if c["cached_prompt_tokens"]:
            ratio.add_metric([cls], c["cached_tokens"] / c["cached_prompt_tokens"])
        tools.add_metric([cls, "returned"], c["tool_calls"])
        tools.add_metric([cls, "planned"], c["tool_calls_planned"])
        spec["accepted_tokens"].add_metric([cls], view.spec.accepted_tokens)
        spec["draft_tokens"].add_metric([cls], view.spec.draft_tokens)
        spec["steps"].add_metric([cls], view.spec.spec_steps)
    yield from (good, tokens, cached_prompt, ratio, tools, *spec.values())


def _session_families(snap: Snapshot) -> Iterator[Metric]:
    finished = CounterMetricFamily(
        _name("sessions"), "agent sessions that ended, by outcome", labels=["class", "outcome"]
    )
    good = CounterMetricFamily(
        _name("good_sessions"), "completed sessions that met their class's SLOs", labels=["class"]
    )
    for cls, view in sorted(snap.total.classes.items()):
        for outcome in SESSION_OUTCOMES:
            finished.add_metric([cls, outcome], view.sessions.get(outcome, 0))
        good.add_metric([cls], view.sessions.get("good", 0))
    yield from (finished, good)
    live = snap.live
    counters = (
        ("sessions_started", "agent sessions started", live.sessions_started),
        ("arrivals_due", "open loop: sessions whose scheduled start came", live.arrivals_due),
        ("arrivals_dropped", "open loop: sessions dropped at max_in_flight or never started",
         live.arrivals_dropped),
    )  # fmt: skip
    for short, text, value in counters:
        yield CounterMetricFamily(_name(short), text, value=value)
    gauges: list[tuple[str, str, float | None]] = [
        ("sessions_in_flight", "agent sessions running now",
         live.sessions_started - live.sessions_ended),
        ("requests_in_flight", "requests sent and not yet answered",
         live.requests_started - live.requests_ended),
        ("users", "Locust users running", snap.users),
    ]  # fmt: skip
    for short, text, gauge_value in gauges:
        if gauge_value is not None:
            yield GaugeMetricFamily(_name(short), text, value=gauge_value)
    yield _histogram(
        _name("session_start_lateness_seconds"),
        "open loop: how late sessions started against their schedule",
        [([], live.lateness)],
        [],
        LATENESS_BUCKETS,
    )


def _histograms(total: Aggregate) -> Iterator[Metric]:
    for key, short, text, bounds in CLASS_HISTOGRAMS:
        views = [([cls], view.hists[key]) for cls, view in sorted(total.classes.items())
                 if key in view.hists]  # fmt: skip
        yield _histogram(_name(short), text, views, ["class"], bounds)


def _genai(snap: Snapshot) -> Iterator[Metric]:
    labels = ["gen_ai_operation_name", "gen_ai_request_model", "agentload_class"]
    for key, name, text, bounds in GENAI_HISTOGRAMS:
        views = [
            (["chat", snap.model, cls], view.hists[key])
            for cls, view in sorted(snap.total.classes.items())
            if key in view.hists
        ]
        yield _histogram(name, text, views, labels, bounds)
    usage = HistogramMetricFamily(
        "gen_ai_client_token_usage", "GenAI: tokens per successful request (input / output)",
        labels=["gen_ai_operation_name", "gen_ai_request_model", "agentload_class",
                "gen_ai_token_type"],
    )  # fmt: skip
    for cls, kind, row in snap.live.tokens.rows():
        cumulative, buckets = 0, []
        for bound, n in zip(GENAI_TOKEN_BUCKETS, row, strict=False):
            cumulative += n
            buckets.append((_le(bound), float(cumulative)))
        buckets.append(("+Inf", float(sum(row[:-1]))))
        usage.add_metric(["chat", snap.model, cls, kind], buckets, sum_value=float(row[-1]))
    yield usage


def _histogram(
    name: str,
    text: str,
    views: list[tuple[list[str], LatencyHistogram]],
    labels: list[str],
    bounds: tuple[float, ...],
) -> Metric:
    """One histogram family; `name` ends in _seconds, the HDR histograms hold microseconds."""
    family = HistogramMetricFamily(name, text, labels=labels, unit="seconds")
    bounds_us = [round(b * 1e6) for b in bounds]
    for values, h in views:
        counts = h.counts_at_most_us(bounds_us)
        buckets = [(_le(b), float(n)) for b, n in zip(bounds, counts, strict=True)]
        buckets.append(("+Inf", float(h.count)))
        family.add_metric(values, buckets, sum_value=h.sum_us / 1e6)
    return family


def _le(bound: float) -> str:
    return repr(float(bound))


_SUFFIX = {"counter": "_total", "info": "_info"}


def metric_names() -> list[str]:
    """Every family the exporter exports, named as a scrape shows it (counters with `_total`,
    histograms without `_bucket`): the dashboard and the docs are checked against this list."""
    snap = Snapshot(total=Aggregate(), live=LiveCounts(), info={}, users=0)
    return [m.name + _SUFFIX.get(m.type, "") for m in families(snap)]
