import xml.etree.ElementTree as ET

import pytest

from workload.measure.records import RequestRecord, SessionRecord
from workload.measure.slo import (
    error_ratio,
    evaluate_slos,
    junit_xml,
    parse_percentile,
    request_meets_slo,
    validate_slos,
)
from workload.measure.stats import Aggregate


def req(**kw) -> RequestRecord:
    d = dict(user_class="chat", session_id="s", step=1, t_start=10.0, ttft_ms=100.0, e2e_ms=1000.0)
    d.update(kw)
    return RequestRecord(**d)


@pytest.fixture
def agg() -> Aggregate:
    a = Aggregate()
    for i in range(100):
        a.add_request(req(ttft_ms=float(i + 1), itl_gaps_ms=[5.0, 6.0], session_id=f"s{i}"))
    a.add_request(req(user_class="bg", ttft_ms=5000.0, e2e_ms=60_000.0))
    a.add_request(req(user_class="bg", status="error", error_kind="timeout"))
    for i in range(10):
        a.add_session(SessionRecord(user_class="chat", session_id=f"s{i}", outcome="completed"))
    a.add_session(SessionRecord(user_class="chat", session_id="x", outcome="failed"))
    return a


def test_pass_and_fail_per_class(agg):
    slos = {
        "chat": {"ttft_p95_ms": 100, "ttft_p50_ms": 10, "session_success_ratio": 0.95},
        "bg": {"e2e_p99_ms": 120_000, "error_ratio": 0.1},
        "*": {"itl_max_ms": 10},
    }
    results = {(r.class_name, r.metric): r for r in evaluate_slos(agg, slos)}
    assert len(results) == 6
    assert results[("chat", "ttft_p95_ms")].passed
    assert results[("chat", "ttft_p95_ms")].observed == pytest.approx(95, rel=1e-3)
    assert not results[("chat", "ttft_p50_ms")].passed
    ssr = results[("chat", "session_success_ratio")]
    assert not ssr.passed and ssr.observed == pytest.approx(10 / 11) and ssr.bound == ">="
    assert results[("bg", "e2e_p99_ms")].passed
    er = results[("bg", "error_ratio")]
    assert not er.passed and er.observed == pytest.approx(0.5) and er.unit == "ratio"
    assert results[("*", "itl_max_ms")].passed
    # the summary dict works as well as the aggregate
    assert [r.passed for r in evaluate_slos(agg.summary(), slos)] == [
        r.passed for r in evaluate_slos(agg, slos)
    ]


def test_generic_percentile_needs_aggregate(agg):
    [r] = evaluate_slos(agg, {"chat": {"ttft_p999_ms": 99}})
    assert r.observed == pytest.approx(100, rel=1e-3) and not r.passed
    with pytest.raises(ValueError, match="Aggregate"):
        evaluate_slos(agg.summary(), {"chat": {"ttft_p75_ms": 99}})


def test_missing_samples(agg):
    slos = {"nobody": {"ttft_p95_ms": 1}, "chat": {"tpot_p95_ms": 5}}
    assert [r.passed for r in evaluate_slos(agg, slos, missing="fail")] == [False, False]
    skipped = evaluate_slos(agg, slos, missing="skip")
    assert all(r.skipped and r.passed and r.observed is None for r in skipped)


def test_unknown_keys_are_rejected():
    assert validate_slos({"chat": {"ttft_p95_ms": 1, "latency": 3, "itl_p95_ms": "x"}}) == [
        validate_slos({"chat": {"latency": 3}})[0],
        "slo chat.itl_p95_ms: threshold must be a number, got 'x'",
    ]
    with pytest.raises(ValueError, match="unknown SLO"):
        evaluate_slos({"overall": {}, "by_class": {}}, {"chat": {"ttft_p95": 1}})


def test_parse_percentile():
    assert [parse_percentile(s) for s in ("p5", "p50", "p999", "p9999", "p99.5")] == [
        5.0,
        50.0,
        99.9,
        99.99,
        99.5,
    ]


def test_junit_xml_is_well_formed(agg):
    slos = {"chat": {"ttft_p95_ms": 100, "ttft_p50_ms": 10}, "bg": {"tpot_p95_ms": 1}}
    results = evaluate_slos(agg, slos, missing="skip")
    root = ET.fromstring(junit_xml(results, "gate<&>"))
    suite = root.find("testsuite")
    assert suite.get("tests") == "3" and suite.get("failures") == "1"
    assert suite.get("skipped") == "1"
    cases = suite.findall("testcase")
    assert [(c.get("classname"), c.get("name")) for c in cases] == [
        ("gate<&>.chat", "ttft_p95_ms"),
        ("gate<&>.chat", "ttft_p50_ms"),
        ("gate<&>.bg", "tpot_p95_ms"),
    ]
    failure = cases[1].find("failure")
    assert "VIOLATED" in failure.get("message") and failure.get("type") == "SLOViolation"
    assert cases[2].find("skipped") is not None


