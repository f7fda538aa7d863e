"""The charts of one run (a line per class) or of two (A and B overlaid per class)."""

from __future__ import annotations

import math
from typing import Any

from workload.analyze.rundata import RunData
from workload.analyze.serverinfo import spec_histogram
from workload.measure.series import time_series
from workload.measure.stats import Aggregate
from workload.observe.metrics import series_from_samples
from workload.report.charts import (
    PAD_B,
    PAD_T,
    PALETTE,
    SIDE_COLORS,
    Chart,
    Series,
    _nice_ticks,
    bar_chart,
    line_chart,
)
from workload.report.run_views import idle_gap_table
from workload.report.views import dig


def _time_series(data: RunData) -> dict[str, Any]:
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
    groups = [[c] for c in classes] if compare else [classes]
    ts = {side: _time_series(d) for side, d, _ in runs}
    for grp in groups:
        out += _class_charts(runs, grp, ts, compare)
    return out + _server_charts(runs, compare)


def _color(compare: bool, side: str, i: int) -> str:
    return SIDE_COLORS[side] if compare else PALETTE[i % len(PALETTE)]


def _name(compare: bool, side: str, cls: str) -> str:
    return f"{side} {cls}" if compare else cls


def _class_charts(
    runs: list[tuple[str, RunData, dict]],
    grp: list[str],
    ts: dict[str, dict[str, Any]],
    compare: bool,
) -> list[Chart]:
    """TTFT and throughput over time, TTFT by step, ITL and acceptance for a group of classes."""
    out: list[Chart] = []
    suffix = f" — {grp[0]}" if compare else ""
    s_ttft, s_tp, s_step, s_itl = [], [], [], []
    itl_note = ""
    for side, d, summ in runs:
        for i, cls in enumerate(grp):
            ser = dig(ts[side], "by_class", cls) or {}
            t = ser.get("t") or []
            name, col = _name(compare, side, cls), _color(compare, side, i)
            s_ttft.append(
                Series(name + " p95", list(zip(t, ser.get("ttft_p95_ms") or [], strict=False)), col)
            )
            s_ttft.append(
                Series(
                    name + " p50",
                    list(zip(t, ser.get("ttft_p50_ms") or [], strict=False)),
                    col,
                    dash=True,
                )
            )
            s_tp.append(
                Series(name, list(zip(t, ser.get("output_tokens_per_s") or [], strict=False)), col)
            )
            s_step.append(Series(name + " p95", _step_points(summ, cls, "p95"), col))
            s_step.append(Series(name + " p50", _step_points(summ, cls, "p50"), col, dash=True))
            pts, itl_note = _itl_points(d, cls)
            s_itl.append(Series(name, pts, col))
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
        line_chart("Output throughput over time" + suffix, s_tp, "seconds since start", "tokens/s")
    )
    if not compare:
        for chart, ser in ((out[-2], s_ttft), (out[-1], s_tp)):
            mark_stages(chart, ser, stage_offsets(runs[0][2], ts[runs[0][0]].get("t0")))
    out.append(
        line_chart(
            "TTFT by session step" + suffix, s_step, "session step", "ms", "p95 solid, p50 dashed"
        )
    )
    out.append(line_chart(f"ITL distribution ({itl_note})" + suffix, s_itl, "percentile", "ms"))
    out.append(_acceptance_chart(runs, grp, compare, suffix))
    return out


def _acceptance_chart(
    runs: list[tuple[str, RunData, dict]], grp: list[str], compare: bool, suffix: str
) -> Chart:
    """Spec-decode acceptance histogram: the share of spec steps per accepted draft count."""
    hists = [(side, cls, spec_histogram(d.requests, cls)) for side, d, _ in runs for cls in grp]
    k = max((len(h) for *_, h in hists), default=0)
    bars = []
    for j, (side, cls, h) in enumerate(hists):
        tot = sum(h)
        if tot:
            bars.append(
                Series(
                    _name(compare, side, cls),
                    [(i, h[i] / tot if i < len(h) else 0.0) for i in range(k)],
                    _color(compare, side, j),
                )
            )
    return bar_chart(
        "Spec-decode acceptance histogram" + suffix,
        [str(i) for i in range(k)],
        bars,
        "share of spec steps",
        "x: draft tokens accepted per step",
    )


