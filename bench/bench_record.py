"""What `agentload record` adds to a stream: TTFT and per-chunk delay, direct vs through it.

Three processes: the upstream, `agentload record` (its CLI, as a user runs it) and this
client (raw HTTP/1.1, a thread and a connection per stream, reads stamped by the kernel:
SO_TIMESTAMPNS, so the client's own scheduling is out of the figures). A fresh recording
per stream count; its summary.json gives the proxy's own figure (each body read, read
callback -> send returned: ``relay_us``). Rounds alternate direct and
proxied so both see the same machine load. Two upstreams:

* ``stamp`` (default): a known-timing server in its own process that writes each SSE event
  with its own send time in it (``"t_ns"``, CLOCK_REALTIME, the same clock the client reads):
  every chunk's one-way delay is exact, so the proxy's added delay is the difference of the
  two delay distributions (p50, p99).
* ``sim``: the embedded simulator (``fast`` preset); TTFT and inter-chunk gaps, direct vs
  proxied, compared by percentile. The simulator's own jitter is part of both sides.

Goal (issue 28): p99 added < 1 ms at 50 concurrent streams. Prints figures; asserts nothing.

    python bench/bench_record.py --streams 1 50 --rounds 4
    python bench/bench_record.py --streams 50 --loop asyncio   # the proxy on asyncio's loop
    python bench/bench_record.py --upstream sim --streams 1 50
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import psutil

from workload.measure.transport import KERNEL_RX, RX_ANC_SPACE, SO_TIMESTAMPNS, kernel_ns

REPO = Path(__file__).resolve().parent.parent
EVENTS, GAP_S = 40, 0.02
STAMP = re.compile(rb'"t_ns":(\d+)')
CONTENT = re.compile(rb'"content":"[^"]')


def _kernel_stamps() -> bool:
    with socket.socket() as s:
        try:
            s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        except OSError:
            return False
    return KERNEL_RX


KERNEL = _kernel_stamps()


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


def start_record(
    upstream: str, out: str, loop: str, processes: int = 1
) -> tuple[subprocess.Popen[str], str]:
    """`agentload record` on ``loop`` (AGENTLOAD_RECORD_LOOP: auto, uvloop, asyncio) with
    ``processes`` proxy processes."""
    env = dict(os.environ, PYTHONPATH=str(REPO), AGENTLOAD_RECORD_LOOP=loop)
    p = subprocess.Popen(
        [sys.executable, "-m", "workload.cli", "record", "--upstream", upstream, "--out", out,
         "--port", "0", "--overwrite", "--processes", str(processes)],
        stdout=subprocess.PIPE, text=True, cwd=REPO, env=env,
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
HEAD = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: bench\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\n\r\n" % len(BODY))  # fmt: skip
EVENT = b'data: {"choices":[{"index":0,"delta":{"content":"x"}}],"t_ns":%d}\n\n' % time.time_ns()
FRAME = len(b"%x\r\n%s\r\n" % (len(EVENT), EVENT))  # every stamped event's chunk: one size
LAST = len(b"e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n")


class Stream:
    """One kept-alive connection whose reads carry the kernel's receive stamp (SO_TIMESTAMPNS,
    CLOCK_REALTIME): when a chunk reached this host's socket, however late this thread reads
    it. With loopback that is when the sender's send() returned, so the client's own
    scheduling is out of the figure (where the kernel refuses the option: user-space stamps)."""

    def __init__(self, url: str) -> None:
        host, port = url.removeprefix("http://").split(":")
        self.s = socket.create_connection((host, int(port)))
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if KERNEL:
            self.s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)

    def recv(self, n: int, exact: bool) -> tuple[bytes, int]:
        """(bytes, receive stamp ns): exactly ``n`` bytes, or what one read gives (up to n)."""
        data, anc, _, _ = self.s.recvmsg(n, RX_ANC_SPACE, socket.MSG_WAITALL if exact else 0)
        return data, (kernel_ns(anc) if anc else 0) or time.time_ns()

    def head(self) -> bytes:
        """The response head, read exactly (peeked first, so no body byte is taken with it)."""
        while True:
            got = self.s.recv(8192, socket.MSG_PEEK)
            end = got.find(b"\r\n\r\n")
            if end >= 0:
                return self.recv(end + 4, True)[0]
            if not got:
                raise ConnectionError("closed before the head")
            time.sleep(0.0005)

    def stamped(self) -> tuple[float, list[float]]:
        """(TTFT s, one-way delay s of each event): each event's chunk read exactly, so its
        stamp is its own segment's."""
        t0 = time.time_ns()
        self.s.sendall(HEAD + BODY)
        self.head()
        delays, ttft = [], float("nan")
        for k in range(EVENTS):
            data, rx = self.recv(FRAME, True)
            m = STAMP.search(data)
            assert m is not None and len(data) == FRAME, data
            delays.append((rx - int(m.group(1))) / 1e9)
            if k == 0:
                ttft = (rx - t0) / 1e9
        assert self.recv(LAST, True)[0].endswith(b"0\r\n\r\n")
        return ttft, delays

    def sim(self) -> tuple[float, list[float]]:
        """(TTFT s, receive stamps s of each content event) from the simulator's stream."""
        t0 = time.time_ns()
        self.s.sendall(HEAD + BODY)
        self.head()
        stamps: list[float] = []
        while True:
            data, rx = self.recv(65536, False)
            if not data:
                raise ConnectionError("closed mid-stream")
            stamps += [rx / 1e9] * len(CONTENT.findall(data))
            if data.endswith(b"0\r\n\r\n"):
                break
        return (stamps[0] - t0 / 1e9 if stamps else float("nan")), stamps


