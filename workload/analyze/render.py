"""The console form of a comparison: verdict, gated metrics, details, TTFT by step.

`fmt_value`, `fmt_change` and `fmt_threshold` are shared with the HTML report.
"""

from __future__ import annotations

from workload.analyze.catalogue import (
    HEADLINE_ORDER,
    VERDICT_BETTER,
    VERDICT_INCONCLUSIVE,
    VERDICT_NODATA,
    VERDICT_WORSE,
    MetricDiff,
)
from workload.analyze.comparison import Comparison
from workload.analyze.slices import fmt_delta, metric_label
from workload.observe.safe import sanitize


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


def fmt_bound(m: MetricDiff) -> str:
    """The equivalence bound (worse side of the one-sided interval), e.g. '+14.2 %'."""
    if m.eq_bound is None:
        return "-"
    return f"{100 * m.eq_bound:+.1f} {'%' if m.change_kind == 'relative' else 'pp'}"


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


def _order(m: MetricDiff) -> tuple[int, str]:
    i = HEADLINE_ORDER.index(m.metric) if m.metric in HEADLINE_ORDER else len(HEADLINE_ORDER)
    return i, m.scope


def _scope_name(scope: str) -> str:
    return "overall" if scope == "overall" else scope.split(":", 1)[1].replace(":", " ")


# The headline's words when the profile's compare: section names no bench run behind it.
NOT_VALIDATED = "thresholds not validated for this profile"


def headline(c: Comparison) -> list[str]:
    """The 3-5 lines that decide the rollout: verdict, what got worse, where, what was not seen."""
    gated = sorted(c.rows(gated=True), key=_order)
    worse = [m for m in gated if m.verdict == VERDICT_WORSE]
    better = [m for m in gated if m.verdict == VERDICT_BETTER]
    lines = [
        f"VERDICT: {c.verdict.upper()} (exit {c.exit_code})"
        + ("" if c.validated_by else f"; {NOT_VALIDATED}")
    ]
    if c.decided_by:
        lines.append("Decided by: " + " | ".join(c.decided_by))

    def items(ms: list[MetricDiff]) -> str:
        s = ", ".join(f"{_scope_name(m.scope)} {metric_label(m)} {fmt_delta(m)}" for m in ms[:4])
        return s + (f" (+{len(ms) - 4} more)" if len(ms) > 4 else "")

    unsettled = [m for m in gated if m.verdict == VERDICT_INCONCLUSIVE]
    if worse:
        lines.append("Worse (gated): " + items(worse))
    if unsettled and not worse:
        lines.append(
            "Could still hide a threshold-sized regression: "
            + ", ".join(
                f"{_scope_name(m.scope)} {metric_label(m)} {fmt_delta(m)} "
                f"(bound {fmt_bound(m)}, threshold {fmt_threshold(m)})"
                if m.eq_bound is not None
                else f"{_scope_name(m.scope)} {metric_label(m)} "
                f"(too few to judge: {min(m.n_a, m.n_b):,} per side)"
                for m in unsettled[:3]
            )
            + (f" (+{len(unsettled) - 3} more)" if len(unsettled) > 3 else "")
        )
        if c.settle:
            lines.append(f"To settle it: {c.settle['line']}.")
    if better:
        lines.append("Better (gated): " + items(better))
    one_way = [m for m in gated if m.underpowered is not None]
    if not worse and not better and not unsettled:
        lines.append(
            f"No gated metric moved ({c.gated_count} judged); each interval excludes a "
            "regression of its threshold."
            if not one_way
            else f"No gated metric moved ({c.gated_count} judged); {len(one_way)} of them "
            "judged only for getting worse (too few blocks or sessions to rule out their "
            "threshold; see the warnings)."
        )
    if not worse and not unsettled:
        ruled = rules_out(gated)
        if ruled:
            lines.append("Rules out regressions beyond: " + ruled)
    lines += [f"Where: {w}" for w in c.where[:2]]
    shown = [
        m
        for m in c.metrics
        if not m.gated and m.note and m.verdict == VERDICT_WORSE and not m.scope.startswith("step:")
    ]
    if shown and len(lines) < 5:
        lines.append("Shown, not gated, worse: " + items(sorted(shown, key=_order)))
    return lines[:6]


def rules_out(gated: list[MetricDiff], limit: int = 5) -> str:
    """What a passing comparison excludes: the worse-side bound of the headline gated rows.

    e.g. "TPOT shift +1.6 %, TTFT shift +1.5 %, TPOT p95 +24 %" -- the resolution this
    canary had on these servers (a regression larger than that would have shown).
    """
    out = []
    for m in gated:
        if m.scope != "overall" or m.eq_bound is None or m.verdict == VERDICT_NODATA:
            continue
        out.append(f"{metric_label(m)} {fmt_bound(m)}")
    return ", ".join(out[:limit])


