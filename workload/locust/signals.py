"""The Locust process's end of the one stop path (`workload.stopping`): its signal handlers.

Whatever ends a run (the run time, Ctrl-C, SIGTERM, SIGHUP, the parent dying)
goes the same way: the runner quits first (users are stopped, so in-flight
requests are recorded as ``cancelled`` and workers send their last deltas),
then Locust's ``quitting`` event writes the summary once, from what was
recorded. What a signal means (stop, the same stop twice, stop at once) is the
``StopLatch``'s decision; a stop at once exits at once: the summary files are
written atomically, so what was already written stays whole.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from dataclasses import dataclass, field
from typing import Any

import gevent
import psutil
from locust.runners import STATE_INIT, STATE_STOPPED

from workload.stopping import STOP_SIGNALS, StopLatch, set_parent_death_signal, signal_name

IDLE_STATES = (STATE_INIT, STATE_STOPPED)  # a web UI's runner before a start, or after a stop


@dataclass
class StopState:
    """How this Locust process is being stopped (one per Environment)."""

    latch: StopLatch = field(default_factory=StopLatch)
    lost_workers: list[dict[str, Any]] = field(default_factory=list)
    finishing: bool = False  # the summary is being written

    @property
    def signum(self) -> int | None:
        """The first stop signal received (None: not stopped by a signal)."""
        return self.latch.signum

    @property
    def exit_code(self) -> int | None:
        return self.latch.exit_code


def state_of(environment: Any) -> StopState:
    """The Environment's StopState (made on first use)."""
    st = getattr(environment, "agentload_stop", None)
    if st is None:
        st = environment.agentload_stop = StopState()
    return st


def install_signal_handlers(environment: Any, role: str) -> None:
    """Take over SIGINT/SIGTERM/SIGHUP from Locust (whose SIGTERM handler writes its summary
    while users still run, and whose Ctrl-C path ends in a traceback when pressed twice).

    A worker forked by `--processes` ignores SIGINT (Ctrl-C in a terminal reaches the whole
    process group; its master tells it to quit) and dies with its master.
    """
    if role == "worker":
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
    meaning = st.latch.receive(signum)
    if meaning == "same":
        return  # the same stop twice at once, not a second press
    if meaning == "stop":
        print(
            f"agentload: {name}: closing the web UI (no test running: each test started "
            "from it has written its artifacts already)"
            if _web_ui_idle(environment)
            else f"agentload: {name}: stopping; in-flight requests are recorded as cancelled "
            "and the summary is written (send it again to stop at once)",
            file=sys.stderr,
            flush=True,
        )
        gevent.spawn(_quit, environment)
        return
    code = st.exit_code or 128 + signum
    rt = getattr(environment, "agentload", None)
    where = f" in {rt.out_dir}" if rt is not None else ""
    print(
        f"agentload: exit {code}: {name} again: stopped at once; files already written{where} "
        "are intact" + ("" if not st.finishing else ", the summary may be missing"),
        file=sys.stderr,
        flush=True,
    )
    _kill_workers()
    os._exit(code)


def _web_ui_idle(environment: Any) -> bool:
    """The web UI is up and no test is running: a stop has nothing in flight to record."""
    runner = environment.runner
    state = getattr(runner, "state", None) if runner is not None else None
    return getattr(environment, "web_ui", None) is not None and state in IDLE_STATES


def _quit(environment: Any) -> None:
    runner = environment.runner
    if runner is not None:
        runner.quit()
    web_ui = getattr(environment, "web_ui", None)
    if web_ui is not None:
        web_ui.stop()


def _kill_workers() -> None:
    """The master's forked workers (`--processes`) must not outlive a hard stop."""
    with contextlib.suppress(psutil.Error):
        for child in psutil.Process().children(recursive=True):
            with contextlib.suppress(psutil.Error):
                child.kill()
