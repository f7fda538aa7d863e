"""One stop path inside the Locust process: signals, lost workers, the last word.

Whatever ends a run (the run time, Ctrl-C, SIGTERM, SIGHUP, the parent dying)
goes the same way: the runner quits first (users are stopped, so in-flight
requests are recorded as ``cancelled`` and workers send their last deltas),
then Locust's ``quitting`` event writes the summary once, from what was
recorded. A second signal stops at once: the summary files are written
atomically, so what was already written stays whole.

A master also watches its workers: one that stops sending heartbeats is
reported (which, from when) and the run is marked partial.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import gevent

from workload.errors import SAME_STOP_S, exit_code_for_signal
from workload.measure import artifacts

log = logging.getLogger("agentload")

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@dataclass
class StopState:
    """How this Locust process is being stopped (one per Environment)."""

    signum: int | None = None  # the first stop signal received
    at: float = 0.0  # when (time.monotonic())
    lost_workers: list[dict[str, Any]] = field(default_factory=list)
    finishing: bool = False  # the summary is being written

    @property
    def exit_code(self) -> int | None:
        return exit_code_for_signal(self.signum) if self.signum else None


def state_of(environment: Any) -> StopState:
    st = getattr(environment, "agentload_stop", None)
    if st is None:
        st = environment.agentload_stop = StopState()
    return st


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def install_signal_handlers(environment: Any, role: str) -> None:
    """Take over SIGINT/SIGTERM/SIGHUP from Locust (whose SIGTERM handler writes its summary
    while users still run, and whose Ctrl-C path ends in a traceback when pressed twice).

    A worker forked by `--processes` ignores SIGINT (Ctrl-C in a terminal reaches the whole
    process group; its master tells it to quit) and dies with its master.
    """
    if role == "worker":
        from workload.procs import set_parent_death_signal

        if getattr(environment.parsed_options, "processes", None):
            set_parent_death_signal(signal.SIGTERM)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        return
    state_of(environment)
    for sig in STOP_SIGNALS:
        signal.signal(sig, lambda signum, frame: _on_signal(environment, signum))


def _on_signal(environment: Any, signum: int) -> None:
    st = state_of(environment)
    name = signal_name(signum)
    if st.signum is not None and time.monotonic() - st.at < SAME_STOP_S:
        return  # the same stop twice at once, not a second press
    if st.signum is None:
        st.signum, st.at = signum, time.monotonic()
        print(
            f"agentload: {name}: stopping; in-flight requests are recorded as cancelled "
            "and the summary is written (send it again to stop at once)",
            file=sys.stderr,
            flush=True,
        )
        gevent.spawn(_quit, environment)
        return
    # The second one: stop now. Summary files are written atomically (temp + rename), and
    # JSONL lines are flushed one by one, so nothing already written is torn.
    code = st.exit_code or exit_code_for_signal(signum)
    rt = getattr(environment, "agentload", None)
    where = f" in {rt.out_dir}" if rt is not None else ""
    print(
        f"agentload: exit {code}: {name} again: stopped at once; files already written{where} "
        "are intact" + ("" if not st.finishing else ", the summary may be missing"),
        file=sys.stderr,
        flush=True,
    )
    _kill_workers(environment)
    os._exit(code)


def _quit(environment: Any) -> None:
    runner = environment.runner
    if runner is not None:
        runner.quit()
    web_ui = getattr(environment, "web_ui", None)
    if web_ui is not None:
        web_ui.stop()


def _kill_workers(environment: Any) -> None:
    """The master's forked workers (`--processes`) must not outlive a hard stop."""
    import contextlib

    with contextlib.suppress(Exception):
        import psutil

        for child in psutil.Process().children(recursive=True):
            with contextlib.suppress(psutil.Error):
                child.kill()


# ---------------------------------------------------------------------------------------------
# the run's length


def take_over_run_time(environment: Any) -> None:
    """A headless run's `--run-time` counts from when its users start, not from Locust's start.

    Locust arms its run-time timer when it spawns the runner, against the event loop's clock
    as last read (before the locustfile loaded), and the run's set-up (tokenizer, prompt
    pool, target probe: about half a second) then runs inside that time: `--duration 60s`
    gave 59.4 s of load and `--duration 1s` none at all. Here Locust is given no run time;
    `start_run_clock` arms it once the set-up is done. With a load shape Locust never armed
    it before the shape ended, and the shape sets the length: left alone then.
    """
    opts = environment.parsed_options
    if (
        opts is None
        or not getattr(opts, "headless", False)
        or getattr(opts, "worker", False)
        or environment.shape_class is not None
        or not getattr(opts, "run_time", None)
    ):
        return
    opts.agentload_run_time, opts.run_time = opts.run_time, None


def start_run_clock(environment: Any) -> Any:
    """Arm the run-time stop taken over by `take_over_run_time`, from now (None: not taken)."""
    opts = environment.parsed_options
    run_time = getattr(opts, "agentload_run_time", None) if opts is not None else None
    if not run_time or getattr(environment, "agentload_clock", None) is not None:
        return None
    gevent.get_hub().loop.update_now()  # the loop's clock, as of now rather than last read

    def time_up() -> None:
        log.info("agentload: run time of %ss reached, stopping", run_time)
        if environment.runner is not None:
            environment.runner.quit()

    environment.agentload_clock = gevent.spawn_later(run_time, time_up)
    return environment.agentload_clock


# ---------------------------------------------------------------------------------------------
# lost workers


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
