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
import sys
import time
from pathlib import Path
from typing import Any

from workload.measure import artifacts
from workload.measure.records import STATUS_CANCELLED, RequestRecord, SessionRecord
from workload.observe.target import SetupError, parse_kv, probe_target

log = logging.getLogger("agentload")

MSG_USER_DONE = "agentload_user_done"


def role_of(environment: Any) -> str:
    from locust.runners import MasterRunner, WorkerRunner

    if isinstance(environment.runner, MasterRunner):
        return "master"
    if isinstance(environment.runner, WorkerRunner):
        return "worker"
    return "local"


class AgentRuntime:
    """Per-process state for one test, created at test_start."""

    def __init__(self, environment: Any) -> None:
        from workload.measure.stats import Aggregate

        self.env = environment
        self.opts = environment.parsed_options
        self.role = role_of(environment)
        self.slos: dict[str, dict[str, float]] = {}
        self.total = Aggregate()  # local & master: everything; worker: unused
        self.delta = Aggregate()  # worker: since the last report to the master
        self.user_counter = 0
        self.users_done = 0
        self.started_wall = time.time()
        self.started_iso = artifacts.iso_now()
        self.ended_iso: str | None = None
        self.run_id: str = self.opts.agent_run_id
        self.out_dir = Path(self.opts.out)
        self.worker_name = str(getattr(environment.runner, "worker_index", 0))
        self.workers = int(getattr(self.opts, "agent_workers", 1) or 1)
        self.profile: Any = None
        self.planner: Any = None
        self.client: Any = None
        self.writer: artifacts.RunWriter | None = None
        self.scraper: Any = None
        self.metrics_writer: artifacts.JsonlWriter | None = None
        self.fingerprint: dict[str, Any] = {}
        self.target: dict[str, Any] = {}
        self.seed: int = 0
        self.progress: Any = None  # headless progress-line greenlet
        self.finalized = False
        self.exit_code = 0

    # ---- preparation -------------------------------------------------------------------------
    def prepare(self) -> None:
        """Load the profile, find the model, build planner and client. Raises SetupError."""
        from workload.measure.client import Client
        from workload.plan.loading import ProfileError, load_profile
        from workload.plan.sessions import SessionPlanner
        from workload.plan.tokens import TokenizerUnavailable, get_tokenizer

        host = (self.env.host or "").rstrip("/")
        if not host:
            raise SetupError(
                "no target: pass --host URL (or use `agentload run`, which starts the simulator)"
            )
        try:
            self.profile = load_profile(self.opts.agent_profile, list(self.opts.agent_set or []))
        except ProfileError as e:
            raise SetupError("; ".join(e.problems)) from None
        seed_opt = str(self.opts.seed or "").strip()
        if seed_opt:
            try:
                self.seed = int(seed_opt)
            except ValueError:
                raise SetupError(f"bad --seed {seed_opt!r}: it must be an integer") from None
        else:
            self.seed = int(self.profile.seed)
        api_key = os.environ.get(self.opts.api_key_env or "OPENAI_API_KEY") or None
        model = self.opts.model or ""
        # Workers plan with the master's view of the target (sent with the spawn message),
        # so every worker clips prompts exactly as one process would.
        max_model_len = (
            getattr(self.opts, "agent_max_model_len", None) if self.role == "worker" else None
        )
        if self.role != "worker" or not model:
            facts = probe_target(host, api_key, model or None)
            model = facts["model"]
            max_model_len = facts.get("max_model_len")
            self.target = {"url": host, **facts}
        try:
            tok_spec = "server" if self.opts.tokenizer == "server" else "tiktoken:cl100k_base"
            tokenizer = (
                get_tokenizer(tok_spec, base_url=host, model=model, api_key=api_key)
                if tok_spec == "server"
                else get_tokenizer(tok_spec)
            )
        except TokenizerUnavailable as e:
            raise SetupError(str(e)) from None
        try:
            self.planner = SessionPlanner(
                self.profile, tokenizer, model=model, max_model_len=max_model_len, seed=self.seed
            )
        except ProfileError as e:
            raise SetupError("; ".join(e.problems)) from None
        self.model = model
        from workload.measure.stats import Aggregate
        from workload.observe.target import parse_slo_overrides
        from workload.run.finalize import merge_slos, profile_slos

        # Goodput needs each class's SLOs while requests are counted.
        self.slos = merge_slos(
            profile_slos(self.profile),
            parse_slo_overrides(list(self.opts.agent_slo or [])),
            list(self.profile.classes),
        )
        self.total = Aggregate(self.slos)
        self.delta = Aggregate(self.slos)
        self.class_table = [
            (name, float(c.weight or 0), c.fixed_count) for name, c in self.profile.classes.items()
        ]
        # Workers receive the master's parsed options with each spawn message.
        self.opts.model = model
        self.opts.agent_max_model_len = max_model_len
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
        from workload.observe import fingerprint, metrics

        host = self.target.get("url") or self.env.host
        api_key = os.environ.get(self.opts.api_key_env or "OPENAI_API_KEY") or None
        labels = parse_kv(list(self.opts.agent_label or []), "--label")
        log_text = None
        if self.opts.server_log:
            try:
                log_text = Path(self.opts.server_log).read_text(errors="replace")
            except OSError as e:
                raise SetupError(
                    f"cannot read --server-log {self.opts.server_log}: {e.strerror}"
                ) from None
        try:
            self.fingerprint = fingerprint.fingerprint(
                host, api_key=api_key, labels=labels, server_log_text=log_text
            )
        except Exception as e:  # noqa: BLE001 - a fingerprint is best effort; record why
            self.fingerprint = {"error": f"{type(e).__name__}: {e}"}
        self.labels = labels
        interval = float(self.opts.scrape_interval or 0)
        if interval > 0:
            self.metrics_writer = artifacts.JsonlWriter(self.out_dir / "metrics.jsonl")
            self.scraper = metrics.MetricsScraper(
                host, interval, self.metrics_writer.write, api_key=api_key
            )
            self.scraper.start()

    # ---- hot path ------------------------------------------------------------------------------
    def record_request(self, rec: RequestRecord) -> None:
        """Write, aggregate and report one finished attempt to Locust's stats."""
        if self.writer is not None:
            self.writer.requests.write(rec.to_json())
        (self.delta if self.role == "worker" else self.total).add_request(rec)
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
        if self.writer is not None:
            self.writer.sessions.write(srec.to_json())
        (self.delta if self.role == "worker" else self.total).add_session(srec)

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
            headless = bool(getattr(self.opts, "headless", False))
            gevent_spawn(runner.quit if headless else runner.stop)

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

    def close(self) -> None:
        self.stop_observers()
        if self.writer is not None:
            self.writer.close()


class RequestFailed(Exception):
    """What Locust's stats show for a failed request (kind: detail)."""


def gevent_spawn(fn) -> None:  # type: ignore[no-untyped-def]
    import gevent

    gevent.spawn_later(0.05, fn)


def argv_string() -> str:
    return " ".join(sys.argv)
