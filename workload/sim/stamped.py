"""Streamed calibration reads stamped by the kernel: when each line's bytes reached the host.

`agentload sim calibrate` times chunk arrivals to fit step costs. With `http.client` a chunk
is stamped when Python gets round to reading it: on a busy host (the calibrating client, the
server's threads and anything else sharing the cores) that is late by whatever the client
waited for a CPU, which the fit would then charge to the server. Here each read is a
`recvmsg` with SO_TIMESTAMPNS on (the same kernel receive stamp the load generator's
transport uses, `workload.measure.transport`), and a line carries the stamp of the read that
completed it. Plain http only (TLS reads go through the SSL layer, which has no per-read
stamp): callers keep `http.client` for https. Where the kernel refuses the option, every
read is stamped in user space on arrival in Python, as before.

A deliberately small HTTP/1.1 client: one POST, `Connection: close`, a body that is chunked
(what vLLM streams), sized by Content-Length, or delimited by the close, framed by
workload.measure.http1 (the recording proxy's framing).
"""

from __future__ import annotations

import http.client
import json
import socket
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from workload.errors import SetupError
from workload.measure import transport
from workload.measure.http1 import (
    MAX_HEAD_BYTES,
    ChunkedDecoder,
    FramingError,
    parse_head,
    response_body_kind,
)
from workload.measure.transport import RX_ANC_SPACE, ask_kernel_stamps, kernel_ns

READ_BYTES = 64 * 1024
# A stream whose content chunks reached the client over less than this share of the server's
# own generation time was read in one burst (Streamed.read_in_burst).
BURST_SEEN = 0.5


class StampedResponse:
    """The status, headers and body lines of one response, each line with its receive stamp
    (realtime ns: compare with `time.time_ns()` taken before the request was sent)."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._kernel = transport.KERNEL_RX  # False where the kernel refused the option
        self._raw = b""  # received, not yet decoded
        self._stamp = 0
        self._eof = False
        try:
            head = parse_head(self._read_head())
        except FramingError as e:
            raise OSError(f"not an HTTP response: {e}") from None
        version, status, _ = head.start
        if not version.startswith("HTTP/") or not status.isdigit():
            raise OSError(f"not an HTTP response: {version} {status}"[:100])
        self.status = int(status)
        self.headers = {k.lower(): v for k, v in head.headers}
        try:
            kind, n = response_body_kind(head, "POST")
        except FramingError as e:
            raise OSError(f"{e} in the response") from None
        self._chunks = ChunkedDecoder() if kind == "chunked" else None
        self._left: int | None = n if kind in ("length", "none") else None  # None: to the close
        self._done = self._left == 0

    # -- socket reads ---------------------------------------------------------------------
    def _recv(self) -> bool:
        """One read into the raw buffer, stamped; False at end of stream."""
        if self._eof:
            return False
        if self._kernel:
            data, anc, _flags, _addr = self._sock.recvmsg(READ_BYTES, RX_ANC_SPACE)
            stamp = kernel_ns(anc) or time.time_ns()
        else:
            data, stamp = self._sock.recv(READ_BYTES), time.time_ns()
        if not data:
            self._eof = True
            return False
        self._raw += data
        self._stamp = stamp
        return True

    def _read_head(self) -> bytes:
        while b"\r\n\r\n" not in self._raw:
            if len(self._raw) > MAX_HEAD_BYTES or not self._recv():
                raise OSError("the server closed or sent no HTTP head")
        head, _, self._raw = self._raw.partition(b"\r\n\r\n")
        return head + b"\r\n\r\n"

    # -- body decoding (http1: the recording proxy's framing) ----------------------------
    def _decoded(self) -> bytes:
        """The body bytes now decodable from the raw buffer (b"" when more must be read)."""
        raw, self._raw = self._raw, b""
        if self._chunks is not None:
            out = bytearray()
            try:
                self._chunks.feed(raw, out)
            except FramingError as e:
                raise OSError(f"{e} in the response") from None
            self._done = self._chunks.done
            return bytes(out)
        if self._left is None:
            return raw
        data = raw[: self._left]
        self._left -= len(data)
        self._done = self._left <= 0
        return data

    def chunks(self) -> Iterator[tuple[bytes, int]]:
        """The body as it arrives: (bytes, receive stamp of the read that brought them)."""
        while True:
            data = self._decoded()
            if data:
                yield data, self._stamp
            if self._done or (not data and not self._recv()):
                return

    def lines(self) -> Iterator[tuple[bytes, int]]:
        """Body lines (with their b"\\n"), each with the stamp of the read that completed it."""
        buf = b""
        for data, stamp in self.chunks():
            buf += data
            while True:
                i = buf.find(b"\n")
                if i < 0:
                    break
                yield buf[: i + 1], stamp
                buf = buf[i + 1 :]
        if buf:
            yield buf, self._stamp

    def read(self) -> bytes:
        """The rest of the body."""
        return b"".join(data for data, _ in self.chunks())

    def close(self) -> None:
        self._sock.close()


def post(
    host: str,
    port: int,
    path: str,
    headers: Mapping[str, str],
    body: bytes,
    timeout_s: float,
) -> tuple[StampedResponse, int]:
    """Send one POST over plain http; (the response, realtime ns just before it was sent).
    Raises OSError (a refused or broken connection, a timeout) as http.client would."""
    sock = socket.create_connection((host, port), timeout=timeout_s)
    try:
        ask_kernel_stamps(sock)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        head = [f"POST {path} HTTP/1.1", f"Host: {host}:{port}", "Connection: close",
                f"Content-Length: {len(body)}"]  # fmt: skip
        head += [f"{k}: {v}" for k, v in headers.items()]
        sent_ns = time.time_ns()
        sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body)
        return StampedResponse(sock), sent_ns
    except BaseException:
        sock.close()
        raise


@dataclass
class Streamed:
    """One streamed answer as this client saw it, and the server's own generation time
    (`metrics.generation_time_ms`, first to last token, where the server reports it)."""

    arrivals: list[float]  # content chunks, s after the request was sent
    prompt_tokens: int
    server_gen_ms: float | None

    def read_in_burst(self) -> bool:
        """Its chunks reached this client far closer together than the server made them: the
        client was descheduled and read them from its socket at once (a busy host), so their
        gaps time the client, not the server's steps."""
        if self.server_gen_ms is None or len(self.arrivals) < 3 or self.server_gen_ms <= 0:
            return False
        seen_ms = (self.arrivals[-1] - self.arrivals[0]) * 1000.0
        return seen_ms < BURST_SEEN * self.server_gen_ms


