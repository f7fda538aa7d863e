"""HDR latency histogram: milliseconds stored as integer microseconds, exactly mergeable.

3 significant digits (sub-ms precision holds). A percentile is HDR's highest-equivalent value
of the bucket (<= 0.1 % above the true order statistic), capped at the exact maximum; count,
sum, min and max are exact. Bucket counts add exactly, so merging shards in any order gives
the same histogram as recording every value in one process.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
from hdrh.histogram import HdrHistogram

SIG_DIGITS = 3
REQUEST_MAX_US = 3_600_000_000  # 1 h: anything longer is clamped (and counted)
SESSION_MAX_US = 86_400_000_000  # 24 h
PERCENTILES = (50.0, 90.0, 95.0, 99.0)
_FLUSH_AT = 8192  # pending values before a vectorised flush into the HDR counts


class LatencyHistogram:
    """HDR histogram of milliseconds stored as integer microseconds, plus exact moments.

    ``record_ms`` only appends to a buffer (cheap on the request path); values reach the
    HDR counts array in vectorised batches (numpy over hdrh's own index formula and its
    live ``counts`` array). Mergeable exactly with ``merge``.
    """

    __slots__ = (
        "max_us",
        "_hdr",
        "_pending",
        "count",
        "sum_us",
        "min_us",
        "max_seen_us",
        "clamped",
    )

    def __init__(self, max_us: int = REQUEST_MAX_US) -> None:
        self.max_us = max_us
        self._hdr = HdrHistogram(1, max_us, SIG_DIGITS)
        self._pending: list[float] = []
        self.count = 0
        self.sum_us = 0
        self.min_us: int | None = None
        self.max_seen_us: int | None = None
        self.clamped = 0

    def record_ms(self, value_ms: float) -> None:
        self._pending.append(value_ms)
        if len(self._pending) >= _FLUSH_AT:
            self._flush()

    def record_many_ms(self, values_ms: Iterable[float]) -> None:
        self._pending.extend(values_ms)
        if len(self._pending) >= _FLUSH_AT:
            self._flush()

    def _flush(self) -> None:
        if not self._pending:
            return
        arr = np.asarray(self._pending, dtype=np.float64)
        self._pending = []
        arr = arr[np.isfinite(arr)]
        if arr.size == 0:
            return
        us = np.rint(np.clip(arr, 0.0, None) * 1000.0).astype(np.int64)
        over = us > self.max_us
        if over.any():
            self.clamped += int(over.sum())
            us[over] = self.max_us
        self.count += int(us.size)
        self.sum_us += int(us.sum())
        lo, hi = int(us.min()), int(us.max())
        self.min_us = lo if self.min_us is None else min(self.min_us, lo)
        self.max_seen_us = hi if self.max_seen_us is None else max(self.max_seen_us, hi)
        h = self._hdr
        counts = _counts(h)
        counts += np.bincount(_hdr_index(h, us), minlength=h.counts_len).astype(counts.dtype)
        nz = np.flatnonzero(counts)
        # hdrh's own hook for bulk changes: keeps its total/min/max (used by encode) in step
        h.set_internal_tacking_values(int(nz[0]), int(nz[-1]), int(counts.sum()))

    def merge(self, other: LatencyHistogram) -> None:
        self._flush()
        other._flush()
        if other.count == 0:
            return
        self._hdr.add(other._hdr)
        self.count += other.count
        self.sum_us += other.sum_us
        self.clamped += other.clamped
        for attr, pick in (("min_us", min), ("max_seen_us", max)):
            mine, theirs = getattr(self, attr), getattr(other, attr)
            setattr(self, attr, theirs if mine is None else pick(mine, theirs))

    def percentiles_ms(self, pcts: Iterable[float]) -> dict[float, float | None]:
        self._flush()
        pcts = list(pcts)
        if self.count == 0:
            return {p: None for p in pcts}
        h = self._hdr
        cumulative = np.cumsum(_counts(h))
        lo, hi = self.min_us or 0, self.max_seen_us or 0
        out: dict[float, float | None] = {}
        for p in pcts:
            # Same rule as hdrh's get_percentile_to_value_dict, without its Python loop.
            i = int(np.searchsorted(cumulative, h.get_target_count_at_percentile(p)))
            v = h.get_value_from_index(i)
            v = h.get_highest_equivalent_value(v) if p else h.get_lowest_equivalent_value(v)
            out[p] = min(max(v, lo), hi) / 1000.0
        return out

    def percentile_ms(self, pct: float) -> float | None:
        return self.percentiles_ms([pct])[pct]

    def summary(self) -> dict[str, Any]:
        """count, mean, min, max, p50, p90, p95, p99 (milliseconds; None when empty)."""
        self._flush()
        out: dict[str, Any] = {"count": self.count}
        out["mean"] = self.sum_us / self.count / 1000.0 if self.count else None
        out["min"] = self.min_us / 1000.0 if self.min_us is not None else None
        out["max"] = self.max_seen_us / 1000.0 if self.max_seen_us is not None else None
        for p, v in self.percentiles_ms(PERCENTILES).items():
            out[f"p{p:g}"] = v
        if self.clamped:
            out["clamped"] = self.clamped
        return out

    def to_dict(self) -> dict[str, Any]:
        self._flush()
        return {
            "max_us": self.max_us,
            "count": self.count,
            "sum_us": self.sum_us,
            "min_us": self.min_us,
            "max_seen_us": self.max_seen_us,
            "clamped": self.clamped,
            "hdr": self._hdr.encode().decode("ascii") if self.count else None,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> LatencyHistogram:
        h = cls(int(d["max_us"]))
        if d.get("hdr"):
            h._hdr.decode_and_add(d["hdr"])
        h.count, h.sum_us, h.clamped = int(d["count"]), int(d["sum_us"]), int(d["clamped"])
        h.min_us, h.max_seen_us = d["min_us"], d["max_seen_us"]
        return h

    def counts_copy(self) -> np.ndarray:
        """A copy of the HDR counts (subtract two copies for the values recorded in between)."""
        self._flush()
        return _counts(self._hdr).copy()

    def percentile_of_counts_ms(self, counts: np.ndarray, pct: float) -> float | None:
        """A percentile of a counts array from `counts_copy` (differences too); None if empty."""
        total = int(counts.sum())
        if total <= 0:
            return None
        h = self._hdr
        target = max(1, math.ceil(total * pct / 100.0))
        i = int(np.searchsorted(np.cumsum(counts), target))
        return h.get_highest_equivalent_value(h.get_value_from_index(i)) / 1000.0

    def bucket_counts(self) -> dict[int, int]:
        """Non-zero HDR counts by index (for exactness checks and plots)."""
        self._flush()
        counts = _counts(self._hdr)
        nz = np.flatnonzero(counts)
        return dict(zip(nz.tolist(), counts[nz].tolist(), strict=True))


def _counts(h: HdrHistogram) -> np.ndarray:
    """The histogram's live counts array as a writable numpy view (no copy)."""
    return np.ctypeslib.as_array(h.counts)


def _hdr_index(h: HdrHistogram, us: np.ndarray) -> np.ndarray:
    """HDR counts-array index for each value: hdrh's own formula, vectorised.

    pow2ceiling = bit_length(v | sub_bucket_mask); frexp's exponent is the bit length
    exactly for integers below 2**53 (our max is ~2**36).
    """
    m = h.sub_bucket_half_count_magnitude
    u = h.unit_magnitude
    pow2ceiling = np.frexp((us | h.sub_bucket_mask).astype(np.float64))[1].astype(np.int64)
    bucket = pow2ceiling - u - (m + 1)
    sub_bucket = us >> (bucket + u)
    return ((bucket + 1) << m) + (sub_bucket - h.sub_bucket_half_count)
