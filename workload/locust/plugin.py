"""Wire the agent runtime into Locust's events. Call `register(events)` from a locustfile."""

from __future__ import annotations

import gc
import logging
import time
from functools import partial
from pathlib import Path
from typing import Any

import gevent

from workload import memtrace
from workload.errors import EXIT_BAD_INPUT, AgentloadError, print_error
from workload.locust import (
    final_report,
    health,
    live,
    open_loop,
    run_clock,
    signals,
    warmup,
    webui,
    workers,
)
from workload.locust import options as options_mod
from workload.locust import otel as otlp_export
from workload.locust.load_shape import install_shape
from workload.locust.options import form_changed, reresolve, spec_from_options
from workload.locust.runtime import MSG_TRACE_DONE, MSG_USER_DONE, AgentRuntime, role_of
from workload.measure import artifacts
from workload.measure.stats import Aggregate
from workload.observe.safe import redact_url, sanitize
from workload.plan.load_model import closed_classes, is_open_loop
from workload.report.console import progress_line
from workload.run.finalize import finalize_run

log = logging.getLogger("agentload")


def register(events: Any) -> None:
    """Attach agentload to Locust's event hooks (idempotent per events object)."""
    if getattr(events, "_agentload_registered", False):
        return
    events._agentload_registered = True
    warmup.install_fork_hook()  # `--processes`: workers inherit the warm caches
    memtrace.start_from_env("locust")  # AGENTLOAD_TRACEMALLOC=path (soak diagnostics; off: no-op)
    events.init_command_line_parser.add_listener(options_mod.add_arguments)
    events.init.add_listener(_on_init)
    events.test_start.add_listener(_on_test_start)
    events.test_stop.add_listener(_on_test_stop)
    events.quitting.add_listener(_on_quitting)
    events.quit.add_listener(_on_quit)


def _fail_setup(environment: Any, message: str) -> None:
    """One clear line, exit 2, keep whatever was measured."""
    print_error(message)
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
    environment.agentload = None
    if environment.parsed_options is None:
        return

    role = role_of(environment)
    # These two events carry no environment: bind it here, once per process.
    environment.events.report_to_master.add_listener(partial(_on_report_to_master, environment))
    environment.events.worker_report.add_listener(partial(_on_worker_report, environment))
    if environment.runner is not None and role != "local":
        environment.runner.register_message(MSG_USER_DONE, _on_user_done)
        environment.runner.register_message(MSG_TRACE_DONE, _on_trace_done)
    if role == "worker":
        environment.runner.register_message(final_report.MSG_FINISH, final_report.on_finish)
    if role == "master":
        warmup.raise_heartbeat_tolerance()
    if environment.web_ui is not None:
        # Before the first test too: a Ctrl-C that Python turns into a KeyboardInterrupt lands
        # in whichever greenlet runs, and gevent's WSGI server prints a traceback when that is
        # the one answering the page.
        signals.install_signal_handlers(environment, role)
        webui.install(environment)
        webui.prefill_form(environment)
        webui.announce(environment)
    if role != "worker":
        install_shape(environment)
        run_clock.take_over_run_time(environment)
    health.register(environment)


def _on_user_done(environment: Any, msg: Any, **_kw: Any) -> None:
    rt = environment.agentload
    if rt is not None:
        rt.count_done(int(msg.data or 1))


def _on_trace_done(environment: Any, msg: Any, **_kw: Any) -> None:
    rt = environment.agentload
    if rt is not None:
        rt.count_trace_done(int(msg.data or 1))


