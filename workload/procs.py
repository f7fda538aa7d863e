"""Child processes: start them tied to their parent, stop them politely, then firmly.

Bottom layer (standard library only). Used by `agentload run` (its Locust
child), canary (its two `agentload run` children) and the simulator launcher.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable

PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent(sig: int = signal.SIGTERM) -> Callable[[], None] | None:
    """A preexec_fn asking Linux to send `sig` to the child when its parent dies; None elsewhere.

    Without it a parent killed by SIGKILL (a CI runner timing out) leaves its
    Locust child running load against the target.
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):
        return None

    def _preexec() -> None:
        prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)

    return _preexec


def set_parent_death_signal(sig: int = signal.SIGTERM) -> bool:
    """Ask Linux to send `sig` to this process when its parent dies (a forked Locust worker
    whose master was killed); False where that is not available."""
    fn = die_with_parent(sig)
    if fn is None:
        return False
    try:
        fn()
    except OSError:
        return False
    return True


def stop_child(
    proc: subprocess.Popen,
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


def _signal(proc: subprocess.Popen, sig: int, group: bool) -> None:
    with contextlib.suppress(ProcessLookupError):
        if group:
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
