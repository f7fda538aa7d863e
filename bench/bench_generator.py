"""How much CPU does agentload spend per SSE event, and how true are its stamps under load?

A known-timing server (bench/_timed_server.py: asyncio, its own process, true TTFT 200 ms,
ITL 20 ms, 100 output tokens by default) stamps per X-Request-Id when each request arrived
and when its first content chunk went out. Two generators drive it at rising concurrency,
each in its own process, each bounded by a duration and a request cap:

* ``agentload``: ``python -m workload.cli run`` with bench/generator_profile.yaml (every step
  a plain streamed chat request of fixed size, no think time, no tools);
* ``raw``: bench/_raw_client.py, a minimal asyncio raw-socket client: the floor.

Per generator and concurrency it prints: events/s of the run, SSE events and requests per
generator CPU-second, CPU seconds per 1,000 events (the whole child process tree, start-up
included, from getrusage of the waited child) and the ratio to the raw floor at the same
concurrency, the same "steady" (less the start-up and shut-down CPU of a one-second,
one-user run of that generator), peak RSS of the tree (psutil polling), and per request,
matched by request id: TTFT error (client TTFT minus the server's first-content-written minus
request-read; it also holds the request's hop to the server), receive lag (client's
first-content wall time minus the server's write time: what the client alone adds) and ITL
error (client minus server mean gap; max-gap error as well), each p50/p99/max in ms. A generator saturates
at the first concurrency where it uses >= 0.9 of a core or its TTFT error p99 passes 25 ms.
The server's own CPU share is printed too: near a full core its stamps lag and coalesce
chunks, and the figures at that concurrency say more about the server than the generator.

    python bench/bench_generator.py                  # 50, 100, 200, 400 users, 20 s each
    python bench/bench_generator.py --quick          # 50 and 200 users, 8 s each
    python bench/bench_generator.py --sessions 2000  # RSS per 1,000 sessions in tool pauses
    python bench/bench_generator.py --workers 1 2 --users 200   # events/s with 1 and 2 workers

``--sessions N`` runs agentload with a profile whose sessions spend nearly all their time in
tool pauses and think time, and reports the RSS each 1,000 live sessions add over a 10-user
baseline (the whole process: users, planner state, gevent, Locust). bench/bench_sessions.py
gives the planner-only figure for comparison.

``--workers N ...`` runs agentload alone at each worker count (``agentload run --workers N``,
Locust's ``--processes``) and prints events/s and the scaling against the first count: with N
free cores a run should reach >= 0.9 x N (issue 16). The timed server is one process: its own
CPU share is printed, and near a full core it, not agentload, is the limit. Where the cores
are not free, the events per CPU-second in the run's steady middle (master included) and the
projected scaling ``N x that / the first's`` say what N free cores would give.

Figures depend on the machine and its load; nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import psutil
from _timed_server import TimedServer

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
PROFILE = BENCH / "generator_profile.yaml"
STEPS = 10  # steps per session in generator_profile.yaml
SATURATED_CORE = 0.9
SATURATED_TTFT_P99_MS = 25.0

SESSIONS_PROFILE = """
schema_version: 1
description: Idle-session memory bench - agents that mostly wait on tools and people
seed: 3
tools:
  run_tests:
    description: Run the test suite and return the summary.
    parameters:
      type: object
      properties: {target: {type: string}}
      required: [target]
    latency_s: 600
    result_tokens: 200
classes:
  agent:
    weight: 1
    steps: 20
    system_prompt: {tokens: 1000, share: global}
    tools: {run_tests: 1}
    tool_call_probability: 1.0
    user_turn: 100
    output: {tokens: 5}
    think_time_s: {dist: uniform, low: 0, high: %(spread)s}
