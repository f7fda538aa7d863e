"""Summarise a trace and fit an agentload profile to it.

The profile model is closed-loop (users with think time), so the fit maps an
arrival process onto it: one class of one-step sessions, ``users`` chosen so
each user's mean think time is about ``TARGET_THINK_S``, think time lognormal
with the trace's mean gap per user and the inter-arrival CV as its spread
(burstiness). Sizes are empirical histograms (quantile bins) of the trace;
the prefix shared by most requests (from hash ids) becomes a global system prompt.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import numpy as np

from workload.errors import TraceError
from workload.plan.loading import validate_profile
from workload.plan.traces._blocks import hit_ratio
from workload.plan.traces._read import Trace
from workload.plan.traces._schedule import detect_quantum

TARGET_THINK_S = 10.0
MAX_USERS = 1000
HIST_BINS = 20


def summarize(trace: Trace) -> dict[str, Any]:
    """Counts, rate, burstiness, mean sizes and ideal prefix hit ratio of a trace."""
    reqs = trace.requests
    t = np.asarray([r.arrival_s for r in reqs], dtype=float)
    gaps = np.diff(t)
    dur = float(t[-1] - t[0]) if len(t) > 1 else 0.0
    cv = float(gaps.std() / gaps.mean()) if len(gaps) and gaps.mean() > 0 else None
    out: dict[str, Any] = {
        "source": trace.source,
        "format": trace.format,
        "requests": len(reqs),
        "duration_s": round(dur, 3),
        "rate_rps": round((len(reqs) - 1) / dur, 4) if dur > 0 else None,
        "interarrival_cv": round(cv, 3) if cv is not None else None,
        "quantum_s": detect_quantum(t.tolist()),
        "mean_input_tokens": round(float(np.mean([r.input_tokens for r in reqs])), 1)
        if reqs
        else None,
        "mean_output_tokens": round(float(np.mean([r.output_tokens for r in reqs])), 1)
        if reqs
        else None,
        "sessions": len({r.session for r in reqs if r.session is not None}) or None,
        "ideal_hit_ratio": None,
        "ideal_hit_ratio_tokens": None,
        "bad_lines": len(trace.bad_lines),
    }
    if trace.has_hash_ids:
        h = hit_ratio(trace, block_tokens=trace.block_tokens)
        out["ideal_hit_ratio"] = round(h.ratio, 4)
        out["ideal_hit_ratio_tokens"] = round(h.token_ratio, 4)
    return out


def shared_prefix_blocks(trace: Trace, share: float = 0.5) -> int:
    """Leading block positions where one id is in at least ``share`` of all requests."""
    seqs = [r.hash_ids for r in trace.requests if r.hash_ids is not None]
    if not seqs:
        return 0
    k = 0
    while True:
        # Only blocks with another after them: a last block may be cut short.
        ids = Counter(h[k] for h in seqs if len(h) > k + 1)
        if not ids or ids.most_common(1)[0][1] < share * len(seqs):
            return k
        k += 1


def _hist(values: list[int], lo: int) -> dict[str, Any]:
    """An empirical dist of quantile bins (uniform within a bin), clamped to the data range."""
    x = np.maximum(np.asarray(values, dtype=float), lo)
    vmin, vmax = float(x.min()), float(x.max())
    if vmin == vmax:
        return {"dist": "constant", "value": vmin}
    edges = np.unique(np.round(np.quantile(x, np.linspace(0, 1, HIST_BINS + 1))))
    counts, _ = np.histogram(x, bins=edges)
    return {
        "dist": "empirical",
        "bins": [float(e) for e in edges],
        "counts": [int(c) for c in counts],
        "min": vmin,
        "max": vmax,
    }


def fit_profile(trace: Trace, *, name: str = "trace", seed: int = 1) -> dict[str, Any]:
    """A profile dict (validated) whose traffic matches the trace's sizes, rate and prefix reuse."""
    if len(trace.requests) < 2:
        raise TraceError("a trace needs at least 2 requests to fit arrivals")
    s = summarize(trace)
    rate = s["rate_rps"] or 1.0
    cv = s["interarrival_cv"] or 1.0
    users = max(1, min(MAX_USERS, math.ceil(rate * TARGET_THINK_S)))
    think_mean = users / rate
    sigma = min(3.0, math.sqrt(math.log(1.0 + cv * cv)))  # lognormal with this CV
    shared = shared_prefix_blocks(trace) * trace.block_tokens
    min_in = min(r.input_tokens for r in trace.requests)
    system_tokens = min(shared, max(0, min_in - 1))
    turns = [r.input_tokens - system_tokens for r in trace.requests]
    reuse = (
        f", ideal prefix hit ratio {s['ideal_hit_ratio']:.1%}"
        if s["ideal_hit_ratio"] is not None
        else ""
    )
    raw: dict[str, Any] = {
        "schema_version": 1,
        "name": name,
        "description": (
            f"Fitted from {s['format']} trace {s['source']}: {s['requests']} requests over "
            f"{s['duration_s']:.0f} s, {rate:.3g} req/s, inter-arrival CV {cv:.3g}{reuse}"
        ),
        "seed": seed,
        "run": {"users": users, "duration_s": max(1.0, round(s["duration_s"], 1))},
        "classes": {
            "trace": {
                "description": "One request per session, sizes from the trace",
                "weight": 1,
                "steps": 1,
                "system_prompt": {
                    "tokens": system_tokens,
                    "share": "global" if system_tokens else "session",
                },
                "user_turn": _hist(turns, 1),
                "output": {
                    "tokens": _hist([r.output_tokens for r in trace.requests], 1),
                    "ignore_eos": True,
                },
                "think_time_s": {
                    "dist": "lognormal",
                    "mean": round(think_mean, 4),
                    "sigma": round(sigma, 4),
                },
            }
        },
    }
    validate_profile(raw, f"fit of {trace.source}")
    return raw
