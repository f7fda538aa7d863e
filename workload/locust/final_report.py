"""Every worker's last delta reaches the master before the summary is written.

A worker sends its aggregate delta with each Locust stats report (every 3 s). When a run
ends, Locust's master sends `quit`, waits half a second and stops listening; the worker
first stops its users (in-flight requests are recorded as cancelled) and only then sends
its last report. On a busy machine that report came too late, so the master's counts
missed the worker's last records, the summary was rebuilt from the JSONL files (which
hold no per-gap ITL) and stats.json lost its ITL histogram in runs nothing went wrong in.

So the end is a handshake, before Locust's `quit`:

- when the master's test stops, it asks each worker whose final report it has not had
  (``MSG_FINISH``), and waits, bounded by ``WAIT_S``, until every one has answered, gone
  missing or left;
- a worker's test stop (asked, or told by Locust's own `stop`) ends with one last stats
  report, after its users stopped and its files were closed, marked ``FINAL_KEY``: nothing
  it measured comes after it.

A worker that does not answer in time (killed, wedged) is named; its files still count
(`workload.run.reconcile`).
"""

from __future__ import annotations

import sys
import time
from typing import Any

import gevent

MSG_FINISH = "agentload_finish"  # master -> worker: stop now and send your final report
FINAL_KEY = "agentload_final"  # in a worker's stats report: the last one of this test
WAIT_S = 10.0  # the longest the master waits for the workers' final reports


def on_finish(environment: Any, **_kw: Any) -> None:
    """Worker, asked by the master: stop the users (the test_stop hook sends the final
    report); if the test had stopped already, answer with a final report anyway."""
    runner = environment.runner
    if runner is None:
        return
    runner.stop()
    if not sent_final(environment):
        send_final(environment)


def sent_final(environment: Any) -> bool:
    return bool(getattr(environment, "agentload_final_sent", False))


def send_final(environment: Any) -> None:
    """Worker: one stats report now (Locust's own numbers and this test's last delta),
    marked final. Call it after the users stopped and the files were closed."""
    runner = environment.runner
    if runner is None:
        return
    data: dict[str, Any] = {}
    environment.events.report_to_master.fire(client_id=runner.client_id, data=data)
    data[FINAL_KEY] = True
    runner.send_message("stats", data)
    environment.agentload_final_sent = True


def reset(environment: Any) -> None:
    """Worker: a new test starts (web UI), its own final report is still to come."""
    environment.agentload_final_sent = False


def note_report(rt: Any, client_id: str, data: dict[str, Any]) -> None:
    """Master: remember which workers sent their final report for this test."""
    if data.get(FINAL_KEY):
        rt.final_from.add(str(client_id))


def await_final_reports(environment: Any, rt: Any, wait_s: float = WAIT_S) -> list[str]:
    """Master: ask every connected worker for its final report and wait for them (bounded).

    Returns the workers that did not answer in time. Called from the master's test_stop,
    which Locust fires before it sends `quit`; skipped when the test stopped from Locust's
    own message loop (the last worker quit or went missing): waiting there would stop the
    loop that receives the answers, and there is no worker left to ask."""
    runner = environment.runner
    clients = getattr(runner, "clients", None)
    if clients is None or gevent.getcurrent() in getattr(runner, "greenlet", ()):
        return []
    pending = {cid for cid in _connected(clients) if cid not in rt.final_from}
    for cid in sorted(pending):
        runner.send_message(MSG_FINISH, None, client_id=cid)
    deadline = time.monotonic() + wait_s
    while pending and time.monotonic() < deadline:
        gevent.sleep(0.05)
        pending = (pending & _connected(clients)) - rt.final_from
    if pending:
        print(
            f"agentload: no final report within {wait_s:g}s from worker(s) "
            f"{', '.join(sorted(pending))}; the summary counts their JSONL files",
            file=sys.stderr,
            flush=True,
        )
    return sorted(pending)


def _connected(clients: Any) -> set[str]:
    """Worker ids the master still hears from (a missing one cannot answer)."""
    return {str(cid) for cid, node in list(clients.items()) if node.state != "missing"}