def test_error_ratio_helper(agg):
    s = agg.summary()
    assert error_ratio(s) == pytest.approx(1 / 102)
    assert error_ratio(s, "bg") == pytest.approx(0.5)
    assert error_ratio(s, "missing") is None


def test_request_meets_slo():
    slo = {"ttft_p95_ms": 200, "ttft_p99_ms": 400, "itl_p95_ms": 20, "e2e_mean_ms": 1}
    assert request_meets_slo(req(ttft_ms=350.0), slo)  # p99 bound is the lenient one
    assert not request_meets_slo(req(ttft_ms=450.0), slo)
    gaps = [10.0] * 19 + [100.0]  # own p95 = 10
    assert request_meets_slo(req(itl_gaps_ms=gaps), slo)
    assert not request_meets_slo(req(itl_gaps_ms=[10.0] * 18 + [100.0] * 2), slo)
    assert not request_meets_slo(req(itl_ms={"p99": 30.0}), slo)  # jsonl fallback
    assert not request_meets_slo(req(status="error"), slo)
    assert request_meets_slo(req(ttft_ms=None), slo)  # cannot violate what was not measured


def test_no_samples_is_not_judged_by_default(agg):
    slos = {"nobody": {"ttft_p95_ms": 1}, "chat": {"tpot_p95_ms": 5, "ttft_p95_ms": 1e9}}
    results = evaluate_slos(agg, slos)
    assert [r.status for r in results] == ["not judged", "not judged", "met"]
    assert all(r.passed for r in results)  # not judged is not a violation
    assert "not judged (no samples)" in results[0].message
    assert results[0].to_json()["status"] == "not judged" and not results[0].to_json()["judged"]
    root = ET.fromstring(junit_xml(results))
    suite = root.find("testsuite")
    assert suite.get("skipped") == "2" and suite.get("failures") == "0"
    strict = evaluate_slos(agg, slos, missing="fail")
    assert [r.passed for r in strict] == [False, False, True]
    assert [r.status for r in strict][:2] == ["not judged", "not judged"]


def test_check_slo_overrides_did_you_mean():
    from workload.measure.slo import check_slo_overrides

    classes = ["coding-agent", "chat"]
    assert (
        check_slo_overrides({"*": {"ttft_p95_ms": 500}, "chat": {"error_ratio": 0.1}}, classes)
        == []
    )
    [p] = check_slo_overrides({"codingagent": {"ttft_p95_ms": 500}}, classes)
    assert "unknown class 'codingagent'" in p and "did you mean 'coding-agent'?" in p
    [p] = check_slo_overrides({"*": {"eror_ratio": 0.1}}, classes)
    assert "did you mean 'error_ratio'?" in p
    [p] = check_slo_overrides({"*": {"ttft_p95": 500}}, classes)
    assert "did you mean 'ttft_p95_ms'?" in p
    [p] = check_slo_overrides({"*": {"ttft_p95_ms": float("nan")}}, classes)
    assert "finite" in p


def test_time_to_first_visible_content_is_a_gateable_slo():
    a = Aggregate()
    for i in range(100):  # 500 ms of reasoning before the first visible token
        a.add_request(req(ttft_ms=float(i + 1), ttft_content_ms=500.0 + i, session_id=f"s{i}"))
    slos = {
        "chat": {"ttft_p95_ms": 100, "ttft_content_p95_ms": 400},
        "*": {"ttft_content_max_ms": 700},
    }
    got = {(r.class_name, r.metric): r for r in evaluate_slos(a, slos)}
    assert got[("chat", "ttft_p95_ms")].passed
    content = got[("chat", "ttft_content_p95_ms")]
    assert not content.passed and content.observed == pytest.approx(594, rel=1e-2)
    assert got[("*", "ttft_content_max_ms")].passed
    assert not validate_slos({"chat": {"ttft_content_p99_ms": 1}})
    # goodput: a request whose visible content came late missed its class's SLO
    assert not request_meets_slo(req(ttft_ms=50.0, ttft_content_ms=450.0), slos["chat"])
    assert request_meets_slo(req(ttft_ms=50.0, ttft_content_ms=350.0), slos["chat"])


def test_messages_write_units_as_a_reader_does(agg):
    """ "session_success_ratio = 1 ratio" and "goodput_per_min = 84.7 per_min" read as jargon
    on the console's last lines (issue 30's newcomer walk)."""
    slos = {"chat": {"session_success_ratio": 0.5, "ttft_p95_ms": 100, "goodput_per_min": 0}}
    msgs = {r.metric: r.message for r in evaluate_slos(agg, slos)}
    assert msgs["session_success_ratio"].startswith("chat: session_success_ratio = 0.9091 (need")
    assert " ms (need <= 100" in msgs["ttft_p95_ms"]
    assert "/min (need >= 0" in msgs["goodput_per_min"]
    assert " ratio " not in msgs["session_success_ratio"]
