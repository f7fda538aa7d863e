"""Plain-text table of a capacity search (the ``CapacityResult.to_dict()`` shape)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def _num(x: Any) -> str:
    if x is None:
        return "-"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int) or float(x).is_integer():
        return str(int(x))
    return f"{x:.3g}" if abs(x) < 10 else f"{x:.1f}".rstrip("0").rstrip(".")


def _rate_label(x: Any) -> str:
    return "-" if x is None else f"{_num(x)}/s ({_num(x * 60)}/min)"


def capacity_table(result: Mapping[str, Any]) -> str:
    """Steps in the order run (load, verdict, goodput, samples, SLO values), then the answer."""
    dim = result["dimension"]
    keys = sorted({k for s in result["steps"] for k in s.get("slo_values", {})})
    header = ["#", "users" if dim == "users" else "rate/s", "SLO", "goodput", "samples", *keys]
    rows = [header]
    for i, s in enumerate(result["steps"], 1):
        samples = _num(s["samples"]) + (" (few)" if s.get("too_few_samples") else "")
        rows.append(
            [
                str(i),
                _num(s["load"]),
                "pass" if s["slo_met"] else "FAIL",
                _num(s.get("goodput")),
                samples,
                *(_num(s.get("slo_values", {}).get(k)) for k in keys),
            ]
        )
    widths = [max(len(r[c]) for r in rows) for c in range(len(header))]
    lines = ["  ".join(cell.rjust(w) for cell, w in zip(r, widths, strict=True)) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    label = _num if dim == "users" else _rate_label
    cap, first = result.get("capacity"), result.get("first_failing")
    if cap is None:
        lines.append(f"capacity: below the minimum ({label(first)} already fails its SLOs)")
    else:
        tail = f"; first failing {label(first)}" if first is not None else " (the maximum tried)"
        lines.append(f"capacity: {label(cap)} {'users' if dim == 'users' else ''}".rstrip() + tail)
    if any(s.get("too_few_samples") for s in result["steps"]):
        lines.append("(few) = fewer samples than the quantile SLOs need; run steps longer")
    return "\n".join(lines)
