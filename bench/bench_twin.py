"""Fidelity of a calibrated simulator twin: the same held-out load against a server and its twin.

    python bench/bench_twin.py --host http://127.0.0.1:PORT --twin twin.yaml [--seconds 20]
        [--runs N] [--noise] [--self]
    python bench/bench_twin.py --host http://127.0.0.1:PORT --recalibrate KEY=VALUE,... --runs N

The twin is `python -m workload.sim --preset-file twin.yaml` in a child process. The load is
not the calibration sweep: closed-loop streams of 300-token prompts (each side's word count
probed, since the twin's tokenizer is not the server's) and 48 output tokens at three
concurrencies (light 1, knee 4, overload 12). Prints TTFT, ITL and E2E p50/p95 of both
and the twin's relative error; the target is within 15 %, and a miss says "not met". ITL is
the gap between content chunks (one per engine step; a step's accepted drafts share it), and
the chunk counts per request of both are printed too. The twin runs without instance noise
unless --noise; each run prints the host's load average before and after it. --self compares
the server with a second pass of the same load on itself instead of the twin: the server's
own repeatability, the floor under any twin's error on the same host. --recalibrate fits a
fresh twin just before each run (settings after it are given to the calibration, as
`agentload sim calibrate --set` takes them), for a host whose speed drifts over minutes.
Loopback only; every request has a timeout; each level runs a bounded number of requests.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import yaml

from workload.sim.calibrate import Target, calibrate, discover, stream_once

LEVELS = (("light", 1), ("knee", 4), ("overload", 12))
TARGET = 0.15
# Every prompt is new to the server: its prefix cache outlives a pass, a run and this
# process, while the twin starts empty each run, so a prompt the server saw before (the
# same seed in a later pass, run or invocation) would be a cache hit on one side only.
NONCE = os.urandom(8).hex()
PROMPT_TOKENS = 300  # both sides get prompts of this many tokens, whatever their tokenizer


def words_for(t: Target, tokens: int) -> int:
    """How many of the bench's words make a prompt of about `tokens` tokens on `t`."""
    probe = "n0 " + " ".join(f"w{i * 37 % 10_000}" for i in range(200))
    _, _, got = stream_once(t, probe, 1)
    return max(1, round(tokens / (max(got, 1) / 201.0)))


def pct(xs: list[float], q: float) -> float:
    """The q-quantile (0..1) of xs, by nearest rank."""
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def load(url: str, users: int, seconds: float, seed: int) -> dict[str, list[float]]:
    """Closed-loop streams for about `seconds`; TTFT, ITL and E2E samples in ms."""
    t = discover(url)
    words = words_for(t, PROMPT_TOKENS)
    out: dict[str, list[float]] = {"ttft": [], "itl": [], "e2e": [], "chunks": [], "prompt": []}
    deadline = time.perf_counter() + seconds

    def user(i: int) -> None:
        rng = random.Random(f"{NONCE}:{seed}:{i}")
        for _ in range(200):  # bounded even if the server is very fast
            if time.perf_counter() > deadline:
                return
            text = f"n{rng.getrandbits(48)} " + " ".join(
                f"w{rng.randrange(10_000)}" for _ in range(words)
            )
            ttft, arrivals, prompt = stream_once(t, text, 48)
            out["chunks"].append(float(len(arrivals)))
            out["prompt"].append(float(prompt))
            out["ttft"].append(ttft * 1e3)
            out["e2e"].append(arrivals[-1] * 1e3)
            out["itl"] += [(b - a) * 1e3 for a, b in zip(arrivals, arrivals[1:], strict=False)]

    with ThreadPoolExecutor(max_workers=users) as pool:
        list(pool.map(user, range(users)))
    return out


def start_twin(
    path: str, noise: bool, sets: tuple[str, ...] = ("output_len_mean=48",)
) -> tuple[subprocess.Popen[str], str]:
    """The twin in a child process (instance noise only if `noise`, `sets` as `--set` each);
    (process, URL). The default set is this bench's 48-token replies."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "workload.sim",
            "--preset-file",
            path,
            "--port",
            "0",
            *(a for kv in sets for a in ("--set", kv)),
            *(() if noise else ("--no-instance-noise",)),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    return proc, line.rsplit(" ", 1)[-1].strip()


def header(label: str) -> None:
    """The head of a run's markdown table; `label` names the second side."""
    print(
        f"| level | metric | server p50 | {label} p50 | error | server p95 | {label} p95 | error |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")