def render_text(c: Comparison) -> str:
    """A console table: verdict, gated metrics, per-class detail, TTFT by step."""
    pa, pb = c.run_a.path, c.run_b.path
    lines = [
        *headline(c),
        "",
        f"A (baseline):  {sanitize(pa)}",
        f"B (candidate): {sanitize(pb)}",
        "",
    ]
    lines += _fingerprint_lines(c) + _gated_lines(c)
    lines.append("")
    lines += _detail_lines(c) + _slice_lines(c) + _step_lines(c) + _error_lines(c)
    lines += _tool_loop_lines(c) + _closing_lines(c)
    return "\n".join(lines)


HEADER = ["scope", "metric", "A", "B", "change [CI]", "threshold", "verdict"]


def _fingerprint_lines(c: Comparison) -> list[str]:
    """What changed besides the code, when anything did."""
    lines: list[str] = []
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
    return lines


def _gated_lines(c: Comparison) -> list[str]:
    """The gated rows and how they are gated."""
    lines: list[str] = []
    gated = sorted(c.rows(gated=True), key=_order)
    lines.append(
        f"Gated metrics ({c.gated_count} counted; intervals {100 * c.confidence:g} % family-wise"
        f"{' (weighted Bonferroni)' if c.weighted_alpha else ''}, paired by session):"
    )
    if c.gating:
        lines.append(f"  {c.gating}")
    lines += [
        "  " + ln
        for ln in _table(
            HEADER,
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
    return lines


def _detail_lines(c: Comparison) -> list[str]:
    """The rows shown but not gated (steps and slices have their own tables)."""
    lines: list[str] = []
    lines.append(f"Details (not gated; {100 * c.confidence:g} % intervals per metric):")
    detail = [
        m
        for m in c.metrics
        if not m.gated
        and not m.scope.startswith(("step:", "slice:"))
        and m.verdict != VERDICT_NODATA
    ]
    detail.sort(key=lambda m: (m.scope != "overall", m.scope, _order(m)))
    lines += [
        "  " + ln
        for ln in _table(
            HEADER[:-2] + ["verdict"],
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
    return lines


def _slice_lines(c: Comparison) -> list[str]:
    """The slice rows that moved."""
    lines: list[str] = []
    moved = [
        m
        for m in c.metrics
        if m.scope.startswith("slice:") and m.verdict in (VERDICT_WORSE, VERDICT_BETTER)
    ]
    if moved:
        lines += [
            "",
            "Slices that moved (request-kind TPOT shift and acceptance length gate, above):",
        ]
        lines += [
            "  " + ln
            for ln in _table(
                ["slice", "metric", "A", "B", "change [CI]", "verdict"],
                [
                    [
                        _scope_name(m.scope),
                        m.metric,
                        fmt_value(m, m.a),
                        fmt_value(m, m.b),
                        fmt_change(m),
                        m.verdict,
                    ]
                    for m in sorted(moved, key=lambda m: (m.scope, _order(m)))
                ],
            )  # fmt: skip
        ]
    return lines


def _step_lines(c: Comparison) -> list[str]:
    """TTFT p95 per session step."""
    lines: list[str] = []
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
    return lines


def _error_lines(c: Comparison) -> list[str]:
    """Error kinds of both runs."""
    lines: list[str] = []
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
    return lines


def _tool_loop_lines(c: Comparison) -> list[str]:
    """The first tool-loop failures of each run."""
    lines: list[str] = []
    for side, name in (("b", "B"), ("a", "A")):
        ex = c.tool_loop.get(side) or []
        if ex:
            lines += ["", f"First tool-loop failures in {name} (per class and step):"]
            lines += [
                "  " + ln
                for ln in _table(
                    ["class", "step", "tool", "what was wrong", "request id"],
                    [
                        [
                            e["class"],
                            str(e["step"]),
                            str(e["tool"]),
                            str(e["what"]),
                            str(e["request_id"]),
                        ]
                        for e in ex
                    ],
                )  # fmt: skip
            ]
    return lines


def _closing_lines(c: Comparison) -> list[str]:
    """Where else, warnings, and the verdict line."""
    lines: list[str] = []
    if c.where[2:]:
        lines += ["", "Where else:"] + [f"  {w}" for w in c.where[2:]]
    for w in c.warnings:
        lines.append(f"warning: {sanitize(w)}")
    lines += ["", f"VERDICT: {c.verdict.upper()} (exit {c.exit_code})"]
    return lines


def input_warnings(c: Comparison) -> list[str]:
    """One line per run whose files held something left out (corrupt JSONL lines,
    wrong-typed fields or values): what `compare` and `canary` print on stderr, and
    compare.html shows with its warnings."""
    lines = []
    for run in (c.run_a, c.run_b):
        w = run.skipped_warning() if hasattr(run, "skipped_warning") else None
        if w:
            lines.append(sanitize(w))
    return lines
