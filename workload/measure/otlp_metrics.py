"""The run's numbers for OpenTelemetry: tallied per finished request / session, read at export.

The hook that counts a finished attempt (``AgentRuntime.record_request``) adds to a
``Tally``: plain integer sums and bucket counts per series, a few dict updates per request,
none per SSE chunk. The SDK's synchronous instruments were measured first: about 13 us per
``add`` / ``record`` (attribute checks and hashing on every call), 160 us per request for
this set, a tenth of the measuring loop's CPU. Instead, as the Prometheus endpoint reads the
run's aggregate at scrape time, the SDK reads the tally at export time: counters and gauges
through observable instruments (``Meter.create_observable_counter``), histograms (the SDK has
no observable histogram) as SDK ``HistogramDataPoint``s the metric exporter adds to the
``MetricsData`` the ``PeriodicExportingMetricReader`` collected (``Tally.histograms``).

Names and attributes follow the GenAI semantic conventions where they name the measure
(``gen_ai.client.operation.duration``, ``gen_ai.client.token.usage``,
``gen_ai.server.time_to_first_token``, ``gen_ai.server.time_per_output_token``: measured by
the client, as the Prometheus endpoint's GenAI families are); the rest are ``agentload.*``
counterparts of the Prometheus families. docs/live-metrics.md lists them.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from opentelemetry.metrics import CallbackOptions, Meter, Observation
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Histogram,
    HistogramDataPoint,
    Metric,
)
from opentelemetry.util.types import AttributeValue

from workload.measure.live_metrics import (
    GENAI_DURATION_BUCKETS,
    GENAI_TOKEN_BUCKETS,
    GENAI_TPOT_BUCKETS,
    GENAI_TTFT_BUCKETS,
    LATENESS_BUCKETS,
    SESSION_BUCKETS,
)
from workload.measure.records import STATUS_CANCELLED, RequestRecord, SessionRecord

OPERATION = {"chat": "chat", "completions": "text_completion"}  # endpoint -> gen_ai.operation.name


@dataclass(frozen=True, slots=True)
class Gauges:
    """What the process knows now, read at export time (not per request)."""

    sessions_in_flight: Callable[[], int]
    requests_in_flight: Callable[[], int]
    arrivals: Callable[[], tuple[int, int]]  # open loop: (due, dropped) so far


Key = tuple[tuple[str, AttributeValue], ...]  # a series' attributes, hashable

# (name, unit, description) of the counters; histograms: HISTOGRAMS
COUNTERS = (
    ("agentload.requests", "{request}", "request attempts by outcome"),
    ("agentload.request.errors", "{request}", "failed request attempts by error kind"),
    ("agentload.tool_loop.failures", "{request}", "requests whose step failed the agent's tool loop"),
    ("agentload.good_requests", "{request}",
     "successful requests that met every request SLO of their class"),
    ("agentload.tokens", "{token}", "tokens the server reported: input, output, cached (prompt "
     "tokens served from the prefix cache)"),
    ("agentload.cached_prompt_tokens", "{token}",
     "prompt tokens of requests that reported cached tokens"),
    ("agentload.tool_calls", "{call}", "tool calls: returned by the server, or planned by the session"),
    ("agentload.spec_decode.accepted_tokens", "{token}",
     "speculative decoding: draft tokens accepted (client-reported)"),
    ("agentload.spec_decode.draft_tokens", "{token}",
     "speculative decoding: draft tokens proposed (client-reported)"),
    ("agentload.spec_decode.steps", "{step}", "speculative decoding: spec-decode steps (client-reported)"),
    ("agentload.sessions", "{session}", "agent sessions that ended"),
    ("agentload.good_sessions", "{session}", "completed sessions that met their class's SLOs"),
    ("agentload.sessions.started", "{session}", "agent sessions started"),
)  # fmt: skip
HISTOGRAMS = {
    "gen_ai.client.operation.duration": ("s", "GenAI operation duration", GENAI_DURATION_BUCKETS),
    "gen_ai.client.token.usage": ("{token}", "Number of input and output tokens used",
                                  GENAI_TOKEN_BUCKETS),
    "gen_ai.server.time_to_first_token": (
        "s", "Time to first token of successful responses, measured by the client",
        GENAI_TTFT_BUCKETS),
    "gen_ai.server.time_per_output_token": (
        "s", "Time per output token after the first (successful responses), measured by the "
        "client", GENAI_TPOT_BUCKETS),
    "agentload.session.duration": (
        "s", "agent session (task) time, think time and tool waits included", SESSION_BUCKETS),
    "agentload.session.start_lateness": (
        "s", "open loop: how late sessions started against their schedule", LATENESS_BUCKETS),
}  # fmt: skip


@dataclass(slots=True)
class _Hist:
    """One histogram series: counts per explicit bucket (the last: above every bound)."""

    bounds: tuple[float, ...]
    counts: list[int]
    total: float = 0.0
    n: int = 0
    low: float = float("inf")
    high: float = float("-inf")

    def record(self, x: float) -> None:
        self.counts[bisect_left(self.bounds, x)] += 1  # buckets are (previous bound, bound]
        self.total += x
        self.n += 1
        if x < self.low:
            self.low = x
        if x > self.high:
            self.high = x


@dataclass(slots=True)
class Tally:
    """One process's cumulative OpenTelemetry series (the SDK reads it at export time)."""

    base: dict[str, AttributeValue]  # provider, request model, server address and port
    started_ns: int = field(default_factory=time.time_ns)
    sums: dict[tuple[str, Key], int] = field(default_factory=dict)
    hists: dict[tuple[str, Key], _Hist] = field(default_factory=dict)
    _keys: dict[tuple[object, ...], Key] = field(default_factory=dict)

    # ---- series keys, built once per distinct value ---------------------------------------
    def _key(self, *parts: object) -> Key:
        """(class, step or -1, extra "name=value" or "") -> the attributes of a series."""
        key = self._keys.get(parts)
        if key is None:
            cls, step, extra = parts
            items: list[tuple[str, AttributeValue]] = [("agentload.class", str(cls))]
            if isinstance(step, int) and step >= 0:
                items.append(("agentload.step", step))
            if extra:
                name, _, value = str(extra).partition("=")
                items.append((name, value))
            key = self._keys[parts] = tuple(items)
        return key

    def _genai(self, endpoint: str, cls: str, extra: str) -> Key:
        parts = ("genai", endpoint, cls, extra)
        key = self._keys.get(parts)
        if key is None:
            items: list[tuple[str, AttributeValue]] = [
                ("gen_ai.operation.name", OPERATION.get(endpoint, endpoint)),
                *self.base.items(), ("agentload.class", cls)]  # fmt: skip
            if extra:
                name, _, value = extra.partition("=")
                items.append((name, value))
            key = self._keys[parts] = tuple(items)
        return key

    def add(self, name: str, key: Key, n: int = 1) -> None:
        k = (name, key)
        self.sums[k] = self.sums.get(k, 0) + n

    def observe(self, name: str, key: Key, x: float) -> None:
        h = self.hists.get((name, key))
        if h is None:
            bounds = HISTOGRAMS[name][2]
            h = self.hists[(name, key)] = _Hist(tuple(float(b) for b in bounds),
                                                [0] * (len(bounds) + 1))  # fmt: skip
        h.record(x)

    # ---- the hooks ------------------------------------------------------------------------
    def request(self, rec: RequestRecord) -> None:
        """One finished attempt (the record the stats just counted), counted as they count it."""
        cls, step = rec.user_class, rec.step
        self.add("agentload.requests", self._key(cls, step, f"agentload.status={rec.status}"))
        for kind, n in (("input", rec.prompt_tokens), ("output", rec.completion_tokens),
                        ("cached", rec.cached_tokens)):  # fmt: skip
            if n:
                self.add("agentload.tokens", self._key(cls, -1, f"agentload.token.type={kind}"), n)
        per_class = self._key(cls, -1, "")
        if rec.cached_tokens is not None and rec.prompt_tokens:
            self.add("agentload.cached_prompt_tokens", per_class, rec.prompt_tokens)
        if rec.tool_loop_failure or rec.error_kind == "tool_loop":
            self.add("agentload.tool_loop.failures", self._key(cls, step, ""))
        if rec.tool_calls:
            self.add("agentload.tool_calls", self._key(cls, -1, "agentload.source=returned"),
                     len(rec.tool_calls))  # fmt: skip
        if rec.status == STATUS_CANCELLED:
            return  # stopped by the run, not answered: no latency, not an error
        if rec.ok:
            self._ok(rec, cls, per_class)
        else:
            kind = rec.error_kind or "_OTHER"
            if rec.e2e_ms is not None:
                self.observe("gen_ai.client.operation.duration",
                             self._genai(rec.endpoint, cls, f"error.type={kind}"),
                             rec.e2e_ms / 1000.0)  # fmt: skip
            self.add("agentload.request.errors", self._key(cls, step, f"error.type={kind}"))

    def _ok(self, rec: RequestRecord, cls: str, per_class: Key) -> None:
        genai = self._genai(rec.endpoint, cls, "")
        for name, ms in (("gen_ai.client.operation.duration", rec.e2e_ms),
                         ("gen_ai.server.time_to_first_token", rec.ttft_ms),
                         ("gen_ai.server.time_per_output_token", rec.tpot_ms)):  # fmt: skip
            if ms is not None:
                self.observe(name, genai, ms / 1000.0)
        for kind, n in (("input", rec.prompt_tokens), ("output", rec.completion_tokens)):
            if n is not None:
                self.observe("gen_ai.client.token.usage",
                             self._genai(rec.endpoint, cls, f"gen_ai.token.type={kind}"), n)  # fmt: skip
        if rec.slo_met is not False:
            self.add("agentload.good_requests", per_class)
        if rec.planned_tool:
            self.add("agentload.tool_calls", self._key(cls, -1, "agentload.source=planned"))
        spec = rec.spec_decode
        if spec:
            a, s, d = (spec.get(k) for k in
                       ("num_accepted_draft_tokens", "num_spec_steps", "num_draft_tokens"))  # fmt: skip
            if isinstance(a, int) and isinstance(s, int) and s > 0:  # as SpecDecodeStats counts
                self.add("agentload.spec_decode.accepted_tokens", per_class, a)
                self.add("agentload.spec_decode.steps", per_class, s)
                if isinstance(d, int):
                    self.add("agentload.spec_decode.draft_tokens", per_class, d)

    def session_started(self) -> None:
        self.add("agentload.sessions.started", ())

    def session(self, srec: SessionRecord) -> None:
        """One session that ended (any outcome)."""
        cls = srec.user_class
        self.add("agentload.sessions", self._key(cls, -1, f"agentload.outcome={srec.outcome}"))
        per_class = self._key(cls, -1, "")
        if srec.slo_met:
            self.add("agentload.good_sessions", per_class)
        self.observe("agentload.session.duration", per_class, srec.duration_ms / 1000.0)
        if srec.t_scheduled is not None:
            self.observe("agentload.session.start_lateness", (),
                         max(0.0, srec.t_start - srec.t_scheduled))  # fmt: skip

    # ---- export time ----------------------------------------------------------------------
    def register(self, meter: Meter, gauges: Gauges) -> None:
        """Counters and gauges as observable instruments that read this tally / `gauges`."""
        for name, unit, text in COUNTERS:
            meter.create_observable_counter(name, [self._reader(name)], unit, text)

        def one(read: Callable[[], int]) -> Callable[[CallbackOptions], Iterable[Observation]]:
            return lambda _options: [Observation(read())]

        g = gauges
        meter.create_observable_up_down_counter(
            "agentload.sessions.in_flight", [one(g.sessions_in_flight)], "{session}",
            "agent sessions running now")  # fmt: skip
        meter.create_observable_up_down_counter(
            "agentload.requests.in_flight", [one(g.requests_in_flight)], "{request}",
            "requests sent and not yet answered")  # fmt: skip
        meter.create_observable_counter(
            "agentload.arrivals.due", [one(lambda: g.arrivals()[0])], "{session}",
            "open loop: sessions whose scheduled start came")  # fmt: skip
        meter.create_observable_counter(
            "agentload.arrivals.dropped", [one(lambda: g.arrivals()[1])], "{session}",
            "open loop: sessions dropped at max_in_flight or never started")  # fmt: skip

    def _reader(self, name: str) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def read(_options: CallbackOptions) -> Iterable[Observation]:
            return [Observation(n, dict(key)) for (m, key), n in list(self.sums.items())
                    if m == name]  # fmt: skip

        return read

    def histograms(self) -> list[Metric]:
        """Every histogram series now, as the SDK's cumulative Histogram metrics."""
        now = time.time_ns()
        points: dict[str, list[HistogramDataPoint]] = {}
        for (name, key), h in list(self.hists.items()):
            points.setdefault(name, []).append(HistogramDataPoint(
                attributes=dict(key), start_time_unix_nano=self.started_ns, time_unix_nano=now,
                count=h.n, sum=h.total, bucket_counts=list(h.counts), explicit_bounds=h.bounds,
                min=h.low, max=h.high,
            ))  # fmt: skip
        return [
            Metric(name=name, description=HISTOGRAMS[name][1], unit=HISTOGRAMS[name][0],
                   data=Histogram(data_points=pts,
                                  aggregation_temporality=AggregationTemporality.CUMULATIVE))
            for name, pts in points.items()
        ]  # fmt: skip
