"""HDR latency histogram: milliseconds stored as integer microseconds, exactly mergeable.

3 significant digits (sub-ms precision holds). A percentile is HDR's highest-equivalent value
of the bucket (<= 0.1 % above the true order statistic), capped at the exact maximum; count,
sum, min and max are exact. Bucket counts add exactly, so merging shards in any order gives
the same histogram as recording every value in one process.
"""

from __future__ import annotations

import functools
import math
from array import array
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
    bucket counts in vectorised batches (numpy over hdrh's own index formula). Mergeable
    exactly with ``merge``.

    Counts are held sparsely (the non-zero bucket indices and their counts) until that
    would outgrow the dense array, then densely: a dense 1 us..1 h array is 184 KiB, and a
    run keeps one per metric of every (class, step) view, most of which see few distinct
    values. ``_hdr`` builds an hdrh histogram with the same counts when one is needed
    (encoding); percentiles are computed from the counts directly.
    """

    __slots__ = (
        "max_us",
        "_idx",
        "_cnt",
        "_dense",
        "_pending",
        "count",
        "sum_us",
        "min_us",
        "max_seen_us",
        "clamped",
    )

    def __init__(self, max_us: int = REQUEST_MAX_US) -> None:
        self.max_us = max_us
        self._idx = _NO_IDX  # sorted non-zero bucket indices (while sparse)
        self._cnt = _NO_CNT  # their counts
        self._dense: np.ndarray | None = None  # the whole counts array, once denser
        self._pending = array("d")  # 8 bytes a value (a list of floats takes 32)
        self.count = 0
        self.sum_us = 0
        self.min_us: int | None = None
        self.max_seen_us: int | None = None
        self.clamped = 0

    @property
    def _shape(self) -> HdrHistogram:
        return _shape(self.max_us)

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
        arr = np.frombuffer(self._pending, dtype=np.float64)
        self._pending = array("d")
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
        idx, cnt = np.unique(_hdr_index(self._shape, us), return_counts=True)
        self._add_counts(idx, cnt.astype(np.int64))

    def _add_counts(self, idx: np.ndarray, cnt: np.ndarray) -> None:
        """Add counts at sorted unique bucket indices."""
        if idx.size == 0:
            return
        if self._dense is not None:
            self._dense[idx] += cnt
            return
        if self._idx.size:
            both = np.concatenate([self._idx, idx])
            counts = np.concatenate([self._cnt, cnt])
            idx, inv = np.unique(both, return_inverse=True)
            cnt = np.zeros(idx.size, dtype=np.int64)
            np.add.at(cnt, inv, counts)
        n_len = self._shape.counts_len
        if idx.size * 12 >= n_len * 8:  # sparse (4 + 8 bytes a bucket) no longer smaller
            self._dense = np.zeros(n_len, dtype=np.int64)
            self._dense[idx] = cnt
            self._idx, self._cnt = _NO_IDX, _NO_CNT
        else:
            self._idx, self._cnt = idx.astype(np.int32), cnt

    def _nonzero(self) -> tuple[np.ndarray, np.ndarray]:
        """(sorted bucket indices, counts) of the non-zero buckets."""
        if self._dense is None:
            return self._idx, self._cnt
        nz = np.flatnonzero(self._dense)
        return nz, self._dense[nz]

    @property
    def _hdr(self) -> HdrHistogram:
        """A fresh hdrh histogram holding these counts (for encoding and checks)."""
        self._flush()
        h = HdrHistogram(1, self.max_us, SIG_DIGITS)
        idx, cnt = self._nonzero()
        if idx.size:
            _counts(h)[idx] = cnt
            # hdrh's own hook for bulk changes: keeps its total/min/max (used by encode) in step
            h.set_internal_tacking_values(int(idx[0]), int(idx[-1]), int(cnt.sum()))
        return h

    def merge(self, other: LatencyHistogram) -> None:
        self._flush()
        other._flush()
        if other.count == 0:
            return
        if other.max_us == self.max_us:
            self._add_counts(*other._nonzero())
        else:  # a different range: re-bucket by value, as hdrh's add does
            h = self._hdr
            h.add(other._hdr)
            self._set_from(h)
        self.count += other.count
        self.sum_us += other.sum_us
        self.clamped += other.clamped
        for attr, pick in (("min_us", min), ("max_seen_us", max)):
            mine, theirs = getattr(self, attr), getattr(other, attr)
            setattr(self, attr, theirs if mine is None else pick(mine, theirs))

    def _set_from(self, h: HdrHistogram) -> None:
        counts = _counts(h)
        nz = np.flatnonzero(counts)
        self._idx, self._cnt, self._dense = _NO_IDX, _NO_CNT, None
        self._add_counts(nz, counts[nz].astype(np.int64))

    def percentiles_ms(self, pcts: Iterable[float]) -> dict[float, float | None]:
        self._flush()
        pcts = list(pcts)
        if self.count == 0:
            return {p: None for p in pcts}
        h = self._shape
        idx, cnt = self._nonzero()
        cumulative = np.cumsum(cnt)
        total = int(cumulative[-1])
        lo, hi = self.min_us or 0, self.max_seen_us or 0
        out: dict[float, float | None] = {}
        for p in pcts:
            # Same rule as hdrh's get_percentile_to_value_dict, without its Python loop
            # (zero buckets never end the search, so the non-zero ones suffice).
            target = max(int(min(p, 100.0) * total / 100 + 0.5), 1)
            k = min(int(np.searchsorted(cumulative, target)), idx.size - 1)
            v = h.get_value_from_index(int(idx[k]))
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
            tmp = HdrHistogram(1, h.max_us, SIG_DIGITS)
            tmp.decode_and_add(d["hdr"])
            h._set_from(tmp)
        h.count, h.sum_us, h.clamped = int(d["count"]), int(d["sum_us"]), int(d["clamped"])
        h.min_us, h.max_seen_us = d["min_us"], d["max_seen_us"]
        return h

    def counts_copy(self) -> np.ndarray:
        """A copy of the HDR counts (subtract two copies for the values recorded in between)."""
        self._flush()
        if self._dense is not None:
            return self._dense.copy()
        out = np.zeros(self._shape.counts_len, dtype=np.int64)
        out[self._idx] = self._cnt
        return out

    def percentile_of_counts_ms(self, counts: np.ndarray, pct: float) -> float | None:
        """A percentile of a counts array from `counts_copy` (differences too); None if empty."""
        total = int(counts.sum())
        if total <= 0:
            return None
        h = self._shape
        target = max(1, math.ceil(total * pct / 100.0))
        i = int(np.searchsorted(np.cumsum(counts), target))
        ms: float = h.get_highest_equivalent_value(h.get_value_from_index(i)) / 1000.0
        return ms

    def bucket_counts(self) -> dict[int, int]:
        """Non-zero HDR counts by index (for exactness checks and plots)."""
        self._flush()
        idx, cnt = self._nonzero()
        return dict(zip(idx.tolist(), cnt.tolist(), strict=True))

    def counts_at_most_us(self, bounds_us: Iterable[int]) -> list[int]:
        """Cumulative counts at each bound (Prometheus ``le`` buckets), bounds ascending.

        A value counts under a bound when its HDR bucket starts at or below it, so a count can
        include values up to one bucket width (<= 0.1 %) above the bound.
        """
        self._flush()
        idx, cnt = self._nonzero()
        if idx.size == 0:
            return [0 for _ in bounds_us]
        lowest = _hdr_value(self._shape, idx.astype(np.int64))
        cumulative = np.cumsum(cnt)
        at = np.searchsorted(lowest, np.asarray(list(bounds_us), dtype=np.int64), side="right")
        return [int(cumulative[k - 1]) if k else 0 for k in at.tolist()]


_NO_IDX = np.zeros(0, dtype=np.int32)
_NO_CNT = np.zeros(0, dtype=np.int64)


@functools.lru_cache(maxsize=8)
def _shape(max_us: int) -> HdrHistogram:
    """An empty histogram of this range, for its index arithmetic only (never recorded into)."""
    return HdrHistogram(1, max_us, SIG_DIGITS)


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
    index: np.ndarray = ((bucket + 1) << m) + (sub_bucket - h.sub_bucket_half_count)
    return index


def _hdr_value(h: HdrHistogram, idx: np.ndarray) -> np.ndarray:
    """The lowest value of each counts-array index: hdrh's get_value_from_index, vectorised."""
    m = h.sub_bucket_half_count_magnitude
    half = h.sub_bucket_half_count
    bucket = (idx >> m) - 1
    sub_bucket = (idx & (half - 1)) + half
    first = bucket < 0
    sub_bucket = np.where(first, sub_bucket - half, sub_bucket)
    bucket = np.where(first, 0, bucket)
    value: np.ndarray = sub_bucket << (bucket + h.unit_magnitude)
    return value
