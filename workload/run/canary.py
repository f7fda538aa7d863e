"""Canary: the same seeded traffic against a baseline and a candidate, then a verdict.

Each side is an ordinary `agentload run` child process (so a canary side is
exactly what a CI run records), writing under OUT/baseline and OUT/candidate;
the comparison goes to OUT/comparison.json and OUT/compare.html.

A canary is N paired **blocks** per side (`--blocks`, default 5): each block is one
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
starts each side's server itself (workload.run.servers): it waits until the
server is ready, records time to ready and start-up memory in the side's
run.json (`startup`), feeds the captured log to the fingerprint, and stops a
side's server before the other side's starts (sequential, interleaved; a
restart per block with `--restart-per-block`). A server that does not start is
a verdict: "candidate failed to start: ..." (exit 3 when the baseline started,
else 2).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from workload.analyze.catalogue import (
    VERDICT_INCONCLUSIVE,
    VERDICT_MIXED,
    VERDICT_WORSE,
    CompareError,
)
from workload.analyze.options import QuietParser, add_verdict_options, run_cli
from workload.analyze.startup import add_startup, split_startup_flags
from workload.analyze.thresholds import MIN_BLOCKS, parse_threshold_flags
from workload.analyze.traffic import VALIDATED_BLOCKS
from workload.analyze.verdict import SHORT_DESIGN_WARNING, compare_runs, default_confidence
from workload.errors import EXIT_BAD_INPUT, EXIT_REGRESSION, UsageError
from workload.procs import die_with_parent, stop_child
from workload.run.servers import (
    DEFAULT_READY_TIMEOUT_S,
    Probe,
    ServerPool,
    ServerSpec,
    StartupFailure,
    attach_startup,
    load_servers_file,
    probe_ready,
    split_command,
)
from workload.run.spec import (
    CANARY_FORBIDDEN,
    build_run_parser,
    check_host,
    raw_values,
    resolve_spec,
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

# --early-stop: interim looks from this many paired blocks on (the t-interval's 2 df; a
# regression may stop the canary there, a pass only from MIN_BLOCKS on, where the tails and
# work done gate as in the full design), which together spend this share of alpha
# (Haybittle-Peto style: only strong evidence stops a canary early); the last look keeps
# the rest. By the union bound "worse" and "no detectable
# change" each stay wrong in at most alpha of canaries over all looks together.
EARLY_FIRST_LOOK = 3
EARLY_ALPHA_SHARE = 0.1

# A run that never ends is a bug somewhere; give up after its duration plus this.
GRACE_S = 300.0


class CanaryError(CompareError):
    """A canary cannot start or a side failed to produce a run (one line, exit 2)."""


def run_command(
    url: str, out: Path, run_args: Sequence[str], server_log: str | None = None
) -> list[str]:
    """The `agentload run` child command for one side."""
    cmd = [sys.executable, "-m", "workload.cli", "run", "--host", url, "--out", str(out), *run_args]
    if server_log:
        cmd += ["--server-log", str(server_log)]
    return cmd


def _strip_opts(args: Sequence[str], names: tuple[str, ...]) -> list[str]:
    """Drop `--name VALUE` and `--name=VALUE` occurrences of `names` from args."""
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
            continue
        if a in names:
            skip = True
            continue
        if any(a.startswith(n + "=") for n in names):
            continue
        out.append(a)
    return out


def traffic_plan(run_args: Sequence[str]) -> dict[str, Any]:
    """Validate run_args with `agentload run`'s own options; return duration and seed."""
    try:
        args = build_run_parser().parse_args(["--host", "http://127.0.0.1:1", *run_args])
        if args.host != "http://127.0.0.1:1" or args.out:
            raise UsageError("give --baseline/--candidate and --out to canary, not --host/--out")
        spec = resolve_spec(raw_values(args))
    except UsageError as e:
        raise CanaryError(str(e)) from None
    return {"duration_s": spec.duration_s, "seed": spec.seed}


Launcher = Callable[[list[str], Path], subprocess.Popen]
# One `agentload run` child: display name, command, console log, side, run directory.
Job = tuple[str, list[str], Path, str, Path]


def _launch(cmd: list[str], log: Path) -> subprocess.Popen:
    env = dict(os.environ)
    env.setdefault("PYTHONUNBUFFERED", "1")
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as fh:
        return subprocess.Popen(  # noqa: PLW1509 - preexec_fn only sets the death signal
            cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, preexec_fn=die_with_parent()
        )


