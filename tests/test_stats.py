import json
import random

import pytest

from tests.stats_builders import build, random_records, req, sess
from workload.measure.histogram import LatencyHistogram
from workload.measure.stats import Aggregate, session_goodput


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


def test_tool_calls_planned_and_returned_are_kept_apart():
    """Scripted tool steps count as planned tool calls; server-returned calls stay `tool_calls`."""
    call = {"index": 0, "id": "c1", "name": "read_file", "arguments": "{}", "arguments_valid": True}
    agg = Aggregate()
    agg.add_request(req(step=1))
    agg.add_request(req(step=2, planned_tool="read_file"))  # scripted: no call returned
    agg.add_request(req(step=3, planned_tool="grep", tool_calls=[call]))  # actual history
    agg.add_request(req(step=4, planned_tool="grep", status="error", error_kind="timeout"))
    o = agg.summary()["overall"]
    assert o["tool_calls_planned"] == 2  # the failed attempt made no call
    assert o["tool_calls_returned"] == o["tool_calls"] == 1
    assert agg.summary()["by_step"]["chat"]["2"]["tool_calls_planned"] == 1
    # Old stats.json (no tool_calls_planned counter) still loads; the count reads 0.
    d = agg.to_dict()
    del d["overall"]["counters"]["tool_calls_planned"]
    assert Aggregate.from_dict(d).summary()["overall"]["tool_calls_planned"] == 0
