"""The load a run actually applied: open-loop start lateness and per-stage tables.

Computed at the end of a run from its artifacts (``sessions*.jsonl``, ``dropped*.jsonl``,
``requests*.jsonl``), so workers need not send anything extra:

- ``arrival_summary``: for open-loop sessions (``t_scheduled`` set), lateness = ``t_start -
  t_scheduled`` (p50/p99/max), sessions delayed past ``LATENESS_TOLERANCE_S``, sessions
  dropped at the cap (or still queued at the end), and a judgement (``lateness_verdict``,
  ``lateness_why``, ``fell_behind``) made only on real evidence (`judge_lateness`);
- ``stage_summary``: each stage's wall-clock window (``t0 + start_s``) with its requests,
  errors, TTFT/TPOT p95, goodput (requests meeting their class's SLOs, per second) and the
  open-loop sessions scheduled in it with their lateness.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from workload.measure import artifacts
from workload.measure.slo import request_meets_slo, request_thresholds
from workload.plan.arrivals import lateness_summary
from workload.plan.stages import LoadStages

if TYPE_CHECKING:  # types only
    from workload.run.spec import RunSpec

# A session that starts more than this after its schedule counts as delayed; a p99 above
# it means the generator fell behind (gevent wakes within ms on an idle machine; a busy
# one adds tens of ms, which must not cry wolf).
LATENESS_TOLERANCE_S = 0.25
# The generator "fell behind" only on evidence: more than LATE_SHARE of the sessions due
# never started, or (with at least MIN_JUDGED_SESSIONS due) more than LATE_SHARE started
# later than the tolerance, or lateness drifting up through the run (DRIFT_MIN_SESSIONS per
# third of the schedule, each third's median later than the one before, the last above half
# the tolerance). Fewer late starts are a note, not an alarm: one late start of ten is the
# p99 of ten samples, i.e. their maximum.
LATE_SHARE = 0.05
MIN_JUDGED_SESSIONS = 20
DRIFT_MIN_SESSIONS = 5
FELL_BEHIND, NOTE, ON_TIME = "fell behind", "note", "on time"


def _rows(out: Path, kind: str) -> list[dict[str, Any]]:
    return artifacts.read_records(out, kind)


def arrival_summary(
    sessions: Iterable[Mapping[str, Any]],
    dropped: Iterable[Mapping[str, Any]],
    tolerance_s: float = LATENESS_TOLERANCE_S,
) -> dict[str, Any] | None:
    """Start lateness of the open-loop sessions (None when the run had none)."""
    sched: list[float] = []
    actual: list[float | None] = []
    streams: dict[str, int] = {}
    for s in sessions:
        if s.get("t_scheduled") is None:
            continue
        sched.append(float(s["t_scheduled"]))
        actual.append(float(s.get("t_start") or s["t_scheduled"]))
        name = str(s.get("arrival_stream") or "run")
        streams[name] = streams.get(name, 0) + 1
    reasons: dict[str, int] = {}
    for d in dropped:
        sched.append(float(d["t_scheduled"]))
        actual.append(None)
        why = str(d.get("reason") or "dropped")
        reasons[why] = reasons.get(why, 0) + 1
    if not sched:
        return None
    late = lateness_summary(sched, actual, tolerance_s)
    out = late.to_dict()
    verdict, why = judge_lateness(sched, actual, tolerance_s)
    out["lateness_verdict"] = verdict
    out["lateness_why"] = why
    out["fell_behind"] = verdict == FELL_BEHIND
    out["sessions_by_stream"] = dict(sorted(streams.items()))
    out["dropped_by_reason"] = reasons
    first, last = min(sched), max(sched)
    out["first_scheduled"] = first
    out["last_scheduled"] = last
    return out


def _share(n: int, of: int) -> str:
    return f"{n} of {of} ({100 * n / of:.0f} %)"


def _median(v: list[float]) -> float:
    v = sorted(v)
    return v[(len(v) - 1) // 2]


def judge_lateness(
    sched: list[float], actual: list[float | None], tolerance_s: float = LATENESS_TOLERANCE_S
) -> tuple[str, str]:
    """(``"fell behind"`` | ``"note"`` | ``"on time"``, why) for an open loop's start times
    (``None``: dropped); the thresholds are the module's constants, stated in
    docs/load-models.md."""
    n = len(sched)
    pairs = sorted((s, a) for s, a in zip(sched, actual, strict=True) if a is not None)
    dropped = n - len(pairs)
    late = [max(0.0, a - s) for s, a in pairs]
    delayed = sum(1 for x in late if x > tolerance_s)
    tol = _ms(tolerance_s)
    if n and dropped / n > LATE_SHARE:
        return FELL_BEHIND, f"{_share(dropped, n)} sessions due were never started"
    if n >= MIN_JUDGED_SESSIONS and delayed / n > LATE_SHARE:
        return FELL_BEHIND, f"{_share(delayed, n)} sessions due started more than {tol} late"
    third = len(late) // 3
    if third >= DRIFT_MIN_SESSIONS:
        m = [_median(late[:third]), _median(late[third:-third]), _median(late[-third:])]
        if m[0] < m[1] < m[2] and m[2] > tolerance_s / 2:
            return FELL_BEHIND, (
                "start lateness kept growing through the run (median "
                + " -> ".join(_ms(x) for x in m)
                + " over the schedule's thirds)"
            )
    if not (dropped or delayed):
        return ON_TIME, ""
    parts = []
    if delayed:
        parts.append(f"{_share(delayed, n)} sessions due started more than {tol} late")
    if dropped:
        parts.append(f"{_share(dropped, n)} were never started")
    return NOTE, (
        " and ".join(parts) + f" (max {_ms(max(late) if late else None)}): too few to say the "
        f"generator fell behind (that takes over {100 * LATE_SHARE:.0f} % of at least "
        f"{MIN_JUDGED_SESSIONS} sessions due, or lateness growing through the run)"
    )


def _pctl(values: list[float], q: float) -> float | None:
    if not values:
        return None
    v = sorted(values)
    return v[max(1, math.ceil(q * len(v))) - 1]


def stage_summary(
    boundaries: list[dict[str, Any]],
    t0: float,
    requests: Iterable[Mapping[str, Any]],
    sessions: Iterable[Mapping[str, Any]],
    slos: Mapping[str, Mapping[str, Any]],
    tolerance_s: float = LATENESS_TOLERANCE_S,
) -> list[dict[str, Any]]:
    """One row per stage: its wall-clock window and what the run did in it."""
    limits = {c: request_thresholds(s) for c, s in slos.items()}
    rows = []
    for b in boundaries:
        rows.append(
            {
                **b,
                "t_start": t0 + b["start_s"],
                "t_end": t0 + b["end_s"],
                "_ttft": [],
                "_tpot": [],
                "requests": 0,
                "errors": 0,
                "good": 0,
                "_sched": [],
                "_actual": [],
            }
        )

    def stage_of(t: float) -> dict[str, Any] | None:
        for r in reversed(rows):
            if t >= r["t_start"]:
                return r if t < r["t_end"] else None
        return None

    for q in requests:
        if q.get("status") == "cancelled":
            continue
        r = stage_of(float(q.get("t_start") or 0.0))
        if r is None:
            continue
        r["requests"] += 1
        if q.get("status") != "ok":
            r["errors"] += 1
            continue
        if q.get("ttft_ms") is not None:
            r["_ttft"].append(float(q["ttft_ms"]))
        if q.get("tpot_ms") is not None:
            r["_tpot"].append(float(q["tpot_ms"]))
        lim = limits.get(str(q.get("user_class")))
        rec = SimpleNamespace(**{"itl_gaps_ms": [], **q})
        if request_meets_slo(rec, None, lim) if lim else True:
            r["good"] += 1
    for s in sessions:
        if s.get("t_scheduled") is None:
            continue
        r = stage_of(float(s["t_scheduled"]))
        if r is not None:
            r["_sched"].append(float(s["t_scheduled"]))
            r["_actual"].append(float(s.get("t_start") or s["t_scheduled"]))
    out = []
    for r in rows:
        dur = r["t_end"] - r["t_start"]
        late = (
            lateness_summary(r["_sched"], r["_actual"], tolerance_s).to_dict()
            if r["_sched"]
            else None
        )
        ok = r["requests"] - r["errors"]
        row = {k: v for k, v in r.items() if not k.startswith("_")}
        row.update(
            ttft_p95_ms=_pctl(r["_ttft"], 0.95),
            tpot_p95_ms=_pctl(r["_tpot"], 0.95),
            goodput_ratio=r["good"] / r["requests"] if r["requests"] else None,
            goodput_per_s=r["good"] / dur if dur > 0 else None,
            ok=ok,
            sessions_scheduled=len(r["_sched"]),
            lateness=late,
        )
        out.append(row)
    return out


def load_summary(
    spec: RunSpec, out: Path, slos: Mapping[str, Mapping[str, Any]], t0: float
) -> dict[str, Any]:
    """``{"arrivals": ..., "stages": ...}`` for run.json (either may be None)."""
    out = Path(out)
    sessions = _rows(out, "sessions")
    dropped = _rows(out, "dropped")
    arrivals = arrival_summary(sessions, dropped)
    if arrivals is not None:
        arrivals["t0"] = t0
    stages = None
    if spec.profile.run.stages:
        ls = LoadStages(list(spec.profile.run.stages))
        stages = {
            "dimension": ls.dimension,
            "t0": t0,
            "stages": stage_summary(ls.boundaries(), t0, _rows(out, "requests"), sessions, slos),
        }
    return {"arrivals": arrivals, "stages": stages}


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1000:.0f}ms" if x < 10 else f"{x:.1f}s"


def arrival_lines(a: Mapping[str, Any] | None) -> list[str]:
    """Console lines for the open-loop summary; a LOUD warning when the generator fell behind."""
    if not a:
        return []
    lines = [
        f"open loop: {a['scheduled']} sessions due, {a['started']} started, "
        f"{a['dropped']} dropped, {a['delayed']} delayed > {_ms(a['tolerance_s'])}; "
        f"start lateness p50 {_ms(a['p50_s'])} p99 {_ms(a['p99_s'])} max {_ms(a['max_s'])}"
    ]
    why = a.get("lateness_why") or (
        f"lateness p99 {_ms(a['p99_s'])}, {a['dropped']} dropped"  # a run.json from before
    )
    if a.get("fell_behind"):
        lines.append(
            f"!!! WARNING: THE LOAD GENERATOR FELL BEHIND ITS ARRIVAL SCHEDULE ({why}): the "
            "server saw less load than asked; raise --max-in-flight, add --workers, or lower "
            "the rate !!!"
        )
    elif a.get("lateness_verdict") == NOTE:
        lines.append(f"note: {why}; if a longer run shows more, add --workers or lower the rate")
    return lines


def stage_lines(st: Mapping[str, Any] | None) -> list[str]:
    """A console table of the stages: level, requests, TTFT/TPOT p95, goodput, lateness."""
    if not st:
        return []
    dim = st["dimension"]
    head = ["stage", "window", "users" if dim == "users" else "rate/s", "reqs", "err",
            "TTFT p95", "TPOT p95", "good/s", "late p99"]  # fmt: skip
    table = [head]
    for r in st["stages"]:
        late = r.get("lateness") or {}
        table.append(
            [
                str(r["index"]),
                f"{r['start_s']:g}-{r['end_s']:g}s",
                f"{r.get(dim):g}" if r.get(dim) is not None else "-",
                str(r["requests"]),
                str(r["errors"]),
                "-" if r["ttft_p95_ms"] is None else f"{r['ttft_p95_ms']:.0f}",
                "-" if r["tpot_p95_ms"] is None else f"{r['tpot_p95_ms']:.1f}",
                "-" if r["goodput_per_s"] is None else f"{r['goodput_per_s']:.2f}",
                _ms(late.get("p99_s")) if late else "-",
            ]
        )
    w = [max(len(row[i]) for row in table) for i in range(len(head))]
    lines = ["  ".join(c.rjust(w[i]) for i, c in enumerate(row)) for row in table]
    lines.insert(1, "  ".join("-" * x for x in w))
    return ["stages (latencies in ms):", *lines]
