import json
import random

import numpy as np
import pytest
from hdrh.histogram import HdrHistogram
from hypothesis import given, settings
from hypothesis import strategies as st

from workload.measure.records import RequestRecord, SessionRecord
from workload.measure.stats import (
    Aggregate,
    LatencyHistogram,
    _hdr_index,
    console_table,
    progress_line,
    session_goodput,
    step_rows,
    time_series,
    view_row,
)


def req(**kw) -> RequestRecord:
    d = dict(
        user_class="chat",
        session_id="s1",
        step=1,
        t_start=1_000.0,
        ttft_ms=120.0,
        e2e_ms=900.0,
        tpot_ms=12.5,
        prompt_tokens=1000,
        completion_tokens=64,
        itl_gaps_ms=[10.0, 12.0, 11.5],
    )
    d.update(kw)
    return RequestRecord(**d)


def sess(**kw) -> SessionRecord:
    d = dict(user_class="chat", session_id="s1", outcome="completed", duration_ms=5_000.0)
    d.update(kw)
    return SessionRecord(**d)


def random_records(seed: int, n: int = 300) -> tuple[list[RequestRecord], list[SessionRecord]]:
    rng = random.Random(seed)
    reqs, sessions = [], []
    for i in range(n):
        cls = rng.choice(["chat", "agent", "batch"])
        status = rng.choices(["ok", "error", "cancelled"], [8, 1, 1])[0]
        spec = None
        if rng.random() < 0.7:
            k = rng.choice([2, 3, 4])
            steps = rng.randint(1, 50)
            hist = [0] * (k + 1)
            for _ in range(steps):
                hist[rng.randint(0, k)] += 1
            acc = sum(i * c for i, c in enumerate(hist))
            spec = {
                "num_spec_steps": steps,
                "num_accepted_draft_tokens": acc,
                "num_draft_tokens": steps * k,
                "acceptance_histogram": hist,
                "mean_acceptance_length": 1 + acc / steps,
            }
        reqs.append(
            req(
                user_class=cls,
                session_id=f"s{i % 40}",
                step=rng.randint(1, 6),
                t_start=1_000.0 + rng.random() * 100,
                status=status,
                error_kind=rng.choice(["timeout", "tool_loop", "http_status"])
                if status == "error"
                else None,
                ttft_ms=rng.lognormvariate(5, 1),
                e2e_ms=rng.lognormvariate(8, 1),
                tpot_ms=rng.uniform(0.2, 40),
                itl_gaps_ms=[rng.expovariate(1 / 15) for _ in range(rng.randint(0, 30))],
                cached_tokens=rng.randint(0, 900) if rng.random() < 0.5 else None,
                tool_calls=[{"name": "x"}] * rng.randint(0, 2),
                spec_decode=spec,
            )
        )
    for i in range(40):
        sessions.append(
            sess(
                user_class=rng.choice(["chat", "agent", "batch"]),
                session_id=f"s{i}",
                outcome=rng.choice(["completed", "failed", "tool_loop_failure", "cancelled"]),
                duration_ms=rng.uniform(1000, 600_000),
            )
        )
    return reqs, sessions


def build(reqs, sessions) -> Aggregate:
    agg = Aggregate()
    for r in reqs:
        agg.add_request(r)
    for s in sessions:
        agg.add_session(s)
    return agg


def canonical(agg: Aggregate) -> dict:
    """to_dict with each encoded HDR blob replaced by its bucket counts (encoding may differ)."""
    d = agg.to_dict()

    def views():
        yield d["overall"]
        yield from d["classes"].values()
        for by_step in d["steps"].values():
            yield from by_step.values()

    for v in views():
        for h in v["hists"].values():
            h["hdr"] = LatencyHistogram.from_dict(h).bucket_counts() if h["hdr"] else None
    return d


# ---------------------------------------------------------------- histogram


