"""Arrival processes: rates, specs, seeded schedules, worker splits, lateness."""

from __future__ import annotations

import math

import numpy as np
import pytest
from pydantic import BaseModel, ConfigDict, ValidationError

from workload.errors import ArrivalError
from workload.plan.arrivals import (
    MAX_RATE_PER_S,
    ArrivalSchedule,
    ArrivalSpec,
    InFlightGate,
    arrival_spec,
    cumulative_rate,
    for_worker,
    lateness_summary,
    parse_arrival_process,
    parse_arrival_rate,
    parse_rate,
    pick_classes,
    share_of_cap,
    stream_rng,
    unit_gaps,
    warp,
)


def spec(**kw) -> ArrivalSpec:
    return ArrivalSpec.model_validate({"rate_per_s": 2.0} | kw)


# ---------------------------------------------------------------- parsing


@pytest.mark.parametrize(
    "text,rate",
    [
        ("2", 2.0),
        ("0.5", 0.5),
        ("2ps", 2.0),
        ("2/s", 2.0),
        ("30pm", 0.5),
        ("30/min", 0.5),
        (" 90 PM ", 1.5),
        ("1e2", 100.0),
        (3, 3.0),
        (0.25, 0.25),
    ],
)
def test_parse_rate(text, rate):
    assert parse_rate(text) == pytest.approx(rate)


@pytest.mark.parametrize(
    "text",
    [
        "0",
        "-1",
        "nan",
        "inf",
        "1e400",
        "abc",
        "",
        "30pmx",
        "2 per second",
        "1e9",
        "0pm",
        True,
        float("nan"),
        0,
        -3,
    ],
)
def test_parse_rate_rejects_one_line(text):
    with pytest.raises(ArrivalError) as e:
        parse_rate(text)
    assert "\n" not in str(e.value)
    assert isinstance(e.value, ValueError)


def test_absurd_rate_message_names_the_limit():
    with pytest.raises(ArrivalError, match=f"{MAX_RATE_PER_S:g}/s"):
        parse_arrival_rate("1000000")
    with pytest.raises(ArrivalError, match="one per day"):
        parse_arrival_rate("0.000001")
    with pytest.raises(ArrivalError, match="--arrival-rate"):
        parse_arrival_rate("fast")


@pytest.mark.parametrize(
    "text,out",
    [
        ("poisson", ("poisson", None)),
        ("constant", ("constant", None)),
        ("gamma:2", ("gamma", 2.0)),
        ("Gamma:0.5", ("gamma", 0.5)),
        ("gamma:1", ("gamma", 1.0)),
    ],
)
def test_parse_arrival_process(text, out):
    assert parse_arrival_process(text) == out


@pytest.mark.parametrize(
    "text,msg",
    [
        ("uniform", "not a process"),
        ("gamma", "needs its CV"),
        ("gamma:", "needs its CV"),
        ("gamma:x", "no number"),
        ("gamma:0", "cv"),
        ("gamma:-1", "cv"),
        ("gamma:nan", "cv"),
        ("gamma:1000", "cv"),
        ("poisson:2", "takes no parameter"),
    ],
)
def test_parse_arrival_process_rejects(text, msg):
    with pytest.raises(ArrivalError, match=msg) as e:
        parse_arrival_process(text)
    assert "\n" not in str(e.value)


# ---------------------------------------------------------------- the spec


def test_spec_defaults_and_rate_strings():
    s = spec(rate_per_s="30pm")
    assert (s.process, s.rate_per_s, s.cv, s.max_in_flight, s.at_cap) == (
        "poisson",
        0.5,
        None,
        None,
        "queue",
    )
    assert s.gap_cv == 1.0
    assert spec(process="constant").gap_cv == 0.0
    assert spec(process="gamma", cv=3).gap_cv == 3.0


@pytest.mark.parametrize(
    "kw",
    [
        {"process": "gamma"},  # no cv
        {"process": "poisson", "cv": 2},
        {"process": "constant", "cv": 0.5},
        {"process": "gamma", "cv": 0},
        {"process": "gamma", "cv": float("inf")},
        {"rate_per_s": 0},
        {"rate_per_s": float("nan")},
        {"rate_per_s": "1e9"},
        {"max_in_flight": 0},
        {"at_cap": "wait"},
        {"burst": 3},  # unknown key
        {"process": "weibull"},
    ],
)
def test_spec_rejects(kw):
    with pytest.raises(ValidationError):
        spec(**kw)