def _on_test_start(environment: Any, **_kw: Any) -> None:
    previous = environment.agentload
    if previous is not None:
        previous.close()
    opts = environment.parsed_options
    if opts is None:
        return

    role = role_of(environment)
    final_report.reset(environment)
    signals.install_signal_handlers(environment, role)
    try:
        spec = _spec_for(environment, role, previous)
    except AgentloadError as e:
        environment.agentload = None
        _fail_setup(environment, str(e))
        return
    rt = AgentRuntime(environment, spec)
    environment.agentload = rt
    try:
        if role == "worker":
            warmup.yield_to_loop()  # a heartbeat before and after the set-up (warmup.py)
        rt.prepare()
        if role == "worker":
            warmup.yield_to_loop()
        otlp_export.start_for(rt)  # --otlp-endpoint: local and workers export, the master says so
        if role != "worker":
            open_loop.stamp_t0(rt)
        if role == "master":
            # Workers receive the master's parsed options with each spawn message:
            # the spec (with the discovered model and max_model_len) is the one value we send.
            setattr(opts, options_mod.WORKER_SPEC, rt.spec.to_json())
        if rt.role != "worker":
            Path(rt.out_dir).mkdir(parents=True, exist_ok=True)
            rt.start_observers()
            live.start_for(environment, rt)
            print(
                f"agentload: run {rt.run_id} -> {rt.out_dir}  "
                f"target {redact_url(str(rt.target.get('url')))} model {sanitize(rt.model)}  "
                + _what_plays(rt),
                flush=True,
            )
            if getattr(opts, "headless", False) and rt.spec.progress_interval > 0:
                if getattr(opts, "only_summary", False):
                    rt.progress = gevent.spawn(_progress_loop, rt)
                else:
                    # Locust's own table every 2 s would bury our lines: say how to see them.
                    print(
                        "agentload: progress lines are off while Locust prints its stats "
                        "table; add --only-summary to see agentload's progress instead",
                        flush=True,
                    )
            if role == "master":
                rt.watcher = workers.watch_workers(environment, rt.started_wall)
            if environment.web_ui is not None:
                webui.start_history(environment, rt)
        rt.open_loop = open_loop.start_open_loop(rt)
        quiet_gc()
        if role != "worker":
            run_clock.start(environment, rt.spec.duration_s)  # the length counts from here
    except AgentloadError as e:
        _fail_setup(environment, str(e))


# Allocations between young collections, young collections per middle one, middle ones per
# full one (CPython's defaults: 700, 10, 10): a full collection about every 50 M allocations
# instead of every 70 k (see quiet_gc).
GC_THRESHOLDS = (10_000, 50, 100)
_saved_gc: list[tuple[int, ...]] = []  # the thresholds quiet_gc replaced, until restore_gc


def quiet_gc() -> None:
    """What is loaded by now (profile, planner, tokenizer, Locust, gevent) lives for the whole
    run: move it out of the cyclic collector's reach. Otherwise each full collection walks it
    all while streams wait: 20-50 ms mid-run pauses measured at 200 streams (a burst of late
    socket reads each time); the young generations still collect as before.

    Then make the full collections rare: what the run creates later (sessions, their
    histories, records in flight) still made one every 7-8 s at 200 streams, 10-35 ms of CPU
    each with no socket read (bench/bench_loop_trace.py), long enough that a stream's next
    chunk arrives before its first one was read. Objects freed by reference counting, which is
    nearly all of them, are unaffected; only garbage in reference cycles among objects that
    survived two young collections waits longer to be freed."""
    gc.collect()
    gc.freeze()
    if not _saved_gc:
        _saved_gc.append(gc.get_threshold())
    gc.set_threshold(*GC_THRESHOLDS)


def restore_gc() -> None:
    """The process's own GC thresholds back once the test stops (a script or web UI lives on)."""
    if _saved_gc:
        gc.set_threshold(*_saved_gc.pop())


