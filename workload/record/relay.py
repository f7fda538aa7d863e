"""A response body relayed in the upstream socket's own read callback, looked at afterwards.

While a body is relayed the upstream transport's protocol is a :class:`BodyRelay`: the event
loop's read callback hands it the bytes and it writes them to the client transport there and
then, with no task to wake and nothing parsed first. What the record needs (where the body
ends, the decoded body, the first content-bearing event) is worked out in one callback per
loop turn (``call_soon``), after every read that turn delivered has been written: 50 streams
whose events arrive together are all forwarded before any of them is decoded.

Each read's own time in the proxy (the callback's entry -> the client socket's send
returned) goes into ``Exchange.relay_us``; ``exchanges.jsonl`` and ``summary.json`` report it.
Both stamps are taken in the callback, around ``write``; on either loop (asyncio's or
uvloop's, ``serve.py``) a write with nothing queued before it sends at once, so the second
stamp is the send's return. The arithmetic on them and the byte count wait for the digest:
the callback does nothing after the send but note the read and watch the client's buffer,
because the next stream's read is handled only once it returns.
Times are stamped at the callback's entry, before the send: on loopback the send wakes the
agent, which may read the bytes (and act on them) before the proxy's thread runs again, so a
stamp taken after the send can be later than the agent's own and shorten a tool wait.

A client may hang up once it has what it wants: the OpenAI SDK's synchronous stream closes
the connection at ``data: [DONE]``, before the chunked body's last chunk. A stream whose final
event (``[DONE]``, or the Responses API's ``response.completed``/``failed``/``incomplete``)
was forwarded before the client went counts as whole ("client-done: ..."), not as gone.
"""

from __future__ import annotations

import asyncio
from array import array
from collections.abc import Callable
from time import perf_counter_ns
from typing import Any, cast

import orjson

from workload.measure.http1 import MAX_HEAD_BYTES, ChunkedDecoder, FramingError

MAX_US = 2**32 - 1


class FirstContent:
    """Finds the first SSE event that carries content, reasoning or a tool call (TTFT)."""

    __slots__ = ("_buf", "found")

    def __init__(self) -> None:
        self._buf = b""
        self.found = False

    def feed(self, data: bytes) -> bool:
        buf = self._buf + data
        lines = buf.split(b"\n")
        self._buf = lines.pop()
        for line in lines:
            if line.startswith(b"data:") and _carries(line[5:].strip()):
                self.found = True
                self._buf = b""
                return True
        if len(self._buf) > MAX_HEAD_BYTES:  # a long data line: look at it once it ends
            self._buf = self._buf[-MAX_HEAD_BYTES:]
        return False


def _carries(data: bytes) -> bool:
    if not data or data == b"[DONE]":
        return False
    try:
        ev = orjson.loads(data)
    except orjson.JSONDecodeError:
        return False
    if not isinstance(ev, dict):
        return False
    if isinstance(ev.get("delta"), str):  # the Responses API: response.*.delta events
        return bool(ev["delta"])
    for ch in ev.get("choices") or ():
        if not isinstance(ch, dict):
            continue
        if ch.get("text"):
            return True
        d = ch.get("delta") or {}
        if isinstance(d, dict) and (
            d.get("content")
            or d.get("reasoning_content")
            or d.get("reasoning")
            or d.get("tool_calls")
        ):
            return True
    return False


_FINAL_EVENTS = (b"response.completed", b"response.failed", b"response.incomplete")


def stream_over(body: bytes | bytearray) -> bool:
    """Whether an SSE body's last complete event is the stream's final one (``data: [DONE]``,
    or a Responses API ``response.completed``/``failed``/``incomplete`` event)."""
    sep = b"\r\n\r\n" if body.endswith(b"\r\n\r\n") else b"\n\n"
    if not body.endswith(sep):
        return False
    end = len(body) - len(sep)
    start = body.rfind(sep, 0, end)
    start = 0 if start < 0 else start + len(sep)
    for line in bytes(body[start : min(end, start + 512)]).splitlines():
        if line.startswith(b"data:") and line[5:].strip() == b"[DONE]":
            return True
        if line.startswith(b"event:") and line[6:].strip() in _FINAL_EVENTS:
            return True
    return False