def _wait(procs: list[tuple[str, subprocess.Popen]], timeout_s: float) -> dict[str, int]:
    deadline = time.monotonic() + timeout_s
    codes: dict[str, int] = {}
    for name, p in procs:
        try:
            codes[name] = p.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            codes[name] = stop_child(p, timeout_s=30)
            print(f"agentload canary: {name} ran past its time and was stopped", file=sys.stderr)
    return codes


def _run_sides(
    jobs: list[list[Job]],
    timeout_s: float,
    launch: Launcher,
    before: Callable[[list[Job]], None] | None = None,
    after: Callable[[], bool] | None = None,
) -> dict[str, int]:
    """Run job groups one after another; the jobs inside a group run at once.

    `before(group)` runs first for each group (the canary's servers start there);
    `after()` runs after each group, and True stops the schedule there (early stop).
    """
    codes: dict[str, int] = {}
    for group in jobs:
        if before is not None:
            before(group)
        procs = []
        try:
            for name, cmd, log, *_ in group:
                print(f"agentload canary: starting {name}", flush=True)
                procs.append((name, launch(cmd, log)))
            codes.update(_wait(procs, timeout_s))
        except BaseException:
            for _, p in procs:  # signal all first, so the sides stop together
                if p.poll() is None:
                    p.send_signal(signal.SIGINT)
            for _, p in procs:
                stop_child(p, sig=None, timeout_s=30)
            raise
        for name, code in codes.items():
            if code == EXIT_BAD_INPUT:
                raise CanaryError(
                    f"{name} run failed with bad input (exit 2); see its log under --out"
                )
        if after is not None and after():
            break
    return codes


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


def block_args(run_args: Sequence[str], seed: int, i: int, block_s: float) -> list[str]:
    """`agentload run` arguments of block i: the run's, with the block's length and seed S+i."""
    base = _strip_opts(run_args, ("--duration", "--seed"))
    return [*base, "--duration", f"{block_s:g}s", "--seed", str(seed + i)]


