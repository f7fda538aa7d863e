"""The Locust user that plays agent sessions.

One Locust user class, `AgentUser`, plays every traffic class of a profile:
each user's traffic class is a pure function of its global user index
(fixed-count classes first, then smooth weighted round-robin), so the start
form can switch profiles and a run split over N workers plays exactly the
sessions one process would. The session itself (steps, sleeps, bodies,
history) is planned by `workload.plan.sessions`; this class only sleeps, sends and
records.
"""

from __future__ import annotations

import hashlib
import time
from typing import Any

import gevent
from gevent import GreenletExit
from locust import User, constant, task
from locust.exception import StopUser

from workload.measure.client import request_id_for
from workload.measure.records import STATUS_CANCELLED, STATUS_OK, RequestRecord, SessionRecord
from workload.plan.payloads import content_hash


def assign_class(classes: list[tuple[str, float, int | None]], index: int) -> str:
    """Traffic class of the user with this global index.

    `classes` is [(name, weight, fixed_count)], in profile order. Fixed-count
    classes take the first indices; the rest follow weights by smooth weighted
    round-robin, so any prefix of users is as close to the weights as it can be.
    """
    fixed = [(n, c) for n, _, c in classes if c]
    for name, count in fixed:
        if index < count:
            return name
        index -= count
    weighted = [(n, w) for n, w, c in classes if not c and w > 0]
    if not weighted:
        return fixed[-1][0] if fixed else classes[0][0]
    return _round_robin(tuple(weighted), index)


# Smooth weighted round-robin is a sequence: replaying it from the start for every user made
# spawning quadratic (49 ms of blocked hub per user at 10,000 users). Each weight table keeps
# the sequence so far and its state, and extends it on demand: same choices, O(1) amortised.
_WRR: dict[tuple[tuple[str, float], ...], tuple[list[str], list[float]]] = {}


def _round_robin(weighted: tuple[tuple[str, float], ...], index: int) -> str:
    seq, current = _WRR.get(weighted) or _WRR.setdefault(weighted, ([], [0.0] * len(weighted)))
    if index < len(seq):
        return seq[index]
    total = sum(w for _, w in weighted)
    rng = range(len(weighted))
    while len(seq) <= index:
        for i, (_, w) in enumerate(weighted):
            current[i] += w
        chosen = max(rng, key=current.__getitem__)
        current[chosen] -= total
        seq.append(weighted[chosen][0])
    return seq[index]


class AgentUser(User):
    """Plays agent sessions of its traffic class, one after another.

    Subclass it in your own locustfile to add behaviour; call
    `workload.locust.register(events)` there so the runtime is set up.
    """

    wait_time = constant(0)  # sessions carry their own think time and tool pauses

    def on_start(self) -> None:
        rt = self.environment.agentload
        self.runtime = rt
        if rt is None or rt.planner is None:
            return  # setup failed (bad start-form input): the runner is stopping this test
        self.user_index = rt.next_user_index()
        # An open-loop-only profile has no closed-loop class: this user only keeps the run up.
        self.traffic_class = (
            assign_class(rt.class_table, self.user_index) if rt.class_table else None
        )
        self.session_index = 0

    @task
    def play_session(self) -> None:
        rt = self.runtime
        if rt is None or rt.planner is None:
            raise StopUser()
        if self.traffic_class is None:
            gevent.sleep(
                1.0
            )  # sessions start by their arrival schedule (workload.locust.open_loop)
            return
        limit = rt.spec.sessions_per_user
        if limit and self.session_index >= limit:
            rt.user_done()
            raise StopUser()
        rt.pacer.wait()  # planning waits for the loop to have read every ready socket
        session = rt.planner.new_session(self.traffic_class, self.user_index, self.session_index)
        self.session_index += 1
        play(rt, session)


