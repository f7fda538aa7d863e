"""bench/bench_verdict.py's summaries on synthetic A/A results: what the verdict-quality docs
quote from it (resampled A/A rates per history mode, injected tail rises). No simulator."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"


@pytest.fixture
def bv(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    import bench_verdict

    return bench_verdict


def _row(metric, changes, threshold, **kw):
    return {
        "scope": "overall", "metric": metric, "method": "blocks", "block_changes": changes,
        "threshold": threshold, "higher_is_worse": True, "change_kind": "relative", **kw,
    }  # fmt: skip


def _aa(rng, scenario, e2e_sd, e2e_thr, eq_worse=0.1):
    def ch(sd):
        return [round(float(x), 6) for x in sd * rng.standard_normal(8)]

    return {
        "kind": "aa", "scenario": scenario, "verdict": "no detectable change", "gated": 19,
        "gated_rows": [
            _row("tpot_p95", ch(0.24), 0.5), _row("tpot_p90", ch(0.16), 0.35),
            _row("e2e_p95", ch(e2e_sd), e2e_thr, eq_worse=eq_worse),
        ],
    }  # fmt: skip


def test_a_a_blocks_are_resampled_per_history_mode(bv):
    rng = np.random.default_rng(1)
    aa = [_aa(rng, "ttft10", 0.03, 0.25) for _ in range(10)]
    aa += [_aa(rng, "malformed5", 0.25, 0.5, eq_worse=0.3) for _ in range(4)]
    assert bv.history_mode(aa[0]) == "scripted" and bv.history_mode(aa[-1]) == "actual"
    lines = bv.resampled_by_mode(aa)
    heads = [ln.strip() for ln in lines if ln.strip().startswith("history:")]
    assert heads == ["history: actual (4 A/A trials)", "history: scripted (10 A/A trials)"]
    actual = "\n".join(lines[: lines.index(next(x for x in lines if "scripted" in x))])
    # E2E p95 at its history: actual threshold (50 %) with a 25 % spread misses now and then;
    # with scripted history (3 %, threshold 25 %) never
    e2e_actual = float(re.search(r" 8 blocks: .*e2e_p95 ([\d.]+)", actual).group(1))
    scripted = "\n".join(lines[lines.index(next(x for x in lines if "scripted" in x)) :])
    assert float(re.search(r" 8 blocks: .*e2e_p95 ([\d.]+)", scripted).group(1)) == 0.0
    assert 0.0 < e2e_actual < 10.0
    # settled counts each trial against its own threshold: 0.3 < 0.5 and 0.1 < 0.25
    res = "\n".join(bv.resolvable(aa))
    assert re.search(r"e2e_p95 .*threshold 25 / 50; 14/14 settled", res)


def test_an_injected_tail_rise_is_judged_with_the_tail_rows_share_of_alpha(bv, monkeypatch):
    rng = np.random.default_rng(2)
    aa = [_aa(rng, "ttft10", 0.03, 0.25) for _ in range(30)]

    def worse_at(lines, shape, rise):
        ln = next(x for x in lines if x.strip().startswith(f"8 blocks, {shape}:"))
        return int(re.search(rf"\+{rise}%: worse (\d+)%", ln).group(1))

    lines = bv.injected_tail(aa)
    assert worse_at(lines, "broad", 0) == 0 and worse_at(lines, "broad", 80) >= 95
    assert worse_at(lines, "top 5 %", 40) < worse_at(lines, "broad", 40)
    # an equal Bonferroni share (share = 2 of 19 rows) is what the weighting improved on
    monkeypatch.setattr(bv, "HEADLINE_TAIL_SHARE", 2 / 19)
    assert worse_at(bv.injected_tail(aa), "broad", 40) < worse_at(lines, "broad", 40)
