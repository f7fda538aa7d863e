"""The one stop path: how every agentload process is stopped, from both ends.

Bottom layer (standard library only): `agentload run`, canary, capacity, the simulator
launcher and the Locust child all stop through this module.

* **Before the run** (the profile loads, the target is probed, the simulator starts):
  ``before_run()`` turns SIGINT / SIGTERM / SIGHUP into ``StoppedBeforeRun``; the edge
  prints ``stopped_before_run_line`` and exits 128 + the signal. Nothing was measured.
* **The parent of a run** (``run_child``): the Locust child runs in its own session, so a
  terminal's Ctrl-C reaches only the parent, which forwards exactly one signal per stop:
  the child stops once (users stopped, in-flight requests recorded as cancelled, summary
  written from the records), and a second press reaches it as a second signal (stop at
  once). Until the child's Python runs (it writes one byte on the ready pipe named by
  ``READY_FD_ENV``) a stop kills it instead: it has measured nothing. The child dies with
  its parent (PR_SET_PDEATHSIG), and nothing of its process group outlives the run.
* **Inside the run** (the Locust process, ``workload.locust.signals`` wires it):
  ``StopLatch`` decides what a signal means: the first stops gracefully, the same stop
  arriving twice within ``SAME_STOP_S`` (a terminal's Ctrl-C to the group plus a
  supervisor passing it on) is one stop, a later one stops at once.
* **Children of orchestration** (canary sides, capacity steps, servers, the simulator):
  ``die_with_parent`` at start, ``stop_child`` (signal, wait, kill) at the end. A stop of
  the orchestrator itself (canary, capacity run under ``before_run`` too, so SIGTERM / SIGHUP
  raise like Ctrl-C) reaches the running children through ``forward_stop``: they finish
  their runs, the orchestrator writes what it has and ends with ``stopped_line``.

Exit status of a stopped run: 128 + the signal (130 SIGINT, 143 SIGTERM, 129 SIGHUP),
with its artifacts complete.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import TextIO

from workload.errors import EXIT_ERRORS

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# The env var naming the fd on which the child writes one byte once its Python runs.
READY_FD_ENV = "AGENTLOAD_READY_FD"
# Stop signals this close together are one stop, on both sides.
SAME_STOP_S = 0.25
HARD_STOP_AFTER_S = 60.0  # after a stop signal, the child gets this long to write its summary
PR_SET_PDEATHSIG = 1  # linux/prctl.h


def exit_code_for_signal(signum: int) -> int:
    """The conventional shell exit status of a run ended by signal `signum` (128 + signum)."""
    return 128 + int(signum)


def signal_name(signum: int) -> str:
    """SIGINT for 2; 'signal N' for a number with no name."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def stopped_before_run_line(signum: int) -> str:
    """The last line of a command stopped by `signum` before its run began."""
    return (
        f"agentload: exit {exit_code_for_signal(signum)}: interrupted "
        f"({signal_name(signum)}) before the run started; nothing was measured"
    )


# ---------------------------------------------------------------------------------------------
# before the run


class StoppedBeforeRun(BaseException):
    """A stop signal before any traffic was sent (a BaseException: no `except Exception`
    on the way up may swallow it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return exit_code_for_signal(self.signum)


def _raise_stopped(signum: int, _frame: FrameType | None) -> None:
    raise StoppedBeforeRun(signum)


@contextlib.contextmanager
def before_run() -> Iterator[None]:
    """While set-up runs: SIGTERM / SIGHUP raise StoppedBeforeRun (SIGINT raises
    KeyboardInterrupt as always; the edge treats both alike). Handlers restored after."""
    previous = {sig: signal.signal(sig, _raise_stopped) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def ignore_stops() -> None:
    """The run is over: a late press while the simulator shuts down must not become a
    traceback or change the exit code."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)


# ---------------------------------------------------------------------------------------------
# the stop decision inside a run


@dataclass
class StopLatch:
    """What a stop signal means to a running process: 'stop' (the first), 'same' (the same
    stop delivered twice at once: ignore it) or 'now' (a second press: stop at once)."""

    signum: int | None = None  # the first stop signal received
    at: float = 0.0  # when (time.monotonic())

    def receive(self, signum: int, now: float | None = None) -> str:
        now = time.monotonic() if now is None else now
        if self.signum is None:
            self.signum, self.at = signum, now
            return "stop"
        if now - self.at < SAME_STOP_S:
            return "same"
        return "now"

    @property
    def exit_code(self) -> int | None:
        return exit_code_for_signal(self.signum) if self.signum else None


