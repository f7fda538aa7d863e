"""Open-loop integration: profile fields, run options, the stream driver (fake clock),
the load model, and the lateness / per-stage summaries."""

from __future__ import annotations

import json

import pytest

from workload.errors import UsageError
from workload.locust.open_loop import Arrival, OpenLoop, StreamDriver
from workload.plan.arrivals import ArrivalSchedule, ArrivalSpec
from workload.plan.load_model import (
    ClassPicker,
    Stream,
    closed_classes,
    closed_users,
    is_open_loop,
    streams,
)
from workload.plan.loading import load_profile
from workload.plan.traces import TraceSchedule
from workload.run.load_summary import arrival_lines, arrival_summary, stage_summary
from workload.run.spec import resolve_spec

from .profile_builders import problems, write

# ---------------------------------------------------------------- a fake clock


class FakeClock:
    """time and sleep for the driver: sleeping moves the clock, nothing waits."""

    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


def driver(spec: ArrivalSpec, *, worker=0, n=1, until=10.0, hold=None, clock=None):
    """A driver whose sessions run for `hold` seconds of fake time (None: until finished())."""
    clock = clock or FakeClock()
    started: list[tuple[Arrival, float]] = []
    dropped: list[tuple[Arrival, str]] = []
    pending: list = []
    d = StreamDriver(
        Stream("run", spec, {"a": 1.0, "b": 3.0}),
        seed=7,
        worker=worker,
        n_workers=n,
        t0=clock(),
        start=lambda a, done: (started.append((a, clock())), pending.append(done)),
        drop=lambda a, why: dropped.append((a, why)),
        until_s=until,
        clock=clock,
        sleep=clock.sleep,
    )
    return d, started, dropped, pending, clock


def test_driver_starts_each_session_at_its_scheduled_time():
    spec = ArrivalSpec(process="poisson", rate_per_s=5)
    d, started, dropped, _, clock = driver(spec)
    d.run()
    expected = ArrivalSchedule(spec, 7, "run").times(10.0)
    assert [a.k for a, _ in started] == list(range(len(expected)))
    assert [t - 1000.0 for _, t in started] == pytest.approx(list(expected))
    assert all(a.t_scheduled == t for a, t in started)  # open loop: no lateness at all
    assert not dropped and d.due == d.started == len(expected)


def test_driver_keeps_the_rate_however_slow_the_sessions():
    # No session ever finishes (an unbounded cap): starts still follow the schedule.
    d, started, _, pending, _ = driver(ArrivalSpec(process="constant", rate_per_s=4))
    d.run()
    assert len(started) == 40 and len(pending) == 40


def test_workers_split_the_global_schedule():
    spec = ArrivalSpec(process="gamma", rate_per_s=3, cv=2.0)
    one = driver(spec)
    one[0].run()
    union = []
    for w in range(3):
        d = driver(spec, worker=w, n=3)
        d[0].run()
        union += [(a.k, a.class_name, round(a.t_scheduled, 9)) for a, _ in d[1]]
    assert sorted(union) == [(a.k, a.class_name, round(a.t_scheduled, 9)) for a, _ in one[1]]


def test_cap_queue_starts_late_and_records_the_lateness():
    spec = ArrivalSpec(process="constant", rate_per_s=2, max_in_flight=1, at_cap="queue")
    d, started, dropped, pending, clock = driver(spec, until=3.0)
    d.run()  # 6 due at 0, .5, ..., 2.5; only the first starts (nothing finishes)
    assert [a.k for a, _ in started] == [0] and len(d.waiting) == 5
    clock.t += 1.0  # the schedule's last wait ended at 2.5 s
    pending.pop(0)()  # session 0 ends at 3.5 s: the oldest queued one (due 0.5) starts 3 s late
    assert [a.k for a, _ in started] == [0, 1]
    a1, t1 = started[1]
    assert t1 - a1.t_scheduled == pytest.approx(3.0)
    d.stop()  # the rest never started: recorded, not forgotten
    assert [a.k for a, _ in dropped] == [2, 3, 4, 5]
    assert all("still queued" in why for _, why in dropped)


