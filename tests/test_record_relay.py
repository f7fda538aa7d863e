"""How `agentload record` relays a response body (workload/record/relay.py): a slow client,
an upstream that breaks off or sends past the end, and what the proxy says it added."""

from __future__ import annotations

import asyncio
import hashlib
import json
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from workload.record import RecordOptions, RecordThread, parse_upstream
from workload.record.proxy import Clock, Exchange
from workload.record.relay import BodyRelay

MB = 1 << 20


class RawUpstream:
    """A one-answer-per-connection upstream whose bytes are exactly ``answer(request)``'s
    pieces (sent one by one, ``gap_s`` apart), then the connection closes if ``close``."""

    def __init__(
        self, answer: Callable[[], list[bytes]], *, gap_s: float = 0.0, close: bool = True
    ):
        self.answer, self.gap_s, self.close = answer, gap_s, close
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.sent: list[bytes] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(c,), daemon=True).start()

    def _one(self, c: socket.socket) -> None:
        with c:
            buf = b""
            while b"\r\n\r\n" not in buf:
                buf += c.recv(65536)
            head, _, body = buf.partition(b"\r\n\r\n")
            n = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
            while len(body) < n:
                body += c.recv(65536)
            for piece in self.answer():
                # recorded before it goes: once the last chunk is sent, the proxy and the
                # client can finish (and the test compare) before this thread runs again
                self.sent.append(piece)
                try:
                    c.sendall(piece)
                except OSError:
                    self.sent.pop()
                    return
                time.sleep(self.gap_s)
            if not self.close:
                time.sleep(2)

    def stop(self) -> None:
        self.sock.close()


def _recorder(upstream: str, out: Path, loop: str) -> RecordThread:
    """A recording proxy on ``loop``'s event loop (the ``record_loop`` fixture's)."""
    up = parse_upstream(upstream)
    assert up is not None
    rec = RecordThread(RecordOptions(upstream=up, out=out, port=0))
    assert rec.event_loop == loop
    return rec.start()


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _post(url: str) -> socket.socket:
    port = int(url.rsplit(":", 1)[1])
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
    return s


def _read_all(s: socket.socket, pause_s: float = 0.0, block: int = 65536) -> bytes:
    got = bytearray()
    while True:
        data = s.recv(block)
        if not data:
            return bytes(got)
        got += data
        if pause_s:
            time.sleep(pause_s)


def _sse(n: int) -> list[bytes]:
    ev = b'data: {"choices":[{"index":0,"delta":{"content":"x"}}]}\n\n'
    head = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n"
            b"connection: close\r\n\r\n")  # fmt: skip
    return [head, *[b"%x\r\n%s\r\n" % (len(ev), ev)] * n, b"0\r\n\r\n"]


def test_each_read_s_time_in_the_proxy_is_recorded(record_loop: str, tmp_path: Path) -> None:
    up = RawUpstream(lambda: _sse(20), gap_s=0.01)
    rec = _recorder(up.url, tmp_path / "rec", record_loop)
    try:
        got = _read_all(_post(rec.url))
    finally:
        summary = rec.stop()
        up.stop()
    assert got == b"".join(up.sent)
    (ex,) = _rows(tmp_path / "rec" / "exchanges.jsonl")
    assert ex["outcome"] == "ok" and ex["ttft_s"] is not None
    relay = ex["relay_us"]
    assert 1 <= relay["reads"] <= 21  # the body's pieces, some perhaps read together
    assert 0 <= relay["p50"] <= relay["p99"] <= relay["max"]
    assert summary["recorder"]["relay_us"]["reads"] == relay["reads"]


