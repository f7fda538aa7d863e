"""Kernel-stamped calibration reads (workload/sim/stamped.py): the HTTP framing they decode,
the stamp each line carries, and the calibration path through them against the simulator."""

from __future__ import annotations

import socket
import struct
import time

import pytest

from workload.measure import transport
from workload.sim import stamped
from workload.sim.calibrate import discover, stream_timed
from workload.sim.inprocess import SimThread

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"


class FakeSocket:
    """Hands out the given pieces one read each; piece i carries kernel stamp 1000 + i ns."""

    def __init__(self, pieces: list[bytes]) -> None:
        self.pieces = list(pieces)
        self.reads = 0

    def recvmsg(self, n: int, anc_space: int):  # noqa: ANN201 - socket.recvmsg's tuple
        if not self.pieces:
            return b"", [], 0, None
        self.reads += 1
        stamp = struct.pack("@qq", 0, 1000 + self.reads - 1)
        return self.pieces.pop(0), [(socket.SOL_SOCKET, transport.SO_TIMESTAMPNS, stamp)], 0, None

    def recv(self, n: int) -> bytes:
        return self.pieces.pop(0) if self.pieces else b""

    def close(self) -> None:
        pass


def chunked(*parts: bytes) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


def response(pieces: list[bytes]) -> stamped.StampedResponse:
    return stamped.StampedResponse(FakeSocket(pieces))  # type: ignore[arg-type]


@pytest.fixture
def kernel_on(monkeypatch):
    monkeypatch.setattr(transport, "KERNEL_RX", True)


def test_a_chunked_body_split_anywhere_gives_its_lines_with_the_read_that_completed_them(
    kernel_on,
):
    body = chunked(b"data: one\n\n", b"data: t", b"wo\n\ndata: [DONE]\n\n")
    raw = HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + body
    for cut in range(len(HEAD) + 30, len(raw)):  # the head in one read, the body cut in two
        pieces = [raw[: len(HEAD) + 30], raw[len(HEAD) + 30 : cut], raw[cut:]]
        pieces = [p for p in pieces if p]
        resp = response(pieces)
        got = list(resp.lines())
        assert [ln for ln, _ in got] == [b"data: one\n", b"\n", b"data: two\n", b"\n",
                                         b"data: [DONE]\n", b"\n"]  # fmt: skip
        two = next(s for ln, s in got if ln == b"data: two\n")
        end_of_two = raw.index(b"wo\n") + 3
        assert two == 1000 + next(
            i for i, p in enumerate(pieces) if sum(map(len, pieces[: i + 1])) >= end_of_two
        )


def test_content_length_and_close_delimited_bodies(kernel_on):
    resp = response([HEAD + b"Content-Length: 9\r\n\r\nab\ncd", b"\nef\nIGNORED"])
    assert resp.status == 200 and resp.read() == b"ab\ncd\nef\n"
    resp = response([HEAD + b"\r\nab\n", b"cd"])
    assert [ln for ln, _ in resp.lines()] == [b"ab\n", b"cd"]


def test_an_error_status_and_its_body_are_read(kernel_on):
    resp = response([b"HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\n\r\nnot found"])
    assert (resp.status, resp.read()) == (404, b"not found")


def test_bad_framing_is_an_oserror(kernel_on):
    with pytest.raises(OSError, match="bad chunk size"):
        response([HEAD + b"Transfer-Encoding: chunked\r\n\r\nzz\r\nab\r\n0\r\n\r\n"]).read()
    with pytest.raises(OSError, match="not an HTTP response"):
        response([b"SSH-2.0-OpenSSH\r\n\r\n"])
    with pytest.raises(OSError, match="no HTTP head"):
        response([b"HTTP/1.1 200 OK\r\n"])


def test_user_space_stamps_where_the_kernel_refuses(monkeypatch):
    monkeypatch.setattr(transport, "KERNEL_RX", False)
    before = time.time_ns()
    resp = response([HEAD + b"Content-Length: 3\r\n\r\nab\n"])
    ((line, stamp),) = list(resp.lines())
    assert line == b"ab\n" and before <= stamp <= time.time_ns()


def test_calibration_reads_the_simulator_through_kernel_stamps():
    with SimThread("default", sets=["spec_k=0"]) as sim:
        t = discover(sim.url)
        before = time.time_ns()
        resp, sent = stamped.post(t.host, t.port, "/v1/models", {}, b"", 10.0)
        # a POST to a GET route: the server answers an error, read in full
        assert resp.status in (404, 405) and resp.read()
        resp.close()
        assert before <= sent <= time.time_ns()
        got = stream_timed(t, "Summarise the repository layout.", 24)
    assert len(got.arrivals) >= 2 and got.prompt_tokens > 0
    assert all(0 < a <= b for a, b in zip(got.arrivals, got.arrivals[1:], strict=False))
    assert got.arrivals[-1] < 10.0  # seconds since the request went out, not an epoch


def test_the_tls_path_times_chunks_when_read():
    # https keeps http.client (no per-read stamp under TLS): the same parse over its connection
    import http.client

    with SimThread("default", sets=["spec_k=0"]) as sim:
        t = discover(sim.url)
        body = (
            b'{"model": "%s", "messages": [{"role": "user", "content": "hi there"}], '
            b'"max_tokens": 12, "min_tokens": 12, "ignore_eos": true, "stream": true, '
            b'"stream_options": {"include_usage": true}}' % t.model.encode()
        )
        got = stamped.timed_stream(
            t.host, t.port, "/v1/chat/completions", {"Content-Type": "application/json"},
            body, 10.0, tls=lambda: http.client.HTTPConnection(t.host, t.port, timeout=10),
        )  # fmt: skip
    assert len(got.arrivals) >= 2 and got.prompt_tokens > 0 and got.arrivals[-1] < 10.0