def _spec_for(environment: Any, role: str, previous: AgentRuntime | None) -> Any:
    """This test's RunSpec: the master's on a worker; otherwise the one given (resolved once),
    re-resolved only when the start form changed it. Raises AgentloadError."""
    opts = environment.parsed_options
    runner = environment.runner
    workers = max(1, runner.worker_count) if role == "master" else 1
    if role == "worker":
        return spec_from_options(opts, environment.host or "", workers)
    base = previous.spec if previous is not None else None
    if base is None:
        base = spec_from_options(opts, environment.host or "", workers)
    if environment.web_ui is not None and form_changed(opts, base):
        base = reresolve(opts, base)
    if previous is not None and previous.planner is not None:
        base = _next_run(base, str(getattr(opts, "out", "") or ""), previous)
    elif not base.run_id or not base.out:
        run_id = base.run_id or artifacts.new_run_id()
        out = (
            str(getattr(opts, "out", "") or "")
            or base.out
            or str(artifacts.default_out_dir(run_id))
        )
        base = base.replace(run_id=run_id, out=out)
    return base.replace(workers=workers) if role == "master" else base


def _next_run(spec: Any, form_out: str, previous: AgentRuntime) -> Any:
    """A test started again from the web UI is a new run: new id, and its own directory
    unless the form names a new one (appending to the last run's files would mix two runs)."""
    run_id = artifacts.new_run_id()
    if form_out and Path(form_out) != Path(previous.out_dir):
        out = form_out
    elif Path(previous.out_dir) == artifacts.default_out_dir(previous.run_id):
        out = str(artifacts.default_out_dir(run_id))
    else:
        out = f"{previous.out_dir}-{run_id}"
    return spec.replace(run_id=run_id, out=out)


def _what_plays(rt: AgentRuntime) -> str:
    """The start banner's last words: the profile and seed, or the trace a replay plays
    (whose traffic is the trace's, not the profile's)."""
    if rt.spec.trace:
        return f"replay of {sanitize(rt.spec.trace)}"
    return f"profile {rt.profile.name}  seed {rt.seed}"


def _progress_loop(rt: AgentRuntime) -> None:
    interval = rt.spec.progress_interval
    while True:
        gevent.sleep(interval)
        users = rt.env.runner.user_count if rt.env.runner else 0
        if _open_loop(rt):  # one Locust user drives the arrivals: its count says nothing
            users = None
        wait = rt.open_loop.next_arrival_in(time.time()) if rt.open_loop is not None else None
        line = progress_line(rt.total, elapsed_s=_elapsed(rt), users=users)
        if wait is not None:
            line += f" | idle: next arrival in {wait:.0f}s"
        print(line, flush=True)


def _open_loop(rt: AgentRuntime) -> bool:
    """Every session starts by an arrival process (no closed-loop class runs users); a
    trace replay plays the trace's arrivals."""
    if rt.spec.trace:
        return True
    stages = rt.spec.profile.run.stages
    rate_stages = bool(stages and getattr(stages[0], "arrival_rate", None) is not None)
    return (rate_stages or is_open_loop(rt.spec.profile)) and not closed_classes(rt.spec.profile)


def _elapsed(rt: AgentRuntime) -> float:
    return time.time() - rt.started_wall


def _on_test_stop(environment: Any, **_kw: Any) -> None:
    restore_gc()
    rt = environment.agentload
    if rt is None:
        if role_of(environment) == "worker" and environment.parsed_options is not None:
            final_report.send_final(environment)  # nothing measured: the master waits for it
        return
    if getattr(rt.watcher, "sweep", None) is not None:
        rt.watcher.sweep()  # workers gone missing just before the stop count as lost
    for name in ("progress", "watcher"):
        greenlet = getattr(rt, name, None)
        if greenlet is not None:
            greenlet.kill(block=False)
    if rt.open_loop is not None:
        rt.open_loop.stop()  # before the writers close: cancelled sessions record themselves
        rt.open_loop = None
    if environment.web_ui is not None:
        webui.stop_history(environment, rt)
    if rt.role == "worker":
        if rt.writer is not None:
            rt.writer.close()
        final_report.send_final(environment)  # the last delta, after the last record
        return
    rt.ended_iso = artifacts.iso_now()
    if rt.role == "master":
        # Every worker's last delta before the summary counts them (workload/locust/final_report)
        rt.unreported = final_report.await_final_reports(environment, rt)
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
    live.attach_report(rt, data)


