"""The HTML report of a comparison: verdict and fingerprint diff on top, then A and B overlaid."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from workload.analyze.catalogue import (
    VERDICT_BETTER,
    VERDICT_INCONCLUSIVE,
    VERDICT_MIXED,
    VERDICT_NODATA,
    VERDICT_WORSE,
    MetricDiff,
)
from workload.analyze.comparison import Comparison
from workload.analyze.render import fmt_change, fmt_threshold, fmt_value, headline, input_warnings
from workload.report.blocks import block_rows, side_header, side_summary, slo_failure_count
from workload.report.run_charts import run_charts
from workload.report.views import SUMMARY_COLUMNS, fmt_num, render_page, summary_rows


def _metric_row(m: MetricDiff) -> dict[str, Any]:
    css = {
        VERDICT_WORSE: "worse", VERDICT_BETTER: "better", VERDICT_NODATA: "nodata",
        VERDICT_INCONCLUSIVE: "caution",
    }.get(m.verdict, "same")  # fmt: skip
    return {
        "scope": m.scope,
        "metric": m.metric,
        "a": fmt_value(m, m.a),
        "b": fmt_value(m, m.b),
        "change": fmt_change(m),
        "threshold": fmt_threshold(m),
        "verdict": m.verdict,
        "css": css,
        "paired": f"{100 * m.paired_share:.0f} %",
        "n": f"{m.n_a} / {m.n_b}",
    }


def write_compare_report(comparison: Comparison, out: Path) -> Path:
    """Write the A/B report: verdict and fingerprint diff on top, then A and B overlaid."""
    c = comparison
    # A canary side of blocks is described as a whole (every block merged), never as block-0.
    sa, sb = side_summary(c.run_a), side_summary(c.run_b)
    blocks = block_rows(c.run_a, c.run_b)
    classes = sorted(set(sa.get("by_class") or {}) | set(sb.get("by_class") or {})) or [
        x for x in sorted(set(c.run_a.classes) | set(c.run_b.classes)) if x
    ]
    detail = [m for m in c.metrics if not m.gated and not m.scope.startswith(("step:", "slice:"))]
    slices = [
        m
        for m in c.metrics
        if m.scope.startswith("slice:") and m.verdict in (VERDICT_WORSE, VERDICT_BETTER)
    ]
    steps = [
        m for m in c.metrics if m.scope.startswith("step:") and m.metric in ("ttft_p50", "ttft_p95")
    ]
    page = render_page(
        title="agentload comparison",
        header=[],
        columns=SUMMARY_COLUMNS,
        summary=[],
        slo=[],
        fingerprint=[],
        charts=run_charts([("A", c.run_a, sa), ("B", c.run_b, sb)], classes),
        comparison={
            "verdict": c.verdict,
            "verdict_css": {
                VERDICT_WORSE: "worse",
                VERDICT_MIXED: "worse",
                VERDICT_INCONCLUSIVE: "caution",
                VERDICT_BETTER: "better",
            }.get(c.verdict, "same"),  # fmt: skip
            # The 3-5 lines that decide the rollout, first in the page.
            "headline": headline(c)[1:],
            "where": c.where,
            "slices": [_metric_row(m) for m in slices],
            "tool_loop": _tool_loop_rows(c),
            "exit_code": c.exit_code,
            "confidence": f"{100 * c.confidence:g} %",
            "gated_count": c.gated_count,
            "weighted": c.weighted_alpha,
            "gating": c.gating,
            "n_boot": c.n_boot,
            "header_a": side_header(c.run_a),
            "header_b": side_header(c.run_b),
            "blocks": blocks,
            "blocks_slo_failed": slo_failure_count(blocks),
            "fp_diff": _fp_diff_rows(c),
            "gated": [_metric_row(m) for m in c.rows(gated=True)],
            "detail": [_metric_row(m) for m in detail],
            "steps": [_metric_row(m) for m in steps],
            "summary_a": summary_rows(sa),
            "summary_b": summary_rows(sb),
            "warnings": [*c.warnings, *input_warnings(c)],
            "errors": _error_rows(c),
            "server": _server_rows(c),
        },
    )
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(page, encoding="utf-8")
    return out


def _tool_loop_rows(c: Comparison) -> list[tuple[Any, ...]]:
    """The first tool-loop failures, B's first: (side, class, step, tool, what, request id)."""
    return [
        (side, e["class"], e["step"], e["tool"], e["what"], e["request_id"])
        for side in ("b", "a")
        for e in (c.tool_loop.get(side) or [])
    ]


def _fp_diff_rows(c: Comparison) -> list[tuple[str, str, str, str]]:
    """(field, A, B, where each was observed) for every fingerprint field that differs."""
    return [
        (
            d["field"],
            "unknown" if d["a"] is None else str(d["a"]),
            "unknown" if d["b"] is None else str(d["b"]),
            " / ".join(str(x) for x in {d.get("source_a"), d.get("source_b")} if x),
        )
        for d in c.fingerprint_diff
    ]  # fmt: skip


def _error_rows(c: Comparison) -> list[tuple[str, int, int]]:
    """(error kind, count in A, count in B), every kind either run saw."""
    kinds = sorted(
        set(c.error_kinds["a"].get("overall", {})) | set(c.error_kinds["b"].get("overall", {}))
    )
    return [
        (k, c.error_kinds["a"]["overall"].get(k, 0), c.error_kinds["b"]["overall"].get(k, 0))
        for k in kinds
    ]


def _server_rows(c: Comparison) -> list[tuple[str, str, str, str]]:
    """(/metrics series, statistic, A, B) for each statistic either run has."""
    server_names = sorted(set(c.server.get("a", {})) | set(c.server.get("b", {})))
    rows = []
    for n in server_names:
        va, vb = c.server["a"].get(n, {}), c.server["b"].get(n, {})
        for stat in ("delta", "mean", "max"):
            if stat in va or stat in vb:
                rows.append(
                    (n, stat, fmt_num(va.get(stat), "{:.4g}"), fmt_num(vb.get(stat), "{:.4g}"))
                )
    return rows
