"""The wire under the measurement: what one request attempt is, and how its bytes travel.

``PreparedRequest`` is built by the planner (``workload.plan``) and sent by
``workload.measure.client.Client`` through a :class:`Transport`.

geventhttpclient's connection pool and raw response ``readline()`` measured within ~2 ms at
200 streams here (``iter_content`` and the openai SDK did not); the client now reads with
``read_some()``: whatever one socket read delivered, so a backlog of events costs one read and
one stamp, not a readline per line (docs/performance.md). ``GeventTransport`` works
inside Locust (monkey-patched) and in plain threads (each thread's own gevent hub). Socket
timeouts (``TimeoutError`` from gevent sockets, or from the one stall watchdog per streamed
response that times its body reads) become ``TransportError("stall")``; failures
are classified into ``records.ERROR_KINDS`` kinds here, so the client only records them.
Tests inject a fake with the small :class:`Transport` protocol.
"""

from __future__ import annotations

import errno
import platform
import socket as _socket
import struct
import sys
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from time import monotonic as _monotonic
from typing import Any, Protocol


@dataclass(slots=True)
class PreparedRequest:
    """Everything needed to send one attempt; built by payloads, id filled by the caller."""

    path: str  # "/v1/chat/completions" | "/v1/completions"
    body: bytes  # exact bytes to send (deterministic per seed)
    stream: bool
    endpoint: str  # "chat" | "completions"
    request_id: str  # sent as X-Request-Id (unique per attempt, deterministic)
    timeout_s: float = 600.0
    stall_timeout_s: float = 120.0
    # labels copied into the record
    user_class: str = ""
    session_id: str = ""
    step: int = 0
    attempt: int = 0
    planned_tool: str | None = None  # the tool the plan has this step call (copied into the record)
    traceparent: str | None = None  # --otlp-traces: the W3C trace context header of its span


class TransportError(Exception):
    """A transport failure already classified into a records.ERROR_KINDS kind."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.detail = detail


class TransportResponse(Protocol):
    status: int
    headers: Mapping[str, str]  # lower-case names

    def readline(self) -> bytes:
        """Bytes up to and including the next b"\\n" (or the rest); b"" at end of body."""
        ...

    def read(self) -> bytes:
        """The rest of the body."""
        ...

    # Optional, preferred by the client when a response has it (test fakes need not):
    #     def read_some(self) -> bytes:
    #         """All body bytes that have arrived (waiting for some); b"" at end of body."""

    def close(self) -> None: ...


class Transport(Protocol):
    def post(
        self,
        path: str,
        headers: Mapping[str, str],
        body: bytes,
        *,
        read_timeout_s: float,
        on_send: Callable[[], None],
    ) -> TransportResponse:
        """Send a POST; call ``on_send`` right before the first byte goes out (again on a
        retry). Raises TransportError; may let gevent.Timeout / GreenletExit through."""
        ...

    def close(self) -> None: ...


# ---------------------------------------------------------------- kernel receive stamps

# The kernel's receive time of a read's bytes (Linux SO_TIMESTAMPNS on TCP: recvmsg hands back
# the time the newest segment it returned reached this host's socket, CLOCK_REALTIME). A read
# stamped in user space is late by whatever kept this process from reading at once (other
# streams' parsing, a garbage collection, a busy machine); the kernel's stamp is not. Python's
# socket module does not name the option: 35 is its number in Linux's asm-generic socket.h,
# which x86-64 and arm64 use (some other architectures number it differently, so they read
# without it). The struct timespec it carries is two 64-bit integers there.
SO_TIMESTAMPNS = 35
_TIMESPEC = struct.Struct("@qq")
RX_ANC_SPACE = _socket.CMSG_SPACE(_TIMESPEC.size) if hasattr(_socket, "CMSG_SPACE") else 0


def _kernel_rx_platform() -> bool:
    return (
        sys.platform.startswith("linux")
        and platform.machine() in ("x86_64", "aarch64", "arm64")
        and RX_ANC_SPACE > 0
    )


KERNEL_RX = _kernel_rx_platform()  # set False when the option is refused (one warning-free try)


def kernel_ns(anc: list[tuple[int, int, bytes]]) -> int:
    """The kernel receive stamp (realtime ns) in a recvmsg's ancillary data; 0 when absent."""
    for level, kind, blob in anc:
        if level == _socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(blob) >= 16:
            sec, nsec = _TIMESPEC.unpack_from(blob)
            ns: int = sec * 1_000_000_000 + nsec
            return ns
    return 0


