"""`--otlp-endpoint`: the run's numbers sent through the OpenTelemetry SDK over OTLP/HTTP.

Each measuring process (the local one, or every worker) builds its own ``MeterProvider`` (a
``PeriodicExportingMetricReader``), never the global one, and with ``--otlp-traces`` a span
queue (``otlp_spans``) that sends through the SDK's OTLP/HTTP span exporter's client. The
hooks that count a finished request or session add to a tally (``otlp_metrics``, read by the
SDK at export time) and write ended spans (``otlp_traces``); collecting and sending run in
threads of their own (greenlets under Locust), batched. A process is one OpenTelemetry service instance (``service.instance.id`` =
``<run id>/<role><worker>``): a backend sums the workers, as Locust's master sums their stats.

An endpoint that is down or refuses never fails or slows the run: the SDK's own log lines are
kept off the console, the first failed export is said once (``notice``), and at the end the
last export gets a few seconds (none once an export has failed). The run's files keep
every number either way.

Needs the ``otel`` extra (``pip install 'agentload[otel]'``): opentelemetry-sdk and
opentelemetry-exporter-otlp-proto-http.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlparse

from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    Metric,
    MetricExportResult,
    MetricsData,
    PeriodicExportingMetricReader,
    ScopeMetrics,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.util.types import AttributeValue

from workload.measure.otlp_metrics import Gauges, Tally
from workload.measure.otlp_spans import SpanQueue, resource_body, scope_body
from workload.measure.otlp_traces import SessionTracer
from workload.measure.records import RequestRecord, SessionRecord

__all__ = ["ExportHealth", "Gauges", "OtlpExport", "OtlpSettings", "short_reason", "with_metrics"]

SCOPE = "agentload"
CLOSE_TIMEOUT_S = 2.0  # the most the last export may add to the end of a run
EXPORT_TIMEOUT_S = 5.0  # one export, its retries included (the SDK's default: 10 s)


@dataclass(frozen=True, slots=True)
class OtlpSettings:
    """What one process exports, and as whom."""

    endpoint: str  # OTLP/HTTP base URL; /v1/metrics and /v1/traces are appended
    traces: bool
    sample: float
    interval_s: float
    seed: int
    target: str  # the server's base URL (server.address, server.port)
    model: str
    provider: str  # gen_ai.provider.name: "vllm" or "openai"
    resource: dict[str, AttributeValue] = field(default_factory=dict)


class ExportHealth(logging.Handler):
    """Takes the SDK's log lines off the console; says the first failed export once."""

    def __init__(self, endpoint: str, say: Callable[[str], None]) -> None:
        super().__init__(logging.WARNING)
        self.endpoint = endpoint
        self.say = say
        self.failed = 0
        self.reason = ""
        self.said = False
        self.giving_up = False  # set at the end once an export failed: drop, do not retry
        self.said_full = False
        self.closed = False

    def emit(self, record: logging.LogRecord) -> None:
        if self.closed:
            return  # an export thread still retrying after the run's end: nothing more to say
        text = record.getMessage()
        if not self.reason:
            self.reason = short_reason(text, self.endpoint)
        if record.levelno >= logging.ERROR and "export" in text.lower():
            self.failure()

    def queue_full(self) -> None:
        """Spans come faster than they go out: the newest are dropped (said once)."""
        if not self.said_full:
            self.said_full = True
            self.say(
                "agentload: OTLP span queue full: spans are being dropped (the export "
                "cannot keep up; --otlp-sample 0.1 traces a tenth of the sessions)"
            )

    def failure(self) -> None:
        self.failed += 1
        if not self.said:
            self.said = True
            self.say(
                f"agentload: OTLP export to {self.endpoint} failed ({self.reason or 'no answer'})"
                "; the run goes on and its files keep every number (said once)"
            )


def short_reason(text: str, endpoint: str) -> str:
    """A few words of why, out of the SDK's long log line."""
    m = re.search(r"\[Errno -?\d+\] ([^'\")(]+)", text)
    if m:
        reason = m.group(1).strip()
    elif m := re.search(r"code: (\d{3})", text):
        reason = f"HTTP {m.group(1)}"
    elif "timeout" in text.lower() or "timed out" in text.lower():
        reason = "timed out"
    else:
        reason = text.strip().splitlines()[0][:120] if text.strip() else ""
    if urlparse(endpoint).port == 4317:
        reason += "; 4317 is OTLP/gRPC's port, agentload sends OTLP/HTTP (usually 4318)"
    return reason


class _Spans(OTLPSpanExporter):
    """The SDK's OTLP/HTTP span exporter, sending spans already encoded (``otlp_spans``).

    Built by the SDK, so the endpoint's headers, TLS, compression and timeout come from the
    same ``OTEL_EXPORTER_OTLP_*`` variables as the metrics'; ``send`` hands the bytes to the
    exporter's HTTP client (retries and backoff included), the step ``export`` takes after
    encoding SDK spans. The client is the SDK's own attribute, ``_client``: the `otel` extra
    pins the SDK's minor version, and ``tests/test_otlp.py`` sends through it.
    """

    def __init__(self, health: ExportHealth, **kw: Any) -> None:
        super().__init__(**kw)
        self.health = health

    def send(self, data: bytes) -> bool:
        if self.health.giving_up:
            return False
        ok = bool(self._client.export(data).success)
        if not ok:
            self.health.failure()
        return ok

    def close(self) -> None:
        """The HTTP client's connections closed (after the last batch)."""
        self.shutdown()  # type: ignore[no-untyped-call]  # the SDK's, unannotated