def test_vectorised_index_matches_hdrh():
    h = HdrHistogram(1, 3_600_000_000, 3)
    rng = np.random.default_rng(0)
    values = np.concatenate(
        [np.arange(0, 5000), rng.integers(0, 3_600_000_000, 5000), 2 ** np.arange(0, 31)]
    ).astype(np.int64)
    expected = [h.get_counts_array_index(int(v)) for v in values]
    assert _hdr_index(h, values).tolist() == expected


def test_bulk_recording_and_percentiles_equal_hdrh_one_by_one():
    rng = np.random.default_rng(4)
    values_us = np.concatenate([rng.integers(0, 3000, 500), rng.lognormal(9, 2, 5000).astype(int)])
    values_us = values_us.clip(0, 3_600_000_000)
    ref = HdrHistogram(1, 3_600_000_000, 3)
    for v in values_us:
        ref.record_value(int(v))
    h = LatencyHistogram()
    h.record_many_ms((values_us / 1000).tolist())
    h.record_ms(1.0)
    ref.record_value(1000)
    h._flush()
    assert h._hdr.equals(ref)
    assert h._hdr.get_total_count() == ref.get_total_count()
    assert h._hdr.get_max_value() == ref.get_max_value()
    pcts = [0.1, 1, 25, 50, 90, 99, 99.9, 100]
    ours = h.percentiles_ms(pcts)
    theirs = ref.get_percentile_to_value_dict(pcts)
    for p in pcts:  # identical up to our cap at the exact extremes
        capped = min(max(theirs[p], int(values_us.min())), int(max(values_us.max(), 1000)))
        assert ours[p] == capped / 1000.0, p


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_percentiles_match_numpy_within_hdr_precision(seed):
    rng = np.random.default_rng(seed)
    values_ms = np.concatenate([rng.lognormal(4, 1.5, 20_000), rng.uniform(0.05, 2, 2_000)])
    h = LatencyHistogram()
    h.record_many_ms(values_ms.tolist())
    us = np.sort(np.rint(values_ms * 1000))
    for p in (1, 50, 90, 95, 99, 99.9):
        got = h.percentile_ms(p) * 1000
        k = max(1, int(p / 100 * len(us) + 0.5))  # HDR's rank rule
        exact = us[k - 1]
        assert abs(got - exact) <= max(1.0, exact * 1e-3), (p, got, exact)
        # and against numpy's nearest-rank percentile, allowing one rank of rounding
        ref = np.percentile(us, p, method="inverted_cdf")
        assert us[max(0, k - 2)] * (1 - 1e-3) - 1 <= got <= max(ref, exact) * (1 + 1e-3) + 1
    s = h.summary()
    assert s["count"] == len(us)
    assert s["mean"] == pytest.approx(us.mean() / 1000, rel=1e-12)
    assert s["max"] == us[-1] / 1000 and s["min"] == us[0] / 1000


def test_sub_millisecond_precision():
    h = LatencyHistogram()
    h.record_many_ms([0.25, 0.5, 0.75, 1.0])
    assert h.percentile_ms(50) == pytest.approx(0.5, abs=0.001)
    assert h.summary()["p99"] == pytest.approx(1.0, abs=0.001)


def test_clamps_values_beyond_range_and_ignores_nan():
    h = LatencyHistogram(max_us=10_000_000)
    h.record_many_ms([5.0, 20_000.0, float("nan"), -3.0])
    s = h.summary()
    assert s["count"] == 3 and s["clamped"] == 1 and s["max"] == 10_000.0 and s["min"] == 0.0


