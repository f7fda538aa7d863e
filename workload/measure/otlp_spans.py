"""Spans as OTLP protobuf bytes, encoded by hand, and the queue that sends them in batches.

Why not the SDK's ``Tracer`` and ``BatchSpanProcessor``: a request span here is a record that
already ended (its times are the record's), so the SDK's live-span machinery is pure cost —
``Tracer.start_span`` checks and copies every attribute (40-70 us a span measured) and the
OTLP encoder builds each span as Python protobuf objects (about 55 us), on the measuring
process's CPU, for two spans a request. Here a finished span is written straight into the
wire format (``opentelemetry.proto.trace.v1.Span``), with everything that is the same for
every span (the base attributes, the span names, the attribute keys) encoded once: about
10 us a span. The resource and scope are encoded once per process; a batch is the spans'
bytes joined under them (``ExportTraceServiceRequest``). The receiving end cannot tell the
difference: ``tests/test_otlp.py`` decodes the result with opentelemetry-proto.

The queue holds at most ``MAX_QUEUE`` spans and sends a batch every ``FLUSH_S`` seconds or
when ``BATCH`` are waiting, from a thread of its own (a greenlet under Locust); a full queue
drops the newest span and says so once, as the SDK's processor would.
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence

from opentelemetry.util.types import AttributeValue

MAX_QUEUE = 2048  # spans waiting to be sent (the SDK's BatchSpanProcessor default)
BATCH = 512  # spans per export request (the SDK's default batch)
FLUSH_S = 2.0  # the longest a span waits before it is sent

KIND_INTERNAL, KIND_SERVER, KIND_CLIENT = 1, 2, 3  # opentelemetry.proto.trace.v1.Span.SpanKind
STATUS_ERROR = 2  # Status.StatusCode.STATUS_CODE_ERROR
# Span.flags: the W3C trace flags (sampled) in the low byte, and "has is_remote" (0x100): the
# parent is known to be local (the SDK's own encoding of a local parent)
FLAGS_SAMPLED_LOCAL = struct.pack("<I", 0x101)

_MASK64 = (1 << 64) - 1
_U64 = struct.Struct("<Q").pack
_DOUBLE = struct.Struct("<d").pack
_SMALL = [bytes((n,)) for n in range(128)]


def varint(n: int) -> bytes:
    """Protobuf base-128 varint of a non-negative int (negatives: as int64 two's complement)."""
    if 0 <= n < 128:
        return _SMALL[n]
    n &= _MASK64
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def field(tag: bytes, payload: bytes) -> bytes:
    """A length-delimited field: its tag byte(s), the length, the payload."""
    n = len(payload)
    return tag + (_SMALL[n] if n < 128 else varint(n)) + payload


def any_value(v: AttributeValue) -> bytes:
    """``AnyValue``: string 1, bool 2, int 3, double 4, array 5."""
    if isinstance(v, str):
        b = v.encode()
        n = len(b)
        return b"\x0a" + (_SMALL[n] if n < 128 else varint(n)) + b
    if isinstance(v, bool):
        return b"\x10\x01" if v else b"\x10\x00"
    if isinstance(v, int):
        return b"\x18" + (_SMALL[v] if 0 <= v < 128 else varint(v))
    if isinstance(v, float):
        return b"\x21" + _DOUBLE(v)
    if isinstance(v, Sequence):
        return field(b"\x2a", b"".join(field(b"\x0a", any_value(x)) for x in v))
    return field(b"\x0a", str(v).encode())


_KEYS: dict[str, bytes] = {}


def key_value(key: str, v: AttributeValue) -> bytes:
    """A ``KeyValue`` message's body (key 1, value 2); keys are encoded once."""
    k = _KEYS.get(key)
    if k is None:
        k = _KEYS[key] = field(b"\x0a", key.encode())
    a = any_value(v)
    return k + b"\x12" + _SMALL[len(a)] + a if len(a) < 128 else k + field(b"\x12", a)


def attributes(items: Iterable[tuple[str, AttributeValue]], tag: bytes = b"\x4a") -> bytes:
    """Repeated ``KeyValue`` under field `tag` (Span.attributes = 9; Resource.attributes = 1)."""
    out = []
    for k, v in items:
        kv = key_value(k, v)
        n = len(kv)
        out.append(tag + (_SMALL[n] if n < 128 else varint(n)) + kv)
    return b"".join(out)


def name_field(name: str) -> bytes:
    """Span.name (5), encoded once per distinct name by the caller."""
    return field(b"\x2a", name.encode())


_KIND = {k: b"\x30" + varint(k) for k in (KIND_INTERNAL, KIND_SERVER, KIND_CLIENT)}


def span(
    trace_id: bytes,
    span_id: bytes,
    parent_id: bytes,
    name: bytes,
    kind: int,
    start_ns: int,
    end_ns: int,
    attrs: bytes,
    error: str | None = None,
) -> bytes:
    """One ended span as ``ScopeSpans.spans`` (field 2): `name` from ``name_field``, `attrs`
    from ``attributes``; `error` (a message, "" for none) sets status ERROR."""
    body = b"".join((
        b"\x0a\x10", trace_id, b"\x12\x08", span_id,
        b"\x22\x08" + parent_id if parent_id else b"",
        name, _KIND[kind], b"\x39", _U64(start_ns), b"\x41", _U64(max(end_ns, start_ns)),
        attrs,
        b"" if error is None else field(b"\x7a", (field(b"\x12", error.encode()) if error
                                                   else b"") + b"\x18\x02"),
        b"\x85\x01", FLAGS_SAMPLED_LOCAL,
    ))  # fmt: skip
    return field(b"\x12", body)


def export_request(resource: bytes, scope: bytes, spans: Iterable[bytes]) -> bytes:
    """``ExportTraceServiceRequest`` of one resource and scope: `resource` is a ``Resource``
    body (``attributes(..., b"\\x0a")``), `scope` an ``InstrumentationScope`` body, `spans`
    from ``span``."""
    scope_spans = field(b"\x0a", scope) + b"".join(spans)
    return field(b"\x0a", field(b"\x0a", resource) + field(b"\x12", scope_spans))


def resource_body(attrs: Mapping[str, AttributeValue]) -> bytes:
    """A ``Resource`` message body: its attributes (field 1)."""
    return attributes(attrs.items(), b"\x0a")


def scope_body(name: str, version: str = "") -> bytes:
    """An ``InstrumentationScope`` body: name 1, version 2."""
    return field(b"\x0a", name.encode()) + (field(b"\x12", version.encode()) if version else b"")


class SpanQueue:
    """Encoded spans waiting to go out; a thread sends them in batches through `send`."""

    def __init__(
        self,
        send: Callable[[bytes], object],
        resource: bytes,
        scope: bytes,
        on_full: Callable[[], None],
        *,
        max_queue: int = MAX_QUEUE,
        batch: int = BATCH,
        flush_s: float = FLUSH_S,
    ) -> None:
        self.send = send
        self.resource = resource
        self.scope = scope
        self.on_full = on_full
        self.max_queue = max_queue
        self.batch = batch
        self.flush_s = flush_s
        self.spans: list[bytes] = []
        self.dropped = 0
        self.sent = 0
        self._wake = threading.Event()
        self._stopping = False
        self._lock = threading.Lock()  # one batch in flight: the timer's or shutdown's
        self._thread = threading.Thread(target=self._run, name="agentload-otlp-spans", daemon=True)
        self._thread.start()

    def add(self, encoded: bytes) -> None:
        """Queue one span (from ``span``); the hot path's only work besides encoding it."""
        spans = self.spans
        if len(spans) >= self.max_queue:
            self.dropped += 1
            if self.dropped == 1:
                self.on_full()
            return
        spans.append(encoded)
        if len(spans) == self.batch:
            self._wake.set()

    def _run(self) -> None:
        while not self._stopping:
            self._wake.wait(self.flush_s)
            self._wake.clear()
            if not self._stopping:
                self.flush()

    def flush(self) -> None:
        """Send what is queued now, a batch at a time. Spans that arrive meanwhile wait for
        the next flush: a send yields to the measuring loop, which adds spans, and sending
        those at once would turn the batches into a stream of small posts (each a few ms of
        CPU in the HTTP client)."""
        with self._lock:
            n = len(self.spans)
            while n > 0:
                k = min(self.batch, n)
                batch = self.spans[:k]
                del self.spans[:k]  # appends since the copy are behind these k: kept
                n -= k
                self.sent += k
                self.send(export_request(self.resource, self.scope, batch))

    def shutdown(self) -> None:
        """Stop the thread and send what is left (the caller bounds how long it waits)."""
        self._stopping = True
        self._wake.set()
        self._thread.join()
        while self.spans:
            self.flush()
