"""bench/verdict_tables.py's offline estimate of an instance-offset term in the canary's
across-block interval: a row's interval widened to √(se² + offset²) at the same t."""

from __future__ import annotations

import math
import statistics
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"


@pytest.fixture
def vt(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    import verdict_tables

    return verdict_tables


def _trial(blocks: list[float], verdict: str, t: float = 4.18, method: str = "blocks") -> dict:
    centre = statistics.fmean(blocks)
    half = t * statistics.stdev(blocks) / math.sqrt(len(blocks))
    ci = [math.expm1(centre - half), math.expm1(centre + half)]
    row = {"metric": "tpot_p95", "method": method, "verdict": verdict, "ci": ci,
           "change": math.expm1(centre)}  # fmt: skip
    return {"judged": {"gated": [row]}, "block_changes": {"tpot_p95": blocks}}


def test_an_offset_two_instances_keep_no_longer_decides(vt):
    # sim-aa-9a trial 5's TPOT p95: +21 … +31 % in every block, se 2.2 %
    trial = _trial([0.30577, 0.22199, 0.21205, 0.27753], "worse")
    assert vt.rejudged_with_offset(trial, {}) == {"worse"}
    assert vt.rejudged_with_offset(trial, {"tpot_p95": 0.02}) == {"worse"}
    assert vt.rejudged_with_offset(trial, {"tpot_p95": 0.06}) == set()


def test_a_change_far_beyond_any_offset_stays_called(vt):
    trial = _trial([0.9, 1.0, 1.1, 0.95], "worse")
    assert vt.rejudged_with_offset(trial, {"tpot_p95": 0.06}) == {"worse"}
    better = _trial([-0.9, -1.0, -1.1, -0.95], "better")
    assert vt.rejudged_with_offset(better, {"tpot_p95": 0.06}) == {"better"}


def test_rows_not_judged_across_blocks_keep_their_verdict(vt):
    trial = _trial([0.30577, 0.22199, 0.21205, 0.27753], "worse", method="bootstrap")
    assert vt.rejudged_with_offset(trial, {"tpot_p95": 0.5}) == {"worse"}
