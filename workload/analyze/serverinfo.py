"""What a comparison shows beside the verdict: fingerprint diff, error kinds, /metrics series.

None of this gates; it says what changed besides the code (fingerprint, labels,
target facts) and what the server reported while the run went on.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from workload.analyze.rundata import RunData
from workload.analyze.table import Columns, add_histogram
from workload.observe.metrics import series_from_samples


def error_kinds(data: RunData, scopes: list[tuple[str, str | None]]) -> dict[str, dict[str, int]]:
    """Failed requests counted by error kind, per scope (name, class or None for all)."""
    out: dict[str, dict[str, int]] = {}
    counts = data.req_cols.error_counts  # (class, kind) -> failures, in order of first appearance
    for name, cls in scopes:
        kinds: dict[str, int] = {}
        for (c, k), n in counts.items():
            if cls is None or c == cls:
                kinds[k] = kinds.get(k, 0) + n
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


def class_histogram(cols: Columns, cls: str | None = None) -> list[int]:
    """`spec_histogram` of a run's request rows read as columns (summed while reading)."""
    if cls is not None:
        return list(cols.spec_hists.get(cls, []))
    tot: list[int] = []
    for h in cols.spec_hists.values():
        add_histogram(tot, h)
    return tot


def spec_histogram(requests: list[dict[str, Any]], cls: str | None = None) -> list[int]:
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
