"""The charts of one run (a line per class) or of two (A and B overlaid per class)."""

from __future__ import annotations

import math
from typing import Any

from workload.analyze.rundata import RunData
from workload.analyze.serverinfo import spec_histogram
from workload.observe.metrics import series_from_samples
from workload.report.charts import PALETTE, SIDE_COLORS, Chart, Series, bar_chart, line_chart
from workload.report.views import dig


def _time_series(data: RunData) -> dict[str, Any]:
    from workload.measure.series import time_series

    span = data.duration_s or 60.0
    bucket = max(1.0, round(span / 60.0))  # about 60 points whatever the run length
    return time_series(data.requests, bucket_s=bucket)


def _step_points(summary: dict, cls: str, stat: str) -> list[tuple[float, float]]:
    steps = dig(summary, "by_step", cls) or {}
    pts = []
    for k, v in steps.items():
        y = dig(v, "ttft_ms", stat)
        if isinstance(y, (int, float)):
            pts.append((float(k), float(y)))
    return sorted(pts)


def _itl_points(data: RunData, cls: str | None) -> tuple[list[tuple[float, float]], str]:
    """ITL quantile curve: per token gap from stats.json when present, else per-request mean ITL."""
    pcts = [1, 5, 10, 25, 50, 75, 90, 95, 99, 99.9]
    if isinstance(data.stats, dict):
        try:
            from workload.measure.stats import Aggregate

            agg = Aggregate.from_dict(data.stats)
            vals = [agg.percentile_ms("itl", p, cls) for p in pcts]
            if any(v is not None for v in vals):
                return [
                    (float(p), float(v)) for p, v in zip(pcts, vals, strict=True) if v is not None
                ], "per token gap"
        except (ValueError, KeyError, TypeError):
            pass
    means = sorted(
        float(r["itl_ms"]["mean"])
        for r in data.requests
        if (cls is None or r.get("user_class") == cls)
        and isinstance(r.get("itl_ms"), dict)
        and isinstance(r["itl_ms"].get("mean"), (int, float))
    )
    if not means:
        return [], "per request"
    n = len(means)
    return [
        (p, means[min(n - 1, max(0, math.ceil(p / 100 * n) - 1))]) for p in pcts
    ], "per-request mean"


_KV = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
_QUEUE = ("vllm:num_requests_waiting",)
_RUNNING = ("vllm:num_requests_running",)


def _server_points(
    data: RunData, names: tuple[str, ...], scale: float = 1.0
) -> list[tuple[float, float]]:
    series = series_from_samples(data.metrics)
    for n in names:
        if n in series:
            t0 = series[n][0][0]
            return [(t - t0, v * scale) for t, v in series[n]]
    return []


