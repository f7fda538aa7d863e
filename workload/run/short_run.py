"""Why an SLO was not judged, and how long a run would have needed to judge it.

A 20 s run of `coding-agent` finishes no session (each takes minutes of tool pauses and
think time), so every session SLO ends "not judged (no samples)" and the console said
nothing more. `explain_unjudged` adds to each such SLO's message what was missing and,
from the sessions still running when the run stopped (their steps done in their time so
far), about how long one session takes and the --duration that would let some finish.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping
from typing import Any

from workload.measure.slo import SESSION_METRICS, SLOResult, parse_slo_key

OVERALL = "*"
# A session SLO is judged once sessions finish: give room for a few, not just the first.
DURATION_FACTOR = 3.0


def _is_session_metric(key: str) -> bool:
    metric = parse_slo_key(key)[0]
    return metric in SESSION_METRICS or metric.startswith("session_")


def _nice_duration(s: float) -> str:
    """Seconds rounded up to what one would type: 45s, 2m, 15m, 2h."""
    if s <= 60:
        return f"{max(10, math.ceil(s / 10) * 10)}s"
    if s <= 3600:
        return f"{math.ceil(s / 60)}m"
    return f"{math.ceil(s / 3600)}h"


def _run_length(s: float) -> str:
    return f"{s:.0f}s" if s < 120 else f"{s / 60:.0f}m"


def run_length_s(planned_s: float | None, elapsed_s: float) -> float:
    """How long the run ran: its wall time so far, never more than it was planned to run (a
    run stopped early by a signal, or started from the web UI with a shorter run time than
    the profile's, ran for less than the profile's duration)."""
    return min(planned_s, elapsed_s) if planned_s else elapsed_s


def session_length_s(sessions: Iterable[Mapping[str, Any]]) -> float | None:
    """The median estimated length of the sessions cut off by the end of the run: their time
    so far scaled by steps planned / steps done (None when none had done a step)."""
    est = []
    for s in sessions:
        vals = [s.get(k) for k in ("steps_done", "steps_planned", "duration_ms")]
        if s.get("outcome") != "cancelled" or not all(
            isinstance(x, (int, float)) and not isinstance(x, bool) for x in vals
        ):
            continue
        done, planned, ms = (float(x) for x in vals)  # type: ignore[arg-type]  # numbers, checked
        if done > 0 and ms > 0:
            est.append(ms / 1000.0 * planned / done)
    return statistics.median(est) if est else None


def unjudged_reason(
    result: SLOResult, sessions: list[Mapping[str, Any]], run_s: float | None
) -> str:
    """What the not-judged SLO lacked, and the run length that would give it samples."""
    cls = result.class_name
    mine = [s for s in sessions if cls == OVERALL or s.get("user_class") == cls]
    who = "" if cls == OVERALL else f"{cls} "
    took = f" in this {_run_length(run_s)} run" if run_s else ""
    if not _is_session_metric(result.metric):
        return (
            f"no {who}request finished{took}: give the run a longer --duration (or more "
            "users for this class)"
        )
    length = session_length_s(mine)
    if length is None:
        return (
            f"no {who}session finished{took}, nor had any done a step: give the run a "
            "longer --duration"
        )
    need = max(length * DURATION_FACTOR, (run_s or 0.0) * 2)
    return (
        f"no {who}session finished{took}; the sessions cut off by its end would take about "
        f"{_nice_duration(length)} each: judging this needs a run of --duration "
        f"{_nice_duration(need)} or more"
    )


def explain_unjudged(
    results: list[SLOResult], sessions: Iterable[Mapping[str, Any]], run_s: float | None
) -> None:
    """Append to each not-judged SLO's message why it had no samples (in place)."""
    rows = list(sessions)
    for r in results:
        if not r.judged:
            r.message += f": {unjudged_reason(r, rows, run_s)}"
