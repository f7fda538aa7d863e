"""How exactly does the client stamp TTFT under many concurrent streams? Figures only.

Starts a gevent SSE server in a child process (so its CPU is not ours) that answers every
chat request with a role chunk at once, the first content chunk after ``--delay-ms``, then
``--tokens`` chunks every ``--itl-ms``, a usage chunk and ``[DONE]``. The first content chunk
carries the server's wall clock at the moment it was written, so two errors are printed:

* ``ttft - nominal``: measured TTFT minus the configured delay (includes server lateness);
* ``client lateness``: client arrival (t_start + ttft) minus the server's send time: what the
  client itself added (loopback transfer, gevent scheduling, stamping).

Usage: python bench/bench_client.py [--streams 200] [--rounds 3] [--delay-ms 200]
"""

from __future__ import annotations

import argparse
import os
import resource
import socket
import subprocess
import sys
import time

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _event(obj: dict) -> bytes:
    import orjson

    return _chunk(b"data: " + orjson.dumps(obj) + b"\n\n")


def serve(port_file: str, delay_ms: float, tokens: int, itl_ms: float) -> None:
    """Child process: the scripted SSE server."""
    from gevent import monkey

    monkey.patch_all()
    import gevent
    from gevent.server import StreamServer

    def handle(conn, _addr):
        buf = b""
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for _ in range(10_000):  # requests per connection
            while b"\r\n\r\n" not in buf:
                data = conn.recv(65536)
                if not data:
                    return
                buf += data
            head, _, buf = buf.partition(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n")[1:]:
                k, _, v = line.partition(b":")
                if k.strip().lower() == b"content-length":
                    length = int(v)
            while len(buf) < length:
                buf += conn.recv(65536)
            buf = buf[length:]
            base = {"id": "chatcmpl-b", "model": "bench"}
            conn.sendall(
                HEAD + _event({**base, "choices": [{"index": 0, "delta": {"role": "assistant"}}]})
            )
            gevent.sleep(delay_ms / 1000)
            first = {"content": f"t={time.time():.6f};"}
            conn.sendall(_event({**base, "choices": [{"index": 0, "delta": first}]}))
            for _ in range(tokens - 1):
                gevent.sleep(itl_ms / 1000)
                conn.sendall(_event({**base, "choices": [{"index": 0, "delta": {"content": "x"}}]}))
            usage = {"prompt_tokens": 10, "completion_tokens": tokens}
            conn.sendall(_event({**base, "choices": [], "usage": usage}))
            conn.sendall(_chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")

    server = StreamServer(("127.0.0.1", 0), handle, backlog=4096)
    server.start()
    with open(port_file + ".tmp", "w") as f:
        f.write(str(server.server_port))
    os.replace(port_file + ".tmp", port_file)
    server.serve_forever()


def pct(vals: list[float], q: float) -> float:
    s = sorted(vals)
    return s[min(len(s) - 1, int(q * (len(s) - 1) + 0.5))]


def line(name: str, vals: list[float]) -> str:
    if not vals:
        return f"{name:<22} (no samples)"
    qs = "  ".join(f"p{int(q * 100)}={pct(vals, q):7.2f}" for q in (0.5, 0.9, 0.99))
    return f"{name:<22} {qs}  max={max(vals):7.2f} ms  (n={len(vals)})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--streams", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3, help="requests per stream, sequential")
    ap.add_argument("--delay-ms", type=float, default=200.0)
    ap.add_argument("--tokens", type=int, default=50)
    ap.add_argument("--itl-ms", type=float, default=20.0)
    ap.add_argument("--serve", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.serve:
        serve(a.serve, a.delay_ms, a.tokens, a.itl_ms)
        return

    import gevent
    from gevent.pool import Pool

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

    from workload.measure.client import Client
    from workload.measure.transport import PreparedRequest

    port_file = f"/tmp/agentload-bench-{os.getpid()}.port"
    child = subprocess.Popen(
        [
            sys.executable,
            __file__,
            "--serve",
            port_file,
            "--delay-ms",
            str(a.delay_ms),
            "--tokens",
            str(a.tokens),
            "--itl-ms",
            str(a.itl_ms),
        ]  # fmt: skip
    )
    try:
        for _ in range(200):  # up to 10 s for the server to come up
            if os.path.exists(port_file):
                break
            time.sleep(0.05)
        with open(port_file) as f:
            port = int(f.read())
        client = Client(f"http://127.0.0.1:{port}", concurrency=a.streams)
        body = (
            b'{"model":"bench","messages":[],"stream":true,"stream_options":{"include_usage":true}}'
        )
        recs = []

        def user(i: int) -> None:
            for r in range(a.rounds):
                req = PreparedRequest(
                    "/v1/chat/completions", body, True, "chat", f"b{i}-{r}", timeout_s=120
                )
                recs.append(client.exchange(req))

        ru0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        pool = Pool(a.streams)
        for i in range(a.streams):
            pool.spawn(user, i)
            gevent.sleep(0.002)  # a short ramp, like a spawn rate
        pool.join(timeout=600)
        ru1, wall = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter() - t0
        client.close()
    finally:
        child.terminate()
        child.wait(10)
        if os.path.exists(port_file):
            os.remove(port_file)

    ok = [r for r in recs if r.ok]
    cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    err = [r.ttft_ms - a.delay_ms for r in ok]
    late = [
        (r.t_start + r.ttft_ms / 1000 - float(r.text.split(";")[0][2:])) * 1000
        for r in ok
        if r.text.startswith("t=")
    ]
    itl = [r.itl_ms["mean"] - a.itl_ms for r in ok if r.itl_ms]
    chunks = sum(r.chunks for r in ok)
    print(
        f"streams={a.streams} rounds={a.rounds} delay={a.delay_ms:g}ms tokens={a.tokens} "
        f"itl={a.itl_ms:g}ms cores={os.cpu_count()}"
    )
    print(
        f"requests ok={len(ok)}/{len(recs)}  errors={sorted({r.error_kind for r in recs} - {None})}"
    )
    print(line("ttft - nominal", err))
    print(line("client lateness", late))
    print(line("itl mean - nominal", itl))
    print(
        f"client cpu {100 * cpu / wall:.0f}% of one core over {wall:.1f}s wall; "
        f"{chunks / wall:.0f} content chunks/s; {1e6 * cpu / max(chunks, 1):.0f} us cpu/chunk"
    )


if __name__ == "__main__":
    main()