def cells(a: float, b: float) -> list[str]:
    """Server figure, the other side's, and its relative error ("not met" outside TARGET)."""
    err = (b - a) / a if a else float("nan")
    miss = "" if abs(err) <= TARGET else " not met"
    return [f"{a:.1f}", f"{b:.1f}", f"{err:+.0%}{miss}"]


def table(
    real: dict[str, dict[str, list[float]]], twin: dict[str, dict[str, list[float]]], label: str
) -> None:
    """The markdown table of one run; `label` names the second side ("twin" or "again")."""
    header(label)
    for name, users in LEVELS:
        a_side, b_side = real[name], twin[name]
        for metric in ("ttft", "itl", "e2e"):
            row = [
                c
                for q in (0.5, 0.95)
                for c in cells(pct(a_side[metric], q), pct(b_side[metric], q))
            ]
            print(f"| {name} ({users}) | {metric} ms | " + " | ".join(row) + " |")
    for name, users in LEVELS:
        a_side, b_side = real[name], twin[name]
        print(
            f"{name} ({users}): requests {len(a_side['e2e'])} / {len(b_side['e2e'])}, "
            f"chunks per request p50 {pct(a_side['chunks'], 0.5):.0f} / "
            f"{pct(b_side['chunks'], 0.5):.0f}, prompt tokens p50 "
            f"{pct(a_side['prompt'], 0.5):.0f} / {pct(b_side['prompt'], 0.5):.0f} (server / {label})"
        )


def main() -> int:
    """Run every level against the server and the twin, `--runs` times; print the tables."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--host", required=True)
    p.add_argument("--twin", help="preset file of the twin (else --recalibrate)")
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--runs", type=int, default=1, help="repeat the whole comparison N times")
    p.add_argument("--noise", action="store_true", help="instance noise on in the twin")
    p.add_argument("--self", action="store_true", help="the server against a second pass on itself")
    p.add_argument(
        "--recalibrate",
        metavar="KEY=VALUE,...",
        nargs="?",
        const="",
        help="calibrate the server just before each run (a host whose speed drifts over "
        "minutes); optional comma-separated settings given to the calibration",
    )
    args = p.parse_args()
    if args.twin is None and args.recalibrate is None:
        p.error("give --twin FILE or --recalibrate")
    given = [x for x in (args.recalibrate or "").split(",") if x]
    with tempfile.TemporaryDirectory(prefix="bench-twin-") as tmp:
        for run in range(args.runs):
            path = args.twin
            if args.recalibrate is not None:
                path = os.path.join(tmp, f"twin{run}.yaml")
                with open(path, "w", encoding="utf-8") as fh:
                    yaml.safe_dump(calibrate(args.host, run, given), fh, sort_keys=False)
            one_run(args, path, run)
    return 0


def one_run(args: argparse.Namespace, path: str, run: int) -> None:
    """One comparison at every level; prints its table."""
    proc, twin_url = start_twin(path, args.noise)
    other = args.host if args.self else twin_url
    try:
        before = os.getloadavg()[0]
        real: dict[str, dict[str, list[float]]] = {}
        twin: dict[str, dict[str, list[float]]] = {}
        for i, (name, users) in enumerate(LEVELS):
            seed = 1 + 10 * run + i  # both sides get the same prompts, new to each
            real[name] = load(args.host, users, args.seconds, seed)
            # --self: a second pass of the same shape with other prompts (the first pass's
            # would all be in the server's cache)
            twin[name] = load(other, users, args.seconds, seed + 5 if args.self else seed)
        what = "server again" if args.self else "twin"
        fresh = ", calibrated just before" if args.recalibrate is not None else ""
        print(
            f"run {run + 1}/{args.runs}: {what}{fresh}; twin instance noise "
            f"{'on' if args.noise else 'off'}"
            f", load average {before:.1f} -> {os.getloadavg()[0]:.1f}"
        )
        table(real, twin, "again" if args.self else "twin")
        sys.stdout.flush()
    finally:
        proc.terminate()
        proc.wait(10)


if __name__ == "__main__":
    sys.exit(main())