def run_charts(runs: list[tuple[str, RunData, dict]], classes: list[str]) -> list[Chart]:
    """Charts for one run (one line per class) or two (A and B per class, overlaid)."""
    compare = len(runs) > 1
    out: list[Chart] = []

    def color(side: str, i: int) -> str:
        return SIDE_COLORS[side] if compare else PALETTE[i % len(PALETTE)]

    def name(side: str, cls: str) -> str:
        return f"{side} {cls}" if compare else cls

    groups = [[c] for c in classes] if compare else [classes]
    ts = {side: _time_series(d) for side, d, _ in runs}
    for grp in groups:
        suffix = f" — {grp[0]}" if compare else ""
        s_ttft, s_tp, s_step, s_itl = [], [], [], []
        itl_note = ""
        for side, d, summ in runs:
            for i, cls in enumerate(grp):
                ser = dig(ts[side], "by_class", cls) or {}
                t = ser.get("t") or []
                s_ttft.append(
                    Series(
                        name(side, cls) + " p95",
                        list(zip(t, ser.get("ttft_p95_ms") or [], strict=False)),
                        color(side, i),
                    )
                )
                s_ttft.append(
                    Series(
                        name(side, cls) + " p50",
                        list(zip(t, ser.get("ttft_p50_ms") or [], strict=False)),
                        color(side, i),
                        dash=True,
                    )
                )
                s_tp.append(
                    Series(
                        name(side, cls),
                        list(zip(t, ser.get("output_tokens_per_s") or [], strict=False)),
                        color(side, i),
                    )
                )
                s_step.append(
                    Series(name(side, cls) + " p95", _step_points(summ, cls, "p95"), color(side, i))
                )
                s_step.append(
                    Series(
                        name(side, cls) + " p50",
                        _step_points(summ, cls, "p50"),
                        color(side, i),
                        dash=True,
                    )
                )
                pts, itl_note = _itl_points(d, cls)
                s_itl.append(Series(name(side, cls), pts, color(side, i)))
        out.append(
            line_chart(
                "TTFT over time" + suffix,
                s_ttft,
                "seconds since start",
                "ms",
                "p95 solid, p50 dashed",
                gaps=True,
            )
        )
        out.append(
            line_chart(
                "Output throughput over time" + suffix, s_tp, "seconds since start", "tokens/s"
            )
        )
        if not compare:
            for chart, ser in ((out[-2], s_ttft), (out[-1], s_tp)):
                mark_stages(chart, ser, stage_offsets(runs[0][2], ts[runs[0][0]].get("t0")))
        out.append(
            line_chart(
                "TTFT by session step" + suffix,
                s_step,
                "session step",
                "ms",
                "p95 solid, p50 dashed",
            )
        )
        out.append(line_chart(f"ITL distribution ({itl_note})" + suffix, s_itl, "percentile", "ms"))
        hists = [(side, cls, spec_histogram(d.requests, cls)) for side, d, _ in runs for cls in grp]
        k = max((len(h) for *_, h in hists), default=0)
        bars = []
        for j, (side, cls, h) in enumerate(hists):
            tot = sum(h)
            if tot:
                bars.append(
                    Series(
                        name(side, cls),
                        [(i, h[i] / tot if i < len(h) else 0.0) for i in range(k)],
                        color(side, j),
                    )
                )
        out.append(
            bar_chart(
                "Spec-decode acceptance histogram" + suffix,
                [str(i) for i in range(k)],
                bars,
                "share of spec steps",
                "x: draft tokens accepted per step",
            )  # fmt: skip
        )
    kv, queue = [], []
    for side, d, _ in runs:
        col = SIDE_COLORS[side] if compare else PALETTE[0]
        label = f"{side} " if compare else ""
        kv.append(Series(label + "KV cache usage %", _server_points(d, _KV, 100.0), col))
        queue.append(Series(label + "waiting", _server_points(d, _QUEUE), col))
        queue.append(Series(label + "running", _server_points(d, _RUNNING), col, dash=True))
    out.append(line_chart("Server KV cache usage", kv, "seconds since first scrape", "%"))
    out.append(
        line_chart(
            "Server queue",
            queue,
            "seconds since first scrape",
            "requests",
            "waiting solid, running dashed",
        )
    )
    for c in out[-2:]:
        if c.empty:
            c.note = "absent: no /metrics samples (metrics.jsonl) with this series"
    return out


# ---------------------------------------------------------------- load stages (issue 11)

STAGE_COLOR = "#888888"


def stage_offsets(summary: dict, series_t0: float | None) -> list[tuple[float, str]]:
    """Each stage's start as (seconds on the time-series axis, label), from run.json's
    ``summary.stages`` (wall-clock ``t_start``); the axis counts from the first request."""
    rows = summary.get("stages") if isinstance(summary, dict) else None
    if not rows or not series_t0:
        return []
    out = []
    for r in rows:
        level = r.get("users", r.get("arrival_rate"))
        unit = " users" if "users" in r else "/s"
        out.append((float(r["t_start"]) - series_t0, f"stage {r['index']}: {level:g}{unit}"))
    return out


def mark_stages(chart: Chart, series: list[Series], offsets: list[tuple[float, str]]) -> None:
    """Draw a dashed vertical line at each stage boundary of a time-series line chart.

    Scales x exactly as ``line_chart`` did (its ticks from the series' x range) and adds
    each boundary as one more dashed path (hover shows the stage), plus one legend entry.
    """
    from workload.report.charts import _nice_ticks

    xs = [x for s in series for x, y in s.points if y is not None and math.isfinite(y)]
    if chart.empty or not xs or not offsets:
        return
    x0, x1 = min(xs), max(xs)
    xt = _nice_ticks(x0, x1 if x1 > x0 else x0 + 1)
    left, top, right, bottom = chart.plot
    drawn = 0
    for x, label in offsets:
        if not xt[0] <= x <= xt[-1]:
            continue
        px = left + (x - xt[0]) / (xt[-1] - xt[0]) * (right - left)
        chart.paths.append(
            {
                "d": f"M{px:.1f},{top} L{px:.1f},{bottom}",
                "color": STAGE_COLOR,
                "dash": True,
                "name": label,
                "markers": [],
            }
        )
        drawn += 1
    if drawn:
        chart.legend.append({"name": "stage boundary", "color": STAGE_COLOR, "dash": True})
