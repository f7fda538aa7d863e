"""Load stages: validation, level at time t, boundaries, the rate curve."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

from workload.errors import StageError
from workload.plan.arrivals import ArrivalSchedule, ArrivalSpec
from workload.plan.stages import LoadStages, Stage, StageList, Target, check_stages

RATES = [
    {"duration_s": 60, "arrival_rate": "30pm"},
    {"duration_s": 120, "arrival_rate": 2, "ramp_s": 30},
    {"duration_s": 60, "arrival_rate": 0},
]
USERS = [
    {"duration_s": 10, "users": 4, "ramp_s": 10},
    {"duration_s": 20, "users": 10},
    {"duration_s": 10, "users": 2, "ramp_s": 4},
]


def test_rate_stages_target_at():
    ls = LoadStages(RATES)
    assert ls.dimension == "arrival_rate"
    assert ls.total_s == 240
    assert ls.target_at(0) == Target(users=None, arrival_rate=0.5, stage_index=0)
    assert ls.target_at(59.999) == Target(None, 0.5, 0)
    assert ls.target_at(60) == Target(None, 0.5, 1)  # a ramp starts at the previous level
    assert ls.target_at(75).arrival_rate == pytest.approx(1.25)
    assert ls.target_at(90) == Target(None, 2.0, 1)
    assert ls.target_at(179.9) == Target(None, 2.0, 1)
    assert ls.target_at(180) == Target(None, 0.0, 2)
    assert ls.target_at(240) is None
    assert ls.target_at(1e9) is None
    assert ls.peak() == 2.0


def test_user_stages_target_at_rounds_ramps():
    ls = LoadStages(USERS)
    assert ls.dimension == "users"
    assert ls.target_at(0) == Target(users=0, arrival_rate=None, stage_index=0)
    assert ls.target_at(5).users == 2
    assert ls.target_at(9.99).users == 4
    assert ls.target_at(10) == Target(10, None, 1)  # no ramp: a step
    assert ls.target_at(30).users == 10
    assert ls.target_at(32).users == 6  # 10 -> 2 over 4 s
    assert ls.target_at(34).users == 2
    assert ls.target_at(40) is None


def test_boundaries_for_reports():
    assert LoadStages(USERS).boundaries() == [
        {"index": 0, "start_s": 0.0, "end_s": 10.0, "ramp_s": 10.0, "users": 4},
        {"index": 1, "start_s": 10.0, "end_s": 30.0, "ramp_s": 0.0, "users": 10},
        {"index": 2, "start_s": 30.0, "end_s": 40.0, "ramp_s": 4.0, "users": 2},
    ]
    b = LoadStages(RATES).boundaries()
    assert [r["arrival_rate"] for r in b] == [0.5, 2.0, 0.0]
    assert [(r["start_s"], r["end_s"]) for r in b] == [(0, 60), (60, 180), (180, 240)]


def test_rate_segments_and_warped_schedule():
    ls = LoadStages(RATES)
    segs = ls.rate_segments()
    assert segs == [
        (0, 60, 0.5, 0.5),
        (60, 90, 0.5, 2.0),
        (90, 180, 2.0, 2.0),
        (180, 240, 0.0, 0.0),
    ]
    t = ArrivalSchedule(ArrivalSpec(process="constant", rate_per_s=1), seed=0).times_warped(segs)
    assert len(t) == 248  # 30 + 37.5 + 180 expected starts, first at 0
    assert t.max() < 180  # the cool-down starts nobody
    with pytest.raises(StageError, match="users"):
        LoadStages(USERS).rate_segments()


def test_stage_list_in_a_profile_model():
    class Run(BaseModel):
        model_config = ConfigDict(extra="forbid")
        stages: StageList | None = None

    r = Run.model_validate({"stages": RATES})
    assert r.stages is not None and [s.dimension for s in r.stages] == ["arrival_rate"] * 3
    assert LoadStages(r.stages).total_s == 240
    with pytest.raises(ValidationError, match="same one"):
        Run.model_validate({"stages": [RATES[0], USERS[1]]})


@pytest.mark.parametrize(
    "stages,msg",
    [
        ([], "at least one"),
        ([{"duration_s": 0, "users": 1}], "greater than 0"),
        ([{"duration_s": -5, "users": 1}], "greater than 0"),
        ([{"duration_s": float("inf"), "users": 1}], "finite"),
        ([{"duration_s": float("nan"), "users": 1}], "finite"),
        ([{"duration_s": 1e12, "users": 1}], "less than or equal"),
        ([{"duration_s": 10}], "exactly one"),
        ([{"duration_s": 10, "users": 1, "arrival_rate": 1}], "exactly one"),
        ([{"duration_s": 10, "users": -1}], "greater than or equal to 0"),
        ([{"duration_s": 10, "arrival_rate": -1}], "> 0"),
        ([{"duration_s": 10, "arrival_rate": "1e9"}], "limit"),
        ([{"duration_s": 10, "arrival_rate": "lots"}], "not a rate"),
        ([{"duration_s": 10, "users": 1, "ramp_s": 11}], "longer than the stage"),
        ([{"duration_s": 10, "users": 1, "ramp_s": -1}], "greater than or equal to 0"),
        ([{"duration_s": 10, "users": 1, "hold": 3}], "Extra inputs"),
        ([{"duration_s": 10, "users": 1}, {"duration_s": 10, "arrival_rate": 1}], "same one"),
        ([{"duration_s": 2e6, "users": 1}, {"duration_s": 2e6, "users": 1}], "total duration"),
        ([{"duration_s": 1, "users": 1}] * 1001, "at most 1000"),
    ],
)
def test_invalid_stages_one_line(stages, msg):
    with pytest.raises(StageError, match=msg) as e:
        LoadStages(stages)
    assert "\n" not in str(e.value)
    assert isinstance(e.value, ValueError)
    with pytest.raises(ValidationError):  # the same checks hold in a profile
        TypeAdapter(StageList).validate_python(stages)


def test_error_names_the_stage():
    with pytest.raises(StageError, match=r"stages\[1\]"):
        LoadStages([USERS[0], {"duration_s": 10}])


def test_bad_times():
    ls = LoadStages(USERS)
    for t in (-0.1, float("nan"), float("inf")):
        with pytest.raises(StageError):
            ls.target_at(t)


def test_zero_rate_forms_and_check_stages_direct():
    for zero in (0, 0.0, "0", "0pm"):
        assert Stage(duration_s=1, arrival_rate=zero).level == 0.0
    with pytest.raises(StageError):
        check_stages([])
    with pytest.raises(StageError):
        check_stages([Stage(duration_s=1, users=1), Stage(duration_s=1, arrival_rate=1)])
