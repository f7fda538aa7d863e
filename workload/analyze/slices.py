"""Where a change happened: slices of a class by request kind, and the sentences naming them.

A slice is the requests of one class that share a kind: tool-calling or free text
(a (session, step) counts as tool-calling when either side's reply carried tool
calls), streamed or not, and a step range (1-3, 4-10, 11+). Slice rows say *where* a
gated metric moved, and, with the per-request spec-decode stats, sometimes why. They are
shown, not gated, except two rows of each request-kind slice (``SLICE_GATED`` of
``KIND_SLICES``: the per-token shift and the spec-decode acceptance length), which gate.
"""

from __future__ import annotations

import numpy as np

from workload.analyze.catalogue import VERDICT_WORSE, MetricDiff
from workload.analyze.table import Rows

STEP_RANGES = ((1, 3, "steps 1-3"), (4, 10, "steps 4-10"), (11, 10**9, "steps 11+"))
# Request-kind slices whose per-token shift and spec-decode acceptance gate: an upgrade can
# change how one kind is served (no drafts for structured outputs, the simulator's
# spec-off-for-structured scenario: TPOT +63 % on those steps) while the class gets faster.
KIND_SLICES = ("tool-calling steps", "free-text steps")
SLICE_GATED = ("tpot_shift", "spec_acceptance_length")


def gates_in_slice(scope: str, metric: str) -> bool:
    """Whether this slice row gates (request-kind slices, per-token shift and acceptance)."""
    return scope.split(":", 2)[-1] in KIND_SLICES and metric in SLICE_GATED


LABELS = {
    "ttft": "TTFT",
    "tpot": "TPOT",
    "e2e": "E2E",
    "itl": "per-chunk ITL",
}


def slice_filters(reqs_a: Rows, reqs_b: Rows) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """(label, keep A, keep B) per slice kind that splits these requests into two or more parts."""
    ka, kb = reqs_a.key(), reqs_b.key()
    tooly = np.union1d(ka[reqs_a.col("tool")], kb[reqs_b.col("tool")])
    tool = (np.isin(ka, tooly), np.isin(kb, tooly))
    stream = (reqs_a.col("stream"), reqs_b.col("stream"))
    step = (reqs_a.col("step"), reqs_b.col("step"))
    out = [
        ("tool-calling steps", *tool),
        ("free-text steps", ~tool[0], ~tool[1]),
        ("streamed requests", *stream),
        ("non-streamed requests", ~stream[0], ~stream[1]),
    ]
    for lo, hi, label in STEP_RANGES:
        out.append((label, (lo <= step[0]) & (step[0] <= hi), (lo <= step[1]) & (step[1] <= hi)))
    n = len(reqs_a) + len(reqs_b)
    return [(lab, x, y) for lab, x, y in out if 0 < int(x.sum()) + int(y.sum()) < n]


def metric_label(m: MetricDiff) -> str:
    """'TPOT p95', 'TTFT shift', 'session success' ..."""
    base, _, q = m.metric.rpartition("_")
    if base in LABELS:
        return f"{LABELS[base]} {q}"
    return m.metric.replace("_ratio", "").replace("_", " ")


def fmt_delta(m: MetricDiff) -> str:
    if m.change is None:
        return "?"
    return f"{100 * m.change:+.0f} {'%' if m.change_kind == 'relative' else 'pp'}"


def where_lines(metrics: list[MetricDiff], limit: int = 3) -> list[str]:
    """Sentences naming the slices where a gated regression moved most."""
    worse = [m for m in metrics if m.gated and m.verdict == VERDICT_WORSE]
    out: list[str] = []
    for g in worse:
        cls = g.scope.split(":", 1)[1] if g.scope.startswith("class:") else None
        if g.scope.startswith("slice:"):
            continue  # a gated slice row is named by the verdict itself
        else:
            cands = [
                m
                for m in metrics
                if m.scope.startswith("slice:")
                and m.metric == g.metric
                and (cls is None or m.scope.split(":")[1] == cls)
                and m.verdict == VERDICT_WORSE
                and m.change is not None
            ]
        cands.sort(key=lambda m: -abs(m.change or 0))
        for m in cands[:1]:
            _, c, lab = m.scope.split(":", 2)
            line = f"{c} {lab}: {metric_label(m)} {fmt_delta(m)}"
            if line not in out:
                out.append(line)
    return out[:limit]


def spec_lines(metrics: list[MetricDiff], limit: int = 2) -> list[str]:
    """Spec-decode acceptance falls that explain a slowdown ('drafts disabled?')."""
    out = []
    rows = [
        m
        for m in metrics
        if m.metric == "spec_acceptance_length"
        and (m.scope.startswith("slice:") or m.scope.startswith("class:") or m.scope == "overall")
        and m.verdict == VERDICT_WORSE
        and m.a is not None
        and m.b is not None
    ]
    rows.sort(key=lambda m: (m.b or 0) / (m.a or 1))
    for m in rows[:limit]:
        where = (
            "all requests" if m.scope == "overall" else m.scope.split(":", 1)[1].replace(":", " ")
        )
        hint = ": drafts disabled?" if (m.b or 0) <= 1.05 else ""
        out.append(f"spec-decode acceptance on {where} fell from {m.a:.2f} to {m.b:.2f}{hint}")
    return out
