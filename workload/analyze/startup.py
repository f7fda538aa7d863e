"""Start-up metrics of a comparison: time to ready and start-up memory of each side's server.

When the canary starts the servers itself, each side's run.json holds a
`startup` block (workload.orchestrate.canary.servers): time to ready, the maximum resident
memory of the server's process tree until ready, GPU memory (NVML) when known.
Those become rows of the comparison, judged by their point values: there is
one start per side (or one per block with `--restart-per-block`, then the
median per side), so no interval. A row is **worse** when B/A − 1 reaches the
threshold *and* the absolute difference reaches a floor (a 0.3 s server that
takes 0.4 s is not a regression anyone ships on), **better** symmetrically.
They gate like the other metrics; `--threshold time_to_ready=off` removes one.

`add_startup(comparison, flags)` appends the rows and the start-up facts for
the server diff to a finished comparison and updates its verdict.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from typing import Any

from workload.analyze.catalogue import (
    VERDICT_BETTER,
    VERDICT_MIXED,
    VERDICT_NODATA,
    VERDICT_SAME,
    VERDICT_WORSE,
    MetricDiff,
)
from workload.analyze.comparison import Comparison
from workload.analyze.rundata import RunData
from workload.measure.artifacts import read_json

# metric -> (field of the startup block, unit)
STARTUP_METRICS: dict[str, tuple[str, str]] = {
    "time_to_ready": ("time_to_ready_s", "s"),
    "startup_rss": ("rss_mib", "MiB"),
    "startup_gpu_memory": ("gpu_memory_mib", "MiB"),
}
# Percent: B/A − 1 at or above this is worse.
STARTUP_THRESHOLDS: dict[str, float] = {
    "time_to_ready": 20.0,
    "startup_rss": 10.0,
    "startup_gpu_memory": 10.0,
}
# Absolute difference (in the metric's unit) below which a change is not judged worse/better.
STARTUP_FLOORS: dict[str, float] = {
    "time_to_ready": 2.0,
    "startup_rss": 64.0,
    "startup_gpu_memory": 256.0,
}


def split_startup_flags(
    flags: Mapping[str, float | None] | None,
) -> tuple[dict[str, float | None], dict[str, float | None]]:
    """Threshold flags -> (those for compare_runs, those for start-up metrics)."""
    rest: dict[str, float | None] = {}
    mine: dict[str, float | None] = {}
    for k, v in (flags or {}).items():
        base = k.split(".")[-1].removesuffix("_pct")
        (mine if base in STARTUP_METRICS else rest)[k] = v
    return rest, mine


def startup_records(run: RunData) -> list[dict[str, Any]]:
    """The start-up records of a run directory (one per server start; blocks included)."""
    runs = [run.run]
    for block in run.run.get("blocks") or ():
        try:
            runs.append(read_json(run.path / block / "run.json"))
        except (OSError, ValueError):
            continue
    out: dict[str, dict[str, Any]] = {}
    for r in runs:
        rec = r.get("startup") if isinstance(r, dict) else None
        if isinstance(rec, dict) and rec.get("ready"):
            out.setdefault(str(rec.get("start_id")), rec)
    return list(out.values())


def _values(recs: list[dict[str, Any]], key: str) -> list[float]:
    return [float(r[key]) for r in recs if isinstance(r.get(key), (int, float))]


def _judge(m: MetricDiff, floor: float) -> None:
    if m.a is None or m.b is None or m.a <= 0:
        m.verdict = VERDICT_NODATA
        return
    m.change = m.b / m.a - 1.0
    diff = m.b - m.a
    if m.threshold is None:
        m.verdict = VERDICT_SAME
    elif m.change >= m.threshold and diff >= floor:
        m.verdict = VERDICT_WORSE
    elif m.change <= -m.threshold and -diff >= floor:
        m.verdict = VERDICT_BETTER
    else:
        m.verdict = VERDICT_SAME


def startup_rows(
    a: RunData, b: RunData, flags: Mapping[str, float | None] | None = None
) -> list[MetricDiff]:
    """One overall row per start-up metric both sides recorded (empty without startup blocks)."""
    ra, rb = startup_records(a), startup_records(b)
    if not ra and not rb:
        return []
    th: dict[str, float | None] = dict(STARTUP_THRESHOLDS)
    for k, v in (flags or {}).items():
        name = k.split(".")[-1].removesuffix("_pct")
        th[name] = None if v is None else float(str(v).rstrip("%").strip())
    rows = []
    for name, (key, unit) in STARTUP_METRICS.items():
        va, vb = _values(ra, key), _values(rb, key)
        if not va and not vb:
            continue
        t = th.get(name)
        m = MetricDiff(
            scope="overall", metric=name, unit=unit, change_kind="relative",
            a=statistics.median(va) if va else None, b=statistics.median(vb) if vb else None,
            n_a=len(va), n_b=len(vb), threshold=None if t is None else t / 100.0,
            higher_is_worse=True,
        )  # fmt: skip
        _judge(m, STARTUP_FLOORS[name])
        m.gated = m.threshold is not None and m.verdict != VERDICT_NODATA
        m.note = None if m.gated else "start-up: no threshold or no value on one side"
        rows.append(m)
    return rows


def _summary(recs: list[dict[str, Any]], key: str) -> Any:
    """One value for the server diff: the value of a single start, else the median / the set."""
    vals = [r.get(key) for r in recs]
    if key == "gpu_memory_mib":
        vals = [
            v if v is not None else r.get("gpu_memory_note")
            for v, r in zip(vals, recs, strict=True)
        ]
    vals = [" ".join(map(str, v)) if isinstance(v, list) else v for v in vals]
    if not vals:
        return None
    if len(vals) == 1:
        return vals[0]
    nums = [v for v in vals if isinstance(v, (int, float))]
    if len(nums) == len(vals):
        return f"{statistics.median(nums):g} (median of {len(nums)})"
    return ", ".join(sorted({str(v) for v in vals}))


def startup_diff(a: RunData, b: RunData) -> list[dict[str, Any]]:
    """Rows for the server diff ({field, a, b, source_a, source_b}): the start-up facts."""
    ra, rb = startup_records(a), startup_records(b)
    if not ra and not rb:
        return []
    rows = []
    for key in ("time_to_ready_s", "rss_mib", "gpu_memory_mib", "ready_probe", "cmd_template"):
        va, vb = _summary(ra, key), _summary(rb, key)
        if va != vb:
            rows.append(
                {"field": f"startup.{key}", "a": va, "b": vb,
                 "source_a": "canary", "source_b": "canary"}
            )  # fmt: skip
    return rows


def add_startup(cmp: Comparison, flags: Mapping[str, float | None] | None = None) -> None:
    """Append start-up rows and server-diff facts to a comparison; a worse one makes it worse."""
    rows = startup_rows(cmp.run_a, cmp.run_b, flags)
    cmp.metrics.extend(rows)
    cmp.fingerprint_diff.extend(startup_diff(cmp.run_a, cmp.run_b))
    for m in rows:
        if m.threshold is not None:
            cmp.thresholds[m.metric] = 100.0 * m.threshold
    gated = [m for m in rows if m.gated]
    if any(m.verdict == VERDICT_WORSE for m in gated):
        # worse start-up on top of better traffic metrics is a trade-off: mixed (exit 3 too)
        better = any(m.gated and m.verdict == VERDICT_BETTER for m in cmp.metrics)
        cmp.verdict = VERDICT_MIXED if better else VERDICT_WORSE
    elif cmp.verdict == VERDICT_SAME and any(m.verdict == VERDICT_BETTER for m in gated):
        cmp.verdict = VERDICT_BETTER
    if gated:
        cmp.gating += (
            " Start-up (time_to_ready, startup_rss, startup_gpu_memory) gates on the measured "
            "values: worse at the threshold and an absolute floor."
        )
