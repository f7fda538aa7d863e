"""Smoke test of bench/bench_generator.py: the tiniest configuration runs end to end.

No timing is asserted; only that both generators were driven, their requests matched the
timed server's by request id, and the table printed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"


@pytest.fixture
def bench_generator(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    import bench_generator

    return bench_generator


@pytest.mark.slow
def test_tiniest_configuration_runs(bench_generator, capsys) -> None:
    args = argparse.Namespace(ttft=0.05, itl=0.005, tokens=5, duration=6.0)
    results = [bench_generator.measure(gen, 3, args) for gen in ("raw", "agentload")]
    bench_generator.print_table(results)
    for r in results:
        assert r.child.returncode == 0, r.child.output[-2000:]
        assert r.requests > 0 and r.events > 0
        assert r.ttft_err, f"{r.generator}: no request matched the server's by request id"
    out = capsys.readouterr().out
    assert "raw" in out and "agentload" in out


def test_match_pairs_by_request_id(bench_generator) -> None:
    # server: arrived at 1.000 s, first content 1.200 s, last 1.300 s, 6 chunks, max gap 30 ms
    timings = {"a": [1_000_000_000, 1_200_000_000, 1_300_000_000, 6, 30_000_000, 9]}
    rows = [
        {"request_id": "a", "status": "ok", "t_start": 0.999, "ttft_ms": 202.0,
         "itl_ms": {"mean": 21.0, "max": 31.0}},
        {"request_id": "b", "status": "ok", "t_start": 1.0, "ttft_ms": 5.0},
    ]  # fmt: skip
    ttft, lag, itl, itl_max = bench_generator.match(rows, timings)
    assert ttft == pytest.approx([2.0])
    assert lag == pytest.approx([1.0])
    assert itl == pytest.approx([1.0])
    assert itl_max == pytest.approx([1.0])


if sys.platform != "linux":  # the timed server forks and reads /proc-backed psutil figures
    pytestmark = pytest.mark.skip("Linux only")
