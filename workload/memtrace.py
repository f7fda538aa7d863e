"""Opt-in memory tracing for soak runs: ``AGENTLOAD_TRACEMALLOC=PATH`` in the environment.

When set, `start_from_env(name)` starts `tracemalloc` and a daemon thread that
every ``AGENTLOAD_TRACEMALLOC_INTERVAL`` seconds (default 60) appends to
``PATH.<name>.<pid>.txt`` the allocation sites that grew most since the first
snapshot (the baseline, taken after one interval, i.e. after warm-up), plus the
traced total. ``AGENTLOAD_TRACEMALLOC_FRAMES`` (default 1) sets the traceback
depth; above 1 the top sites are also printed with their call stacks.

Off (the default) it costs one environment lookup at start-up. Bottom layer:
standard library only. Under gevent the thread is a greenlet and the snapshot
briefly blocks the loop: this is a diagnostic, not for measured runs.
"""

from __future__ import annotations

import os
import threading
import time
import tracemalloc

ENV_PATH = "AGENTLOAD_TRACEMALLOC"
ENV_INTERVAL = "AGENTLOAD_TRACEMALLOC_INTERVAL"
ENV_FRAMES = "AGENTLOAD_TRACEMALLOC_FRAMES"
TOP = 25

_started = False


def start_from_env(name: str) -> str | None:
    """Start tracing if the environment asks for it; returns the output file or None."""
    global _started
    base = os.environ.get(ENV_PATH)
    if not base or _started:
        return None
    _started = True
    try:
        interval = max(1.0, float(os.environ.get(ENV_INTERVAL, "60")))
        frames = max(1, int(os.environ.get(ENV_FRAMES, "1")))
    except ValueError:
        interval, frames = 60.0, 1
    path = f"{base}.{name}.{os.getpid()}.txt"
    tracemalloc.start(frames)
    t = threading.Thread(
        target=_loop, args=(path, interval, frames), name="agentload-memtrace", daemon=True
    )
    t.start()
    return path


def _snapshot() -> tracemalloc.Snapshot:
    return tracemalloc.take_snapshot().filter_traces(
        (
            tracemalloc.Filter(False, tracemalloc.__file__),
            tracemalloc.Filter(False, "<frozen importlib._bootstrap>"),
            tracemalloc.Filter(False, "<frozen importlib._bootstrap_external>"),
            tracemalloc.Filter(False, "<unknown>"),
        )
    )


def _loop(path: str, interval: float, frames: int) -> None:
    t0 = time.monotonic()
    time.sleep(interval)
    base = _snapshot()
    key = "traceback" if frames > 1 else "lineno"
    while True:
        time.sleep(interval)
        snap = _snapshot()
        cur, peak = tracemalloc.get_traced_memory()
        diffs = snap.compare_to(base, key)
        lines = [
            f"=== t={time.monotonic() - t0:.0f}s traced={cur / 2**20:.1f}MiB "
            f"peak={peak / 2**20:.1f}MiB (growth since t={interval:.0f}s)"
        ]
        for i, d in enumerate(diffs[:TOP]):
            fr = d.traceback[-1]  # the allocation site (frames run oldest first)
            lines.append(
                f"{d.size_diff / 1024:+10.1f} KiB {d.count_diff:+8d} blocks "
                f"(now {d.size / 1024:.1f} KiB)  {fr.filename}:{fr.lineno}"
            )
            if frames > 1 and i < 8:
                lines.extend(f"        {f.filename}:{f.lineno}" for f in d.traceback)
        with open(path, "a", encoding="utf-8") as fh:
            fh.write("\n".join(lines) + "\n")
