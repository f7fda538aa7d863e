"""What `agentload record` adds to a stream: TTFT and per-chunk delay, direct vs through it.

Three processes: the upstream, `agentload record` (its CLI, as a user runs it) and this
client (asyncio, raw HTTP/1.1, one connection per stream). Rounds alternate direct and
proxied so both see the same machine load. Two upstreams:

* ``stamp`` (default): a known-timing server in its own process that writes each SSE event
  with its own send time in it (``"t_ns"``, CLOCK_REALTIME, the same clock the client reads):
  every chunk's one-way delay is exact, so the proxy's added delay is the difference of the
  two delay distributions (p50, p99).
* ``sim``: the embedded simulator (``fast`` preset); TTFT and inter-chunk gaps, direct vs
  proxied, compared by percentile. The simulator's own jitter is part of both sides.

Goal (issue 28): p99 added < 1 ms at 50 concurrent streams. Prints figures; asserts nothing.

    python bench/bench_record.py --streams 1 50 --rounds 4
    python bench/bench_record.py --upstream sim --streams 1 50
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import psutil

REPO = Path(__file__).resolve().parent.parent
EVENTS, GAP_S = 40, 0.02
STAMP = re.compile(rb'"t_ns":(\d+)')
CONTENT = re.compile(rb'"content":"[^"]')


# ------------------------------------------------------------------ the stamping upstream
async def _stamp_conn(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
    try:
        while True:
            head = await r.readuntil(b"\r\n\r\n")
            m = re.search(rb"(?i)content-length: *(\d+)", head)
            if m:
                await r.readexactly(int(m.group(1)))
            w.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
            )
            for _ in range(EVENTS):
                await asyncio.sleep(GAP_S)
                ev = (
                    b'data: {"choices":[{"index":0,"delta":{"content":"x"}}],"t_ns":%d}\n\n'
                    % time.time_ns()
                )
                w.write(b"%x\r\n%s\r\n" % (len(ev), ev))
            w.write(b"e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n")
            await w.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        w.close()


async def _serve_stamp(port: int) -> None:
    srv = await asyncio.start_server(_stamp_conn, "127.0.0.1", port)
    print(f"stamp server on http://127.0.0.1:{srv.sockets[0].getsockname()[1]}", flush=True)
    await srv.serve_forever()


def start_stamp() -> tuple[subprocess.Popen[str], str]:
    p = subprocess.Popen(
        [sys.executable, __file__, "--serve-stamp"], stdout=subprocess.PIPE, text=True
    )
    assert p.stdout is not None
    line = p.stdout.readline()
    return p, line.split()[-1]


def start_sim() -> tuple[subprocess.Popen[str], str]:
    p = subprocess.Popen(
        [sys.executable, "-m", "workload.sim", "--port", "0", "--preset", "fast"],
        stdout=subprocess.PIPE, text=True, cwd=REPO,
    )  # fmt: skip
    assert p.stdout is not None
    while True:
        line = p.stdout.readline()
        m = re.search(r"(http://127\.0\.0\.1:\d+)", line)
        if m:
            time.sleep(0.5)
            return p, m.group(1)
        if not line:
            raise SystemExit("the simulator did not start")


def start_record(upstream: str, out: str) -> tuple[subprocess.Popen[str], str]:
    p = subprocess.Popen(
        [sys.executable, "-m", "workload.cli", "record", "--upstream", upstream, "--out", out,
         "--port", "0", "--overwrite"],
        stdout=subprocess.PIPE, text=True, cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)),
    )  # fmt: skip
    assert p.stdout is not None
    while True:
        line = p.stdout.readline()
        m = re.search(r"listening on (http://\S+)/v1 ", line)
        if m:
            return p, m.group(1)
        if not line:
            raise SystemExit("agentload record did not start")


# ------------------------------------------------------------------ the client
BODY = (b'{"model":"agentload/sim-8b","messages":[{"role":"user","content":"hi"}],'
        b'"max_tokens":%d,"stream":true,"ignore_eos":true}' % EVENTS)  # fmt: skip


Conn = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def one_stream(conn: Conn, stamped: bool) -> tuple[float, list[float]]:
    """(TTFT s, per-event values: one-way delay s when stamped, else arrival times), on a
    kept-alive connection (as an SDK's pool keeps them)."""
    r, w = conn
    head = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: bench\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\n\r\n" % len(BODY))  # fmt: skip
    t0 = time.time_ns()
    w.write(head + BODY)
    values: list[float] = []
    ttft = None
    while True:
        data = await r.read(65536)
        now = time.time_ns()
        if not data:
            break
        if stamped:
            values += [(now - int(m.group(1))) / 1e9 for m in STAMP.finditer(data)]
            found = bool(values)
        else:
            n = len(CONTENT.findall(data))
            values += [now / 1e9] * n
            found = n > 0
        if ttft is None and found:
            ttft = (now - t0) / 1e9
        if data.endswith(b"0\r\n\r\n"):
            break
    return ttft or float("nan"), values


async def rounds_of(
    url: str, streams: int, stamped: bool, rounds: int
) -> tuple[list[float], list[float]]:
    """``rounds`` rounds of ``streams`` concurrent streams, each stream on its own connection
    kept across the rounds (the first round, which opens them, is not counted)."""
    host, port = url.removeprefix("http://").split(":")
    conns = [await asyncio.open_connection(host, int(port)) for _ in range(streams)]
    ttfts: list[float] = []
    per: list[float] = []
    for k in range(rounds + 1):
        t, p = await _round(conns, stamped)
        if k:
            ttfts += t
            per += p
    for _, w in conns:
        w.close()
    return ttfts, per


async def _round(conns: list[Conn], stamped: bool) -> tuple[list[float], list[float]]:
    res = await asyncio.gather(*(one_stream(c, stamped) for c in conns))
    ttfts = [t for t, _ in res]
    if stamped:
        per = [v for _, vs in res for v in vs]
    else:
        per = [b - a for _, vs in res for a, b in zip(vs, vs[1:], strict=False)]
    return ttfts, per


def pct(x: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(x), q)) * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--upstream", choices=["stamp", "sim"], default="stamp")
    ap.add_argument("--streams", type=int, nargs="+", default=[1, 50])
    ap.add_argument("--rounds", type=int, default=4, help="rounds per side and stream count")
    ap.add_argument("--serve-stamp", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.serve_stamp:
        asyncio.run(_serve_stamp(0))
        return
    up, up_url = start_stamp() if a.upstream == "stamp" else start_sim()
    out = tempfile.mkdtemp(prefix="bench-record-")
    rec, rec_url = start_record(up_url, out)
    proc = psutil.Process(rec.pid)
    stamped = a.upstream == "stamp"
    what = "one-way chunk delay" if stamped else "inter-chunk gap"
    try:
        print(f"upstream {a.upstream}; {EVENTS} events {GAP_S * 1000:.0f} ms apart per stream; "
              f"{a.rounds} rounds per side, alternating; figures in ms")  # fmt: skip
        print(
            f"{'streams':>7} {'side':>7} {'TTFT p50':>9} {'TTFT p99':>9} {what + ' p50':>26} {'p99':>8}"
        )
        for n in a.streams:
            got: dict[str, tuple[list[float], list[float]]] = {
                "direct": ([], []),
                "proxy": ([], []),
            }
            cpu = 0.0
            for _ in range(a.rounds):
                for side, url in (("direct", up_url), ("proxy", rec_url)):
                    c0 = sum(proc.cpu_times()[:2])
                    t, per = asyncio.run(rounds_of(url, n, stamped, 2))
                    if side == "proxy":
                        cpu += sum(proc.cpu_times()[:2]) - c0
                    got[side][0].extend(t)
                    got[side][1].extend(per)
            rows = {}
            for side, (t, per) in got.items():
                rows[side] = (pct(t, 50), pct(t, 99), pct(per, 50), pct(per, 99))
                print(
                    f"{n:>7} {side:>7} {rows[side][0]:>9.2f} {rows[side][1]:>9.2f} {rows[side][2]:>26.2f} {rows[side][3]:>8.2f}"
                )
            added = [p - d for p, d in zip(rows["proxy"], rows["direct"], strict=True)]
            goal = ""
            if n == 50:
                noisy = rows["direct"][3] > 2.0  # the direct path's own p99: the machine's noise
                goal = (
                    "  (goal p99 < 1 ms: "
                    + (
                        "met"
                        if 0 <= added[3] < 1.0 and not noisy
                        else f"not met: direct p99 alone is {rows['direct'][3]:.1f} ms here"
                        if noisy
                        else "not met"
                    )
                    + ")"
                )
            print(
                f"{n:>7} {'added':>7} {added[0]:>9.2f} {added[1]:>9.2f} {added[2]:>26.2f} {added[3]:>8.2f}{goal}"
            )
            chunks = n * a.rounds * 3 * (EVENTS + 2)
            print(
                f"{n:>7} {'proxy':>7} CPU {cpu:.2f} s for {chunks} events: {cpu / chunks * 1e6:.0f} us per event "
                f"(the proxy's process; the recorder has its own); machine load average "
                f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
            )
    finally:
        rec.send_signal(signal.SIGINT)
        rec.wait(30)
        up.terminate()
        up.wait(10)


if __name__ == "__main__":
    main()
