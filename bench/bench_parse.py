"""The client's own parse-and-record cost per SSE event, in process, without sockets. Figures only.

    python bench/bench_parse.py                 # 1 and 10 events per read, 3 repeats
    python bench/bench_parse.py --per-read 1 4 20 --requests 1000

``Client.exchange`` runs over a fake transport whose ``read_some`` hands out pre-built reads
of a 100-token streamed chat reply shaped like bench/_timed_server.py's (role chunk, 100
content chunks, usage chunk, ``[DONE]``), k events per read. It prints process CPU
microseconds per event: SSE parsing, chunk JSON, the record and its ITL gaps; not the
socket wait, the greenlet switch or the HTTP chunked decoding, which bench_client.py and
bench_generator.py include.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import orjson

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from workload.measure.client import Client  # noqa: E402
from workload.measure.transport import PreparedRequest  # noqa: E402


def events(tokens: int) -> list[bytes]:
    head = b'{"id":"chatcmpl-b","object":"chat.completion.chunk","model":"known","choices":'
    out = [b"data: " + head + b'[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n']
    out += [b"data: " + head + b'[{"index":0,"delta":{"content":"t%d "}}]}\n\n' % i for i in range(tokens)]  # fmt: skip
    usage = {"prompt_tokens": 100, "completion_tokens": tokens, "total_tokens": 100 + tokens}
    final = {"id": "chatcmpl-b", "object": "chat.completion.chunk", "model": "known"}
    out.append(b"data: " + orjson.dumps({**final, "choices": [], "usage": usage}) + b"\n\n")
    out.append(b"data: [DONE]\n\n")
    return out


class _Response:
    status = 200
    headers = {"content-type": "text/event-stream"}

    def __init__(self, reads: list[bytes]) -> None:
        self._reads = iter(reads)

    def read_some(self) -> bytes:
        return next(self._reads, b"")

    def readline(self) -> bytes:  # pragma: no cover - read_some is used
        raise AssertionError

    def read(self) -> bytes:
        return b""

    def close(self) -> None:
        pass


class _Transport:
    def __init__(self, reads: list[bytes]) -> None:
        self.reads = reads

    def post(self, path, headers, body, *, read_timeout_s, on_send):
        on_send()
        return _Response(self.reads)

    def close(self) -> None:
        pass


def us_per_event(per_read: int, requests: int, tokens: int) -> float:
    evs = events(tokens)
    reads = [b"".join(evs[i : i + per_read]) for i in range(0, len(evs), per_read)]
    client = Client("http://127.0.0.1:1", transport=_Transport(reads))
    req = PreparedRequest("/v1/chat/completions", b"{}", True, "chat", "r")
    for _ in range(20):  # warm up
        assert client.exchange(req).ok
    t0 = time.process_time()
    for _ in range(requests):
        client.exchange(req)
    return (time.process_time() - t0) / (requests * len(evs)) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-read", type=int, nargs="+", default=[1, 10], help="events per read")
    ap.add_argument("--requests", type=int, default=400)
    ap.add_argument("--tokens", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    for _ in range(a.repeats):
        cells = [f"{k}/read {us_per_event(k, a.requests, a.tokens):5.2f}" for k in a.per_read]
        print("us CPU per event:  " + "   ".join(cells))


if __name__ == "__main__":
    main()
