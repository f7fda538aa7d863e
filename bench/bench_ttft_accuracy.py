"""How close is agentload's per-request TTFT to the server's own clock?

A known-timing OpenAI-compatible server (tests/e2e/known_server.py, threads in
this process) stamps, per X-Request-Id, when it finished reading the request and
when it wrote the first content chunk (after a role-only chunk sent at once). An
`agentload run` subprocess drives N concurrent streaming users against it; we
compare each request's recorded ttft_ms with the server's (first content - read).
Both clocks are CLOCK_MONOTONIC-based perf counters; the client's TTFT also
includes sending the request and the loopback hop, so it is expected to be a
little larger. Prints figures; asserts nothing.

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

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.e2e.known_server import KnownServer  # noqa: E402

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
        with KnownServer(content_delay_s=args.delay, gap_s=0.02, chunks=20) as srv:
            proc = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "workload.cli",
                    "run",
                    "--host",
                    srv.url,
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
            timings = dict(srv.timings)
            seen = set(srv.seen)
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
    recorded = {r["request_id"] for r in rows}
    print(
        f"exit {proc.returncode}; users {args.users}; requests served {len(seen)}, "
        f"recorded {len(rows)}, served-but-missing {len(seen - recorded)}"
    )
    if len(diffs):
        p = np.percentile(diffs, [50, 90, 99])
        print(
            f"client TTFT - server TTFT over {len(diffs)} ok requests: "
            f"p50 {p[0]:.2f} ms, p90 {p[1]:.2f} ms, p99 {p[2]:.2f} ms, max {diffs.max():.2f} ms, "
            f"min {diffs.min():.2f} ms"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
