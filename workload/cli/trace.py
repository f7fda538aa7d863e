"""`agentload trace`: import, fit and export real request traces.

    agentload trace import FORMAT|auto FILE [-o out.jsonl] [--limit N] [--on-bad-line skip|stop]
    agentload trace fit FILE -o profile.yaml [--format F] [--limit N] [--on-bad-line ...]
        (an agent-session trace, or a Claude Code / Codex log, fits a profile with agent
        shapes and prints its sessions' statistics beside the trace's)
    agentload trace export RUN_DIR -o FILE

Formats and the normalised JSONL are documented in ``workload.plan.traces``.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

import yaml

from workload.errors import ArgParser, UsageError
from workload.plan.shapes import MAX_SUBAGENT_DEPTH
from workload.plan.traces import (
    AGENT_FORMATS,
    FORMATS,
    agent_stats,
    compare_stats,
    detect_any,
    export_run,
    export_run_sessions,
    fit_agent_profile,
    fit_profile,
    profile_stats,
    read_agent_trace,
    read_trace_keeping_reuse,
    summarize,
    summarize_agents,
    too_deep,
    write_agent_trace,
    write_trace,
)

SHOW_BAD = 10  # bad lines printed one by one; the rest are counted


def _limit(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        n = int(text)
    except ValueError:
        raise UsageError(f"bad --limit {text!r}: it must be a whole number") from None
    if n < 1:
        raise UsageError(f"bad --limit {text}: it must be at least 1")
    return n


def _add_read_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--limit", default=None, help="read only the first N requests (agent traces: sessions)"
    )
    p.add_argument(
        "--on-bad-line",
        default="skip",
        choices=["skip", "stop"],
        help="skip (count and report) or stop at a malformed line (default skip)",
    )


def build_parser() -> argparse.ArgumentParser:
    p = ArgParser(prog="agentload trace", description="Import, fit and export request traces.")
    sub = p.add_subparsers(dest="what", required=True, parser_class=ArgParser)
    imp = sub.add_parser("import", help="read a trace, print a summary, write our JSONL")
    imp.add_argument(
        "format", choices=["auto", *FORMATS, *AGENT_FORMATS], help="trace format or auto"
    )
    imp.add_argument(
        "file", help="trace file (a run directory for requests; a folder of agent sessions)"
    )
    imp.add_argument("-o", "--out", default="", help="write the normalised JSONL here")
    _add_read_options(imp)
    fit = sub.add_parser("fit", help="fit an agentload profile to a trace")
    fit.add_argument("file", help="trace file (or an `agentload record` directory)")
    fit.add_argument("-o", "--out", required=True, help="profile YAML to write")
    fit.add_argument("--format", default="auto", choices=["auto", *FORMATS, *AGENT_FORMATS])
    fit.add_argument("--name", default="", help="profile name (default: the output file stem)")
    _add_read_options(fit)
    exp = sub.add_parser("export", help="write a run's traffic as a trace")
    exp.add_argument("run_dir", help="run directory")
    exp.add_argument("-o", "--out", required=True, help="trace file to write")
    exp.add_argument(
        "--format",
        default="mooncake",
        choices=["mooncake", "agent-session"],
        help="mooncake (requests with block hash ids; default) or agent-session (its sessions)",
    )
    return p


def _report_bad(trace) -> None:  # type: ignore[no-untyped-def]
    for b in trace.bad_lines[:SHOW_BAD]:
        print(f"agentload: skipped {b}", file=sys.stderr)
    if len(trace.bad_lines) > SHOW_BAD:
        print(
            f"agentload: ... and {len(trace.bad_lines) - SHOW_BAD} more bad lines", file=sys.stderr
        )


def _summary_lines(s: dict) -> list[str]:
    def f(v, fmt):  # type: ignore[no-untyped-def]
        return "-" if v is None else format(v, fmt)

    return [
        f"trace     {s['source']} ({s['format']})",
        f"requests  {s['requests']}",
        f"duration  {f(s['duration_s'], '.1f')} s",
        f"rate      {f(s['rate_rps'], '.3f')} req/s",
        f"CV        {f(s['interarrival_cv'], '.3f')} (inter-arrival)"
        + (f"; timestamps quantised to {s['quantum_s']:g} s" if s["quantum_s"] else ""),
        f"input     {f(s['mean_input_tokens'], '.1f')} tokens mean",
        f"output    {f(s['mean_output_tokens'], '.1f')} tokens mean",
        "ideal hit "
        + (
            f"{s['ideal_hit_ratio']:.1%} of blocks, {s['ideal_hit_ratio_tokens']:.1%} of tokens"
            if s["ideal_hit_ratio"] is not None
            else "- (no hash ids)"
        ),
        f"bad lines {s['bad_lines']}",
    ]


def _agent_lines(s: dict[str, Any]) -> list[str]:
    def pc(d: dict[str, Any]) -> str:
        if not d["n"]:
            return "-"
        return f"p50 {d['p50']:g} s, p90 {d['p90']:g} s, max {d['max']:g} s ({d['n']})"

    def v(x: float | None, unit: str = "") -> str:
        return "-" if x is None else f"{x:g}{unit}"

    lines = [
        f"trace     {s['source']} ({s['format']})",
        f"sessions  {s['sessions']} ({s['root_sessions']} top-level, {s['subagents']} subagents"
        + (
            f", {s['nested_subagents']} of them run by a subagent)"
            if s["nested_subagents"]
            else ")"
        ),
        f"rounds    {s['rounds']} ({v(s['rounds_per_session'])} per session)",
        f"tools     {s['tool_calls']} calls in {s['tool_rounds']} rounds; "
        f"{s['parallel_tool_rounds']} rounds ran tools in parallel",
        "reuse     "
        + ("-" if s["prefix_reuse"] is None else f"{s['prefix_reuse']:.1%}")
        + " of input tokens were a reused prefix",
        f"input     {v(s['mean_input_tokens'])} tokens mean (prefix "
        f"{v(s['mean_prefix_tokens'])} + appended {v(s['mean_appended_tokens'])})",
        f"output    {v(s['mean_output_tokens'])} tokens mean (reasoning "
        f"{v(s['mean_reasoning_tokens'])})",
        f"tool wait {pc(s['tool_wait_s'])} (after the answer, slowest tool of a round)",
        f"think     {pc(s['think_s'])} (idle before a round, no tool running)",
    ]
    for name, d in s["tool_latency_s"].items():
        lines.append(f"  {name:<14} {pc(d)}")
    lines.append(f"bad lines {s['bad_lines']}")
    return lines


def _import_agents(args: argparse.Namespace, fmt: str) -> int:
    trace = read_agent_trace(args.file, fmt, limit=_limit(args.limit), on_bad_line=args.on_bad_line)
    _report_bad(trace)
    if not trace.sessions:
        raise UsageError(f"{args.file}: no readable rounds")
    print("\n".join(_agent_lines(summarize_agents(trace))))
    if args.out:
        n = write_agent_trace(trace, args.out)
        print(f"wrote     {n} rounds to {args.out} (agent-session format)")
    return 0


def _fit_agents(args: argparse.Namespace, fmt: str) -> int:
    """`trace fit` of agent sessions (a recording, an import): a profile of agent sessions."""
    trace = read_agent_trace(args.file, fmt, limit=_limit(args.limit), on_bad_line=args.on_bad_line)
    _report_bad(trace)
    if not trace.sessions:
        raise UsageError(f"{args.file}: no readable rounds")
    prof = fit_agent_profile(trace, name=args.name or Path(args.out).stem)
    Path(args.out).write_text(yaml.safe_dump(prof, sort_keys=False))
    print(f"agentload: wrote profile {args.out} ({prof['description']})")
    rows = compare_stats(agent_stats(trace), profile_stats(prof))
    print("\n".join(fit_lines(rows)))
    if deep := too_deep(trace):
        print(
            f"note: {deep} subagent(s) of the trace ran more than {MAX_SUBAGENT_DEPTH} levels "
            "deep; the fit leaves them out (replay the trace itself to play them)"
        )
    return 0


def fit_lines(rows: list[dict[str, Any]]) -> list[str]:
    """The fitted profile's session statistics beside the trace's, met within 10 % or not."""

    def v(x: float | None) -> str:
        return "-" if x is None else f"{x:,.3g}" if abs(x) < 100 else f"{x:,.0f}"

    out = [f"{'statistic':<34} {'trace':>10} {'fitted':>10} {'diff':>8}  within 10 %"]
    for r in rows:
        d = r["diff"]
        diff = "-" if d is None else f"{100 * d:+.1f}%" if math.isfinite(d) else "inf"
        out.append(
            f"{r['statistic']:<34} {v(r['trace']):>10} {v(r['fitted']):>10} {diff:>8}  "
            + ("met" if r["met"] else "not met")
        )
    met = sum(r["met"] for r in rows)
    out.append(f"{met} of {len(rows)} statistics within 10 % (fitted: the sessions the profile "
               "plans, sizes as sent)")  # fmt: skip
    return out


def _read(args: argparse.Namespace, fmt: str):  # type: ignore[no-untyped-def]
    trace = read_trace_keeping_reuse(
        args.file, fmt, limit=_limit(args.limit), on_bad_line=args.on_bad_line
    )
    _report_bad(trace)
    if not trace.requests:
        raise UsageError(f"{args.file}: no readable requests")
    return trace


def _run(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if args.what == "import":
        fmt = detect_any(args.file) if args.format == "auto" else args.format
        if fmt in AGENT_FORMATS:
            return _import_agents(args, fmt)

        trace = _read(args, fmt)
        print("\n".join(_summary_lines(summarize(trace))))
        if trace.reuse:
            print(f"reuse     {trace.reuse}")
        if args.out:
            n = write_trace(trace, args.out)
            print(f"wrote     {n} requests to {args.out}")
        return 0
    if args.what == "fit":
        fmt = detect_any(args.file) if args.format == "auto" else args.format
        if fmt in AGENT_FORMATS:
            return _fit_agents(args, fmt)
        trace = _read(args, fmt)
        prof = fit_profile(trace, name=args.name or Path(args.out).stem)
        Path(args.out).write_text(yaml.safe_dump(prof, sort_keys=False))
        print(f"agentload: wrote profile {args.out} ({prof['description']})")
        return 0
    if args.format == "agent-session":
        return _export_sessions(args)

    res = export_run(args.run_dir, args.out)
    for s in res.skipped[:SHOW_BAD]:
        print(f"agentload: skipped {s}", file=sys.stderr)
    if len(res.skipped) > SHOW_BAD:
        print(f"agentload: ... and {len(res.skipped) - SHOW_BAD} more skipped", file=sys.stderr)
    print(
        f"agentload: wrote {res.rows} requests to {args.out} ({res.verified} checked against "
        f"body_hash, {res.unverified} unchecked, {len(res.skipped)} skipped)"
    )
    return 0


def _export_sessions(args: argparse.Namespace) -> int:
    if not Path(args.run_dir).is_dir():
        raise UsageError(f"{args.run_dir}: not a run directory")
    trace, skipped = export_run_sessions(args.run_dir)
    for s in skipped[:SHOW_BAD]:
        print(f"agentload: skipped {s}", file=sys.stderr)
    if not trace.sessions:
        raise UsageError(f"{args.run_dir}: no answered requests to export")
    n = write_agent_trace(trace, args.out)
    print(
        f"agentload: wrote {n} rounds of {len(trace.sessions)} sessions to {args.out} "
        f"(agent-session format; {len(skipped)} corrupt lines skipped)"
    )
    return 0


def main_trace(argv: list[str]) -> int:
    """Run `agentload trace ...` (bad input raises: one line and exit 2 at the edge)."""
    return _run(argv)
