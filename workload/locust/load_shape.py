"""Load stages through Locust's load-shape mechanism (so the web UI shows them).

When the run's profile has ``run.stages``, ``install_shape`` sets the Environment's
``shape_class`` at init (master / local), before Locust starts the run:

- users stages: ``tick()`` returns the stage's user count (following ramps second by
  second) with a spawn rate high enough to reach each tick's level within the tick;
- arrival_rate stages: the arrival drivers follow the rate curve themselves
  (``workload.locust.open_loop``); the shape holds the closed-loop users steady and keeps
  the run alive for the stages' total duration.

``tick()`` returns None once the stages are over: Locust then stops (headless: quits).
The shape reads the stages of the running test (the start form may change the profile)
and falls back to those the process started with.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from locust import LoadTestShape

from workload.errors import AgentloadError
from workload.locust.options import spec_from_options
from workload.plan.stages import LoadStages

log = logging.getLogger("agentload")


class StagesShape(LoadTestShape):
    """Plays a run's ``run.stages``: users stages as user counts, rate stages as run time."""

    use_common_options = False

    def __init__(self, environment: Any, stages: LoadStages, users: int, spawn_rate: float) -> None:
        super().__init__()
        self.environment = environment
        self.stages = stages
        self.users = users
        self.spawn_rate = spawn_rate
        self._last_stages: Any = None
        self._parsed = stages

    def _current(self) -> tuple[LoadStages, int, float, float]:
        """(stages, users, spawn rate, seconds into the stages) of the running test.

        The stages start at the run's ``arrival_t0`` (after the target was probed), the
        instant the arrival schedules and run.json's stage boundaries use; until the test
        has started, the clock stands at 0.
        """
        rt = getattr(self.environment, "agentload", None)
        spec = getattr(rt, "spec", None)
        stages = getattr(getattr(getattr(spec, "profile", None), "run", None), "stages", None)
        if spec is None or not stages or not spec.arrival_t0:
            return self.stages, self.users, self.spawn_rate, 0.0
        into = max(0.0, time.time() - spec.arrival_t0)
        if stages is not self._last_stages:  # the start form may have changed the profile
            self._last_stages, self._parsed = stages, LoadStages(list(stages))
        return self._parsed, spec.users, spec.spawn_rate, into

    def tick(self) -> tuple[int, float] | None:
        stages, users, spawn_rate, into = self._current()
        target = stages.target_at(into)
        if target is None:
            return None
        if target.users is not None:
            return target.users, max(spawn_rate, stages.peak(), 1.0)
        return max(1, users), max(spawn_rate, 1.0)


def install_shape(environment: Any) -> None:
    """Set ``environment.shape_class`` when the run's profile has stages (else leave it)."""
    opts = environment.parsed_options
    if opts is None or environment.shape_class is not None:
        return
    try:
        spec = spec_from_options(opts, environment.host or "", 1)
    except AgentloadError:
        return  # test_start reports the bad input
    stages = spec.profile.run.stages
    if not stages:
        return
    shape = StagesShape(environment, LoadStages(list(stages)), spec.users, spec.spawn_rate)
    shape.runner = environment.runner
    environment.shape_class = shape
    log.info("agentload: playing %d load stages through a Locust load shape", len(stages))