def test_a_slow_client_gets_every_byte_and_the_upstream_waits_for_it(
    record_loop: str, tmp_path: Path
) -> None:
    blob = bytes(range(256)) * (16 * MB // 256)  # 16 MiB: far past the transport's buffers
    pieces = [blob[k : k + MB] for k in range(0, len(blob), MB)]
    head = b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: %d\r\n\r\n"
    up = RawUpstream(lambda: [head % len(blob), *pieces])
    rec = _recorder(up.url, tmp_path / "rec", record_loop)
    try:
        s = _post(rec.url)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        time.sleep(0.5)  # the upstream has sent what the sockets hold; the proxy pauses it
        got = _read_all(s, pause_s=0.001, block=256 * 1024)
    finally:
        rec.stop()
        up.stop()
    body = got.partition(b"\r\n\r\n")[2]
    assert hashlib.sha256(body).digest() == hashlib.sha256(blob).digest()
    (ex,) = _rows(tmp_path / "rec" / "exchanges.jsonl")
    assert ex["outcome"] == "ok" and ex["bytes_out"] == len(got)


def test_an_upstream_that_breaks_off_mid_body_is_recorded_so(
    record_loop: str, tmp_path: Path
) -> None:
    up = RawUpstream(lambda: _sse(3)[:-1])  # no last chunk: the connection just closes
    rec = _recorder(up.url, tmp_path / "rec", record_loop)
    try:
        got = _read_all(_post(rec.url))
    finally:
        rec.stop()
        up.stop()
    assert got == b"".join(up.sent)  # what came, then the close
    (ex,) = _rows(tmp_path / "rec" / "exchanges.jsonl")
    assert ex["outcome"] == "upstream_failed" and "mid-response" in ex["error"]


@pytest.mark.parametrize("framing", ["length", "chunked"])
def test_bytes_past_the_body_s_end_close_both_connections_and_say_so(
    record_loop: str, tmp_path: Path, framing: str
) -> None:
    if framing == "length":
        answer = [b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhelloEXTRA"]
    else:
        answer = [
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\nEXTRA"
        ]
    up = RawUpstream(lambda: answer, close=False)
    rec = _recorder(up.url, tmp_path / "rec", record_loop)
    try:
        s = _post(rec.url)
        s.settimeout(10)
        got = _read_all(s)  # the proxy closes the connection: the upstream broke framing
    finally:
        rec.stop()
        up.stop()
    assert got == answer[0]
    (ex,) = _rows(tmp_path / "rec" / "exchanges.jsonl")
    assert (
        ex["outcome"] == "ok"
        and ex["error"] == "the upstream sent 5 bytes past the response's end (forwarded)"
    )


def _chat(url: str, stream: bool) -> socket.socket:
    body = json.dumps({"model": "m", "stream": stream,
                       "messages": [{"role": "user", "content": "hi"}]}).encode()  # fmt: skip
    s = socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1])))
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n%s" % (len(body), body))  # fmt: skip
    return s


@pytest.mark.parametrize("final", [b"data: [DONE]", b"event: response.completed\ndata: {}"])
def test_a_client_that_hangs_up_after_the_stream_s_final_event_got_a_whole_answer(
    record_loop: str, tmp_path: Path, final: bytes
) -> None:
    # The openai SDK's synchronous Stream closes the connection at [DONE], before the chunked
    # body's last chunk: the answer is whole and is a round (it once was `client_gone`, and
    # the session's next request was taken for another session's). The upstream holds the
    # last chunk back until the client has surely gone.
    events = [b'data: {"choices":[{"index":0,"delta":{"content":"hello there"}}]}\n\n',
              final + b"\n\n"]  # fmt: skip
    pieces = [_sse(0)[0], *[b"%x\r\n%s\r\n" % (len(e), e) for e in events]]
    up = RawUpstream(lambda: [*pieces, b"0\r\n\r\n"], gap_s=0.3)
    rec = _recorder(up.url, tmp_path / "rec", record_loop)
    try:
        s = _chat(rec.url, stream=True)
        s.settimeout(10)
        got = b""
        while final not in got:
            got += s.recv(65536)
        s.close()
        time.sleep(1.0)  # the last chunk comes to a proxy whose client is gone
    finally:
        rec.stop()
        up.stop()
    assert got == b"".join(pieces)
    (ex,) = _rows(tmp_path / "rec" / "exchanges.jsonl")
    assert ex["outcome"] == "ok", ex
    assert "after the stream's final event" in ex["error"]
    (row,) = _rows(tmp_path / "rec" / "trace.jsonl")
    assert row["output_tokens"] > 0 and row["record"]["streamed"]
    # the answer ended with the read that carried the final event, not at the hang-up
    assert ex["e2e_s"] < 0.3 * len(pieces) + 0.25


