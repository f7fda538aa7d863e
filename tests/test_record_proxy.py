"""The recording proxy in this process: bytes unchanged, robustness, what it records."""

from __future__ import annotations

import hashlib
import http.client
import json
import re
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import openai
import pytest

from tests.record_agent import TOOLS, Tap, run_agent
from workload.measure.http1 import ChunkedDecoder, FramingError, parse_head, replace_host
from workload.record import RecordOptions, RecordThread, parse_upstream
from workload.sim.inprocess import SimThread

MODEL = "agentload/sim-8b"


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _recorder(upstream: str, out: Path, loop: str | None = None, **kw: object) -> RecordThread:
    """A recording proxy; on ``loop``'s event loop when given (the ``record_loop`` fixture's)."""
    up = parse_upstream(upstream)
    assert up is not None
    rec = RecordThread(RecordOptions(upstream=up, out=out, port=0, **kw))  # type: ignore[arg-type]
    assert loop is None or rec.event_loop == loop
    return rec.start()


@pytest.fixture()
def sim():
    s = SimThread("fast", seed=5).start()
    yield s
    s.stop()


# ------------------------------------------------------------------ bytes
def test_the_agent_receives_exactly_the_bytes_the_server_sent(
    sim, record_loop: str, tmp_path: Path
) -> None:
    up = Tap(_port(sim.url)).start()
    rec = _recorder(up.url, tmp_path / "rec", record_loop)
    down = Tap(_port(rec.url)).start()
    try:
        run = run_agent(down.url + "/v1", MODEL)
    finally:
        summary = rec.stop()
        up.stop()
        down.stop()
    assert run.rounds == 4 and summary["rounds"] == 4
    assert summary["recorder"]["event_loop"] == record_loop  # summary.json says which ran
    assert len(up.connections) == len(down.connections) >= 1
    for a, b in zip(up.connections, down.connections, strict=True):
        assert bytes(b["down"]) == bytes(a["down"])  # status lines, headers, chunk framing
        assert re.search(rb"(?i)\r\nauthorization: Bearer sk-test\r\n", bytes(a["up"]))  # forwarded
        # the request: only the Host line differs
        assert re.sub(rb"(?i)\r\nhost: [^\r]*", b"", bytes(a["up"])) == re.sub(
            rb"(?i)\r\nhost: [^\r]*", b"", bytes(b["up"])
        )
    stored = b"".join(p.read_bytes() for p in (tmp_path / "rec").iterdir())
    assert b"sk-test" not in stored and b"Lisbon" not in stored  # no key, no content


def _normal(data: bytes) -> bytes:
    """What differs between two equal answers an hour apart: the clock."""
    data = re.sub(rb'"created":\d+', b'"created":0', data)
    return re.sub(rb"\r\ndate: [^\r]*", b"", data)


def test_answers_through_the_proxy_equal_the_direct_answers(tmp_path: Path) -> None:
    direct_sim, proxied_sim = SimThread("fast", seed=9).start(), SimThread("fast", seed=9).start()
    direct = Tap(_port(direct_sim.url)).start()
    rec = _recorder(proxied_sim.url, tmp_path / "rec")
    via = Tap(_port(rec.url)).start()
    try:
        a = run_agent(direct.url + "/v1", MODEL, default_headers={"X-Request-Id": "same"})
        b = run_agent(via.url + "/v1", MODEL, default_headers={"X-Request-Id": "same"})
    finally:
        rec.stop()
        for t in (direct, via):
            t.stop()
        direct_sim.stop()
        proxied_sim.stop()
    assert (a.answers, a.usage, a.tools_per_round) == (b.answers, b.usage, b.tools_per_round)
    got = [_normal(bytes(c["down"])) for c in via.connections]
    want = [_normal(bytes(c["down"])) for c in direct.connections]
    assert got == want


