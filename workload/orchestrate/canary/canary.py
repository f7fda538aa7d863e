"""Canary: the same seeded traffic against a baseline and a candidate, then a verdict.

Each side's run is an ordinary `agentload run` (so a canary side is exactly what a CI
run records), writing under OUT/baseline and OUT/candidate; the comparison goes to
OUT/comparison.json and OUT/compare.html.

The traffic options are parsed once, into one `RunSpec`; every run is that spec with its
side's target, its block's seed and length and its run directory (`RunSpec.replace`),
checked and started as `agentload run --spec` would (`locust_child.start_run`: pre-flight,
spec.json, the Locust child) but from the canary itself: an `agentload run` process per
block only re-imported the package (about 1 CPU-s of each block's start, measured).

A canary is N paired **blocks** per side (`--blocks`, default 8): each block is one
`agentload run` of the traffic (`--block-s`, default the run's duration), with seed S+i
on both sides (fresh sessions per block, paired across sides), written to
OUT/<side>/block-i and merged by `compare` (session ids prefixed by block). The
spread between blocks is the between-instance error model (workload.analyze.blocks).
`--blocks 1` is a single run per side, written to OUT/<side>.

Modes (how the blocks are scheduled):

* ``simultaneous`` (default): both sides' block i at once. Same sessions, same
  timing, same moment — drifts in the load generator's host hit both sides alike.
* ``sequential``: every baseline block, then every candidate block. For two
  deployments that cannot run side by side (one GPU); drift lands in the difference.
* ``interleaved``: blocks alternate in the order AB BA BA AB (repeating), so
  linear and quadratic drift over time cancel out between the sides.

With `--baseline-cmd` / `--candidate-cmd` (or `--servers FILE.yaml`) the canary
starts each side's server itself (workload.orchestrate.canary.servers): it waits until
the server is ready, records time to ready and start-up memory in the side's
run.json (`startup`), feeds the captured log to the fingerprint, and stops a
side's server before the other side's starts (sequential, interleaved; a
restart per block with `--restart-per-block`). A server that does not start is
a verdict: "candidate failed to start: ..." (exit 3 when the baseline started,
else 2).
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from workload.analyze.comparison import Comparison
from workload.analyze.prior import DEFAULT_PRIOR
from workload.analyze.render import input_warnings, render_text
from workload.analyze.startup import add_startup, split_startup_flags
from workload.analyze.traffic import VALIDATED_BLOCKS
from workload.analyze.verdict import compare_runs
from workload.errors import (
    EXIT_BAD_INPUT,
    EXIT_ERRORS,
    EXIT_REGRESSION,
    AgentloadError,
    CanaryError,
    UsageError,
    print_warning,
)
from workload.measure.artifacts import write_json
from workload.orchestrate.canary.console import (
    PROGRESS_S,
    outcome,
    outcome_line,
    progress_line,
    tally_line,
)
from workload.orchestrate.canary.early_stop import EARLY_FIRST_LOOK, EarlyStop
from workload.orchestrate.canary.servers import (
    Probe,
    ServerPool,
    ServerSpec,
    StartupFailure,
    attach_startup,
    probe_ready,
)
from workload.orchestrate.canary.warmup import Warmups, warm_label
from workload.orchestrate.locust_child import discard_unstarted, start_run
from workload.report.compare_report import write_compare_report
from workload.run.checks import run_dir_lock
from workload.run.options import build_run_parser, raw_values
from workload.run.spec import RunSpec, resolve_spec
from workload.stopping import (
    STOPS,
    exit_code_for_signal,
    forward_stop,
    ignore_stops,
    signal_name,
    stop_child,
    stop_signum,
    stopped_line,
)

MODES = ("simultaneous", "sequential", "interleaved")
# The default design: 8 blocks per side, each one run of the profile's length (mixed: 60 s,
# so 8 minutes side by side, 16 minutes alternating on one GPU). Measured in
# docs/canary-verdict-quality.md: the per-block spread of two instances of one server is
# heavy-tailed, and with 5 blocks (t with 4 df) one A/A canary in 20 was inconclusive on some
# tail or work-done metric; 8 blocks make that rarer, and leave the trimmed interval
# (workload.analyze.blocks: the most extreme block at each end left out) 5 df.
# It is the design the verdict was validated at, so one constant serves both.
DEFAULT_BLOCKS = VALIDATED_BLOCKS
SIDES = ("baseline", "candidate")

# A run that never ends is a bug somewhere; give up after its duration plus this.
GRACE_S = 300.0


@dataclass(frozen=True)
class Job:
    """One `agentload run` child of the canary: who it is and the run it plays."""

    name: str  # what the console calls it ("baseline", "candidate block-3")
    side: str
    spec: RunSpec  # the side's target, the block's seed and length, its run directory

    @property
    def out(self) -> Path:
        return Path(self.spec.out)

    @property
    def log(self) -> Path:
        return self.out.with_suffix(".log")


# Starts one child run: its spec and its console log -> the running process.
Launcher = Callable[[RunSpec, Path], "subprocess.Popen[bytes]"]


def traffic_spec(run_args: Sequence[str]) -> RunSpec:
    """The canary's traffic, parsed once with `agentload run`'s own options (no target)."""
    args = build_run_parser().parse_args(list(run_args))
    if args.host or args.out:
        raise CanaryError("give --baseline/--candidate and --out to canary, not --host/--out")
    values = raw_values(args)
    values["argv"] = " ".join(["agentload", "canary", *run_args])
    try:
        return resolve_spec(values)
    except UsageError as e:
        raise CanaryError(str(e)) from None


def _launch(spec: RunSpec, log: Path) -> subprocess.Popen[bytes]:
    """Start one block's run (locust_child.start_run); a run that cannot start is bad input."""
    try:
        return start_run(spec, log)
    except AgentloadError as e:
        raise CanaryError(f"the run into {spec.out} cannot start: {e.line()}") from None


