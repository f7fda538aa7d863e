"""The summary counts what was written: reconcile the in-memory aggregate with the JSONL files.

A run's aggregate is built from the records as they are written (and, in a
distributed run, from the deltas workers send with their stats reports; each
worker's last one is awaited before the summary, `workload.locust.final_report`).
When a worker is lost, or its last report never came, its last deltas are
missing; the JSONL lines are not (they are flushed one by one). Before the
summary is written, the line counts are compared with the aggregate's; when the
files hold more, the aggregate is rebuilt from them, so run.json, stats.json,
junit.xml and the report never count less than requests*.jsonl.

The files hold no per-gap ITL (only each request's ITL summary), so a rebuilt
aggregate keeps the live aggregate's ITL histograms: complete when every
successful request's deltas arrived (the missing records were cancelled or failed),
else partial, and said so (`note`: stats.json's and run.json's ``reconcile``). Every
other figure of a rebuilt aggregate counts at least what the live one did, so the
live /metrics families never go backwards at the end (a counter reset to Prometheus).

When the files hold fewer lines than were counted (a worker on another machine writes
its files there, or a write failed), the live aggregate is kept: rebuilding would drop
measured requests.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workload.measure import artifacts
from workload.measure.histogram import LatencyHistogram
from workload.measure.records import SESSION_OUTCOMES, RequestRecord, SessionRecord
from workload.measure.stats import Aggregate, View

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
    counted = _counts(total)
    return all(counted[k] == artifacts.count_lines(out, k) for k in counted)


def rebuild(out: Path, slos: dict[str, dict[str, float]]) -> Aggregate:
    """A fresh Aggregate from every requests*/sessions*.jsonl line in `out`.

    Per-gap ITL samples are not written to the JSONL, so a rebuilt aggregate has no
    ITL histogram (`keep_itl` adds the live one's); every other figure is the same as an
    aggregate of the same records built live.
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
    return reconciled(total, out, slos, wait=wait).total


@dataclass
class Reconciled:
    """The aggregate the summary counts, and `note`: where its counts came from and why."""

    total: Aggregate
    note: dict[str, Any]


def reconciled(
    total: Aggregate,
    out: Path,
    slos: dict[str, dict[str, float]],
    *,
    wait: bool,
    unreported: Sequence[str] = (),
) -> Reconciled:
    """`total` when it counts what was written (or more), else the aggregate rebuilt from the
    files with `total`'s ITL histograms; `unreported`: workers whose final report never came."""
    if wait:
        settle(out)
    counted = _counts(total)
    written = {kind: artifacts.count_lines(out, kind) for kind in ("requests", "sessions")}
    note: dict[str, Any] = {
        "source": "memory",
        "counted": counted,
        "in_files": written,
        "itl": "complete",
        "why": None,
        "workers_without_final_report": list(unreported),
    }
    if written == counted:
        return Reconciled(total, note)
    if any(written[k] < counted[k] for k in counted):
        note["why"] = (
            "the JSONL files here hold fewer lines than the run counted (workers writing on "
            "other machines, or a failed write): the summary keeps the counted figures"
        )
        return Reconciled(total, note)
    agg = rebuild(out, slos)
    ok_live, ok_files = total.overall.counters["ok"], agg.overall.counters["ok"]
    keep_itl(agg, total)
    note.update(
        source="files",
        itl="complete" if ok_live == ok_files else "partial" if ok_live else "none",
        itl_ok_requests=ok_live,
        ok_requests=ok_files,
        why=(
            f"the JSONL files hold records the run's live counts missed "
            f"({_missed(counted, written)}): the summary is rebuilt from the files"
        ),
    )
    return Reconciled(agg, note)


def keep_itl(rebuilt: Aggregate, live: Aggregate) -> None:
    """Put `live`'s per-gap ITL histograms into `rebuilt`, view by view (the files hold none)."""
    views: list[tuple[View | None, View]] = [(rebuilt.overall, live.overall)]
    views += [(rebuilt.classes.get(k), v) for k, v in live.classes.items()]
    views += [(rebuilt.steps.get(k), v) for k, v in live.steps.items()]
    for mine, theirs in views:
        h = theirs.hists.get("itl")
        if mine is not None and h is not None:  # the files count every view the live one does
            copy = LatencyHistogram(h.max_us)
            copy.merge(h)
            mine.hists["itl"] = copy


def _counts(total: Aggregate) -> dict[str, int]:
    return {
        "requests": total.overall.counters["requests"],
        "sessions": sum(total.overall.sessions.get(o, 0) for o in _outcomes()),
    }


def _missed(counted: dict[str, int], written: dict[str, int]) -> str:
    return ", ".join(
        f"{written[k] - counted[k]} {k}"
        for k in ("requests", "sessions")
        if written[k] != counted[k]
    )


def _outcomes() -> tuple[str, ...]:
    return SESSION_OUTCOMES
