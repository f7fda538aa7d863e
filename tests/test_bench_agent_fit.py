"""Smoke test of bench/bench_agent_fit.py: it fits the sample and prints the table."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_the_bench_prints_every_statistic_with_met_or_not() -> None:
    p = subprocess.run(
        [sys.executable, "bench/bench_agent_fit.py", "--sessions", "20"],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr[-2000:]
    lines = p.stdout.splitlines()
    table = [x for x in lines if x.endswith((" met", "not met"))]
    assert len(table) >= 10 and "statistics within 10 %" in lines[-1]