def test_cap_drop_counts_every_drop():
    spec = ArrivalSpec(process="constant", rate_per_s=2, max_in_flight=2, at_cap="drop")
    d, started, dropped, _, _ = driver(spec, until=3.0)
    d.run()
    assert len(started) == 2 and len(dropped) == 4 and d.dropped == 4
    assert all(why == "dropped at max_in_flight" for _, why in dropped)


def test_no_queued_session_starts_once_the_run_stops():
    spec = ArrivalSpec(process="constant", rate_per_s=2, max_in_flight=1)
    d, started, _, pending, _ = driver(spec, until=2.0)
    d.run()
    d.stop()
    pending[0]()  # the cancelled session ends after the stop
    assert len(started) == 1


def test_rate_curve_segments_drive_the_driver():
    spec = ArrivalSpec(process="constant", rate_per_s=1)
    clock = FakeClock()
    got = []
    d = StreamDriver(
        Stream("run", spec, {"a": 1.0}), seed=1, worker=0, n_workers=1, t0=clock(),
        start=lambda a, done: got.append(a.t_scheduled - 1000.0), drop=lambda a, w: None,
        segments=[(0.0, 5.0, 1.0, 1.0), (5.0, 10.0, 4.0, 4.0)], clock=clock, sleep=clock.sleep,
    )  # fmt: skip
    d.run()
    assert sum(t < 5 for t in got) == 5 and sum(t >= 5 for t in got) == 20


# ---------------------------------------------------------------- the load model


MIXED_OPEN = """
schema_version: 1
classes:
  fg: {weight: 3, output: {tokens: 5}}
  chat: {weight: 1, output: {tokens: 5}}
  bg: {fixed_count: 2, output: {tokens: 5}}
run: {users: 5, arrival: {process: poisson, rate_per_s: 30pm}}
"""


def test_run_arrival_opens_weighted_classes_and_keeps_fixed_ones_closed(tmp_path):
    p = load_profile(write(tmp_path, MIXED_OPEN))
    (s,) = streams(p)
    assert s.name == "run" and s.spec.rate_per_s == 0.5 and s.weights == {"fg": 3.0, "chat": 1.0}
    assert closed_classes(p) == [("bg", 0.0, 2)] and closed_users(p, 5) == 2
    picks = [ClassPicker(3, s.weights)(k) for k in range(2000)]
    assert 0.7 < picks.count("fg") / 2000 < 0.8


def test_class_arrival_makes_only_that_class_open(tmp_path):
    text = """
schema_version: 1
classes:
  fg: {weight: 1, output: {tokens: 5}, arrival: {process: constant, rate_per_s: 2}}
  bg: {weight: 1, output: {tokens: 5}}
"""
    p = load_profile(write(tmp_path, text))
    assert [s.name for s in streams(p)] == ["class:fg"] and is_open_loop(p)
    assert closed_classes(p) == [("bg", 1.0, None)] and closed_users(p, 7) == 7


@pytest.mark.parametrize(
    "text, needle",
    [
        ("classes: {a: {arrival: {rate_per_s: 1}}}\nrun: {arrival: {rate_per_s: 1}}",
         "run.arrival already starts"),
        ("classes: {a: {fixed_count: 1}}\nrun: {arrival: {rate_per_s: 1}}",
         "no weighted class"),
        ("classes: {a: {fixed_count: 1, arrival: {rate_per_s: 1}}}", "no fixed_count"),
        ("classes: {a: {arrival: {rate_per_s: 1}}}\n"
         "run: {stages: [{duration_s: 5, arrival_rate: 1}]}", "drive the run-level stream"),
        ("classes: {a: {}}\nrun: {stages: [{duration_s: 5, users: 1}, "
         "{duration_s: 5, arrival_rate: 1}]}", "same one"),
        ("classes: {a: {arrival: {rate_per_s: 0}}}", "rate_per_s"),
        ("classes: {a: {arrival: {rate_per_s: 1, process: gamma}}}", "needs cv"),
        ("classes: {a: {}}\nrun: {stages: []}", "at least one stage"),
    ],
)  # fmt: skip
def test_bad_load_models_are_profile_errors(tmp_path, text, needle):
    lines = problems(write(tmp_path, "schema_version: 1\n" + text))
    assert any(needle in line for line in lines), lines


