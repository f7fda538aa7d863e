"""A run directory as a trace, with the run's prefix reuse.

requests.jsonl records sizes and a ``body_hash``, not prompts, so read on its own a run
replays as requests that share nothing (0 % cached against the run's 90 %). But a run with
scripted history can be re-planned from its run.json (`_export.replan_run`, the same
re-planning `agentload trace export` checks against every ``body_hash``): its prompts'
512-token blocks become Mooncake hash ids, and the replay sends the reuse the run had.
A run that cannot be re-planned (``history: actual``, ``--tokenizer server``, no run.json)
is read as plain requests and ``Trace.reuse`` says why it shares nothing.
"""

from __future__ import annotations

from pathlib import Path

from workload.errors import TraceError
from workload.plan.traces._export import replan_run
from workload.plan.traces._read import (
    BadLine,
    OnBadLine,
    Trace,
    TraceRequest,
    detect_format,
    read_trace,
)


def _bad(where: str) -> BadLine:
    """'path:line: reason' (as ExportResult.skipped has it) -> BadLine."""
    loc, _, reason = where.partition(": ")
    path, _, line = loc.rpartition(":")
    return BadLine(path or loc, int(line) if line.isdigit() else 0, reason)


def read_trace_keeping_reuse(
    path: str | Path,
    fmt: str = "auto",
    *,
    limit: int | None = None,
    on_bad_line: OnBadLine = "skip",
) -> Trace:
    """`read_trace`, except that a run directory is re-planned to keep its prefix reuse
    (``limit``: the first N requests by start time). Raises TraceError as `read_trace`."""
    p = Path(path)
    if not p.is_dir() or not (p / "run.json").is_file():
        return read_trace(path, fmt, limit=limit, on_bad_line=on_bad_line)
    if (detect_format(p) if fmt == "auto" else fmt) != "requests":
        return read_trace(path, fmt, limit=limit, on_bad_line=on_bad_line)
    try:
        rows, res = replan_run(p)
    except TraceError as e:
        trace = read_trace(path, fmt, limit=limit, on_bad_line=on_bad_line)
        why = str(e).removeprefix(f"{p}: ")
        trace.reuse = f"none: the prompts cannot be rebuilt ({why})"
        return trace
    if len(res.skipped) > res.verified + res.unverified:
        # Most rows do not re-plan (a run made by another version of the planner, or edited
        # records): replay the records as they are rather than lose them.
        trace = read_trace(path, fmt, limit=limit, on_bad_line=on_bad_line)
        trace.reuse = (
            f"none: {len(res.skipped)} of {len(res.skipped) + res.verified + res.unverified} "
            f"requests do not re-plan from run.json (first: {res.skipped[0]})"
        )
        return trace
    bad = [_bad(s) for s in res.skipped]
    if bad and on_bad_line == "stop":
        raise TraceError(f"{bad[0]} (use --on-bad-line skip to skip such lines)")
    reqs: list[TraceRequest] = []
    for r in rows:  # sorted by start; the first at 0
        if r["input_length"] < 1:
            bad.append(BadLine(str(p), 0, f"session {r['session_id']}: an empty prompt"))
            continue
        reqs.append(
            TraceRequest(
                r["timestamp"] / 1000.0,
                int(r["input_length"]),
                int(r["output_length"]),
                tuple(r["hash_ids"]),
                str(r["session_id"]),
            )
        )
    if limit is not None:
        reqs = reqs[:limit]
    trace = Trace(reqs, str(p), "requests", bad)
    trace.reuse = (
        f"kept: prompts re-planned from run.json, {res.verified} of "
        f"{res.verified + res.unverified} checked against their body_hash"
    )
    return trace
