"""How close is agentload's per-request TTFT to the server's own clock?

The known-timing server of bench/_timed_server.py runs in its own process (single-threaded
asyncio, so its stamps are not delayed by a GIL shared with many handler threads). Per
X-Request-Id it stamps when it finished reading the request and when it wrote the first
content chunk (a role-only chunk goes out at once, content after --delay). An `agentload run`
subprocess drives N concurrent streaming users against it; we compare each request's recorded
ttft_ms with the server's (first content written - request read). The client's TTFT also holds
sending the request and the loopback hop, so it is expected to be a little larger.
bench/bench_generator.py measures the same at rising concurrency, with CPU cost and a floor.
Prints figures; asserts nothing.

    python bench/bench_ttft_accuracy.py --users 50 --duration 30
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from _timed_server import TimedServer

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


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--users", type=int, default=50)
    ap.add_argument("--duration", type=int, default=30)
    ap.add_argument("--delay", type=float, default=0.2, help="server's content delay (s)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        prof = Path(tmp) / "bench.yaml"
        prof.write_text(PROFILE)
        out = Path(tmp) / "run"
        srv = TimedServer(ttft_s=args.delay, itl_s=0.02, tokens=20).start()
        port = srv.port
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
            timings = srv.stop()
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
