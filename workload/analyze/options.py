"""Command-line pieces shared by `compare`, `canary` and `report`.

They live here, not in workload/cli, because run/canary (a layer below cli)
builds its parser with them: the verdict options, a parser that raises instead
of exiting, and `run_cli`, which turns bad input into one line and exit 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from workload.analyze.catalogue import CompareError
from workload.analyze.thresholds import DEFAULT_THRESHOLDS
from workload.errors import UsageError


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


class ArgError(UsageError):
    """Bad command-line arguments (reported as one line, exit 2)."""


class QuietParser(argparse.ArgumentParser):
    """An ArgumentParser that raises ArgError instead of printing usage and exiting."""

    def error(self, message: str):  # type: ignore[override]
        raise ArgError(message)


def run_cli(
    name: str,
    parser: argparse.ArgumentParser,
    argv: list[str],
    body: Callable[[argparse.Namespace], int],
    *,
    rest: bool = False,
) -> int:
    """Parse argv and call body(args); bad input -> one line on stderr and 2.

    With `rest`, unknown arguments are kept in `args.rest` (after an optional `--`).
    """
    try:
        if rest:
            args, extra = parser.parse_known_args(argv)
            args.rest = extra[1:] if extra[:1] == ["--"] else [a for a in extra if a != "--"]
        else:
            args = parser.parse_args(argv)
        return int(body(args))
    except SystemExit as e:  # --help
        return int(e.code or 0)
    except (ArgError, CompareError) as e:
        print(f"agentload {name}: error: {e}", file=sys.stderr)
        return 2
