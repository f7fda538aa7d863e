"""A small HTTP/1.1 server on asyncio.Protocol: keep-alive, Content-Length bodies in,
Content-Length or chunked bodies out. Enough for OpenAI clients; nothing more.

One request per connection at a time; bytes that arrive meanwhile (pipelining)
wait in the buffer until the current response ends. Handlers get an `Exchange`
and answer through it, synchronously or later from the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from email.utils import formatdate

MAX_HEADER_BYTES = 64 * 1024
MAX_BODY_BYTES = 256 * 1024 * 1024

_REASONS = {
    200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
    411: "Length Required", 413: "Payload Too Large", 429: "Too Many Requests",
    500: "Internal Server Error", 503: "Service Unavailable",
}  # fmt: skip


@dataclass(slots=True)
class Request:
    method: str
    path: str
    headers: dict[str, str]  # lower-case names
    body: bytes


@dataclass(eq=False)
class Exchange:
    """One request and the means to answer it; `on_close` runs if the client leaves first."""

    conn: HttpConnection
    request: Request
    done: bool = False
    streaming: bool = False
    on_close: Callable[[], None] | None = field(default=None)

    @property
    def closed(self) -> bool:
        return self.conn.closed

    def respond(
        self, status: int, body: bytes, content_type: str = "application/json", headers=()
    ) -> None:
        """Send a complete response with Content-Length, then end the exchange."""
        if self.done or self.conn.closed:
            return
        head = self._head(status, content_type, headers) + b"content-length: %d\r\n\r\n" % len(body)
        self.conn.transport.write(head + body)
        self._finish()

    def start_stream(self, status: int, content_type: str, headers=()) -> None:
        """Send headers of a chunked response; follow with `send` and `end_stream`."""
        self.streaming = True
        self.conn.transport.write(
            self._head(status, content_type, headers) + b"transfer-encoding: chunked\r\n\r\n"
        )

    def send(self, data: bytes) -> None:
        """Write one chunk of a streamed body."""
        if not self.conn.closed and data:
            self.conn.transport.write(b"%x\r\n%b\r\n" % (len(data), data))

    def end_stream(self) -> None:
        """Write the last chunk and end the exchange."""
        if self.done or self.conn.closed:
            return
        self.conn.transport.write(b"0\r\n\r\n")
        self._finish()

    def send_raw(self, data: bytes) -> None:
        """Write bytes as they are (fault injection: malformed framing)."""
        if not self.conn.closed:
            self.conn.transport.write(data)

    def reset(self) -> None:
        """Drop the connection without finishing the response."""
        self.done = True
        self.conn.abort()

    def _head(self, status: int, content_type: str, headers) -> bytes:
        lines = [
            f"HTTP/1.1 {status} {_REASONS.get(status, 'OK')}",
            f"date: {self.conn.server.date()}",
            "server: agentload-sim",
            f"content-type: {content_type}",
        ]
        lines += [f"{k}: {v}" for k, v in headers]
        if not self.conn.keep_alive:
            lines.append("connection: close")
        return ("\r\n".join(lines) + "\r\n").encode("latin-1")

    def _finish(self) -> None:
        self.done = True
        self.conn.exchange_done(self)


class HttpConnection(asyncio.Protocol):
    """Parses requests off one socket and hands them to the server's handler."""

    def __init__(self, server: HttpServer):
        self.server = server
        self.buf = bytearray()
        self.transport: asyncio.Transport = None  # type: ignore[assignment]
        self.current: Exchange | None = None
        self.closed = False
        self.keep_alive = True

    def connection_made(self, transport) -> None:  # type: ignore[override]
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.server.connections.add(self)

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if self.current is None:
            self._parse()

    def eof_received(self) -> bool:
        return False  # close our side too

    def connection_lost(self, exc) -> None:  # type: ignore[override]
        self.closed = True
        self.server.connections.discard(self)
        cur = self.current
        if cur is not None and not cur.done and cur.on_close is not None:
            cur.on_close()

    def abort(self) -> None:
        self.closed = True
        self.transport.abort()

    def exchange_done(self, ex: Exchange) -> None:
        if self.current is ex:
            self.current = None
        if not self.keep_alive:
            self.transport.close()
            self.closed = True
        elif self.buf:
            self._parse()

    def _bad(self, status: int, message: str) -> None:
        self.keep_alive = False
        ex = Exchange(self, Request("", "", {}, b""))
        self.current = ex
        ex.respond(status, b'{"detail":"%s"}' % message.encode())

    def _parse(self) -> None:
        while self.current is None and not self.closed:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buf) > MAX_HEADER_BYTES:
                    self._bad(400, "header too large")
                return
            try:
                head = bytes(self.buf[:end]).decode("latin-1")
                request_line, *header_lines = head.split("\r\n")
                method, target, version = request_line.split(" ", 2)
                headers = {}
                for line in header_lines:
                    name, _, value = line.partition(":")
                    headers[name.strip().lower()] = value.strip()
                length = int(headers.get("content-length", "0"))
            except ValueError:
                self._bad(400, "malformed request")
                return
            if "chunked" in headers.get("transfer-encoding", "").lower():
                self._bad(411, "chunked request bodies are not supported; send Content-Length")
                return
            if length < 0 or length > MAX_BODY_BYTES:
                self._bad(413, "body too large")
                return
            if len(self.buf) < end + 4 + length:
                return  # body not complete yet
            body = bytes(self.buf[end + 4 : end + 4 + length])
            del self.buf[: end + 4 + length]
            conn_hdr = headers.get("connection", "").lower()
            self.keep_alive = (
                version == "HTTP/1.1" and conn_hdr != "close" or conn_hdr == "keep-alive"
            )
            path = target.split("?", 1)[0]
            ex = Exchange(self, Request(method, path, headers, body))
            self.current = ex
            try:
                self.server.handler(ex)
            except Exception as e:  # noqa: BLE001 - a handler bug must not kill the server
                ex.respond(500, b'{"detail":"internal error: %s"}' % type(e).__name__.encode())


class HttpServer:
    """Owns the listening socket and the set of open connections."""

    def __init__(self, handler: Callable[[Exchange], None]):
        self.handler = handler
        self.connections: set[HttpConnection] = set()
        self._server: asyncio.base_events.Server | None = None
        self._date = ""
        self._date_at = 0.0

    def date(self) -> str:
        loop = asyncio.get_running_loop()
        now = loop.time()
        if now - self._date_at >= 1.0:
            self._date = formatdate(usegmt=True)
            self._date_at = now
        return self._date

    async def start(self, host: str, port: int, backlog: int = 4096) -> int:
        """Listen; returns the bound port (useful with port 0)."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: HttpConnection(self), host, port, backlog=backlog, reuse_address=True
        )
        return self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        """Stop listening and drop every connection."""
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections):
            conn.abort()
        if self._server is not None:
            await self._server.wait_closed()
