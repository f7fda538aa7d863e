"""The hand-written OTLP span encoding, read back with opentelemetry-proto; the span queue."""

from __future__ import annotations

import threading

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tests.otlp_receiver import attrs
from workload.measure.otlp_spans import (
    KIND_CLIENT,
    KIND_INTERNAL,
    SpanQueue,
    attributes,
    export_request,
    name_field,
    resource_body,
    scope_body,
    span,
)

ATTRS = {
    "s": "text",
    "unicode": "grüße, 世界",
    "long": "x" * 300,  # a length over one varint byte
    "empty": "",
    "yes": True,
    "no": False,
    "small": 7,
    "zero": 0,
    "big": 2**40 + 3,
    "negative": -5,
    "float": 0.25,
    "tiny": 1e-9,
    "reasons": ("stop", "length"),
}


def _decode(data: bytes) -> ExportTraceServiceRequest:
    return ExportTraceServiceRequest.FromString(data)


def test_spans_decode_to_what_was_encoded() -> None:
    tid, sid, pid = bytes(range(1, 17)), bytes(range(20, 28)), bytes(range(40, 48))
    resource = resource_body({"service.name": "agentload", "agentload.seed": "3"})
    one = span(tid, sid, pid, name_field("chat m1"), KIND_CLIENT, 10**18, 10**18 + 250_000_000,
               attributes(ATTRS.items()), "http_status")  # fmt: skip
    root = span(tid, pid, b"", name_field("invoke_agent coding"), KIND_INTERNAL, 5, 4,
                attributes([("k" * 200, 1)]))  # fmt: skip
    quiet_error = span(tid, bytes(8), b"", name_field("think"), KIND_INTERNAL, 1, 2, b"", "")
    req = _decode(
        export_request(resource, scope_body("agentload", "1.2"), [one, root, quiet_error])
    )
    (rs,) = req.resource_spans
    assert attrs(rs.resource.attributes) == {"service.name": "agentload", "agentload.seed": "3"}
    (ss,) = rs.scope_spans
    assert (ss.scope.name, ss.scope.version) == ("agentload", "1.2")
    a, b, c = ss.spans
    assert (a.trace_id, a.span_id, a.parent_span_id) == (tid, sid, pid)
    assert (a.name, a.kind) == ("chat m1", KIND_CLIENT)
    assert (a.start_time_unix_nano, a.end_time_unix_nano) == (10**18, 10**18 + 250_000_000)
    got = attrs(a.attributes)
    assert {k: v for k, v in got.items() if k != "reasons"} == {
        k: v for k, v in ATTRS.items() if k != "reasons"}  # fmt: skip
    assert list(got["reasons"]) == ["stop", "length"]
    assert (a.status.code, a.status.message) == (2, "http_status")  # ERROR
    assert a.flags == 0x101  # sampled, parent known to be local
    assert (b.parent_span_id, b.status.code, attrs(b.attributes)) == (b"", 0, {"k" * 200: 1})
    assert b.end_time_unix_nano == b.start_time_unix_nano  # an end before the start: clamped
    assert (c.status.code, c.status.message) == (2, "")


def test_the_queue_sends_in_batches_and_everything_at_shutdown() -> None:
    posts: list[int] = []
    got = threading.Event()

    def send(data: bytes) -> bool:
        posts.append(len(_decode(data).resource_spans[0].scope_spans[0].spans))
        got.set()
        return True

    full: list[int] = []
    q = SpanQueue(send, resource_body({}), scope_body("agentload"), lambda: full.append(1),
                  batch=4, flush_s=60)  # fmt: skip
    one = span(bytes(16), bytes(8), b"", name_field("x"), KIND_INTERNAL, 1, 2, b"")
    for _ in range(4):
        q.add(one)
    assert got.wait(10)  # a full batch goes without waiting for the timer
    for _ in range(3):
        q.add(one)
    q.shutdown()
    assert sorted(posts) == [3, 4] and q.sent == 7 and not full


def test_a_full_queue_drops_the_newest_and_says_so_once() -> None:
    release = threading.Event()
    posts: list[int] = []

    def send(data: bytes) -> bool:
        release.wait(10)  # a collector that is slow to answer
        posts.append(len(_decode(data).resource_spans[0].scope_spans[0].spans))
        return True

    full: list[int] = []
    q = SpanQueue(send, resource_body({}), scope_body("agentload"), lambda: full.append(1),
                  max_queue=5, batch=100, flush_s=60)  # fmt: skip
    one = span(bytes(16), bytes(8), b"", name_field("x"), KIND_INTERNAL, 1, 2, b"")
    for _ in range(8):
        q.add(one)
    assert (q.dropped, full) == (3, [1])
    release.set()
    q.shutdown()
    assert posts == [5]


def test_spans_that_arrive_while_a_batch_is_sent_wait_for_the_next_flush() -> None:
    posts: list[int] = []
    q: SpanQueue

    def send(data: bytes) -> bool:
        posts.append(len(_decode(data).resource_spans[0].scope_spans[0].spans))
        if len(posts) < 50:
            q.add(one)  # the measuring loop goes on while the post is under way
        return True

    one = span(bytes(16), bytes(8), b"", name_field("x"), KIND_INTERNAL, 1, 2, b"")
    q = SpanQueue(send, resource_body({}), scope_body("agentload"), lambda: None, flush_s=60)
    for _ in range(3):
        q.add(one)
    q.flush()
    assert posts == [3] and len(q.spans) == 1  # not a post per span that came meanwhile
    q.shutdown()