def run_canary(
    baseline_url: str | None,
    candidate_url: str | None,
    run_args: Sequence[str],
    out_dir: Path,
    mode: str = "simultaneous",
    block_s: float | None = None,
    thresholds: dict | None = None,
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
) -> int:
    """Run both sides, compare, write comparison.json / compare.html, print the verdict.

    `servers` (side -> ServerSpec) are started by the canary; a side without one uses its URL.
    Returns the compare exit code (0 pass, 3 regression or candidate failed to start);
    raises CanaryError on bad input.
    """
    if mode not in MODES:
        raise CanaryError(f"bad mode {mode!r}: one of {', '.join(MODES)}")
    out_dir = Path(out_dir)
    for side in SIDES:
        if (out_dir / side).exists() and any((out_dir / side).iterdir()):
            raise CanaryError(f"{out_dir / side} already holds a run; choose another --out")
    plan = traffic_plan(run_args)
    thresholds, startup_flags = split_startup_flags(thresholds)
    pool = ServerPool(servers, out_dir, probe) if servers else None
    given = dict(zip(SIDES, (baseline_url, candidate_url), strict=True))
    logs = dict(zip(SIDES, server_logs, strict=True))
    urls: dict[str, str] = {}
    for side in SIDES:
        if pool is not None and side in pool.specs:
            urls[side], logs[side] = pool.url(side), str(pool.logs[side])
        elif given[side]:
            urls[side] = str(given[side])
        else:
            raise CanaryError(f"{side}: give --{side} URL or --{side}-cmd CMD")
    timeout = plan["duration_s"] + GRACE_S

    def job(side: str, out: Path, args: Sequence[str]) -> Job:
        name = side if out.parent == out_dir else f"{side} {out.name}"
        return (
            name,
            run_command(urls[side], out, args, logs[side]),
            out.with_suffix(".log"),
            side,
            out,
        )

    bs = block_seconds(plan["duration_s"], mode, blocks, block_s)
    if early_stop and (mode == "sequential" or blocks <= EARLY_FIRST_LOOK):
        raise CanaryError(
            f"--early-stop needs --blocks > {EARLY_FIRST_LOOK} and simultaneous or interleaved "
            "mode (sequential runs every baseline block first: nothing to look at before the end)"
        )
    if blocks == 1:
        groups = (
            [[job(s, out_dir / s, run_args)] for s in SIDES]
            if mode == "sequential"
            else [[job(s, out_dir / s, run_args) for s in SIDES]]
        )
    else:

        def block_job(side: str, i: int) -> Job:
            args = block_args(run_args, plan["seed"], i, bs)
            return job(side, out_dir / side / f"block-{i}", args)

        if mode == "simultaneous":
            groups = [[block_job(s, i) for s in SIDES] for i in range(blocks)]
        elif mode == "sequential":
            groups = [[block_job(s, i)] for s in SIDES for i in range(blocks)]
        else:
            groups = []
            for i in range(blocks):
                order = SIDES if i % 4 in (0, 3) else SIDES[::-1]  # AB BA BA AB: drift cancels
                groups += [[block_job(side, i)] for side in order]
        timeout = bs + GRACE_S
    sides_at_once = 2 if mode == "simultaneous" else 1
    print(
        f"agentload canary: {mode}, {blocks} block{'s' if blocks > 1 else ''} x {bs:g} s per side "
        f"(about {blocks * bs * 2 / sides_at_once / 60:.1f} min of traffic)",
        flush=True,
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    startups: list[tuple[Path, dict[str, Any]]] = []

    def start_servers(group: list[Job]) -> None:
        if pool is not None:
            recs = pool.ensure([j[3] for j in group], restart=restart_per_block)
            startups.extend((j[4], recs[j[3]]) for j in group if j[3] in recs)

    looks = _EarlyStop(out_dir, blocks, thresholds, confidence, n_boot) if early_stop else None
    try:
        _run_sides(groups, timeout, launch, start_servers, looks.look if looks else None)
    except StartupFailure as e:
        assert pool is not None
        return _startup_verdict(e, pool, out_dir, mode, run_args)
    finally:
        if pool is not None:
            pool.close()
        for run_dir, rec in startups:  # after the stop, so the record has its stop time
            attach_startup(run_dir, rec)

    if looks is not None and looks.stopped is not None:
        cmp = looks.stopped  # the interim comparison that settled it
    else:
        cmp = compare_runs(
            out_dir / "baseline",
            out_dir / "candidate",
            thresholds,
            confidence=looks.final_confidence() if looks else confidence,
            n_boot=n_boot,
        )
    add_startup(cmp, startup_flags)
    from workload.measure.artifacts import write_json

    d = cmp.to_dict()
    d["canary"] = {
        "mode": mode,
        "baseline": urls["baseline"],
        "candidate": urls["candidate"],
        "run_args": list(run_args),
    }
    if looks is not None:
        d["canary"]["early_stop"] = looks.record()
    if pool is not None:
        d["canary"]["servers"] = pool.records
    write_json(out_dir / "comparison.json", d)
    print(cmp.render_text())
    if html:
        from workload.report.compare_report import write_compare_report

        write_compare_report(cmp, out_dir / "compare.html")
        print(f"report: {out_dir / 'compare.html'}")
    return cmp.exit_code


class _EarlyStop:
    """--early-stop: after each paired block from EARLY_FIRST_LOOK on (not the last), judge
    the blocks so far at an interim alpha; a verdict other than inconclusive stops the
    canary there. The interim looks share EARLY_ALPHA_SHARE of alpha; the last look (or the
    full design, when nothing stopped it) is judged at the rest."""

    def __init__(
        self,
        out_dir: Path,
        blocks: int,
        thresholds: dict | None,
        confidence: float | None,
        n_boot: int,
    ) -> None:
        self.out_dir, self.blocks, self.thresholds = out_dir, blocks, thresholds
        self.confidence, self.n_boot = confidence, n_boot
        self.n_looks = blocks - EARLY_FIRST_LOOK  # interim looks at 3 .. blocks-1 blocks
        self.alpha: float | None = None  # the canary's alpha (set at the first look)
        self.looks: list[dict[str, Any]] = []
        self.stopped: Any = None  # the Comparison that stopped the canary

    def _done(self) -> int:
        """Paired blocks finished on both sides (each block a complete run)."""
        n = 0
        while all((self.out_dir / side / f"block-{n}" / "run.json").is_file() for side in SIDES):
            n += 1
        return n

    def _base_alpha(self) -> float:
        if self.alpha is None:
            if self.confidence is not None:
                self.alpha = 1.0 - self.confidence
            else:  # the profile's compare.alpha, as compare_runs reads it (run.json only)
                from workload.measure.artifacts import read_json

                a, b = (read_json(self.out_dir / side / "block-0" / "run.json") for side in SIDES)
                self.alpha = 1.0 - default_confidence(a, b)
        return self.alpha

    def interim_alpha(self) -> float:
        return self._base_alpha() * EARLY_ALPHA_SHARE / self.n_looks

    def final_confidence(self) -> float:
        return 1.0 - self._base_alpha() * (1.0 - EARLY_ALPHA_SHARE)

    def look(self) -> bool:
        n = self._done()
        if n < EARLY_FIRST_LOOK or n >= self.blocks or any(lk["blocks"] == n for lk in self.looks):
            return False
        alpha = self.interim_alpha()
        cmp = compare_runs(
            self.out_dir / "baseline",
            self.out_dir / "candidate",
            self.thresholds,
            confidence=1.0 - alpha,
            n_boot=self.n_boot,
        )
        self.looks.append({"blocks": n, "alpha": round(alpha, 6), "verdict": cmp.verdict})
        # A regression found stops at any look. A pass (or "better") only once the tails and
        # work done gate too (MIN_BLOCKS), so an early pass rules out what a full one would.
        settled = cmp.verdict in (VERDICT_WORSE, VERDICT_MIXED) or (
            n >= MIN_BLOCKS and cmp.verdict != VERDICT_INCONCLUSIVE
        )
        print(
            f"agentload canary: interim look after {n} of {self.blocks} blocks "
            f"(alpha {alpha:.4g}): {cmp.verdict}"
            + ("; stopping early" if settled else "; going on"),
            flush=True,
        )
        if settled:
            # Fewer blocks than the validated design, by decision: say that instead.
            cmp.warnings = [w for w in cmp.warnings if not w.startswith(SHORT_DESIGN_WARNING)]
            cmp.warnings.append(
                f"stopped early after {n} of {self.blocks} blocks per side: settled at the "
                f"interim level alpha {alpha:.4g} (--early-stop; the interim looks spend "
                f"{EARLY_ALPHA_SHARE:.0%} of alpha {self._base_alpha():g})"
            )
            self.stopped = cmp
        return settled

    def record(self) -> dict[str, Any]:
        return {
            "looks": self.looks,
            "stopped_after_blocks": self.looks[-1]["blocks"] if self.stopped else None,
            "alpha": self.alpha,
            "alpha_final": None if self.stopped or self.alpha is None
            else round(self.alpha * (1.0 - EARLY_ALPHA_SHARE), 6),
        }  # fmt: skip


def _startup_verdict(
    e: StartupFailure, pool: ServerPool, out_dir: Path, mode: str, run_args: Sequence[str]
) -> int:
    """A server that did not start: one line per failure, comparison.json, exit 3 or 2.

    3 when the candidate failed and the baseline started (the candidate is the
    regression); 2 when the baseline did not start (nothing to compare against).
    """
    from workload.measure.artifacts import write_json

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


def canary_argparser(prog: str = "agentload canary") -> argparse.ArgumentParser:
    """Canary options; everything else is passed to both `agentload run`s unchanged."""
    p = QuietParser(
        prog=prog,
        allow_abbrev=False,
        description="Run the same seeded traffic against a baseline and a candidate, then compare. "
        "Options not listed here (e.g. --profile, --users, --duration, --seed, --set) go to both runs.",
    )
    p.add_argument("--baseline", metavar="URL", help="baseline server base URL (A)")
    p.add_argument("--candidate", metavar="URL", help="candidate server base URL (B)")
    p.add_argument(
        "--baseline-cmd", metavar="CMD",
        help="start the baseline server with CMD (must contain {port}); instead of --baseline",
    )  # fmt: skip
    p.add_argument(
        "--candidate-cmd", metavar="CMD",
        help="start the candidate server with CMD (must contain {port}); instead of --candidate",
    )  # fmt: skip
    p.add_argument(
        "--servers", type=Path, metavar="FILE.yaml",
        help="server commands per side (cmd, env, host, port, ready_timeout, log)",
    )  # fmt: skip
    p.add_argument(
        "--ready-timeout", type=float, default=None, metavar="S",
        help="seconds a started server may take to become ready "
        f"(default {DEFAULT_READY_TIMEOUT_S:g})",
    )  # fmt: skip
    p.add_argument(
        "--restart-per-block", action="store_true",
        help="with started servers: restart them for every block (a cold start per block)",
    )  # fmt: skip
    p.add_argument(
        "--out", type=Path, default=None, help="output directory (default runs/canary-<time>)"
    )
    p.add_argument(
        "--mode", choices=MODES, default="simultaneous", help="how the two runs are scheduled"
    )
    p.add_argument(
        "--blocks", type=int, default=DEFAULT_BLOCKS,
        help=f"paired runs (blocks) per side, each with its own seed (default {DEFAULT_BLOCKS}; "
        "with >= 4 the tails, throughput and work done gate; 1: a single run)",
    )  # fmt: skip
    p.add_argument(
        "--block-s", type=float, default=None,
        help="seconds per block (default: the run's duration, the profile's or --duration)",
    )  # fmt: skip
    p.add_argument(
        "--early-stop", action="store_true",
        help=f"judge after each block from {EARLY_FIRST_LOOK} on and stop once the verdict is "
        f"settled (interim looks spend {EARLY_ALPHA_SHARE * 100:g}%% of alpha; not in sequential "
        "mode)",
    )  # fmt: skip
    p.add_argument("--baseline-log", default=None, help="baseline server log to fingerprint")
    p.add_argument("--candidate-log", default=None, help="candidate server log to fingerprint")
    p.add_argument("--no-html", action="store_true", help="skip compare.html")
    add_verdict_options(p)
    return p


def main_canary(argv: list[str]) -> int:
    """`agentload canary`: exit 0 pass, 3 regression, 2 bad input or a side that failed."""
    p = canary_argparser()

    def body(args: argparse.Namespace) -> int:
        run_args: list[str] = args.rest
        for flag in CANARY_FORBIDDEN:
            if any(a == flag or a.startswith(flag + "=") for a in run_args):
                raise CanaryError(
                    f"{flag} is set by canary per side; use --baseline/--candidate/--out/--*-log"
                )
        servers = _server_specs(args)
        try:
            urls = tuple(
                None if side in servers else check_host(getattr(args, side)) for side in SIDES
            )
        except UsageError as e:
            raise CanaryError(str(e)) from None
        for side, log in zip(SIDES, (args.baseline_log, args.candidate_log), strict=True):
            if log and side in servers:
                raise CanaryError(
                    f"--{side}-log: the canary captures the log of a server it starts"
                )
            if log and not Path(log).is_file():
                raise CanaryError(f"server log {log!r} not found")
        if args.out is None:
            from workload.measure.artifacts import new_run_id

            args.out = Path("runs") / f"canary-{new_run_id()}"
        return run_canary(
            urls[0], urls[1], run_args, args.out, args.mode, args.block_s,
            parse_threshold_flags(args.threshold), (args.baseline_log, args.candidate_log),
            blocks=args.blocks, confidence=args.confidence, n_boot=args.n_boot, html=not args.no_html,
            servers=servers or None, restart_per_block=args.restart_per_block,
            early_stop=args.early_stop,
        )  # fmt: skip

    return run_cli("canary", p, argv, body, rest=True)


def _server_specs(args: argparse.Namespace) -> dict[str, ServerSpec]:
    """Per side: the server the canary starts (--*-cmd or --servers), checked against --URL."""
    from workload.run.servers import ServerConfigError

    try:
        specs = load_servers_file(args.servers, SIDES) if args.servers else {}
        for side in SIDES:
            cmd = getattr(args, f"{side}_cmd")
            if cmd is not None:
                if side in specs:
                    raise CanaryError(
                        f"{side}: give --{side}-cmd or a {side} entry in --servers, not both"
                    )
                specs[side] = ServerSpec(side, split_command(cmd, f"--{side}-cmd"))
    except ServerConfigError as e:
        raise CanaryError(str(e)) from None
    if args.ready_timeout is not None:
        if not args.ready_timeout > 0:
            raise CanaryError(f"--ready-timeout must be positive, got {args.ready_timeout:g}")
        specs = {
            s: sp if args.servers and sp.ready_timeout_s != DEFAULT_READY_TIMEOUT_S
            else ServerSpec(sp.side, sp.argv, sp.env, sp.host, sp.port, args.ready_timeout, sp.log)
            for s, sp in specs.items()
        }  # fmt: skip
    for side in SIDES:
        url = getattr(args, side)
        if side in specs and url:
            raise CanaryError(f"give --{side} URL or a {side} server command, not both")
        if side not in specs and not url:
            raise CanaryError(f"{side}: give --{side} URL or --{side}-cmd CMD (or --servers FILE)")
        if side in specs:
            try:
                check_host(f"http://{specs[side].host}:1")
            except UsageError as e:
                raise CanaryError(f"{side} server host: {e}") from None
    return specs
