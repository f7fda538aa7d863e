"""Capacity search over synthetic pass/fail loads; sample sufficiency; the text table."""

from __future__ import annotations

import json
import math

import pytest

from workload.errors import AgentloadError, CapacityError
from workload.orchestrate.capacity.search import (
    EXIT_BELOW_MIN,
    StepResult,
    capacity_search,
    clearly_broken,
    samples_needed,
    samples_needed_for,
    search_spec,
    slo_quantile,
)
from workload.orchestrate.capacity.text import capacity_table


def knee(limit: float, samples_per_load: float = 1000.0, calls: list | None = None):
    """A monotone deployment: SLOs hold up to ``limit`` and break above it."""

    def measure(load: float) -> StepResult:
        if calls is not None:
            calls.append(load)
        return StepResult(
            load=load,
            slo_met=load <= limit,
            goodput=min(load, limit) * 60.0,
            slo_values={"ttft_p95_ms": 500.0 * load / limit},
            samples=int(samples_per_load * load),
        )

    return measure


# ---------------------------------------------------------------- samples


@pytest.mark.parametrize("q,n", [(0.95, 200), (0.99, 1000), (0.999, 10000), (0.5, 20), (0.9, 100)])
def test_samples_needed(q, n):
    assert samples_needed(q) == n


@pytest.mark.parametrize("q", [0.0, 1.0, 95, -0.1, float("nan")])
def test_samples_needed_rejects(q):
    with pytest.raises(CapacityError):
        samples_needed(q)


def test_samples_needed_for_slo_keys():
    assert slo_quantile("ttft_p95_ms") == pytest.approx(0.95)
    assert slo_quantile("itl_p999_ms") == pytest.approx(0.999)
    assert slo_quantile("e2e_max_ms") is None
    assert slo_quantile("error_ratio") is None
    assert samples_needed_for({"ttft_p95_ms": 800, "itl_p99_ms": 50, "error_ratio": 0.01}) == 1000
    assert samples_needed_for({"error_ratio": 0.01}) == 0
    assert samples_needed_for({}) == 0


def test_clearly_broken():
    slos = {"ttft_p95_ms": 800.0, "session_success_ratio": 0.9}
    assert not clearly_broken({"ttft_p95_ms": 1500.0, "session_success_ratio": 0.5}, slos)
    assert clearly_broken({"ttft_p95_ms": 1700.0}, slos)
    assert clearly_broken({"session_success_ratio": 0.4}, slos)
    assert not clearly_broken({"ttft_p95_ms": None}, slos)
    assert clearly_broken({"ttft_p95_ms": 1300.0}, slos, factor=1.5)
    with pytest.raises(CapacityError):
        clearly_broken({}, slos, factor=1.0)


# ---------------------------------------------------------------- the search


@pytest.mark.parametrize("limit", [1, 2, 3, 7, 37, 64, 100, 255, 256, 511])
def test_users_knee_found_exactly(limit):
    r = capacity_search(search_spec("users", 1, 512), knee(limit))
    assert r.capacity == limit
    assert r.first_failing == limit + 1
    assert r.stop_reason == "precision"
    assert not r.min_failed


@pytest.mark.parametrize("limit", [0.37, 1.0, 3.3, 12.5, 99.0])
@pytest.mark.parametrize("rel", [0.01, 0.05, 0.2])
def test_rate_knee_within_relative_precision(limit, rel):
    r = capacity_search(search_spec("arrival_rate", 0.1, 200, relative_precision=rel), knee(limit))
    assert r.capacity is not None and r.first_failing is not None
    assert r.capacity <= limit < r.first_failing
    assert r.first_failing - r.capacity <= rel * r.capacity + 1e-12
    assert r.capacity >= limit * (1 - rel) - 1e-12


@pytest.mark.parametrize("limit", [4.0, 17.3, 150.0])
def test_rate_knee_within_absolute_precision(limit):
    r = capacity_search(search_spec("arrival_rate", 1, 200, precision=0.25), knee(limit))
    assert r.capacity is not None and r.first_failing is not None
    assert r.capacity <= limit < r.first_failing
    assert r.first_failing - r.capacity <= 0.25


