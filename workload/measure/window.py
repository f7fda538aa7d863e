"""Per-class agent metrics over time: each sample holds what happened since the previous one.

`AgentHistory.sample(aggregate, t)` snapshots, for each traffic class, the counters,
session outcomes, spec-decode sums and the TTFT/TPOT histogram counts, and records the
difference from the previous snapshot as one point: TTFT p95 and TPOT p95 (ms) of the
requests that ended in the window, goodput (good sessions per minute), token-weighted
spec-decode acceptance length, draft acceptance rate and prefix-cache hit ratio.
Values are None where the window had no data. Cost: two counts-array copies per class
per sample (tens of microseconds each), independent of the request count.

The point list is bounded: past `max_points` every other point is dropped (the older
half thins out), so a long run keeps its whole span at a coarser grain.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from workload.measure.stats import Aggregate, View

WINDOW_METRICS = ("ttft", "tpot")
_SPEC = ("acc_len_tw_num_u", "acc_len_tw_den", "accepted_tokens", "draft_tokens")


@dataclass
class _Snapshot:
    counters: dict[str, int]
    good: int
    spec: dict[str, int]
    counts: dict[str, np.ndarray]


def _snapshot(view: View) -> _Snapshot:
    counts = {m: view.hists[m].counts_copy() for m in WINDOW_METRICS if m in view.hists}
    return _Snapshot(
        counters=dict(view.counters),
        good=view.sessions.get("good", 0),
        spec={f: getattr(view.spec, f) for f in _SPEC},
        counts=counts,
    )


def _ratio(num: float, den: float, nd: int = 3) -> float | None:
    return round(num / den, nd) if den > 0 else None


def _point(view: View, now: _Snapshot, before: _Snapshot | None, window_s: float) -> dict[str, Any]:
    """One class's metrics over the window between two snapshots."""

    def delta(d_now: dict[str, int], d_before: dict[str, int] | None, key: str) -> int:
        return d_now.get(key, 0) - (d_before or {}).get(key, 0)

    bc = before.counters if before else None
    bs = before.spec if before else None
    out: dict[str, Any] = {"requests": delta(now.counters, bc, "requests")}
    for m in WINDOW_METRICS:
        h = view.hists.get(m)
        c = now.counts.get(m)
        if h is None or c is None:
            out[f"{m}_p95"] = None
            continue
        prev = before.counts.get(m) if before else None
        window = c - prev if prev is not None and prev.shape == c.shape else c
        v = h.percentile_of_counts_ms(window, 95.0)
        out[f"{m}_p95"] = None if v is None else round(v, 1)
    good = now.good - (before.good if before else 0)
    out["goodput"] = round(good / (window_s / 60.0), 2) if window_s > 0 else None
    out["accept_len"] = _ratio(
        delta(now.spec, bs, "acc_len_tw_num_u") / 1e6, delta(now.spec, bs, "acc_len_tw_den"), 2
    )
    out["draft_accept"] = _ratio(
        delta(now.spec, bs, "accepted_tokens"), delta(now.spec, bs, "draft_tokens")
    )
    out["cached_ratio"] = _ratio(
        delta(now.counters, bc, "cached_tokens"), delta(now.counters, bc, "cached_prompt_tokens")
    )
    return out


@dataclass
class AgentHistory:
    """Points of per-class window metrics, oldest first (see the module docstring)."""

    max_points: int = 720
    points: list[dict[str, Any]] = field(default_factory=list)
    _prev: dict[str, _Snapshot] = field(default_factory=dict)
    _prev_t: float | None = None

    def sample(self, agg: Aggregate, t: float) -> dict[str, Any]:
        """Add and return the point for the window ending at `t` (seconds, any clock)."""
        window_s = t - self._prev_t if self._prev_t is not None else 0.0
        by_class: dict[str, dict[str, Any]] = {}
        snaps: dict[str, _Snapshot] = {}
        for name in sorted(agg.classes):
            view = agg.classes[name]
            snaps[name] = _snapshot(view)
            if self._prev_t is not None:
                by_class[name] = _point(view, snaps[name], self._prev.get(name), window_s)
        self._prev, self._prev_t = snaps, t
        point = {"t": round(t, 3), "window_s": round(window_s, 3), "by_class": by_class}
        if self.points or by_class:
            self.points.append(point)
        if len(self.points) > self.max_points:
            half = len(self.points) // 2
            self.points = self.points[:half:2] + self.points[half:]
        return point

    def to_dict(self) -> dict[str, Any]:
        """The JSON the web UI charts read."""
        classes = sorted({c for p in self.points for c in p["by_class"]})
        return {"classes": classes, "points": self.points}
