"""The floor: a minimal raw-socket asyncio streaming client, run as its own process.

N concurrent users, each on one keep-alive connection, send a small streamed chat request,
stamp every read that carries content (no SSE or JSON parsing: it looks for the timed
server's content marker), read to the chunked terminator, and go again until the duration
or the per-user request cap is reached. One JSON line per request, in requests.jsonl's
field names (request_id, t_start, ttft_ms, itl_ms, chunks, status), so the benchmark
analyses it exactly like agentload's records.

    python bench/_raw_client.py --port 8000 --users 200 --duration 10 --max-requests 20 --out r.jsonl
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

from _timed_server import CONTENT_MARK

BODY = json.dumps(
    {
        "model": "known",
        "stream": True,
        "max_tokens": 100,
        "stream_options": {"include_usage": True},
        "messages": [{"role": "user", "content": "hello " * 40}],
    }
).encode()


async def user(
    port: int, start_s: float, rid_prefix: str, stop_at: float, cap: int, rows: list[dict]
) -> None:
    """One simulated user: sequential streamed requests on one connection."""
    await asyncio.sleep(start_s)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    clock = time.perf_counter_ns
    try:
        for n in range(cap):
            if time.monotonic() >= stop_at:
                break
            rid = f"{rid_prefix}-{n}"
            req = (
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                b"Content-Type: application/json\r\nAccept: text/event-stream\r\n"
                b"X-Request-Id: %s\r\nContent-Length: %d\r\n\r\n" % (rid.encode(), len(BODY))
            ) + BODY
            t_start = round(time.time(), 6)
            sent = clock()
            writer.write(req)
            times: list[int] = []
            tail = b""
            while True:
                data = await reader.read(65536)
                t = clock()
                if not data:
                    raise ConnectionError("closed mid-stream")
                times.extend([t] * data.count(CONTENT_MARK))
                tail = (tail + data)[-5:]
                if tail == b"0\r\n\r\n":
                    break
            gaps = [(b - a) / 1e6 for a, b in zip(times, times[1:], strict=False)]
            rows.append(
                {
                    "request_id": rid,
                    "t_start": t_start,
                    "status": "ok" if times else "error",
                    "ttft_ms": (times[0] - sent) / 1e6 if times else None,
                    "chunks": len(times),
                    "itl_ms": {"mean": sum(gaps) / len(gaps), "max": max(gaps)} if gaps else None,
                }
            )
    except ConnectionError:
        pass
    finally:
        writer.close()


async def run(args: argparse.Namespace) -> list[dict]:
    rows: list[dict] = []
    stop_at = time.monotonic() + args.duration
    await asyncio.gather(
        *(
            # users start spread over a second, as agentload's spawn rate spreads them, so
            # that the server does not see every user's requests in one lockstep burst
            user(args.port, u / args.users, f"raw-{u}", stop_at, args.max_requests, rows)
            for u in range(args.users)
        )
    )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--users", type=int, default=50)
    ap.add_argument("--duration", type=float, default=10.0, help="seconds; no new request after")
    ap.add_argument("--max-requests", type=int, default=1000, help="per user")
    ap.add_argument("--out", required=True, help="JSON lines file to write")
    args = ap.parse_args()
    rows = asyncio.run(run(args))
    with open(args.out, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)


if __name__ == "__main__":
    main()
