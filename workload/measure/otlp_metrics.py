"""The run's numbers as OpenTelemetry instruments, recorded once per finished request / session.

OpenTelemetry histograms are fed value by value (the SDK has no observable histogram), so,
unlike the Prometheus endpoint (``live_metrics``), these are recorded in the hook that counts
a finished attempt (``AgentRuntime.record_request``): a handful of ``add`` / ``record`` calls
per request, none per SSE chunk. The SDK aggregates them in memory and a
``PeriodicExportingMetricReader`` sends them; nothing here touches the network.

Names and attributes follow the GenAI semantic conventions where they name the measure
(``gen_ai.client.operation.duration``, ``gen_ai.client.token.usage``,
``gen_ai.server.time_to_first_token``, ``gen_ai.server.time_per_output_token``: measured by
the client, as the Prometheus endpoint's GenAI families are); the rest are ``agentload.*``
counterparts of the Prometheus families. docs/live-metrics.md lists them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from opentelemetry.metrics import CallbackOptions, Meter, Observation
from opentelemetry.util.types import Attributes, AttributeValue

from workload.measure.records import STATUS_CANCELLED, RequestRecord, SessionRecord

# The conventions' advised bucket boundaries (semantic-conventions-genai, gen-ai-metrics.md).
GENAI_DURATION_BUCKETS = (
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
)  # fmt: skip
GENAI_TOKEN_BUCKETS = (
    1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864,
)  # fmt: skip
GENAI_TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
)  # fmt: skip
GENAI_TPOT_BUCKETS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
)  # fmt: skip
SESSION_BUCKETS = (1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)
LATENESS_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 60.0)

OPERATION = {"chat": "chat", "completions": "text_completion"}  # endpoint -> gen_ai.operation.name


@dataclass(frozen=True, slots=True)
class Gauges:
    """What the process knows now, read at export time (not per request)."""

    sessions_in_flight: Callable[[], int]
    requests_in_flight: Callable[[], int]
    arrivals: Callable[[], tuple[int, int]]  # open loop: (due, dropped) so far


class RunInstruments:
    """Every instrument of one run, and the two calls that feed them."""

    def __init__(self, meter: Meter, base: dict[str, AttributeValue], gauges: Gauges) -> None:
        # base: gen_ai.provider.name, gen_ai.request.model, server.address, server.port
        self.base = base
        self._genai: dict[tuple[str, str, str | None], Attributes] = {}
        self._step: dict[tuple[str, int, str], Attributes] = {}
        self._cls: dict[tuple[str, str, str], Attributes] = {}
        h = meter.create_histogram
        c = meter.create_counter
        # fmt: off
        self.duration = h("gen_ai.client.operation.duration", "s", "GenAI operation duration",
                          explicit_bucket_boundaries_advisory=GENAI_DURATION_BUCKETS)
        self.token_usage = h("gen_ai.client.token.usage", "{token}",
                             "Number of input and output tokens used",
                             explicit_bucket_boundaries_advisory=GENAI_TOKEN_BUCKETS)
        self.ttft = h("gen_ai.server.time_to_first_token", "s",
                      "Time to first token of successful responses, measured by the client",
                      explicit_bucket_boundaries_advisory=GENAI_TTFT_BUCKETS)
        self.tpot = h("gen_ai.server.time_per_output_token", "s",
                      "Time per output token after the first (successful responses), measured "
                      "by the client", explicit_bucket_boundaries_advisory=GENAI_TPOT_BUCKETS)
        self.requests = c("agentload.requests", "{request}", "request attempts by outcome")
        self.errors = c("agentload.request.errors", "{request}",
                        "failed request attempts by error kind")
        self.tool_loop_failures = c("agentload.tool_loop.failures", "{request}",
                                    "requests whose step failed the agent's tool loop")
        self.good_requests = c("agentload.good_requests", "{request}",
                               "successful requests that met every request SLO of their class")
        self.tokens = c("agentload.tokens", "{token}",
                        "tokens the server reported: input, output, cached (prompt tokens "
                        "served from the prefix cache)")
        self.cached_prompt = c("agentload.cached_prompt_tokens", "{token}",
                               "prompt tokens of requests that reported cached tokens")
        self.tool_calls = c("agentload.tool_calls", "{call}",
                            "tool calls: returned by the server, or planned by the session")
        self.spec_accepted = c("agentload.spec_decode.accepted_tokens", "{token}",
                               "speculative decoding: draft tokens accepted (client-reported)")
        self.spec_drafted = c("agentload.spec_decode.draft_tokens", "{token}",
                              "speculative decoding: draft tokens proposed (client-reported)")
        self.spec_steps = c("agentload.spec_decode.steps", "{step}",
                            "speculative decoding: spec-decode steps (client-reported)")
        self.sessions = c("agentload.sessions", "{session}", "agent sessions that ended")
        self.good_sessions = c("agentload.good_sessions", "{session}",
                               "completed sessions that met their class's SLOs")
        self.sessions_started = c("agentload.sessions.started", "{session}",
                                  "agent sessions started")
        self.session_duration = h("agentload.session.duration", "s",
                                  "agent session (task) time, think time and tool waits included",
                                  explicit_bucket_boundaries_advisory=SESSION_BUCKETS)
        self.lateness = h("agentload.session.start_lateness", "s",
                          "open loop: how late sessions started against their schedule",
                          explicit_bucket_boundaries_advisory=LATENESS_BUCKETS)
        # fmt: on
        self._observe(meter, gauges)

    def _observe(self, meter: Meter, g: Gauges) -> None:
        def one(read: Callable[[], int]) -> Callable[[CallbackOptions], Iterable[Observation]]:
            return lambda _options: [Observation(read())]

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

    # ---- attribute sets, built once per distinct value (the SDK keys its series by them) ----
    def genai_attrs(self, endpoint: str, cls: str, error: str | None) -> Attributes:
        key = (endpoint, cls, error)
        attrs = self._genai.get(key)
        if attrs is None:
            d = {"gen_ai.operation.name": OPERATION.get(endpoint, endpoint), **self.base,
                 "agentload.class": cls}  # fmt: skip
            if error is not None:
                d["error.type"] = error
            attrs = self._genai[key] = d
        return attrs

    def _token_attrs(self, endpoint: str, cls: str, kind: str) -> Attributes:
        key = (endpoint, cls, kind)
        attrs = self._cls.get(key)
        if attrs is None:
            base = self.genai_attrs(endpoint, cls, None) or {}
            attrs = self._cls[key] = {**base, "gen_ai.token.type": kind}
        return attrs

    def _step_attrs(self, cls: str, step: int, extra: str) -> Attributes:
        """{class, step} plus one more (status=..., error.type=..., source=..., type=...)."""
        key = (cls, step, extra)
        attrs = self._step.get(key)
        if attrs is None:
            d: dict[str, AttributeValue] = {"agentload.class": cls}
            if step >= 0:
                d["agentload.step"] = step
            if extra:
                name, _, value = extra.partition("=")
                d[name] = value
            attrs = self._step[key] = d
        return attrs

    # ---- the two hooks --------------------------------------------------------------------------
    def request(self, rec: RequestRecord) -> None:
        """One finished attempt (the record the stats just counted)."""
        cls, step = rec.user_class, rec.step
        # counted as stats.Aggregate counts them (so the last export matches stats.json)
        self.requests.add(1, self._step_attrs(cls, step, f"agentload.status={rec.status}"))
        self._tokens(rec, cls)
        if rec.tool_loop_failure or rec.error_kind == "tool_loop":
            self.tool_loop_failures.add(1, self._step_attrs(cls, step, ""))
        if rec.tool_calls:
            self.tool_calls.add(len(rec.tool_calls),
                                self._step_attrs(cls, -1, "agentload.source=returned"))  # fmt: skip
        if rec.status == STATUS_CANCELLED:
            return  # stopped by the run, not answered: no latency, not an error
        per_class = self._step_attrs(cls, -1, "")
        if rec.ok:
            genai = self.genai_attrs(rec.endpoint, cls, None)
            if rec.e2e_ms is not None:
                self.duration.record(rec.e2e_ms / 1000.0, genai)
            if rec.ttft_ms is not None:
                self.ttft.record(rec.ttft_ms / 1000.0, genai)
            if rec.tpot_ms is not None:
                self.tpot.record(rec.tpot_ms / 1000.0, genai)
            if rec.prompt_tokens is not None:
                self.token_usage.record(rec.prompt_tokens,
                                        self._token_attrs(rec.endpoint, cls, "input"))  # fmt: skip
            if rec.completion_tokens is not None:
                self.token_usage.record(rec.completion_tokens,
                                        self._token_attrs(rec.endpoint, cls, "output"))  # fmt: skip
            if rec.slo_met is not False:
                self.good_requests.add(1, per_class)
            if rec.planned_tool:
                self.tool_calls.add(1, self._step_attrs(cls, -1, "agentload.source=planned"))
            self._spec_decode(rec, per_class)
        else:
            kind = rec.error_kind or "_OTHER"
            if rec.e2e_ms is not None:
                self.duration.record(rec.e2e_ms / 1000.0,
                                     self.genai_attrs(rec.endpoint, cls, kind))  # fmt: skip
            self.errors.add(1, self._step_attrs(cls, step, f"error.type={kind}"))

    def _tokens(self, rec: RequestRecord, cls: str) -> None:
        for kind, n in (("input", rec.prompt_tokens), ("output", rec.completion_tokens),
                        ("cached", rec.cached_tokens)):  # fmt: skip
            if n:
                self.tokens.add(n, self._step_attrs(cls, -1, f"agentload.token.type={kind}"))
        if rec.cached_tokens is not None and rec.prompt_tokens:
            self.cached_prompt.add(rec.prompt_tokens, self._step_attrs(cls, -1, ""))

    def _spec_decode(self, rec: RequestRecord, attrs: Attributes) -> None:
        spec = rec.spec_decode
        if not spec:
            return
        a, s, d = (spec.get(k) for k in
                   ("num_accepted_draft_tokens", "num_spec_steps", "num_draft_tokens"))  # fmt: skip
        if isinstance(a, int) and isinstance(s, int) and s > 0:  # as stats.SpecDecodeStats counts
            self.spec_accepted.add(a, attrs)
            self.spec_steps.add(s, attrs)
            if isinstance(d, int):
                self.spec_drafted.add(d, attrs)

    def session_started(self) -> None:
        self.sessions_started.add(1)

    def session(self, srec: SessionRecord) -> None:
        """One session that ended (any outcome)."""
        cls = srec.user_class
        self.sessions.add(1, self._step_attrs(cls, -1, f"agentload.outcome={srec.outcome}"))
        if srec.slo_met:
            self.good_sessions.add(1, self._step_attrs(cls, -1, ""))
        self.session_duration.record(srec.duration_ms / 1000.0, self._step_attrs(cls, -1, ""))
        if srec.t_scheduled is not None:
            self.lateness.record(max(0.0, srec.t_start - srec.t_scheduled))
