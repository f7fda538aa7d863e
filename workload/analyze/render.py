"""The console form of a comparison: verdict, gated metrics, details, TTFT by step.

`fmt_value`, `fmt_change` and `fmt_threshold` are shared with the HTML report.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from workload.analyze.catalogue import VERDICT_NODATA, MetricDiff
from workload.observe.safe import sanitize

if TYPE_CHECKING:  # only for the annotation: verdict imports this module
    from workload.analyze.verdict import Comparison


def fmt_value(m: MetricDiff, v: float | None) -> str:
    """A metric value in its display unit."""
    if v is None:
        return "-"
    if m.unit == "ms":
        return f"{v:,.1f}"
    if m.unit == "ratio":
        return f"{100 * v:.2f} %"
    if m.unit in ("/min", "count"):
        return f"{v:,.1f}"
    return f"{v:.3f}"


def fmt_change(m: MetricDiff) -> str:
    """The change and its interval, e.g. '+12.3 % [+5.0, +19.9]'."""
    if m.change is None:
        return "-"
    unit = "%" if m.change_kind == "relative" else "pp"
    s = f"{100 * m.change:+.1f} {unit}"
    if m.ci:
        s += f" [{100 * m.ci[0]:+.1f}, {100 * m.ci[1]:+.1f}]"
    return s


def fmt_threshold(m: MetricDiff) -> str:
    """The threshold in the change's unit, e.g. '10 %' (empty when the metric has none)."""
    if m.threshold is None:
        return ""
    return f"{100 * m.threshold:g} {'%' if m.change_kind == 'relative' else 'pp'}"


def _table(headers: list[str], rows: list[list[str]]) -> list[str]:
    rows = [[c if len(c) <= 60 else c[:57] + "..." for c in r] for r in rows]
    w = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    line = "  ".join(h.ljust(w[i]) for i, h in enumerate(headers))
    out = [line, "  ".join("-" * x for x in w)]
    out += ["  ".join(c.ljust(w[i]) for i, c in enumerate(r)) for r in rows]
    return out


def render_text(c: Comparison) -> str:
    """A console table: verdict, gated metrics, per-class detail, TTFT by step."""
    pa, pb = c.run_a.path, c.run_b.path
    lines = [f"A (baseline):  {sanitize(pa)}", f"B (candidate): {sanitize(pb)}", ""]
    if c.fingerprint_diff:
        lines.append("What changed besides the code (fingerprint / labels):")
        lines += [
            "  " + ln
            for ln in _table(
                ["field", "A", "B"],
                [
                    [sanitize(d["field"]), sanitize(d["a"]), sanitize(d["b"])]
                    for d in c.fingerprint_diff
                ],
            )
        ]
        lines.append("")
    hdr = ["scope", "metric", "A", "B", "change [CI]", "threshold", "verdict"]
    gated = c.rows(gated=True)
    lines.append(
        f"Gated metrics ({c.gated_count} counted; intervals {100 * c.confidence:g} % family-wise, paired by session):"
    )
    if c.gating:
        lines.append(f"  {c.gating}")
    lines += [
        "  " + ln
        for ln in _table(
            hdr,
            [
                [
                    m.scope,
                    m.metric,
                    fmt_value(m, m.a),
                    fmt_value(m, m.b),
                    fmt_change(m),
                    fmt_threshold(m),
                    m.verdict,
                ]
                for m in gated
            ],
        )
    ]
    lines.append("")
    lines.append(f"Details (not gated; {100 * c.confidence:g} % intervals per metric):")
    detail = [
        m
        for m in c.metrics
        if not m.gated and not m.scope.startswith("step:") and m.verdict != VERDICT_NODATA
    ]
    lines += [
        "  " + ln
        for ln in _table(
            hdr[:-2] + ["verdict"],
            [
                [
                    m.scope,
                    m.metric,
                    fmt_value(m, m.a),
                    fmt_value(m, m.b),
                    fmt_change(m),
                    m.verdict + (f" ({m.note})" if m.note else ""),
                ]
                for m in detail
            ],
        )
    ]
    steps = [
        m
        for m in c.metrics
        if m.scope.startswith("step:") and m.metric == "ttft_p95" and m.a is not None
    ]
    if steps:
        lines += ["", "TTFT p95 by session step:"]
        lines += [
            "  " + ln
            for ln in _table(
                ["class", "step", "A ms", "B ms", "change [CI]"],
                [
                    [
                        m.scope.split(":")[1],
                        m.scope.split(":")[2],
                        fmt_value(m, m.a),
                        fmt_value(m, m.b),
                        fmt_change(m),
                    ]
                    for m in steps
                ],
            )
        ]
    kinds = sorted(
        set(c.error_kinds["a"].get("overall", {})) | set(c.error_kinds["b"].get("overall", {}))
    )
    if kinds:
        lines += [
            "",
            "Errors by kind (A / B): "
            + ", ".join(
                f"{k} {c.error_kinds['a']['overall'].get(k, 0)} / {c.error_kinds['b']['overall'].get(k, 0)}"
                for k in kinds
            ),
        ]
    for w in c.warnings:
        lines.append(f"warning: {sanitize(w)}")
    for run in (c.run_a, c.run_b):
        skipped = run.skipped_warning() if hasattr(run, "skipped_warning") else None
        if skipped:
            lines.append(f"warning: {sanitize(skipped)}")
    lines += ["", f"VERDICT: {c.verdict.upper()} (exit {c.exit_code})"]
    return "\n".join(lines)
