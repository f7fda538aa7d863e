"""Benchmark the simulator: streamed chunks per second of server CPU, and concurrent streams held.

    python bench/bench_sim.py [--streams 256 2000] [--tokens 200] [--preset fast]

The server runs as a child process (`SimProcess`), so its CPU time is measured
on its own (psutil) and "chunks/s on one core" = SSE events / server CPU
seconds: that figure does not depend on how busy the client or the machine is.
The client is a lean asyncio protocol that counts `data: ` events per stream.
Every run is bounded by --timeout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psutil  # noqa: E402

from workload.sim.launcher import SimProcess  # noqa: E402


class _Stream(asyncio.Protocol):
    def __init__(self, request: bytes, state: dict, done: asyncio.Future):
        self.request = request
        self.state = state
        self.done = done
        self.events = 0
        self.tail = b""
        self.open = False

    def connection_made(self, transport) -> None:  # type: ignore[override]
        self.transport = transport
        transport.write(self.request)

    def data_received(self, data: bytes) -> None:
        if not self.open:
            self.open = True
            self.state["open"] += 1
            self.state["peak"] = max(self.state["peak"], self.state["open"])
        self.events += data.count(b"data: ")
        window = self.tail + data
        if b"data: [DONE]" in window:
            self._finish(True)
        self.tail = window[-16:]

    def connection_lost(self, exc) -> None:  # type: ignore[override]
        self._finish(False)

    def _finish(self, ok: bool) -> None:
        if self.done.done():
            return
        if self.open:
            self.state["open"] -= 1
        self.done.set_result((ok, self.events))
        self.transport.close()


async def _run_streams(host: str, port: int, n: int, body: bytes, timeout_s: float) -> dict:
    loop = asyncio.get_running_loop()
    request = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: %b\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%b" % (host.encode(), len(body), body)
    )
    state = {"open": 0, "peak": 0}
    futures = []
    t0 = time.perf_counter()
    for _ in range(n):
        fut = loop.create_future()
        await loop.create_connection(lambda f=fut: _Stream(request, state, f), host, port)
        futures.append(fut)
    results = await asyncio.wait_for(asyncio.gather(*futures), timeout_s)
    wall = time.perf_counter() - t0
    return {
        "ok": sum(1 for ok, _ in results if ok),
        "events": sum(ev for _, ev in results),
        "wall_s": wall,
        "peak_open": state["peak"],
    }


def bench(preset: str, streams: int, tokens: int, timeout_s: float, spec_k: int) -> dict:
    """One run: `streams` concurrent chat streams of `tokens` tokens each."""
    sets = [f"max_num_seqs={max(streams, 1)}", f"max_waiting={streams + 16}", f"spec_k={spec_k}"]
    with SimProcess(preset, seed=0, sets=sets) as sim:
        host, port = sim.url.split("//")[1].split(":")
        server = psutil.Process(sim.pid)
        body = json.dumps(
            {
                "model": "agentload/sim-8b",
                "messages": [{"role": "user", "content": "benchmark"}],
                "max_tokens": tokens,
                "ignore_eos": True,
                "stream": True,
                "stream_options": {"include_usage": True},
            }
        ).encode()
        cpu0 = sum(server.cpu_times()[:2])
        out = asyncio.run(_run_streams(host, int(port), streams, body, timeout_s))
        cpu = sum(server.cpu_times()[:2]) - cpu0
    out.update(
        preset=preset,
        streams=streams,
        tokens=tokens,
        spec_k=spec_k,
        server_cpu_s=cpu,
        chunks_per_cpu_s=out["events"] / cpu if cpu else float("inf"),
        chunks_per_wall_s=out["events"] / out["wall_s"],
    )
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--streams", type=int, nargs="+", default=[256, 2000])
    p.add_argument("--tokens", type=int, default=200)
    p.add_argument("--preset", default="fast")
    p.add_argument("--spec-k", type=int, default=0, help="0: one token per chunk (worst case)")
    p.add_argument("--timeout", type=float, default=300.0)
    args = p.parse_args(argv)
    print(f"{'streams':>8} {'ok':>6} {'peak open':>9} {'chunks':>9} {'srv cpu s':>9} {'chunks/cpu-s':>12} {'chunks/s wall':>13}")  # fmt: skip
    for n in args.streams:
        r = bench(args.preset, n, args.tokens, args.timeout, args.spec_k)
        print(
            f"{r['streams']:>8} {r['ok']:>6} {r['peak_open']:>9} {r['events']:>9} "
            f"{r['server_cpu_s']:>9.2f} {r['chunks_per_cpu_s']:>12.0f} {r['chunks_per_wall_s']:>13.0f}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