def ask_kernel_stamps(sock: Any) -> None:
    """Turn on receive stamps for a new plain TCP socket (no-op where unsupported)."""
    global KERNEL_RX
    if not KERNEL_RX:
        return
    try:
        sock.setsockopt(_socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    except OSError:
        KERNEL_RX = False  # refused (a sandboxed kernel): every read is stamped in user space


def read_stamps(base_url: str) -> str:
    """How body reads to ``base_url`` are stamped: "kernel" (SO_TIMESTAMPNS) or "user"."""
    if not base_url.lower().startswith("http://"):
        return "user"  # TLS reads go through the SSL layer: no per-read kernel stamp
    with _socket.socket() as s:  # the kernel may refuse the option (a sandbox): ask it
        ask_kernel_stamps(s)
    return "kernel" if KERNEL_RX else "user"


# ---------------------------------------------------------------- geventhttpclient transport


def _make_pools() -> tuple[type[Any], type[Any]]:  # classes made here, after the import
    # start-up: geventhttpclient costs ~0.09 s and `agentload --help` imports this module
    from geventhttpclient.connectionpool import ConnectionPool, SSLConnectionPool

    class _FreshMark:
        """Marks each socket it creates as fresh until its first use, so a reused keep-alive
        socket is recognised (also the one created last: one user's next request reuses
        exactly that one, and a server that closes after each reply closes it)."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.fresh: weakref.WeakSet[Any] = weakref.WeakSet()

        def _create_socket(self) -> Any:
            sock = super()._create_socket()  # type: ignore[misc]  # a mixin: the pool has it
            self.fresh.add(sock)
            return sock

        def get_fresh_socket(self) -> Any:
            """A new connection, never a pooled one: the re-send after a stale socket. The
            same slot accounting as ConnectionPool.get_socket (geventhttpclient >= 2.3)."""
            self._semaphore.acquire()  # type: ignore[attr-defined]  # the pool's own
            try:
                if self._closed:  # type: ignore[attr-defined]
                    raise RuntimeError("connection pool closed")
                sock = self._create_socket()
            except BaseException:
                self._semaphore.release()  # type: ignore[attr-defined]
                raise
            self.fresh.discard(sock)  # used right away
            return sock

        def first_use(self, sock: Any) -> bool:
            """Whether this is the socket's first request (then a close is no stale socket)."""
            if sock in self.fresh:
                self.fresh.discard(sock)
                return True
            return False

    class Pool(_FreshMark, ConnectionPool):
        def _create_socket(self) -> Any:
            sock = super()._create_socket()
            ask_kernel_stamps(sock)
            return sock

    class SSLPool(_FreshMark, SSLConnectionPool):
        pass

    return Pool, SSLPool


READ_BLOCK = 64 * 1024  # one recv takes whatever has arrived, up to this (library default 4 KiB)


class _GeventResponse:
    __slots__ = ("_r", "status", "headers")

    def __init__(self, r: Any) -> None:
        self._r = r
        self.status = r.status_code
        self.headers: Mapping[str, str] = {k.lower(): v for k, v in r.items()}
        r.block_size = READ_BLOCK

    def readline(self) -> bytes:
        from geventhttpclient.response import HTTPParseError  # start-up: see _make_pools

        try:
            line: bytes = self._r.readline(b"\n")
            return line
        except TimeoutError as e:
            raise TransportError("stall", f"no bytes within the stall timeout ({e})") from None
        except (HTTPParseError, OSError) as e:
            raise TransportError("stream_reset", f"connection lost mid-body: {e!r}") from None

    def read(self) -> bytes:
        from geventhttpclient.response import HTTPParseError  # start-up: see _make_pools

        try:
            body: bytes = self._r.read()
            return body
        except TimeoutError as e:
            raise TransportError("stall", f"no bytes within the read timeout ({e})") from None
        except (HTTPParseError, OSError) as e:
            raise TransportError("stream_reset", f"connection lost mid-body: {e!r}") from None

    def close(self) -> None:
        # returns the socket to the pool if the body was read to the end, else closes it
        self._r.release()


class _BufferedGeventResponse(_GeventResponse):
    """Adds ``read_some`` over the response's own body buffer (geventhttpclient 2.x).

    The stall timeout of the body reads is one watchdog timer per response, not the socket's
    timeout: a gevent socket with a timeout starts and cancels a timer for every read that has
    to wait (2-4 % of the process's CPU at 200 streams). ``read_some`` stamps the moment each
    socket read starts waiting and reads with no socket timeout; the watchdog sleeps until
    that stamp plus the stall timeout and, if the same read is still waiting then, raises
    ``TimeoutError`` into it: the same "stall" as a socket timeout, at the same time. When
    reads made progress meanwhile it sleeps again until the newest stamp's deadline, so a
    stream costs one timer per stall timeout of its length, not one per read. ``readline`` and
    ``read`` keep the socket timeout.

    ``rx_ns`` is the kernel's receive stamp (realtime ns) of the newest bytes the last
    ``read_some`` returned, 0 when it has none (TLS, no kernel stamps here, or bytes that came
    in with the headers)."""

    __slots__ = (
        "_stall_s", "_since", "_waiting", "_reader", "_timer", "_recv", "_raw", "_drained",
        "rx_ns",
    )  # fmt: skip

    def __init__(self, r: Any) -> None:
        super().__init__(r)
        # The HTTP parser calls ``_on_body`` once per HTTP chunk (one per SSE event from vLLM);
        # the class's Python method appends to the body buffer, the buffer's own C method does
        # the same without a Python frame (~0.6 us a chunk).
        r._on_body = r._body_buffer.extend
        sock = r._sock
        # the stall timeout the transport set on the socket for this request (None: none)
        self._stall_s: float | None = sock.gettimeout() if sock is not None else None
        self._since = 0.0  # monotonic stamp: when the current (or last) wait for bytes began
        self._waiting = False  # a socket read is waiting for bytes in ``read_some``
        self._reader: Any = None  # the greenlet reading (set when the watchdog is armed)
        self._timer: Any = None
        self._recv: Callable[[Any], bytes] | None = None  # one socket read, set on first use
        self._raw: Any = None
        self._drained = False  # the last socket read took less than a block
        self.rx_ns = 0

    def read_some(self) -> bytes:
        """All body bytes that have arrived, waiting for one socket read if none are buffered;
        b"" at end of body. One call per socket read, so the client stamps a read once and
        parses every event it completed: a backlog is worked off in one go, not line by line."""
        from geventhttpclient.response import HTTPParseError  # start-up: see _make_pools

        r = self._r
        buf = r._body_buffer
        self.rx_ns = 0
        try:
            while not buf:
                if r.message_complete:
                    self._disarm()
                    return b""
                sock = r._sock
                if sock is None:
                    raise HTTPParseError("connection closed.")
                recv = self._recv or self._arm(sock)
                try:
                    data = recv(sock)
                    r.feed(data)
                except BaseException:
                    self._disarm()
                    r.release()
                    raise
                if not data and not r.message_complete:
                    self._disarm()
                    r.release()
                    raise HTTPParseError("connection closed mid-body")
        except TimeoutError as e:
            raise TransportError("stall", f"no bytes within the stall timeout ({e})") from None
        except (HTTPParseError, OSError) as e:
            raise TransportError("stream_reset", f"connection lost mid-body: {e!r}") from None
        out = bytes(buf)
        del buf[:]
        return out

    def _recv_plain(self, sock: Any) -> bytes:
        """One read of a plain gevent socket, as its ``recv`` does it less the timeout: try the
        (non-blocking) OS socket, else wait on its read watcher and try again. After a read
        that took less than a block the socket was empty a moment ago: wait first, skipping a
        read that would fail (a syscall and an exception, ~3 us); bytes that came meanwhile
        make the watcher ready at once."""
        raw = self._raw
        if self._drained:
            self._since = _monotonic()
            self._waiting = True
            try:
                sock._wait(sock._read_event)  # no timer: the socket's timeout is off
            finally:
                self._waiting = False
        data: bytes
        while True:
            try:
                if KERNEL_RX:
                    data, anc, _flags, _addr = raw.recvmsg(READ_BLOCK, RX_ANC_SPACE)
                    self.rx_ns = kernel_ns(anc) if anc else 0
                else:
                    data = raw.recv(READ_BLOCK)
                break
            except BlockingIOError:
                pass
            self._since = _monotonic()
            self._waiting = True
            try:
                sock._wait(sock._read_event)
            finally:
                self._waiting = False
        self._drained = len(data) < READ_BLOCK
        return data

    def _recv_any(self, sock: Any) -> bytes:
        """One read of another gevent socket (TLS): its own ``recv``, without a timeout."""
        self._since = _monotonic()
        self._waiting = True
        try:
            data: bytes = sock.recv(READ_BLOCK)
            return data
        finally:
            self._waiting = False

    def readline(self) -> bytes:
        self._socket_timeout_back()
        return super().readline()

    def read(self) -> bytes:
        self._socket_timeout_back()
        return super().read()

    def close(self) -> None:
        self._disarm()
        super().close()

    # --- the stall watchdog

    def _arm(self, sock: Any) -> Callable[[Any], bytes]:
        """First body read: take the socket's timeout off, start the watchdog, pick the read."""
        from gevent import get_hub, getcurrent  # start-up: see _make_pools
        from gevent.socket import socket as plain_socket  # start-up: see _make_pools

        hub = get_hub()
        if type(sock) is plain_socket and getattr(sock, "_read_event", None) is not None:
            self._raw = sock._sock
            self._recv = self._recv_plain
        else:
            self._recv = self._recv_any
        if self._stall_s is not None:
            sock.settimeout(None)  # the watchdog times the body reads from here on
            self._reader = getcurrent()
            self._start(hub.loop, self._stall_s)
        return self._recv

    def _start(self, loop: Any, delay: float) -> None:
        timer = loop.timer(max(delay, 0.0), ref=False)
        self._timer = timer
        timer.start(self._check, loop)

    def _check(self, loop: Any) -> None:
        """Runs in the hub when the watchdog's timer fires."""
        self._timer.close()
        self._timer = None
        reader, stall_s = self._reader, self._stall_s
        if reader is None or reader.dead or stall_s is None:
            return
        late = _monotonic() - (self._since + stall_s)
        if self._waiting and late >= 0:
            self._reader = None
            reader.throw(TimeoutError("timed out"))  # what a socket timeout raises
            return
        # reads made progress (or the reader is between reads): sleep until the newest deadline
        self._start(loop, -late if self._waiting else stall_s)

    def _disarm(self) -> None:
        self._reader = None
        if self._timer is not None:
            self._timer.close()
            self._timer = None

    def _socket_timeout_back(self) -> None:
        self._disarm()
        self._recv = None  # a later read_some arms the watchdog again
        sock = self._r._sock
        if sock is not None and self._stall_s is not None and sock.gettimeout() is None:
            sock.settimeout(self._stall_s)


def _response(r: Any) -> _GeventResponse:
    # read_some works on the response's body buffer; without one the client reads lines
    if isinstance(getattr(r, "_body_buffer", None), bytearray) and hasattr(r, "_sock"):
        return _BufferedGeventResponse(r)
    return _GeventResponse(r)


class GeventTransport:
    """Keep-alive connection pool over geventhttpclient; reads the raw response body."""

    # A reused keep-alive socket the server closed meanwhile (nothing was read from it): the
    # request never reached the server and is re-sent once, on a fresh connection.
    MAX_SEND_ATTEMPTS = 2

    def __init__(
        self, base_url: str, *, connect_timeout_s: float = 10.0, concurrency: int = 1000
    ) -> None:
        from geventhttpclient.url import URL  # start-up: see _make_pools

        url = URL(base_url)
        if url.scheme not in ("http", "https"):
            raise ValueError(f"base URL must be http:// or https://, got {base_url!r}")
        self._prefix = url.path.rstrip("/")
        port = url.port or (443 if url.scheme == "https" else 80)
        host = url.host
        host_hdr = f"[{host}]" if ":" in host else host
        if port not in (80, 443):
            host_hdr += f":{port}"
        self._host_header = host_hdr
        Pool, SSLPool = _make_pools()
        common = dict(size=concurrency, connection_timeout=connect_timeout_s, network_timeout=60.0)
        if url.scheme == "https":
            self._pool = SSLPool(host, port, host, port, ssl_options={}, **common)
        else:
            self._pool = Pool(host, port, host, port, **common)

    def post(
        self,
        path: str,
        headers: Mapping[str, str],
        body: bytes,
        *,
        read_timeout_s: float,
        on_send: Callable[[], None],
    ) -> TransportResponse:
        # start-up: see _make_pools
        from geventhttpclient.response import (
            HTTPConnectionClosed,
            HTTPParseError,
            HTTPSocketPoolResponse,
        )

        lines = [f"POST {self._prefix}{path} HTTP/1.1", f"Host: {self._host_header}"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        lines.append(f"Content-Length: {len(body)}")
        wire = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body
        pool = self._pool
        for attempt in range(self.MAX_SEND_ATTEMPTS):
            last = attempt == self.MAX_SEND_ATTEMPTS - 1
            try:
                sock = pool.get_socket() if attempt == 0 else pool.get_fresh_socket()
            except (OSError, RuntimeError) as e:
                raise TransportError("connect", repr(e)) from None
            reused = attempt == 0 and not pool.first_use(sock)
            try:
                sock.settimeout(read_timeout_s)
                on_send()
                sock.sendall(wire)
            except OSError as e:
                pool.release_socket(sock)
                if reused and not last and e.errno in (errno.EPIPE, errno.ECONNRESET):
                    continue
                raise TransportError(
                    "stream_reset", f"connection lost while sending: {e!r}"
                ) from None
            except BaseException:
                pool.release_socket(sock)
                raise
            try:  # reads the status line and headers; releases the socket itself on failure
                r = HTTPSocketPoolResponse(sock, pool, method="POST")
            except HTTPConnectionClosed as e:
                if reused and not last:
                    continue
                raise TransportError(
                    "stream_reset", f"closed before response headers: {e}"
                ) from None
            except TimeoutError as e:
                raise TransportError("stall", f"no response headers in time ({e})") from None
            except HTTPParseError as e:
                raise TransportError("bad_response", f"not an HTTP response: {e}") from None
            except OSError as e:
                if reused and not last and e.errno in (errno.EPIPE, errno.ECONNRESET):
                    continue  # the server reset the stale socket instead of closing it
                raise TransportError(
                    "stream_reset", f"connection lost before headers: {e!r}"
                ) from None
            return _response(r)
        raise AssertionError("unreachable")  # pragma: no cover

    def close(self) -> None:
        self._pool.close()