def test_users_absolute_precision_coarser():
    calls: list[float] = []
    r = capacity_search(search_spec("users", 10, 1000, precision=10), knee(333, calls=calls))
    assert r.capacity is not None and r.first_failing is not None
    assert r.capacity <= 333 < r.first_failing
    assert r.first_failing - r.capacity <= 10
    assert all(isinstance(c, int) for c in calls)


def test_step_up_is_geometric_then_bisects():
    calls: list[float] = []
    capacity_search(search_spec("users", 2, 1000, factor=2), knee(20, calls=calls))
    assert calls[:5] == [2, 4, 8, 16, 32]  # step up until the first failure
    assert calls[5:] == [24, 20, 22, 21]  # bisection between 16 and 32


def test_stops_at_max():
    calls: list[float] = []
    r = capacity_search(search_spec("users", 3, 40), knee(10_000, calls=calls))
    assert calls == [3, 6, 12, 24, 40]
    assert (r.capacity, r.first_failing, r.stop_reason) == (40, None, "max_passed")
    r = capacity_search(search_spec("arrival_rate", 5, 5), knee(10))  # min == max
    assert (r.capacity, r.first_failing, len(r.steps)) == (5, None, 1)


def test_min_fails_capacity_null():
    calls: list[float] = []
    r = capacity_search(search_spec("users", 8, 512), knee(5, calls=calls))
    assert calls == [8]  # nothing above a failing minimum is tried
    assert r.capacity is None and r.first_failing == 8
    assert r.min_failed and r.stop_reason == "min_failed"
    assert EXIT_BELOW_MIN == 3
    assert r.to_dict()["capacity"] is None


def test_max_steps_budget():
    spec = search_spec("arrival_rate", 0.5, 10_000, relative_precision=1e-6, max_steps=12)
    r = capacity_search(spec, knee(3.0))  # budget runs out while bisecting
    assert len(r.steps) == 12 and r.stop_reason == "max_steps"
    assert r.capacity is not None and r.first_failing is not None
    assert r.capacity <= 3.0 < r.first_failing
    spec = search_spec("arrival_rate", 0.001, 10_000, max_steps=5)
    r = capacity_search(spec, knee(3.0))  # ... or while stepping up: no failure seen yet
    assert (len(r.steps), r.capacity, r.first_failing, r.stop_reason) == (
        5,
        0.016,
        None,
        "max_steps",
    )


def test_too_few_samples_flag_per_step():
    r = capacity_search(search_spec("users", 1, 64, quantile=0.95), knee(64, samples_per_load=10))
    assert [(s.load, s.too_few_samples) for s in r.steps] == [
        (1, True),
        (2, True),
        (4, True),
        (8, True),
        (16, True),
        (32, False),
        (64, False),
    ]
    r = capacity_search(search_spec("users", 1, 4, quantile=None), knee(64, samples_per_load=0))
    assert not any(s.too_few_samples for s in r.steps)


def test_result_dict_shape():
    r = capacity_search(search_spec("users", 4, 64), knee(20))
    d = json.loads(json.dumps(r.to_dict()))
    assert set(d) == {
        "dimension",
        "capacity",
        "first_failing",
        "steps",
        "bounds",
        "factor",
        "precision",
        "stop_reason",
    }
    assert d["dimension"] == "users" and d["capacity"] == 20 and d["first_failing"] == 21
    assert d["bounds"] == {"min": 4, "max": 64}
    assert d["precision"] == {"absolute": 1, "relative": None}
    for s in d["steps"]:
        assert set(s) == {"load", "slo_met", "goodput", "slo_values", "samples", "too_few_samples"}
    assert d["steps"][0] == {
        "load": 4,
        "slo_met": True,
        "goodput": 240.0,
        "slo_values": {"ttft_p95_ms": 100.0},
        "samples": 4000,
        "too_few_samples": False,
    }


def test_reported_load_is_the_one_asked_for():
    r = capacity_search(
        search_spec("users", 2, 8), lambda load: StepResult(load=-1, slo_met=True, samples=500)
    )
    assert [s.load for s in r.steps] == [2, 4, 8]