def one_round(streams: list[Stream], stamped: bool) -> tuple[list[float], list[float]]:
    """All streams at once (a thread each, started together): (TTFTs, per-event values)."""
    go = threading.Barrier(len(streams))
    res: list[tuple[float, list[float]]] = [(float("nan"), [])] * len(streams)

    def run(i: int) -> None:
        go.wait()
        res[i] = streams[i].stamped() if stamped else streams[i].sim()

    ts = [threading.Thread(target=run, args=(i,)) for i in range(len(streams))]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    ttfts = [t for t, _ in res]
    if stamped:
        return ttfts, [v for _, vs in res for v in vs]
    return ttfts, [b - a for _, vs in res for a, b in zip(vs, vs[1:], strict=False)]


def rounds_of(url: str, n: int, stamped: bool, rounds: int) -> tuple[list[float], list[float]]:
    """``rounds`` rounds of ``n`` concurrent streams, each on its own connection kept across
    the rounds (the first round, which opens them, is not counted)."""
    streams = [Stream(url) for _ in range(n)]
    ttfts: list[float] = []
    per: list[float] = []
    try:
        for k in range(rounds + 1):
            t, p = one_round(streams, stamped)
            if k:
                ttfts += t
                per += p
    finally:
        for st in streams:
            st.s.close()
    return ttfts, per


def _proxy_processes(pid: int) -> list[psutil.Process]:
    """`agentload record`'s proxy processes: itself and the processes it spawned but the
    first (the recorder, spawned before the proxies; multiprocessing's resource tracker is
    no spawned process)."""
    parent = psutil.Process(pid)
    kids = [k for k in parent.children() if "spawn_main" in " ".join(k.cmdline())]
    kids.sort(key=lambda p: p.create_time())
    return [parent, *kids[1:]]


def _cpu(procs: list[psutil.Process]) -> float:
    return sum(sum(p.cpu_times()[:2]) for p in procs)


def pct(x: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(x), q)) * 1000


def stop_record(rec: subprocess.Popen[str], out: str) -> tuple[dict[str, int] | None, str]:
    """Stop `agentload record`; its own figure (each body read's time in the proxy, µs) and
    the event loop it ran on."""
    rec.send_signal(signal.SIGINT)
    rec.wait(60)
    summary = json.loads((Path(out) / "summary.json").read_text())
    got: dict[str, int] | None = summary["recorder"]["relay_us"]
    return got, str(summary["recorder"]["event_loop"])