class _Metrics(OTLPMetricExporter):
    """The OTLP metric exporter, adding the tally's histograms to what the reader collected."""

    def __init__(self, health: ExportHealth, tally: Tally, **kw: Any) -> None:
        super().__init__(**kw)
        self.health = health
        self.tally = tally

    def export(
        self, metrics_data: MetricsData, timeout_millis: float | None = None, **kw: Any
    ) -> MetricExportResult:
        if self.health.giving_up:
            return MetricExportResult.FAILURE
        metrics_data = with_metrics(metrics_data, self.tally.histograms())
        result = super().export(metrics_data, timeout_millis, **kw)
        if result is not MetricExportResult.SUCCESS:
            self.health.failure()
        return result


def with_metrics(data: MetricsData, extra: list[Metric]) -> MetricsData:
    """`data` with `extra` added to its agentload scope (the collection always has one: the
    observable counters)."""
    if not extra or not data.resource_metrics:
        return data
    first, *rest = data.resource_metrics
    scopes = list(first.scope_metrics)
    for i, sm in enumerate(scopes):
        if sm.scope.name == SCOPE:
            scopes[i] = replace(sm, metrics=[*sm.metrics, *extra])
            break
    else:
        scopes.append(ScopeMetrics(InstrumentationScope(SCOPE), extra, ""))
    return replace(data, resource_metrics=[replace(first, scope_metrics=scopes), *rest])


def _server(target: str) -> dict[str, AttributeValue]:
    p = urlparse(target)
    out: dict[str, AttributeValue] = {}
    if p.hostname:
        out["server.address"] = p.hostname
        out["server.port"] = p.port or (443 if p.scheme == "https" else 80)
    return out


class OtlpExport:
    """One process's OpenTelemetry export: the hooks the runtime calls, and close()."""

    def __init__(self, s: OtlpSettings, gauges: Gauges, say: Callable[[str], None]) -> None:
        self.settings = s
        self.health = ExportHealth(s.endpoint, say)
        sdk_log = logging.getLogger("opentelemetry")
        for old in [h for h in sdk_log.handlers if isinstance(h, ExportHealth)]:
            sdk_log.removeHandler(old)  # a previous test's (the web UI starts several)
        sdk_log.addHandler(self.health)
        sdk_log.propagate = False  # the SDK's retries and failures stay off the console
        resource = Resource.create({"service.name": "agentload", **s.resource})
        base: dict[str, AttributeValue] = {"gen_ai.provider.name": s.provider,
                                           "gen_ai.request.model": s.model,
                                           **_server(s.target)}  # fmt: skip
        self.metrics = Tally(base)
        exporter = _Metrics(self.health, self.metrics, endpoint=f"{s.endpoint}/v1/metrics",
                            timeout=EXPORT_TIMEOUT_S)  # fmt: skip
        self.reader = PeriodicExportingMetricReader(
            exporter, export_interval_millis=s.interval_s * 1000.0
        )
        self.meters = MeterProvider([self.reader], resource=resource, shutdown_on_exit=False)
        self.metrics.register(self.meters.get_meter(SCOPE), gauges)
        self.queue: SpanQueue | None = None
        self.spans: SessionTracer | None = None
        if s.traces:
            self.span_exporter = _Spans(self.health, endpoint=f"{s.endpoint}/v1/traces",
                                        timeout=EXPORT_TIMEOUT_S)  # fmt: skip
            self.queue = SpanQueue(self.span_exporter.send, resource_body(resource.attributes),
                                   scope_body(SCOPE), self.health.queue_full)  # fmt: skip
            self.spans = SessionTracer(self.queue, base, s.seed, s.sample)
        self.closed = False

    # ---- the hooks (AgentRuntime / users.play) ------------------------------------------------
    def session_started(
        self, session_id: str, cls: str, t_start: float, parent_id: str | None = None
    ) -> None:
        self.metrics.session_started()
        if self.spans is not None:
            self.spans.session_started(session_id, cls, t_start, parent_id)

    def traceparent(self, session_id: str, request_id: str) -> str | None:
        """The W3C ``traceparent`` header for a request about to be sent (None without
        ``--otlp-traces``): its span's ids, so the server's span links under it."""
        return None if self.spans is None else self.spans.traceparent(session_id, request_id)

    def waited(self, session_id: str, t0: float, t1: float, tool_s: float, think_s: float) -> None:
        if self.spans is not None:
            self.spans.waited(session_id, t0, t1, tool_s, think_s)

    def request(self, rec: RequestRecord) -> None:
        self.metrics.request(rec)
        if self.spans is not None:
            self.spans.request(rec)

    def session(self, srec: SessionRecord) -> None:
        self.metrics.session(srec)
        if self.spans is not None:
            self.spans.session_ended(srec)

    # ---- the end ----------------------------------------------------------------------------
    def close(self) -> None:
        """The last export, given CLOSE_TIMEOUT_S at most (nothing once an export has failed),
        then the SDK's threads stop. Idempotent."""
        if self.closed:
            return
        self.closed = True
        self.health.giving_up = self.health.failed > 0
        if self.spans is not None:
            self.spans.end_open()
        # the SDK's shutdowns wait out an exporter's retries: wait for them here at most
        # CLOSE_TIMEOUT_S, in a thread of their own (a greenlet under Locust)
        last = threading.Thread(target=self._shutdown, name="agentload-otlp-close", daemon=True)
        last.start()
        last.join(CLOSE_TIMEOUT_S)
        if last.is_alive():
            self.health.giving_up = True
            self.health.reason = self.health.reason or f"no answer within {CLOSE_TIMEOUT_S:g}s"
            self.health.failure()
        # the SDK's lines stay off the console for good: a thread may still be retrying
        self.health.closed = True

    def _shutdown(self) -> None:
        if self.queue is not None:
            self.queue.shutdown()  # the queue's last batches
            self.span_exporter.close()
        self.meters.shutdown()  # the periodic reader's last collection and export
