"""`agentload run`'s side of the one stop path: start the Locust child, route stop signals to it.

The child runs in its own session, so a terminal's Ctrl-C (SIGINT to the whole
foreground process group) reaches only this process, which forwards exactly one
signal per signal received: the child stops once (users stopped, in-flight
requests recorded as cancelled, summary written from the records), and a second
Ctrl-C reaches it as a second signal (stop at once). SIGTERM (a script or CI
cancelling `agentload run ... &`, which ignores SIGINT) and SIGHUP (the terminal
closed) go the same way. The child dies with this process (PR_SET_PDEATHSIG),
and nothing of its process group outlives the run.

Exit status: the child's (130 / 143 / 129 when a signal stopped it, with its
artifacts complete); if the child itself was killed, 128 + the signal this
process received, with one line saying what is missing.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from workload.errors import (
    EXIT_ERRORS,
    READY_FD_ENV,
    SAME_STOP_S,
    exit_code_for_signal,
    stopped_before_run_line,
)
from workload.measure import artifacts
from workload.procs import die_with_parent

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
HARD_STOP_AFTER_S = 60.0  # after a stop signal, the child gets this long to write its summary


def run_child(cmd: list[str], out: str | Path) -> int:
    """Run the Locust command to its end; return the run's exit status."""
    env = dict(os.environ)
    env.setdefault("PYTHONUNBUFFERED", "1")
    # A signal during the child's interpreter start-up (before any of its Python runs) would
    # end it with "Fatal Python error" and a traceback; until it says it runs, a stop kills it
    # instead (it has measured nothing yet).
    ready_r, ready_w = os.pipe()
    os.set_blocking(ready_r, False)
    env[READY_FD_ENV] = str(ready_w)
    received: list[int] = []
    try:
        proc = subprocess.Popen(  # noqa: PLW1509 - preexec_fn: die with this process
            cmd, env=env, preexec_fn=die_with_parent(signal.SIGTERM), start_new_session=True,
            pass_fds=(ready_w,),
        )  # fmt: skip
    finally:
        os.close(ready_w)
    early = _Starting(ready_r)
    previous = {sig: signal.signal(sig, _forwarder(proc, received, early)) for sig in FORWARDED}
    try:
        code = _wait(proc, received)
    finally:
        for sig, handler in previous.items():
            # After a stop signal the run is over: a late press (the second Ctrl-C arriving
            # while the simulator shuts down) must not turn the exit code into a traceback.
            signal.signal(sig, signal.SIG_IGN if received else handler)
        _kill_group(proc.pid)  # forked workers that outlived their master, if any
        os.close(ready_r)
    no_run = not (Path(out) / "run.json").exists() and not _measured(out)
    if received and (early.killed or no_run):
        # Stopped while Locust was still starting (killed here, or workload.locust.launch
        # exited quietly): there is no run, so the run's own last line never came. (A run
        # that recorded requests and then stopped at once, say with the signal sent to both
        # processes, wrote no run.json but said its own last line: not "nothing measured".)
        print(stopped_before_run_line(received[0]), file=sys.stderr, flush=True)
        return exit_code_for_signal(received[0])
    if code >= 0:
        return code
    # The child itself was killed: its last line is missing, so say what happened here.
    sig = received[0] if received else -code
    status = exit_code_for_signal(sig) if received else EXIT_ERRORS
    print(
        f"agentload: exit {status}: the Locust process was killed ({_name(-code)}); "
        f"files already written in {out} are intact, the summary may be missing",
        file=sys.stderr,
        flush=True,
    )
    return status


class _Starting:
    """Whether the child's Python code runs yet (one byte on the ready pipe)."""

    def __init__(self, fd: int) -> None:
        self.fd, self.ready, self.killed = fd, False, False

    def running(self) -> bool:
        if not self.ready:
            with contextlib.suppress(BlockingIOError, OSError):
                self.ready = bool(os.read(self.fd, 1))
        return self.ready


def _forwarder(
    proc: subprocess.Popen, received: list[int], early: _Starting
) -> Callable[[int, object], None]:
    last = [0.0]

    def forward(signum: int, _frame: object) -> None:
        now = time.monotonic()
        if received and now - last[0] < SAME_STOP_S:
            # The same stop twice at once (a terminal's Ctrl-C to the group and a supervisor
            # such as `agentload canary` passing it on): one stop, not "stop at once".
            return
        last[0] = now
        received.append(signum)
        with contextlib.suppress(ProcessLookupError):
            if not early.running():
                early.killed = True
                os.killpg(proc.pid, signal.SIGKILL)
            elif len(received) <= 2:
                proc.send_signal(signum)  # the first: stop; the second: stop at once
            else:
                os.killpg(proc.pid, signal.SIGKILL)

    return forward


def _wait(proc: subprocess.Popen, received: list[int]) -> int:
    deadline: float | None = None
    while True:
        try:
            return proc.wait(timeout=0.5)
        except subprocess.TimeoutExpired:
            pass
        if received and deadline is None:
            deadline = time.monotonic() + HARD_STOP_AFTER_S
        if deadline is not None and time.monotonic() > deadline:
            _kill_group(proc.pid)


def _measured(out: str | Path) -> bool:
    """Whether the run recorded a request or a session (its JSONL files, workers' included)."""
    with contextlib.suppress(OSError):
        return any(artifacts.count_lines(Path(out), kind) for kind in ("requests", "sessions"))
    return False


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"
