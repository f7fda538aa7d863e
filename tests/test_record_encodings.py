"""Content-Encoding through `agentload record`: bytes forwarded as they came, the record
decodes what it can (gzip, deflate; br / zstd where their modules are importable) and marks
the rest "not parsed: encoding X", counting nothing from it."""

from __future__ import annotations

import gzip
import http.client
import json
import threading
import zlib
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from workload.record import RecordOptions, RecordThread, parse_upstream
from workload.record.encodings import DECODERS, brotli, decode_body, zstandard

USAGE = {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14}


def _encoders() -> dict[str, Callable[[bytes], bytes]]:
    out: dict[str, Callable[[bytes], bytes]] = {
        "gzip": gzip.compress,
        "deflate": zlib.compress,
        "x-unknown": lambda b: b"\x00\x01" + b[::-1],  # no codec anyone knows
    }
    out["br"] = brotli.compress if brotli is not None else (lambda b: b"\x8b\x02" + b)
    out["zstd"] = (
        zstandard.ZstdCompressor().compress
        if zstandard is not None
        else (lambda b: b"\x28\xb5" + b)
    )
    return out  # fmt: skip


ENCODE = _encoders()


def _answer(stream: bool) -> bytes:
    if not stream:
        return json.dumps({
            "id": "c1", "object": "chat.completion", "model": "m",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": "one two three"}}],
            "usage": USAGE,
        }).encode()  # fmt: skip
    evs = [
        {"choices": [{"index": 0, "delta": {"role": "assistant", "content": "one"}}]},
        {"choices": [{"index": 0, "delta": {"content": " two three"}, "finish_reason": "stop"}]},
        {"choices": [], "usage": USAGE},
    ]
    return b"".join(b"data: %s\n\n" % json.dumps(e).encode() for e in evs) + b"data: [DONE]\n\n"


class _Coded(BaseHTTPRequestHandler):
    """Answers a chat completion coded as the request's X-Encode header asks; the raw body
    it sent is kept in ``sent`` (a stream goes out chunked, in several pieces)."""

    protocol_version = "HTTP/1.1"
    sent: list[bytes] = []
    got: list[bytes] = []

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        raw = self.rfile.read(int(self.headers["content-length"]))
        _Coded.got.append(raw)
        coding = self.headers.get("x-encode", "")
        stream = self.headers.get("x-stream") == "1"
        body = _answer(stream)
        body = ENCODE[coding](body) if coding else body
        _Coded.sent.append(body)
        self.send_response(200)
        self.send_header("content-type", "text/event-stream" if stream else "application/json")
        if coding:
            self.send_header("content-encoding", coding)
        if stream:
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            for k in range(0, len(body), 7):
                piece = body[k : k + 7]
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        else:
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)


@pytest.fixture()
def coded():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Coded)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    _Coded.sent, _Coded.got = [], []
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def _request(n: int) -> bytes:
    msg = {"role": "user", "content": f"question {n}"}
    return json.dumps({"model": "m", "messages": [msg], "stream": False}).encode()


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


CASES = [  # (response coding, streamed, request coding)
    ("", False, ""), ("gzip", False, ""), ("gzip", True, ""), ("deflate", False, ""),
    ("br", False, ""), ("zstd", True, ""), ("x-unknown", False, ""), ("x-unknown", True, ""),
    ("", False, "gzip"), ("", False, "x-unknown"),
]  # fmt: skip


def test_coded_bodies_pass_byte_for_byte_and_are_read_or_marked(coded, tmp_path: Path) -> None:
    up = parse_upstream(coded)
    assert up is not None
    rec = RecordThread(RecordOptions(upstream=up, out=tmp_path / "rec", port=0)).start()
    port = int(rec.url.rsplit(":", 1)[1])
    got: list[bytes] = []
    try:
        for n, (coding, stream, req_coding) in enumerate(CASES):
            body = _request(n)
            headers = {"content-type": "application/json", "x-encode": coding,
                       "x-stream": "1" if stream else "0"}  # fmt: skip
            if req_coding:
                body = ENCODE[req_coding](body)
                headers["content-encoding"] = req_coding
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            c.request("POST", "/v1/chat/completions", body=body, headers=headers)
            r = c.getresponse()
            assert r.status == 200
            got.append(r.read())  # http.client decodes the chunking, not the coding
            c.close()
            assert _Coded.got[-1] == body  # the request as the client coded it
    finally:
        summary = rec.stop()
    assert got == _Coded.sent  # every response body exactly as the upstream coded it
    assert summary["recorder"]["outcomes"] == {"ok": len(CASES)}
    assert summary["recorder"]["recorder_errors"] == []
    ex = _rows(tmp_path / "rec" / "exchanges.jsonl")
    trace = _rows(tmp_path / "rec" / "trace.jsonl")
    read = []
    for row, (coding, _stream, req_coding) in zip(ex, CASES, strict=True):
        unread = [c for c in (coding, req_coding) if c and c not in DECODERS]
        if unread:
            side = "request" if req_coding in unread else "response"
            assert row["error"] == f"{side} not parsed: encoding {unread[0]}", row
            assert row["session"] is None and row["completion_tokens"] is None
        else:
            assert row["error"] is None, row
            assert (row["prompt_tokens"], row["completion_tokens"]) == (11, 3)
            read.append(row["exchange"])
    # every request is a new conversation: one round each for the bodies read, none else
    assert len(trace) == len(read)
    assert all((r["input_tokens"], r["output_tokens"]) == (11, 3) for r in trace)


def test_a_body_that_does_not_decode_is_marked_not_read() -> None:
    assert decode_body(b"not gzip at all", "gzip")[1] is not None
    assert decode_body(b"raw", "identity") == (b"raw", None)
    two = gzip.compress(zlib.compress(b"inner"))  # deflate applied first, then gzip
    assert decode_body(two, "deflate, gzip") == (b"inner", None)
    raw_deflate = zlib.compressobj(wbits=-15)
    flat = raw_deflate.compress(b"headerless") + raw_deflate.flush()
    assert decode_body(flat, "deflate") == (b"headerless", None)
    bomb = gzip.compress(b"\0" * (300 << 20))
    body, why = decode_body(bomb, "gzip")
    assert why is not None and "256 MiB" in why
