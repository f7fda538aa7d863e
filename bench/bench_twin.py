"""Fidelity of a calibrated simulator twin: the same held-out load against a server and its twin.

    python bench/bench_twin.py --host http://127.0.0.1:PORT --twin twin.yaml [--seconds 20]

The twin is `python -m workload.sim --preset-file twin.yaml` in a child process. The load is
not the calibration sweep: closed-loop streams of ~300-token prompts and 48 output tokens at
three concurrencies (light 1, knee 4, overload 12). Prints TTFT, ITL and E2E p50/p95 of both
and the twin's relative error; the target is within 15 %, and a miss says "not met".
Loopback only; every request has a timeout; each level runs a bounded number of requests.
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from workload.sim.calibrate import discover, stream_once

LEVELS = (("light", 1), ("knee", 4), ("overload", 12))
TARGET = 0.15


def pct(xs: list[float], q: float) -> float:
    """The q-quantile (0..1) of xs, by nearest rank."""
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def load(url: str, users: int, seconds: float, seed: int) -> dict[str, list[float]]:
    """Closed-loop streams for about `seconds`; TTFT, ITL and E2E samples in ms."""
    t = discover(url)
    out: dict[str, list[float]] = {"ttft": [], "itl": [], "e2e": []}
    deadline = time.perf_counter() + seconds

    def user(i: int) -> None:
        rng = random.Random(seed * 1000 + i)
        for _ in range(200):  # bounded even if the server is very fast
            if time.perf_counter() > deadline:
                return
            text = f"n{rng.getrandbits(48)} " + " ".join(
                f"w{rng.randrange(10_000)}" for _ in range(120)
            )
            ttft, arrivals, _ = stream_once(t, text, 48)
            out["ttft"].append(ttft * 1e3)
            out["e2e"].append(arrivals[-1] * 1e3)
            out["itl"] += [(b - a) * 1e3 for a, b in zip(arrivals, arrivals[1:], strict=False)]

    with ThreadPoolExecutor(max_workers=users) as pool:
        list(pool.map(user, range(users)))
    return out


def start_twin(path: str) -> tuple[subprocess.Popen[str], str]:
    """The twin in a child process; (process, URL)."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "workload.sim",
            "--preset-file",
            path,
            "--port",
            "0",
            "--set",
            "output_len_mean=48",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    return proc, line.rsplit(" ", 1)[-1].strip()


def main() -> int:
    """Run every level against the server and the twin; print the table."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--host", required=True)
    p.add_argument("--twin", required=True)
    p.add_argument("--seconds", type=float, default=20.0)
    args = p.parse_args()
    proc, twin_url = start_twin(args.twin)
    try:
        print("| level | metric | server p50 | twin p50 | error | server p95 | twin p95 | error |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- |")
        for name, users in LEVELS:
            real = load(args.host, users, args.seconds, 1)
            twin = load(twin_url, users, args.seconds, 1)
            for metric in ("ttft", "itl", "e2e"):
                cells = []
                for q in (0.5, 0.95):
                    a, b = pct(real[metric], q), pct(twin[metric], q)
                    err = (b - a) / a if a else float("nan")
                    miss = "" if abs(err) <= TARGET else " not met"
                    cells += [f"{a:.1f}", f"{b:.1f}", f"{err:+.0%}{miss}"]
                print(f"| {name} ({users}) | {metric} ms | " + " | ".join(cells) + " |")
            sys.stdout.flush()
    finally:
        proc.terminate()
        proc.wait(10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
