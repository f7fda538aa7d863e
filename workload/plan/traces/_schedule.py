"""Replay timing: speedup and spreading of quantised same-timestamp bursts.

Some traces stamp arrivals in coarse buckets (Mooncake's conversation trace:
every ~3 s, 90 % of gaps are 0). Replaying them as-is sends each bucket as
one burst. ``schedule`` spreads the k-th of n requests sharing a timestamp to
``t + k * quantum / n`` (deterministic, order kept), then divides by speedup.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from workload.plan.traces._read import Trace, TraceRequest


def detect_quantum(offsets_s: Sequence[float]) -> float | None:
    """The timestamp bucket size (s) when most gaps are 0 and the rest sit on one step; else None."""
    t = np.sort(np.asarray(offsets_s, dtype=float))
    if len(t) < 3:
        return None
    gaps = np.diff(t)
    nonzero = gaps[gaps > 1e-9]
    if len(nonzero) == 0 or (len(gaps) - len(nonzero)) / len(gaps) < 0.5:
        return None
    q = float(np.median(nonzero))
    # Gaps must be multiples of q within 1 % (an empty bucket gives a 2q gap).
    ratio = nonzero / q
    if np.mean(np.abs(ratio - np.round(ratio)) <= 0.01) < 0.9:
        return None
    return round(q, 3)


def schedule(
    trace: Trace | Sequence[TraceRequest],
    *,
    speedup: float = 1.0,
    quantum_s: float | None = None,
) -> list[TraceRequest]:
    """Requests with replay arrival times: bursts spread over the quantum, then / speedup.

    quantum_s None detects it from the data (``detect_quantum``); 0 turns spreading off.
    """
    if speedup <= 0:
        raise ValueError(f"speedup must be > 0, got {speedup}")
    reqs = list(trace.requests if isinstance(trace, Trace) else trace)
    if quantum_s is None:
        quantum_s = detect_quantum([r.arrival_s for r in reqs]) or 0.0
    times = [r.arrival_s for r in reqs]
    if quantum_s > 0:
        i = 0
        while i < len(reqs):
            j = i
            while j < len(reqs) and reqs[j].arrival_s == reqs[i].arrival_s:
                j += 1
            n = j - i
            for k in range(n):
                times[i + k] = reqs[i].arrival_s + k * quantum_s / n
            i = j
    return [dataclasses.replace(r, arrival_s=t / speedup) for r, t in zip(reqs, times, strict=True)]
