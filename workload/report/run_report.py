"""The HTML report of one run: headline, charts, then the tables (summary, SLOs, tool loop,
idle gaps, spec decode, fingerprint)."""

from __future__ import annotations

from pathlib import Path

from workload.analyze.rundata import RunData, load_run
from workload.measure.artifacts import write_atomic
from workload.report.charts import Chart
from workload.report.console import absent_figures
from workload.report.run_charts import agent_charts, run_charts
from workload.report.run_views import (
    fingerprint_groups,
    headline,
    idle_gap_table,
    slo_status,
    slo_text,
    stage_rows,
    tool_failure_examples,
    tool_rows,
    trace_rows,
)
from workload.report.shape_views import subagent_rows, ttft_split_rows
from workload.report.views import (
    COLUMN_HELP,
    SUMMARY_COLUMNS,
    dig,
    fmt_count,
    fmt_ms,
    fmt_num,
    fmt_pct,
    fmt_value,
    render_page,
    run_header,
    run_summary,
    summary_rows,
)

_COUNTS = ("accepted_tokens", "draft_tokens", "spec_steps")


def _fmt_spec(name: str, v: object) -> str:
    if name in _COUNTS:
        return fmt_count(v)
    return fmt_num(v, "{:.3f}")


def _spec_check_rows(run: dict) -> list[tuple[str, dict[str, str]]]:
    """run.json's spec_decode_crosscheck as table rows (none when nothing was scraped)."""
    check = run.get("spec_decode_crosscheck") or {}
    rows = []
    for name in (
        "accepted_tokens",
        "draft_tokens",
        "spec_steps",
        "draft_acceptance_rate",
        "acceptance_length",
    ):
        row = check.get(name)
        if isinstance(row, dict) and row.get("server") is not None:
            rows.append(
                (
                    name,
                    {k: _fmt_spec(name, row.get(k)) for k in ("client", "server", "difference")},
                )
            )
    return rows


def _spec_means(summary: dict) -> list[tuple[str, str]]:
    """The three acceptance-length means of the whole run (they differ on purpose)."""
    sd = dig(summary, "overall", "spec_decode") or {}
    rows = [
        ("request-weighted", sd.get("acceptance_length_request_mean")),
        ("token-weighted (summary table)", sd.get("acceptance_length_token_weighted")),
        ("pooled 1 + Σa/Σs (as /metrics)", sd.get("acceptance_length_pooled")),
    ]
    return [(k, fmt_num(v, "{:.3f}")) for k, v in rows if v is not None]


def _idle_rows(data: RunData) -> list[list[str]]:
    return [
        [r["bucket"], fmt_count(r["requests"]), fmt_pct(r["cached_ratio"]),
         fmt_ms(r["ttft_p50_ms"]), fmt_ms(r["ttft_p95_ms"])]
        for r in idle_gap_table(data.requests)
    ]  # fmt: skip


def _charts(data: RunData, summary: dict, classes: list[str]) -> list[Chart]:
    """TTFT over time first, then the agent charts, then throughput, ITL, spec and server."""
    base = run_charts([("A", data, summary)], classes)
    return base[:1] + agent_charts(data, summary, classes) + base[1:]


def write_run_report(run_dir: Path, out: Path | None = None) -> Path:
    """Write report.html for a run directory (default: RUN_DIR/report.html); return its path."""
    data = load_run(run_dir, rows=True)
    out = Path(out) if out else Path(run_dir) / "report.html"
    summary = run_summary(data)
    classes = sorted((summary.get("by_class") or {}).keys()) or [c for c in data.classes if c]
    slo = [x for x in data.run.get("slo_results") or [] if isinstance(x, dict)]
    split_rows, split_note = ttft_split_rows(data.requests)
    page = render_page(
        title=f"agentload run {data.run.get('run_id', data.path.name)}",
        header=run_header(data),
        columns=SUMMARY_COLUMNS,
        column_help=COLUMN_HELP,
        summary=summary_rows(summary),
        headline=headline(data, summary),
        slo=[
            dict(
                r,
                text=slo_text(r),
                status=slo_status(r),
                observed_text=fmt_value(r.get("observed"), str(r.get("unit") or "")),
                threshold_text=fmt_value(r.get("threshold"), str(r.get("unit") or "")),
            )
            for r in slo
        ],
        stage_rows=stage_rows(summary, data.run),
        tool_rows=tool_rows(summary),
        tool_examples=tool_failure_examples(data.requests),
        idle_rows=_idle_rows(data),
        ttft_split_rows=split_rows,
        ttft_split_note=split_note,
        subagent_rows=subagent_rows(data.sessions),
        spec_check=_spec_check_rows(data.run),
        spec_means=_spec_means(summary),
        fingerprint=fingerprint_groups(data.run),
        trace_rows=trace_rows(data.run),
        summary_notes=absent_figures(summary.get("overall") or {}),
        charts=_charts(data, summary, classes),
        comparison=None,
    )
    write_atomic(out, page)  # never half a report, whatever stops the run
    return out
