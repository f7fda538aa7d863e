"""Open-loop session arrivals inside a Locust process: start sessions on schedule.

Each process that plays traffic (local, or each worker) runs one ``StreamDriver`` per
open-loop stream of the profile (``workload.plan.load_model.streams``). A driver walks
its share of the stream's global schedule (session k belongs to worker ``k % N``),
sleeps until each session's start time, and starts a session greenlet, whatever the
server's speed. The in-flight cap (``max_in_flight``, split over workers) is an
``InFlightGate``: at the cap a due session waits in a FIFO and starts late (its lateness
is recorded), or is dropped and written to ``dropped.jsonl``; never silently.

Every open-loop session records ``t_scheduled`` (epoch s), ``arrival_index`` (k) and
``arrival_stream`` next to its actual ``t_start`` in ``sessions.jsonl``. Schedules start
at ``RunSpec.arrival_t0``, one instant for all workers (set by the master).

The scheduling core (``StreamDriver``) takes its clock, sleep and session starter as
arguments, so tests drive it with a fake clock.

A trace replay (``--trace``) is one more stream, ``trace``: its schedule is the trace's
replay offsets (``TraceSchedule``; request k to worker k % N) and each arrival plays the
trace request k as a one-step session. When a process has started and finished its whole
share it tells the runtime (``trace_done``), which ends the run once every process has.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gevent
import gevent.pool

from workload.measure import artifacts
from workload.plan.arrivals import ArrivalSchedule, ArrivalSpec, InFlightGate, share_of_cap
from workload.plan.load_model import ClassPicker, Stream, is_open_loop, streams
from workload.plan.prompts import synth_for
from workload.plan.stages import LoadStages
from workload.plan.traces import (
    TRACE_CLASS,
    TRACE_STREAM,
    TracePrompts,
    TraceSchedule,
    TraceSession,
    root_sessions,
    session_starts,
)
from workload.run.agent_replay import agent_replay_for_process
from workload.run.replay import is_agent_replay, replay_for_process

log = logging.getLogger("agentload")

# Workers receive the spawn message a moment after the master's test start: the
# schedule begins this long after it, so worker 1 is not late for session 1.
DISTRIBUTED_LEAD_S = 3.0


@dataclass(frozen=True, slots=True)
class Arrival:
    """One session due to start: its stream, global index, class and scheduled time (epoch s)."""

    stream: str
    k: int
    class_name: str
    t_scheduled: float


class StreamDriver:
    """Plays one worker's share of one arrival stream (pure scheduling; I/O injected).

    ``start(arrival, done)`` must start the session without blocking and call ``done()``
    when it ends; ``drop(arrival, reason)`` records a session that never started.
    """

    def __init__(
        self,
        stream: Stream,
        *,
        seed: int,
        worker: int,
        n_workers: int,
        t0: float,
        start: Callable[[Arrival, Callable[[], None]], None],
        drop: Callable[[Arrival, str], None],
        until_s: float | None = None,
        segments: Sequence[tuple[float, float, float, float]] | None = None,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] | None = None,
        schedule: Any = None,
    ) -> None:
        self.stream = stream
        # Any object with ``iter_worker`` (a trace's offsets); default: the arrival process.
        self.schedule = schedule or ArrivalSchedule(stream.spec, seed, stream.name)
        self.picker = ClassPicker(seed, stream.weights)
        self.worker, self.n_workers = worker, n_workers
        self.t0 = t0
        self.until_s, self.segments = until_s, segments
        self.gate = InFlightGate(
            share_of_cap(stream.spec.max_in_flight, worker, n_workers), stream.spec.at_cap
        )
        self._start, self._drop = start, drop
        self.clock = clock
        self.sleep = sleep or _gevent_sleep
        self.waiting: dict[int, Arrival] = {}
        self.stopped = False
        self.due = 0  # sessions whose time came
        self.started = 0
        self.dropped = 0
        self.next_due: float | None = None  # when the next session is due (epoch s), if any

    def run(self) -> None:
        """Walk the schedule to its end (or until ``stop``)."""
        for k, offset in self.schedule.iter_worker(
            self.worker, self.n_workers, self.until_s, self.segments
        ):
            due = self.t0 + offset
            self.next_due = due
            wait = due - self.clock()
            if wait > 0:
                self.sleep(wait)
            if self.stopped:
                return
            self.arrive(Arrival(self.stream.name, k, self.picker(k), due))
        self.next_due = None

    def arrive(self, a: Arrival) -> None:
        """Session ``a`` is due: start it, queue it, or drop it (the gate decides)."""
        self.due += 1
        if self.gate.arrive(a.k):
            self._launch(a)
        elif self.gate.at_cap == "drop":
            self.dropped += 1
            self._drop(a, "dropped at max_in_flight")
        else:
            self.waiting[a.k] = a

    def _launch(self, a: Arrival) -> None:
        self.started += 1
        self._start(a, self._finished)

    def _finished(self) -> None:
        if self.stopped:
            return  # the run is ending: no queued session starts now
        k = self.gate.finish()
        if k is not None:
            self._launch(self.waiting.pop(k))

    def stop(self) -> None:
        """End the stream: queued sessions never start; each is recorded as not started."""
        self.stopped = True
        for a in list(self.waiting.values()):
            self.dropped += 1
            self._drop(a, "still queued at max_in_flight when the run ended")
        self.waiting.clear()
        self.gate.queue.clear()


def _gevent_sleep(s: float) -> None:
    gevent.sleep(s)


# ---------------------------------------------------------------- the Locust side


class OpenLoop:
    """A process's arrival drivers, their session greenlets, and the drop log."""

    def __init__(self, rt: Any) -> None:
        self.rt = rt
        self.sessions = gevent.pool.Group()
        self.loops: list[Any] = []
        self.drivers: list[StreamDriver] = []
        self._drop_writer: Any = None
        self.replay: Any = None  # workload.run.replay.Replay when the run replays a trace
        self.prompts: Any = None
        self.agent_sessions: Any = None  # agent-session replay: k -> top-level session k

    def start(self) -> None:
        rt, spec = self.rt, self.rt.spec
        worker = int(rt.worker_name) if rt.role == "worker" else 0
        n_workers = spec.workers if rt.role == "worker" else 1
        t0 = spec.arrival_t0 or time.time()
        if spec.trace:
            self._start_trace(worker, n_workers, t0)
            return
        segments = _rate_segments(spec.profile)
        headless = bool(getattr(rt.env.parsed_options, "headless", False))
        for stream in streams(spec.profile):
            driver = StreamDriver(
                stream,
                seed=spec.seed,
                worker=worker,
                n_workers=n_workers,
                t0=t0,
                start=self._start_session,
                drop=self._record_drop,
                # A web-UI run lasts until stopped; headless ones end at the run time anyway.
                until_s=None if segments or not headless else spec.duration_s,
                segments=segments,
            )
            self.drivers.append(driver)
            self.loops.append(gevent.spawn(driver.run))

    def _start_trace(self, worker: int, n_workers: int, t0: float) -> None:
        rt, spec = self.rt, self.rt.spec
        if is_agent_replay(spec):
            offsets = self._load_agent_trace()
        else:
            self.replay = replay_for_process(spec)  # SetupError: the plugin says it in one line
            self.prompts = TracePrompts(rt.planner.tokenizer, seed=spec.seed)
            offsets = [r.arrival_s for r in self.replay.requests]
        run_arrival = spec.profile.run.arrival
        cap = spec.max_in_flight or (run_arrival.max_in_flight if run_arrival else None)
        at_cap = spec.at_cap or (run_arrival.at_cap if run_arrival else "queue")
        gate = ArrivalSpec.model_validate(  # only the cap is used: the trace sets the times
            {"rate_per_s": 1.0, "max_in_flight": cap, "at_cap": at_cap}
        )
        if rt.role == "local":
            # Reading the trace and probing the server took time since stamp_t0: a local
            # replay starts its schedule now (workers have DISTRIBUTED_LEAD_S for this).
            t0 = max(t0, time.time())
            rt.spec = spec.replace(arrival_t0=t0)
        driver = StreamDriver(
            Stream(TRACE_STREAM, gate, {TRACE_CLASS: 1.0}),
            seed=spec.seed,
            worker=worker,
            n_workers=n_workers,
            t0=t0,
            start=self._start_session,
            drop=self._record_drop,
            until_s=spec.duration_s,
            schedule=TraceSchedule(offsets),
        )
        self.drivers.append(driver)
        self.loops.append(gevent.spawn(self._run_trace, driver))

    def _load_agent_trace(self) -> list[float]:
        """Agent sessions: each arrival is top-level session k, played closed loop."""
        rt = self.rt
        rp = agent_replay_for_process(rt.spec, rt.model)  # SetupError: one line
        self.agent_sessions = root_sessions(rp.trace, synth_for(rt.planner.tokenizer), rp.options)
        return session_starts(rp.trace, rp.options)

    def _run_trace(self, driver: StreamDriver) -> None:
        driver.run()
        if driver.stopped:
            return
        self.sessions.join()
        if not driver.stopped:
            log.info("agentload: this process sent its share of the trace")
            self.rt.trace_done()

    def _new_session(self, a: Arrival) -> Any:
        rt = self.rt
        if self.agent_sessions is not None:
            return self.agent_sessions(a.k)
        if self.replay is None:
            return rt.planner.new_session(a.class_name, a.k, 0)

        req = self.replay.requests[a.k]
        return TraceSession(a.k, req, model=rt.model, prompt=lambda: self.prompts.prompt(a.k, req))

    def _start_session(self, a: Arrival, done: Callable[[], None]) -> None:
        self.sessions.spawn(self._play, a, done)

    def _play(self, a: Arrival, done: Callable[[], None]) -> None:
        from workload.locust.users import play  # deferred: users imports locust, tests do not

        rt = self.rt
        try:
            rt.pacer.wait()  # planning waits for the loop to have read every ready socket
            session = self._new_session(a)
            play(rt, session, arrival=a)
        except Exception as e:  # noqa: BLE001 - one bad session must not end the stream
            log.warning("agentload: open-loop session %s/%d failed: %s", a.stream, a.k, e)
        finally:
            done()

    def _record_drop(self, a: Arrival, reason: str) -> None:
        rt = self.rt
        if self._drop_writer is None:
            suffix = f"-{rt.worker_name}" if rt.role == "worker" else ""
            self._drop_writer = artifacts.JsonlWriter(Path(rt.out_dir) / f"dropped{suffix}.jsonl")
        self._drop_writer.write(
            {
                "run_id": rt.run_id,
                "worker": rt.worker_name,
                "arrival_stream": a.stream,
                "arrival_index": a.k,
                "user_class": a.class_name,
                "t_scheduled": a.t_scheduled,
                "reason": reason,
            }
        )

    def next_arrival_in(self, now: float) -> float | None:
        """Seconds until the next session is due while none is running (the console says
        so instead of a silent "reqs 0"); None when one is running or none is left."""
        if len(self.sessions):
            return None
        dues = [d.next_due for d in self.drivers if d.next_due is not None and not d.stopped]
        left = min(dues) - now if dues else 0.0
        return left if left > 0.5 else None

    def stop(self) -> None:
        """Stop the schedules, cancel sessions in flight (they record themselves), close."""
        for d in self.drivers:
            d.stopped = True
        for g in self.loops:
            g.kill(block=True, timeout=2)
        self.sessions.kill(block=True, timeout=5)
        for d in self.drivers:
            d.stop()
        if self._drop_writer is not None:
            self._drop_writer.close()


def _rate_segments(profile: Any) -> list[tuple[float, float, float, float]] | None:
    stages = profile.run.stages
    if not stages or stages[0].dimension != "arrival_rate":
        return None
    return LoadStages(list(stages)).rate_segments()


def stamp_t0(rt: Any) -> None:
    """Master / local: fix the instant the arrival schedules (and stages) start."""
    if not (is_open_loop(rt.spec.profile) or rt.spec.profile.run.stages or rt.spec.trace):
        return
    lead = DISTRIBUTED_LEAD_S if rt.role == "master" else 0.0
    rt.spec = rt.spec.replace(arrival_t0=time.time() + lead)


def start_open_loop(rt: Any) -> OpenLoop | None:
    """Local / worker: start the profile's arrival streams (None for a closed-loop profile)."""
    if rt.role == "master" or not (streams(rt.spec.profile) or rt.spec.trace):
        return None
    ol = OpenLoop(rt)
    ol.start()
    return ol
