"""The exporter's families, read from the run's aggregate; the --metrics-port parser."""

from __future__ import annotations

import re

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from workload.errors import UsageError
from workload.measure.live_metrics import (
    LiveCounts,
    RunCollector,
    Snapshot,
    families,
    metric_names,
)
from workload.measure.records import RequestRecord, SessionRecord
from workload.measure.stats import Aggregate
from workload.run.options import parse_listen


def requests(cls: str, n: int, **kw: object) -> list[RequestRecord]:
    base: dict[str, object] = dict(
        user_class=cls, ttft_ms=40.0, e2e_ms=900.0, tpot_ms=12.0, itl_gaps_ms=[10.0, 14.0],
        prompt_tokens=200, completion_tokens=30, cached_tokens=120,
    )  # fmt: skip
    base.update(kw)
    return [RequestRecord(step=1 + i % 3, **base) for i in range(n)]  # type: ignore[arg-type]


def exposition(agg: Aggregate, live: LiveCounts | None = None) -> dict[str, list]:
    registry = CollectorRegistry(auto_describe=False)
    snap = Snapshot(total=agg, live=live or LiveCounts(), info={"run_id": "r1"}, model="m")
    registry.register(RunCollector(lambda: snap))
    out: dict[str, list] = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in family.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def value(samples: dict[str, list], name: str, **match: str) -> float:
    return sum(
        v
        for labels, v in samples.get(name, [])
        if all(labels.get(k) == x for k, x in match.items())
    )


def test_counters_and_histograms_equal_the_aggregate_they_read() -> None:
    agg = Aggregate()
    for rec in requests("chat", 7) + requests("agent", 4, ttft_ms=300.0):
        agg.add_request(rec)
    agg.add_request(RequestRecord(user_class="chat", step=2, status="error", error_kind="timeout"))
    agg.add_session(SessionRecord(user_class="chat", session_id="s1", duration_ms=5000.0))
    got = exposition(agg)
    assert value(got, "agentload_requests_total") == 12
    assert value(got, "agentload_requests_total", status="error", step="2") == 1
    assert value(got, "agentload_request_errors_total", kind="timeout") == 1
    assert value(got, "agentload_tokens_total", type="cached", **{"class": "chat"}) == 7 * 120
    assert value(got, "agentload_cached_token_ratio", **{"class": "chat"}) == pytest.approx(0.6)
    assert value(got, "agentload_sessions_total", outcome="completed") == 1
    # 40 ms TTFTs sit above the 25 ms bound and under the 50 ms one; 300 ms above 250 ms.
    chat = {"class": "chat"}
    assert value(got, "agentload_ttft_seconds_bucket", le="0.025", **chat) == 0
    assert value(got, "agentload_ttft_seconds_bucket", le="0.05", **chat) == 7
    assert value(got, "agentload_ttft_seconds_bucket", le="0.25", **{"class": "agent"}) == 0
    assert value(got, "agentload_ttft_seconds_count") == 11
    assert value(got, "agentload_ttft_seconds_sum", **chat) == pytest.approx(7 * 0.040)
    assert value(got, "agentload_itl_seconds_count", **chat) == 14
    model = {"gen_ai_request_model": "m", "gen_ai_operation_name": "chat"}
    assert value(got, "gen_ai_client_operation_duration_seconds_count", **model) == 11


def test_merged_worker_aggregates_export_as_one_process_would() -> None:
    recs = requests("chat", 9) + requests(
        "agent", 5, ttft_ms=77.0, status="error", error_kind="connect"
    )
    one, a, b = Aggregate(), Aggregate(), Aggregate()
    for i, rec in enumerate(recs):
        one.add_request(rec)
        (a if i % 2 else b).add_request(rec)
    a.merge(b)
    assert exposition(a) == exposition(one)


def test_live_counts_survive_the_report_and_add_up() -> None:
    w0 = LiveCounts(sessions_started=3, sessions_ended=2, requests_started=9, requests_ended=8)
    w0.lateness.record_ms(20.0)
    w1 = LiveCounts.from_dict(
        LiveCounts(sessions_started=1, arrivals_due=4, arrivals_dropped=1).to_dict()
    )
    total = LiveCounts()
    for w in (LiveCounts.from_dict(w0.to_dict()), w1):
        total.add(w)
    assert (total.sessions_started, total.arrivals_dropped, total.lateness.count) == (4, 1, 1)
    got = exposition(Aggregate(), total)
    assert value(got, "agentload_sessions_in_flight") == 2
    assert value(got, "agentload_requests_in_flight") == 1
    assert value(got, "agentload_session_start_lateness_seconds_bucket", le="0.05") == 1


def test_token_usage_is_a_genai_histogram_that_survives_the_report() -> None:
    w0, w1 = LiveCounts(), LiveCounts()
    for rec in requests("chat", 3, prompt_tokens=200, completion_tokens=4):
        w0.tokens.record(rec)
    w1.tokens.record(
        RequestRecord(user_class="chat", prompt_tokens=70_000_000, completion_tokens=1)
    )
    total = LiveCounts()
    for w in (LiveCounts.from_dict(w0.to_dict()), LiveCounts.from_dict(w1.to_dict())):
        total.add(w)
    got = exposition(Aggregate(), total)
    name = "gen_ai_client_token_usage"
    inp = {"gen_ai_token_type": "input", "agentload_class": "chat", "gen_ai_request_model": "m"}
    out = {**inp, "gen_ai_token_type": "output"}
    assert value(got, f"{name}_bucket", le="64.0", **inp) == 0
    assert value(got, f"{name}_bucket", le="256.0", **inp) == 3  # 200 <= 256
    assert value(got, f"{name}_bucket", le="67108864.0", **inp) == 3  # 70 M: above every bound
    assert value(got, f"{name}_bucket", le="+Inf", **inp) == value(got, f"{name}_count", **inp) == 4
    assert value(got, f"{name}_sum", **inp) == 3 * 200 + 70_000_000
    assert value(got, f"{name}_bucket", le="1.0", **out) == 1  # 1 <= 1
    assert value(got, f"{name}_bucket", le="4.0", **out) == 4
    assert value(got, f"{name}_sum", **out) == 13


def test_metric_names_follow_prometheus_conventions() -> None:
    names = metric_names()
    assert len(names) == len(set(names))
    kinds = {m.name: m.type for m in families(Snapshot(Aggregate(), LiveCounts(), {}, users=0))}
    for name in names:
        assert re.fullmatch(r"(agentload|gen_ai)_[a-z0-9_]+", name), name
        base = name.removesuffix("_total").removesuffix("_info")
        if kinds[base] == "counter":
            assert name.endswith("_total"), name
        if kinds[base] == "histogram" and name != "gen_ai_client_token_usage":  # {token}: no unit
            assert name.endswith("_seconds"), name
    assert "gen_ai_server_time_to_first_token_seconds" in names


@pytest.mark.parametrize(
    ("raw", "listen"),
    [("9464", "127.0.0.1:9464"), ("0", "127.0.0.1:0"), ("0.0.0.0:9464", "0.0.0.0:9464"),
     ("[::1]:9000", "::1:9000"), ("", "")],
)  # fmt: skip
def test_metrics_port_is_loopback_unless_a_host_is_given(raw: str, listen: str) -> None:
    assert parse_listen(raw) == listen


@pytest.mark.parametrize("raw", ["http", "70000", ":9464", "-1", "host:"])
def test_a_bad_metrics_port_is_one_usage_line(raw: str) -> None:
    with pytest.raises(UsageError, match="bad --metrics-port"):
        parse_listen(raw)