def test_a_client_that_hangs_up_before_the_final_event_is_gone(
    record_loop: str, tmp_path: Path
) -> None:
    pieces = _sse(3)
    up = RawUpstream(lambda: pieces, gap_s=0.3)
    rec = _recorder(up.url, tmp_path / "rec", record_loop)
    try:
        s = _chat(rec.url, stream=True)
        s.settimeout(10)
        got = b""
        while b"content" not in got:
            got += s.recv(65536)
        s.close()
        time.sleep(1.5)
    finally:
        rec.stop()
        up.stop()
    (ex,) = _rows(tmp_path / "rec" / "exchanges.jsonl")
    assert ex["outcome"] == "client_gone", ex
    assert _rows(tmp_path / "rec" / "trace.jsonl") == []


class _LateSendClient(asyncio.WriteTransport):
    """A client socket whose send returns late, as when the send wakes the agent and the
    proxy's thread waits for a core: the bytes were the agent's from the send's start."""

    def __init__(self, late_s: float) -> None:
        super().__init__()
        self.late_s = late_s
        self.began: list[int] = []  # perf_counter_ns at each send's start
        self.data = bytearray()

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.began.append(time.perf_counter_ns())
        self.data += data
        time.sleep(self.late_s)

    def is_closing(self) -> bool:
        return False

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return (0, 1 << 16)

    def get_write_buffer_size(self) -> int:
        return 0


class _Upstream(asyncio.Transport):
    def pause_reading(self) -> None: ...
    def resume_reading(self) -> None: ...


@pytest.mark.parametrize("streamed", [False, True])
def test_the_end_is_stamped_before_the_send_that_gave_the_agent_the_last_bytes(
    streamed: bool,
) -> None:
    # The recorded tool wait is the next request's arrival minus this end: an end stamped
    # after the send returned (late by the proxy's wait for a core) made a recorded wait
    # 10 ms shorter than the agent's own gap on the loaded machine.
    clock = Clock()
    if streamed:
        ev = b'data: {"choices":[{"index":0,"delta":{"content":"x"}}]}\n\n'
        reads = [b"%x\r\n%s\r\n" % (len(ev), ev), b"e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n"]
        kind, length = "chunked", 0
    else:
        reads = [b'{"choices": [', b'{"index": 0}]}']
        kind, length = "length", sum(map(len, reads))
    client = _LateSendClient(0.05)
    ex = Exchange(1, "c", "POST", "/v1/chat/completions", clock.now(), streamed=streamed)

    async def relay() -> BodyRelay:
        r = BodyRelay(client, _Upstream(), None, kind, length, streamed=streamed, encoded=False,
                      keep_bytes=MB, at=clock.at, ex=ex)  # fmt: skip
        for data in reads:
            r.data_received(data)
            await asyncio.sleep(0)
        await asyncio.wait_for(r.result, 5)
        return r

    r = asyncio.run(relay())
    assert r.result.result() == ""
    assert bytes(client.data) == b"".join(reads)
    assert ex.t_end is not None and ex.t_first is not None
    assert ex.t_end <= clock.at(client.began[-1])
    assert ex.t_first <= clock.at(client.began[0])
    assert min(r.lag_us) >= 50_000  # the late send is still the read's time in the proxy