# ------------------------------------------------------------------ robustness
def test_an_unreachable_upstream_is_a_502_that_says_so_and_the_proxy_keeps_going(
    record_loop: str, tmp_path: Path
) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    rec = _recorder(f"http://127.0.0.1:{dead}", tmp_path / "rec", record_loop)
    c = openai.OpenAI(base_url=rec.url + "/v1", api_key="k", max_retries=0)
    try:
        for _ in range(2):
            with pytest.raises(openai.APIStatusError) as e:
                c.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}])
            assert e.value.status_code == 502
            assert "is unreachable" in e.value.message and f"127.0.0.1:{dead}" in e.value.message
    finally:
        summary = rec.stop()
    assert summary["recorder"]["outcomes"] == {"upstream_unreachable": 2}
    assert summary["rounds"] == 0


class _Upstream(BaseHTTPRequestHandler):
    """A fake upstream: POST /echo answers the body's digest and size; /drip streams slowly."""

    protocol_version = "HTTP/1.1"
    gone = threading.Event()

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        if self.headers.get("transfer-encoding", "").lower() == "chunked":
            body = b""
            while True:
                size = int(self.rfile.readline().strip(), 16)
                if size == 0:
                    self.rfile.readline()
                    break
                body += self.rfile.read(size)
                self.rfile.readline()
        else:
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
        if self.path == "/drip":
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            try:
                for _ in range(200):
                    ev = b'data: {"choices":[{"index":0,"delta":{"content":"x"}}]}\n\n'
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(ev), ev))
                    self.wfile.flush()
                    time.sleep(0.05)
            except (BrokenPipeError, ConnectionResetError):
                _Upstream.gone.set()
            return
        out = json.dumps({"sha256": hashlib.sha256(body).hexdigest(), "n": len(body)}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)


@pytest.fixture()
def fake_upstream():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Upstream)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    _Upstream.gone.clear()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def test_large_and_non_json_and_chunked_bodies_pass_untouched(
    fake_upstream, record_loop: str, tmp_path: Path
) -> None:
    rec = _recorder(fake_upstream, tmp_path / "rec", record_loop)
    host, port = "127.0.0.1", _port(rec.url)
    big = json.dumps(
        {"model": "m", "messages": [{"role": "user", "content": "y" * (6 << 20)}]}
    ).encode()
    binary = bytes(range(256)) * 4096
    try:
        for body in (big, binary):
            conn = http.client.HTTPConnection(host, port, timeout=30)
            conn.request(
                "POST", "/echo", body=body, headers={"content-type": "application/octet-stream"}
            )
            got = json.loads(conn.getresponse().read())
            assert got == {"sha256": hashlib.sha256(body).hexdigest(), "n": len(body)}
            conn.close()
        conn = http.client.HTTPConnection(host, port, timeout=30)
        conn.request("POST", "/echo", body=iter([b"abc", b"defg"]), encode_chunked=True)
        assert json.loads(conn.getresponse().read())["n"] == 7
        conn.close()
    finally:
        summary = rec.stop()
    assert summary["recorder"]["outcomes"] == {"ok": 3}
    ex = _rows(tmp_path / "rec" / "exchanges.jsonl")
    assert [e["bytes_in"] for e in ex][:2] == [len(big), len(binary)]