@dataclass
class Progress:
    """What the canary has run so far (read when a stop signal ends it half-way)."""

    started: list[Job] = field(default_factory=list)  # every job launched, in order
    running: list[subprocess.Popen[bytes]] = field(default_factory=list)  # the group now
    codes: dict[str, int] = field(default_factory=dict)  # job name -> exit status


def _wait(
    procs: list[tuple[str, subprocess.Popen[bytes]]],
    timeout_s: float,
    tick: Callable[[float], None] | None = None,
) -> dict[str, int]:
    """Wait for the group's runs; `tick(elapsed_s)` every PROGRESS_S while they run."""
    start = time.monotonic()
    deadline, next_tick = start + timeout_s, start + PROGRESS_S
    codes: dict[str, int] = {}
    for name, p in procs:
        while name not in codes:
            now = time.monotonic()
            if now >= deadline:
                codes[name] = stop_child(p, timeout_s=30)
                print(
                    f"agentload canary: {name} ran past its time and was stopped", file=sys.stderr
                )
                break
            with contextlib.suppress(subprocess.TimeoutExpired):
                codes[name] = p.wait(timeout=max(0.05, min(1.0, deadline - now, next_tick - now)))
            if tick is not None and time.monotonic() >= next_tick and name not in codes:
                tick(time.monotonic() - start)
                next_tick += PROGRESS_S
    return codes


def _progress(label: str, outs: list[tuple[str, Path]], block_s: float, elapsed_s: float) -> None:
    print(progress_line(label, outs, elapsed_s, block_s), flush=True)


def _group_label(group: list[Job], blocks: int) -> str:
    name = group[0].out.name
    warm = warm_label(group[0].out)
    if warm:
        return warm
    return f"{name} of {blocks}" if name.startswith("block-") else "the run"


