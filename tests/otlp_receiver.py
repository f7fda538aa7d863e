"""A tiny OTLP/HTTP receiver on 127.0.0.1 for tests: keeps what /v1/metrics and /v1/traces got.

Decodes the protobuf bodies with opentelemetry-proto's ExportMetricsServiceRequest /
ExportTraceServiceRequest and flattens them into plain rows the tests can check.
"""

from __future__ import annotations

import gzip
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue


def value_of(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return tuple(value_of(x) for x in v.array_value.values)
    return getattr(v, kind) if kind else None


def attrs(kvs: Any) -> dict[str, Any]:
    return {kv.key: value_of(kv.value) for kv in kvs if isinstance(kv, KeyValue)}


@dataclass
class Point:
    """One data point of one metric in one export."""

    name: str
    unit: str
    kind: str  # sum | gauge | histogram
    attributes: dict[str, Any]
    resource: dict[str, Any]
    value: float = 0.0  # sums and gauges
    count: int = 0  # histograms
    total: float = 0.0
    bounds: tuple[float, ...] = ()
    monotonic: bool = False
    export: int = 0  # which POST it came in


@dataclass
class Received:
    metric_posts: int = 0
    trace_posts: int = 0
    points: list[Point] = field(default_factory=list)
    spans: list[dict[str, Any]] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)

    def last(self) -> dict[tuple[str, str, tuple], Point]:
        """The latest point of each (resource instance, metric, attributes) series."""
        out: dict[tuple[str, str, tuple], Point] = {}
        for p in self.points:
            key = (str(p.resource.get("service.instance.id")), p.name,
                   tuple(sorted(p.attributes.items())))  # fmt: skip
            out[key] = p
        return out


class Receiver:
    """`with Receiver() as r:` serves on r.url until the block ends. status: answer code."""

    def __init__(self, status: int = 200) -> None:
        self.got = Received()
        self.status = status
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                with receiver.lock:
                    receiver.got.paths.append(self.path)
                    reply = receiver.take(self.path, body)
                self.send_response(receiver.status)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *_args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Receiver:
        self.thread.start()
        return self

    def __exit__(self, *_exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()

    def take(self, path: str, body: bytes) -> bytes:
        if path == "/v1/metrics":
            self.got.metric_posts += 1
            req = ExportMetricsServiceRequest.FromString(body)
            self._metrics(req, self.got.metric_posts)
            return ExportMetricsServiceResponse().SerializeToString()
        if path == "/v1/traces":
            self.got.trace_posts += 1
            treq = ExportTraceServiceRequest.FromString(body)
            for rs in treq.resource_spans:
                res = attrs(rs.resource.attributes)
                for ss in rs.scope_spans:
                    for s in ss.spans:
                        self.got.spans.append({
                            "name": s.name, "trace_id": s.trace_id.hex(),
                            "span_id": s.span_id.hex(), "parent": s.parent_span_id.hex(),
                            "kind": s.kind, "start": s.start_time_unix_nano,
                            "end": s.end_time_unix_nano, "attributes": attrs(s.attributes),
                            "events": [e.name for e in s.events], "status": s.status.code,
                            "resource": res,
                        })  # fmt: skip
            return ExportTraceServiceResponse().SerializeToString()
        return b""

    def _metrics(self, req: ExportMetricsServiceRequest, n: int) -> None:
        for rm in req.resource_metrics:
            res = attrs(rm.resource.attributes)
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    kind = m.WhichOneof("data")
                    data = getattr(m, kind)
                    for dp in data.data_points:
                        p = Point(m.name, m.unit, kind, attrs(dp.attributes), res, export=n)
                        if kind == "histogram":
                            p.count, p.total = dp.count, dp.sum
                            p.bounds = tuple(dp.explicit_bounds)
                        else:
                            p.value = (
                                dp.as_int if dp.WhichOneof("value") == "as_int" else dp.as_double
                            )
                            p.monotonic = bool(getattr(data, "is_monotonic", False))
                        self.got.points.append(p)