"""


@dataclass
class ChildRun:
    """What one generator process cost: wall, CPU of the tree (start-up included), peak RSS."""

    returncode: int
    started_wall: float  # time.time() at launch; rss_samples count from here
    wall_s: float
    cpu_s: float
    peak_rss_mib: float
    rss_samples: list[tuple[float, float]] = field(default_factory=list)  # (t since start, MiB)
    output: str = ""
    # (t, {process name: CPU s so far}) per process of the tree, named by its place in it
    proc_samples: list[tuple[float, dict[str, float]]] = field(default_factory=list)


def run_child(cmd: list[str], timeout_s: float, poll_s: float = 0.1) -> ChildRun:
    """Run ``cmd``, polling its process tree's RSS; CPU comes from getrusage(RUSAGE_CHILDREN)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started_wall = time.time()
    t0 = time.monotonic()
    peak, samples, proc_samples = 0.0, [], []
    with tempfile.TemporaryFile() as log:
        proc = psutil.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=_env())
        try:
            while proc.poll() is None:
                if time.monotonic() - t0 > timeout_s:
                    proc.kill()
                    break
                try:
                    tree = [proc, *proc.children(recursive=True)]
                    rss = sum(p.memory_info().rss for p in tree) / 2**20
                    per = {_role(proc, p): sum(p.cpu_times()[:2]) for p in tree}
                    proc_samples.append((time.monotonic() - t0, per))
                except psutil.Error:
                    rss = 0.0
                peak = max(peak, rss)
                samples.append((time.monotonic() - t0, rss))
                time.sleep(poll_s)
        finally:
            proc.wait()
        wall = time.monotonic() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        log.seek(0)
        output = log.read().decode(errors="replace")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return ChildRun(proc.returncode, started_wall, wall, cpu, peak, samples, output, proc_samples)


def _role(root: psutil.Process, p: psutil.Process) -> str:
    """A process's place in the generator's tree: cli (the command), locust (its Locust
    process: the master with --workers), worker-PID (Locust's forked workers)."""
    if p.pid == root.pid:
        return "cli"
    try:
        parent = p.ppid()
    except psutil.Error:
        return f"proc-{p.pid}"
    return "locust" if parent == root.pid else f"worker-{p.pid}"


def _env() -> dict[str, str]:
    import os

    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def agentload_cmd(
    port: int,
    users: int,
    duration_s: float,
    sessions: int,
    out: Path,
    profile: Path = PROFILE,
    workers: int = 1,
) -> list[str]:
    """`agentload run` bounded by duration and by sessions per user (a request cap)."""
    extra = ["--workers", str(workers)] if workers > 1 else []
    return [
        sys.executable, "-m", "workload.cli", "run",
        "--host", f"http://127.0.0.1:{port}",
        "--profile", str(profile),
        "--users", str(users), "--spawn-rate", str(users),
        "--duration", f"{duration_s:g}s",
        "--sessions-per-user", str(sessions),
        "--scrape-interval", "0",
        "--max-error-ratio", "1",
        "--out", str(out), *extra,
    ]  # fmt: skip


def raw_cmd(port: int, users: int, duration_s: float, cap: int, out: Path) -> list[str]:
    return [
        sys.executable, str(BENCH / "_raw_client.py"),
        "--port", str(port), "--users", str(users), "--duration", f"{duration_s:g}",
        "--max-requests", str(cap), "--out", str(out),
    ]  # fmt: skip


def _pcts(values: list[float]) -> str:
    if not values:
        return "        -"
    a = np.asarray(values)
    p50, p99 = np.percentile(a, [50, 99])
    return f"{p50:6.2f}/{p99:6.2f}/{a.max():7.2f}"


