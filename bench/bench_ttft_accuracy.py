"""How close is agentload's per-request TTFT to the server's own clock?

An independent, known-timing OpenAI-compatible server runs in its own process
(single-threaded asyncio, so its stamps are not delayed by a GIL shared with
many handler threads). Per X-Request-Id it stamps when it finished reading the
request and when it wrote the first content chunk (a role-only chunk goes out
at once, content after --delay). An `agentload run` subprocess drives N
concurrent streaming users against it; we compare each request's recorded
ttft_ms with the server's (first content written - request read). Both clocks
are CLOCK_MONOTONIC (perf_counter) on one machine; the client's TTFT also holds
sending the request and the loopback hop, so it is expected to be a little
larger. Prints figures; asserts nothing.

    python bench/bench_ttft_accuracy.py --users 50 --duration 30
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

PROFILE = """
schema_version: 1
description: TTFT accuracy bench
seed: 5
classes:
  chat:
    weight: 1
    steps: 4
    system_prompt: {tokens: 200, share: global}
    user_turn: 50
    output: {tokens: 20}
    think_time_s: 0.2
"""

MODELS = json.dumps(
    {"object": "list", "data": [{"id": "known", "object": "model", "max_model_len": 32768}]}
)


def serve(
    port_q: mp.Queue, stop_fd: int, timings_path: str, delay_s: float, chunks: int, gap_s: float
) -> None:
    """The known-timing server (child process): asyncio, one thread; stops when stop_fd is readable."""
    timings: dict[str, tuple[int, int]] = {}

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode().split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                hdrs = {
                    k.lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:] if x)
                }
                body = await reader.readexactly(int(hdrs.get("content-length", "0")))
                t_recv = time.perf_counter_ns()
                if method == "GET":
                    data = MODELS.encode()
                    writer.write(
                        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                        b"Content-Length: %d\r\n\r\n" % len(data) + data
                    )
                    await writer.drain()
                    continue
                rid = hdrs.get("x-request-id", "")
                _ = json.loads(body or b"{}")
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                    b"Transfer-Encoding: chunked\r\n\r\n"
                )

                def event(obj: object) -> bytes:
                    payload = (
                        b"data: "
                        + (obj if isinstance(obj, bytes) else json.dumps(obj).encode())
                        + b"\n\n"
                    )
                    return b"%x\r\n" % len(payload) + payload + b"\r\n"

                base = {
                    "id": f"chatcmpl-{rid}",
                    "object": "chat.completion.chunk",
                    "model": "known",
                }
                writer.write(
                    event(
                        {
                            **base,
                            "choices": [
                                {"index": 0, "delta": {"role": "assistant", "content": ""}}
                            ],
                        }
                    )
                )
                await writer.drain()
                await asyncio.sleep(delay_s)
                for i in range(chunks):
                    if i:
                        await asyncio.sleep(gap_s)
                    writer.write(
                        event({**base, "choices": [{"index": 0, "delta": {"content": f"t{i} "}}]})
                    )
                    await writer.drain()
                    if i == 0:
                        timings[rid] = (t_recv, time.perf_counter_ns())
                usage = {
                    "prompt_tokens": 10,
                    "completion_tokens": chunks,
                    "total_tokens": 10 + chunks,
                }
                writer.write(
                    event({**base, "choices": [], "usage": usage}) + event(b"[DONE]") + b"0\r\n\r\n"
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", 0, backlog=1024)
        port_q.put(server.sockets[0].getsockname()[1])
        loop = asyncio.get_running_loop()
        stop = loop.create_future()
        loop.add_reader(stop_fd, lambda: stop.done() or stop.set_result(None))
        await stop
        Path(timings_path).write_text(json.dumps(timings))

    asyncio.run(main())


def run_server(args: argparse.Namespace, timings_path: str):  # type: ignore[no-untyped-def]
    import os

    r, w = os.pipe()
    q: mp.Queue = mp.Queue()
    proc = mp.get_context("fork").Process(
        target=serve, args=(q, r, timings_path, args.delay, 20, 0.02)
    )
    proc.start()
    os.close(r)
    return proc, q.get(timeout=10), w


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--users", type=int, default=50)
    ap.add_argument("--duration", type=int, default=30)
    ap.add_argument("--delay", type=float, default=0.2, help="server's content delay (s)")
    args = ap.parse_args()
    import os

    with tempfile.TemporaryDirectory() as tmp:
        prof = Path(tmp) / "bench.yaml"
        prof.write_text(PROFILE)
        out = Path(tmp) / "run"
        tpath = str(Path(tmp) / "timings.json")
        proc, port, stop_w = run_server(args, tpath)
        try:
            run = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "workload.cli",
                    "run",
                    "--host",
                    f"http://127.0.0.1:{port}",
                    "--profile",
                    str(prof),
                    "--users",
                    str(args.users),
                    "--spawn-rate",
                    str(args.users),
                    "--duration",
                    f"{args.duration}s",
                    "--out",
                    str(out),
                    "--scrape-interval",
                    "0",
                ],
                capture_output=True,
                text=True,
            )
        finally:
            os.write(stop_w, b"x")
            proc.join(timeout=10)
        timings = json.loads(Path(tpath).read_text())
        rows = [
            json.loads(x) for x in (out / "requests.jsonl").read_text().splitlines() if x.strip()
        ]
    ok = [r for r in rows if r["status"] == "ok" and r["request_id"] in timings]
    diffs = np.array(
        [
            r["ttft_ms"] - (timings[r["request_id"]][1] - timings[r["request_id"]][0]) / 1e6
            for r in ok
        ]
    )
    served = set(timings)
    recorded = {r["request_id"] for r in rows}
    print(
        f"exit {run.returncode}; users {args.users}; requests with a first token served {len(served)}, "
        f"recorded {len(rows)}, served-but-missing {len(served - recorded)}"
    )
    if len(diffs):
        p = np.percentile(diffs, [50, 90, 99])
        print(
            f"client TTFT - server TTFT over {len(diffs)} ok requests: p50 {p[0]:.2f} ms, "
            f"p90 {p[1]:.2f} ms, p99 {p[2]:.2f} ms, max {diffs.max():.2f} ms, min {diffs.min():.2f} ms"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