def run_sides(
    jobs: list[list[Job]],
    timeout_s: float,
    launch: Launcher,
    before: Callable[[list[Job]], None] | None = None,
    after: Callable[[], bool] | None = None,
    progress: Progress | None = None,
    block_s: float = 0.0,
) -> dict[str, int]:
    """Run job groups one after another; the jobs inside a group run at once.

    `before(group)` runs first for each group (the canary's servers start there);
    `after()` runs after each group, and True stops the schedule there (early stop).
    A stop signal (stopping.STOPS) is passed on to the running jobs, which finish their
    runs, and raised again once they have; `progress` says what ran.
    """
    state = progress if progress is not None else Progress()
    blocks = sum(1 for g in jobs if g[0].side == jobs[0][0].side) if jobs else 0
    for group in jobs:
        if before is not None:
            before(group)
        procs: list[tuple[str, subprocess.Popen[bytes]]] = []
        label = _group_label(group, blocks)
        outs = [(job.side, job.out) for job in group]
        try:
            for job in group:
                print(f"agentload canary: starting {job.name}", flush=True)
                procs.append((job.name, launch(job.spec, job.log)))
                state.started.append(job)
                state.running = [p for _, p in procs]
            codes = _wait(procs, timeout_s, partial(_progress, label, outs, block_s))
        except STOPS as e:
            forward_stop(state.running, stop_signum(e))
            raise
        except BaseException:
            for _, p in procs:  # signal all first, so the sides stop together
                if p.poll() is None:
                    p.send_signal(signal.SIGINT)
            for _, p in procs:
                stop_child(p, sig=None, timeout_s=30)
            raise
        for job in group:
            codes[job.name] = _status(job, codes[job.name])
        state.codes.update(codes)
        state.running = []
        print(outcome_line(label, [(j.side, j.out, codes[j.name]) for j in group]), flush=True)
        for name, code in codes.items():
            if code == EXIT_BAD_INPUT:
                raise CanaryError(
                    f"{name} run failed with bad input (exit 2); see its log under --out"
                )
        if after is not None and after():
            break
    return state.codes


def _status(job: Job, code: int) -> int:
    """A run's exit status; a Locust child killed by a signal (not a stop the canary passed
    on: that ends in _stopped) is exit 1, with the line `agentload run` would have written."""
    if code >= 0:
        return code
    print(
        f"agentload canary: {job.name}: the Locust process was killed ({signal_name(-code)}); "
        f"files already written in {job.out} are intact, the summary may be missing",
        file=sys.stderr,
        flush=True,
    )
    return EXIT_ERRORS


def block_seconds(duration_s: float, mode: str, blocks: int, block_s: float | None) -> float:
    """Seconds per block of a canary with `blocks` blocks per side (checked).

    A block is one paired run of the traffic: `block_s`, else the run's duration (the
    profile's, or --duration). Each block uses its own seed (fresh sessions, paired across
    sides), so blocks are independent trajectories of both servers; with >= MIN_BLOCKS of
    them the tails, throughput and work done gate on the spread between blocks.
    """
    if blocks < 1:
        raise CanaryError(f"--blocks must be at least 1, got {blocks}")
    if mode == "interleaved" and blocks < 2:
        raise CanaryError("interleaved mode needs at least 2 blocks per side")
    bs = float(block_s) if block_s else float(duration_s)
    if not bs >= 1.0:
        raise CanaryError(f"--block-s must be at least 1 s, got {bs:g}")
    return bs


def block_spec(spec: RunSpec, i: int, block_s: float) -> RunSpec:
    """Block i's traffic: the canary's, with the block's length and seed S+i."""
    return spec.replace(duration_s=block_s, seed=spec.seed + i)