def test_spec_requires_a_rate():
    with pytest.raises(ValidationError):
        ArrivalSpec.model_validate({})


def test_spec_as_a_profile_block():
    class Klass(BaseModel):
        model_config = ConfigDict(extra="forbid")
        arrival: ArrivalSpec | None = None

    k = Klass.model_validate({"arrival": {"process": "gamma", "rate_per_s": "6pm", "cv": 2}})
    assert k.arrival is not None and k.arrival.rate_per_s == pytest.approx(0.1)


def test_arrival_spec_from_cli_values():
    s = arrival_spec("120pm", "gamma:1.5", max_in_flight=10, at_cap="drop")
    assert (s.process, s.rate_per_s, s.cv, s.max_in_flight, s.at_cap) == (
        "gamma",
        2.0,
        1.5,
        10,
        "drop",
    )
    with pytest.raises(ArrivalError, match="max_in_flight") as e:
        arrival_spec("1", max_in_flight=-2)
    assert "\n" not in str(e.value)


# ---------------------------------------------------------------- schedules


def test_same_seed_same_schedule_other_seed_other():
    a = ArrivalSchedule(spec(), seed=7).times(300)
    b = ArrivalSchedule(spec(), seed=7).times(300)
    c = ArrivalSchedule(spec(), seed=8).times(300)
    assert np.array_equal(a, b)
    assert not np.array_equal(a[: len(c)], c[: len(a)])


def test_first_session_at_zero_and_sorted_within_horizon():
    for process, cv in (("poisson", None), ("gamma", 4.0), ("constant", None)):
        t = ArrivalSchedule(spec(process=process, cv=cv), seed=1).times(100)
        assert t[0] == 0.0
        assert np.all(np.diff(t) >= 0)
        assert t[-1] < 100


def test_longer_horizon_extends_a_prefix():
    s = ArrivalSchedule(spec(rate_per_s=50.0), seed=3)
    short, long = s.times(10), s.times(500)  # spans several draw chunks
    assert len(long) > 4096 * 2
    assert np.array_equal(long[: len(short)], short)


def test_streams_per_class_differ_and_are_stable():
    a = ArrivalSchedule(spec(), seed=5, stream="interactive").times(100)
    b = ArrivalSchedule(spec(), seed=5, stream="background").times(100)
    assert not np.array_equal(a[:10], b[:10])
    assert np.array_equal(a, ArrivalSchedule(spec(), seed=5, stream="interactive").times(100))
    r1, r2 = stream_rng(5, "x"), stream_rng(5, "x")
    assert r1.random() == r2.random()


@pytest.mark.parametrize("n_workers", [1, 2, 3, 7])
def test_worker_shares_union_to_the_single_schedule(n_workers):
    times = ArrivalSchedule(spec(process="gamma", cv=2.0), seed=11).times(200)
    parts = [for_worker(times, w, n_workers) for w in range(n_workers)]
    idx = np.concatenate([i for i, _ in parts])
    assert sorted(idx.tolist()) == list(range(len(times)))  # each session exactly once
    merged = np.empty(len(times))
    for i, t in parts:
        merged[i] = t
        assert np.all(i % n_workers == i[0] % n_workers) if len(i) else True
    assert np.array_equal(merged, times)


def test_worker_split_is_round_robin():
    times = ArrivalSchedule(spec(process="constant", rate_per_s=1), seed=0).times(10)
    idx, t = for_worker(times, 1, 3)
    assert idx.tolist() == [1, 4, 7]
    assert t.tolist() == [1.0, 4.0, 7.0]


@pytest.mark.parametrize("worker,n", [(3, 3), (-1, 2), (0, 0)])
def test_worker_index_checked(worker, n):
    with pytest.raises(ArrivalError):
        for_worker(np.zeros(3), worker, n)


def test_constant_is_exact():
    t = ArrivalSchedule(spec(process="constant", rate_per_s=4), seed=99).times(3)
    assert t.tolist() == [i / 4 for i in range(12)]
    t = ArrivalSchedule(spec(process="constant", rate_per_s="30pm"), seed=1).times(60)
    assert t.tolist() == [0.0, 2.0 * 1, *[2.0 * i for i in range(2, 30)]]


