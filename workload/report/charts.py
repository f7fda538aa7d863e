"""Chart models for the HTML reports: series scaled to pixel paths, bars, ticks and legends.

Charts are inline SVG (no JavaScript, no network): this module computes the
coordinates and templates/charts.html.j2 draws them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf")
SIDE_COLORS = {"A": "#1f77b4", "B": "#ff7f0e"}
W, H = 640, 260
PAD_L, PAD_R, PAD_T, PAD_B = 64, 16, 12, 40


@dataclass
class Series:
    """One line (or bar group member) of a chart."""

    name: str
    points: list[tuple[float, float]]
    color: str = PALETTE[0]
    dash: bool = False


@dataclass
class Chart:
    """A chart ready to draw: pixel paths, ticks and legend (see templates/report.html.j2)."""

    title: str
    kind: str = "line"  # line | bar
    x_label: str = ""
    y_label: str = ""
    note: str = ""
    width: int = W
    height: int = H
    paths: list[dict[str, Any]] = field(default_factory=list)
    bars: list[dict[str, Any]] = field(default_factory=list)
    xticks: list[tuple[float, str]] = field(default_factory=list)
    yticks: list[tuple[float, str]] = field(default_factory=list)
    legend: list[dict[str, Any]] = field(default_factory=list)
    empty: bool = True
    plot: tuple[int, int, int, int] = (PAD_L, PAD_T, W - PAD_R, H - PAD_B)


def _nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        hi = lo + 1.0
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    start = math.floor(lo / step) * step
    ticks: list[float] = []
    t = start
    while t <= hi + step * 1e-9 and len(ticks) < 20:
        ticks.append(round(t, 10))
        t += step
    if ticks[-1] < hi:
        ticks.append(round(t, 10))
    return ticks


def _fmt_tick(v: float) -> str:
    if v == 0:
        return "0"
    if abs(v) >= 10_000:
        return f"{v / 1000:g}k"
    return f"{v:g}" if abs(v) >= 1 else f"{v:.3g}"


def line_chart(
    title: str,
    series: list[Series],
    x_label: str,
    y_label: str,
    note: str = "",
    *,
    gaps: bool = False,
) -> Chart:
    """Scale `series` into pixel paths; y starts at 0; `gaps` breaks lines over missing x steps."""
    c = Chart(title, "line", x_label, y_label, note)
    pts = [(x, y) for s in series for x, y in s.points if y is not None and math.isfinite(y)]
    if not pts:
        return c
    c.empty = False
    x0, x1 = min(p[0] for p in pts), max(p[0] for p in pts)
    xt = _nice_ticks(x0, x1 if x1 > x0 else x0 + 1)
    yt = _nice_ticks(0.0, max(p[1] for p in pts) or 1.0)
    left, top, right, bottom = c.plot

    def sx(x: float) -> float:
        return left + (x - xt[0]) / (xt[-1] - xt[0]) * (right - left)

    def sy(y: float) -> float:
        return bottom - (y - yt[0]) / (yt[-1] - yt[0]) * (bottom - top)

    c.xticks = [(round(sx(t), 1), _fmt_tick(t)) for t in xt]
    c.yticks = [(round(sy(t), 1), _fmt_tick(t)) for t in yt]
    for s in series:
        good = [(x, y) for x, y in s.points if y is not None and math.isfinite(y)]
        if not good:
            continue
        # Break the line where data is missing, so gaps show as gaps.
        d, pen = [], "M"
        prev_x = None
        xs = [p[0] for p in s.points]
        step = min((b - a for a, b in zip(xs, xs[1:], strict=False) if b > a), default=None)
        for x, y in good:
            if gaps and prev_x is not None and step and x - prev_x > 1.5 * step:
                pen = "M"
            d.append(f"{pen}{sx(x):.1f},{sy(y):.1f}")
            pen, prev_x = "L", x
        c.paths.append(
            {
                "d": " ".join(d),
                "color": s.color,
                "dash": s.dash,
                "name": s.name,
                "markers": [
                    (round(sx(x), 1), round(sy(y), 1), f"{s.name}: {_fmt_tick(x)} → {y:.4g}")
                    for x, y in good
                ]
                if len(good) <= 60
                else [],
            }
        )
        c.legend.append({"name": s.name, "color": s.color, "dash": s.dash})
    return c


def bar_chart(
    title: str, categories: list[str], series: list[Series], y_label: str, note: str = ""
) -> Chart:
    """Grouped bars: series[i].points[j] = (j, value) for categories[j]."""
    c = Chart(title, "bar", "", y_label, note)
    vals = [y for s in series for _, y in s.points if y is not None]
    if not vals or not categories:
        return c
    c.empty = False
    yt = _nice_ticks(0.0, max(vals) or 1.0)
    left, top, right, bottom = c.plot
    slot = (right - left) / len(categories)
    bw = slot * 0.8 / max(1, len(series))

    def sy(y: float) -> float:
        return bottom - (y - yt[0]) / (yt[-1] - yt[0]) * (bottom - top)

    c.yticks = [(round(sy(t), 1), _fmt_tick(t)) for t in yt]
    c.xticks = [(round(left + slot * (j + 0.5), 1), cat) for j, cat in enumerate(categories)]
    for i, s in enumerate(series):
        for j, y in s.points:
            if y is None:
                continue
            x = left + slot * j + slot * 0.1 + bw * i
            c.bars.append(
                {
                    "x": round(x, 1),
                    "y": round(sy(y), 1),
                    "w": round(bw, 1),
                    "h": round(bottom - sy(y), 1),
                    "color": s.color,
                    "tip": f"{s.name} {categories[int(j)]}: {y:.4g}",
                }
            )
        c.legend.append({"name": s.name, "color": s.color, "dash": False})
    return c
