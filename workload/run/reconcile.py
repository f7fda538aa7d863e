"""The summary counts what was written: reconcile the in-memory aggregate with the JSONL files.

A run's aggregate is built from the records as they are written (and, in a
distributed run, from the deltas workers send with their stats reports). When
a run is stopped by a signal or loses a worker, the last deltas may never
arrive; the JSONL lines always do (they are flushed one by one). Before the
summary is written, the line counts are compared with the aggregate's; when
they differ, the aggregate is rebuilt from the files, so run.json, stats.json,
junit.xml and the report can never disagree with requests*.jsonl.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workload.measure import artifacts
from workload.measure.records import SESSION_OUTCOMES, RequestRecord, SessionRecord
from workload.measure.stats import Aggregate

if TYPE_CHECKING:  # imported where it is built, in rebuild
    from workload.measure.stats import Aggregate


def settle(out: Path, *, quiet_s: float = 0.4, max_wait_s: float = 3.0) -> None:
    """Wait (bounded) until no requests*/sessions*.jsonl file has grown for `quiet_s`:
    workers still writing their last cancelled records finish first."""
    deadline = time.monotonic() + max_wait_s
    last = _sizes(out)
    quiet_since = time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.1)
        now = _sizes(out)
        if now != last:
            last, quiet_since = now, time.monotonic()
        elif time.monotonic() - quiet_since >= quiet_s:
            return


def _sizes(out: Path) -> dict[str, int]:
    sizes = {}
    for pattern in ("requests*.jsonl", "sessions*.jsonl"):
        for p in Path(out).glob(pattern):
            with contextlib.suppress(OSError):
                sizes[p.name] = p.stat().st_size
    return sizes


def counts_agree(total: Aggregate, out: Path) -> bool:
    """Does the aggregate count exactly the request and session lines on disk?"""
    c = total.overall.counters
    sessions = sum(total.overall.sessions.get(o, 0) for o in _outcomes())
    return c["requests"] == artifacts.count_lines(out, "requests") and sessions == (
        artifacts.count_lines(out, "sessions")
    )


def rebuild(out: Path, slos: dict[str, dict[str, float]]) -> Aggregate:
    """A fresh Aggregate from every requests*/sessions*.jsonl line in `out`.

    Per-gap ITL samples are not written to the JSONL, so a rebuilt aggregate has no
    ITL histogram; every other figure is the same as the live one's.
    """
    agg = Aggregate(slos)
    rf, sf = set(RequestRecord.__dataclass_fields__), set(SessionRecord.__dataclass_fields__)
    # Streamed row by row (a long run's rows as dicts would take GiBs), in read_records' order.
    for row in _stream(out, "requests"):
        agg.add_request(RequestRecord(**{k: v for k, v in row.items() if k in rf}))
    for row in _stream(out, "sessions"):
        agg.add_session(SessionRecord(**{k: v for k, v in row.items() if k in sf}))
    return agg


def _stream(out: Path, kind: str) -> Iterator[dict[str, Any]]:
    for p in sorted(Path(out).glob(f"{kind}*.jsonl")):
        yield from artifacts.iter_jsonl(p, objects=True)


def reconcile(
    total: Aggregate, out: Path, slos: dict[str, dict[str, float]], *, wait: bool
) -> Aggregate:
    """`total` when it counts what was written, else the aggregate rebuilt from the files."""
    if wait:
        settle(out)
    if counts_agree(total, out):
        return total
    return rebuild(out, slos)


def _outcomes() -> tuple[str, ...]:
    return SESSION_OUTCOMES
