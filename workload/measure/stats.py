"""Mergeable run statistics: overall, per traffic class and per (class, session step).

Exact under merge: every counter is an integer, latency sums are integer microseconds,
fractional spec-decode sums are integer micro-units, and histograms are HDR histograms
(3 significant digits, integer microseconds: sub-ms precision holds) whose bucket counts
add exactly. Merging any partition of the records in any order gives the same
``to_dict()`` as aggregating them in one process.

Definitions (also in docs/metrics.md):

- Latency histograms (TTFT, ITL per gap from ``itl_gaps_ms``, TPOT, E2E) hold successful
  requests only; ``session_duration`` holds every session (overall and class views only).
  A percentile is HDR's highest-equivalent value of the bucket (<= 0.1 % above the true
  order statistic), capped at the exact maximum; means, min and max are exact.
- ``error_ratio`` = errors / (requests - cancelled). Cancelled requests (user stopped)
  are neither ok nor errors. ``tool_loop_failures`` counts requests whose
  ``tool_loop_failure`` is set (ok at the HTTP level or not); ``sessions.tool_loop_failure`` counts session outcomes.
- ``cached_ratio`` = Σcached / Σprompt over requests that reported cached tokens.
- Sessions: ``finished`` = all outcomes but cancelled; ``success_ratio`` =
  completed / finished. A session is *good* when it completed and every one of its
  requests met the class's per-request latency SLOs (``slo.request_meets_slo``);
  ``goodput_per_min`` = good sessions per minute of run time. Without SLOs for a class,
  good = completed.
- Spec decode (vLLM ``metrics.speculative_decoding``), with a = num_accepted_draft_tokens,
  s = num_spec_steps, L = a request's mean acceptance length ((a+s)/s when a and s are
  reported, else the reported ``mean_acceptance_length``):
  request-weighted mean = mean of L over requests with stats;
  token-weighted mean = Σ (a+s)·L / Σ (a+s) — every token emitted by a spec-decode step
  weighs the same;
  pooled = 1 + Σa / Σs — per spec step, the formula vLLM's /metrics counters give;
  draft_acceptance_rate = Σa / Σ num_draft_tokens; ``acceptance_histogram`` is the
  elementwise sum of the per-request [k+1] vectors (shorter ones padded with zeros);
  ``accepted_per_position[j]`` = Σ_{i>j} histogram[i] (steps accepting at least j+1
  drafts, comparable with ``vllm:spec_decode_num_accepted_tokens_per_pos_total``);
  share_without_stats = ok requests without spec stats / ok requests.

Over-time series are not kept here: ``time_series()`` derives them from requests.jsonl
rows after the run, so the aggregate stays small and exactly mergeable.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
from hdrh.histogram import HdrHistogram

from workload.measure.records import SESSION_OUTCOMES, RequestRecord, SessionRecord
from workload.measure.slo import (
    SLOResult,
    error_ratio,
    evaluate_slos,
    junit_xml,
    request_meets_slo,
    request_thresholds,
)

__all__ = [
    "Aggregate",
    "LatencyHistogram",
    "SLOResult",
    "console_table",
    "error_ratio",
    "evaluate_slos",
    "junit_xml",
    "progress_line",
    "session_goodput",
    "step_rows",
    "time_series",
    "view_row",
]

SCHEMA = "agentload.stats/1"
SIG_DIGITS = 3
REQUEST_MAX_US = 3_600_000_000  # 1 h: anything longer is clamped (and counted)
SESSION_MAX_US = 86_400_000_000  # 24 h
PERCENTILES = (50.0, 90.0, 95.0, 99.0)
REQUEST_METRICS = ("ttft", "itl", "tpot", "e2e")
_FLUSH_AT = 8192  # pending values before a vectorised flush into the HDR counts
_MICRO = 1_000_000


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


@dataclass(slots=True)
class SpecDecodeStats:
    """Client-side speculative-decoding sums; integers only, so merging is exact."""

    requests_with_stats: int = 0
    requests_without_stats: int = 0
    accepted_tokens: int = 0
    draft_tokens: int = 0
    spec_steps: int = 0
    acc_len_sum_u: int = 0  # Σ L, micro-units
    acc_len_tw_num_u: int = 0  # Σ (a+s)·L, micro-units
    acc_len_tw_den: int = 0  # Σ (a+s)
    pooled_requests: int = 0  # requests that reported both a and s
    histogram: list[int] = field(default_factory=list)

    FIELDS: ClassVar[tuple[str, ...]] = (
        "requests_with_stats",
        "requests_without_stats",
        "accepted_tokens",
        "draft_tokens",
        "spec_steps",
        "acc_len_sum_u",
        "acc_len_tw_num_u",
        "acc_len_tw_den",
        "pooled_requests",
    )

    def add(self, spec: Mapping[str, Any] | None) -> None:
        if not spec:
            self.requests_without_stats += 1
            return
        self.requests_with_stats += 1
        a = _int_or_none(spec.get("num_accepted_draft_tokens"))
        s = _int_or_none(spec.get("num_spec_steps"))
        d = _int_or_none(spec.get("num_draft_tokens"))
        if a is not None and s is not None and s > 0:
            length = (a + s) / s
            self.accepted_tokens += a
            self.spec_steps += s
            self.pooled_requests += 1
            self.acc_len_tw_num_u += round((a + s) * length * _MICRO)
            self.acc_len_tw_den += a + s
            if d is not None:
                self.draft_tokens += d
        else:
            reported = spec.get("mean_acceptance_length")
            length = float(reported) if isinstance(reported, (int, float)) else math.nan
        if math.isfinite(length):
            self.acc_len_sum_u += round(length * _MICRO)
        hist = spec.get("acceptance_histogram")
        if isinstance(hist, list):
            self._add_hist([int(x) for x in hist if isinstance(x, (int, float))])

    def _add_hist(self, hist: list[int]) -> None:
        if len(hist) > len(self.histogram):
            self.histogram.extend([0] * (len(hist) - len(self.histogram)))
        for i, x in enumerate(hist):
            self.histogram[i] += x

    def merge(self, other: SpecDecodeStats) -> None:
        for f in self.FIELDS:
            setattr(self, f, getattr(self, f) + getattr(other, f))
        self._add_hist(other.histogram)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {f: getattr(self, f) for f in self.FIELDS}
        d["histogram"] = list(self.histogram)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SpecDecodeStats:
        s = cls()
        for f in cls.FIELDS:
            setattr(s, f, int(d.get(f, 0)))
        s.histogram = [int(x) for x in d.get("histogram", [])]
        return s

    def summary(self) -> dict[str, Any]:
        n = self.requests_with_stats
        total = n + self.requests_without_stats
        hist = self.histogram
        return {
            "requests_with_stats": n,
            "requests_without_stats": self.requests_without_stats,
            "share_without_stats": self.requests_without_stats / total if total else None,
            "acceptance_length_request_mean": self.acc_len_sum_u / _MICRO / n if n else None,
            "acceptance_length_token_weighted": (
                self.acc_len_tw_num_u / _MICRO / self.acc_len_tw_den
                if self.acc_len_tw_den
                else None
            ),
            "acceptance_length_pooled": (
                1.0 + self.accepted_tokens / self.spec_steps if self.spec_steps else None
            ),
            "draft_acceptance_rate": (
                self.accepted_tokens / self.draft_tokens if self.draft_tokens else None
            ),
            "accepted_tokens": self.accepted_tokens,
            "draft_tokens": self.draft_tokens,
            "spec_steps": self.spec_steps,
            "acceptance_histogram": list(hist),
            "accepted_per_position": [sum(hist[j + 1 :]) for j in range(max(0, len(hist) - 1))],
        }


def _int_or_none(x: Any) -> int | None:
    return int(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


_COUNTERS = (
    "requests",
    "ok",
    "errors",
    "cancelled",
    "prompt_tokens",
    "completion_tokens",
    "cached_tokens",
    "cached_prompt_tokens",  # Σ prompt tokens of requests that reported cached tokens
    "cached_reported",
    "tool_calls",
    "tool_loop_failures",
)


class View:
    """Everything counted for one slice of the traffic (overall, a class, or a step)."""

    __slots__ = ("counters", "errors_by_kind", "hists", "sessions", "spec")

    def __init__(self) -> None:
        self.counters = dict.fromkeys(_COUNTERS, 0)
        self.errors_by_kind: dict[str, int] = {}
        self.hists: dict[str, LatencyHistogram] = {}
        self.sessions: dict[str, int] = {}  # outcome -> n, plus "good"
        self.spec = SpecDecodeStats()

    def hist(self, name: str) -> LatencyHistogram:
        h = self.hists.get(name)
        if h is None:
            h = self.hists[name] = LatencyHistogram(
                SESSION_MAX_US if name == "session_duration" else REQUEST_MAX_US
            )
        return h

    def add_request(self, rec: RequestRecord) -> None:
        c = self.counters
        c["requests"] += 1
        if rec.status == "ok":
            c["ok"] += 1
            for metric in ("ttft", "tpot", "e2e"):
                value = getattr(rec, f"{metric}_ms")
                if value is not None:
                    self.hist(metric).record_ms(value)
            if rec.itl_gaps_ms:
                self.hist("itl").record_many_ms(rec.itl_gaps_ms)
            self.spec.add(rec.spec_decode)
        elif rec.status == "cancelled":
            c["cancelled"] += 1
        else:
            c["errors"] += 1
            kind = rec.error_kind or "unknown"
            self.errors_by_kind[kind] = self.errors_by_kind.get(kind, 0) + 1
        c["prompt_tokens"] += rec.prompt_tokens or 0
        c["completion_tokens"] += rec.completion_tokens or 0
        if rec.cached_tokens is not None:
            c["cached_tokens"] += rec.cached_tokens
            c["cached_prompt_tokens"] += rec.prompt_tokens or 0
            c["cached_reported"] += 1
        c["tool_calls"] += len(rec.tool_calls)
        if rec.tool_loop_failure or rec.error_kind == "tool_loop":
            c["tool_loop_failures"] += 1

    def add_session(self, rec: SessionRecord, good: bool) -> None:
        self.sessions[rec.outcome] = self.sessions.get(rec.outcome, 0) + 1
        if good:
            self.sessions["good"] = self.sessions.get("good", 0) + 1
        self.hist("session_duration").record_ms(rec.duration_ms)

    def merge(self, other: View) -> None:
        for k, v in other.counters.items():
            self.counters[k] = self.counters.get(k, 0) + v
        for mine, theirs in (
            (self.errors_by_kind, other.errors_by_kind),
            (self.sessions, other.sessions),
        ):
            for k, v in theirs.items():
                mine[k] = mine.get(k, 0) + v
        for name, h in other.hists.items():
            self.hist(name).merge(h)
        self.spec.merge(other.spec)

    def to_dict(self) -> dict[str, Any]:
        return {
            "counters": dict(self.counters),
            "errors_by_kind": dict(sorted(self.errors_by_kind.items())),
            "sessions": dict(sorted(self.sessions.items())),
            "hists": {k: self.hists[k].to_dict() for k in sorted(self.hists)},
            "spec": self.spec.to_dict(),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> View:
        v = cls()
        v.counters.update({k: int(x) for k, x in d["counters"].items()})
        v.errors_by_kind = {k: int(x) for k, x in d["errors_by_kind"].items()}
        v.sessions = {k: int(x) for k, x in d["sessions"].items()}
        v.hists = {k: LatencyHistogram.from_dict(h) for k, h in d["hists"].items()}
        v.spec = SpecDecodeStats.from_dict(d["spec"])
        return v

    def summary(self, duration_s: float | None, with_sessions: bool) -> dict[str, Any]:
        c = self.counters
        attempted = c["requests"] - c["cancelled"]
        out: dict[str, Any] = dict(c)
        out["error_ratio"] = c["errors"] / attempted if attempted else None
        out["errors_by_kind"] = dict(sorted(self.errors_by_kind.items()))
        out["cached_ratio"] = (
            c["cached_tokens"] / c["cached_prompt_tokens"] if c["cached_prompt_tokens"] else None
        )
        empty = LatencyHistogram().summary()
        for metric in REQUEST_METRICS:
            h = self.hists.get(metric)
            out[f"{metric}_ms"] = h.summary() if h else dict(empty)
        per_s = duration_s if duration_s and duration_s > 0 else None
        out["throughput"] = {
            "requests_per_s": c["ok"] / per_s if per_s else None,
            "output_tokens_per_s": c["completion_tokens"] / per_s if per_s else None,
        }
        out["spec_decode"] = self.spec.summary()
        if with_sessions:
            h = self.hists.get("session_duration")
            out["session_duration_ms"] = h.summary() if h else dict(empty)
            out["sessions"] = self._session_summary(duration_s)
        return out

    def _session_summary(self, duration_s: float | None) -> dict[str, Any]:
        s = {o: self.sessions.get(o, 0) for o in SESSION_OUTCOMES}
        total = sum(s.values())
        finished = total - s["cancelled"]
        good = self.sessions.get("good", 0)
        return {
            **s,
            "total": total,
            "finished": finished,
            "good": good,
            "success_ratio": s["completed"] / finished if finished else None,
            "tool_loop_failure_ratio": s["tool_loop_failure"] / finished if finished else None,
            "goodput_per_min": good / (duration_s / 60.0) if duration_s else None,
        }


class Aggregate:
    """Run statistics for the overall traffic, each class and each (class, step); mergeable.

    With ``slos_by_class`` the aggregate tracks, per open session, whether every request so
    far met the class's per-request SLOs, and counts the session as good on ``add_session``.
    That per-session state is local to the process that sees the session's requests
    (sessions never span workers); it is neither serialised nor merged.
    """

    def __init__(self, slos_by_class: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        self.slos_by_class = dict(slos_by_class or {})
        self._limits = {cls: request_thresholds(slo) for cls, slo in self.slos_by_class.items()}
        self.overall = View()
        self.classes: dict[str, View] = {}
        self.steps: dict[tuple[str, int], View] = {}
        self.t_first: float | None = None  # earliest request start, unix seconds
        self.t_last: float | None = None  # latest request end, unix seconds
        self._session_ok: dict[str, bool] = {}

    def _class(self, name: str) -> View:
        v = self.classes.get(name)
        if v is None:
            v = self.classes[name] = View()
        return v

    def _step(self, name: str, step: int) -> View:
        v = self.steps.get((name, step))
        if v is None:
            v = self.steps[(name, step)] = View()
        return v

    def add_request(self, rec: RequestRecord) -> None:
        """Count one request attempt in the overall, class and step views."""
        self.overall.add_request(rec)
        self._class(rec.user_class).add_request(rec)
        self._step(rec.user_class, rec.step).add_request(rec)
        if rec.t_start:
            end = rec.t_start + (rec.e2e_ms or 0.0) / 1000.0
            self.t_first = rec.t_start if self.t_first is None else min(self.t_first, rec.t_start)
            self.t_last = end if self.t_last is None else max(self.t_last, end)
        if rec.session_id:
            limits = self._limits.get(rec.user_class)
            met = request_meets_slo(rec, None, limits) if limits else rec.status == "ok"
            self._session_ok[rec.session_id] = self._session_ok.get(rec.session_id, True) and met

    def add_session(self, rec: SessionRecord, good: bool | None = None) -> None:
        """Count a finished session; ``good`` overrides the tracked per-request SLO verdict."""
        tracked = self._session_ok.pop(rec.session_id, True)
        if good is None:
            good = rec.outcome == "completed" and tracked
        self.overall.add_session(rec, good)
        self._class(rec.user_class).add_session(rec, good)

    def merge(self, other: Aggregate) -> None:
        """Add another aggregate's counts into this one (associative and commutative)."""
        self.overall.merge(other.overall)
        for name, v in other.classes.items():
            self._class(name).merge(v)
        for (name, step), v in other.steps.items():
            self._step(name, step).merge(v)
        if other.t_first is not None:
            self.t_first = (
                other.t_first if self.t_first is None else min(self.t_first, other.t_first)
            )
        if other.t_last is not None:
            self.t_last = other.t_last if self.t_last is None else max(self.t_last, other.t_last)

    def drain(self) -> Aggregate:
        """Hand over everything counted so far and start empty (worker -> master deltas).

        Open sessions' SLO state stays here, so a session whose requests straddle two
        reports is still judged on all of them.
        """
        out = Aggregate(self.slos_by_class)
        out.overall, out.classes, out.steps = self.overall, self.classes, self.steps
        out.t_first, out.t_last = self.t_first, self.t_last
        self.overall, self.classes, self.steps = View(), {}, {}
        self.t_first = self.t_last = None
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-able; ``from_dict(to_dict())`` merges and summarises identically."""
        steps: dict[str, dict[str, Any]] = {}
        for name, step in sorted(self.steps):
            steps.setdefault(name, {})[str(step)] = self.steps[(name, step)].to_dict()
        return {
            "schema": SCHEMA,
            "t_first": self.t_first,
            "t_last": self.t_last,
            "overall": self.overall.to_dict(),
            "classes": {k: self.classes[k].to_dict() for k in sorted(self.classes)},
            "steps": steps,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], slos_by_class: Mapping | None = None) -> Aggregate:
        if d.get("schema") != SCHEMA:
            raise ValueError(f"not an agentload stats object (schema {d.get('schema')!r})")
        agg = cls(slos_by_class)
        agg.t_first, agg.t_last = d["t_first"], d["t_last"]
        agg.overall = View.from_dict(d["overall"])
        agg.classes = {k: View.from_dict(v) for k, v in d["classes"].items()}
        agg.steps = {
            (name, int(step)): View.from_dict(v)
            for name, by_step in d["steps"].items()
            for step, v in by_step.items()
        }
        return agg

    def duration_s(self) -> float | None:
        """Span from the first request start to the last request end."""
        if self.t_first is None or self.t_last is None:
            return None
        return max(0.0, self.t_last - self.t_first)

    def percentile_ms(
        self, metric: str, pct: float, class_name: str | None = None, step: int | None = None
    ) -> float | None:
        """Any percentile of ttft/itl/tpot/e2e/session_duration for a view; None if empty."""
        if class_name is None:
            view: View | None = self.overall
        elif step is None:
            view = self.classes.get(class_name)
        else:
            view = self.steps.get((class_name, step))
        h = view.hists.get(metric) if view else None
        return h.percentile_ms(pct) if h else None

    def summary(self, duration_s: float | None = None) -> dict[str, Any]:
        """Plain numbers for console, run.json, web UI and compare (shape in docs/internals.md)."""
        duration = duration_s if duration_s is not None else self.duration_s()
        by_step: dict[str, dict[str, Any]] = {}
        for name, step in sorted(self.steps):
            by_step.setdefault(name, {})[str(step)] = self.steps[(name, step)].summary(
                duration, with_sessions=False
            )
        return {
            "schema": SCHEMA,
            "duration_s": duration,
            "overall": self.overall.summary(duration, with_sessions=True),
            "by_class": {
                k: self.classes[k].summary(duration, with_sessions=True)
                for k in sorted(self.classes)
            },
            "by_step": by_step,
        }


def session_goodput(
    session: SessionRecord, requests: Iterable[RequestRecord], slo: Mapping[str, Any] | None
) -> bool:
    """Whether a session is good: completed, and each request met the class's latency SLOs."""
    if session.outcome != "completed":
        return False
    limits = request_thresholds(slo)
    return all(request_meets_slo(r, None, limits) for r in requests)


