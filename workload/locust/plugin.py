"""Wire the agent runtime into Locust's events. Call `register(events)` from a locustfile."""

from __future__ import annotations

import logging
import sys
from functools import partial
from pathlib import Path
from typing import Any

import gevent

from workload.locust import options as options_mod
from workload.locust import webui
from workload.locust.runtime import MSG_USER_DONE, AgentRuntime, argv_string
from workload.measure import artifacts
from workload.observe.target import SetupError

log = logging.getLogger("agentload")

EXIT_BAD_INPUT = 2


def register(events: Any) -> None:
    """Attach agentload to Locust's event hooks (idempotent per events object)."""
    if getattr(events, "_agentload_registered", False):
        return
    events._agentload_registered = True
    events.init_command_line_parser.add_listener(options_mod.add_arguments)
    events.init.add_listener(_on_init)
    events.test_start.add_listener(_on_test_start)
    events.test_stop.add_listener(_on_test_stop)
    events.quitting.add_listener(_on_quitting)


def _fail_setup(environment: Any, message: str) -> None:
    """One clear line, exit 2, keep whatever was measured."""
    print(f"agentload: error: {message}", file=sys.stderr, flush=True)
    runner = environment.runner
    if environment.web_ui is not None:
        # A bad profile or seed typed into the start form: stop this test, keep the UI up.
        if runner is not None:
            gevent.spawn_later(0.01, runner.stop)
        return
    environment.process_exit_code = EXIT_BAD_INPUT
    if runner is not None:
        gevent.spawn_later(0.01, runner.quit)


def _on_init(environment: Any, **_kw: Any) -> None:
    opts = environment.parsed_options
    environment.agentload = None
    if opts is None:
        return
    from workload.locust.runtime import role_of

    role = role_of(environment)
    if role != "worker":
        if not opts.agent_run_id:
            opts.agent_run_id = artifacts.new_run_id()
        if not opts.out:
            opts.out = str(artifacts.default_out_dir(opts.agent_run_id))
        if not opts.agent_argv:
            opts.agent_argv = argv_string()
    # These two events carry no environment: bind it here, once per process.
    environment.events.report_to_master.add_listener(partial(_on_report_to_master, environment))
    environment.events.worker_report.add_listener(partial(_on_worker_report, environment))
    if environment.runner is not None and role != "local":
        environment.runner.register_message(MSG_USER_DONE, _on_user_done)
    if environment.web_ui is not None:
        webui.install(environment)


def _on_user_done(environment: Any, msg: Any, **_kw: Any) -> None:
    rt = environment.agentload
    if rt is not None:
        rt.count_done(int(msg.data or 1))


def _on_test_start(environment: Any, **_kw: Any) -> None:
    previous = environment.agentload
    if previous is not None:
        previous.close()
    if environment.parsed_options is None:
        return
    from workload.locust.runtime import role_of

    if previous is not None and previous.planner is not None and role_of(environment) != "worker":
        _next_run(environment.parsed_options, previous)
    if role_of(environment) == "master":
        environment.parsed_options.agent_workers = max(1, environment.runner.worker_count)
    rt = AgentRuntime(environment)
    environment.agentload = rt
    try:
        rt.prepare()
        if rt.role != "worker":
            Path(rt.out_dir).mkdir(parents=True, exist_ok=True)
            rt.start_observers()
            print(
                f"agentload: run {rt.run_id} -> {rt.out_dir}  target {rt.target.get('url')} "
                f"model {rt.model}  profile {rt.profile.name}  seed {rt.seed}",
                flush=True,
            )
            if getattr(rt.opts, "headless", False) and float(rt.opts.progress_interval or 0) > 0:
                rt.progress = gevent.spawn(_progress_loop, rt)
    except SetupError as e:
        _fail_setup(environment, str(e))


def _next_run(opts: Any, previous: AgentRuntime) -> None:
    """A test started again from the web UI is a new run: new id, and its own directory
    unless the form names a new one (appending to the last run's files would mix two runs)."""
    opts.agent_run_id = artifacts.new_run_id()
    if Path(opts.out) != Path(previous.out_dir):
        return
    if Path(opts.out) == artifacts.default_out_dir(previous.run_id):
        opts.out = str(artifacts.default_out_dir(opts.agent_run_id))
    else:
        opts.out = f"{previous.out_dir}-{opts.agent_run_id}"


def _progress_loop(rt: AgentRuntime) -> None:
    from workload.report.console import progress_line

    interval = float(rt.opts.progress_interval)
    while True:
        gevent.sleep(interval)
        users = rt.env.runner.user_count if rt.env.runner else 0
        print(progress_line(rt.total, elapsed_s=_elapsed(rt), users=users), flush=True)


def _elapsed(rt: AgentRuntime) -> float:
    import time

    return time.time() - rt.started_wall


def _on_test_stop(environment: Any, **_kw: Any) -> None:
    rt = environment.agentload
    if rt is None:
        return
    prog = getattr(rt, "progress", None)
    if prog is not None:
        prog.kill(block=False)
    if rt.role == "worker":
        if rt.writer is not None:
            rt.writer.close()
        return
    rt.ended_iso = artifacts.iso_now()
    # In the web UI a test can be stopped and started again: write what we have now
    # (after a moment, so the workers' last reports are merged).
    if environment.web_ui is not None and rt.planner is not None:
        gevent.spawn_later(1.0, _finish, rt)


def _on_report_to_master(env: Any, client_id: str, data: dict, **_kw: Any) -> None:
    rt = env.agentload
    if rt is None or rt.role != "worker":
        return
    # drain() keeps per-session SLO state for sessions that span reports.
    data["agentload"] = rt.delta.drain().to_dict()


def _on_worker_report(env: Any, client_id: str, data: dict, **_kw: Any) -> None:
    rt = env.agentload
    if rt is None or "agentload" not in data:
        return
    from workload.measure.stats import Aggregate

    rt.total.merge(Aggregate.from_dict(data["agentload"], slos_by_class=rt.slos))


def _on_quitting(environment: Any, **_kw: Any) -> None:
    rt = environment.agentload
    if rt is None:
        return
    if rt.role == "worker":
        rt.close()
        return
    if rt.planner is None:  # setup failed: nothing ran
        rt.close()
        return
    code = _finish(rt)
    if environment.process_exit_code is None or environment.process_exit_code == 0:
        environment.process_exit_code = code


def _finish(rt: AgentRuntime) -> int:
    """Write the run's summary once (web mode: at test stop, then quitting reuses it)."""
    from workload.run.finalize import finalize_run

    if rt.finalized:
        return rt.exit_code
    rt.finalized = True
    rt.stop_observers()
    rt.ended_iso = rt.ended_iso or artifacts.iso_now()
    rt.exit_code = finalize_run(rt)
    return rt.exit_code
