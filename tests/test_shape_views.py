"""The report's TTFT split and subagent tables, and their statistics."""

from __future__ import annotations

from workload.measure.records import RequestRecord
from workload.measure.stats import Aggregate
from workload.report.shape_views import subagent_rows, ttft_split, ttft_split_rows


def _row(cls="agent", ttft=10.0, content=30.0, chunks=5, tokens=100, asked=100, status="ok"):
    return {
        "user_class": cls, "status": status, "ttft_ms": ttft, "ttft_content_ms": content,
        "reasoning_chunks": chunks, "reasoning_tokens": tokens, "reasoning_requested": asked,
    }  # fmt: skip


def test_split_per_class_first_token_vs_first_content():
    rows = [_row(ttft=10, content=30), _row(ttft=20, content=60), _row(status="error", ttft=1)]
    (t,) = ttft_split(rows)
    assert (t["requests"], t["ttft_p50_ms"], t["content_p50_ms"]) == (2, 10.0, 30.0)
    assert (t["ttft_p95_ms"], t["content_p95_ms"], t["reasoned_share"]) == (20.0, 60.0, 1.0)
    assert t["reasoning_reported_mean"] == 100


def test_no_table_without_reasoning_and_a_note_when_asked_but_not_streamed():
    assert ttft_split([_row(chunks=0, asked=None, tokens=None)]) == []
    rows, note = ttft_split_rows([_row(chunks=0, tokens=None, content=10.0)])
    assert rows and "asked for but none streamed (agent)" in note


def test_subagent_rows_count_child_sessions_only():
    sess = [
        {"user_class": "agent", "parent_session": None, "duration_ms": 9e3},
        {"user_class": "explorer", "parent_session": "p", "duration_ms": 100.0,
         "steps_done": 2, "outcome": "completed"},
        {"user_class": "explorer", "parent_session": "p", "duration_ms": 300.0,
         "steps_done": 3, "outcome": "failed"},
    ]  # fmt: skip
    assert subagent_rows(sess) == [["explorer", "2", "1", "2.5", "100", "300"]]


def test_stats_keep_the_content_ttft_and_reasoning_counts_mergeable():
    a, b = Aggregate(), Aggregate()
    for agg, ttft in ((a, 10.0), (b, 20.0)):
        agg.add_request(
            RequestRecord(user_class="x", step=1, ttft_ms=ttft, ttft_content_ms=ttft + 50,
                          reasoning_chunks=3, reasoning_tokens=40, reasoning_requested=50)
        )  # fmt: skip
    a.merge(Aggregate.from_dict(b.to_dict()))
    s = a.summary(10.0)["overall"]
    assert s["ttft_content_ms"]["count"] == 2 and s["ttft_content_ms"]["max"] >= 69.9
    assert (s["reasoning_tokens"], s["reasoning_requests"], s["reasoning_requested"]) == (
        80,
        2,
        100,
    )