# ---------------------------------------------------------------- rendering and series


def _ms(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:.0f}" if x >= 100 else f"{x:.1f}"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def console_table(summary: Mapping[str, Any]) -> str:
    """A compact plain-text table: one row per class and one overall."""
    header = (
        "class",
        "reqs",
        "err%",
        "sess ok/fin",
        "TTFT p50",
        "TTFT p95",
        "ITL p95",
        "E2E p95",
        "out tok/s",
        "cached",
        "acc.len",
    )
    rows = [header]
    views = list((summary.get("by_class") or {}).items()) + [("overall", summary["overall"])]
    for name, v in views:
        s = v.get("sessions") or {}
        spec = v.get("spec_decode") or {}
        tps = (v.get("throughput") or {}).get("output_tokens_per_s")
        acc = spec.get("acceptance_length_token_weighted")
        rows.append(
            (
                name,
                str(v["requests"]),
                _pct(v.get("error_ratio")),
                f"{s.get('completed', 0)}/{s.get('finished', 0)}",
                _ms(v["ttft_ms"].get("p50")),
                _ms(v["ttft_ms"].get("p95")),
                _ms(v["itl_ms"].get("p95")),
                _ms(v["e2e_ms"].get("p95")),
                "-" if tps is None else f"{tps:.1f}",
                _pct(v.get("cached_ratio")),
                "-" if acc is None else f"{acc:.2f}",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = []
    for j, r in enumerate(rows):
        cells = [r[0].ljust(widths[0])] + [
            c.rjust(w) for c, w in zip(r[1:], widths[1:], strict=True)
        ]
        lines.append("  ".join(cells).rstrip())
        if j == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines) + "\n(latencies in ms)"


def _r(x: float | None, nd: int = 1) -> float | str:
    return "" if x is None else round(x, nd)


def view_row(label: str, view: Mapping[str, Any]) -> dict[str, Any]:
    """One table row (web UI "Agents" tab) from a view summary; blanks where there is no data."""
    spec = view.get("spec_decode") or {}
    sessions = view.get("sessions")
    return {
        "scope": label,
        "requests": view.get("requests", 0),
        "errors": view.get("errors", 0),
        "ttft_p50": _r(view["ttft_ms"].get("p50")),
        "ttft_p95": _r(view["ttft_ms"].get("p95")),
        "itl_p95": _r(view["itl_ms"].get("p95")),
        "tpot_p50": _r(view["tpot_ms"].get("p50")),
        "e2e_p95": _r(view["e2e_ms"].get("p95")),
        "cached_ratio": _r(view.get("cached_ratio"), 3),
        "accept_len": _r(spec.get("acceptance_length_token_weighted"), 2),
        "draft_accept": _r(spec.get("draft_acceptance_rate"), 3),
        "sessions_ok": sessions["completed"] if sessions else "",
        "sessions_failed": sessions["failed"] + sessions["tool_loop_failure"] if sessions else "",
        "tool_loop_failures": view.get("tool_loop_failures", 0),
    }


def step_rows(summary: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """(label, view) for every (class, step) view, labelled "class #step", in step order."""
    out = []
    for cls, by_step in (summary.get("by_step") or {}).items():
        for step in sorted(by_step, key=int):
            out.append((f"{cls} #{step}", by_step[step]))
    return out


def progress_line(agg: Aggregate | Mapping[str, Any], *, elapsed_s: float, users: int) -> str:
    """One console line for headless runs: totals so far, overall latency tails, throughput."""
    if isinstance(agg, Aggregate):
        v = agg.overall.summary(elapsed_s, with_sessions=True)
    else:
        v = agg["overall"]
    s = v["sessions"]
    tps = (v.get("throughput") or {}).get("output_tokens_per_s")
    return (
        f"[{elapsed_s:6.0f}s] users {users} | reqs {v['requests']} ok {v['ok']} "
        f"err {_pct(v.get('error_ratio'))} | sessions {s['completed']}/{s['finished']} done | "
        f"TTFT p95 {_ms(v['ttft_ms'].get('p95'))} ms | ITL p95 {_ms(v['itl_ms'].get('p95'))} ms | "
        f"out {'-' if tps is None else f'{tps:.0f}'} tok/s"
    )


def time_series(
    rows: Iterable[Mapping[str, Any] | RequestRecord], bucket_s: float = 5.0
) -> dict[str, Any]:
    """Per-bucket series from requests.jsonl rows (or records), overall and per class.

    A request lands in the bucket of its end (t_start + e2e). Per bucket: requests, errors,
    output tokens/s, and exact TTFT p50/p95 (ms) over the bucket's successful requests.
    """
    items = []
    for r in rows:
        d = r.to_json() if isinstance(r, RequestRecord) else r
        t0 = d.get("t_start") or 0.0
        if not t0:
            continue
        items.append((t0 + (d.get("e2e_ms") or 0.0) / 1000.0, d))
    if not items:
        return {"bucket_s": bucket_s, "t0": None, "overall": _series([], 0), "by_class": {}}
    start = min(d["t_start"] for _, d in items)
    n = int((max(t for t, _ in items) - start) // bucket_s) + 1
    keyed = [(min(n - 1, int((t - start) // bucket_s)), d) for t, d in items]
    classes = sorted({d.get("user_class", "") for _, d in keyed})
    return {
        "bucket_s": bucket_s,
        "t0": start,
        "overall": _series(keyed, n, bucket_s),
        "by_class": {
            c: _series([(b, d) for b, d in keyed if d.get("user_class", "") == c], n, bucket_s)
            for c in classes
        },
    }


def _series(keyed: list[tuple[int, Mapping[str, Any]]], n: int, bucket_s: float = 5.0) -> dict:
    reqs, errs, toks = [0] * n, [0] * n, [0] * n
    ttfts: list[list[float]] = [[] for _ in range(n)]
    for b, d in keyed:
        reqs[b] += 1
        if d.get("status") == "error":
            errs[b] += 1
        toks[b] += d.get("completion_tokens") or 0
        if d.get("status") == "ok" and d.get("ttft_ms") is not None:
            ttfts[b].append(d["ttft_ms"])

    def pct(values: list[float], p: float) -> float | None:
        return float(np.percentile(values, p, method="inverted_cdf")) if values else None

    return {
        "t": [i * bucket_s for i in range(n)],
        "requests": reqs,
        "errors": errs,
        "output_tokens_per_s": [t / bucket_s for t in toks],
        "ttft_p50_ms": [pct(v, 50) for v in ttfts],
        "ttft_p95_ms": [pct(v, 95) for v in ttfts],
    }
