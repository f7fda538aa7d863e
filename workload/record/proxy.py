"""The recording reverse proxy: HTTP/1.1 on asyncio streams, bytes forwarded as they are read.

Each client connection gets its own upstream connection (opened on its first request, kept
while both sides keep alive). A request's head goes upstream at once with only its Host line
(and a path prefix of ``--upstream``) changed; its body is pumped up while the response is
read back, so ``Expect: 100-continue`` and interim responses pass through. A response body
is relayed by ``relay.BodyRelay``: each read from the upstream is written to the client in
the read's own callback, and decoded for the record only after every read of that loop
turn was written. No read waits for another one (no buffering), and the response's bytes
(status line, headers, chunk framing) reach the client exactly as the upstream sent them.

What the record gets per exchange is an ``Exchange`` (times, status, the decoded bodies, each
body read's time in the proxy), handed to ``sink`` once the exchange is over; the proxy
never parses JSON beyond finding the first content-bearing event of a stream (TTFT).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import ssl
import time
from array import array
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import orjson

from workload.measure.http1 import (
    MAX_HEAD_BYTES,
    ChunkedDecoder,
    FramingError,
    Head,
    parse_head,
    replace_host,
    response_body_kind,
)
from workload.record.relay import relay_body

READ_BYTES = 1 << 16
KEEP_BODY_BYTES = 64 << 20  # bodies larger than this are forwarded but not kept for the record
CONNECT_TIMEOUT_S = 10.0


class Clock:
    """Unix seconds from one monotonic base, so differences are exact and labels are wall time."""

    def __init__(self, anchor: tuple[float, int] | None = None) -> None:
        """``anchor``: another Clock's (``Clock.anchor``), so proxy processes of one recording
        share one clock (``perf_counter_ns`` is the system's monotonic clock on Linux)."""
        self._wall, self._ns = anchor or (time.time(), time.perf_counter_ns())

    @property
    def anchor(self) -> tuple[float, int]:
        return self._wall, self._ns

    def now(self) -> float:
        return self._wall + (time.perf_counter_ns() - self._ns) / 1e9

    def at(self, perf_ns: int) -> float:
        """The unix time of a ``time.perf_counter_ns()`` stamp."""
        return self._wall + (perf_ns - self._ns) / 1e9


@dataclass(frozen=True, slots=True)
class Upstream:
    """Where requests go: scheme, host, port, a path prefix and the Host header to send."""

    url: str
    host: str
    port: int
    tls: bool
    prefix: str

    @property
    def host_header(self) -> str:
        default = 443 if self.tls else 80
        return self.host if self.port == default else f"{self.host}:{self.port}"

    def target(self, target: str) -> str:
        """The request target upstream: the client's, under the upstream's path prefix."""
        if not self.prefix or target.startswith(self.prefix + "/") or target == self.prefix:
            return target
        return self.prefix + target


def parse_upstream(url: str) -> Upstream | None:
    """An Upstream from ``http(s)://host[:port][/prefix]`` (a trailing /v1 is dropped: clients
    send it themselves); None when it is not such a URL."""
    try:
        u = urlsplit(url.strip())
        port = u.port
    except ValueError:
        return None
    if u.scheme not in ("http", "https") or not u.hostname or u.query or u.fragment:
        return None
    prefix = u.path.rstrip("/")
    if prefix.endswith("/v1"):
        prefix = prefix[: -len("/v1")]
    tls = u.scheme == "https"
    return Upstream(url.strip(), u.hostname, port or (443 if tls else 80), tls, prefix)


@dataclass(slots=True)
class Exchange:
    """One request and its response as the proxy saw them (times: unix s, one clock)."""

    n: int
    client: str  # peer address and a digest of its User-Agent: which agent process sent it
    method: str
    path: str
    t_arrival: float
    session_hint: str | None = None  # the --session-header value
    status: int = 0
    t_head: float | None = None  # the response head arrived
    t_first: float | None = None  # first content-bearing event (a stream) or body byte
    t_end: float | None = None  # the response's last read, stamped before it went to the client
    streamed: bool = False
    encoding: str = ""  # the response's Content-Encoding (``encodings.decode_body``)
    request_encoding: str = ""  # the request's
    outcome: str = (
        "ok"  # ok | client_gone | upstream_unreachable | upstream_failed | bad_request | stopped
    )
    error: str | None = None
    request_body: bytearray = field(default_factory=bytearray)
    response_body: bytearray = field(default_factory=bytearray)
    bytes_in: int = 0  # request body bytes from the client
    bytes_out: int = 0  # response bytes to the client (head included)
    too_large: bool = False  # a body past KEEP_BODY_BYTES: forwarded, not kept
    relay_us: array[int] = field(default_factory=lambda: array("I"))  # per body read: in -> sent


def _error_response(status: int, reason: str, message: str, kind: str) -> bytes:
    body = orjson.dumps({"error": {"message": message, "type": kind, "code": status}})
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nx-agentload-record: {kind}\r\n\r\n"
    )
    return head.encode() + body


