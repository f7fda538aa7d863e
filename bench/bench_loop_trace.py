"""Why is a first token stamped late? Trace agentload's event loop while it drives the timed server.

Runs `agentload run` (bench/generator_profile.yaml) against bench/_timed_server.py with
bench/_looptrace/sitecustomize.py loaded into the Locust process, then matches each request's
recorded first-token time with the server's. For every request stamped more than --late-ms
late it says what the process did meanwhile:

* heartbeat gaps: a 1 ms sleeper that woke late, with the CPU the process used in that gap
  (CPU near the gap: the loop was busy; near 0: the process was off CPU, a busy machine);
* greenlet slices: stretches of > 0.2 ms CPU between two switches, by where they yielded
  (so "connectionpool.py:_is_socket_alive < ... client.py:exchange" is a user's work from
  the end of one request to sending the next);
* GC collections of generation 2 (wall and CPU ms);
* the request's first body reads: (call, return, kernel receive stamp) in ms from the true
  first token, bytes and content events. A read that returns two content events with the
  second's stamp is the "merged chunk" case: it ran more than one ITL late.

Prints figures; asserts nothing. Tracing costs CPU (a callback per greenlet switch), so the
run is a little slower than an untraced one.

    python bench/bench_loop_trace.py --users 200 --duration 15
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import pickle
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _timed_server import TimedServer

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--users", type=int, default=200)
    ap.add_argument("--duration", type=float, default=15.0, help="seconds")
    ap.add_argument("--itl", type=float, default=0.02, help="server's inter-token gap (s)")
    ap.add_argument("--late-ms", type=float, default=5.0, help="what counts as late (ms)")
    ap.add_argument("--show", type=int, default=8, help="late requests to detail")
    args = ap.parse_args()
    srv = TimedServer(ttft_s=0.2, itl_s=args.itl, tokens=100).start()
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "trace.pkl"
        path = os.pathsep.join(
            [str(BENCH / "_looptrace"), str(ROOT), os.environ.get("PYTHONPATH", "")]
        )
        env = dict(os.environ, AGENTLOAD_LOOP_TRACE=str(trace), PYTHONPATH=path)
        t0 = time.time()
        try:
            child = subprocess.run(
                [
                    sys.executable, "-m", "workload.cli", "run",
                    "--host", f"http://127.0.0.1:{srv.port}",
                    "--profile", str(BENCH / "generator_profile.yaml"),
                    "--users", str(args.users), "--spawn-rate", str(args.users),
                    "--duration", f"{args.duration:g}s", "--out", str(Path(tmp) / "run"),
                    "--scrape-interval", "0",
                ],
                env=env, capture_output=True, text=True, timeout=args.duration + 180,
            )  # fmt: skip
        finally:
            timings = srv.stop()
        if child.returncode != 0 or not trace.exists():
            print(f"agentload run exited {child.returncode}: {child.stderr[-500:]}")
            return 1
        d = pickle.loads(trace.read_bytes())
        rows = [json.loads(x) for x in (Path(tmp) / "run" / "requests.jsonl").open()]
    report(rows, timings, d, t0, args)
    return 0


def report(rows: list[dict], timings: dict, d: dict, t0: float, args: argparse.Namespace) -> None:
    firsts = []
    for r in rows:
        t = timings.get(r["request_id"])
        if t and t[1] and r.get("ttft_ms") is not None:
            client = r["t_start"] + r["ttft_ms"] / 1e3
            firsts.append((client, (client - t[1] / 1e9) * 1e3, r["request_id"], t[1]))
    errs = np.asarray([f[1] for f in firsts])
    late = sorted(f for f in firsts if f[1] > args.late_ms)
    print(
        f"{args.users} users, ITL {args.itl * 1e3:g} ms: {len(rows)} requests, {len(firsts)} "
        f"matched; TTFT error p50 {np.percentile(errs, 50):.2f} p99 {np.percentile(errs, 99):.2f} "
        f"max {errs.max():.2f} ms; {len(late)} stamped more than {args.late_ms:g} ms late"
    )
    gcs = d["gc"]
    gen2 = [g for g in gcs if g[1] == 2]
    print(
        f"GC: {collections.Counter(g[1] for g in gcs)}; generation 2 at (s, wall ms, CPU ms): "
        + ", ".join(f"({g[0] - t0:.1f}, {g[2]:.1f}, {g[3]:.1f})" for g in gen2)
    )
    hb = d["heartbeat"]
    gaps = [
        (a[0], b[0], (b[0] - a[0]) * 1e3, (b[1] - a[1]) * 1e3)
        for a, b in zip(hb, hb[1:], strict=False)
        if b[0] - a[0] > 0.005
    ]
    busy = [g for g in gaps if g[3] >= 0.5 * g[2]]
    print(
        f"heartbeat: {len(hb)} wake-ups, {len(gaps)} more than 5 ms late: {len(busy)} with the "
        f"loop busy (CPU >= half the gap), {len(gaps) - len(busy)} with the process off CPU"
    )
    long = [g for g in busy if g[3] >= 10]
    inside: dict[str, float] = collections.Counter()
    for s in d["slices"]:
        if any(g[0] <= s[0] <= g[1] for g in long):
            inside[s[3]] += s[2]
    cpu = sum(g[3] for g in long)
    print(
        f"  busy gaps of >= 10 ms CPU: {len(long)}, {cpu:.0f} ms CPU; of it in slices > 0.2 ms "
        f"(the rest: many shorter ones, mostly reads): "
        + "; ".join(f"{v:.0f} ms {k[:60]}" for k, v in inside.most_common(4))
    )
    by: dict[str, list[float]] = collections.defaultdict(list)
    for s in d["slices"]:
        by[s[3]].append(s[2])
    print("greenlet slices > 0.2 ms CPU, by where they yielded (count, CPU ms total / p99 / max):")
    when: dict[str, list[float]] = collections.defaultdict(list)
    for s in d["slices"]:
        when[s[3]].append(s[0] - t0)
    for where, v in sorted(by.items(), key=lambda kv: -sum(kv[1]))[:10]:
        a, w = np.asarray(v), np.asarray(when[where])
        print(
            f"  {len(a):6d} {a.sum():8.1f} {np.percentile(a, 99):6.2f} {a.max():6.2f}  {where} "
            f"(at {w.min():.1f}-{w.max():.1f} s)"
        )
    reads = d["reads"]
    for client, err, rid, true_ns in late[: args.show]:
        tf = true_ns / 1e9
        ov = [
            f"{(g[0] - tf) * 1e3:+.1f}: {g[2]:.1f} wall/{g[3]:.1f} cpu"
            for g in gaps
            if g[1] > tf and g[0] < client
        ]
        sl = [
            f"{(s[0] - tf) * 1e3:+.1f}: {s[2]:.1f} cpu {s[3][:40]}"
            for s in d["slices"]
            if tf - 0.005 < s[0] < client + 0.005 and s[2] > 1.0
        ]
        g2 = [
            f"{(g[0] - tf) * 1e3:+.1f}: {g[3]:.1f} cpu" for g in gen2 if tf - 0.05 < g[0] < client
        ]
        rd = [
            f"({(a - true_ns) / 1e6:+.1f}, {(b - true_ns) / 1e6:+.1f}, "
            f"{'%+.1f' % ((c - true_ns) / 1e6) if c else 'user'}; {n} B, {k} content)"
            for a, b, c, n, k in reads.get(rid, [])[:3]
        ]
        print(f"late {err:6.1f} ms at {client - t0:5.2f} s")
        print(f"    heartbeat gaps {ov[:3]}; slices > 1 ms {sl[:3]}; GC gen 2 {g2}")
        print(f"    first reads {rd}")


if __name__ == "__main__":
    raise SystemExit(main())
