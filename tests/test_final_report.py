"""The end of a distributed run: the master waits (bounded) for every worker's final report."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import gevent
from gevent.pool import Group

from workload.locust import final_report


class Events:
    def __init__(self) -> None:
        self.report_to_master = SimpleNamespace(fire=self._fire)
        self.listeners: list[Any] = []

    def _fire(self, **kw: Any) -> None:
        for listener in self.listeners:
            listener(**kw)


class Master:
    """A Locust master's surface that final_report uses: clients, its greenlets, messages."""

    def __init__(self, states: dict[str, str], answer: set[str]) -> None:
        self.clients = {cid: SimpleNamespace(state=s) for cid, s in states.items()}
        self.greenlet = Group()
        self.sent: list[tuple[str, str | None]] = []
        self.answer = answer  # the workers that answer the request
        self.rt = SimpleNamespace(final_from=set())

    def send_message(self, msg_type: str, data: Any = None, client_id: str | None = None) -> None:
        self.sent.append((msg_type, client_id))
        if client_id in self.answer:  # its final report arrives a moment later
            data = {"agentload": {}, final_report.FINAL_KEY: True}
            gevent.spawn_later(0.01, final_report.note_report, self.rt, client_id, data)


def test_the_master_asks_every_connected_worker_and_waits_for_its_final_report() -> None:
    m = Master({"a": "running", "b": "running", "gone": "missing"}, answer={"a", "b"})
    env = SimpleNamespace(runner=m)
    assert final_report.await_final_reports(env, m.rt, wait_s=30) == []
    assert m.rt.final_from == {"a", "b"}
    # a missing worker cannot answer: it is not asked
    assert sorted(m.sent) == [(final_report.MSG_FINISH, "a"), (final_report.MSG_FINISH, "b")]


def test_a_worker_that_already_sent_its_final_report_is_not_asked_again() -> None:
    m = Master({"a": "ready"}, answer=set())
    m.rt.final_from.add("a")  # the web UI's stop: the final report came before client_stopped
    env = SimpleNamespace(runner=m)
    assert final_report.await_final_reports(env, m.rt, wait_s=30) == []
    assert m.sent == []


def test_a_silent_worker_is_named_after_the_bound(capsys: Any) -> None:
    m = Master({"a": "running", "b": "running"}, answer={"a"})
    env = SimpleNamespace(runner=m)
    assert final_report.await_final_reports(env, m.rt, wait_s=0.3) == ["b"]
    assert "no final report within 0.3s from worker(s) b" in capsys.readouterr().err


def test_a_worker_going_missing_while_awaited_ends_the_wait() -> None:
    m = Master({"a": "running"}, answer=set())
    env = SimpleNamespace(runner=m)
    gevent.spawn_later(0.05, setattr, m.clients["a"], "state", "missing")
    assert final_report.await_final_reports(env, m.rt, wait_s=30) == []


def test_no_wait_inside_locusts_own_message_loop() -> None:
    # The last worker quit (or went missing): Locust stops the test from the greenlet that
    # receives messages; waiting there could never receive an answer.
    m = Master({"a": "running"}, answer={"a"})
    env = SimpleNamespace(runner=m)
    g = m.greenlet.spawn(final_report.await_final_reports, env, m.rt, 30)
    assert g.get(timeout=10) == [] and m.sent == []


class Worker:
    def __init__(self) -> None:
        self.client_id = "w1"
        self.sent: list[tuple[str, dict[str, Any]]] = []
        self.stops = 0
        self.env: Any = None

    def send_message(self, msg_type: str, data: Any = None, client_id: str | None = None) -> None:
        self.sent.append((msg_type, data))

    def stop(self) -> None:
        if self.stops == 0:  # Locust fires test_stop once: the plugin sends the final report
            final_report.send_final(self.env)
        self.stops += 1


def test_a_worker_sends_its_last_delta_marked_final_and_answers_once() -> None:
    worker, events = Worker(), Events()
    env = worker.env = SimpleNamespace(runner=worker, events=events)
    events.listeners.append(lambda client_id, data: data.update(agentload={"delta": client_id}))
    final_report.reset(env)
    final_report.on_finish(env)  # asked: stops (test_stop sends the final report)
    assert worker.sent == [("stats", {"agentload": {"delta": "w1"}, final_report.FINAL_KEY: True})]
    final_report.on_finish(env)  # asked again: the final report went already
    assert worker.stops == 2 and len(worker.sent) == 1
    final_report.reset(env)  # a test whose stop sent nothing (set-up failed): it answers itself
    final_report.on_finish(env)
    assert len(worker.sent) == 2 and worker.sent[1][1][final_report.FINAL_KEY] is True
