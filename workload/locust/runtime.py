"""One Locust process's agent runtime: profile, planner, client, stats, artifacts.

Built from Locust's parsed options when a test starts (so the web UI start form
can change the profile and seed), attached to the Environment, never global.
The roles differ only in who aggregates and who writes the run summary:

- local: measures, aggregates, writes everything;
- worker: measures, writes its own requests-<worker>.jsonl, sends aggregate
  deltas to the master with every Locust stats report;
- master: merges worker deltas, scrapes /metrics, writes run.json and friends.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

import gevent

from workload.errors import ProfileError, SetupError, TokenizerUnavailable
from workload.locust.pacing import Pacer
from workload.measure import artifacts
from workload.measure.client import Client
from workload.measure.live_metrics import LiveCounts
from workload.measure.records import STATUS_CANCELLED, RequestRecord, SessionRecord
from workload.measure.stats import Aggregate
from workload.measure.transport import read_stamps
from workload.observe import fingerprint, metrics
from workload.observe.target import probe_target
from workload.plan.load_model import closed_classes
from workload.plan.sessions import SessionPlanner
from workload.plan.tokens import get_tokenizer
from workload.run.finalize import Measured
from workload.run.spec import RunSpec

log = logging.getLogger("agentload")

MSG_USER_DONE = "agentload_user_done"
MSG_TRACE_DONE = "agentload_trace_done"


def role_of(environment: Any) -> str:
    # deferred: health imports this module, and tests import health without Locust's patching
    from locust.runners import MasterRunner, WorkerRunner

    if isinstance(environment.runner, MasterRunner):
        return "master"
    if isinstance(environment.runner, WorkerRunner):
        return "worker"
    return "local"


class AgentRuntime:
    """Per-process state for one test, created at test_start from the run's RunSpec.

    `spec` is the resolved run; `prepare` replaces it once with the model (and
    max_model_len) the target serves. Measured state lives here, never in
    Locust's parsed options.
    """

    def __init__(self, environment: Any, spec: RunSpec) -> None:
        self.env = environment
        self.spec = spec
        self.role = role_of(environment)
        self.slos: dict[str, dict[str, float]] = {}
        self.total = Aggregate()  # local & master: everything; worker: unused
        self.delta = Aggregate()  # worker: since the last report to the master
        self.live = LiveCounts()  # starts, in flight, lateness (workload.locust.live)
        self.otel: Any = None  # --otlp-endpoint: workload.measure.otlp.OtlpExport (local/worker)
        self.user_counter = 0
        self.users_done = 0
        self.trace_done_count = 0  # processes that sent their whole share of a --trace
        self.started_wall = time.time()
        self.started_iso = artifacts.iso_now()
        self.ended_iso: str | None = None
        self.worker_name = str(getattr(environment.runner, "worker_index", 0))
        self.planner: Any = None
        self.client: Any = None
        self.writer: artifacts.RunWriter | None = None
        self.scraper: Any = None
        self.metrics_writer: artifacts.JsonlWriter | None = None
        self.fingerprint: dict[str, Any] = {}
        self.target: dict[str, Any] = {}
        self.class_table: list[tuple[str, float, int | None]] = []
        self.progress: Any = None  # headless progress-line greenlet
        self.open_loop: Any = None  # workload.locust.open_loop.OpenLoop on local / worker
        self.watcher: Any = None  # master: the lost-worker watch (workload.locust.workers)
        # master: workers whose final report came; those that sent none in time
        # (workload.locust.final_report)
        self.final_from: set[str] = set()
        self.unreported: list[str] = []
        self.last_line = ""  # the console's last line, once the summary is written
        self.health: Any = None  # workload.locust.health.GeneratorHealth while a test runs
        # the users' work between requests waits for every ready socket to be read
        self.pacer = Pacer()
        self.finalized = False
        self.exit_code = 0

    # The run's facts, read by users and the plugin.
    @property
    def run_id(self) -> str:
        return self.spec.run_id

    @property
    def out_dir(self) -> Path:
        return Path(self.spec.out)

    @property
    def seed(self) -> int:
        return self.spec.seed

    @property
    def profile(self) -> Any:
        return self.spec.profile

    @property
    def model(self) -> str:
        return self.spec.model

    @property
    def workers(self) -> int:
        return self.spec.workers

    def api_key(self) -> str | None:
        return os.environ.get(self.spec.api_key_env or "OPENAI_API_KEY") or None

    # ---- preparation -------------------------------------------------------------------------
    def prepare(self) -> None:
        """Find the model, build planner and client. Raises SetupError."""
        spec = self.spec
        host = (self.env.host or spec.host or "").rstrip("/")
        if not host:
            raise SetupError(
                "no target: pass --host URL (or use `agentload run`, which starts the simulator)"
            )
        api_key = self.api_key()
        model = spec.model
        # Workers plan with the master's view of the target (in the spec sent with the spawn
        # message), so every worker clips prompts exactly as one process would.
        max_model_len = spec.max_model_len if self.role == "worker" else None
        if self.role != "worker" or not model:
            facts = probe_target(host, api_key, model or None)
            model = facts["model"]
            max_model_len = facts.get("max_model_len")
            self.target = {"url": host, **facts}
        try:
            tok_spec = "server" if spec.tokenizer == "server" else "tiktoken:cl100k_base"
            tokenizer = (
                get_tokenizer(tok_spec, base_url=host, model=model, api_key=api_key)
                if tok_spec == "server"
                else get_tokenizer(tok_spec)
            )
        except TokenizerUnavailable as e:
            raise SetupError(str(e)) from None
        try:
            self.planner = SessionPlanner(
                spec.profile, tokenizer, model=model, max_model_len=max_model_len, seed=spec.seed
            )
        except ProfileError as e:
            raise SetupError("; ".join(e.problems)) from None
        self.spec = spec.replace(host=host, model=model, max_model_len=max_model_len)
        # Goodput needs each class's SLOs while requests are counted.
        self.slos = self.spec.slos()
        self.total = Aggregate(self.slos)
        self.delta = Aggregate(self.slos)

        # Open-loop classes start by schedule; a trace replay plays only the trace.
        self.class_table = [] if spec.trace else closed_classes(spec.profile)
        self.client = Client(
            host,
            api_key=api_key,
            run_id=self.run_id,
            worker=self.worker_name if self.role == "worker" else "0",
        )
        if self.role != "master":
            self.writer = artifacts.RunWriter(
                self.out_dir, worker=self.worker_name if self.role == "worker" else None
            )

    def start_observers(self) -> None:
        """Master/local: fingerprint the server and start scraping /metrics."""
        host = self.target.get("url") or self.spec.host
        api_key = self.api_key()
        log_text = None
        if self.spec.server_log:
            try:
                log_text = Path(self.spec.server_log).read_text(errors="replace")
            except OSError as e:
                raise SetupError(
                    f"cannot read --server-log {self.spec.server_log}: {e.strerror}"
                ) from None
        try:
            self.fingerprint = fingerprint.fingerprint(
                host, api_key=api_key, labels=self.spec.labels, server_log_text=log_text
            )
        except Exception as e:  # noqa: BLE001 - a fingerprint is best effort; record why
            self.fingerprint = {"error": f"{type(e).__name__}: {e}"}
        interval = self.spec.scrape_interval
        if interval > 0:
            self.metrics_writer = artifacts.JsonlWriter(self.out_dir / "metrics.jsonl")
            self.scraper = metrics.MetricsScraper(
                host, interval, self.metrics_writer.write, api_key=api_key, keep=False
            )
            self.scraper.start()

    # ---- hot path ------------------------------------------------------------------------------
    def record_request(self, rec: RequestRecord) -> None:
        """Write, aggregate and report one finished attempt to Locust's stats."""
        rec.slo_met = (self.delta if self.role == "worker" else self.total).add_request(rec)
        self.live.requests_ended += 1
        if rec.ok:
            self.live.tokens.record(rec)  # gen_ai_client_token_usage (--metrics-port)
        if self.otel is not None:
            self.otel.request(rec)
        if self.writer is not None:
            self.writer.requests.write(rec.to_json())
        if rec.status == STATUS_CANCELLED:
            return  # not a success, not a server failure: only in our stats
        exc = (
            None if rec.ok else RequestFailed(f"{rec.error_kind}: {rec.error_detail or ''}".strip())
        )
        self.env.events.request.fire(
            request_type=rec.endpoint,
            name=rec.user_class,
            response_time=rec.e2e_ms or 0.0,
            response_length=rec.completion_tokens or 0,
            exception=exc,
            context={},
        )

    def record_session(self, srec: SessionRecord) -> None:
        srec.slo_met = (self.delta if self.role == "worker" else self.total).add_session(srec)
        self.live.sessions_ended += 1
        if srec.t_scheduled is not None:
            self.live.lateness.record_ms(max(0.0, srec.t_start - srec.t_scheduled) * 1000.0)
        if self.otel is not None:
            self.otel.session(srec)
        if self.writer is not None:
            self.writer.sessions.write(srec.to_json())

    def user_done(self) -> None:
        """A user finished its sessions; when all have, the run ends early."""
        if self.role == "worker":
            self.env.runner.send_message(MSG_USER_DONE, 1)
        else:
            self.count_done(1)

    def count_done(self, n: int) -> None:
        self.users_done += n
        runner = self.env.runner
        target = getattr(runner, "target_user_count", None) or 0
        if target and self.users_done >= target:
            log.info("agentload: every user finished its sessions; stopping")
            headless = bool(getattr(self.env.parsed_options, "headless", False))
            gevent_spawn(runner.quit if headless else runner.stop)

    def trace_done(self) -> None:
        """This process sent (and finished) its share of the trace; all have: the run ends."""
        if self.role == "worker":
            self.env.runner.send_message(MSG_TRACE_DONE, 1)
        else:
            self.count_trace_done(1)

    def count_trace_done(self, n: int) -> None:
        self.trace_done_count += n
        if self.trace_done_count >= max(1, self.spec.workers):
            log.info("agentload: every trace request was sent and answered; stopping")
            headless = bool(getattr(self.env.parsed_options, "headless", False))
            gevent_spawn(self.env.runner.quit if headless else self.env.runner.stop)

    def next_user_index(self) -> int:
        """Global user index: worker w of N takes w, w+N, w+2N, ... (same traffic whatever N)."""
        local = self.user_counter
        self.user_counter += 1
        if self.role == "worker":
            return int(self.worker_name) + self.workers * local
        return local

    # ---- end -----------------------------------------------------------------------------------
    def stop_observers(self) -> None:
        if self.scraper is not None:
            self.scraper.stop()
            self.scraper = None
        if self.metrics_writer is not None:
            self.metrics_writer.close()

    def measured(self) -> Measured:
        """What this run measured, for finalize_run (with self.spec)."""
        return Measured(
            total=self.total,
            slos=self.slos,
            started_iso=self.started_iso,
            started_wall=self.started_wall,
            ended_iso=self.ended_iso,
            fingerprint=self.fingerprint,
            target=self.target,
            users=getattr(self.env.parsed_options, "num_users", None),
            generator_health=self._health_summary(),
        )

    def _health_summary(self) -> dict[str, Any] | None:
        if self.health is None:
            return None

        host = self.target.get("url") or self.spec.host or ""
        # how response reads were stamped: "kernel" (when the bytes arrived) or "user"
        out = {**self.health.summary(), "read_stamps": read_stamps(str(host))}
        if self.role != "master":  # a master plays no users; its workers pace their own
            out["pacing"] = self.pacer.summary()
        return out

    def close(self) -> None:
        if self.otel is not None:
            self.otel.close()
            self.otel = None
        self.pacer.close()
        self.stop_observers()
        if self.writer is not None:
            self.writer.close()


class RequestFailed(Exception):
    """What Locust's stats show for a failed request (kind: detail)."""


def gevent_spawn(fn) -> None:  # type: ignore[no-untyped-def]
    gevent.spawn_later(0.05, fn)