# ---------------------------------------------------------------- run options


def test_arrival_options_apply_to_run_arrival():
    s = resolve_spec(
        {"profile": "mixed", "arrival_rate": "30pm", "arrival": "gamma:2", "max_in_flight": "8",
         "at_cap": "drop"}
    )  # fmt: skip
    a = s.profile.run.arrival
    assert (a.process, a.rate_per_s, a.cv, a.max_in_flight, a.at_cap) == (
        "gamma",
        0.5,
        2,
        8,
        "drop",
    )
    assert s.users == 2  # mixed's two fixed_count background jobs stay closed-loop users
    assert json.loads(s.to_json())["profile"]["run"]["arrival"]["rate_per_s"] == 0.5


def test_open_loop_only_runs_one_idle_locust_user():
    assert resolve_spec({"profile": "quickstart", "arrival_rate": "2"}).users == 1


def test_stages_set_the_run_length():
    s = resolve_spec(
        {"profile": "quickstart",
         "sets": ['run.stages=[{"duration_s":5,"users":1},{"duration_s":7,"users":2}]']}
    )  # fmt: skip
    assert s.duration_s == 12


@pytest.mark.parametrize(
    "values, needle",
    [
        ({"arrival_rate": "0"}, "--arrival-rate must be a finite number > 0"),
        ({"arrival_rate": "-3pm"}, "--arrival-rate"),
        ({"arrival_rate": "fast"}, "is not a rate"),
        ({"arrival_rate": "1e9"}, "above the limit"),
        ({"arrival": "uniform", "arrival_rate": "1"}, "is not a process"),
        ({"arrival": "gamma", "arrival_rate": "1"}, "needs its CV"),
        ({"arrival": "poisson"}, "needs --arrival-rate"),
        ({"max_in_flight": "0", "arrival_rate": "1"}, "at least 1"),
        (
            {"arrival_rate": "1", "sets": ['run.stages=[{"duration_s":5,"arrival_rate":2}]']},
            "conflicts with the profile's arrival_rate stages",
        ),
    ],
)
def test_bad_arrival_options_are_one_line_usage_errors(values, needle):
    with pytest.raises(UsageError) as e:
        resolve_spec({"profile": "quickstart", **values})
    assert needle in str(e.value) and "\n" not in str(e.value)


# ---------------------------------------------------------------- summaries


def test_arrival_summary_counts_lateness_and_drops_and_says_so_loudly():
    sessions = [
        {"t_scheduled": 10.0, "t_start": 10.001, "arrival_stream": "run"},
        {"t_scheduled": 11.0, "t_start": 11.5, "arrival_stream": "run"},
        {"t_scheduled": None, "t_start": 12.0},  # closed loop: not in the lateness
    ]
    dropped = [{"t_scheduled": 12.0, "reason": "dropped at max_in_flight"}]
    a = arrival_summary(sessions, dropped)
    assert (a["scheduled"], a["started"], a["dropped"], a["delayed"]) == (3, 2, 1, 1)
    assert a["max_s"] == pytest.approx(0.5) and a["fell_behind"]
    lines = arrival_lines(a)
    assert "WARNING" in lines[-1] and "FELL BEHIND" in lines[-1]
    assert arrival_summary([{"t_scheduled": None}], []) is None


def test_on_time_runs_print_no_warning():
    a = arrival_summary([{"t_scheduled": 1.0, "t_start": 1.01}], [])
    assert not a["fell_behind"] and len(arrival_lines(a)) == 1