# ---------------------------------------------------------------------------------------------
# child processes


def die_with_parent(sig: int = signal.SIGTERM) -> Callable[[], None] | None:
    """A preexec_fn asking Linux to send `sig` to the child when its parent dies; None elsewhere.

    Without it a parent killed by SIGKILL (a CI runner timing out) leaves its
    Locust child running load against the target.

    The child also gets `sig` back at its default action before it executes: a disposition
    of SIG_IGN is inherited across fork and exec, and a parent whose run is over ignores
    its stop signals (`ignore_stops`), so a child started after that would ignore the very
    signal meant to end it and outlive its parent (seen in the test suite, whose workers
    had run such a parent in-process). A child that wants a handler installs its own.
    """
    libc = _libc()
    if libc is None:
        return None
    prctl, set_handler = libc.prctl, libc.signal
    set_handler.argtypes = (ctypes.c_int, ctypes.c_void_p)
    set_handler.restype = ctypes.c_void_p

    def _preexec() -> None:
        set_handler(int(sig), None)  # SIG_DFL
        prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)

    return _preexec


def _libc() -> ctypes.CDLL | None:
    """The C library where PR_SET_PDEATHSIG exists (Linux); None elsewhere."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl, libc.signal  # noqa: B018 - both must exist
    except (OSError, AttributeError):
        return None
    return libc


def set_parent_death_signal(sig: int = signal.SIGTERM) -> bool:
    """Ask Linux to send `sig` to this process when its parent dies (a forked Locust worker
    whose master was killed); False where that is not available. This process's own
    handlers stay as they are (it installs its own)."""
    libc = _libc()
    if libc is None:
        return False
    return libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0


def stop_child(
    proc: subprocess.Popen[bytes] | subprocess.Popen[str],
    *,
    sig: int | None = signal.SIGINT,
    timeout_s: float = 30.0,
    group: bool = False,
) -> int:
    """Send `sig` (to the process group with `group`; None: send nothing), wait up to
    `timeout_s`, then kill.

    Returns the child's exit status (negative: the signal that ended it, as Popen reports).
    """
    if proc.poll() is None:
        if sig is not None:
            _signal(proc, sig, group)
        try:
            return proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _signal(proc, signal.SIGKILL, group)
    return proc.wait()


def _signal(proc: subprocess.Popen[bytes] | subprocess.Popen[str], sig: int, group: bool) -> None:
    with contextlib.suppress(ProcessLookupError):
        if group:
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)


def kill_group(pgid: int) -> None:
    """SIGKILL a whole process group (forked workers that outlived their master)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


# ---------------------------------------------------------------------------------------------
# an orchestrator's stop (canary, capacity): its children finish their runs

# What a stop signal raises in an orchestrator under ``before_run``: Ctrl-C's
# KeyboardInterrupt, or StoppedBeforeRun for SIGTERM / SIGHUP.
STOPS = (KeyboardInterrupt, StoppedBeforeRun)


def stop_signum(exc: BaseException) -> int:
    """The signal behind a caught stop (one of STOPS): SIGINT for Ctrl-C."""
    return exc.signum if isinstance(exc, StoppedBeforeRun) else int(signal.SIGINT)


def forward_stop(
    procs: list[subprocess.Popen[bytes]], signum: int, *, timeout_s: float = HARD_STOP_AFTER_S + 10
) -> list[int]:
    """Pass a stop on to running children (each an `agentload run` or a Locust child, which
    finishes its run: in-flight requests recorded, summary written) and wait for them.

    A further stop signal while they finish is passed on too (a second press: stop at once);
    the same stop delivered twice at once (a terminal's Ctrl-C reaches the children as well)
    is passed on once. A child still running after `timeout_s` is killed. Returns the exit
    statuses; stop signals are ignored afterwards (the orchestrator writes its outputs).
    """
    latch = StopLatch()
    latch.receive(signum)

    def again(sig: int, _frame: FrameType | None) -> None:
        if latch.receive(sig) == "same":
            return
        latch.at = time.monotonic()
        for p in procs:
            if p.poll() is None:
                _signal(p, sig, False)

    previous = {sig: signal.signal(sig, again) for sig in STOP_SIGNALS}
    try:
        for p in procs:
            if p.poll() is None:
                _signal(p, signum, False)
        return [stop_child(p, sig=None, timeout_s=timeout_s) for p in procs]
    finally:
        for sig in previous:
            signal.signal(sig, signal.SIG_IGN)


