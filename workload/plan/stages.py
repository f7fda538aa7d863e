"""Load stages: a run's load level over time, as consecutive stages.

``run.stages`` in a profile is a list; each stage holds its length and one load level,
either concurrent ``users`` (closed loop) or a session ``arrival_rate`` (open loop; a
number per second or a string such as ``"30pm"``, see ``workload.plan.arrivals``)::

    run:
      stages:
        - {duration_s: 60, arrival_rate: 30pm}
        - {duration_s: 120, arrival_rate: 2, ramp_s: 30}   # 0.5/s -> 2/s over 30 s, then hold
        - {duration_s: 60, arrival_rate: 0}                # cool-down: no new sessions

All stages use the same dimension (a users stage next to a rate stage has no common
level to ramp between). Stages follow each other (stage i+1 starts where i ends), so
they never overlap. ``ramp_s`` ramps linearly from the previous stage's level (0 before
the first) to this stage's over its first ``ramp_s`` seconds; without it the level
steps at the boundary.

``LoadStages.target_at(t)`` gives the level at t seconds into the run, or None once all
stages are over: the shape a Locust ``LoadTestShape.tick()`` needs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from workload.errors import StageError
from workload.plan.arrivals import one_line_error, parse_rate

MAX_STAGES = 1000
MAX_TOTAL_S = 30 * 86_400.0  # a month: longer is a typo, not a load test
MAX_USERS = 1_000_000

Dimension = Literal["users", "arrival_rate"]


class Stage(BaseModel):
    """One load stage: how long, and at which level (users or arrival_rate)."""

    model_config = ConfigDict(extra="forbid")

    duration_s: float = Field(
        gt=0, le=MAX_TOTAL_S, allow_inf_nan=False, description="Stage length (s)."
    )
    users: int | None = Field(
        None, ge=0, le=MAX_USERS, description="Concurrent users (sessions in flight) in this stage."
    )
    arrival_rate: float | None = Field(
        None,
        description="Session starts per second (or '30pm' per minute); 0 = no new sessions.",
    )
    ramp_s: float = Field(
        0.0,
        ge=0,
        allow_inf_nan=False,
        description="Ramp from the previous level (0 before the first stage) over this many seconds.",
    )

    @field_validator("arrival_rate", mode="before")
    @classmethod
    def _rate(cls, v: Any) -> Any:
        if v is None or (not isinstance(v, bool) and isinstance(v, (int, float)) and v == 0):
            return v
        if isinstance(v, str) and v.strip() in ("0", "0.0", "0pm", "0ps"):
            return 0.0
        return parse_rate(v, "arrival_rate")

    @model_validator(mode="after")
    def _one_level(self) -> Stage:
        if (self.users is None) == (self.arrival_rate is None):
            raise ValueError("a stage sets exactly one of users or arrival_rate")
        if self.ramp_s > self.duration_s:
            raise ValueError(
                f"ramp_s {self.ramp_s:g} is longer than the stage ({self.duration_s:g} s)"
            )
        return self

    @property
    def dimension(self) -> Dimension:
        return "users" if self.users is not None else "arrival_rate"

    @property
    def level(self) -> float:
        return float(self.users if self.users is not None else self.arrival_rate or 0.0)


def check_stages(stages: list[Stage]) -> list[Stage]:
    """The stages if they form one plan: 1..MAX_STAGES, one dimension, finite total."""
    if not stages:
        raise StageError("stages: give at least one stage")
    if len(stages) > MAX_STAGES:
        raise StageError(f"stages: at most {MAX_STAGES} stages, got {len(stages)}")
    dims = {s.dimension for s in stages}
    if len(dims) > 1:
        first = stages[0].dimension
        bad = next(i for i, s in enumerate(stages) if s.dimension != first)
        raise StageError(
            f"stages: stage {bad} uses {stages[bad].dimension} but stage 0 uses {first};"
            " all stages must use the same one"
        )
    total = math.fsum(s.duration_s for s in stages)
    if not math.isfinite(total) or total > MAX_TOTAL_S:
        raise StageError(
            f"stages: total duration {total:g} s is over the limit of {MAX_TOTAL_S:g} s"
        )
    return stages


# The profile field type: ``stages: StageList | None = None`` under ``run``.
StageList = Annotated[list[Stage], AfterValidator(check_stages)]


@dataclass(frozen=True, slots=True)
class Target:
    """The load level at one moment: users or arrival_rate (the other is None)."""

    users: int | None
    arrival_rate: float | None
    stage_index: int


class LoadStages:
    """Consecutive load stages with level-at-time lookups (pure; no clock inside)."""

    def __init__(self, stages: list[Stage] | list[dict[str, Any]]) -> None:
        parsed: list[Stage] = []
        for i, s in enumerate(stages):
            try:
                parsed.append(s if isinstance(s, Stage) else Stage.model_validate(s))
            except ValueError as e:
                raise StageError(f"stages[{i}]: {one_line_error(e)}") from None
        self.stages = check_stages(parsed)
        self.dimension: Dimension = self.stages[0].dimension
        self.starts: list[float] = []
        t = 0.0
        for s in self.stages:
            self.starts.append(t)
            t += s.duration_s
        self.total_s = t

    def _level_at(self, i: int, t: float) -> float:
        s = self.stages[i]
        into = t - self.starts[i]
        if s.ramp_s > 0 and into < s.ramp_s:
            prev = self.stages[i - 1].level if i > 0 else 0.0
            return prev + (s.level - prev) * (into / s.ramp_s)
        return s.level

    def stage_index(self, t: float) -> int | None:
        """The stage running at t seconds (None once all are over)."""
        if not math.isfinite(t) or t < 0:
            raise StageError(f"time into the run must be finite and >= 0, got {t!r}")
        if t >= self.total_s:
            return None
        lo, hi = 0, len(self.starts) - 1
        while lo < hi:  # last stage with start <= t
            mid = (lo + hi + 1) // 2
            if self.starts[mid] <= t:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def target_at(self, t: float) -> Target | None:
        """The level at t seconds into the run, or None when the stages are over."""
        i = self.stage_index(t)
        if i is None:
            return None
        level = self._level_at(i, t)
        if self.dimension == "users":
            return Target(users=math.floor(level + 0.5), arrival_rate=None, stage_index=i)
        return Target(users=None, arrival_rate=level, stage_index=i)

    def boundaries(self) -> list[dict[str, Any]]:
        """One row per stage for reports: index, start_s, end_s, ramp_s and its level."""
        return [
            {
                "index": i,
                "start_s": self.starts[i],
                "end_s": self.starts[i] + s.duration_s,
                "ramp_s": s.ramp_s,
                self.dimension: s.users if self.dimension == "users" else s.arrival_rate,
            }
            for i, s in enumerate(self.stages)
        ]

    def rate_segments(self) -> list[tuple[float, float, float, float]]:
        """The arrival-rate curve as (t0, t1, rate_at_t0, rate_at_t1) pieces, for ``warp``."""
        if self.dimension != "arrival_rate":
            raise StageError("rate_segments: these stages set users, not arrival_rate")
        out: list[tuple[float, float, float, float]] = []
        prev = 0.0
        for t0, s in zip(self.starts, self.stages, strict=True):
            if s.ramp_s > 0:
                out.append((t0, t0 + s.ramp_s, prev, s.level))
            if s.duration_s > s.ramp_s:
                out.append((t0 + s.ramp_s, t0 + s.duration_s, s.level, s.level))
            prev = s.level
        return out

    def peak(self) -> float:
        """The highest level any stage reaches."""
        return max(s.level for s in self.stages)
