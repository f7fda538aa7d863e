"""Goodput: request and session shares and rates that met every SLO, exact under merge."""

from __future__ import annotations

import json

import pytest

from tests.stats_builders import req, sess
from workload.measure.slo import (
    evaluate_slos,
    parse_slo_key,
    session_meets_slo,
    session_thresholds,
)
from workload.measure.stats import Aggregate

SLOS = {"chat": {"ttft_p95_ms": 200.0, "task_time_max_ms": 6_000.0, "worst_ttft_p95_ms": 250.0}}


def _fill(agg: Aggregate, n: int, offset: int = 0) -> None:
    for i in range(offset, offset + n):
        sid = f"s{i}"
        ttft = 100.0 if i % 4 else 300.0  # every 4th session has one slow step
        agg.add_request(req(session_id=sid, step=1, ttft_ms=90.0, t_start=1_000.0 + i))
        agg.add_request(req(session_id=sid, step=2, ttft_ms=ttft, t_start=1_001.0 + i))
        if i % 5 == 0:
            agg.add_request(req(session_id=sid, step=3, status="cancelled", ttft_ms=None))
        duration = 7_000.0 if i % 10 == 1 else 5_000.0  # every 10th (from 1) is too long
        agg.add_session(sess(session_id=sid, duration_ms=duration, worst_ttft_ms=max(90.0, ttft)))


def test_request_goodput_ratio_and_rate():
    agg = Aggregate(SLOS)
    _fill(agg, 20)
    s = agg.summary(duration_s=10.0)
    chat = s["by_class"]["chat"]
    # 40 ok requests, 5 of them (one per 4th session) over the 200 ms TTFT limit; 4 cancelled
    assert chat["good_requests"] == 35
    assert chat["request_goodput_ratio"] == pytest.approx(35 / 40)
    assert chat["request_goodput_per_s"] == pytest.approx(3.5)
    assert s["by_step"]["chat"]["2"]["request_goodput_ratio"] == pytest.approx(15 / 20)
    assert s["by_step"]["chat"]["1"]["request_goodput_ratio"] == 1.0


def test_session_goodput_uses_task_time_and_worst_ttft():
    agg = Aggregate(SLOS)
    _fill(agg, 20)
    sessions = agg.summary(duration_s=60.0)["overall"]["sessions"]
    slow_ttft = {i for i in range(20) if i % 4 == 0}
    too_long = {i for i in range(20) if i % 10 == 1}
    cut_short = {i for i in range(20) if i % 5 == 0}  # a cancelled request is not good
    good = 20 - len(slow_ttft | too_long | cut_short)
    assert sessions["good"] == good
    assert sessions["goodput_ratio"] == pytest.approx(good / 20)
    assert sessions["goodput_per_min"] == pytest.approx(good)


def test_goodput_merges_exactly():
    one = Aggregate(SLOS)
    _fill(one, 40)
    a, b = Aggregate(SLOS), Aggregate(SLOS)
    _fill(a, 17)
    _fill(b, 23, offset=17)
    merged = Aggregate.from_dict(json.loads(json.dumps(a.to_dict())))
    merged.merge(Aggregate.from_dict(json.loads(json.dumps(b.to_dict()))))
    assert merged.to_dict() == one.to_dict()
    assert merged.summary(10.0) == one.summary(10.0)


def test_session_thresholds_take_the_most_lenient_bound():
    limits = session_thresholds(
        {"task_time_p95_ms": 5_000, "session_duration_max_ms": 8_000, "worst_ttft_p99_ms": 300,
         "ttft_p95_ms": 1, "task_time_mean_ms": 10}
    )  # fmt: skip
    assert limits == {"task_time": 8_000, "worst_ttft": 300}
    assert session_meets_slo(sess(duration_ms=7_999.0, worst_ttft_ms=300.0), limits)
    assert not session_meets_slo(sess(duration_ms=8_001.0), limits)
    assert not session_meets_slo(sess(worst_ttft_ms=301.0), limits)
    assert session_meets_slo(sess(worst_ttft_ms=None), {"worst_ttft": 1.0})