@pytest.mark.parametrize(
    "args,kw,msg",
    [
        (("users", 10, 5), {}, "above --max"),
        (("users", 0, 5), {}, "--min"),
        (("users", -1, 5), {}, "--min"),
        (("arrival_rate", 1, float("inf")), {}, "--max"),
        (("arrival_rate", float("nan"), 2), {}, "--min"),
        (("users", 1.5, 5), {}, "whole numbers"),
        (("tokens", 1, 5), {}, "dimension"),
        (("users", 1, 5), {"factor": 1.0}, "factor"),
        (("users", 1, 5), {"factor": 0.5}, "factor"),
        (("users", 1, 5), {"factor": 1000}, "factor"),
        (("users", 1, 5), {"precision": 0}, "precision"),
        (("users", 1, 5), {"precision": -2}, "precision"),
        (("arrival_rate", 1, 5), {"relative_precision": 0}, "precision"),
        (("arrival_rate", 1, 5), {"relative_precision": 1.5}, "below 1"),
        (("arrival_rate", 1, 5), {"precision": 1, "relative_precision": 0.1}, "not both"),
        (("users", 1, 5), {"quantile": 95}, "quantile"),
        (("users", 1, 5), {"max_steps": 0}, "max_steps"),
    ],
)
def test_bad_settings_one_line(args, kw, msg):
    with pytest.raises(CapacityError, match=msg) as e:
        search_spec(*args, **kw)
    assert "\n" not in str(e.value)
    assert isinstance(e.value, AgentloadError)


def test_default_precisions():
    assert search_spec("users", 1, 5).precision == 1
    s = search_spec("arrival_rate", 1, 5)
    assert (s.precision, s.relative_precision) == (None, 0.05)


def test_rate_loads_stay_tidy():
    r = capacity_search(search_spec("arrival_rate", 0.1, 100, relative_precision=0.01), knee(3.3))
    for s in r.steps:
        assert s.load == float(f"{s.load:.6g}")


# ---------------------------------------------------------------- the table


def test_capacity_table_text():
    r = capacity_search(search_spec("users", 2, 64), knee(20, samples_per_load=10))
    text = capacity_table(r.to_dict())
    lines = text.splitlines()
    assert lines[0].split() == ["#", "users", "SLO", "goodput", "req/s", "samples", "ttft_p95_ms"]
    assert "FAIL" in text and "pass" in text
    assert "capacity: 20 users; first failing 21" in text
    assert "(few)" in text


def test_a_search_that_never_failed_says_raise_max():
    # The documented example once ended at "capacity: 64 users (the maximum tried)": a
    # search that met no failing load has found no limit, and the answer has to say so.
    r = capacity_search(search_spec("users", 2, 64), knee(1000, samples_per_load=300))
    text = capacity_table(r.to_dict())
    assert r.stop_reason == "max_passed"
    assert (
        text.splitlines()[-1]
        == "capacity: at least 64 users: no limit found up to 64 users: raise --max"
    )


def test_capacity_table_rate_and_below_min():
    r = capacity_search(search_spec("arrival_rate", 1, 8), knee(0.5))
    text = capacity_table(r.to_dict())
    assert "rate/s" in text.splitlines()[0]
    assert "below the minimum (1/s (60/min) already fails" in text
    r = capacity_search(search_spec("arrival_rate", 0.5, 2), knee(100))
    assert (
        "capacity: at least 2/s (120/min): no limit found up to 2/s (120/min): raise --max"
        in capacity_table(r.to_dict())
    )
    assert not math.isnan(r.capacity or 0)


# ---------------------------------------------------------------- settled verdicts (the "(few)")


def test_samples_to_settle_a_pass():
    from workload.orchestrate.capacity.search import samples_to_settle

    assert [samples_to_settle(q) for q in (0.5, 0.9, 0.95, 0.99)] == [5, 29, 59, 299]
    with pytest.raises(CapacityError):
        samples_to_settle(1.0)


def test_quantile_verdict_settled_by_the_count_beyond_the_threshold():
    from workload.orchestrate.capacity.search import quantile_verdict_settled as settled

    # a p95 SLO: 5 % may lie beyond; none beyond settles a pass from 59 samples on
    assert not settled(58, 0, 0.05) and settled(59, 0, 0.05)
    # near the threshold (3.3 % beyond) 360 samples do not tell pass from fail, 720 do
    assert not settled(360, 12, 0.05) and settled(720, 24, 0.05)
    # many beyond settle a fail on few samples: 5 of 20 past a p95
    assert settled(20, 5, 0.05) and not settled(20, 2, 0.05)
    assert not settled(0, 0, 0.05)