class _Conn:
    """One client connection: its streams, the bytes read ahead of the next head, its upstream."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.ahead = b""
        self.up: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        self.busy = False
        peer = writer.get_extra_info("peername")
        self.peer = str(peer[0]) if isinstance(peer, tuple) else str(peer)

    def close_upstream(self, abort: bool = False) -> None:
        if self.up is not None:
            w = self.up[1]
            if abort:
                w.transport.abort()
            else:
                w.close()
            self.up = None


class _Gone(Exception):
    """The client went away mid-exchange (private control flow)."""


class _UpstreamFailed(Exception):
    """The upstream broke off mid-exchange (private control flow)."""


class RecordingProxy:
    """The proxy server: ``await start(host, port)`` -> port; ``await close(grace_s)``."""

    def __init__(
        self,
        upstream: Upstream,
        sink: Callable[[Exchange], None],
        *,
        session_header: str | None = None,
        clock: Clock | None = None,
        numbers: tuple[int, int] = (1, 1),
    ) -> None:
        """``numbers``: (first, step) of the exchange numbers, so that proxy processes of one
        recording number theirs apart (process i of N: i + 1, step N)."""
        self.upstream = upstream
        self.sink = sink
        self.session_header = session_header
        self.clock = clock or Clock()
        self._step = numbers[1]
        self._n = numbers[0] - numbers[1]
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._conns: dict[asyncio.Task[None], _Conn] = {}
        self._ssl = ssl.create_default_context() if upstream.tls else None
        self.stopping = False

    async def start(self, host: str, port: int, *, share_port: bool = False) -> int:
        """Listen; the port. ``share_port``: SO_REUSEPORT, so other proxy processes of the
        recording listen on the same port and the kernel spreads connections over them."""
        self._server = await asyncio.start_server(
            self._accept, host, port, limit=MAX_HEAD_BYTES * 2, reuse_address=True,
            reuse_port=share_port or None,
        )  # fmt: skip
        return int(self._server.sockets[0].getsockname()[1])

    @property
    def in_flight(self) -> int:
        return sum(1 for c in self._conns.values() if c.busy)

    async def close(self, grace_s: float) -> None:
        """Stop accepting; idle connections close now, busy ones get ``grace_s`` to finish."""
        self.stopping = True
        if self._server is not None:
            self._server.close()
        for task, conn in list(self._conns.items()):
            if not conn.busy:
                task.cancel()
        deadline = time.monotonic() + grace_s
        while self.in_flight and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def close_unless(self, grace_s: float, cut: Awaitable[Any]) -> None:
        """``close(grace_s)``, cut short (busy connections closed at once) when ``cut``
        completes first: a second Ctrl-C."""
        closing = asyncio.ensure_future(self.close(grace_s))
        stop = asyncio.ensure_future(cut)
        await asyncio.wait({closing, stop}, return_when=asyncio.FIRST_COMPLETED)
        if not closing.done():
            await self.close(0.0)
        stop.cancel()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        conn = _Conn(reader, writer)
        self._tasks.add(task)
        self._conns[task] = conn
        try:
            await self._serve(conn)
        except asyncio.CancelledError:
            pass  # close() cut this connection: the exchange is recorded as stopped
        finally:
            self._tasks.discard(task)
            self._conns.pop(task, None)

    async def _serve(self, conn: _Conn) -> None:
        try:
            while not self.stopping:
                raw = await self._read_head(conn)
                if raw is None:
                    break
                conn.busy = True
                try:
                    keep = await self._exchange(conn, raw)
                finally:
                    conn.busy = False
                if not keep:
                    break
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            conn.close_upstream(abort=True)
            conn.writer.close()

    async def _read_head(self, conn: _Conn) -> bytes | None:
        end = conn.ahead.find(b"\r\n\r\n")
        if end >= 0:  # a pipelined request already read
            raw, conn.ahead = conn.ahead[: end + 4], conn.ahead[end + 4 :]
            return raw
        try:
            rest = await conn.reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            return None
        except asyncio.LimitOverrunError:
            conn.writer.write(_error_response(431, "Request Header Fields Too Large",
                                              "request head too large", "bad_request"))  # fmt: skip
            return None
        raw, conn.ahead = conn.ahead + rest, b""
        return raw

    def _new_exchange(self, conn: _Conn, head: Head, t0: float) -> Exchange:
        self._n += self._step
        ua = head.get("user-agent")
        client = conn.peer + (
            "/" + hashlib.blake2b(ua.encode(), digest_size=4).hexdigest() if ua else ""
        )
        hint = head.get(self.session_header) if self.session_header else ""
        return Exchange(
            n=self._n,
            client=client,
            method=head.start[0],
            path=head.start[1].split("?", 1)[0],
            t_arrival=t0,
            session_hint=hint or None,
            request_encoding=head.get("content-encoding").strip().lower(),
        )

    async def _exchange(self, conn: _Conn, raw: bytes) -> bool:
        """One request and its response; whether the client connection stays open.

        Long because it is the exchange's one timeline: connect, send, relay, record, with
        each failure (bad head, unreachable upstream, client gone, upstream broken) ending
        it in its own way and every path handing the exchange to the sink exactly once.
        """
        t0 = self.clock.now()
        try:
            head = parse_head(raw)
            kind, length = head.body_kind()
        except FramingError as e:
            conn.writer.write(
                _error_response(400, "Bad Request", f"agentload record: {e}", "bad_request")
            )
            self._n += self._step
            self.sink(Exchange(self._n, conn.peer, "", "", t0, status=400, t_end=t0,
                               outcome="bad_request", error=str(e)))  # fmt: skip
            return False
        ex = self._new_exchange(conn, head, t0)
        up_head = replace_host(head, self.upstream.host_header, self.upstream.target(head.start[1]))
        watch: asyncio.Task[bytes] | None = None
        try:
            reused = conn.up is not None
            try:
                up = await self._upstream(conn)
            except OSError as e:
                return await self._unreachable(conn, head, kind, length, ex, e)
            raw_body: list[bytes] = []
            up[1].write(up_head)
            pump = asyncio.ensure_future(
                self._pump_request(conn, up[1], kind, length, ex, raw_body)
            )
            try:
                rhead = await self._response_head(conn, up, pump, ex)
            except _UpstreamFailed:
                if not (reused and ex.status == 0):
                    raise
                await pump  # a kept-alive upstream closed meanwhile: once more on a new one
                conn.close_upstream(abort=True)
                up = await self._upstream(conn)
                up[1].write(up_head + b"".join(raw_body))
                pump = asyncio.ensure_future(asyncio.sleep(0))
                rhead = await self._response_head(conn, up, pump, ex)
            watch = asyncio.ensure_future(conn.reader.read(1)) if pump.done() else None
            rkind, rlen = response_body_kind(rhead, ex.method)
            ex.streamed = "text/event-stream" in rhead.get("content-type").lower()
            ex.encoding = rhead.get("content-encoding").strip().lower()
            clean = await self._relay(conn, up, rkind, rlen, ex, pump, watch)
            await pump
            keep = head.keep_alive() and rhead.keep_alive() and rkind != "close" and clean
            if not keep:
                conn.close_upstream()
            return keep and not self.stopping
        except _Gone:
            ex.outcome, ex.error = "client_gone", "the client closed the connection mid-response"
            conn.close_upstream(abort=True)  # the upstream sees the close and cancels the request
            return False
        except (_UpstreamFailed, OSError, FramingError, asyncio.IncompleteReadError) as e:
            ex.outcome = "upstream_failed"
            ex.error = str(e) or type(e).__name__
            conn.close_upstream(abort=True)
            if ex.status == 0:  # nothing sent to the client yet: it gets a 502 it can read
                msg = f"agentload record: the upstream {self.upstream.url} broke off ({ex.error})"
                conn.writer.write(_error_response(502, "Bad Gateway", msg, "upstream_failed"))
                ex.status = 502
            return False
        except asyncio.CancelledError:
            ex.outcome, ex.error = "stopped", "agentload record stopped mid-exchange"
            conn.close_upstream(abort=True)
            raise
        finally:
            if ex.t_end is None:
                ex.t_end = self.clock.now()
            self.sink(ex)
            if watch is not None:
                if not watch.done():
                    watch.cancel()  # a cancelled read loses nothing: the bytes stay buffered
                    with contextlib.suppress(asyncio.CancelledError):
                        await watch
                elif not watch.cancelled() and watch.exception() is None:
                    conn.ahead = watch.result()

    async def _upstream(self, conn: _Conn) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if conn.up is None:
            u = self.upstream
            conn.up = await asyncio.wait_for(
                asyncio.open_connection(
                    u.host, u.port, ssl=self._ssl, server_hostname=u.host if u.tls else None,
                    limit=MAX_HEAD_BYTES * 2,
                ),
                CONNECT_TIMEOUT_S,
            )  # fmt: skip
        return conn.up

    async def _unreachable(
        self, conn: _Conn, head: Head, kind: str, length: int, ex: Exchange, e: OSError
    ) -> bool:
        """The upstream cannot be reached: read the request, answer 502, keep serving."""
        sink: list[bytes] = []
        await self._pump_request(conn, None, kind, length, ex, sink)
        reason = e.strerror or str(e) or type(e).__name__
        msg = (
            f"agentload record: the upstream {self.upstream.url} is unreachable ({reason}); "
            "start it or fix --upstream (the proxy keeps running)"
        )
        conn.writer.write(_error_response(502, "Bad Gateway", msg, "upstream_unreachable"))
        ex.status, ex.outcome, ex.error = 502, "upstream_unreachable", reason
        ex.t_end = self.clock.now()
        return head.keep_alive() and not self.stopping

    async def _pump_request(
        self,
        conn: _Conn,
        up: asyncio.StreamWriter | None,
        kind: str,
        length: int,
        ex: Exchange,
        raw_body: list[bytes],
    ) -> None:
        """The request body, client to upstream, as it arrives (kept for the record)."""
        reader = conn.reader
        if kind == "length":
            left = length
            while left:
                data = await reader.read(min(left, READ_BYTES))
                if not data:
                    raise _Gone()
                left -= len(data)
                self._up_write(up, data, ex, raw_body)
            return
        if kind != "chunked":
            return
        dec = ChunkedDecoder()
        decoded = bytearray()
        while not dec.done:
            data = await reader.read(READ_BYTES)
            if not data:
                raise _Gone()
            used = dec.feed(data, decoded)
            if used < len(data):
                conn.ahead = data[used:]
            self._up_write(up, data[:used], ex, raw_body)
        ex.request_body[:] = decoded[:KEEP_BODY_BYTES]

    def _up_write(
        self, up: asyncio.StreamWriter | None, data: bytes, ex: Exchange, raw_body: list[bytes]
    ) -> None:
        if up is not None:
            up.write(data)
        raw_body.append(data)
        ex.bytes_in += len(data)
        if len(ex.request_body) + len(data) <= KEEP_BODY_BYTES:
            ex.request_body += data
        else:
            ex.too_large = True

    async def _response_head(
        self,
        conn: _Conn,
        up: tuple[asyncio.StreamReader, asyncio.StreamWriter],
        pump: asyncio.Future[None],
        ex: Exchange,
    ) -> Head:
        """The final response head (interim 1xx heads are relayed on the way)."""
        while True:
            read = asyncio.ensure_future(up[0].readuntil(b"\r\n\r\n"))
            while not read.done():
                waiting: set[asyncio.Future[Any]] = {read, pump}
                done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
                if pump in done and pump.exception() is not None:
                    read.cancel()
                    exc = pump.exception()
                    raise exc if isinstance(exc, _Gone) else _UpstreamFailed(str(exc))
                if read not in done:
                    await read
            try:
                raw = read.result()
            except asyncio.IncompleteReadError:
                raise _UpstreamFailed(
                    "the upstream closed the connection before answering"
                ) from None
            except asyncio.LimitOverrunError:
                raise _UpstreamFailed("the upstream's response head is too large") from None
            head = parse_head(raw)
            if not head.start[1].isdigit():
                raise _UpstreamFailed(f"bad status line {head.start!r}")
            ex.t_head = self.clock.now()
            await self._to_client(conn, raw, ex)
            status = int(head.start[1])
            if status >= 200 or status == 101:
                ex.status = status
                return head

    async def _to_client(self, conn: _Conn, data: bytes, ex: Exchange) -> None:
        w = conn.writer
        if w.transport.is_closing():
            raise _Gone()
        w.write(data)
        ex.bytes_out += len(data)
        try:
            await w.drain()  # returns at once unless the client reads slower than we write
        except ConnectionError:
            raise _Gone() from None

    async def _relay(
        self,
        conn: _Conn,
        up: tuple[asyncio.StreamReader, asyncio.StreamWriter],
        kind: str,
        length: int,
        ex: Exchange,
        pump: asyncio.Future[None],
        watch: asyncio.Future[bytes] | None,
    ) -> bool:
        """The response body, upstream to client (``relay.relay_body``); whether the upstream
        framed it cleanly (False: it sent bytes past the end, and both connections close).

        ``watch`` is a pending one-byte read of the client: done with b"" when it hung up.
        """

        def gone() -> bool:
            if pump.done() and not pump.cancelled() and pump.exception() is not None:
                return True
            return (
                watch is not None
                and watch.done()
                and (watch.cancelled() or watch.exception() is not None or not watch.result())
            )

        outcome, excess = await relay_body(
            conn.writer, up[0], up[1], kind, length, ex, keep_bytes=KEEP_BODY_BYTES,
            at=self.clock.at, gone=gone, watch=[f for f in (pump, watch) if f is not None],
        )  # fmt: skip
        if outcome.startswith("gone"):
            raise _Gone()
        if outcome.startswith("client-done: "):  # the answer is whole; the connections close
            ex.error = outcome.removeprefix("client-done: ")
            return False
        if outcome:
            raise _UpstreamFailed(outcome.removeprefix("upstream: "))
        if excess:
            ex.error = f"the upstream sent {excess} bytes past the response's end (forwarded)"
        return not excess
