"""Generator health: is this load generator short of CPU, so that its own timings bend?

A generator that runs short of CPU reads its sockets late: chunks wait in the kernel and
arrive in bursts, so TTFT grows and ITL gaps merge and stretch, and the run measures the
generator instead of the server. Every few seconds the sampler reads

* the CPU this process used (psutil, as a fraction of one core: a gevent process uses one);
  on a master, the largest of its workers' (Locust's heartbeats carry them);
* how late its own gevent.sleep woke up (event-loop lag: what any read waiting then waited
  on top of its data, whatever the cause: our CPU, a busy machine, a blocking call).

When either stays at or above its threshold for two samples in a row the run is marked
``crossed`` and the console gets one warning line. The thresholds come from runs of
bench/bench_generator.py's profile at rising users on the 2-core development machine
(docs/performance.md): receive lag and ITL error grew from a few ms to tens and hundreds once
the process used 0.5-0.65 of a core while the machine had no idle CPU; the event loop then
woke 60+ ms late. A process alone on a free core bends later, so the CPU threshold sits
above that (0.7) and the lag threshold catches a busy machine at any CPU level.

What the run saw goes to run.json as ``generator_health`` (``summary()``) and to the web UI's
/stats/requests poll as ``agentload_health``.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

import gevent
import psutil
from flask import request

from workload.locust.runtime import role_of

log = logging.getLogger("agentload")

CPU_THRESHOLD = 0.7  # fraction of one core
LAG_THRESHOLD_MS = 50.0  # event-loop wake-up lateness
INTERVAL_S = 2.0
SUSTAINED = 2  # samples in a row at or above a threshold before the run counts as bent


class GeneratorHealth:
    """Samples own CPU and loop lag; ``summary()`` is the run.json block."""

    def __init__(
        self,
        *,
        master: Any = None,
        interval_s: float = INTERVAL_S,
        cpu_threshold: float = CPU_THRESHOLD,
        lag_threshold_ms: float = LAG_THRESHOLD_MS,
        warn: Any = None,
    ) -> None:
        self._proc = psutil.Process()
        self._proc.cpu_percent(None)  # starts the interval
        self._master = master  # a Locust MasterRunner: judge its workers instead
        self.interval_s = interval_s
        self.cpu_threshold = cpu_threshold
        self.lag_threshold_ms = lag_threshold_ms
        self._warn = warn or (lambda line: print(line, flush=True))
        self.cpu: list[float] = []
        self.lag_ms: list[float] = []
        self._run = 0  # samples in a row over a threshold
        self.crossed = False
        self.greenlet: Any = None

    def start(self) -> GeneratorHealth:
        self.greenlet = gevent.spawn(self._loop)
        return self

    def stop(self) -> None:
        """Stop sampling; a run shorter than one interval still gets its CPU sampled once."""
        if self.greenlet is not None:
            self.greenlet.kill(block=False)
            self.greenlet = None
            if not self.cpu:
                self.record(self._cpu_now(), 0.0)

    def _loop(self) -> None:
        while True:
            t0 = time.perf_counter()
            gevent.sleep(self.interval_s)
            lag_ms = max(0.0, (time.perf_counter() - t0 - self.interval_s) * 1000)
            self.record(self._cpu_now(), lag_ms)

    def _cpu_now(self) -> float:
        if self._master is not None:
            workers = [
                float(getattr(c, "cpu_usage", 0) or 0) for c in self._master.clients.values()
            ]
            return max(workers, default=0.0) / 100
        return self._proc.cpu_percent(None) / 100

    def record(self, cpu: float, lag_ms: float) -> None:
        """One sample (cpu: fraction of a core)."""
        self.cpu.append(round(cpu, 3))
        self.lag_ms.append(round(lag_ms, 1))
        over = cpu >= self.cpu_threshold or lag_ms >= self.lag_threshold_ms
        self._run = self._run + 1 if over else 0
        if self._run >= SUSTAINED and not self.crossed:
            self.crossed = True
            self._warn(warning_line(max(self.cpu[-SUSTAINED:]), max(self.lag_ms[-SUSTAINED:])))

    def summary(self) -> dict[str, Any]:
        n = len(self.cpu)
        return {
            "cpu_max": max(self.cpu, default=None),
            "cpu_mean": round(sum(self.cpu) / n, 3) if n else None,
            "cpu_threshold": self.cpu_threshold,
            "loop_lag_ms_max": max(self.lag_ms, default=None),
            "loop_lag_threshold_ms": self.lag_threshold_ms,
            "crossed": self.crossed,
            "samples": n,
            "interval_s": self.interval_s,
            "source": "workers" if self._master is not None else "process",
        }


def warning_line(cpu: float, lag_ms: float) -> str:
    if cpu >= CPU_THRESHOLD:
        why = f"the generator used {cpu * 100:.0f} % of a core"
    else:
        why = f"the generator's event loop woke {lag_ms:.0f} ms late (a busy machine?)"
    return f"agentload: warning: {why}; timings may be bent — add --workers"


# ---------------------------------------------------------------- Locust wiring


def register(environment: Any) -> None:
    """Sample while a test runs; one call from the plugin's init hook."""
    events = environment.events
    events.test_start.add_listener(_on_test_start)
    events.test_stop.add_listener(_on_test_stop)
    if environment.web_ui is not None:
        _install_web(environment)


def _on_test_start(environment: Any, **_kw: Any) -> None:
    rt = getattr(environment, "agentload", None)
    if rt is None:
        return
    old = getattr(rt, "health", None)
    if old is not None:
        old.stop()
    role = role_of(environment)
    rt.health = GeneratorHealth(master=environment.runner if role == "master" else None).start()


def _on_test_stop(environment: Any, **_kw: Any) -> None:
    rt = getattr(environment, "agentload", None)
    health = getattr(rt, "health", None)
    if health is not None:
        health.stop()


def _install_web(environment: Any) -> None:
    @environment.web_ui.app.after_request
    def _health(response):  # type: ignore[no-untyped-def]
        if request.path != "/stats/requests" or response.status_code != 200:
            return response
        try:
            health = getattr(getattr(environment, "agentload", None), "health", None)
            if health is not None:
                body = response.get_json(silent=True) or {}
                body["agentload_health"] = health.summary()
                response.set_data(json.dumps(body))
        except Exception:  # noqa: BLE001 - Locust's own statistics must keep updating
            log.exception("agentload: generator health field failed")
        return response
