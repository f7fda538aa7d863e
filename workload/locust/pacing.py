"""Reads first: the work between two requests waits until the event loop has no reads pending.

A user's work between requests (recording the finished one, planning the next, building and
sending it) costs a few tenths of a millisecond. Users finish together more often than chance
says: a server that decodes in batches ends many streams in the same step, and a slow moment
in the generator bunches the ends it delays, so the next requests go out together and end
together again. Run back to back in one pass of the event loop, 100 such users are 20-40 ms
in which no socket is read. A kernel receive stamp (workload.measure.transport) puts a late
read back at its bytes' arrival, but not a read later than the stream's next chunk: that read
returns both chunks with the newer stamp, so the first token was stamped one inter-token gap
late (measured: TTFT error p99 19 ms at 200 streams, in steps of one ITL, with no greenlet
ever blocking for 8 ms; docs/performance.md).

`Pacer.wait()` queues the calling user; one gatekeeper greenlet lets the queue through when
the loop is idle (no watcher pending: every ready socket has been read), one user at a time
and at most `budget_s` of such work per idle pass, then waits for the next idle pass. A loop
that is never idle (a saturated generator) still lets users through, `budget_s` of work
every `max_wait_s`. The wait is the generator's, not the server's: requests are stamped
when their first byte is written, so it moves no latency, only when the next request goes
out (a fraction of a millisecond mid-run when the generator has CPU to spare; at start,
where every user plans its first session at once, the queue spreads that burst over tens
of milliseconds). `summary()` reports the waits for run.json's generator health.
"""

from __future__ import annotations

import contextlib
import time
from collections import deque
from typing import Any

import gevent
from gevent.event import Event
from gevent.hub import Waiter, get_hub


class Pacer:
    """Admits the users' between-request work when reads are served (see module docstring)."""

    def __init__(self, budget_s: float = 0.002, max_wait_s: float = 0.005) -> None:
        self.budget_s = budget_s
        self.max_wait_s = max_wait_s
        self._queue: deque[Waiter] = deque()
        self._wake = Event()
        self._gate: Any = None
        self.admitted = 0
        self.waited_s = 0.0  # total time users spent queued here
        self.max_waited_s = 0.0

    def wait(self) -> None:
        """Return when this user may run its between-request work."""
        if self._gate is None or self._gate.dead:
            self._gate = gevent.spawn(self._run)
        w = Waiter()
        self._queue.append(w)
        self._wake.set()
        t0 = time.perf_counter()
        try:
            w.get()
        except BaseException:
            # killed while queued (the run is stopping): leave no dead waiter behind
            with contextlib.suppress(ValueError):
                self._queue.remove(w)
            raise
        dt = time.perf_counter() - t0
        self.admitted += 1
        self.waited_s += dt
        self.max_waited_s = max(self.max_waited_s, dt)

    def summary(self) -> dict[str, Any]:
        """For run.json's generator_health: how long users waited here for reads to be served."""
        n = self.admitted
        return {
            "admitted": n,
            "wait_mean_ms": round(self.waited_s / n * 1000, 3) if n else None,
            "wait_max_ms": round(self.max_waited_s * 1000, 3) if n else None,
        }

    def close(self) -> None:
        """Stop the gatekeeper and let every queued user go (the run is over)."""
        gate, self._gate = self._gate, None
        while self._queue:
            get_hub().loop.run_callback(self._queue.popleft().switch, None)
        if gate is not None:
            gate.kill(block=False)

    def _run(self) -> None:
        loop = get_hub().loop
        perf = time.perf_counter
        while True:
            self._wake.wait()
            # an idle pass of the loop: nothing else pending, every ready socket read
            with gevent.Timeout(self.max_wait_s, False):
                gevent.idle()
            t0 = perf()
            while self._queue:
                loop.run_callback(self._queue.popleft().switch, None)
                gevent.sleep(0)  # after the admitted user's callback: it ran to its next wait
                if perf() - t0 >= self.budget_s:
                    break
            if not self._queue:
                self._wake.clear()