def _server_charts(runs: list[tuple[str, RunData, dict]], compare: bool) -> list[Chart]:
    """The server's KV cache usage and queue from its /metrics samples."""
    kv, queue = [], []
    for side, d, _ in runs:
        col = SIDE_COLORS[side] if compare else PALETTE[0]
        label = f"{side} " if compare else ""
        kv.append(Series(label + "KV cache usage %", _server_points(d, _KV, 100.0), col))
        queue.append(Series(label + "waiting", _server_points(d, _QUEUE), col))
        queue.append(Series(label + "running", _server_points(d, _RUNNING), col, dash=True))
    out = [
        line_chart("Server KV cache usage", kv, "seconds since first scrape", "%"),
        line_chart(
            "Server queue",
            queue,
            "seconds since first scrape",
            "requests",
            "waiting solid, running dashed",
        ),
    ]
    for c in out:
        if c.empty:
            c.note = "absent: no /metrics samples (metrics.jsonl) with this series"
    return out


def _tpot_series(
    data: RunData, cls: str
) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    """TPOT p50 and p95 per time bucket (the TTFT-over-time buckets) for one class."""
    rows = [r for r in data.requests if r.get("user_class") == cls and r.get("status") == "ok"
            and isinstance(r.get("tpot_ms"), (int, float)) and r.get("t_start")]  # fmt: skip
    if not rows:
        return [], []
    t0 = min(r["t_start"] for r in data.requests if r.get("t_start"))
    bucket = max(1.0, round((data.duration_s or 60.0) / 60.0))
    by: dict[int, list[float]] = {}
    for r in rows:
        end = r["t_start"] + (r.get("e2e_ms") or 0.0) / 1000.0
        by.setdefault(int((end - t0) // bucket), []).append(float(r["tpot_ms"]))
    p50, p95 = [], []
    for b in sorted(by):
        v = sorted(by[b])
        p50.append((b * bucket, v[min(len(v) - 1, max(0, math.ceil(0.5 * len(v)) - 1))]))
        p95.append((b * bucket, v[min(len(v) - 1, max(0, math.ceil(0.95 * len(v)) - 1))]))
    return p50, p95


def _by_step(summary: dict, cls: str, *path: str, scale: float = 1.0) -> list[tuple[float, float]]:
    pts = []
    for k, v in (dig(summary, "by_step", cls) or {}).items():
        y = dig(v, *path)
        if isinstance(y, (int, float)):
            pts.append((float(k), float(y) * scale))
    return sorted(pts)


def agent_charts(data: RunData, summary: dict, classes: list[str]) -> list[Chart]:
    """Charts read for agents: TPOT over time, cached ratio and spec acceptance by step, a
    session timeline, cached ratio and TTFT against the idle gap before a step."""
    s_tpot, s_cached, s_acc = [], [], []
    for i, cls in enumerate(classes):
        col = PALETTE[i % len(PALETTE)]
        p50, p95 = _tpot_series(data, cls)
        s_tpot += [Series(cls + " p95", p95, col), Series(cls + " p50", p50, col, dash=True)]
        s_cached.append(Series(cls, _by_step(summary, cls, "cached_ratio", scale=100.0), col))
        s_acc.append(
            Series(
                cls, _by_step(summary, cls, "spec_decode", "acceptance_length_token_weighted"), col
            )
        )
    out = [
        line_chart("TPOT over time", s_tpot, "seconds since start", "ms", "p95 solid, p50 dashed", gaps=True),
        line_chart("Cached ratio by session step", s_cached, "session step", "% cached"),
        line_chart("Spec-decode acceptance length by session step", s_acc, "session step",
                   "tokens / spec step", "token-weighted mean"),
        _acceptance_by_kind(data, classes),
        session_timeline(data),
    ]  # fmt: skip
    starts = [r["t_start"] for r in data.requests if r.get("t_start")]
    if starts:  # the TPOT axis counts from the first request, as TTFT's does
        mark_stages(out[0], s_tpot, stage_offsets(summary, min(starts)))
    gaps = idle_gap_table(data.requests)
    cats = [g["bucket"] for g in gaps]
    cached = [Series("cached", [(j, 100.0 * g["cached_ratio"]) for j, g in enumerate(gaps)
                                if g["cached_ratio"] is not None], PALETTE[2])]  # fmt: skip
    ttft = [
        Series("p50", [(j, g["ttft_p50_ms"]) for j, g in enumerate(gaps) if g["ttft_p50_ms"] is not None], PALETTE[0]),
        Series("p95", [(j, g["ttft_p95_ms"]) for j, g in enumerate(gaps) if g["ttft_p95_ms"] is not None], PALETTE[1]),
    ]  # fmt: skip
    note = "idle gap: since the session's previous request ended"
    out.append(
        bar_chart("Cached ratio by idle gap before the step", cats, cached, "% cached", note)
    )
    out.append(bar_chart("TTFT by idle gap before the step", cats, ttft, "ms", note))
    return out


def _acceptance_by_kind(data: RunData, classes: list[str]) -> Chart:
    """Pooled acceptance length (1 + Σa/Σs) per class, steps that end in a planned tool call
    apart from steps that end in text (tool-call JSON drafts differently from prose)."""
    sums: dict[tuple[str, bool], list[float]] = {}
    for r in data.requests:
        sd = r.get("spec_decode")
        if r.get("status") != "ok" or not isinstance(sd, dict):
            continue
        a, st = sd.get("num_accepted_draft_tokens"), sd.get("num_spec_steps")
        if isinstance(a, (int, float)) and isinstance(st, (int, float)) and st > 0:
            acc = sums.setdefault(
                (str(r.get("user_class")), bool(r.get("planned_tool"))), [0.0, 0.0]
            )
            acc[0] += a
            acc[1] += st
    series = []
    for j, (kind, tool) in enumerate((("tool-call steps", True), ("text steps", False))):
        pts = [(float(i), 1.0 + sums[(c, tool)][0] / sums[(c, tool)][1]) for i, c in enumerate(classes)
               if (c, tool) in sums]  # fmt: skip
        if pts:
            series.append(Series(kind, pts, PALETTE[4 + j]))
    # pooled 1 + Σa/Σs, said in words: the symbols are defined only further down the page
    note = "1 + accepted draft tokens / spec steps, per class (see Speculative decoding)"
    return bar_chart("Spec-decode acceptance length by request kind", list(classes), series,
                     "tokens / spec step", note)  # fmt: skip


TIMELINE_ROWS = 16
_OK, _ERR, _TLF, _CANCEL = "#1f77b4", "#ff7f0e", "#d62728", "#999999"
_TOOL_GAP, _THINK_GAP = "#9467bd", "#c7c7c7"


def _sample_sessions(data: RunData, n: int) -> list[dict]:
    """Up to n sessions: those that ended early first (a few), then spread over the run."""
    sess = sorted(
        (s for s in data.sessions if s.get("session_id")), key=lambda s: s.get("t_start") or 0.0
    )
    bad = [s for s in sess if s.get("outcome") not in ("completed", None)][: max(1, n // 3)]
    good = [s for s in sess if s not in bad]
    k = n - len(bad)
    if len(good) > k > 0:
        good = [good[round(i * (len(good) - 1) / (k - 1))] for i in range(k)] if k > 1 else good[:1]
    return sorted(bad + good[:k], key=lambda s: s.get("t_start") or 0.0)


def session_timeline(data: RunData, rows: int = TIMELINE_ROWS) -> Chart:
    """Requests of a sample of sessions on one time axis each (seconds since the session began):
    requests as bars (coloured by outcome), the idle gaps between them as thin bars (after a
    planned tool call: tool pause + think time; else think time)."""
    title = "Session timeline (sample)"
    sample = _sample_sessions(data, rows)
    by_sess: dict[str, list[dict]] = {}
    ids = {s["session_id"] for s in sample}
    for r in data.requests:
        if r.get("session_id") in ids and r.get("t_start"):
            by_sess.setdefault(r["session_id"], []).append(r)
    sample = [s for s in sample if s["session_id"] in by_sess]
    row_h = 18
    c = Chart(title, "timeline", "seconds since the session started", "",
              f"{len(sample)} of {len(data.sessions)} sessions", height=PAD_T + PAD_B + row_h * max(1, len(sample)))  # fmt: skip
    if not sample:
        return c
    c.empty = False
    left, top, right = 170, PAD_T, c.width - 16
    bottom = c.height - PAD_B
    c.plot = (left, top, right, bottom)
    spans = []
    for s in sample:
        reqs = sorted(by_sess[s["session_id"]], key=lambda d: d["t_start"])
        t0 = min(float(s.get("t_start") or reqs[0]["t_start"]), reqs[0]["t_start"])
        spans.append((s, reqs, t0))
    xmax = max(
        r["t_start"] - t0 + (r.get("e2e_ms") or 0.0) / 1000.0 for _, reqs, t0 in spans for r in reqs
    )
    xt = _ticks(xmax)

    def sx(x: float) -> float:
        return left + x / xt[-1] * (right - left)

    c.xticks = [(round(sx(t), 1), f"{t:g}") for t in xt]
    for i, (s, reqs, t0) in enumerate(spans):
        y = top + i * row_h
        cls, sid = str(s.get("user_class") or ""), str(s["session_id"])
        short = sid[len(cls) + 1 :] if sid.startswith(cls + "-") else sid
        label = f"{cls[:14]} {short[:12]}"
        c.yticks.append((round(y + row_h / 2, 1), label))
        prev_end, prev_tool = None, False
        for r in reqs:
            a = r["t_start"] - t0
            b = a + (r.get("e2e_ms") or 0.0) / 1000.0
            if prev_end is not None and a > prev_end:
                kind = "tool pause + think" if prev_tool else "think / idle"
                c.bars.append({"x": round(sx(prev_end), 1), "y": round(y + row_h / 2 - 2, 1),
                               "w": round(sx(a) - sx(prev_end), 1), "h": 4,
                               "color": _TOOL_GAP if prev_tool else _THINK_GAP,
                               "tip": f"{kind}: {a - prev_end:.1f} s"})  # fmt: skip
            if r.get("tool_loop_failure") or r.get("error_kind") == "tool_loop":
                col, what = (
                    _TLF,
                    f"tool-loop failure: {r.get('tool_loop_failure') or r.get('error_kind')}",
                )
            elif r.get("status") == "cancelled":
                col, what = _CANCEL, "cancelled"
            elif r.get("status") not in ("ok", None):
                col, what = _ERR, f"error: {r.get('error_kind')}"
            else:
                col, what = _OK, "ok"
            tool = f", tool {r['planned_tool']}" if r.get("planned_tool") else ""
            wide = 1.5 if col == _OK else 4.0  # a failure shows even when it took no time
            c.bars.append({"x": round(sx(a), 1), "y": round(y + 3, 1), "w": round(max(wide, sx(b) - sx(a)), 1),
                           "h": row_h - 6, "color": col,
                           "tip": f"{s['session_id']} step {r.get('step')}: {b - a:.2f} s, {what}{tool}"})  # fmt: skip
            prev_end, prev_tool = b, bool(r.get("planned_tool"))
    c.legend = [{"name": n, "color": col, "dash": False} for n, col in (
        ("request ok", _OK), ("error", _ERR), ("tool-loop failure", _TLF),
        ("tool pause + think", _TOOL_GAP), ("think / idle", _THINK_GAP))]  # fmt: skip
    return c


def _ticks(hi: float) -> list[float]:
    return _nice_ticks(0.0, hi if hi > 0 else 1.0)


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