def _goal(us: float) -> str:
    return "met" if us < 1000 else "not met"


def main() -> None:
    """Long because it is the bench's whole table: per stream count a fresh recording, rounds
    alternating direct and proxied, then each side's row, the difference and the proxy's own."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--upstream", choices=["stamp", "sim"], default="stamp")
    ap.add_argument("--streams", type=int, nargs="+", default=[1, 50])
    ap.add_argument("--rounds", type=int, default=4, help="rounds per side and stream count")
    ap.add_argument("--loop", choices=["auto", "uvloop", "asyncio"], default="auto",
                    help="the proxy's event loop (auto: uvloop's where installed)")  # fmt: skip
    ap.add_argument("--processes", type=int, default=1,
                    help="`agentload record --processes N`: proxy processes on the port")  # fmt: skip
    ap.add_argument("--serve-stamp", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.serve_stamp:
        asyncio.run(_serve_stamp(0))
        return
    up, up_url = start_stamp() if a.upstream == "stamp" else start_sim()
    stamped = a.upstream == "stamp"
    what = "one-way chunk delay" if stamped else "inter-chunk gap"
    try:
        print(f"upstream {a.upstream}; {EVENTS} events {GAP_S * 1000:.0f} ms apart per stream; "
              f"{a.rounds} rounds per side, alternating; client reads stamped by "
              f"{'the kernel (SO_TIMESTAMPNS)' if KERNEL else 'user space'}; figures in ms")  # fmt: skip
        print(
            f"{'streams':>7} {'side':>7} {'TTFT p50':>9} {'TTFT p99':>9} {what + ' p50':>26} {'p99':>8}"
        )
        for n in a.streams:
            out = tempfile.mkdtemp(prefix="bench-record-")
            rec, rec_url = start_record(up_url, out, a.loop, a.processes)
            procs = _proxy_processes(rec.pid)
            got: dict[str, tuple[list[float], list[float]]] = {
                "direct": ([], []),
                "proxy": ([], []),
            }
            cpu = 0.0
            try:
                for _ in range(a.rounds):
                    for side, url in (("direct", up_url), ("proxy", rec_url)):
                        c0 = _cpu(procs)
                        t, per = rounds_of(url, n, stamped, 2)
                        if side == "proxy":
                            cpu += _cpu(procs) - c0
                        got[side][0].extend(t)
                        got[side][1].extend(per)
            finally:
                own, loop = stop_record(rec, out)
            rows = {}
            for side, (t, per) in got.items():
                rows[side] = (pct(t, 50), pct(t, 99), pct(per, 50), pct(per, 99))
                print(
                    f"{n:>7} {side:>7} {rows[side][0]:>9.2f} {rows[side][1]:>9.2f} {rows[side][2]:>26.2f} {rows[side][3]:>8.2f}"
                )
            added = [p - d for p, d in zip(rows["proxy"], rows["direct"], strict=True)]
            goal = f"  (goal p99 < 1 ms: {_goal(added[3] * 1000)})" if stamped else ""
            print(
                f"{n:>7} {'added':>7} {added[0]:>9.2f} {added[1]:>9.2f} {added[2]:>26.2f} {added[3]:>8.2f}{goal}"
            )
            if own:
                print(
                    f"{n:>7} {'in proxy':>7}: each body read, callback -> send returned: p50 "
                    f"{own['p50'] / 1000:.3f}, p99 {own['p99'] / 1000:.3f}, max {own['max'] / 1000:.2f} "
                    f"over {own['reads']} reads (goal p99 < 1 ms: {_goal(own['p99'])})"
                )
            chunks = n * a.rounds * 3 * (EVENTS + 2)
            who = "process" if a.processes == 1 else f"{a.processes} processes"
            print(
                f"{n:>7} {'proxy':>7} CPU {cpu:.2f} s for {chunks} events: {cpu / chunks * 1e6:.0f} us per event "
                f"(the proxy's {who}, event loop {loop}; the recorder has its own); machine load average "
                f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
            )
    finally:
        up.terminate()
        up.wait(10)


if __name__ == "__main__":
    main()
