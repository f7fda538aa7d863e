"""Soak: does memory or the open-file count grow over a long run? (A benchmark, not a CI test.)

    python bench/bench_soak.py [--duration 30m] [--users 20] [--interval 5] [--profile mixed]
                               [--tracemalloc DIR] [--out DIR] [--json FILE]

Starts the embedded simulator as its own process (`python -m workload.sim`)
and `python -m workload.cli run --host <sim> --profile mixed ...` against it,
then samples every --interval seconds, with psutil, the RSS and open file
descriptors of the Locust side (the `agentload run` process and its children,
summed) and of the simulator. Prints a table (one row a minute), then per
process the growth after warm-up: a least-squares line through the second
half of the samples, in MiB/min and as a fraction of the fitted RSS at the
start of that half over the half's span. Verdict "flat" when that fraction is
under 10 % (and open files grow by fewer than 10), else "growing".

--tracemalloc DIR sets AGENTLOAD_TRACEMALLOC for both processes, which then
append their top growing allocation sites to DIR/trace.{locust,sim}.<pid>.txt
every --trace-interval seconds (see workload/memtrace.py). Tracing slows both
processes down; use it to find a leak, not to measure one.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import psutil  # noqa: E402

from workload.sim.launcher import SimProcess  # noqa: E402
from workload.stopping import die_with_parent, stop_child  # noqa: E402

FLAT_FRACTION = 0.10
FLAT_FDS = 10
MiB = 2**20


def parse_duration(s: str) -> float:
    s = s.strip().lower()
    mult = {"s": 1, "m": 60, "h": 3600}
    if s and s[-1] in mult:
        return float(s[:-1]) * mult[s[-1]]
    return float(s)


def tree_usage(pid: int) -> tuple[float, int, int] | None:
    """(RSS bytes, open fds, processes) summed over a process and its descendants."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return None
    rss = fds = n = 0
    for p in procs:
        try:
            rss += p.memory_info().rss
            fds += p.num_fds()
            n += 1
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return float(rss), fds, n


def fit(ts: list[float], ys: list[float]) -> tuple[float, float]:
    """Least-squares slope and intercept."""
    n = len(ts)
    mt, my = sum(ts) / n, sum(ys) / n
    var = sum((t - mt) ** 2 for t in ts)
    if var == 0:
        return 0.0, my
    slope = sum((t - mt) * (y - my) for t, y in zip(ts, ys, strict=True)) / var
    return slope, my - slope * mt


