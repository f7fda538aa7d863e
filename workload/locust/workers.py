"""A master's watch on its workers: one that stops sending heartbeats is reported (which,
from when) and the run is marked partial."""

from __future__ import annotations

import sys
import time
from typing import Any

import gevent

from workload.locust.signals import state_of
from workload.measure import artifacts


def watch_workers(environment: Any, started_wall: float, interval_s: float = 1.0) -> Any:
    """A greenlet on the master: note each worker that goes missing (no heartbeat) or away."""
    st = state_of(environment)
    runner = environment.runner
    seen: set[str] = set()
    lost: set[str] = set()

    def sweep(missing_only: bool = False) -> None:
        clients = getattr(runner, "clients", None)
        if clients is None:
            return
        present = {}
        for node in list(clients.values()):
            present[str(node.id)] = str(getattr(node, "state", ""))
        seen.update(present)
        for wid in sorted(seen - lost):
            state = present.get(wid)
            if state == "missing" or (state is None and not missing_only):
                lost.add(wid)
                now = time.time()
                entry = {
                    "worker": wid,
                    "at": artifacts.iso_now(),
                    "t_s": round(now - started_wall, 1),
                    "why": "no heartbeat" if state == "missing" else "disconnected",
                }
                st.lost_workers.append(entry)
                left = sum(1 for s in present.values() if s != "missing")
                print(
                    f"agentload: worker {wid} lost at t+{entry['t_s']:.1f}s "
                    f"({entry['why']}); {left} worker(s) left: the run is marked partial",
                    file=sys.stderr,
                    flush=True,
                )

    def loop() -> None:
        while True:
            gevent.sleep(interval_s)
            if st.signum is not None or getattr(runner, "clients", None) is None:
                return
            sweep()

    watcher = gevent.spawn(loop)
    # The test can stop between two ticks because its last worker went missing (Locust stops
    # it then): the plugin sweeps once more at test_stop, so that run is partial, not "ok".
    watcher.sweep = lambda: sweep(missing_only=True)
    return watcher
