"""`agentload report RUN [--out FILE]`: write the HTML report of a run directory."""

from __future__ import annotations

from pathlib import Path

from workload.errors import ArgParser, CompareError
from workload.report.run_report import write_run_report


def report_argparser(prog: str = "agentload report") -> ArgParser:
    """The `report` command's options."""
    p = ArgParser(prog=prog, description="Write the self-contained HTML report of a run directory.")
    p.add_argument("run", type=Path, help="run directory")
    p.add_argument("--out", type=Path, help="output file (default RUN/report.html)")
    return p


def main_report(argv: list[str]) -> int:
    """`agentload report RUN [--out FILE]`: 0 written, 2 bad input."""
    args = report_argparser().parse_args(argv)
    try:
        path = write_run_report(args.run, args.out)
    except OSError as e:
        raise CompareError(f"cannot write report: {e}") from None
    print(f"report: {path}")
    return 0
