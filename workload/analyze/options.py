"""The verdict's command-line options, shared by `compare` and `canary` (they live beside the
verdict, not in workload/cli, because the canary's parser, a floor below cli, uses them)."""

from __future__ import annotations

import argparse

from workload.analyze.prior import DEFAULT_PRIOR, PRIOR_CHOICES
from workload.analyze.thresholds import DEFAULT_THRESHOLDS


def add_verdict_options(p: argparse.ArgumentParser) -> None:
    """Options shared by `compare` and `canary`."""
    p.add_argument(
        "--threshold", action="append", default=[], metavar="METRIC=PCT",
        help="gate METRIC at PCT percent (relative) or points (ratios); 'off' disables; "
        "CLASS.METRIC scopes it to one class. Defaults: "
        + ", ".join(f"{k}={v:g}" for k, v in DEFAULT_THRESHOLDS.items()),
    )  # fmt: skip
    p.add_argument(
        "--confidence", type=float, default=0.95, help="family-wise confidence (default 0.95)"
    )
    p.add_argument("--n-boot", type=int, default=1000, help="bootstrap resamples (default 1000)")
    p.add_argument(
        "--instance-spread", choices=PRIOR_CHOICES, default=DEFAULT_PRIOR,
        help="with 2-3 blocks per side, judge the shifts and tails against this measured spread "
        "between two instances of one server: quiet (one server per host or GPU; the "
        "default), shared (both servers on one busy CPU host), off (leave them ungated)",
    )  # fmt: skip


def instance_prior(args: argparse.Namespace) -> str | None:
    """The `--instance-spread` choice as compare_runs takes it (None: off)."""
    return None if args.instance_spread == "off" else args.instance_spread