class _StreamParse:
    """What a calibration stream's `data:` lines say: content arrivals, prompt tokens, and the
    server's generation time where it reports one."""

    def __init__(self) -> None:
        self.arrivals: list[float] = []
        self.prompt_tokens = 0
        self.gen_ms: float | None = None

    def line(self, raw: bytes, at: float) -> None:
        line = raw.strip()
        if not line.startswith(b"data:") or line == b"data: [DONE]":
            return
        chunk = json.loads(line[5:])
        if chunk.get("usage"):
            self.prompt_tokens = int(chunk["usage"].get("prompt_tokens", 0))
        gen = (chunk.get("metrics") or {}).get("generation_time_ms")
        if isinstance(gen, int | float):
            self.gen_ms = float(gen)
        choices = chunk.get("choices") or []
        if choices and (choices[0].get("delta") or {}).get("content"):
            self.arrivals.append(at)

    def result(self) -> Streamed:
        if not self.arrivals:
            raise SetupError("calibration request streamed no content; is the model serving?")
        return Streamed(self.arrivals, self.prompt_tokens, self.gen_ms)


def timed_stream(
    host: str,
    port: int,
    path: str,
    headers: dict[str, str],
    body: bytes,
    timeout_s: float,
    tls: Callable[[], http.client.HTTPConnection] | None = None,
) -> Streamed:
    """One streamed request, each content chunk timed from just before it was sent: by the
    kernel's receive stamp over plain http, when Python read it over TLS (`tls` opens its
    connection)."""
    if tls is None:
        resp, sent = post(host, port, path, headers, body, timeout_s)
        try:
            if resp.status != 200:
                raise SetupError(
                    f"calibration request answered {resp.status}: {resp.read()[:200]!r}"
                )
            got = _StreamParse()
            for raw, stamp in resp.lines():
                got.line(raw, (stamp - sent) / 1e9)
        finally:
            resp.close()
        return got.result()
    conn = tls()
    try:
        t0 = time.perf_counter_ns()
        conn.request("POST", path, body, headers)
        tls_resp = conn.getresponse()
        if tls_resp.status != 200:
            raise SetupError(
                f"calibration request answered {tls_resp.status}: {tls_resp.read()[:200]!r}"
            )
        got = _StreamParse()
        for raw in tls_resp:
            got.line(raw, (time.perf_counter_ns() - t0) / 1e9)
    finally:
        conn.close()
    return got.result()