class BodyRelay(asyncio.Protocol):
    """The upstream's protocol while one response body is relayed.

    ``result`` ends with "" (the body ended), "gone: ..." (the client's transport closed),
    "client-done: ..." (it closed after the stream's final event was forwarded: the answer is
    whole, the body's framing not) or "upstream: ..." (the upstream broke off or framed the
    body wrongly). Flow control of the
    upstream's writes (a request body still going up) is passed on to ``inner``, the
    transport's own protocol, whose StreamWriter waits on it.
    """

    def __init__(
        self,
        client: asyncio.WriteTransport,
        upstream: asyncio.Transport,
        inner: Any,
        kind: str,
        length: int,
        *,
        streamed: bool,
        encoded: bool,
        keep_bytes: int,
        at: Callable[[int], float],
        ex: Any,
    ) -> None:
        loop = asyncio.get_running_loop()
        self.client, self.upstream, self.inner, self.kind = client, upstream, inner, kind
        self.result: asyncio.Future[str] = loop.create_future()
        self.blocked: asyncio.Future[None] = loop.create_future()  # the client reads slowly
        self._loop = loop
        self._dec = ChunkedDecoder() if kind == "chunked" else None
        self._left = length if kind == "length" else -1
        self._first = FirstContent() if streamed else None
        self._encoded = encoded
        self._keep = keep_bytes
        self._at = at
        self._ex = ex
        self._pending: list[tuple[int, int, bytes]] = []  # (read's stamp, sent's, its bytes)
        self._over = False  # ``result`` is set
        self._over_at: int | None = None  # the read that carried a stream's final event
        self._high = client.get_write_buffer_limits()[1]
        self.excess = 0  # bytes past the body's end (forwarded: a broken upstream)
        self.lag_us = array("I")

    # ------------------------------------------------------------ the hot path
    def data_received(self, data: bytes) -> None:
        t0 = perf_counter_ns()
        if self._over:
            self.excess += len(data)
            return
        client = self.client
        if client.is_closing():  # these bytes never reach the client: not part of its answer
            self.client_gone()
            return
        client.write(data)
        # Nothing else before the next stream's read: its callback runs after this one
        # returns (the time's arithmetic and the byte count wait for ``digest``).
        pending = self._pending
        pending.append((t0, perf_counter_ns(), data))
        if len(pending) == 1:
            self._loop.call_soon(self.digest)
        if client.get_write_buffer_size() > self._high and not self.blocked.done():
            self.upstream.pause_reading()  # resumed once the client's buffer drains
            self.blocked.set_result(None)

    # ------------------------------------------------------------ after the writes
    def digest(self) -> None:
        """Decode what was forwarded since the last call: body end, body, first content."""
        pending, self._pending = self._pending, []
        ex, body, lag = self._ex, self._ex.response_body, self.lag_us
        for t0, t1, data in pending:  # every read written, the body's end or not
            lag.append(min((t1 - t0) // 1000, MAX_US))
            ex.bytes_out += len(data)
        for t0, _, data in pending:
            if self._over:
                self.excess += len(data)
                continue
            if self._dec is not None:
                decoded = bytearray()
                try:
                    used = self._dec.feed(data, decoded)
                except FramingError as e:
                    self._finish(f"upstream: {e}")
                    return
                self.excess += len(data) - used
                chunk: bytes | bytearray = decoded
                ended = self._dec.done
            else:
                chunk = data
                if self._left > 0:
                    if len(data) > self._left:
                        self.excess += len(data) - self._left
                        chunk = data[: self._left]
                    self._left -= len(chunk)
                ended = self._left == 0
            if ex.t_first is None and (
                self._first is None or self._encoded or self._first.feed(bytes(chunk))
            ):
                ex.t_first = self._at(t0)
            if len(body) + len(chunk) <= self._keep:
                body += chunk
                if (self._first is not None and not self._encoded and self._over_at is None
                        and chunk and stream_over(body)):  # fmt: skip
                    self._over_at = t0
            else:
                ex.too_large = True
            if ended:
                # before this read's send: the agent cannot have had the bytes earlier
                ex.t_end = self._at(t0)
                self._finish("")

    def client_gone(self) -> None:
        """The client closed: the body is whole if it ended or the stream's final event was
        forwarded (its end is that read), else the exchange is cut."""
        if self._pending:
            self.digest()
        if self._over:
            return
        if self._over_at is not None:
            self._ex.t_end = self._at(self._over_at)
            self._finish(
                "client-done: the client closed the connection after the stream's final "
                "event, before the body's last chunk"
            )
            return
        self._finish("gone: the client closed the connection mid-response")

    def _finish(self, outcome: str) -> None:
        if not self._over:
            self._over = True  # what ``result.done()`` says, read without a call per read
            self.result.set_result(outcome)

    # ------------------------------------------------------------ the connection's end
    def eof_received(self) -> bool | None:
        self._ended_by_close()
        return None  # the transport closes itself

    def connection_lost(self, exc: Exception | None) -> None:
        self._ended_by_close()
        self.inner.connection_lost(exc)  # its StreamWriter's waiters learn of it

    def _ended_by_close(self) -> None:
        if self._pending:
            self.digest()
        if self.kind == "close":
            self._ex.t_end = self._at(perf_counter_ns())
            self._finish("")
        self._finish("upstream: the upstream closed the connection mid-response")

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()

    def unblock(self) -> None:
        """The client's buffer drained: read the upstream again."""
        self.blocked = self._loop.create_future()
        self.upstream.resume_reading()


async def relay_body(
    client: asyncio.StreamWriter,
    up_reader: asyncio.StreamReader,
    up_writer: asyncio.StreamWriter,
    kind: str,
    length: int,
    ex: Any,
    *,
    keep_bytes: int,
    at: Callable[[int], float],
    gone: Callable[[], bool],
    watch: list[asyncio.Future[Any]],
) -> tuple[str, int]:
    """Relay one response body (its head already sent); (outcome, bytes past its end).

    The outcome is "" (whole), "gone: ...", "client-done: ..." or "upstream: ..."
    (``BodyRelay.result``); ``gone``
    says whether the client hung up, asked whenever one of ``watch`` (a pending read of the
    client, the request body's pump) completes.
    """
    if kind == "length" and length == 0:  # the head was the whole response
        ex.t_end = ex.t_head if ex.t_head is not None else at(perf_counter_ns())
        return "", 0
    # A socket's transport: asyncio's classes, or uvloop's, which are not their subclasses.
    transport = cast(asyncio.Transport, up_writer.transport)
    inner = transport.get_protocol()
    ct = client.transport
    r = BodyRelay(ct, transport, inner, kind, length, streamed=ex.streamed,
                  encoded=bool(ex.encoding), keep_bytes=keep_bytes, at=at, ex=ex)  # fmt: skip
    # Bytes that came with the head sit in the StreamReader (private, but the only way to
    # hand them on in order); it may also have seen the upstream close already.
    buf: bytearray = up_reader._buffer  # type: ignore[attr-defined]
    ahead, closed = bytes(buf), up_reader.at_eof() or bool(getattr(up_reader, "_eof", False))
    buf.clear()
    transport.set_protocol(r)
    transport.resume_reading()  # the StreamReader may have paused it for a full buffer
    try:
        if ahead:
            r.data_received(ahead)
        if closed:
            r._ended_by_close()
        while not r.result.done():
            waits: set[asyncio.Future[Any]] = {r.result, r.blocked}
            waits.update(w for w in watch if not w.done())
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            if r.result.done():
                break
            if gone():
                r.client_gone()
                break
            if r.blocked.done():
                try:
                    await client.drain()
                except ConnectionError:
                    r.client_gone()
                    break
                r.unblock()
        return r.result.result(), r.excess
    finally:
        if not transport.is_closing():
            transport.set_protocol(inner)
            transport.resume_reading()
        ex.relay_us = r.lag_us
