"""Ctrl-C at an idle web UI says it closes the UI, not that in-flight requests are recorded
(issue 30's newcomer walk: after a test from the form had finished and written its
artifacts, Ctrl-C printed "stopping; in-flight requests are recorded as cancelled and the
summary is written" with nothing in flight and no summary to write)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _stop_line(state: str, web: bool) -> str:
    """The stderr line of a first SIGINT, in a fresh process (`import locust` patches gevent)."""
    code = f"""
import signal, types, gevent
from workload.locust import signals
gevent.spawn = lambda *a, **k: None  # the quit itself is not under test
env = types.SimpleNamespace(runner=types.SimpleNamespace(state={state!r}, quit=lambda: None),
                            web_ui=object() if {web!r} else None)
signals._on_signal(env, signal.SIGINT)
"""
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                       timeout=120)  # fmt: skip
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stderr.strip().splitlines()[-1]


def test_idle_web_ui_says_it_closes() -> None:
    for state in ("stopped", "ready"):
        line = _stop_line(state, web=True)
        assert line.startswith("agentload: SIGINT: closing the web UI (no test running"), line
        assert "in-flight" not in line


def test_a_running_test_still_says_what_a_stop_keeps() -> None:
    assert "in-flight requests are recorded as cancelled" in _stop_line("running", web=True)
    assert "in-flight requests are recorded as cancelled" in _stop_line("stopped", web=False)
