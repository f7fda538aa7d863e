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


def step_verdict_text(s: Mapping[str, Any]) -> str:
    """A step's verdict as shown: pass, FAIL, inconclusive or stopped."""
    v = s.get("verdict") or ("pass" if s["slo_met"] else "fail")
    return {"pass": "pass", "fail": "FAIL"}.get(v, v)


def capacity_table(result: Mapping[str, Any]) -> str:
    """Steps in the order run (load, verdict, goodput, samples, SLO values), then the answer."""
    dim = result["dimension"]
    keys = sorted({k for s in result["steps"] for k in s.get("slo_values", {})})
    header = [
        "#",
        "users" if dim == "users" else "rate/s",
        "SLO",
        "goodput req/s",
        "samples",
        *keys,
    ]
    rows = [header]
    for i, s in enumerate(result["steps"], 1):
        samples = _num(s["samples"]) + (" (few)" if s.get("too_few_samples") else "")
        rows.append(
            [
                str(i),
                _num(s["load"]),
                step_verdict_text(s),
                _num(s.get("goodput")),
                samples,
                *(_num(s.get("slo_values", {}).get(k)) for k in keys),
            ]
        )
    widths = [max(len(r[c]) for r in rows) for c in range(len(header))]
    lines = ["  ".join(cell.rjust(w) for cell, w in zip(r, widths, strict=True)) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.append(answer_line(result))
    if any(s.get("too_few_samples") for s in result["steps"]):
        lines.append(
            "(few) = too few samples to tell a quantile SLO's pass from a fail at 95 %"
            " confidence; run steps longer"
        )
    return "\n".join(lines)


def answer_line(result: Mapping[str, Any]) -> str:
    """The search's answer in one line: the capacity, and what bounds it (or why none)."""
    dim = result["dimension"]
    unit = " users" if dim == "users" else ""
    label = _num if dim == "users" else _rate_label
    steps = result.get("steps") or []
    cap, first = result.get("capacity"), result.get("first_failing")
    top = (result.get("bounds") or {}).get("max")
    if result.get("stop_reason") == "stopped":
        passed = [
            s["load"] for s in steps if s.get("verdict", "pass" if s["slo_met"] else "") == "pass"
        ]
        so_far = (
            f"largest passing load so far: {label(max(passed))}{unit}"
            if passed
            else "no step passed"
        )
        return (f"capacity: not found: stopped by {result.get('stopped_by') or 'a signal'} during "
                f"step {len(steps)} ({so_far})")  # fmt: skip
    failing = next((s for s in steps if first is not None and s["load"] == first), None)
    unsure = failing is not None and failing.get("verdict") == "inconclusive"
    why = (f"{', '.join(failing.get('inconclusive') or [])} had no samples in the window: "
           "lengthen --step-duration") if unsure and failing else ""  # fmt: skip
    if cap is None:
        if unsure:
            return f"capacity: not found: the lowest load, {label(first)}{unit}, was inconclusive ({why})"
        return f"capacity: below the minimum ({label(first)} already fails its SLOs)"
    head = f"capacity: {label(cap)}{unit}"
    if first is not None:
        if unsure:
            return f"{head}; {label(first)}{unit} inconclusive ({why})"
        return f"{head}; first failing {label(first)}"
    if result.get("stop_reason") == "max_steps":
        return f"capacity: at least {label(cap)}{unit}: no failing load within --max-steps; raise --max-steps"
    top_label = label(top if top is not None else cap)
    return f"capacity: at least {label(cap)}{unit}: no limit found up to {top_label}{unit}: raise --max"
