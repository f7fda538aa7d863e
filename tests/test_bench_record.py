"""Smoke test of bench/bench_record.py: the smallest configuration runs end to end.

No timing is asserted; only that both sides were driven through and the table printed.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench" / "bench_record.py"


@pytest.mark.slow
def test_the_smallest_configuration_prints_its_table() -> None:
    """Two streams, one round, two proxy processes (their CPU summed)."""
    p = subprocess.run(
        [sys.executable, str(BENCH), "--streams", "2", "--rounds", "1", "--processes", "2"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr[-2000:]
    lines = p.stdout.splitlines()
    for side in ("direct", "proxy", "added"):
        assert any(line.split()[:2] == ["2", side] for line in lines), p.stdout
    assert "us per event" in p.stdout
    assert re.search(r"\(the proxy's 2 processes, event loop (uvloop|asyncio);", p.stdout)
    # the proxy's own figure, from the recording's summary.json
    assert re.search(
        r"^ +2 in proxy: each body read, .* p99 [\d.]+, .* over \d+ reads", p.stdout, re.M
    )