def test_goodput_keys_are_slos():
    agg = Aggregate(SLOS)
    _fill(agg, 20)
    slos = {
        "chat": {
            "request_goodput_ratio": 0.9,
            "session_goodput_ratio": 0.5,
            "request_goodput_per_s": 1.0,
            "task_time_p95_ms": 7_500.0,
            "worst_ttft_max_ms": 250.0,
        }
    }
    got = {r.metric: r for r in evaluate_slos(agg, slos)}
    assert not got["request_goodput_ratio"].passed  # 0.875
    assert got["session_goodput_ratio"].passed  # 0.6
    assert got["request_goodput_per_s"].passed
    assert got["task_time_p95_ms"].observed == pytest.approx(7_000.0, rel=1e-3)
    assert not got["worst_ttft_max_ms"].passed  # 300 ms
    assert parse_slo_key("session_goodput_ratio")[2] == ">="


@pytest.mark.parametrize(
    ("key", "hint"),
    [
        ("goodput_ratio", "request_goodput_ratio or session_goodput_ratio"),
        ("ttft_p59_msx", "ttft_p50_ms"),
        ("task_time_p95", "task_time_p95_ms"),
    ],
)
def test_unknown_key_says_did_you_mean(key, hint):
    with pytest.raises(ValueError, match="did you mean") as e:
        parse_slo_key(key)
    assert hint in str(e.value)


def _judge_rows(run_dir, limit_ms: float) -> None:
    """Give a synthetic run's rows their goodput verdict, as the runtime records it."""
    import orjson

    from workload.measure.artifacts import iter_jsonl

    good: dict[str, bool] = {}
    rows = list(iter_jsonl(run_dir / "requests.jsonl"))
    for r in rows:
        r["slo_met"] = r["status"] == "ok" and (r.get("ttft_ms") or 0.0) <= limit_ms
        good[r["session_id"]] = good.get(r["session_id"], True) and r["slo_met"]
    (run_dir / "requests.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    sessions = list(iter_jsonl(run_dir / "sessions.jsonl"))
    for s in sessions:
        s["slo_met"] = s["outcome"] == "completed" and good.get(s["session_id"], True)
    (run_dir / "sessions.jsonl").write_bytes(b"".join(orjson.dumps(s) + b"\n" for s in sessions))


def test_goodput_is_a_compare_metric(tmp_path):
    from tests.builders import ClassSpec, write_run
    from workload.analyze.catalogue import METRICS, VERDICT_NODATA, VERDICT_WORSE
    from workload.analyze.verdict import compare_runs

    assert {"request_goodput_ratio", "session_goodput_ratio"} <= set(METRICS)
    classes = {"chat": ClassSpec(sessions=150, steps=4)}
    a = write_run(tmp_path / "a", classes=classes, noise_seed=1)
    b = write_run(tmp_path / "b", run_id="run-b", classes=classes, noise_seed=2, ttft_scale=2.0)
    old = compare_runs(a, b)  # rows from before goodput carry no verdict
    row = next(
        m for m in old.metrics if m.scope == "overall" and m.metric == "request_goodput_ratio"
    )
    assert row.verdict == VERDICT_NODATA
    limit = 1.5 * ClassSpec().ttft_ms
    _judge_rows(a, limit)
    _judge_rows(b, limit)
    cmp = compare_runs(a, b, {"request_goodput_ratio": 2, "session_goodput_ratio": 2})
    for metric in ("request_goodput_ratio", "session_goodput_ratio"):
        row = next(m for m in cmp.metrics if m.scope == "overall" and m.metric == metric)
        assert row.b < row.a and row.verdict == VERDICT_WORSE, metric
    assert cmp.exit_code == 3
