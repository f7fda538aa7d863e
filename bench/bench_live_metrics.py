"""CPU per SSE event with and without the live-metrics exporter (``--metrics-port``).

Runs ``agentload run`` against the known-timing server (bench/_timed_server.py) in pairs,
alternating off / on (so drifts in the machine's load hit both alike): "off" without
``--metrics-port``; "on" with it and a scraper thread in this process reading ``/metrics``
every ``--scrape-s`` seconds (1 s by default: 15 times Prometheus's usual rate, so the scrape
cost shows). Per run it prints the generator's CPU (the whole child process tree, start-up
included, getrusage) per 1,000 SSE events the server sent for the requests the run recorded;
then the median of each and the ratio on/off. The target (issue 29) is <= 1.1x.

With ``--otlp``, "on" also exports through OpenTelemetry (``--otlp-endpoint`` with
``--otlp-traces``, every session traced, metrics every ``--otlp-interval`` s) to a sink in
this process that accepts OTLP/HTTP and discards it: Prometheus + OTLP on against both off.

    python bench/bench_live_metrics.py                    # 3 pairs, 100 users, 12 s each
    python bench/bench_live_metrics.py --pairs 5 --users 200 --duration 20
    python bench/bench_live_metrics.py --otlp             # Prometheus + OTLP metrics and traces
    python bench/bench_live_metrics.py --otlp --sessions 2 --duration 120   # fixed work per run

Figures depend on the machine and its load; nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
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


class OtlpSink:
    """Accepts OTLP/HTTP posts on 127.0.0.1 and discards them (counts posts and bytes)."""

    def __init__(self) -> None:
        sink = self
        self.posts = 0
        self.bytes = 0

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                n = len(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                sink.posts += 1
                sink.bytes += n
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_a: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def one_run(args: argparse.Namespace, exporter: bool) -> tuple[float, float, int, int]:
    """(CPU s per 1,000 events: whole child tree, then the measuring process while the run
    ran; events, scrapes) of one bounded run."""
    srv = TimedServer(args.ttft, args.itl, args.tokens).start()
    scraper = None
    sink = OtlpSink() if exporter and args.otlp else None
    with tempfile.TemporaryDirectory(prefix="bench-live-") as tmp:
        out = Path(tmp) / "run"
        per_request_s = args.ttft + args.itl * args.tokens
        if args.sessions:  # the same work every run; the duration only bounds it
            sessions = args.sessions
        else:
            cap = max(1, int(args.duration / per_request_s * 1.5) + 1)
            sessions = max(1, -(-cap // STEPS))
        cmd = agentload_cmd(srv.port, args.users, args.duration, sessions, out)
        if exporter:
            port = _free_port()
            cmd += ["--metrics-port", str(port)]
            scraper = Scraper(f"http://127.0.0.1:{port}/metrics", args.scrape_s)
            scraper.start()
        if sink is not None:
            cmd += ["--otlp-endpoint", sink.url, "--otlp-traces",
                    "--otlp-sample", str(args.otlp_sample),
                    "--otlp-interval", str(args.otlp_interval)]  # fmt: skip
        try:
            child = run_child(cmd, args.duration + 120)
        finally:
            timings = srv.stop()
            if scraper is not None:
                scraper.done.set()
                scraper.join(5)
            if sink is not None:
                sink.close()
                if not sink.posts:
                    raise SystemExit("the OTLP sink received nothing: the export did not run")
        rows = [r for f in sorted(out.glob("requests*.jsonl")) for r in _read_jsonl(f)]
        in_run_s = _in_run_cpu_s(out / "run.json")
    seen = {r["request_id"] for r in rows}
    events = sum(t[5] for rid, t in timings.items() if rid in seen)
    if child.returncode not in (0, 1) or not events:
        raise SystemExit(f"run failed (exit {child.returncode}):\n{child.output[-2000:]}")
    scrapes = scraper.scrapes if scraper else 0
    return child.cpu_s / events * 1000.0, in_run_s / events * 1000.0, events, scrapes


def _in_run_cpu_s(run_json: Path) -> float:
    """The measuring process's CPU while the run ran: its health monitor's mean share of a core
    (sampled every 2 s) times the run's length. Start-up (imports: ~0.5 s for the
    OpenTelemetry SDK) and the end (report, last export) are not in it."""
    doc = json.loads(run_json.read_text())
    return float(doc["generator_health"]["cpu_mean"]) * float(doc["duration_s"])


def micro(n: int) -> None:
    """CPU per request of the OTLP hooks alone, in this process (no Locust, no gevent): n
    requests of 100-token answers in sessions of 5, export included (process_time counts the
    SDK's export threads), against the sink."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from workload.measure.otlp import OtlpExport, OtlpSettings  # noqa: PLC0415 - the extra
    from workload.measure.otlp_metrics import Gauges  # noqa: PLC0415
    from workload.measure.records import RequestRecord, SessionRecord  # noqa: PLC0415

    for traces in (False, True):
        sink = OtlpSink()
        e = OtlpExport(
            OtlpSettings(endpoint=sink.url, traces=traces, sample=1.0, interval_s=1.0, seed=1,
                         target="http://127.0.0.1:8000", model="m", provider="vllm"),
            Gauges(lambda: 0, lambda: 0, lambda: (0, 0)), print,
        )  # fmt: skip
        if e.queue is not None:  # this loop makes spans far faster than a run: keep them all
            e.queue.max_queue = 4 * n
        t, c0 = time.time(), time.process_time()
        for k in range(n):
            sid = f"chat-u{k // 5}-s0"
            if k % 5 == 0:
                e.session_started(sid, "chat", t)
            e.waited(sid, t, t + 0.01, 0.01, 0.0)
            e.request(RequestRecord(user_class="chat", session_id=sid, step=k % 5 + 1,
                                    t_start=t, ttft_ms=50.0, e2e_ms=1040.0, tpot_ms=10.0,
                                    prompt_tokens=3000, completion_tokens=100,
                                    cached_tokens=2048, request_id=f"r{k}", slo_met=True))  # fmt: skip
            if k % 5 == 4:
                e.session(SessionRecord(user_class="chat", session_id=sid, t_start=t,
                                        duration_ms=5000.0))  # fmt: skip
        e.close()
        per = (time.process_time() - c0) / n * 1e6
        sink.close()
        what = "metrics + traces" if traces else "metrics only"
        print(f"OTLP hooks, {what}: {per:.1f} us CPU per request ({per / 100:.2f} us per SSE "
              f"event at 100 events a request), {sink.posts} posts, {sink.bytes} bytes")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=3, help="off/on pairs (default 3)")
    ap.add_argument("--users", type=int, default=100, help="concurrent streams (default 100)")
    ap.add_argument("--duration", type=float, default=12.0, help="seconds per run (default 12)")
    ap.add_argument(
        "--sessions", type=int, default=0, metavar="N",
        help="each user plays N sessions and the run ends when they have: every run does the "
        "same work (--duration is then only the bound); default: runs end at --duration",
    )  # fmt: skip
    ap.add_argument("--scrape-s", type=float, default=1.0, help="seconds between scrapes")
    ap.add_argument("--ttft", type=float, default=0.05, help="server's true TTFT (s)")
    ap.add_argument("--itl", type=float, default=0.01, help="server's true ITL (s)")
    ap.add_argument("--tokens", type=int, default=100, help="output tokens per request")
    ap.add_argument(
        "--otlp",
        action="store_true",
        help="'on' also exports OTLP metrics and traces to a sink",
    )
    ap.add_argument(
        "--otlp-sample", type=float, default=1.0,
        help="with --otlp: share of sessions traced (default 1: all)",
    )  # fmt: skip
    ap.add_argument(
        "--otlp-interval",
        type=float,
        default=10.0,
        help="with --otlp: seconds between metric exports (default 10)",
    )
    ap.add_argument(
        "--micro",
        type=int,
        default=0,
        metavar="N",
        help="only time the OTLP hooks in this process over N requests",
    )
    args = ap.parse_args()
    if args.micro:
        micro(args.micro)
        return
    print(f"{args.users} users, {args.duration:g} s runs, server TTFT {args.ttft * 1000:g} ms, "
          f"ITL {args.itl * 1000:g} ms, {args.tokens} tokens; scrape every {args.scrape_s:g} s"
          + (f"; on = Prometheus + OTLP (traces of {args.otlp_sample:.0%} of sessions, metrics "
             f"every {args.otlp_interval:g} s)" if args.otlp else ""))  # fmt: skip
    print(f"{'pair':>4} {'exporter':>8} {'events':>8} {'scrapes':>7} {'CPU s / 1k events':>18} "
          f"{'in-run CPU s / 1k':>18}")  # fmt: skip
    runs: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    for k in range(args.pairs):
        for exporter in (False, True):
            cpu, in_run, events, scrapes = one_run(args, exporter)
            runs[exporter].append((cpu, in_run))
            print(f"{k + 1:>4} {'on' if exporter else 'off':>8} {events:>8} {scrapes:>7} "
                  f"{cpu:>18.4f} {in_run:>18.4f}")  # fmt: skip
            time.sleep(1)
    for label, i in (("whole child tree", 0), ("in-run, measuring process", 1)):
        m_off = statistics.median(x[i] for x in runs[False])
        m_on = statistics.median(x[i] for x in runs[True])
        ratio = m_on / m_off
        verdict = "met" if ratio <= TARGET_RATIO else "not met"
        pairs = sorted(on[i] / off[i] for off, on in zip(runs[False], runs[True], strict=True))
        print(f"median CPU s / 1k events ({label}): off {m_off:.4f}, on {m_on:.4f}; "
              f"on/off {ratio:.3f}x (target <= {TARGET_RATIO}x: {verdict}); pair by pair "
              f"{statistics.median(pairs):.3f}x median, {pairs[0]:.3f}-{pairs[-1]:.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