@dataclass
class Result:
    generator: str
    users: int
    child: ChildRun
    events: int
    requests: int
    ttft_err: list[float]
    lag: list[float]
    itl_err: list[float]
    itl_max_err: list[float]
    lag_after: list[float] = field(default_factory=list)  # past the start-up wave
    ttft_after: list[float] = field(default_factory=list)  # TTFT error past the start-up wave
    server_core: float = 0.0  # the timed server's CPU / wall: near 1.0, its stamps lag
    startup_cpu_s: float = 0.0  # start-up and shut-down CPU of this generator, measured apart
    span_s: float = 0.0  # first request start to last request end (the traffic's own span)

    @property
    def cpu_per_1k(self) -> float:
        return self.child.cpu_s / max(self.events, 1) * 1000

    @property
    def steady_cpu_per_1k(self) -> float:
        return max(self.child.cpu_s - self.startup_cpu_s, 0.0) / max(self.events, 1) * 1000

    @property
    def ttft_p99(self) -> float:
        return float(np.percentile(self.ttft_err, 99)) if self.ttft_err else float("nan")

    @property
    def core(self) -> float:
        return self.child.cpu_s / self.child.wall_s

    @property
    def saturated(self) -> bool:
        return self.core >= SATURATED_CORE or self.ttft_p99 > SATURATED_TTFT_P99_MS  # nan: False


STARTUP_WAVE_S = 2.0


def match(rows: list[dict], timings: dict[str, list[int]]) -> tuple[list[float], ...]:
    """Per request id: TTFT error, receive lag, ITL mean error, ITL max error (ms)."""
    ttft, lag, itl, itl_max = [], [], [], []
    for r in rows:
        srv = timings.get(r.get("request_id", ""))
        if srv is None or r.get("ttft_ms") is None or r.get("status") != "ok":
            continue
        arrive, first, last, n, max_gap, _ = srv
        ttft.append(r["ttft_ms"] - (first - arrive) / 1e6)
        lag.append((r["t_start"] * 1e9 + r["ttft_ms"] * 1e6 - first) / 1e6)
        if r.get("itl_ms") and n > 1:
            itl.append(r["itl_ms"]["mean"] - (last - first) / (n - 1) / 1e6)
            itl_max.append(r["itl_ms"]["max"] - max_gap / 1e6)
    return ttft, lag, itl, itl_max


