"""What a comparison shows beside the verdict: fingerprint diff, error kinds, /metrics series.

None of this gates; it says what changed besides the code (fingerprint, labels,
target facts) and what the server reported while the run went on.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from workload.analyze.rundata import RunData


def flatten_fingerprint(d: Any, prefix: str = "") -> dict[str, tuple[Any, Any]]:
    """Fingerprint leaves: dotted path -> (value, source)."""
    out: dict[str, tuple[Any, Any]] = {}
    if isinstance(d, dict) and "value" in d and set(d) <= {"value", "source", "detail", "unit"}:
        v, src = d.get("value"), d.get("source")
        if isinstance(v, dict):
            # e.g. cache_config: compare and show the fields, not one long dict
            for k, sub in v.items():
                out[f"{prefix}.{k}"] = (sub, src)
        else:
            out[prefix] = (v, src)
    elif isinstance(d, dict):
        for k, v in d.items():
            out.update(flatten_fingerprint(v, f"{prefix}.{k}" if prefix else str(k)))
    else:
        out[prefix] = (d, None)
    return out


def fingerprint_diff(run_a: dict, run_b: dict) -> list[dict[str, Any]]:
    """Fields of `fingerprint`, `labels` and target facts that differ between two runs."""
    rows = []
    for section in ("fingerprint", "labels"):
        fa = flatten_fingerprint(run_a.get(section) or {})
        fb = flatten_fingerprint(run_b.get(section) or {})
        for k in sorted(set(fa) | set(fb)):
            va, sa = fa.get(k, (None, None))
            vb, sb = fb.get(k, (None, None))
            if va != vb:
                rows.append(
                    {"field": f"{section}.{k}", "a": va, "b": vb, "source_a": sa, "source_b": sb}
                )
    ta, tb = run_a.get("target") or {}, run_b.get("target") or {}
    for k in ("model", "max_model_len"):
        if ta.get(k) != tb.get(k):
            rows.append(
                {
                    "field": f"target.{k}",
                    "a": ta.get(k),
                    "b": tb.get(k),
                    "source_a": "run",
                    "source_b": "run",
                }
            )
    return rows


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


_TIME_KEYS = ("t", "ts", "time", "wall", "timestamp", "t_wall")


def metric_series(rows: list[dict[str, Any]]) -> dict[str, list[tuple[float, float]]]:
    """metrics.jsonl rows -> {metric name: [(unix time, value)]}, label sets summed."""
    series: dict[str, list[tuple[float, float]]] = {}

    def add(t: float, name: str, v: Any) -> None:
        if isinstance(v, bool):
            return
        if isinstance(v, (int, float)):
            acc[name] = acc.get(name, 0.0) + float(v)
        elif isinstance(v, dict):
            if "value" in v and isinstance(v["value"], (int, float)):
                acc[name] = acc.get(name, 0.0) + float(v["value"])
            else:
                for sub in v.values():
                    add(t, name, sub)
        elif isinstance(v, list):
            for sub in v:
                add(t, name, sub)

    for row in rows:
        t = next((row[k] for k in _TIME_KEYS if isinstance(row.get(k), (int, float))), None)
        if t is None:
            continue
        data = row.get("values", row.get("metrics", row.get("samples")))
        if not isinstance(data, dict):
            if "error" in row:
                continue  # a failed scrape
            data = {k: v for k, v in row.items() if k not in _TIME_KEYS}
        if any(g in data for g in ("gauges", "counters", "labelled")):
            # workload.observe.server.parse_metrics shape; histograms and cache config are not series
            data = {
                **(data.get("gauges") or {}),
                **(data.get("counters") or {}),
                **(data.get("labelled") or {}),
            }
        acc: dict[str, float] = {}
        for k, v in data.items():
            add(float(t), str(k), v)
        for k, v in acc.items():
            series.setdefault(k, []).append((float(t), v))
    for v in series.values():
        v.sort()
    return series


def server_summary(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per /metrics series: counters (…_total) as the delta over the run, gauges as mean and max."""
    out = {}
    for name, pts in metric_series(rows).items():
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
