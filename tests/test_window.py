"""Per-class window metrics for the web UI's charts (workload.measure.window)."""

from __future__ import annotations

import time

from tests.stats_builders import build, random_records, req, sess
from workload.measure.stats import Aggregate
from workload.measure.window import AgentHistory


def test_each_point_holds_only_its_window():
    agg = Aggregate()
    h = AgentHistory()
    assert h.sample(agg, 0.0)["by_class"] == {} and h.points == []
    for _ in range(10):
        agg.add_request(req(user_class="chat", ttft_ms=100.0, cached_tokens=500))
    agg.add_session(sess(user_class="chat"))
    first = h.sample(agg, 5.0)["by_class"]["chat"]
    assert first["requests"] == 10 and 99 < first["ttft_p95"] < 101
    assert first["cached_ratio"] == 0.5
    for _ in range(10):
        agg.add_request(req(user_class="chat", ttft_ms=900.0))
    second = h.sample(agg, 10.0)["by_class"]["chat"]
    # Only the last window's requests: 900 ms, not a cumulative mix of 100 and 900.
    assert second["requests"] == 10 and 899 < second["ttft_p95"] < 901
    assert second["goodput"] == 0.0
    agg.add_request(req(user_class="agent"))
    third = h.sample(agg, 15.0)["by_class"]
    assert third["chat"]["requests"] == 0 and third["chat"]["ttft_p95"] is None
    assert third["agent"]["requests"] == 1
    assert h.to_dict()["classes"] == ["agent", "chat"] and len(h.points) == 3


def test_history_stays_bounded_and_keeps_its_span():
    agg = build(*random_records(1))
    h = AgentHistory(max_points=10)
    for t in range(100):
        h.sample(agg, float(t))
    assert len(h.points) <= 10
    assert h.points[0]["t"] < 20 and h.points[-1]["t"] == 99.0


def test_a_sample_is_cheap():
    """The charts sample every 5 s on the master: well under a millisecond per class."""
    agg = build(*random_records(2, n=3000))
    h = AgentHistory()
    h.sample(agg, 0.0)
    t0 = time.perf_counter()
    for t in range(1, 51):
        h.sample(agg, float(t))
    per_class_ms = (time.perf_counter() - t0) / 50 / len(agg.classes) * 1000
    assert per_class_ms < 5, per_class_ms