def _gaps(process, cv, rate, until, seed=2026):
    t = ArrivalSchedule(spec(process=process, cv=cv, rate_per_s=rate), seed=seed).times(until)
    return np.diff(t)


@pytest.mark.parametrize(
    "process,cv,want_cv",
    [("poisson", None, 1.0), ("gamma", 0.5, 0.5), ("gamma", 2.0, 2.0), ("gamma", 1.0, 1.0)],
)
def test_empirical_rate_and_cv(process, cv, want_cv):
    rate = 5.0
    g = _gaps(process, cv, rate, until=20_000)  # ~100k gaps, seeded: no flakes
    assert len(g) > 90_000
    assert 1.0 / g.mean() == pytest.approx(rate, rel=0.03)
    assert g.std() / g.mean() == pytest.approx(want_cv, rel=0.05)


def test_unit_gaps_mean_one():
    rng = np.random.default_rng(1)
    for process, cv in (("poisson", None), ("gamma", 3.0), ("constant", None)):
        assert unit_gaps(process, cv, rng, 200_000).mean() == pytest.approx(1.0, rel=0.03)
    with pytest.raises(ArrivalError):
        unit_gaps("weibull", None, rng, 3)


def test_horizon_checked():
    s = ArrivalSchedule(spec(), seed=0)
    assert len(s.times(0)) == 0
    for bad in (-1.0, float("inf"), float("nan")):
        with pytest.raises(ArrivalError):
            s.times(bad)


# ---------------------------------------------------------------- varying rates (time change)


def test_warp_constant_curve_equals_plain_rate():
    s = ArrivalSchedule(spec(rate_per_s=3.0), seed=4)
    plain = s.times(50)
    warped = s.times_warped([(0.0, 50.0, 3.0, 3.0)])
    assert np.allclose(plain, warped)


def test_warp_piecewise_counts_and_ramps():
    segs = [
        (0.0, 10.0, 1.0, 1.0),
        (10.0, 20.0, 1.0, 3.0),
        (20.0, 30.0, 0.0, 0.0),
        (30.0, 40.0, 2.0, 2.0),
    ]
    assert cumulative_rate(segs) == pytest.approx(10 + 20 + 0 + 20)
    t = ArrivalSchedule(spec(process="constant", rate_per_s=1), seed=0).times_warped(segs)
    assert len(t) == 50
    assert t[:10].tolist() == pytest.approx(list(range(10)))
    assert not np.any((t >= 20) & (t < 30))  # the zero-rate stage starts nobody
    # in the ramp 1 -> 3 over 10 s, unit time u lands where u = dt + dt^2/10
    for u, tt in zip(range(10, 30), t[10:30], strict=True):
        dt = tt - 10.0
        assert dt + dt * dt / 10.0 == pytest.approx(u - 10, abs=1e-9)
    assert t[30:].tolist() == pytest.approx([30 + i / 2 for i in range(20)])


def test_warp_ramp_from_zero():
    u = np.array([0.0, 0.5, 2.0])
    t = warp(u, [(0.0, 4.0, 0.0, 1.0)])  # rate t/4: mass t^2/8
    assert t.tolist() == pytest.approx([0.0, 2.0])  # u = 2.0 is the curve's total: past the end


def test_warped_schedule_split_across_workers():
    segs = [(0.0, 30.0, 0.5, 4.0), (30.0, 90.0, 4.0, 4.0)]
    s = ArrivalSchedule(spec(process="gamma", cv=1.5), seed=21)
    full = s.times_warped(segs)
    idx = np.concatenate([for_worker(full, w, 4)[0] for w in range(4)])
    assert sorted(idx.tolist()) == list(range(len(full)))


def test_pick_classes_deterministic_weighted_prefix_stable():
    w = {"interactive": 3.0, "background": 1.0}
    a = pick_classes(9, 40_000, w)
    assert a == pick_classes(9, 40_000, w)
    assert pick_classes(9, 100, w) == a[:100]
    assert a.count("interactive") / len(a) == pytest.approx(0.75, abs=0.01)
    with pytest.raises(ArrivalError):
        pick_classes(9, 3, {"a": 0.0})
    with pytest.raises(ArrivalError):
        pick_classes(9, 3, {})


# ---------------------------------------------------------------- lateness


