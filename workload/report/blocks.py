"""A canary side made of blocks, described as a whole, and each block's own outcome.

A canary side is a directory of `block-*` run directories (workload.analyze.rundata merges
their rows). Its `run.json` facts are block-0's, so everything a report shows for the side
as a whole is rebuilt here: the summary from every block's `stats.json` (Aggregates are
mergeable, so the sum is exact), the header from every block's run.json. What each block
did on its own (its exit code, the SLOs it failed) goes into the per-block table.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from workload.analyze.rundata import RunData
from workload.measure.artifacts import read_json
from workload.measure.stats import Aggregate
from workload.report.views import fmt_count, run_header, run_summary


def block_names(data: RunData) -> list[str]:
    """The side's blocks in order ([] for a plain run directory)."""
    return sorted(data.block_durations, key=lambda b: (len(b), b))


def _block_run(data: RunData, block: str) -> dict[str, Any]:
    try:
        run = read_json(Path(data.path) / block / "run.json")
    except (OSError, ValueError):
        return {}
    return run if isinstance(run, dict) else {}


def block_outcome(run: Mapping[str, Any]) -> dict[str, Any]:
    """One block run's outcome from its run.json: exit code, requests, failed SLO messages."""
    summary = run.get("summary")
    summary = summary if isinstance(summary, dict) else {}
    overall = summary.get("overall")
    overall = overall if isinstance(overall, dict) else {}
    slo = [r for r in run.get("slo_results") or [] if isinstance(r, dict)]
    failed = [str(r.get("message") or r.get("metric")) for r in slo if r.get("passed") is False]
    code = run.get("exit_code")
    return {
        "exit_code": code if isinstance(code, int) else None,
        "exit_reason": str(run.get("exit_reason") or ""),
        "requests": overall.get("requests"),
        "duration_s": run.get("duration_s"),
        "slo_failed": failed,
        "stopped_by": run.get("stopped_by"),
    }


def side_summary(data: RunData) -> dict[str, Any]:
    """Aggregate.summary() of the whole side: every block's stats.json merged (exact), else
    the merged rows; a plain run directory as views.run_summary has it."""
    blocks = block_names(data)
    if not blocks:
        return run_summary(data)
    agg = Aggregate()
    try:
        for b in blocks:
            agg.merge(Aggregate.from_dict(read_json(Path(data.path) / b / "stats.json")))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return run_summary(RunData(data.path, {}, data.req_cols, data.sess_cols, data.metrics,
                                   None, data.duration_s, block_durations=data.block_durations))  # fmt: skip
    return agg.summary(data.duration_s)


def _spread(values: list[Any]) -> str:
    vals = [str(v) for v in values if v not in (None, "")]
    if not vals:
        return "-"
    return vals[0] if len(set(vals)) == 1 else f"{vals[0]} … {vals[-1]}"


def side_header(data: RunData) -> list[tuple[str, str]]:
    """The "Runs" rows of a side: of the whole canary side when it has blocks."""
    blocks = block_names(data)
    header = run_header(data)
    if not blocks:
        return header
    runs = [_block_run(data, b) for b in blocks]
    codes = Counter(block_outcome(r)["exit_code"] for r in runs)
    exits = ", ".join(
        f"{'-' if c is None else c} in {n} of {len(blocks)}"
        for c, n in sorted(codes.items(), key=lambda kv: (kv[0] is None, kv[0] or 0))
    )
    whole = {
        "run": f"{len(blocks)} blocks ({blocks[0]} … {blocks[-1]}; see Blocks)",
        "started": str(runs[0].get("started_at") or "-"),
        "duration": f"{data.duration_s:.0f} s in all" if data.duration_s else "-",
        "seed": _spread([r.get("seed") for r in runs]),
        "exit code": f"per block: {exits}",
    }
    return [(k, whole.get(k, v)) for k, v in header]


def block_rows(a: RunData, b: RunData) -> list[dict[str, Any]]:
    """One row per block: each side's exit code, requests, seconds and failed SLOs."""
    names = sorted(set(block_names(a)) | set(block_names(b)), key=lambda x: (len(x), x))
    rows = []
    for name in names:
        row: dict[str, Any] = {"block": name}
        for side, data in (("a", a), ("b", b)):
            o = block_outcome(_block_run(data, name)) if name in data.block_durations else {}
            row[side] = {
                "exit": "-" if o.get("exit_code") is None else str(o["exit_code"]),
                "requests": fmt_count(o.get("requests")),
                "seconds": f"{o['duration_s']:.0f}" if isinstance(o.get("duration_s"), (int, float)) else "-",
                "slo_failed": o.get("slo_failed") or [],
                "stopped": o.get("stopped_by") not in (None, "end of run"),
                "css": "worse" if o.get("exit_code") not in (0, None) else "",
            }  # fmt: skip
        rows.append(row)
    return rows


def slo_failure_count(rows: list[dict[str, Any]]) -> tuple[int, int]:
    """(block runs that failed an SLO, block runs) over both sides."""
    runs = [r[s] for r in rows for s in ("a", "b")]
    return sum(1 for x in runs if x["slo_failed"]), len(runs)
