"""`--metrics-port`: the run's live numbers served for Prometheus while it runs.

The local process (or the master, with the workers' numbers merged) serves
``http://HOST:PORT/metrics`` from a gevent WSGI server on the process's own loop. A scrape
reads the runtime's aggregate (``workload.measure.live_metrics``): requests add nothing to
the hot path beyond the few live counters ``AgentRuntime.live`` keeps. Workers send their
cumulative live counters with every stats report; the master keeps each worker's latest.

In the web UI the server outlives each test: a scrape reads whichever run is current.
"""

from __future__ import annotations

import logging
from typing import Any

import gevent
from gevent.pywsgi import WSGIServer
from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.process_collector import ProcessCollector

from workload.errors import SetupError
from workload.measure.live_metrics import LiveCounts, RunCollector, Snapshot

log = logging.getLogger("agentload")

REPORT_KEY = "agentload_live"  # the workers' live counters in Locust's stats report


class LiveEndpoint:
    """One process's /metrics server and the workers' latest live counters (master)."""

    def __init__(self, environment: Any, listen: str) -> None:
        self.env = environment
        self.listen = listen
        self.from_workers: dict[str, LiveCounts] = {}
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(RunCollector(self.snapshot))
        # the generator's own CPU and memory, next to what it measured
        ProcessCollector(registry=self.registry)
        self.server: WSGIServer | None = None

    def start(self) -> str:
        """Bind and serve; the URL. Raises SetupError when the address cannot be used."""
        host, _, port = self.listen.rpartition(":")
        server = WSGIServer((host, int(port)), make_wsgi_app(self.registry), log=None)
        try:
            server.start()
        except OSError as e:
            raise SetupError(
                f"cannot serve --metrics-port {self.listen}: {e.strerror or e}; "
                "pick a free port (0: any free one)"
            ) from None
        self.server = server
        bound_host, bound_port = server.address[:2]
        return f"http://{_url_host(bound_host)}:{bound_port}/metrics"

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop(timeout=1)
            self.server = None

    def snapshot(self) -> Snapshot | None:
        """What a scrape shows now: None before a test was set up."""
        rt = self.env.agentload
        if rt is None or rt.planner is None:
            return None
        if rt.role == "master":
            live = LiveCounts()
            for counts in list(self.from_workers.values()):
                live.add(counts)
        else:
            live = counts_of(rt)
        runner = self.env.runner
        users = None if rt.open_loop is not None and not rt.class_table else runner.user_count
        return Snapshot(total=rt.total, live=live, info=run_info(rt), model=rt.model, users=users)


def counts_of(rt: Any) -> LiveCounts:
    """This process's live counters, open-loop arrivals included (a copy to send or read)."""
    live = rt.live
    out = LiveCounts(
        sessions_started=live.sessions_started,
        sessions_ended=live.sessions_ended,
        requests_started=live.requests_started,
        requests_ended=live.requests_ended,
    )
    out.lateness.merge(live.lateness)
    out.tokens.add(live.tokens)
    for driver in getattr(rt.open_loop, "drivers", None) or ():
        out.arrivals_due += driver.due
        out.arrivals_dropped += driver.dropped
    return out


def run_info(rt: Any) -> dict[str, str]:
    """The run's facts for the info metric; operator labels (--label) after them."""
    spec = rt.spec
    info = {
        "run_id": spec.run_id,
        "profile": str(getattr(spec.profile, "name", spec.profile_ref)),
        "model": spec.model,
        "seed": str(spec.seed),
        "role": rt.role,
    }
    for key, value in spec.labels.items():
        info.setdefault(f"label_{key}", str(value))
    return info


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


# ---------------------------------------------------------------- the plugin's hooks


def start_for(environment: Any, rt: Any) -> None:
    """At test start (local / master): serve /metrics once per process. Raises SetupError."""
    if not rt.spec.metrics_port or rt.role == "worker":
        return
    endpoint: LiveEndpoint | None = getattr(environment, "agentload_live", None)
    if endpoint is not None:
        return  # the web UI started another test: the server already reads the current run
    endpoint = LiveEndpoint(environment, rt.spec.metrics_port)
    url = endpoint.start()
    environment.agentload_live = endpoint
    print(f"agentload: live metrics at {url}", flush=True)


def attach_report(rt: Any, data: dict[str, Any]) -> None:
    """Worker: add the cumulative live counters to a stats report (only when served)."""
    if rt.spec.metrics_port:
        data[REPORT_KEY] = counts_of(rt).to_dict()


def take_report(environment: Any, client_id: str, data: dict[str, Any]) -> None:
    """Master: keep a worker's latest live counters."""
    endpoint: LiveEndpoint | None = getattr(environment, "agentload_live", None)
    if endpoint is not None and REPORT_KEY in data:
        endpoint.from_workers[client_id] = LiveCounts.from_dict(data[REPORT_KEY])


def linger(environment: Any, seconds: float) -> None:
    """After the run's files are written: keep serving a while, then stop."""
    endpoint: LiveEndpoint | None = getattr(environment, "agentload_live", None)
    if endpoint is None:
        return
    if seconds > 0:
        log.info("agentload: serving the final metrics for %gs (--metrics-linger)", seconds)
        gevent.sleep(seconds)
    endpoint.stop()
    environment.agentload_live = None
