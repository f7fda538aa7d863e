"""Helpers for end-to-end tests that run the real `agentload` command."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

FIXTURES = Path(__file__).parent.parent / "fixtures"
CHAT_PROFILE = str(FIXTURES / "e2e_chat.yaml")


def agentload(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    """Run `agentload ARGS...` in a subprocess; never hangs past `timeout`."""
    return subprocess.run(
        [sys.executable, "-m", "workload.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def quick_run(
    out: Path, *extra: str, users: int = 2, sessions: int = 1
) -> subprocess.CompletedProcess:
    """A short bounded run of the e2e chat profile against the `fast` simulator."""
    return agentload(
        "run", "--profile", CHAT_PROFILE, "--users", str(users), "--duration", "30s",
        "--sessions-per-user", str(sessions), "--sim-preset", "fast", "--out", str(out), *extra,
    )  # fmt: skip
