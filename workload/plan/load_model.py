"""Which traffic of a profile is open loop (arrival streams) and which is closed loop (users).

- A class with ``arrival:`` is open loop: its own stream ``class:<name>`` starts its sessions.
- ``run.arrival`` (or ``arrival_rate`` stages) makes the whole profile open loop: one stream
  ``run`` starts sessions, each of a weighted class picked by weight (``pick_classes``);
  ``fixed_count`` classes stay closed-loop users (e.g. background jobs next to the traffic).
- Every other class is closed loop: Locust users play its sessions one after another.

Session k of a stream is ``planner.new_session(class, user_index=k, session_index=0)``: a class
is either open or closed, so its session ids never collide, and the same k gives the same
session however many workers play the stream.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from workload.plan.arrivals import ArrivalSpec, pick_classes


@dataclass(frozen=True)
class Stream:
    """One open-loop arrival stream: its name (the schedule's RNG stream) and its classes."""

    name: str
    spec: ArrivalSpec
    weights: dict[str, float]  # class -> weight (one class for a class-level stream)


def run_stream_spec(profile: Any) -> ArrivalSpec | None:
    """The run-level stream's spec: run.arrival, or Poisson for arrival_rate stages."""
    run = profile.run
    if run.arrival is not None:
        return run.arrival
    stages = run.stages
    if stages and stages[0].dimension == "arrival_rate":
        peak = max(s.level for s in stages)
        # the rate curve comes from the stages; rate_per_s only has to be a valid number
        return ArrivalSpec.model_validate(
            {"process": "poisson", "rate_per_s": peak if peak > 0 else 1.0}
        )
    return None


def streams(profile: Any) -> list[Stream]:
    """The profile's open-loop streams (empty for a closed-loop profile)."""
    run_spec = run_stream_spec(profile)
    if run_spec is not None:
        weights = {
            n: float(c.weight or 1.0) for n, c in profile.classes.items() if c.fixed_count is None
        }
        return [Stream("run", run_spec, weights)]
    return [
        Stream(f"class:{n}", c.arrival, {n: 1.0})
        for n, c in profile.classes.items()
        if c.arrival is not None
    ]


def is_open_loop(profile: Any) -> bool:
    """Whether any session of the profile starts by an arrival process."""
    return bool(streams(profile))


def closed_classes(profile: Any) -> list[tuple[str, float, int | None]]:
    """(name, weight, fixed_count) of the closed-loop classes, in profile order."""
    open_names = {n for s in streams(profile) for n in s.weights}
    return [
        (n, float(c.weight or 0), c.fixed_count)
        for n, c in profile.classes.items()
        if n not in open_names
    ]


def closed_users(profile: Any, users: int) -> int:
    """Locust users an open-loop profile needs: its closed-loop classes' users (maybe 0)."""
    table = closed_classes(profile)
    if any(not fixed for _, _, fixed in table):
        return users  # weighted closed classes share the user count as before
    return sum(fixed or 0 for _, _, fixed in table)


class ClassPicker:
    """The class of each session k of a stream: by weight, prefix-stable, grown lazily."""

    def __init__(self, seed: int, weights: dict[str, float]) -> None:
        self.seed = seed
        self.weights = weights
        self.only = next(iter(weights)) if len(weights) == 1 else None
        self._picks: list[str] = []

    def __call__(self, k: int) -> str:
        if self.only is not None:
            return self.only
        if k >= len(self._picks):
            self._picks = pick_classes(
                self.seed, max(k + 1, 2 * len(self._picks), 1024), self.weights
            )
        return self._picks[k]
