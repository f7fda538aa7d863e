"""What a comparison shows beside the verdict: fingerprint diff, error kinds, /metrics series.

None of this gates; it says what changed besides the code (fingerprint, labels,
target facts) and what the server reported while the run went on.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from workload.analyze.rundata import RunData
from workload.observe.metrics import series_from_samples


def error_kinds(data: RunData, scopes: list[tuple[str, str | None]]) -> dict[str, dict[str, int]]:
    """Failed requests counted by error kind, per scope (name, class or None for all)."""
    out: dict[str, dict[str, int]] = {}
    for name, cls in scopes:
        kinds: dict[str, int] = {}
        for r in data.requests:
            if (cls is None or r.get("user_class") == cls) and r.get("status", "ok") != "ok":
                k = r.get("error_kind") or r.get("status") or "unknown"
                kinds[k] = kinds.get(k, 0) + 1
        out[name] = kinds
    return out


def server_summary(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per /metrics series: counters (…_total) as the delta over the run, gauges as mean and max."""
    out = {}
    for name, pts in series_from_samples(rows).items():
        vals = [v for _, v in pts]
        if name.endswith("_total") or name.endswith("_count") or name.endswith("_sum"):
            out[name] = {"delta": vals[-1] - vals[0]}
        else:
            out[name] = {"mean": float(np.mean(vals)), "max": float(np.max(vals))}
    return out


def spec_histogram(requests: list[dict], cls: str | None = None) -> list[int]:
    """Summed spec-decode acceptance histogram (index = accepted drafts per step)."""
    tot: list[int] = []
    for r in requests:
        if cls is not None and r.get("user_class") != cls:
            continue
        sd = r.get("spec_decode")
        h = sd.get("acceptance_histogram") if isinstance(sd, dict) else None
        if isinstance(h, list):
            if len(h) > len(tot):
                tot.extend([0] * (len(h) - len(tot)))
            for i, x in enumerate(h):
                if isinstance(x, (int, float)):
                    tot[i] += int(x)
    return tot
