"""A tiny OTLP/HTTP receiver on 127.0.0.1 for tests: keeps what /v1/metrics and /v1/traces got.

Decodes the protobuf bodies with opentelemetry-proto's ExportMetricsServiceRequest /
ExportTraceServiceRequest and flattens them into plain rows the tests can check.

Also runnable as a process that outlives one test (tests/vllm/shared.py starts one beside
the shared vLLM server): it appends every span it gets to a JSONL file, one span a line,
and writes its URL to a second file once it listens:
    python -m tests.otlp_receiver SPANS.jsonl URL_FILE    # until SIGTERM
"""

from __future__ import annotations

import gzip
import json
import os
import signal
import sys
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
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


def span_rows(req: ExportTraceServiceRequest) -> list[dict[str, Any]]:
    """The spans of one trace export as plain rows (ids in hex, times in Unix ns)."""
    rows = []
    for rs in req.resource_spans:
        res = attrs(rs.resource.attributes)
        for ss in rs.scope_spans:
            for s in ss.spans:
                rows.append({
                    "name": s.name, "trace_id": s.trace_id.hex(),
                    "span_id": s.span_id.hex(), "parent": s.parent_span_id.hex(),
                    "kind": s.kind, "start": s.start_time_unix_nano,
                    "end": s.end_time_unix_nano, "attributes": attrs(s.attributes),
                    "events": [e.name for e in s.events], "status": s.status.code,
                    "resource": res,
                })  # fmt: skip
    return rows


def read_spans(path: Path) -> list[dict[str, Any]]:
    """The spans a sinking receiver has written so far (a line still being written is left out)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in text.splitlines(keepends=True) if line.endswith("\n")]


class Receiver:
    """`with Receiver() as r:` serves on r.url until the block ends. status: answer code."""

    def __init__(self, status: int = 200, spans_jsonl: Path | None = None) -> None:
        self.got = Received()
        self.status = status
        # a file each span is appended to (flushed, one whole line a write) instead of got.spans
        self.sink = open(spans_jsonl, "a") if spans_jsonl else None  # noqa: SIM115
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
        if self.sink is not None:
            self.sink.close()

    def take(self, path: str, body: bytes) -> bytes:
        if path == "/v1/metrics":
            self.got.metric_posts += 1
            req = ExportMetricsServiceRequest.FromString(body)
            self._metrics(req, self.got.metric_posts)
            return ExportMetricsServiceResponse().SerializeToString()
        if path == "/v1/traces":
            self.got.trace_posts += 1
            spans = span_rows(ExportTraceServiceRequest.FromString(body))
            if self.sink is None:
                self.got.spans += spans
            else:
                self.sink.write("".join(json.dumps(s, default=str) + "\n" for s in spans))
                self.sink.flush()
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


def main(argv: list[str]) -> int:
    """Receive into argv[0] (JSONL) until SIGTERM; argv[1] gets the URL once listening."""
    spans, url_file = Path(argv[0]), Path(argv[1])
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    with Receiver(spans_jsonl=spans) as r:
        tmp = url_file.with_suffix(".tmp")
        tmp.write_text(r.url)
        os.replace(tmp, url_file)  # whole or absent: the reader polls for it
        r.thread.join()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