def test_empty_histogram_summary():
    s = LatencyHistogram().summary()
    assert s == {"count": 0, "mean": None, "min": None, "max": None} | {
        k: None for k in ("p50", "p90", "p95", "p99")
    }


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.floats(0, 3_600_000, allow_nan=False), max_size=200),
    st.lists(st.floats(0, 3_600_000, allow_nan=False), max_size=200),
)
def test_histogram_merge_equals_single(a, b):
    ha, hb, hab = LatencyHistogram(), LatencyHistogram(), LatencyHistogram()
    ha.record_many_ms(a)
    hb.record_many_ms(b)
    hab.record_many_ms(a + b)
    ha.merge(LatencyHistogram.from_dict(json.loads(json.dumps(hb.to_dict()))))
    assert ha.bucket_counts() == hab.bucket_counts()
    assert ha.summary() == hab.summary()


# ---------------------------------------------------------------- aggregate merge


@pytest.mark.parametrize("seed", [7, 8])
def test_merge_of_shards_equals_single_aggregate(seed):
    reqs, sessions = random_records(seed)
    single = build(reqs, sessions)
    # sessions are sharded whole (a session's requests never span workers)
    rng = random.Random(seed)
    worker = {f"s{i}": rng.randrange(4) for i in range(40)}
    shards = [([], []) for _ in range(4)]
    for r in reqs:
        shards[worker[r.session_id]][0].append(r)
    for s in sessions:
        shards[worker[s.session_id]][1].append(s)
    parts = [build(*sh) for sh in shards]
    # through JSON, as worker->master messages travel
    parts = [Aggregate.from_dict(json.loads(json.dumps(p.to_dict()))) for p in parts]
    merged = Aggregate()
    for p in parts:
        merged.merge(p)
    assert canonical(merged) == canonical(single)
    assert merged.summary() == single.summary()
    for metric in ("ttft", "itl", "e2e", "tpot"):
        for p in (50, 99, 99.9):
            assert merged.percentile_ms(metric, p, "chat") == single.percentile_ms(
                metric, p, "chat"
            )


def test_merge_is_associative_and_commutative():
    reqs, sessions = random_records(11, 150)
    a, b, c = (build(reqs[i::3], sessions[i::3]) for i in range(3))

    def copy(x):
        return Aggregate.from_dict(x.to_dict())

    left = copy(a)
    left.merge(b)
    left.merge(c)  # (a+b)+c
    bc = copy(b)
    bc.merge(c)
    right = copy(a)
    right.merge(bc)  # a+(b+c)
    swapped = copy(c)
    swapped.merge(a)
    swapped.merge(b)  # (c+a)+b
    assert canonical(left) == canonical(right) == canonical(swapped)


def test_to_dict_is_json_and_roundtrips():
    reqs, sessions = random_records(3, 80)
    agg = build(reqs, sessions)
    text = json.dumps(agg.to_dict())
    back = Aggregate.from_dict(json.loads(text))
    assert back.summary() == agg.summary()
    with pytest.raises(ValueError):
        Aggregate.from_dict({"schema": "other"})


def test_drain_hands_over_counts_and_keeps_session_state():
    agg = Aggregate({"chat": {"ttft_p95_ms": 100}})
    agg.add_request(req(ttft_ms=500.0))  # violates, session s1 still open
    delta = agg.drain()
    assert delta.summary()["overall"]["requests"] == 1
    assert agg.summary()["overall"]["requests"] == 0
    agg.add_request(req(ttft_ms=50.0))
    agg.add_session(sess())
    total = Aggregate()
    total.merge(delta)
    total.merge(agg)
    s = total.summary()["by_class"]["chat"]["sessions"]
    assert s["completed"] == 1 and s["good"] == 0


# ---------------------------------------------------------------- counters and views