def test_a_client_that_hangs_up_mid_stream_cancels_the_upstream_request(
    fake_upstream, record_loop: str, tmp_path: Path
) -> None:
    rec = _recorder(fake_upstream, tmp_path / "rec", record_loop)
    s = socket.create_connection(("127.0.0.1", _port(rec.url)))
    s.sendall(b"POST /drip HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
    got = b""
    while b"data:" not in got:
        got += s.recv(4096)
    s.close()
    try:
        assert _Upstream.gone.wait(5), "the upstream kept streaming to nobody"
    finally:
        rec.stop()
    (ex,) = _rows(tmp_path / "rec" / "exchanges.jsonl")
    assert ex["outcome"] == "client_gone" and ex["status"] == 200


def test_keep_content_stores_bodies_but_never_headers(sim, tmp_path: Path) -> None:
    rec = _recorder(sim.url, tmp_path / "rec", keep_content=True, session_header="X-Session-Id")
    try:
        run_agent(rec.url + "/v1", MODEL, api_key="sk-test-4f1c",
                  default_headers={"X-Secret": "hush-9e2b", "X-Session-Id": "desk-7"})  # fmt: skip
    finally:
        rec.stop()
    content = (tmp_path / "rec" / "content.jsonl").read_text()
    assert "Lisbon" in content
    assert len(content.splitlines()) == 4
    # no file holds a header: not the key, not another header's value, not their names
    files = sorted(p.name for p in (tmp_path / "rec").iterdir())
    assert files == ["content.jsonl", "exchanges.jsonl", "summary.json", "trace.jsonl"]
    for name in files:
        text = (tmp_path / "rec" / name).read_text().lower()
        assert "sk-test" not in text and "hush-9e2b" not in text, name
        assert "authorization" not in text and "x-secret" not in text and "bearer" not in text, name
    # ... except the value of the header the user named as the session's (docs: privacy)
    assert {r["session"] for r in _rows(tmp_path / "rec" / "trace.jsonl")} == {"desk-7"}


# ------------------------------------------------------------------ framing
def test_chunked_decoder_handles_any_split_and_stops_at_the_end() -> None:
    raw = b"3\r\nabc\r\n4;ext=1\r\ndefg\r\n0\r\nTrailer: x\r\n\r\nNEXT"
    for cut in range(1, len(raw)):
        d, out = ChunkedDecoder(), bytearray()
        used = d.feed(raw[:cut], out)
        if not d.done:
            used = cut + d.feed(raw[cut:], out)
        assert bytes(out) == b"abcdefg" and d.done and raw[used:] == b"NEXT"
    with pytest.raises(FramingError):
        ChunkedDecoder().feed(b"zz\r\n", bytearray())


def test_only_the_host_line_of_a_request_head_changes() -> None:
    raw = b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:8100\r\nAuthorization: Bearer k\r\nX-A: b\r\n\r\n"
    head = parse_head(raw)
    out = replace_host(head, "up:9", "/v1/chat/completions")
    assert out == raw.replace(b"127.0.0.1:8100", b"up:9")
    up = parse_upstream("https://api.example.com/v1")
    assert up is not None and (up.tls, up.port, up.prefix, up.host_header) == (
        True,
        443,
        "",
        "api.example.com",
    )
    up = parse_upstream("http://h:8000/proxy/")
    assert up is not None and up.target("/v1/models") == "/proxy/v1/models"
    assert parse_upstream("ftp://h") is None and parse_upstream("localhost:8000") is None


def test_the_simulator_answers_parallel_tool_calls_with_two_calls(sim) -> None:
    c = openai.OpenAI(base_url=sim.url + "/v1", api_key="k", max_retries=0)
    msgs = [{"role": "user", "content": "both"}]
    kw = {
        "model": MODEL,
        "messages": msgs,
        "tools": TOOLS,
        "tool_choice": "required",
        "max_tokens": 60,
    }
    r = c.chat.completions.create(**kw, parallel_tool_calls=True)  # type: ignore[call-overload]
    calls = r.choices[0].message.tool_calls
    assert [t.function.name for t in calls] == ["get_weather", "get_time"] or [
        t.function.name for t in calls
    ] == ["get_time", "get_weather"]
    assert len({t.id for t in calls}) == 2 and r.choices[0].finish_reason == "tool_calls"
    assert all(json.loads(t.function.arguments) for t in calls)
    streamed: dict[int, list[str]] = {}
    for ch in c.chat.completions.create(**kw, parallel_tool_calls=True, stream=True):  # type: ignore[call-overload]
        for tc in ch.choices[0].delta.tool_calls or ():
            slot = streamed.setdefault(tc.index, ["", ""])
            slot[0] += tc.function.name or ""
            slot[1] += tc.function.arguments or ""
    assert sorted(streamed) == [0, 1] and all(json.loads(a) for _, a in streamed.values())
    one = c.chat.completions.create(**kw)  # type: ignore[call-overload]
    assert len(one.choices[0].message.tool_calls) == 1  # without the field: one call
