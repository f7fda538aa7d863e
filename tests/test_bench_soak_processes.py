"""bench/bench_soak_processes.py judges each process on its own slope (no timing here)."""

from __future__ import annotations

from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
MiB = 2**20


@pytest.fixture
def soak(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    import bench_soak_processes

    return bench_soak_processes


def _samples(rss_per_min_mib: float, fds_step: int = 0) -> list[dict]:
    return [
        {"t": t, "procs": {"sim": {"rss": 100 * MiB + rss_per_min_mib * MiB * t / 60,
                                   "fds": 27 + (fds_step if t > 1500 else 0), "pid": 1}}}
        for t in range(0, 1801, 30)
    ]  # fmt: skip


def test_growth_under_half_a_mib_a_minute_is_met_and_above_is_not(soak):
    g = soak.judge(_samples(0.3), "sim", 900, 1800)
    assert g["verdict"] == "met" and g["mib_per_min"] == pytest.approx(0.3)
    assert g["samples"] == 31
    assert soak.judge(_samples(0.95), "sim", 900, 1800)["verdict"] == "not met"
    assert soak.judge(_samples(0.0, fds_step=5), "sim", 900, 1800)["verdict"] == "not met"
    assert soak.judge(_samples(0.0), "gone", 900, 1800)["verdict"] == "too few samples"
