"""`agentload compare RUN_A RUN_B`: the verdict on the console, comparison.json, the HTML report."""

from __future__ import annotations

from pathlib import Path

from workload.analyze.options import add_verdict_options, instance_prior
from workload.analyze.render import input_warnings, render_text
from workload.analyze.startup import add_startup, split_startup_flags
from workload.analyze.thresholds import parse_threshold_flags
from workload.analyze.verdict import compare_runs
from workload.errors import ArgParser, print_warning
from workload.measure.artifacts import write_json
from workload.report.compare_report import write_compare_report


def compare_argparser(prog: str = "agentload compare") -> ArgParser:
    """The `compare` command's options."""
    p = ArgParser(
        prog=prog, description="Compare two runs (A = baseline, B = candidate) with a verdict."
    )
    p.add_argument("run_a", type=Path, help="baseline run directory")
    p.add_argument("run_b", type=Path, help="candidate run directory")
    add_verdict_options(p)
    p.add_argument("--html", type=Path, help="write the comparison report here")
    p.add_argument("--json", type=Path, help="write comparison.json here")
    return p


def main_compare(argv: list[str]) -> int:
    """`agentload compare RUN_A RUN_B`: print the verdict, exit 0 pass / 3 regression / 2 bad input."""
    args = compare_argparser().parse_args(argv)
    flags, startup_flags = split_startup_flags(parse_threshold_flags(args.threshold))
    cmp = compare_runs(
        args.run_a, args.run_b, flags, confidence=args.confidence, n_boot=args.n_boot,
        instance_prior=instance_prior(args),
    )  # fmt: skip
    add_startup(cmp, startup_flags)  # canary-started servers: time to ready, memory
    print(render_text(cmp))
    for w in input_warnings(cmp):  # damaged input
        print_warning(w)
    if args.json:
        write_json(args.json, cmp.to_dict())
    if args.html:
        write_compare_report(cmp, args.html)
        print(f"report: {args.html}")
    return cmp.exit_code