def play(rt: Any, session: Any, arrival: Any = None, parent: str | None = None) -> SessionRecord:
    """Drive one session to its end; record every attempt and the session.

    The work between requests runs when `rt.pacer` admits it (workload.locust.pacing).

    ``arrival`` (open loop: a ``workload.locust.open_loop.Arrival``) adds its scheduled start;
    ``parent``: the session id of the session that started this subagent one.
    """
    srec = SessionRecord(
        run_id=rt.run_id,
        worker=rt.worker_name,
        user_class=session.class_name,
        session_id=session.session_id,
        t_start=time.time(),
        steps_planned=session.steps_planned,
        parent_session=getattr(session, "parent_session", None),
    )
    if arrival is not None:
        srec.t_scheduled = arrival.t_scheduled
        srec.arrival_index = arrival.k
        srec.arrival_stream = arrival.stream
    t0 = time.perf_counter_ns()
    children: dict[str, gevent.Greenlet] = {}  # subagent sessions running beside this one
    rt.live.sessions_started += 1
    if rt.otel is not None:
        rt.otel.session_started(session.session_id, session.class_name, srec.t_start, parent)
    try:
        while True:
            step = session.next_step()
            joins = _start_children(rt, session, children)
            if step is None:
                break
            t_wait = time.time()
            _pause(rt, step, joins, children)
            if rt.otel is not None:  # the wait as a span of the session's trace
                rt.otel.waited(session.session_id, t_wait, time.time(),
                               float(step.tool_pause_s or 0.0), float(step.think_s or 0.0))  # fmt: skip
            req = step.request
            req.request_id = request_id_for(rt.seed, session.session_id, step.step, req.attempt)
            if rt.otel is not None:  # --otlp-traces: the server's span goes under the request's
                req.traceparent = rt.otel.traceparent(session.session_id, req.request_id)
            rt.live.requests_started += 1
            rec: RequestRecord = rt.client.exchange(req)
            stopped = False
            if rec.status != STATUS_CANCELLED:
                # recording this one and planning the next wait until every ready socket was
                # read: streams that ended together must not delay other streams' first tokens
                try:
                    rt.pacer.wait()
                except GreenletExit:
                    stopped = True  # the run stopped while queued: the answer is still recorded
            rec.trace_index = getattr(session, "trace_index", None)  # --trace: request k
            rec.reasoning_requested = getattr(step, "reasoning_tokens", 0) or None
            rec.body_hash = hashlib.blake2b(req.body, digest_size=8).hexdigest()
            rec.content_hash = content_hash(req.body)
            session.observe(rec)
            if session.outcome == "tool_loop_failure":
                rec.tool_loop_failure = session.reason or "tool loop failed"
            rt.record_request(rec)
            _account(srec, rec)
            if stopped or rec.status == STATUS_CANCELLED:
                raise GreenletExit()
        gevent.joinall(list(children.values()))  # the session ends when its subagents have
        srec.outcome = session.outcome or "completed"
        srec.reason = session.reason
    except GreenletExit:
        gevent.killall(list(children.values()), block=True, timeout=5)
        srec.outcome = "cancelled"
        srec.reason = "the run stopped mid-session"
        raise
    finally:
        srec.duration_ms = (time.perf_counter_ns() - t0) / 1e6
        rt.record_session(srec)
    return srec


def _pause(rt: Any, step: Any, joins: list[str], children: dict[str, gevent.Greenlet]) -> None:
    """Sleep before a step: its tools' time, then the subagents it waits for, then think time."""
    if not joins:
        pause = float(step.think_s or 0.0) + float(step.tool_pause_s or 0.0)
        if pause > 0:
            gevent.sleep(pause)
            rt.pacer.wait()
        return
    if step.tool_pause_s:
        gevent.sleep(float(step.tool_pause_s))  # the children run meanwhile: the slowest wins
    gevent.joinall([children.pop(j) for j in joins if j in children])
    if step.think_s:
        gevent.sleep(float(step.think_s))
    rt.pacer.wait()


def _start_children(rt: Any, session: Any, children: dict[str, gevent.Greenlet]) -> list[str]:
    """Start the subagent sessions now due (a replayed agent trace); the ones to wait for."""
    due = getattr(session, "children_due", None)
    if due is None:
        return []
    starts, joins = due()
    for c in starts:
        children[c.session.session_id] = gevent.spawn(
            _play_child, rt, c.session, c.delay_s, session.session_id
        )
    return list(joins)


def _play_child(rt: Any, session: Any, delay_s: float, parent: str) -> None:
    if delay_s > 0:
        gevent.sleep(delay_s)
    play(rt, session, parent=parent)


def _account(srec: SessionRecord, rec: RequestRecord) -> None:
    srec.requests += 1
    if rec.status == STATUS_OK:
        srec.steps_done = max(srec.steps_done, rec.step)
    elif rec.status != STATUS_CANCELLED:
        srec.errors += 1
    srec.prompt_tokens += rec.prompt_tokens or 0
    srec.completion_tokens += rec.completion_tokens or 0
    srec.cached_tokens += rec.cached_tokens or 0
    srec.tool_calls += len(rec.tool_calls)
    srec.tool_calls_planned += int(bool(rec.planned_tool) and rec.status == STATUS_OK)
    if rec.ttft_ms is not None:
        srec.worst_ttft_ms = max(srec.worst_ttft_ms or 0.0, rec.ttft_ms)
