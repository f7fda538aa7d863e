"""Soak of `agentload run` as a user starts it: every process on its own. (A benchmark, not a CI test.)

    python bench/bench_soak_processes.py [--duration 30m] [--users 20] [--interval 30]
                                         [--window 15m] [--out DIR] [--json FILE]

Runs `python -m workload.cli run --duration D --users N` with no --host, so
`agentload run` starts the embedded simulator itself, exactly as the README's
first command does. Every --interval seconds it samples, with psutil, the RSS
and open file descriptors of each process in that command's tree separately
(the `agentload run` parent, the simulator child, the Locust child and any
worker), prints one row per sample, and at the end fits a least-squares line
through each process's samples of the last --window of the run (Locust
writing up after the run is left out).

Target (docs/robustness.md): RSS growth under 0.5 MiB/min for every process
and open files flat (the fitted line rises by fewer than 2 over the window).
Prints "met" or "not met" per process; exit 0 only when every process meets it.
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
from bench_soak import fit, parse_duration  # noqa: E402 - the same duration and least-squares fit

from workload.stopping import die_with_parent, stop_child  # noqa: E402

MiB = 2**20
TARGET_MIB_PER_MIN = 0.5
FLAT_FDS = 2


def role(p: psutil.Process, root_pid: int) -> str:
    """A short name for a process of the tree: parent, sim, locust, worker-N."""
    if p.pid == root_pid:
        return "agentload run"
    try:
        cmd = " ".join(p.cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return f"pid {p.pid}"
    if "workload.sim" in cmd:
        return "simulator"
    if "--worker" in cmd:
        return f"locust worker {p.pid}"
    if "locust" in cmd or "--agent-spec-file" in cmd:
        return "locust"
    return f"{Path(p.cmdline()[0]).name} {p.pid}"


def sample(root_pid: int) -> dict[str, dict[str, float]]:
    """{role: {rss, fds, pid}} for each live process of the tree."""
    try:
        root = psutil.Process(root_pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return {}
    out: dict[str, dict[str, float]] = {}
    for p in procs:
        try:
            out[role(p, root_pid)] = {
                "rss": float(p.memory_info().rss),
                "fds": float(p.num_fds()),
                "pid": float(p.pid),
            }
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return out


def judge(samples: list[dict], name: str, lo: float, hi: float) -> dict:
    pts = [(s["t"], s["procs"][name]) for s in samples if lo <= s["t"] <= hi and name in s["procs"]]
    if len(pts) < 3:
        return {"samples": len(pts), "verdict": "too few samples"}
    ts = [t for t, _ in pts]
    rss = [v["rss"] for _, v in pts]
    fds = [v["fds"] for _, v in pts]
    mib_min = fit(ts, rss)[0] * 60 / MiB
    fd_rise = fit(ts, fds)[0] * (ts[-1] - ts[0])
    ok = mib_min < TARGET_MIB_PER_MIN and fd_rise < FLAT_FDS
    return {
        "samples": len(pts),
        "from_s": ts[0],
        "to_s": ts[-1],
        "rss_first_mib": rss[0] / MiB,
        "rss_last_mib": rss[-1] / MiB,
        "mib_per_min": mib_min,
        "fds_first": fds[0],
        "fds_last": fds[-1],
        "fds_min": min(fds),
        "fds_max": max(fds),
        "fd_rise": fd_rise,
        "verdict": "met" if ok else "not met",
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", default="30m")
    ap.add_argument("--users", type=int, default=20)
    ap.add_argument("--interval", type=float, default=30.0, help="seconds between samples")
    ap.add_argument("--window", default="15m", help="judge growth over the run's last WINDOW")
    ap.add_argument("--out", default=None, help="run directory (default: a temp dir, removed)")
    ap.add_argument("--json", default=None, help="write samples and verdicts here")
    ap.add_argument("--run-arg", action="append", default=[], help="extra `agentload run` arg")
    args = ap.parse_args(argv)
    duration = parse_duration(args.duration)
    window = parse_duration(args.window)

    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (
        os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else ""
    )
    tmp = None
    out = args.out
    if out is None:
        tmp = tempfile.TemporaryDirectory(prefix="soak-")
        out = str(Path(tmp.name) / "run")
    cmd = [
        sys.executable, "-m", "workload.cli", "run",
        "--users", str(args.users), "--duration", f"{duration:.0f}s",
        "--out", out, "--overwrite", *args.run_arg,
    ]  # fmt: skip
    print("soak:", " ".join(cmd), flush=True)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
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
    samples: list[dict] = []
    t0 = time.monotonic()
    deadline = t0 + duration + 300
    try:
        while run.poll() is None and time.monotonic() < deadline:
            t = time.monotonic() - t0
            procs = sample(run.pid)
            samples.append({"t": t, "procs": procs})
            row = "  ".join(
                f"{k}: {v['rss'] / MiB:.1f} MiB {v['fds']:.0f} fds"
                for k, v in sorted(procs.items())
            )
            print(f"{t:6.0f}s  {row}", flush=True)
            time.sleep(max(0.0, t0 + len(samples) * args.interval - time.monotonic()))
        rc = run.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if run.poll() is None:
            stop_child(run, timeout_s=30)
    names = sorted({k for s in samples for k in s["procs"]})
    lo, hi = max(0.0, duration - window), duration
    verdicts = {n: judge(samples, n, lo, hi) for n in names}
    print(f"\nexit code of agentload run: {rc}")
    print(
        f"growth over {lo:.0f}-{hi:.0f} s (target: < {TARGET_MIB_PER_MIN} MiB/min, "
        f"open files rising by fewer than {FLAT_FDS}):"
    )
    for n, g in verdicts.items():
        if "mib_per_min" not in g:
            print(f"  {n:16} {g['verdict']}")
            continue
        print(
            f"  {n:16} RSS {g['rss_first_mib']:.1f} -> {g['rss_last_mib']:.1f} MiB, "
            f"{g['mib_per_min']:+.3f} MiB/min; fds {g['fds_first']:.0f} -> {g['fds_last']:.0f} "
            f"(min {g['fds_min']:.0f}, max {g['fds_max']:.0f}, fitted rise {g['fd_rise']:+.1f}): "
            f"{g['verdict']}"
        )
    if args.json:
        Path(args.json).write_text(
            json.dumps({"args": vars(args), "verdicts": verdicts, "samples": samples}, indent=1)
        )
    if tmp is not None:
        tmp.cleanup()
    return 0 if verdicts and all(g["verdict"] == "met" for g in verdicts.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
