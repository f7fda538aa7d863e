"""The summary counts what was written; a rebuild keeps the live ITL and never counts less."""

from __future__ import annotations

import json
from pathlib import Path

from tests.stats_builders import build, random_records, req, sess
from workload.measure import artifacts
from workload.measure.live_metrics import LiveCounts, Snapshot, families
from workload.measure.records import RequestRecord, SessionRecord
from workload.measure.stats import Aggregate
from workload.run import finalize, reconcile


def write(out: Path, reqs: list[RequestRecord], sessions: list[SessionRecord]) -> None:
    """Two workers' files, the way RunWriter writes them (no per-gap ITL in the lines)."""
    for w in ("0", "1"):
        writer = artifacts.RunWriter(out, worker=w)
        for r in reqs[int(w) :: 2]:
            writer.requests.write(r.to_json())
        for s in sessions[int(w) :: 2]:
            writer.sessions.write(s.to_json())
        writer.close()


def exposed(agg: Aggregate) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every counter and histogram sample the live /metrics endpoint serves for `agg`."""
    snap = Snapshot(total=agg, live=LiveCounts(), info={"run_id": "r"}, model="m")
    out = {}
    for family in families(snap):
        if family.type in ("counter", "histogram"):
            for s in family.samples:
                out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_counts_that_agree_keep_the_live_aggregate(tmp_path: Path) -> None:
    reqs, sessions = random_records(1, n=60)
    write(tmp_path, reqs, sessions)
    live = build(reqs, sessions)
    rec = reconcile.reconciled(live, tmp_path, {}, wait=False)
    assert rec.total is live
    assert rec.note["source"] == "memory" and rec.note["itl"] == "complete"
    assert rec.note["why"] is None
    assert rec.note["counted"] == rec.note["in_files"] == {"requests": 60, "sessions": 40}


def test_a_lost_last_delta_of_cancelled_records_rebuilds_with_the_whole_itl(
    tmp_path: Path,
) -> None:
    # The last report (the requests cancelled at the stop, their sessions) never came.
    done = [req(session_id=f"s{i}", step=1 + i % 3, t_start=1000.0 + i) for i in range(12)]
    cut = [
        req(session_id=f"c{i}", status="cancelled", itl_gaps_ms=[], t_start=1020.0)
        for i in range(3)
    ]
    cut_sessions = [sess(session_id=f"c{i}", outcome="cancelled") for i in range(3)]
    write(tmp_path, done + cut, cut_sessions)
    live = build(done, [])
    rec = reconcile.reconciled(live, tmp_path, {}, wait=False, unreported=["w1"])
    agg = rec.total
    assert agg is not live
    assert agg.overall.counters["requests"] == 15 and agg.overall.counters["cancelled"] == 3
    assert rec.note["source"] == "files" and rec.note["itl"] == "complete"
    assert rec.note["workers_without_final_report"] == ["w1"]
    assert "3 requests, 3 sessions" in rec.note["why"]
    # ITL per gap, in every view, as the live aggregate counted it
    assert agg.overall.hists["itl"].to_dict() == live.overall.hists["itl"].to_dict()
    for key, view in live.steps.items():
        assert agg.steps[key].hists["itl"].to_dict() == view.hists["itl"].to_dict()
    assert agg.classes["chat"].hists["itl"].count == 12 * 3
    # what stats.json holds loads back with its ITL
    again = Aggregate.from_dict(json.loads(json.dumps(agg.to_dict())))
    assert again.percentile_ms("itl", 50) == live.percentile_ms("itl", 50)


def test_missing_successful_requests_make_the_itl_partial_and_say_how_much(
    tmp_path: Path,
) -> None:
    reqs, sessions = random_records(2, n=200)
    write(tmp_path, reqs, sessions)
    live = build(reqs[:150], sessions[:30])
    rec = reconcile.reconciled(live, tmp_path, {}, wait=False)
    ok_live = live.overall.counters["ok"]
    assert rec.note["source"] == "files" and rec.note["itl"] == "partial"
    assert rec.note["itl_ok_requests"] == ok_live < rec.note["ok_requests"]
    assert rec.note["ok_requests"] == rec.total.overall.counters["ok"]
    assert rec.total.overall.hists["itl"].count == live.overall.hists["itl"].count
    # every other figure is the files' (as one process counting every record would)
    full = build(reqs, sessions).to_dict()
    got = rec.total.to_dict()
    for key in ("overall", "classes"):
        views = {"overall": got["overall"]} if key == "overall" else got["classes"]
        wants = {"overall": full["overall"]} if key == "overall" else full["classes"]
        for name, view in views.items():
            assert view["counters"] == wants[name]["counters"]
            assert view["hists"]["ttft"] == wants[name]["hists"]["ttft"]


def test_no_live_successes_say_the_itl_is_unavailable(tmp_path: Path) -> None:
    write(tmp_path, [req(session_id=f"s{i}") for i in range(4)], [])
    rec = reconcile.reconciled(Aggregate(), tmp_path, {}, wait=False)
    assert rec.note["itl"] == "none" and rec.note["itl_ok_requests"] == 0
    assert "itl" not in rec.total.overall.hists


def test_files_with_fewer_lines_than_counted_keep_the_live_counts(tmp_path: Path) -> None:
    # e.g. workers on other machines wrote their files there: a rebuild would count nothing
    reqs, sessions = random_records(3, n=40)
    write(tmp_path, reqs[:10], sessions[:5])
    live = build(reqs, sessions)
    rec = reconcile.reconciled(live, tmp_path, {}, wait=False)
    assert rec.total is live
    assert rec.note["source"] == "memory" and "fewer lines" in rec.note["why"]


def test_the_final_exposition_never_counts_less_than_a_mid_run_one(tmp_path: Path) -> None:
    reqs, sessions = random_records(4, n=300)
    write(tmp_path, reqs, sessions)
    mid = build(reqs[:100], sessions[:10])  # a scrape mid-run
    last_live = build(reqs[:250], sessions[:30])  # the live counts at the end: deltas lost
    final = reconcile.reconciled(last_live, tmp_path, {}, wait=False).total
    assert final is not last_live
    before, after = exposed(mid), exposed(final)
    itl = [k for k in before if k[0].startswith("agentload_itl_seconds")]
    assert itl and all(after[k] > 0 for k in itl if k[0].endswith("_count"))
    went_back = {k: (v, after.get(k, 0.0)) for k, v in before.items() if after.get(k, 0.0) < v}
    assert not went_back
    assert exposed(last_live).keys() <= after.keys()


def test_the_console_line_says_how_much_itl_a_rebuild_kept(tmp_path: Path) -> None:
    reqs, sessions = random_records(5, n=50)
    write(tmp_path, reqs, sessions)
    note = reconcile.reconciled(build(reqs[:30], sessions), tmp_path, {}, wait=False).note
    line = finalize._reconcile_line(note)
    assert line.startswith(
        "the JSONL files hold records the run's live counts missed (20 requests)"
    )
    assert f"ITL partial ({note['itl_ok_requests']} of {note['ok_requests']} successful" in line