def test_stage_summary_splits_requests_and_sessions_by_window():
    bounds = [{"index": 0, "start_s": 0.0, "end_s": 10.0, "ramp_s": 0.0, "users": 1},
              {"index": 1, "start_s": 10.0, "end_s": 20.0, "ramp_s": 0.0, "users": 4}]  # fmt: skip
    req = [
        {"t_start": 105.0, "status": "ok", "ttft_ms": 100.0, "tpot_ms": 5.0, "user_class": "a"},
        {"t_start": 112.0, "status": "ok", "ttft_ms": 900.0, "tpot_ms": 9.0, "user_class": "a"},
        {"t_start": 113.0, "status": "error", "user_class": "a"},
        {"t_start": 130.0, "status": "ok", "ttft_ms": 1.0, "user_class": "a"},  # after: ignored
    ]
    sess = [{"t_scheduled": 111.0, "t_start": 111.2}]
    rows = stage_summary(bounds, 100.0, req, sess, {"a": {"ttft_p95_ms": 500.0}})
    assert [r["requests"] for r in rows] == [1, 2] and rows[1]["errors"] == 1
    assert rows[0]["t_start"] == 100.0 and rows[1]["t_end"] == 120.0
    assert rows[0]["goodput_ratio"] == 1.0 and rows[1]["goodput_ratio"] == 0.0
    assert rows[1]["ttft_p95_ms"] == 900.0 and rows[0]["lateness"] is None
    assert rows[1]["lateness"]["max_s"] == pytest.approx(0.2)


# ---------------------------------------------------------------- the stages shape


def _check_stages_shape_ticks_from_the_runs_t0():
    import time
    from types import SimpleNamespace

    from workload.locust.load_shape import StagesShape
    from workload.plan.stages import LoadStages

    raw = [{"duration_s": 10, "users": 2}, {"duration_s": 10, "users": 6, "ramp_s": 4}]
    stages = LoadStages(raw)
    prof = SimpleNamespace(run=SimpleNamespace(stages=stages.stages))
    env = SimpleNamespace(agentload=None)
    shape = StagesShape(env, stages, users=1, spawn_rate=1.0)
    assert shape.tick() == (2, 6.0)  # before the test started: stage 0, spawn fast enough
    spec = SimpleNamespace(profile=prof, users=1, spawn_rate=1.0, arrival_t0=time.time() - 12)
    env.agentload = SimpleNamespace(spec=spec)
    users, rate = shape.tick()
    assert users == 4 and rate == 6.0  # 2 s into the 4 s ramp from 2 to 6
    spec.arrival_t0 = time.time() - 25
    assert shape.tick() is None  # the stages are over: Locust stops the run


def _check_rate_stages_shape_keeps_the_closed_users_until_the_end():
    import time
    from types import SimpleNamespace

    from workload.locust.load_shape import StagesShape
    from workload.plan.stages import LoadStages

    stages = LoadStages([{"duration_s": 5, "arrival_rate": 2}])
    prof = SimpleNamespace(run=SimpleNamespace(stages=stages.stages))
    spec = SimpleNamespace(profile=prof, users=3, spawn_rate=3.0, arrival_t0=time.time() - 1)
    shape = StagesShape(SimpleNamespace(agentload=SimpleNamespace(spec=spec)), stages, 3, 3.0)
    assert shape.tick() == (3, 3.0)
    spec.arrival_t0 = time.time() - 6
    assert shape.tick() is None