def _on_worker_report(env: Any, client_id: str, data: dict, **_kw: Any) -> None:
    rt = env.agentload
    if rt is None:
        return
    if "agentload" in data:
        rt.total.merge(Aggregate.from_dict(data["agentload"], slos_by_class=rt.slos))
        live.take_report(env, client_id, data)
    final_report.note_report(rt, client_id, data)  # after its delta: nothing comes later


def _on_quitting(environment: Any, **_kw: Any) -> None:
    rt = environment.agentload
    if rt is None:
        return
    if rt.role == "worker":
        rt.close()
        return
    stop = signals.state_of(environment)
    if rt.planner is None:  # setup failed or never finished: nothing ran
        rt.close()
        if stop.signum is not None:
            environment.process_exit_code = stop.exit_code
        elif not environment.process_exit_code:
            # Set-up (probing the target, the tokenizer) outlasted the run: never exit 0 silently.
            print_error(
                f"set-up did not finish within the run's {rt.spec.duration_s:g}s (the "
                "target's /v1/models or /tokenize answered too slowly); no traffic was sent: "
                "check the target or use a longer --duration"
            )
            environment.process_exit_code = EXIT_BAD_INPUT
        return
    code = _finish(rt)
    otlp_export.stop(rt)  # the last export: after every session recorded itself, before any linger
    if stop.signum is not None or not environment.process_exit_code:
        environment.process_exit_code = code
    # the final counts for a last scrape (not after Ctrl-C: the operator wants out)
    live.linger(environment, rt.spec.metrics_linger_s if stop.signum is None else 0.0)
    if _under_agentload_run(rt):
        # Under `agentload run` our table is the run's table: Locust's (which counts no
        # cancelled requests) would follow it with a different count.
        logging.getLogger("locust.stats_logger").disabled = True


def _on_quit(exit_code: int = 0, **_kw: Any) -> None:
    """After Locust's own final table (plain `locust -f`): explain its count, then our last line."""
    for rt in list(_DEFERRED):
        _DEFERRED.remove(rt)
        locust_count = _locust_request_count(rt)
        ours = rt.total.overall.counters
        if locust_count is not None and locust_count != ours["requests"]:
            print(
                f"agentload: Locust's table above counts {locust_count} requests, agentload "
                f"{ours['requests']}: {ours['cancelled']} cancelled when the run stopped "
                f"{'is' if ours['cancelled'] == 1 else 'are'} recorded only by agentload",
                flush=True,
            )
        if rt.last_line:
            print(rt.last_line, flush=True)


_DEFERRED: list[AgentRuntime] = []


def _under_agentload_run(rt: AgentRuntime) -> bool:
    """`agentload run` hands Locust the resolved spec; plain `locust -f` does not (spec.argv
    is set either way: plain Locust records its own command line)."""
    return bool(getattr(getattr(rt.env, "parsed_options", None), "agent_spec_file", ""))


def _locust_request_count(rt: AgentRuntime) -> int | None:
    try:
        return int(rt.env.runner.stats.total.num_requests)
    except (AttributeError, TypeError, ValueError):
        return None


def _finish(rt: AgentRuntime) -> int:
    """Write the run's summary once (web mode: at test stop, then quitting reuses it)."""
    if rt.finalized:
        return rt.exit_code
    rt.finalized = True
    rt.stop_observers()
    rt.ended_iso = rt.ended_iso or artifacts.iso_now()
    stop = signals.state_of(rt.env)
    stop.finishing = True
    m = rt.measured()
    m.stop_signal = stop.signum
    m.lost_workers = list(stop.lost_workers)
    m.unreported_workers = list(rt.unreported)
    m.settle = rt.role == "master"
    # Plain `locust -f` prints its own table after ours: our last line goes after it.
    m.defer_last_line = not _under_agentload_run(rt) and rt.env.web_ui is None
    rt.exit_code = finalize_run(rt.spec, m)
    rt.total = m.total  # the aggregate that counts what was written
    rt.last_line = m.last_line
    if m.defer_last_line:
        _DEFERRED.append(rt)
    return rt.exit_code
