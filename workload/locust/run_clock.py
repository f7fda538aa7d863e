"""The run's length inside Locust: one value, `RunSpec.duration_s`, read by the stop and
by the arrival plan alike, counted from when the users start.

Locust arms its own run-time timer when it spawns the runner, against the event loop's
clock as last read (before the locustfile loaded), and the run's set-up (tokenizer,
prompt pool, target probe: about half a second) then ran inside that time: `--duration
60s` gave 59.4 s of load and `--duration 1s` none at all; and its run time is whole
seconds (90.4 s stopped at 90 s while arrivals planned to 90.4 s). So `agentload run`
gives Locust no run time at all, and plain `locust -f ... --run-time` has its run time
taken over here; `start` arms agentload's own clock once the set-up is done. With a load
shape the shape sets the length (Locust never armed the timer before the shape ended).
"""

from __future__ import annotations

import logging
from typing import Any

import gevent

log = logging.getLogger("agentload")


def take_over_run_time(environment: Any) -> None:
    """Plain `locust --headless --run-time T`: Locust's timer off; T is the spec's duration."""
    opts = environment.parsed_options
    if _clocked(environment) and getattr(opts, "run_time", None):
        opts.agentload_run_time, opts.run_time = opts.run_time, None


def _clocked(environment: Any) -> bool:
    opts = environment.parsed_options
    return (
        opts is not None
        and bool(getattr(opts, "headless", False))
        and not getattr(opts, "worker", False)
        and environment.shape_class is None
    )


def start(environment: Any, duration_s: float) -> Any:
    """Arm the stop `duration_s` from now; None when this process has no run clock (web UI,
    a worker, a load shape, or plain Locust without --run-time)."""
    opts = environment.parsed_options
    if not _clocked(environment) or getattr(environment, "agentload_clock", None) is not None:
        return None
    if not (getattr(opts, "agent_spec_file", "") or getattr(opts, "agentload_run_time", None)):
        return None
    gevent.get_hub().loop.update_now()  # the loop's clock, as of now rather than last read

    def time_up() -> None:
        log.info("agentload: run time of %gs reached, stopping", duration_s)
        if environment.runner is not None:
            environment.runner.quit()

    environment.agentload_clock = gevent.spawn_later(duration_s, time_up)
    return environment.agentload_clock