def _in_a_fresh_process(check: str) -> None:
    """`import locust` monkey-patches threads and sockets for the whole interpreter (the
    in-process simulator of other tests then breaks): shape checks run in their own process."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    p = subprocess.run(
        [sys.executable, "-c", f"import tests.test_open_loop as t; t.{check}()"],
        cwd=root, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr[-3000:]


def test_stages_shape_ticks_from_the_runs_t0():
    _in_a_fresh_process("_check_stages_shape_ticks_from_the_runs_t0")


def test_rate_stages_shape_keeps_the_closed_users_until_the_end():
    _in_a_fresh_process("_check_rate_stages_shape_keeps_the_closed_users_until_the_end")


def _sessions(late_s: list[float]) -> list[dict]:
    return [{"t_scheduled": 100.0 + i, "t_start": 100.0 + i + x} for i, x in enumerate(late_s)]


def test_one_late_start_of_ten_is_a_note_not_a_warning():
    """Issue 30 item 4: 10 due, 10 started, 0 dropped, 1 > 250 ms late: the p99 of ten
    samples is their maximum, so this is a note with what to do, never the loud warning."""
    a = arrival_summary(_sessions([0.01] * 9 + [0.261]), [])
    assert (a["scheduled"], a["started"], a["dropped"], a["delayed"]) == (10, 10, 0, 1)
    assert not a["fell_behind"] and a["lateness_verdict"] == "note"
    lines = arrival_lines(a)
    assert not any("FELL BEHIND" in line or "WARNING" in line for line in lines)
    assert lines[-1].startswith("note: 1 of 10 (10 %) sessions due started more than 250ms late")
    assert "too few to say" in lines[-1] and "add --workers" in lines[-1]


def test_late_share_above_the_threshold_with_enough_sessions_falls_behind():
    # 40 due, 3 late (7.5 % > 5 %): behind; 40 due, 2 late (5 %): a note
    a = arrival_summary(_sessions([0.01] * 37 + [0.4] * 3), [])
    assert (
        a["fell_behind"]
        and "3 of 40 (8 %) sessions due started more than 250ms" in (a["lateness_why"])
    )
    assert "FELL BEHIND" in arrival_lines(a)[-1] and "3 of 40" in arrival_lines(a)[-1]
    b = arrival_summary(_sessions([0.01] * 38 + [0.4] * 2), [])
    assert not b["fell_behind"] and b["lateness_verdict"] == "note"


def test_lateness_drifting_up_falls_behind_even_below_the_tolerance():
    drift = [0.01 * i for i in range(18)]  # 0 -> 170 ms, no start past 250 ms
    a = arrival_summary(_sessions(drift), [])
    assert a["delayed"] == 0 and a["fell_behind"] and "kept growing" in a["lateness_why"]
    flat = arrival_summary(_sessions([0.15, 0.01, 0.12] * 6), [])
    assert flat["lateness_verdict"] == "on time" and not flat["fell_behind"]


def test_drops_beyond_the_share_fall_behind_whatever_the_count():
    dropped = [{"t_scheduled": 200.0, "reason": "dropped at max_in_flight"}]
    a = arrival_summary(_sessions([0.0] * 9), dropped)
    assert (
        a["fell_behind"] and a["lateness_why"] == "1 of 10 (10 %) sessions due were never started"
    )


def test_the_console_can_say_when_the_next_arrival_is_due():
    """Issue 30 item 5: before a late first arrival the progress line said only "reqs 0"."""
    clock = FakeClock()
    seen: list[float] = []
    ol = OpenLoop(rt=None)
    d = StreamDriver(
        Stream("trace", ArrivalSpec(rate_per_s=1.0), {"trace": 1.0}),
        seed=1, worker=0, n_workers=1, t0=clock(),
        start=lambda a, done: done(), drop=lambda a, why: None,
        clock=clock, schedule=TraceSchedule([12.0, 20.0]),
        sleep=lambda s: (seen.append(ol.next_arrival_in(clock())), clock.sleep(s)),
    )  # fmt: skip
    ol.drivers.append(d)
    d.run()
    assert seen == [12.0, 8.0] and d.next_due is None
    assert ol.next_arrival_in(clock()) is None  # nothing left to arrive
    d.next_due = clock() + 5.0
    ol.sessions = [object()]  # a session running: it is not idle
    assert ol.next_arrival_in(clock()) is None
