"""Client-side speculative-decoding sums (vLLM ``metrics.speculative_decoding``), exactly mergeable.

Definitions, with a = num_accepted_draft_tokens, s = num_spec_steps, L = a request's mean
acceptance length ((a+s)/s when a and s are reported, else the reported
``mean_acceptance_length``): request-weighted mean = mean of L over requests with stats;
token-weighted mean = Σ (a+s)·L / Σ (a+s); pooled = 1 + Σa / Σs; draft_acceptance_rate =
Σa / Σ num_draft_tokens. Full text in ``workload.measure.stats``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

_MICRO = 1_000_000


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