def growth(samples: list[dict], key: str, duration_s: float) -> dict:
    """Growth after warm-up: a line through the samples of the run's second half.

    Samples past the run's duration (Locust writing up, then exiting) are left out.
    """
    during = [s for s in samples if s[key] is not None and s["t"] <= duration_s]
    half = [s for s in during if s["t"] >= duration_s / 2]
    if len(half) < 3:
        return {"samples": len(half), "verdict": "too short"}
    ts = [s["t"] for s in half]
    rss = [s[key]["rss"] for s in half]
    fds = [s[key]["fds"] for s in half]
    slope, icpt = fit(ts, rss)
    fslope, _ = fit(ts, fds)
    span = ts[-1] - ts[0]
    start = icpt + slope * ts[0]
    frac = slope * span / start if start > 0 else 0.0
    fd_growth = fslope * span
    flat = frac < FLAT_FRACTION and fd_growth < FLAT_FDS
    return {
        "samples": len(half),
        "from_s": ts[0],
        "to_s": ts[-1],
        "rss_start_mib": start / MiB,
        "rss_end_mib": rss[-1] / MiB,
        "rss_max_mib": max(rss) / MiB,
        "mib_per_min": slope * 60 / MiB,
        "growth_fraction": frac,
        "fds_start": fds[0],
        "fds_end": fds[-1],
        "fds_per_min": fslope * 60,
        "verdict": "flat" if flat else "growing",
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", default="30m", help="run length (default 30m)")
    ap.add_argument("--users", type=int, default=20, help="concurrent users (default 20)")
    ap.add_argument("--interval", type=float, default=5.0, help="seconds between samples")
    ap.add_argument("--profile", default="mixed")
    ap.add_argument("--sim-preset", default="default")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--out", default=None, help="run directory (default: a temp dir, removed)")
    ap.add_argument("--json", default=None, help="write samples and verdicts here")
    ap.add_argument("--tracemalloc", default=None, metavar="DIR", help="trace allocations")
    ap.add_argument("--trace-interval", type=float, default=60.0)
    ap.add_argument("--trace-frames", type=int, default=1)
    ap.add_argument("--trace-which", choices=("both", "sim", "locust"), default="both")
    ap.add_argument("--run-arg", action="append", default=[], help="extra `agentload run` arg")
    args = ap.parse_args(argv)
    duration = parse_duration(args.duration)

    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (
        os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else ""
    )
    if args.tracemalloc:
        Path(args.tracemalloc).mkdir(parents=True, exist_ok=True)
        os.environ["AGENTLOAD_TRACEMALLOC"] = str(Path(args.tracemalloc) / "trace")
        os.environ["AGENTLOAD_TRACEMALLOC_INTERVAL"] = str(args.trace_interval)
        os.environ["AGENTLOAD_TRACEMALLOC_FRAMES"] = str(args.trace_frames)
        if args.trace_which != "sim":
            env.update(
                {k: v for k, v in os.environ.items() if k.startswith("AGENTLOAD_TRACEMALLOC")}
            )
        if args.trace_which == "locust":
            del os.environ["AGENTLOAD_TRACEMALLOC"]  # the simulator inherits os.environ

    tmp = None
    out = args.out
    if out is None:
        tmp = tempfile.TemporaryDirectory(prefix="soak-")
        out = str(Path(tmp.name) / "run")
    samples: list[dict] = []
    sim = SimProcess(preset=args.sim_preset, startup_timeout_s=60)
    sim.start()
    run = None
    try:
        cmd = [
            sys.executable, "-m", "workload.cli", "run",
            "--host", sim.url, "--profile", args.profile,
            "--users", str(args.users), "--duration", f"{duration:.0f}s",
            "--out", out, "--overwrite",
        ]  # fmt: skip
        if args.seed is not None:
            cmd += ["--seed", str(args.seed)]
        cmd += args.run_arg
        print("soak:", " ".join(cmd), flush=True)
        log = open(Path(out).parent / "soak-run.log", "wb")  # noqa: SIM115
        run = subprocess.Popen(
            cmd,
            cwd=str(ROOT),
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            preexec_fn=die_with_parent(),  # noqa: PLW1509
        )
        t0 = time.monotonic()
        deadline = t0 + duration + 300
        print(f"{'t':>6} {'locust MiB':>11} {'fds':>5} {'procs':>5} {'sim MiB':>9} {'fds':>5}")
        next_row = 0.0
        while run.poll() is None and time.monotonic() < deadline:
            t = time.monotonic() - t0
            lu = tree_usage(run.pid)
            su = tree_usage(sim.pid) if sim.pid else None
            s = {
                "t": t,
                "locust": {"rss": lu[0], "fds": lu[1], "procs": lu[2]} if lu else None,
                "sim": {"rss": su[0], "fds": su[1]} if su else None,
            }
            samples.append(s)
            if t >= next_row and lu and su:
                print(
                    f"{t:6.0f} {lu[0] / MiB:11.1f} {lu[1]:5d} {lu[2]:5d} "
                    f"{su[0] / MiB:9.1f} {su[1]:5d}",
                    flush=True,
                )
                next_row = t + 60
            time.sleep(max(0.0, t0 + len(samples) * args.interval - time.monotonic()))
        rc = run.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if run is not None and run.poll() is None:
            stop_child(run, timeout_s=30)
        sim.stop()
    verdicts = {k: growth(samples, k, duration) for k in ("locust", "sim")}
    print(f"\nexit code of agentload run: {rc}")
    for k, g in verdicts.items():
        if "mib_per_min" not in g:
            print(f"{k:7} {g['verdict']}")
            continue
        print(
            f"{k:7} after warm-up ({g['from_s']:.0f}-{g['to_s']:.0f} s): "
            f"RSS {g['rss_start_mib']:.1f} -> {g['rss_end_mib']:.1f} MiB, "
            f"{g['mib_per_min']:+.2f} MiB/min ({g['growth_fraction'] * 100:+.1f} % over the span), "
            f"fds {g['fds_start']} -> {g['fds_end']} ({g['fds_per_min']:+.2f}/min): {g['verdict']}"
        )
    if args.json:
        Path(args.json).write_text(
            json.dumps({"args": vars(args), "verdicts": verdicts, "samples": samples}, indent=1)
        )
    if tmp is not None:
        tmp.cleanup()
    return 0 if all(g["verdict"] == "flat" for g in verdicts.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
