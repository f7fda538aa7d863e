"""CPU per SSE event with and without the live-metrics exporter (``--metrics-port``).

Runs ``agentload run`` against the known-timing server (bench/_timed_server.py) in pairs,
alternating off / on (so drifts in the machine's load hit both alike): "off" without
``--metrics-port``; "on" with it and a scraper thread in this process reading ``/metrics``
every ``--scrape-s`` seconds (1 s by default: 15 times Prometheus's usual rate, so the scrape
cost shows). Per run it prints the generator's CPU (the whole child process tree, start-up
included, getrusage) per 1,000 SSE events the server sent for the requests the run recorded;
then the median of each and the ratio on/off. The target (issue 29) is <= 1.1x.

    python bench/bench_live_metrics.py                    # 3 pairs, 100 users, 12 s each
    python bench/bench_live_metrics.py --pairs 5 --users 200 --duration 20

Figures depend on the machine and its load; nothing is asserted.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from _timed_server import TimedServer
from bench_generator import STEPS, _read_jsonl, agentload_cmd, run_child

TARGET_RATIO = 1.1


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Scraper(threading.Thread):
    """Reads a /metrics URL every `every_s` until stopped; counts good scrapes and bytes."""

    def __init__(self, url: str, every_s: float) -> None:
        super().__init__(daemon=True)
        self.url, self.every_s = url, every_s
        self.done = threading.Event()
        self.scrapes = 0
        self.bytes = 0

    def run(self) -> None:
        while not self.done.wait(self.every_s):
            try:
                with urllib.request.urlopen(self.url, timeout=2) as r:
                    self.bytes += len(r.read())
                self.scrapes += 1
            except OSError:
                pass  # not up yet, or already gone


def one_run(args: argparse.Namespace, exporter: bool) -> tuple[float, int, int]:
    """(CPU s per 1,000 events, events, scrapes) of one bounded run."""
    srv = TimedServer(args.ttft, args.itl, args.tokens).start()
    scraper = None
    with tempfile.TemporaryDirectory(prefix="bench-live-") as tmp:
        out = Path(tmp) / "run"
        per_request_s = args.ttft + args.itl * args.tokens
        cap = max(1, int(args.duration / per_request_s * 1.5) + 1)
        cmd = agentload_cmd(srv.port, args.users, args.duration, max(1, -(-cap // STEPS)), out)
        if exporter:
            port = _free_port()
            cmd += ["--metrics-port", str(port)]
            scraper = Scraper(f"http://127.0.0.1:{port}/metrics", args.scrape_s)
            scraper.start()
        try:
            child = run_child(cmd, args.duration + 120)
        finally:
            timings = srv.stop()
            if scraper is not None:
                scraper.done.set()
                scraper.join(5)
        rows = [r for f in sorted(out.glob("requests*.jsonl")) for r in _read_jsonl(f)]
    seen = {r["request_id"] for r in rows}
    events = sum(t[5] for rid, t in timings.items() if rid in seen)
    if child.returncode not in (0, 1) or not events:
        raise SystemExit(f"run failed (exit {child.returncode}):\n{child.output[-2000:]}")
    return child.cpu_s / events * 1000.0, events, scraper.scrapes if scraper else 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=3, help="off/on pairs (default 3)")
    ap.add_argument("--users", type=int, default=100, help="concurrent streams (default 100)")
    ap.add_argument("--duration", type=float, default=12.0, help="seconds per run (default 12)")
    ap.add_argument("--scrape-s", type=float, default=1.0, help="seconds between scrapes")
    ap.add_argument("--ttft", type=float, default=0.05, help="server's true TTFT (s)")
    ap.add_argument("--itl", type=float, default=0.01, help="server's true ITL (s)")
    ap.add_argument("--tokens", type=int, default=100, help="output tokens per request")
    args = ap.parse_args()
    print(f"{args.users} users, {args.duration:g} s runs, server TTFT {args.ttft * 1000:g} ms, "
          f"ITL {args.itl * 1000:g} ms, {args.tokens} tokens; scrape every {args.scrape_s:g} s")  # fmt: skip
    print(f"{'pair':>4} {'exporter':>8} {'events':>8} {'scrapes':>7} {'CPU s / 1k events':>18}")
    off: list[float] = []
    on: list[float] = []
    for k in range(args.pairs):
        for exporter, into in ((False, off), (True, on)):
            cpu, events, scrapes = one_run(args, exporter)
            into.append(cpu)
            print(
                f"{k + 1:>4} {'on' if exporter else 'off':>8} {events:>8} {scrapes:>7} {cpu:>18.4f}"
            )
            time.sleep(1)
    m_off, m_on = statistics.median(off), statistics.median(on)
    ratio = m_on / m_off
    verdict = "met" if ratio <= TARGET_RATIO else "not met"
    print(f"median CPU s / 1k events: off {m_off:.4f}, on {m_on:.4f}; "
          f"on/off {ratio:.3f}x (target <= {TARGET_RATIO}x: {verdict})")  # fmt: skip


if __name__ == "__main__":
    main()
