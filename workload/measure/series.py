"""Over-time series derived from requests.jsonl rows after the run (not kept in the aggregate,
which stays small and exactly mergeable)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from workload.measure.records import RequestRecord


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


def _series(
    keyed: list[tuple[int, Mapping[str, Any]]], n: int, bucket_s: float = 5.0
) -> dict[str, Any]:
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