def test_counters_errors_tokens_cached_ratio():
    agg = Aggregate()
    agg.add_request(req(prompt_tokens=1000, cached_tokens=600, completion_tokens=10))
    agg.add_request(req(prompt_tokens=500, cached_tokens=None, completion_tokens=5))
    agg.add_request(req(status="error", error_kind="timeout", ttft_ms=None, prompt_tokens=None))
    agg.add_request(req(status="error", error_kind="tool_loop", step=2))
    agg.add_request(req(status="cancelled", step=2))
    o = agg.summary()["overall"]
    assert (o["requests"], o["ok"], o["errors"], o["cancelled"]) == (5, 2, 2, 1)
    assert o["errors_by_kind"] == {"timeout": 1, "tool_loop": 1}
    assert o["tool_loop_failures"] == 1
    assert o["error_ratio"] == pytest.approx(2 / 4)
    assert o["cached_ratio"] == pytest.approx(600 / 1000)  # only requests that reported it
    assert o["ttft_ms"]["count"] == 2  # successful requests only
    assert o["itl_ms"]["count"] == 6  # one per gap
    steps = agg.summary()["by_step"]["chat"]
    assert steps["1"]["requests"] == 3 and steps["2"]["requests"] == 2
    assert "sessions" not in steps["1"]


def test_sessions_and_goodput():
    slos = {"chat": {"ttft_p95_ms": 200, "itl_p95_ms": 20, "session_success_ratio": 0.9}}
    agg = Aggregate(slos)
    agg.add_request(req(session_id="good", t_start=0.0 + 1, e2e_ms=60_000))
    agg.add_session(sess(session_id="good"))
    agg.add_request(req(session_id="slow", ttft_ms=300.0))
    agg.add_session(sess(session_id="slow"))
    agg.add_request(req(session_id="jitter", itl_gaps_ms=[10.0] * 10 + [90.0] * 2))
    agg.add_session(sess(session_id="jitter"))
    agg.add_session(sess(session_id="failed", outcome="failed"))
    agg.add_session(sess(session_id="gone", outcome="cancelled"))
    s = agg.summary(duration_s=120.0)["by_class"]["chat"]["sessions"]
    assert s["completed"] == 3 and s["failed"] == 1 and s["cancelled"] == 1
    assert s["finished"] == 4 and s["total"] == 5
    assert s["success_ratio"] == pytest.approx(3 / 4)
    assert s["good"] == 1
    assert s["goodput_per_min"] == pytest.approx(0.5)


def test_session_goodput_helper():
    slo = {"e2e_p99_ms": 1000, "e2e_p50_ms": 500}
    assert session_goodput(sess(), [req(e2e_ms=900.0)], slo)  # most lenient tail bound
    assert not session_goodput(sess(), [req(e2e_ms=1200.0)], slo)
    assert not session_goodput(sess(outcome="failed"), [req()], slo)
    assert not session_goodput(sess(), [req(status="error", error_kind="timeout")], slo)
    assert session_goodput(sess(), [req()], None)


def test_duration_and_throughput():
    agg = Aggregate()
    agg.add_request(req(t_start=100.0, e2e_ms=1000.0, completion_tokens=50))
    agg.add_request(req(t_start=105.0, e2e_ms=5000.0, completion_tokens=150))
    s = agg.summary()
    assert s["duration_s"] == pytest.approx(10.0)
    assert s["overall"]["throughput"]["output_tokens_per_s"] == pytest.approx(20.0)
    assert s["overall"]["throughput"]["requests_per_s"] == pytest.approx(0.2)


# ---------------------------------------------------------------- speculative decoding


