"""Canary: the same seeded traffic against a baseline and a candidate, then a verdict.

Each side is an ordinary `agentload run` child process (so a canary side is
exactly what a CI run records), writing under OUT/baseline and OUT/candidate;
the comparison goes to OUT/comparison.json and OUT/compare.html.

Modes:

* ``simultaneous`` (default): both runs at once. Same sessions, same timing,
  same moment — drifts in the load generator's host hit both sides alike.
* ``sequential``: baseline, then candidate. For two deployments that cannot
  run side by side (one GPU); time-of-day drift lands in the difference.
* ``interleaved``: the run is cut into N blocks per side, alternated in
  the order AB BA BA AB (repeating), so linear and quadratic drift over
  time cancel out between the sides. Block i uses
  seed S+i on both sides (fresh sessions per block, paired across sides);
  blocks land in OUT/baseline/block-i and are merged by `compare` (session ids
  prefixed by block).
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

from workload.analyze.catalogue import CompareError
from workload.analyze.options import QuietParser, add_verdict_options, run_cli
from workload.analyze.thresholds import parse_threshold_flags
from workload.analyze.verdict import compare_runs
from workload.errors import EXIT_BAD_INPUT, UsageError
from workload.procs import die_with_parent, stop_child
from workload.run.spec import (
    CANARY_FORBIDDEN,
    build_run_parser,
    check_host,
    raw_values,
    resolve_spec,
)

MODES = ("simultaneous", "sequential", "interleaved")
SIDES = ("baseline", "candidate")

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
    jobs: list[list[tuple[str, list[str], Path]]], timeout_s: float, launch: Launcher
) -> dict[str, int]:
    """Run job groups one after another; the jobs inside a group run at once."""
    codes: dict[str, int] = {}
    for group in jobs:
        procs = []
        try:
            for name, cmd, log in group:
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
    return codes


def run_canary(
    baseline_url: str,
    candidate_url: str,
    run_args: Sequence[str],
    out_dir: Path,
    mode: str = "simultaneous",
    block_s: float | None = None,
    thresholds: dict | None = None,
    server_logs: tuple[str | None, str | None] = (None, None),
    *,
    blocks: int = 4,
    confidence: float | None = None,
    n_boot: int = 1000,
    html: bool = True,
    launch: Launcher = _launch,
) -> int:
    """Run both sides, compare, write comparison.json / compare.html, print the verdict.

    Returns the compare exit code (0 pass, 3 regression); raises CanaryError on bad input.
    """
    if mode not in MODES:
        raise CanaryError(f"bad mode {mode!r}: one of {', '.join(MODES)}")
    out_dir = Path(out_dir)
    for side in SIDES:
        if (out_dir / side).exists() and any((out_dir / side).iterdir()):
            raise CanaryError(f"{out_dir / side} already holds a run; choose another --out")
    plan = traffic_plan(run_args)
    urls = dict(zip(SIDES, (baseline_url, candidate_url), strict=True))
    logs = dict(zip(SIDES, server_logs, strict=True))
    timeout = plan["duration_s"] + GRACE_S

    def job(side: str, out: Path, args: Sequence[str]) -> tuple[str, list[str], Path]:
        name = side if out.parent == out_dir else f"{side} {out.name}"
        return name, run_command(urls[side], out, args, logs[side]), out.with_suffix(".log")

    if mode == "interleaved":
        if blocks < 2:
            raise CanaryError("interleaved mode needs at least 2 blocks per side")
        bs = float(block_s) if block_s else plan["duration_s"] / blocks
        n = blocks if not block_s else max(2, round(plan["duration_s"] / bs))
        base = _strip_opts(run_args, ("--duration", "--seed"))
        groups = []
        for i in range(n):
            args = [*base, "--duration", f"{bs:g}s", "--seed", str(plan["seed"] + i)]
            order = SIDES if i % 4 in (0, 3) else SIDES[::-1]  # AB BA BA AB: drift cancels
            for side in order:
                groups.append([job(side, out_dir / side / f"block-{i}", args)])
        timeout = bs + GRACE_S
    elif mode == "sequential":
        groups = [[job(s, out_dir / s, run_args)] for s in SIDES]
    else:
        groups = [[job(s, out_dir / s, run_args) for s in SIDES]]
    out_dir.mkdir(parents=True, exist_ok=True)
    _run_sides(groups, timeout, launch)

    cmp = compare_runs(
        out_dir / "baseline",
        out_dir / "candidate",
        thresholds,
        confidence=confidence,
        n_boot=n_boot,
    )
    from workload.measure.artifacts import write_json

    d = cmp.to_dict()
    d["canary"] = {
        "mode": mode,
        "baseline": baseline_url,
        "candidate": candidate_url,
        "run_args": list(run_args),
    }
    write_json(out_dir / "comparison.json", d)
    print(cmp.render_text())
    if html:
        from workload.report.compare_report import write_compare_report

        write_compare_report(cmp, out_dir / "compare.html")
        print(f"report: {out_dir / 'compare.html'}")
    return cmp.exit_code


def canary_argparser(prog: str = "agentload canary") -> argparse.ArgumentParser:
    """Canary options; everything else is passed to both `agentload run`s unchanged."""
    p = QuietParser(
        prog=prog,
        allow_abbrev=False,
        description="Run the same seeded traffic against a baseline and a candidate, then compare. "
        "Options not listed here (e.g. --profile, --users, --duration, --seed, --set) go to both runs.",
    )
    p.add_argument("--baseline", required=True, metavar="URL", help="baseline server base URL (A)")
    p.add_argument(
        "--candidate", required=True, metavar="URL", help="candidate server base URL (B)"
    )
    p.add_argument(
        "--out", type=Path, default=None, help="output directory (default runs/canary-<time>)"
    )
    p.add_argument(
        "--mode", choices=MODES, default="simultaneous", help="how the two runs are scheduled"
    )
    p.add_argument("--blocks", type=int, default=4, help="interleaved: blocks per side (default 4)")
    p.add_argument(
        "--block-s", type=float, default=None, help="interleaved: block length in seconds"
    )
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
        try:
            urls = check_host(args.baseline), check_host(args.candidate)
        except UsageError as e:
            raise CanaryError(str(e)) from None
        for log in (args.baseline_log, args.candidate_log):
            if log and not Path(log).is_file():
                raise CanaryError(f"server log {log!r} not found")
        if args.out is None:
            from workload.measure.artifacts import new_run_id

            args.out = Path("runs") / f"canary-{new_run_id()}"
        return run_canary(
            urls[0], urls[1], run_args, args.out, args.mode, args.block_s,
            parse_threshold_flags(args.threshold), (args.baseline_log, args.candidate_log),
            blocks=args.blocks, confidence=args.confidence, n_boot=args.n_boot, html=not args.no_html,
        )  # fmt: skip

    return run_cli("canary", p, argv, body, rest=True)
