"""`agentload canary`'s options: the two targets (URLs or server commands), the block design,
the verdict's options; every other option is a run option for both sides, parsed once."""

from __future__ import annotations

import argparse
from pathlib import Path

from workload.analyze.options import add_verdict_options, instance_prior
from workload.analyze.thresholds import parse_threshold_flags
from workload.errors import ArgParser, CanaryError, UsageError
from workload.measure.artifacts import new_run_id
from workload.orchestrate.canary.canary import DEFAULT_BLOCKS, MODES, SIDES, run_canary
from workload.orchestrate.canary.early_stop import EARLY_ALPHA_SHARE, EARLY_FIRST_LOOK
from workload.orchestrate.canary.servers import (
    DEFAULT_READY_TIMEOUT_S,
    ServerSpec,
    load_servers_file,
    split_command,
)
from workload.orchestrate.canary.warmup import parse_warmup
from workload.run.options import CANARY_FORBIDDEN, check_host


def canary_argparser(prog: str = "agentload canary") -> ArgParser:
    """Canary options; everything else is passed to both `agentload run`s unchanged."""
    p = ArgParser(
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
    p.add_argument(
        "--warmup", default=None, metavar="S",
        help="seconds of the traffic sent to a side before its first block and after every "
        "start of its server, not judged (default 10s for servers the canary starts, "
        "0 for URLs)",
    )  # fmt: skip
    p.add_argument("--baseline-log", default=None, help="baseline server log to fingerprint")
    p.add_argument("--candidate-log", default=None, help="candidate server log to fingerprint")
    p.add_argument("--no-html", action="store_true", help="skip compare.html")
    add_verdict_options(p)
    return p


def main_canary(argv: list[str]) -> int:
    """`agentload canary`: exit 0 pass, 3 regression, 4 inconclusive, 2 bad input."""
    args, extra = canary_argparser().parse_known_args(argv)
    run_args = extra[1:] if extra[:1] == ["--"] else [a for a in extra if a != "--"]
    for flag in CANARY_FORBIDDEN:
        if any(a == flag or a.startswith(flag + "=") for a in run_args):
            raise CanaryError(
                f"{flag} is set by canary per side; use --baseline/--candidate/--out/--*-log"
            )
    servers = _server_specs(args)
    try:
        urls = tuple(None if side in servers else check_host(getattr(args, side)) for side in SIDES)
    except UsageError as e:
        raise CanaryError(str(e)) from None
    for side, log in zip(SIDES, (args.baseline_log, args.candidate_log), strict=True):
        if log and side in servers:
            raise CanaryError(f"--{side}-log: the canary captures the log of a server it starts")
        if log and not Path(log).is_file():
            raise CanaryError(f"server log {log!r} not found")
    out = args.out if args.out is not None else Path("runs") / f"canary-{new_run_id()}"
    return run_canary(
        urls[0], urls[1], run_args, out, args.mode, args.block_s,
        parse_threshold_flags(args.threshold), (args.baseline_log, args.candidate_log),
        blocks=args.blocks, confidence=args.confidence, n_boot=args.n_boot, html=not args.no_html,
        servers=servers or None, restart_per_block=args.restart_per_block,
        early_stop=args.early_stop, warmup_s=parse_warmup(args.warmup, bool(servers)),
        instance_prior=instance_prior(args),
    )  # fmt: skip


def _server_specs(args: argparse.Namespace) -> dict[str, ServerSpec]:
    """Per side: the server the canary starts (--*-cmd or --servers), checked against --URL."""
    specs = load_servers_file(args.servers, SIDES) if args.servers else {}
    for side in SIDES:
        cmd = getattr(args, f"{side}_cmd")
        if cmd is not None:
            if side in specs:
                raise CanaryError(
                    f"{side}: give --{side}-cmd or a {side} entry in --servers, not both"
                )
            specs[side] = ServerSpec(side, split_command(cmd, f"--{side}-cmd"))
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