def test_lateness_summary():
    scheduled = [float(i) for i in range(100)]
    actual: list[float | None] = [s + (0.01 if i < 90 else 0.5) for i, s in enumerate(scheduled)]
    actual[5] = None
    actual[6] = None
    actual[7] = 6.0  # early: counts as on time
    lt = lateness_summary(scheduled, actual, tolerance_s=0.1)
    assert (lt.scheduled, lt.started, lt.dropped, lt.delayed) == (100, 98, 2, 10)
    assert lt.p50_s == pytest.approx(0.01)
    assert lt.p99_s == pytest.approx(0.5)
    assert lt.max_s == pytest.approx(0.5)
    d = lt.to_dict()
    assert set(d) == {
        "scheduled",
        "started",
        "dropped",
        "delayed",
        "tolerance_s",
        "p50_s",
        "p99_s",
        "max_s",
    }


def test_lateness_all_dropped_and_checks():
    lt = lateness_summary([0.0, 1.0], [None, None])
    assert (lt.started, lt.dropped, lt.p50_s, lt.p99_s, lt.max_s) == (0, 2, None, None, None)
    with pytest.raises(ArrivalError):
        lateness_summary([0.0], [])
    with pytest.raises(ArrivalError):
        lateness_summary([0.0], [0.0], tolerance_s=-1)
    assert math.isclose(lateness_summary([1.0], [3.5]).max_s or 0, 2.5)


@pytest.mark.parametrize("n_workers", [1, 3, 5])
def test_lazy_worker_iteration_matches_the_global_schedule(n_workers):
    s = ArrivalSchedule(spec(process="gamma", cv=2.0, rate_per_s=40.0), seed=13)
    full = s.times(300)  # ~12k sessions: several chunks
    got: dict[int, float] = {}
    for w in range(n_workers):
        for k, t in s.iter_worker(w, n_workers, until_s=300):
            assert k % n_workers == w and k not in got
            got[k] = t
    assert sorted(got) == list(range(len(full)))
    assert np.array_equal(np.array([got[k] for k in range(len(full))]), full)


def test_lazy_worker_iteration_under_a_rate_curve():
    segs = [(0.0, 100.0, 10.0, 80.0), (100.0, 200.0, 80.0, 80.0), (200.0, 250.0, 0.0, 0.0)]
    s = ArrivalSchedule(spec(), seed=17)
    full = s.times_warped(segs)
    got = sorted(kt for w in range(4) for kt in s.iter_worker(w, 4, segments=segs))
    assert [k for k, _ in got] == list(range(len(full)))
    assert np.allclose([t for _, t in got], full)


def test_lazy_iteration_without_end_and_limits():
    s = ArrivalSchedule(spec(process="constant", rate_per_s=2), seed=0)
    it = s.iter_worker(0, 2)
    assert [next(it) for _ in range(3)] == [(0, 0.0), (2, 1.0), (4, 2.0)]
    with pytest.raises(ArrivalError, match="exceeds"):
        s.times(1e12)
    with pytest.raises(ArrivalError):
        list(s.iter_worker(2, 2, until_s=1))


# ---------------------------------------------------------------- the in-flight cap


def test_gate_queue_passes_slots_on_in_order():
    g = InFlightGate(2, "queue")
    assert [g.arrive(k) for k in range(5)] == [True, True, False, False, False]
    assert g.in_flight == 2 and list(g.queue) == [2, 3, 4]
    assert g.finish() == 2
    assert g.finish() == 3
    assert g.finish() == 4
    assert g.in_flight == 2
    assert g.finish() is None and g.finish() is None
    assert g.in_flight == 0 and g.dropped == []
    with pytest.raises(ArrivalError):
        g.finish()


def test_gate_drop_and_unbounded():
    g = InFlightGate(1, "drop")
    assert [g.arrive(k) for k in range(3)] == [True, False, False]
    assert g.dropped == [1, 2] and g.finish() is None
    assert g.arrive(3)
    u = InFlightGate(None)
    assert all(u.arrive(k) for k in range(1000))
    for bad in ((0, "queue"), (2, "wait")):
        with pytest.raises(ArrivalError):
            InFlightGate(*bad)


def test_share_of_cap():
    assert [share_of_cap(10, w, 3) for w in range(3)] == [4, 3, 3]
    assert sum(share_of_cap(1000, w, 7) or 0 for w in range(7)) == 1000
    assert share_of_cap(None, 0, 4) is None
    assert share_of_cap(2, 3, 4) == 1  # never zero