def schedule(
    traffic: RunSpec, mode: str, blocks: int, block_s: float, side_run: Callable[..., Job]
) -> list[list[Job]]:
    """The job groups of the design, in the order they run (a group's jobs run at once)."""
    if blocks == 1:
        if mode == "sequential":
            return [[side_run(s, None, traffic)] for s in SIDES]
        return [[side_run(s, None, traffic) for s in SIDES]]

    def block(side: str, i: int) -> Job:
        return side_run(side, i, block_spec(traffic, i, block_s))

    if mode == "simultaneous":
        return [[block(s, i) for s in SIDES] for i in range(blocks)]
    if mode == "sequential":
        return [[block(s, i)] for s in SIDES for i in range(blocks)]
    groups = []
    for i in range(blocks):
        order = SIDES if i % 4 in (0, 3) else SIDES[::-1]  # AB BA BA AB: drift cancels
        groups += [[block(side, i)] for side in order]
    return groups


def run_canary(
    baseline_url: str | None,
    candidate_url: str | None,
    run_args: Sequence[str],
    out_dir: Path,
    mode: str = "simultaneous",
    block_s: float | None = None,
    thresholds: dict[str, Any] | None = None,
    server_logs: tuple[str | None, str | None] = (None, None),
    *,
    blocks: int = DEFAULT_BLOCKS,
    confidence: float | None = None,
    n_boot: int = 1000,
    html: bool = True,
    launch: Launcher = _launch,
    servers: dict[str, ServerSpec] | None = None,
    restart_per_block: bool = False,
    probe: Probe = probe_ready,
    early_stop: bool = False,
    warmup_s: float = 0.0,
    instance_prior: str | None = DEFAULT_PRIOR,
) -> int:
    """Run both sides, compare, write comparison.json / compare.html, print the verdict.

    `servers` (side -> ServerSpec) are started by the canary; a side without one uses its URL.
    Returns the compare exit code (0 pass, 3 regression or candidate failed to start);
    raises CanaryError on bad input.

    Long because of its signature (every canary option, 20 lines); the body is ~65 lines.
    """
    out_dir = Path(out_dir)
    _check_canary(mode, out_dir, blocks, early_stop)
    traffic = traffic_spec(run_args)
    thresholds, startup_flags = split_startup_flags(thresholds)
    pool = ServerPool(servers, out_dir, probe) if servers else None
    urls, logs = _targets(pool, (baseline_url, candidate_url), server_logs)
    bs = block_seconds(traffic.duration_s, mode, blocks, block_s)

    def side_run(side: str, i: int | None, spec: RunSpec) -> Job:
        out = out_dir / side if i is None else out_dir / side / f"block-{i}"
        name = side if i is None else f"{side} {out.name}"
        return Job(name, side, spec.replace(host=urls[side], out=str(out), server_log=logs[side]))

    groups = schedule(traffic, mode, blocks, bs, side_run)
    timeout = (bs if blocks > 1 else traffic.duration_s) + GRACE_S
    sides_at_once = 2 if mode == "simultaneous" else 1
    warm = f", after a {warmup_s:g} s warm-up of each side, not judged" if warmup_s else ""
    print(
        f"agentload canary: {mode}, {blocks} block{'s' if blocks > 1 else ''} x {bs:g} s per side "
        f"(about {blocks * bs * 2 / sides_at_once / 60:.1f} min of traffic{warm})",
        flush=True,
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    startups: list[tuple[Path, dict[str, Any]]] = []
    warmups = Warmups(warmup_s, out_dir)

    def start_servers(group: list[Job]) -> None:
        starts: dict[str, str | None] = {}
        if pool is not None:
            recs = pool.ensure([j.side for j in group], restart=restart_per_block)
            startups.extend((j.out, recs[j.side]) for j in group if j.side in recs)
            starts = {side: rec.get("start_id") for side, rec in recs.items()}
        cold = warmups.due([j.side for j in group], starts)
        if cold:  # a side's first block, or its server just (re)started: warm it, unjudged
            jobs = [Job(f"{side} warm-up", side, warmups.spec(traffic, side, urls[side]))
                    for side in cold]  # fmt: skip
            run_sides([jobs], warmup_s + GRACE_S, launch, block_s=warmup_s)

    looks = EarlyStop(out_dir, blocks, thresholds, confidence, n_boot) if early_stop else None
    canary: dict[str, Any] = {
        "mode": mode,
        "baseline": urls["baseline"],
        "candidate": urls["candidate"],
        "run_args": list(run_args),
        "warmup_s": warmup_s,
        "warmups": warmups.runs,  # filled in as they run
    }
    state = Progress()
    try:
        try:
            with contextlib.ExitStack() as locks:  # a second canary into OUT is refused
                for side in SIDES:
                    locks.enter_context(run_dir_lock(out_dir / side))
                run_sides(
                    groups, timeout, launch, start_servers, looks.look if looks else None,
                    state, bs,
                )  # fmt: skip
        finally:
            if pool is not None:
                pool.close()
            for run_dir, rec in startups:  # after the stop, so the record has its stop time
                attach_startup(run_dir, rec)
        tally = tally_line([j.out for j in state.started])
        if tally:
            print(tally, flush=True)
        if looks is not None and looks.stopped is not None:
            cmp = looks.stopped  # the interim comparison that settled it
        else:
            cmp = compare_runs(
                out_dir / "baseline",
                out_dir / "candidate",
                thresholds,
                confidence=looks.final_confidence() if looks else confidence,
                n_boot=n_boot,
                instance_prior=instance_prior,
            )
    except StartupFailure as e:
        assert pool is not None
        return _startup_verdict(e, pool, out_dir, mode, run_args)
    except STOPS as e:
        if not state.started and warmups.runs:  # stopped while warming: no block ran
            print(stopped_line(stop_signum(e), f"canary stopped during the warm-up, before any "
                               f"block; no verdict (the warm-up runs, never judged, are in "
                               f"{out_dir / 'warmup'})"), flush=True)  # fmt: skip
            return exit_code_for_signal(stop_signum(e))
        if not state.started:
            raise  # nothing ran: the edge's "before the run started" line is the truth
        if pool is not None:
            canary["servers"] = pool.records
        return _stopped(stop_signum(e), state, out_dir, canary)
    add_startup(cmp, startup_flags)
    if looks is not None:
        canary["early_stop"] = looks.record()
    if pool is not None:
        canary["servers"] = pool.records
    _write_verdict(cmp, canary, out_dir, html)
    return cmp.exit_code


def _stopped(signum: int, state: Progress, out_dir: Path, canary: dict[str, Any]) -> int:
    """A stop signal after blocks started: the running blocks have finished their runs
    (forward_stop); comparison.json says what ran, the console says it, 128 + the signal."""
    ignore_stops()  # what follows is a few writes; a late press must not cut them
    code = exit_code_for_signal(signum)
    during = [j.name for j in state.started if state.codes.get(j.name) is None]
    for j in state.started:
        if j.name in during:
            discard_unstarted(j.out)  # stopped while its Locust child was starting
    # blocks that ran to their end on both sides (a stopped block's run is complete, but short)
    done = min(sum(1 for j in state.started if j.side == side and j.name not in during)
               for side in SIDES)  # fmt: skip
    runs = [
        {"run": j.name, "out": str(j.out), **outcome(j.out), "interrupted": j.name in during}
        for j in state.started
    ]
    where = f"during {' and '.join(during)}" if during else "between blocks"
    write_json(
        out_dir / "comparison.json",
        {
            "schema_version": 1,
            "verdict": "stopped",
            "exit_code": code,
            "reason": f"interrupted ({signal_name(signum)}) {where}",
            "paired_blocks_complete": done,
            "block_runs": runs,
            "canary": canary,
        },
    )
    tally = tally_line([j.out for j in state.started])
    if tally:
        print(tally, flush=True)
    print(
        stopped_line(
            signum,
            f"canary stopped {where}; {len(state.started)} block runs in {out_dir} (each "
            f"complete, {done} paired block(s) finished on both sides); no verdict: "
            f"`agentload compare {out_dir / 'baseline'} {out_dir / 'candidate'}` judges what ran",
        ),
        flush=True,
    )
    return code


def _check_canary(mode: str, out_dir: Path, blocks: int, early_stop: bool) -> None:
    """Raise CanaryError for a bad mode, an --out that holds a run, or an impossible early stop."""
    if mode not in MODES:
        raise CanaryError(f"bad mode {mode!r}: one of {', '.join(MODES)}")
    for side in SIDES:
        if (out_dir / side).exists() and any((out_dir / side).iterdir()):
            raise CanaryError(f"{out_dir / side} already holds a run; choose another --out")
    if early_stop and (mode == "sequential" or blocks <= EARLY_FIRST_LOOK):
        raise CanaryError(
            f"--early-stop needs --blocks > {EARLY_FIRST_LOOK} and simultaneous or interleaved "
            "mode (sequential runs every baseline block first: nothing to look at before the end)"
        )


def _write_verdict(cmp: Comparison, canary: dict[str, Any], out_dir: Path, html: bool) -> None:
    """comparison.json (with the canary's own block), the console verdict, compare.html."""
    d = cmp.to_dict()
    d["canary"] = canary
    write_json(out_dir / "comparison.json", d)
    print(render_text(cmp))
    for w in input_warnings(cmp):  # damaged block files, as `compare` says it
        print_warning(w)
    if html:
        write_compare_report(cmp, out_dir / "compare.html")
        print(f"report: {out_dir / 'compare.html'}")


def _targets(
    pool: ServerPool | None,
    given: tuple[str | None, str | None],
    server_logs: tuple[str | None, str | None],
) -> tuple[dict[str, str], dict[str, str]]:
    """Each side's URL and server log: a server the canary starts, or the URL given."""
    urls: dict[str, str] = {}
    logs: dict[str, str] = {}
    for side, url, log in zip(SIDES, given, server_logs, strict=True):
        if pool is not None and side in pool.specs:
            urls[side], logs[side] = pool.url(side), str(pool.logs[side])
        elif url:
            urls[side], logs[side] = str(url), log or ""
        else:
            raise CanaryError(f"{side}: give --{side} URL or --{side}-cmd CMD")
    return urls, logs


def _startup_verdict(
    e: StartupFailure, pool: ServerPool, out_dir: Path, mode: str, run_args: Sequence[str]
) -> int:
    """A server that did not start: one line per failure, comparison.json, exit 3 or 2.

    3 when the candidate failed and the baseline started (the candidate is the
    regression); 2 when the baseline did not start (nothing to compare against).
    """
    pool.close()  # before comparison.json, so every record has its stop time
    failures = pool.failures or [e]
    base_ok = "baseline" not in pool.specs or any(
        r.get("ready") for r in pool.records if str(r.get("start_id")).startswith("baseline#")
    )
    for f in failures:
        print(f"agentload canary: {f.line()}", file=sys.stderr)
    code = (
        EXIT_REGRESSION
        if base_ok and all(f.side == "candidate" for f in failures)
        else EXIT_BAD_INPUT
    )
    first = next((f for f in failures if f.side == "baseline"), failures[0])
    verdict = f"{first.side} failed to start"
    write_json(
        out_dir / "comparison.json",
        {
            "schema_version": 1,
            "verdict": verdict,
            "exit_code": code,
            "reason": first.reason,
            "startup_failures": [
                {"side": f.side, "reason": f.reason, "log_tail": f.log_tail, **f.record}
                for f in failures
            ],
            "canary": {"mode": mode, "run_args": list(run_args), "servers": pool.records},
        },
    )
    print(f"VERDICT: {verdict.upper()}: {first.reason} (exit {code})")
    return code
