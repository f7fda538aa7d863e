"""The HTML report of one run: header, summary table, SLOs, spec-decode check, fingerprint, charts."""

from __future__ import annotations

from pathlib import Path

from workload.analyze.rundata import load_run
from workload.measure.artifacts import write_atomic
from workload.observe.fingerprint import flatten_fingerprint
from workload.report.run_charts import run_charts
from workload.report.views import (
    SUMMARY_COLUMNS,
    fmt_num,
    render_page,
    run_header,
    run_summary,
    summary_rows,
)


def _fingerprint_rows(run: dict) -> list[tuple[str, str, str]]:
    rows = []
    for section in ("fingerprint", "labels"):
        for k, (v, src) in sorted(flatten_fingerprint(run.get(section) or {}).items()):
            rows.append(
                (
                    f"{section}.{k}",
                    "unknown" if v is None else str(v),
                    "" if src is None else str(src),
                )
            )
    return rows


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
                    {k: fmt_num(row.get(k), "{:.4g}") for k in ("client", "server", "difference")},
                )
            )
    return rows


def write_run_report(run_dir: Path, out: Path | None = None) -> Path:
    """Write report.html for a run directory (default: RUN_DIR/report.html); return its path."""
    data = load_run(run_dir)
    out = Path(out) if out else Path(run_dir) / "report.html"
    summary = run_summary(data)
    classes = sorted((summary.get("by_class") or {}).keys()) or [c for c in data.classes if c]
    slo = [x for x in data.run.get("slo_results") or [] if isinstance(x, dict)]
    page = render_page(
        title=f"agentload run {data.run.get('run_id', data.path.name)}",
        header=run_header(data),
        columns=SUMMARY_COLUMNS,
        summary=summary_rows(summary),
        slo=slo,
        spec_check=_spec_check_rows(data.run),
        fingerprint=_fingerprint_rows(data.run),
        charts=run_charts([("A", data, summary)], classes),
        comparison=None,
    )
    write_atomic(out, page)  # never half a report, whatever stops the run
    return out