def _read_jsonl(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def measure(generator: str, users: int, args: argparse.Namespace, workers: int = 1) -> Result:
    """One bounded run of one generator against a fresh timed server."""
    srv = TimedServer(args.ttft, args.itl, args.tokens).start()
    with tempfile.TemporaryDirectory(prefix="bench-gen-") as tmp:
        out = Path(tmp) / "run"
        # cap: about what the duration allows at the true timing, plus headroom
        per_request_s = args.ttft + args.itl * args.tokens
        cap = max(1, int(args.duration / per_request_s * 1.5) + 1)
        try:
            if generator == "agentload":
                sessions = max(1, -(-cap // STEPS))
                cmd = agentload_cmd(srv.port, users, args.duration, sessions, out, workers=workers)
                child = run_child(cmd, args.duration + 120)
                # one file per process: requests.jsonl, or requests-<worker>.jsonl with workers
                rows = [r for f in sorted(out.glob("requests*.jsonl")) for r in _read_jsonl(f)]
            else:
                cmd = raw_cmd(srv.port, users, args.duration, cap, out.with_suffix(".jsonl"))
                child = run_child(cmd, args.duration + 120)
                rows = _read_jsonl(out.with_suffix(".jsonl"))
        finally:
            timings = srv.stop()
    if child.returncode not in (0, 1):
        print(f"  {generator} exited {child.returncode}:\n{child.output[-2000:]}", file=sys.stderr)
    seen = {r["request_id"] for r in rows}
    events = sum(t[5] for rid, t in timings.items() if rid in seen)
    result = Result(generator, users, child, events, len(rows), *match(rows, timings))
    # Receive lag of the requests sent after the first STARTUP_WAVE_S of traffic: the
    # steady state, without every user's first request built and sent at once.
    t0 = min((r["t_start"] for r in rows if r.get("t_start")), default=0.0)
    later = [r for r in rows if r.get("t_start", 0.0) >= t0 + STARTUP_WAVE_S]
    late = match(later, timings)
    result.ttft_after, result.lag_after = late[0], late[1]
    result.server_core = srv.cpu_s / srv.wall_s
    ends = [r["t_start"] + (r.get("e2e_ms") or 0) / 1000 for r in rows if r.get("t_start")]
    if ends:
        result.span_s = max(ends) - min(r["t_start"] for r in rows if r.get("t_start"))
    return result


def print_table(results: list[Result]) -> None:
    raw = {r.users: r for r in results if r.generator == "raw"}
    print(
        f"{'generator':9s} {'users':>5s} {'reqs':>6s} {'events':>7s} {'ev/s':>6s} {'core':>5s} "
        f"{'ev/cpu-s':>8s} {'req/cpu-s':>9s} {'cpu-s/1k':>8s} {'x raw':>5s} {'steady':>7s} "
        f"{'x raw':>5s} {'RSS MiB':>7s} {'server':>6s}  "
        f"{'TTFT err p50/p99/max':>22s}  {'recv lag p50/p99/max':>22s}  "
        f"{'lag after 2s p99/max':>20s}  {'TTFT err after 2s':>18s}  "
        f"{'ITL err p50/p99/max':>22s}  {'ITL max err':>22s}"
    )
    for r in results:
        c = r.child
        floor = raw.get(r.users)
        ok = floor is not None and floor.events > 0
        ratio = r.cpu_per_1k / floor.cpu_per_1k if ok else float("nan")
        steady = r.steady_cpu_per_1k / floor.steady_cpu_per_1k if ok else float("nan")
        print(
            f"{r.generator:9s} {r.users:5d} {r.requests:6d} {r.events:7d} "
            f"{r.events / c.wall_s:6.0f} {r.core:5.2f} {r.events / c.cpu_s:8.0f} "
            f"{r.requests / c.cpu_s:9.1f} {r.cpu_per_1k:8.4f} {ratio:5.2f} "
            f"{r.steady_cpu_per_1k:7.4f} {steady:5.2f} {c.peak_rss_mib:7.0f} {r.server_core:6.2f}  "
            f"{_pcts(r.ttft_err):>22s}  {_pcts(r.lag):>22s}  "
            f"{_pcts(r.lag_after).split('/', 1)[-1]:>20s}  "
            f"{_pcts(r.ttft_after).split('/', 1)[-1]:>18s}  {_pcts(r.itl_err):>22s}  "
            f"{_pcts(r.itl_max_err):>22s}"
        )
    for gen in dict.fromkeys(r.generator for r in results):
        sat = [r.users for r in results if r.generator == gen and r.saturated]
        print(
            f"{gen}: saturates at {sat[0]} users" if sat
            else f"{gen}: not saturated up to {max(r.users for r in results if r.generator == gen)} users"
        )  # fmt: skip


def bench_generators(args: argparse.Namespace) -> None:
    levels = args.users or ([50, 200] if args.quick else [50, 100, 200, 400])
    print(
        f"server: true TTFT {args.ttft * 1000:g} ms, ITL {args.itl * 1000:g} ms, "
        f"{args.tokens} tokens; {args.duration:g} s per run; {psutil.cpu_count()} CPUs, "
        f"load {psutil.getloadavg()[0]:.1f}; times in ms, CPU of the whole child tree"
    )
    from workload.measure.transport import read_stamps

    print(
        f"  agentload's reads are stamped by: {read_stamps('http://127.0.0.1:1')} "
        "(kernel: when the bytes arrived, SO_TIMESTAMPNS; the raw floor stamps in user space)"
    )
    # one user, near-instant replies, one second: what starting and stopping costs
    tiny = argparse.Namespace(ttft=0.001, itl=0.0, tokens=1, duration=1.0)
    startup = {gen: measure(gen, 1, tiny).child.cpu_s for gen in ("raw", "agentload")}
    print("  start-up + shut-down CPU: " + ", ".join(f"{g} {c:.2f} s" for g, c in startup.items()))
    results = []
    for users in levels:
        for gen in ("raw", "agentload"):
            results.append(measure(gen, users, args))
            r = results[-1]
            r.startup_cpu_s = startup[gen]
            print(
                f"  {gen} @ {users}: {r.requests} requests ({len(r.ttft_err)} ok and matched), "
                f"{r.child.cpu_s:.1f} cpu-s in {r.child.wall_s:.1f} s, exit {r.child.returncode}",
                flush=True,
            )
    print_table(results)


def mid_run_rates(child: ChildRun) -> dict[str, float] | None:
    """CPU-seconds per second of each process over the middle 40 % of the child's life: the
    traffic's steady state, without start-up (imports, forks) and shut-down (the workers'
    stop, the summary and report), which grow with the worker count. None: too few samples."""
    lo, hi = 0.35 * child.wall_s, 0.75 * child.wall_s
    mid = [(t, per) for t, per in child.proc_samples if lo <= t <= hi]
    if len(mid) < 2 or mid[-1][0] <= mid[0][0]:
        return None
    (t0, a), (t1, b) = mid[0], mid[-1]
    return {k: (b[k] - a.get(k, b[k])) / (t1 - t0) for k in b}


def mid_run_cpu_rate(child: ChildRun) -> float:
    """The process tree's mid-run CPU-seconds per second (mid_run_rates, summed)."""
    rate = mid_run_rates(child)
    return sum(rate.values()) if rate is not None else float("nan")


def mid_run_split(child: ChildRun) -> str:
    """The mid-run CPU rate per process ("locust 0.05 + 2 workers 0.31/0.30"): where a
    multi-process run's CPU goes (the master's share is the overhead that workers add)."""
    rate = mid_run_rates(child)
    if rate is None:
        return "n/a"
    workers = sorted(v for k, v in rate.items() if k.startswith("worker-"))
    parts = [f"{k} {rate[k]:.2f}" for k in ("cli", "locust") if k in rate]
    if workers:
        parts.append(f"{len(workers)} workers " + "/".join(f"{v:.2f}" for v in workers))
    return " + ".join(parts)


def bench_workers(args: argparse.Namespace) -> None:
    """agentload's events/s at each worker count, and the scaling against the first.

    On a machine with fewer free cores than workers (plus the server) the events/s cannot
    scale, so this also prints what scaling needs: events per CPU-second of the whole tree
    (master included) in the run's steady middle, and the projection `workers x that / the
    first count's`: the events/s N workers reach on N free cores if each saturates its own
    core. (Whole-run CPU also counts start-up and shut-down, which grow with the workers.)
    """
    users = (args.users or [200])[0]
    print(
        f"server: true TTFT {args.ttft * 1000:g} ms, ITL {args.itl * 1000:g} ms, "
        f"{args.tokens} tokens; {users} users{' per worker' if args.per_worker else ''}, "
        f"{args.duration:g} s per run; "
        f"{psutil.cpu_count()} CPUs, load {psutil.getloadavg()[0]:.1f} before"
    )
    print(f"{'workers':>7s} {'reqs':>6s} {'events':>7s} {'ev/s':>7s} {'x first':>7s} "
          f"{'core':>5s} {'server':>6s} {'ev/cpu-s':>8s} {'mid cpu/s':>9s} {'mid ev/cpu-s':>12s} "
          f"{'proj xN':>7s} {'exit':>4s} {'load':>5s}")  # fmt: skip
    first = first_eff = None
    for w in args.workers:
        r = measure("agentload", users * w if args.per_worker else users, args, workers=w)
        # events/s over the traffic's span (start-up excluded: workers fork and prepare first)
        rate = r.events / r.span_s if r.span_s else 0.0
        first = first or rate or None
        scale = rate / first if first else float("nan")
        cpu_rate = mid_run_cpu_rate(r.child)
        eff = rate / cpu_rate if cpu_rate > 0 else float("nan")
        first_eff = first_eff or eff
        proj = w / args.workers[0] * eff / first_eff
        print(
            f"{w:7d} {r.requests:6d} {r.events:7d} {rate:7.0f} {scale:7.2f} {r.core:5.2f} "
            f"{r.server_core:6.2f} {r.events / r.child.cpu_s:8.0f} {cpu_rate:9.2f} {eff:12.0f} "
            f"{proj:7.2f} {r.child.returncode:4d} {psutil.getloadavg()[0]:5.1f}",
            flush=True,
        )
        print(f"        mid-run CPU per process (core): {mid_run_split(r.child)}", flush=True)


def bench_sessions(args: argparse.Namespace) -> None:
    """RSS per 1,000 live agent sessions held in tool pauses and think time."""
    srv = TimedServer(0.05, 0.005, 5).start()
    spread = max(5.0, args.sessions / 400)  # users wake spread out, so start-up is not a burst
    try:
        with tempfile.TemporaryDirectory(prefix="bench-sess-") as tmp:
            prof = Path(tmp) / "sessions.yaml"
            prof.write_text(SESSIONS_PROFILE % {"spread": spread})
            figures = {}
            for users in (10, args.sessions):
                spawn_s = users / 500
                # both runs equally long: spawn, a first step each, then settle
                hold = args.sessions / 500 + spread + 15
                out = Path(tmp) / f"run{users}"
                cmd = agentload_cmd(srv.port, users, hold, 1, out, prof)
                cmd[cmd.index("--spawn-rate") + 1] = "500"
                child = run_child(cmd, hold + 120, poll_s=0.5)
                # all users spawned and through their first step, none finalising yet
                rows = _read_jsonl(out / "requests.jsonl")
                first = min((r["t_start"] for r in rows), default=0)
                lo = first - child.started_wall + spawn_s + spread + 2
                tail = [m for t, m in child.rss_samples if lo <= t <= lo + 8]
                figures[users] = (float(np.median(tail or [child.peak_rss_mib])), child)
                print(
                    f"  {users} users: {len(rows)} requests, RSS {figures[users][0]:.0f} MiB "
                    f"(peak {child.peak_rss_mib:.0f}), exit {child.returncode}",
                    flush=True,
                )
    finally:
        srv.stop()
    base, big = figures[10][0], figures[args.sessions][0]
    per_1k = (big - base) / (args.sessions - 10) * 1000
    print(
        f"{args.sessions} agent sessions in tool pauses/think time: RSS {big:.0f} MiB vs "
        f"{base:.0f} MiB at 10 users: {per_1k:.0f} MiB per 1,000 sessions "
        f"({per_1k * 1024 / 1000:.0f} KiB each)"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="50 and 200 users, 8 s runs")
    ap.add_argument(
        "--users", type=int, nargs="+", help="concurrency levels (overrides the default)"
    )
    ap.add_argument("--duration", type=float, help="seconds per run (default 20, --quick 8)")
    ap.add_argument("--ttft", type=float, default=0.2, help="server's true TTFT (s)")
    ap.add_argument("--itl", type=float, default=0.02, help="server's true ITL (s)")
    ap.add_argument("--tokens", type=int, default=100, help="output tokens per request")
    ap.add_argument("--sessions", type=int, help="instead: RSS per 1,000 idle agent sessions")
    ap.add_argument(
        "--workers", type=int, nargs="+", help="instead: agentload's events/s at each worker count"
    )
    ap.add_argument(
        "--per-worker",
        action="store_true",
        help="--workers: --users is per worker (N workers drive N x the streams: weak scaling, "
        "every process as busy as the first count's)",
    )
    args = ap.parse_args()
    if args.duration is None:
        args.duration = 8.0 if args.quick else 20.0
    if args.sessions:
        bench_sessions(args)
    elif args.workers:
        bench_workers(args)
    else:
        bench_generators(args)


if __name__ == "__main__":
    main()