def stopped_line(signum: int, what: str) -> str:
    """The last line of an orchestrator stopped by `signum` after traffic began."""
    return f"agentload: exit {exit_code_for_signal(signum)}: interrupted ({signal_name(signum)}); {what}"


# ---------------------------------------------------------------------------------------------
# the parent of a run


def run_child(
    cmd: list[str],
    out: str | Path,
    *,
    measured: Callable[[], bool],
    stdin: bytes | None = None,
) -> int:
    """Run the Locust command to its end, routing stop signals to it; the run's exit status.

    `measured()` says whether the run recorded anything (read after the child ended);
    `stdin` is written to the child's standard input (the run's spec) and closed.
    """
    env = dict(os.environ)
    env.setdefault("PYTHONUNBUFFERED", "1")
    # A signal during the child's interpreter start-up (before any of its Python runs) would
    # end it with "Fatal Python error" and a traceback; until it says it runs, a stop kills it.
    ready_r, ready_w = os.pipe()
    os.set_blocking(ready_r, False)
    env[READY_FD_ENV] = str(ready_w)
    received: list[int] = []
    try:
        proc = subprocess.Popen(  # noqa: PLW1509 - preexec_fn: die with this process
            cmd, env=env, preexec_fn=die_with_parent(signal.SIGTERM), start_new_session=True,
            pass_fds=(ready_w,), stdin=subprocess.PIPE if stdin is not None else None,
        )  # fmt: skip
    finally:
        os.close(ready_w)
    if stdin is not None and proc.stdin is not None:
        with contextlib.suppress(BrokenPipeError):
            proc.stdin.write(stdin)
        proc.stdin.close()
    early = _Starting(ready_r)
    previous = {sig: signal.signal(sig, _forwarder(proc, received, early)) for sig in STOP_SIGNALS}
    try:
        code = _wait(proc, received)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_IGN if received else handler)
        kill_group(proc.pid)
        os.close(ready_r)
    no_run = not (Path(out) / "run.json").exists() and not measured()
    if received and (early.killed or no_run):
        # Stopped while Locust was still starting (killed here, or workload.locust.launch
        # exited quietly): there is no run, so the run's own last line never came.
        print(stopped_before_run_line(received[0]), file=sys.stderr, flush=True)
        return exit_code_for_signal(received[0])
    if code >= 0:
        return code
    # The child itself was killed: its last line is missing, so say what happened here.
    got = received[0] if received else -code
    status = exit_code_for_signal(got) if received else EXIT_ERRORS
    print(
        f"agentload: exit {status}: the Locust process was killed ({signal_name(-code)}); "
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
    proc: subprocess.Popen[bytes], received: list[int], early: _Starting
) -> Callable[[int, FrameType | None], None]:
    latch = StopLatch()

    def forward(signum: int, _frame: FrameType | None) -> None:
        if latch.receive(signum) == "same":
            return
        latch.at = time.monotonic()  # a press after a repeat counts from the repeat
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


def _wait(proc: subprocess.Popen[bytes], received: list[int]) -> int:
    deadline: float | None = None
    while True:
        try:
            return proc.wait(timeout=0.5)
        except subprocess.TimeoutExpired:
            pass
        if received and deadline is None:
            deadline = time.monotonic() + HARD_STOP_AFTER_S
        if deadline is not None and time.monotonic() > deadline:
            kill_group(proc.pid)


# ---------------------------------------------------------------------------------------------
# a closed standard output


class _ClosedPipeTolerant:
    """sys.stdout that, once its reader went away (`agentload run … | head -1`), sends the
    rest to /dev/null instead of raising BrokenPipeError into whatever printed: a progress
    line must not stop the run, its summary or its artifacts."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._gone = False

    def write(self, text: str) -> int:
        if not self._gone:
            try:
                return self._stream.write(text)
            except BrokenPipeError:
                self._drop()
        return len(text)

    def flush(self) -> None:
        if not self._gone:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._drop()

    def _drop(self) -> None:
        self._gone = True
        # fd 1 to /dev/null: the interpreter's last flush and any child stay quiet too
        with contextlib.suppress(OSError, ValueError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)

    def __getattr__(self, name: str) -> object:
        return getattr(self._stream, name)


def tolerate_closed_stdout() -> None:
    """From now on a closed standard output is silence, never an exception."""
    if not isinstance(sys.stdout, _ClosedPipeTolerant) and sys.stdout is not None:
        sys.stdout = _ClosedPipeTolerant(sys.stdout)  # type: ignore[assignment]