def test_spec_decode_aggregation_math():
    agg = Aggregate()
    # request A: 10 steps, 15 accepted of 30 drafted, k=3 -> L = 2.5, weight 25
    agg.add_request(
        req(
            spec_decode={
                "num_spec_steps": 10,
                "num_accepted_draft_tokens": 15,
                "num_draft_tokens": 30,
                "acceptance_histogram": [2, 3, 3, 2],
                "mean_acceptance_length": 2.5,
            }
        )
    )
    # request B: 2 steps, 1 accepted of 4 drafted, k=2 -> L = 1.5, weight 3
    agg.add_request(
        req(
            step=2,
            spec_decode={
                "num_spec_steps": 2,
                "num_accepted_draft_tokens": 1,
                "num_draft_tokens": 4,
                "acceptance_histogram": [1, 1, 0],
            },
        )
    )
    agg.add_request(req(spec_decode=None))  # no stats
    agg.add_request(req(status="error", error_kind="timeout", spec_decode=None))  # not counted
    sd = agg.summary()["overall"]["spec_decode"]
    assert sd["requests_with_stats"] == 2 and sd["requests_without_stats"] == 1
    assert sd["share_without_stats"] == pytest.approx(1 / 3)
    assert sd["acceptance_length_request_mean"] == pytest.approx((2.5 + 1.5) / 2)
    assert sd["acceptance_length_token_weighted"] == pytest.approx((25 * 2.5 + 3 * 1.5) / 28)
    assert sd["acceptance_length_pooled"] == pytest.approx(1 + 16 / 12)
    assert sd["draft_acceptance_rate"] == pytest.approx(16 / 34)
    assert sd["acceptance_histogram"] == [3, 4, 3, 2]  # differing k padded
    assert sd["accepted_per_position"] == [9, 5, 2]
    step2 = agg.summary()["by_step"]["chat"]["2"]["spec_decode"]
    assert step2["acceptance_length_request_mean"] == pytest.approx(1.5)


def test_spec_decode_with_only_reported_mean():
    agg = Aggregate()
    agg.add_request(req(spec_decode={"mean_acceptance_length": 2.0}))
    sd = agg.summary()["overall"]["spec_decode"]
    assert sd["acceptance_length_request_mean"] == pytest.approx(2.0)
    assert sd["acceptance_length_token_weighted"] is None
    assert sd["draft_acceptance_rate"] is None


# ---------------------------------------------------------------- rendering, series


def test_console_table_lists_classes_and_overall():
    reqs, sessions = random_records(5, 60)
    text = console_table(build(reqs, sessions).summary())
    lines = text.splitlines()
    assert lines[0].startswith("class")
    for name in ("agent", "batch", "chat", "overall"):
        assert any(line.startswith(name) for line in lines)
    assert console_table(Aggregate().summary())  # empty run renders too


def test_time_series_buckets_by_end_time():
    rows = [
        req(t_start=100.0, e2e_ms=1000.0, ttft_ms=10.0, completion_tokens=50).to_json(),
        req(t_start=100.0, e2e_ms=6000.0, ttft_ms=30.0, completion_tokens=100).to_json(),
        req(t_start=101.0, e2e_ms=1000.0, user_class="bg", status="error").to_json(),
    ]
    ts = time_series(rows, bucket_s=5.0)
    assert ts["t0"] == 100.0
    assert ts["overall"]["requests"] == [2, 1]
    assert ts["overall"]["errors"] == [1, 0]
    assert ts["by_class"]["chat"]["ttft_p50_ms"] == [10.0, 30.0]
    assert ts["by_class"]["chat"]["output_tokens_per_s"] == [10.0, 20.0]
    assert ts["by_class"]["bg"]["ttft_p95_ms"] == [None, None]
    assert time_series([])["t0"] is None


def test_view_rows_and_progress_line():
    reqs, sessions = random_records(6, 60)
    agg = build(reqs, sessions)
    summary = agg.summary()
    row = view_row("All", summary["overall"])
    assert row["requests"] == summary["overall"]["requests"]
    assert isinstance(row["ttft_p95"], float) and row["sessions_ok"] != ""
    labels = [label for label, _ in step_rows(summary)]
    assert labels[0] == "agent #1" and all("#" in x for x in labels)
    step_row = view_row(*step_rows(summary)[0])
    assert step_row["sessions_ok"] == ""  # step views have no sessions
    empty = view_row("x", Aggregate().summary()["overall"])
    assert empty["ttft_p50"] == "" and empty["requests"] == 0
    line = progress_line(agg, elapsed_s=12.0, users=3)
    assert line.startswith("[    12s] users 3 | reqs 60") and "TTFT p95" in line
    assert progress_line(summary, elapsed_s=1.0, users=0).startswith("[     1s]")
