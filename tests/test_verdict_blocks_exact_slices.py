"""Verdict: between-instance intervals from blocks, exact tests at small n, pairing, mixed, slices."""

from __future__ import annotations

import json
import math
import statistics

import numpy as np
import orjson
import pytest
import scipy.stats as sps

from tests.builders import ClassSpec, write_run
from workload.analyze.blocks import trimmed_interval
from workload.analyze.catalogue import (
    VERDICT_INCONCLUSIVE,
    VERDICT_MIXED,
    VERDICT_SAME,
    VERDICT_WORSE,
)
from workload.analyze.render import render_text
from workload.analyze.verdict import compare_runs
from workload.cli.main import main as agentload_main


def _row(cmp, scope, metric):
    return next(m for m in cmp.metrics if m.scope == scope and m.metric == metric)


def _one_class(n: int = 60, steps: int = 4) -> dict[str, ClassSpec]:
    return {"interactive": ClassSpec(sessions=n, steps=steps)}


def _blocks(root, scales, noise0, **kw):
    """A side of an interleaved canary: block-i uses traffic seed i on both sides."""
    for i, s in enumerate(scales):
        write_run(
            root / f"block-{i}", classes=_one_class(), traffic_seed=100 + i,
            noise_seed=noise0 + i, ttft_scale=s, duration_s=60.0, **kw,
        )  # fmt: skip
    return root


def test_blocks_gate_tails_on_the_across_block_interval(tmp_path):
    a = _blocks(tmp_path / "a", [1.0] * 5, 10)
    b = _blocks(tmp_path / "b", [1.4] * 5, 20)
    cmp = compare_runs(a, b)
    p95 = _row(cmp, "overall", "ttft_p95")
    assert p95.gated and p95.method == "blocks" and p95.blocks == 5
    # each block's log ratio, kept (comparison.json) so a reader sees which block moved it
    assert len(p95.block_changes) == 5 and all(0.2 < v < 0.5 for v in p95.block_changes)
    assert "block_changes" in p95.to_dict()
    assert "block_changes" not in _row(cmp, "overall", "ttft_shift").to_dict()
    assert p95.verdict == VERDICT_WORSE and cmp.exit_code == 3
    assert cmp.blocks == 5 and "t-interval across 5 blocks per side (trimmed mean" in cmp.gating
    assert _row(cmp, "overall", "output_throughput").method == "blocks"


def test_blocks_see_instance_divergence_that_the_bootstrap_does_not(tmp_path):
    # Each candidate block is a different "instance": +-25 % on everything, mean ~0.
    a = _blocks(tmp_path / "a", [1.0] * 4, 10)
    b = _blocks(tmp_path / "b", [1.25, 0.8, 1.2, 0.82], 20)
    cmp = compare_runs(a, b)
    p95 = _row(cmp, "overall", "ttft_p95")
    # Not worse: the instances disagree around no change. Not "no change" either: an
    # interval that wide still admits a 10 % regression, so the verdict is inconclusive.
    assert p95.gated and p95.method == "blocks" and p95.verdict == VERDICT_INCONCLUSIVE
    assert p95.eq_bound > 0.10 and p95.settle_factor > 1
    assert cmp.verdict == VERDICT_INCONCLUSIVE and cmp.exit_code == 4
    # A single one of those blocks, judged by the session bootstrap, looks like a regression.
    one = compare_runs(a / "block-0", b / "block-0", {"ttft_p95": 10})
    assert _row(one, "overall", "ttft_p95").verdict == VERDICT_WORSE


def test_trimmed_interval_is_the_plain_t_below_five_blocks():
    v = [0.1, -0.05, 0.02, 0.2]
    c, se, df = trimmed_interval(v)
    assert c == pytest.approx(statistics.mean(v)) and df == 3
    assert se == pytest.approx(statistics.stdev(v) / 2)


def test_trimmed_interval_by_hand_for_eight_blocks():
    v = [0.03, -0.02, 0.01, 0.9, 0.0, -0.01, 0.02, -0.04]  # one instance's bad block: +0.9
    c, se, df = trimmed_interval(v)
    s = sorted(v)
    assert df == 5  # one block trimmed from each end: h = 6
    assert c == pytest.approx(statistics.mean(s[1:7]))
    wins = [s[1]] + s[1:7] + [s[6]]
    assert se == pytest.approx(math.sqrt(7 * statistics.variance(wins) / (6 * 5)))
    # the plain mean and SD are pulled by the one block; the trimmed ones are not
    assert c < 0.01 < statistics.mean(v) and se < statistics.stdev(v) / math.sqrt(8) / 5
    # batched (the verdict bench resamples many designs at once): the same numbers per row
    cb, seb, dfb = trimmed_interval(np.asarray([v, v[::-1]]))
    assert np.allclose(cb, c) and np.allclose(seb, se) and dfb == df


def test_one_far_out_block_of_eight_does_not_make_a_a_inconclusive(tmp_path):
    # Eight blocks of the same server; in one, the second instance ran 3x slower (a slow
    # regime for a whole block). The plain t-interval across blocks would admit a
    # threshold-sized regression; the trimmed one does not, and the change is not "worse".
    a = _blocks(tmp_path / "a", [1.0] * 8, 10)
    b = _blocks(tmp_path / "b", [1.0] * 3 + [3.0] + [1.0] * 4, 20)
    p95 = _row(compare_runs(a, b), "overall", "ttft_p95")
    assert p95.gated and p95.method == "blocks" and p95.blocks == 8 and p95.df == 5
    assert p95.verdict == VERDICT_SAME and p95.eq_bound < 0.10
    vals = p95.block_changes
    plain = statistics.mean(vals) + sps.t.ppf(0.95, 7) * statistics.stdev(vals) / math.sqrt(8)
    assert plain > math.log1p(0.10)  # what the untrimmed interval would have said
    # a change in every block still moves the trimmed centre fully
    c = _blocks(tmp_path / "c", [1.4] * 8, 30)
    assert _row(compare_runs(a, c), "overall", "ttft_p95").verdict == VERDICT_WORSE


def test_single_block_says_tails_are_not_gated(tmp_path):
    a = write_run(tmp_path / "a", classes=_one_class())
    b = write_run(tmp_path / "b", classes=_one_class(), noise_seed=2)
    cmp = compare_runs(a, b)
    assert not _row(cmp, "overall", "tpot_p95").gated
    assert "no between-instance estimate" in cmp.gating


def test_small_sample_session_collapse_is_decisive(tmp_path, capsys):
    cls = {"agent": ClassSpec(sessions=26, steps=3, spec_decode=False)}
    a = write_run(tmp_path / "a", classes=cls, duration_s=20.0)
    b = write_run(tmp_path / "b", classes=cls, duration_s=20.0, tool_loop_failures=0.85)
    cmp = compare_runs(a, b)
    ss = _row(cmp, "overall", "session_success_ratio")
    assert ss.method == "exact" and ss.gated and ss.verdict == VERDICT_WORSE
    assert ss.p_value < 1e-6 and ss.ci[1] < 0
    assert _row(cmp, "overall", "tool_loop_failure_ratio").verdict == VERDICT_WORSE
    assert cmp.exit_code == 3
    assert any("(one run of 20 s) is shorter than the design" in w for w in cmp.warnings)
    ex = cmp.tool_loop["b"]
    assert ex and ex[0]["class"] == "agent" and ex[0]["step"] == 3 and ex[0]["request_id"]
    assert agentload_main(["compare", str(a), str(b)]) == 3
    out = capsys.readouterr().out
    assert out.startswith("VERDICT: WORSE (exit 3)")
    assert "First tool-loop failures in B" in out
    html = tmp_path / "c.html"
    assert agentload_main(["compare", str(a), str(b), "--html", str(html)]) == 3
    page = html.read_text()
    assert 'id="tool-loop"' in page and ex[0]["request_id"] in page
    capsys.readouterr()


def test_exact_test_a_a_small_sample_is_judged_only_for_getting_worse(tmp_path):
    cls = {"agent": ClassSpec(sessions=26, steps=3)}
    a = write_run(tmp_path / "a", classes=cls, tool_loop_failures=0.1)
    b = write_run(tmp_path / "b", classes=cls, noise_seed=3, tool_loop_failures=0.1)
    cmp = compare_runs(a, b)
    row = _row(cmp, "overall", "tool_loop_failure_ratio")
    # 10 % failures on both sides of 26 sessions: nothing is worse, and 26 sessions cannot
    # exclude a threshold-sized rise even with no failures at all (Clopper-Pearson at n = 26
    # is about +-15 points wide): the row is judged one way and does not hold the verdict.
    assert row.gated and row.verdict == VERDICT_SAME and row.underpowered >= row.threshold
    assert "overall tool_loop_failure_ratio" not in ((cmp.settle or {}).get("metrics") or [])
    assert any("judged only for getting worse" in w and "tool_loop_failure_ratio" in w
               for w in cmp.warnings)  # fmt: skip
    assert any(
        "tool_loop_failure_ratio" in d for d in cmp.decided_by if "only for getting worse" in d
    )


def _patch_profile(run_dir, **fields):
    p = run_dir / "run.json"
    run = json.loads(p.read_text())
    run["profile"].update(fields)
    p.write_text(json.dumps(run))


def test_runs_pair_only_when_profile_content_matches(tmp_path):
    a = write_run(tmp_path / "a", classes=_one_class())
    b = write_run(tmp_path / "b", classes=_one_class(), noise_seed=2)
    _patch_profile(b, history="actual")
    cmp = compare_runs(a, b)
    assert any(w.startswith("traffic differs") and "history" in w for w in cmp.warnings)
    assert not _row(cmp, "overall", "ttft_shift").gated
    # history: actual on both sides pairs, and says how far the traffic diverged.
    _patch_profile(a, history="actual")
    cmp = compare_runs(a, b)
    assert _row(cmp, "overall", "ttft_shift").gated
    assert cmp.divergence and any("steps/session" in w for w in cmp.warnings)


def test_better_ttft_worse_tpot_is_mixed_and_fails(tmp_path):
    a = write_run(tmp_path / "a", classes=_one_class(120))
    b = write_run(tmp_path / "b", classes=_one_class(120), noise_seed=2, ttft_scale=0.6,
                  itl_scale=1.35)  # fmt: skip
    cmp = compare_runs(a, b)
    assert _row(cmp, "overall", "tpot_shift").verdict == VERDICT_WORSE
    assert _row(cmp, "overall", "ttft_shift").verdict == "better"
    assert cmp.verdict == VERDICT_MIXED and cmp.exit_code == 3
    text = render_text(cmp).splitlines()
    # a synthetic profile names no bench run behind its thresholds: the headline says so
    assert text[0] == "VERDICT: MIXED (exit 3); thresholds not validated for this profile"
    assert text[1].startswith("Decided by: worse: tpot_shift, e2e_shift (session bootstrap)")
    assert "| better: ttft_shift (session bootstrap)" in text[1]
    assert text[2].startswith("Worse (gated): overall TPOT")
    assert not _row(cmp, "overall", "itl_p95").gated


def test_where_names_the_tool_calling_slice(tmp_path):
    a = write_run(tmp_path / "a", classes=_one_class(150))
    b = write_run(tmp_path / "b", classes=_one_class(150), noise_seed=2)
    for d, slow in ((a, 1.0), (b, 1.6)):
        path = d / "requests.jsonl"
        rows = [orjson.loads(x) for x in path.read_bytes().splitlines()]
        for r in rows:
            if r["step"] in (2, 3):  # tool-calling steps, slower on B
                r["tool_calls"] = [{"index": 0, "id": "c", "name": "read_file", "arguments": "{}",
                                    "arguments_valid": True}]  # fmt: skip
                if r.get("tpot_ms"):
                    r["tpot_ms"] *= slow
                    r["e2e_ms"] = r["ttft_ms"] + r["tpot_ms"] * 63
        path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    cmp = compare_runs(a, b)
    assert cmp.verdict in (VERDICT_WORSE, VERDICT_MIXED)
    head = "\n".join(render_text(cmp).splitlines()[:5])
    assert "interactive tool-calling steps TPOT shift +" in head
    assert _row(cmp, "slice:interactive:tool-calling steps", "tpot_shift").gated
    html = tmp_path / "c.html"
    assert agentload_main(["compare", str(a), str(b), "--html", str(html)]) == 3
    page = html.read_text()
    assert 'id="headline"' in page and "tool-calling steps" in page


# ---- item 8: "inconclusive" is a verdict (equivalence) ----------------------------------


def test_wide_interval_is_inconclusive_with_exit_4_and_says_how_much_more(tmp_path, capsys):
    # Same server, noisy requests, 100 sessions: the TTFT shift interval still admits +10 %.
    cl = {"agent": ClassSpec(sessions=100, steps=3)}
    a = write_run(tmp_path / "a", classes=cl, noise_seed=1, noise_sigma=0.6)
    b = write_run(tmp_path / "b", classes=cl, noise_seed=2, noise_sigma=0.6)
    cmp = compare_runs(a, b)
    row = _row(cmp, "overall", "ttft_shift")
    assert row.verdict == VERDICT_INCONCLUSIVE and row.eq_bound >= 0.10
    assert row.ci[0] < 0  # not a regression either
    assert cmp.verdict == VERDICT_INCONCLUSIVE and cmp.exit_code == 4
    f = cmp.settle["factor"]
    assert 1 < f < 25 and cmp.settle["metrics"] == ["overall ttft_shift"]
    assert f"about {f:.1f}x this traffic" in cmp.settle["line"]
    assert agentload_main(["compare", str(a), str(b)]) == 4
    out = capsys.readouterr().out
    assert out.startswith("VERDICT: INCONCLUSIVE (exit 4)")
    assert "Could still hide a threshold-sized regression: overall TTFT shift" in out
    assert "To settle it: run about" in out
    d = json.loads(json.dumps(cmp.to_dict()))
    assert d["exit_code"] == 4 and d["settle"]["factor"] == f


def test_settle_factor_is_what_settles_it(tmp_path):
    """Running the suggested multiple of the traffic (same noise) settles the TTFT shift."""
    cl = {"agent": ClassSpec(sessions=100, steps=3)}
    a = write_run(tmp_path / "a", classes=cl, noise_seed=1, noise_sigma=0.6)
    b = write_run(tmp_path / "b", classes=cl, noise_seed=2, noise_sigma=0.6)
    f = compare_runs(a, b).settle["factor"]
    n = int(100 * f * 1.3) + 1  # a margin: the point estimate moves with new data
    big = {"agent": ClassSpec(sessions=n, steps=3)}
    a2 = write_run(tmp_path / "a2", classes=big, noise_seed=1, noise_sigma=0.6)
    b2 = write_run(tmp_path / "b2", classes=big, noise_seed=2, noise_sigma=0.6)
    cmp = compare_runs(a2, b2)
    assert _row(cmp, "overall", "ttft_shift").verdict == VERDICT_SAME
    assert cmp.verdict == VERDICT_SAME and cmp.exit_code == 0


def test_no_detectable_change_means_every_gated_interval_excludes_the_threshold(tmp_path, capsys):
    a = write_run(tmp_path / "a", classes=_one_class(120))
    b = write_run(tmp_path / "b", classes=_one_class(120), noise_seed=2)
    cmp = compare_runs(a, b)
    assert cmp.verdict == VERDICT_SAME and cmp.settle is None
    for m in cmp.rows(gated=True):
        if m.eq_bound is not None:
            worse = m.eq_bound if m.higher_is_worse else -m.eq_bound
            assert worse < m.threshold, (m.scope, m.metric)
    assert agentload_main(["compare", str(a), str(b)]) == 0
    assert "each interval excludes a regression of its threshold" in capsys.readouterr().out


def test_a_small_class_flags_worse_but_does_not_hold_the_verdict(tmp_path):
    # 150 interactive sessions settle; 12 background sessions cannot rule out 5 points
    # whatever they show: judged only for getting worse, and the warning says so.
    cl = {
        "interactive": ClassSpec(sessions=150, steps=4),
        "background": ClassSpec(sessions=12, steps=2),
    }
    a = write_run(tmp_path / "a", classes=cl)
    b = write_run(tmp_path / "b", classes=cl, noise_seed=2)
    cmp = compare_runs(a, b)
    row = _row(cmp, "class:background", "session_success_ratio")
    assert row.gated and row.underpowered > 0.05 and row.verdict == VERDICT_SAME
    assert cmp.verdict == VERDICT_SAME
    assert any(
        "judged only for getting worse" in w and "class:background" in w for w in cmp.warnings
    )
    # ... and a collapse in that class still fails the canary
    c = write_run(tmp_path / "c", classes=cl, noise_seed=2, tool_loop_failures=0.9)
    cmp = compare_runs(a, c)
    assert _row(cmp, "class:interactive", "session_success_ratio").verdict == VERDICT_WORSE
    assert cmp.exit_code == 3


def test_unknown_compare_field_in_a_recorded_profile_is_ignored(tmp_path):
    """A run written by a newer agentload may carry a compare field this one does not know."""
    a = write_run(tmp_path / "a", classes=_one_class(120))
    b = write_run(tmp_path / "b", classes=_one_class(120), noise_seed=2)
    for d in (a, b):
        p = d / "run.json"
        run = json.loads(p.read_text())
        run["profile"]["compare"] = {"ttft_p95_pct": 10, "future_metric_pct": 5}
        p.write_text(json.dumps(run))
    cmp = compare_runs(a, b)
    assert "future_metric" not in cmp.thresholds and cmp.thresholds["ttft_p95"] == 10


def test_the_divergence_sentence_says_whether_the_traffic_parted_ways():
    from workload.analyze.traffic import divergence_line

    side = {"steps_per_session": 5.0, "prompt_tokens_per_step": 2000.0, "tool_calls_per_step": 0.8}
    same = divergence_line({"a": dict(side), "b": dict(side)})
    assert "here it did not" in same and "steps/session A 5 B 5 (+0 %)" in same
    apart = divergence_line({"a": dict(side), "b": {**side, "steps_per_session": 4.0}})
    assert "diverges by design" in apart and "steps/session A 5 B 4 (-20 %)" in apart
    assert "no rows" in divergence_line({"a": {}, "b": {}})


def test_tpot_p90_is_shown_and_gates_across_blocks_when_a_profile_sets_it(tmp_path):
    a = _blocks(tmp_path / "a", [1.0] * 5, 10)
    b = _blocks(tmp_path / "b", [1.0] * 5, 20, itl_scale=1.6)
    cmp = compare_runs(a, b)
    p90 = _row(cmp, "overall", "tpot_p90")
    # between the p50 and p95 of the same requests, and not gated by default
    for side in ("a", "b"):
        lo, hi = (
            getattr(_row(cmp, "overall", "tpot_p50"), side),
            getattr(_row(cmp, "overall", "tpot_p95"), side),
        )
        assert lo < getattr(p90, side) < hi
    assert not p90.gated and p90.threshold is None
    # A profile's `tpot_p90_pct` (mixed sets 35) makes it gate, across blocks like p95.
    sets = {"tpot_p90_pct": 35}
    a = _blocks(tmp_path / "a35", [1.0] * 5, 10, compare=sets)
    b = _blocks(tmp_path / "b35", [1.0] * 5, 20, itl_scale=1.6, compare=sets)
    cmp = compare_runs(a, b)
    p90 = _row(cmp, "overall", "tpot_p90")
    assert p90.gated and p90.method == "blocks" and p90.blocks == 5
    assert p90.threshold == pytest.approx(0.35)
    assert p90.verdict == VERDICT_WORSE and 0.4 < p90.change < 0.8
    # ... and the flag does, or turns it off
    assert _row(compare_runs(a, b, {"tpot_p90": None}), "overall", "tpot_p90").gated is False


def test_the_mixed_profile_gates_tpot_p90_beside_p95():
    from workload.analyze.thresholds import BETWEEN_INSTANCE, resolve_thresholds
    from workload.plan.loading import load_profile

    prof = {"profile": {"name": "mixed", "compare": load_profile("mixed").compare.model_dump()}}
    thr = resolve_thresholds(prof, prof, None)
    assert thr["tpot_p90"] == 35 and thr["tpot_p95"] == 50
    assert "tpot_p90" in BETWEEN_INSTANCE  # only an across-block interval gates it when paired
    # a profile that does not set it leaves it shown only
    plain = {"profile": {"name": "chat", "compare": load_profile("chat").compare.model_dump()}}
    assert "tpot_p90" not in resolve_thresholds(plain, plain, None)


@pytest.fixture(scope="module")
def tpot_tails(tmp_path_factory):
    """A profile gating TPOT p90 and p95, 5 blocks a side, the candidate's ITL x1.3: the
    two sides and their comparison (read by two tests; ~1.2 CPU-s to compare)."""
    root = tmp_path_factory.mktemp("tpot-tails")
    sets = {"tpot_p90_pct": 35, "tpot_p95_pct": 50}
    a = _blocks(root / "a", [1.0] * 5, 10, compare=sets)
    b = _blocks(root / "b", [1.0] * 5, 20, itl_scale=1.3, compare=sets)
    return a, b, compare_runs(a, b)


def test_the_tpot_tail_rows_share_half_of_alpha_and_the_family_keeps_its_level(tpot_tails):
    from workload.analyze.judge import gate_tails
    from workload.analyze.thresholds import HEADLINE_TAIL_SHARE

    a, b, cmp = tpot_tails
    alpha = 1 - cmp.confidence
    tails = cmp.tails
    assert tails.headline_rows == {("overall", "tpot_p90"), ("overall", "tpot_p95")}
    assert tails.headline == pytest.approx(alpha / 2 * HEADLINE_TAIL_SHARE / 2)
    # every gated row that can vary gets its share, and the shares add up to alpha / 2
    k = cmp.gated_count
    assert 2 * tails.headline + (k - 2) * tails.other == pytest.approx(alpha / 2)
    # the row's interval is the one its share gives (t with the trimmed df)
    p95 = _row(cmp, "overall", "tpot_p95")
    half = sps.t.ppf(1 - tails.headline, p95.df) * p95.se
    assert p95.ci[0] == pytest.approx(math.expm1(math.log1p(p95.change) - half))
    shift = _row(cmp, "overall", "tpot_shift")
    half = sps.norm.ppf(1 - tails.other) * shift.se
    assert shift.ci[1] - shift.ci[0] == pytest.approx(
        math.expm1(math.log1p(shift.change) + half) - math.expm1(math.log1p(shift.change) - half)
    )
    assert "share 50% of the family's error budget" in cmp.gating
    assert cmp.to_dict()["method"]["alpha_split"]["headline_rows"] == [
        "overall tpot_p90",
        "overall tpot_p95",
    ]
    # Without blocks (one run per side) nothing is weighted: the plain Bonferroni split.
    one = compare_runs(a / "block-0", b / "block-0")
    assert not one.tails.headline_rows and one.tails.headline == one.tails.other
    assert gate_tails([], 0.05).other == pytest.approx(0.025)


def _actual(run_dir):
    _patch_profile(run_dir, history="actual")
    return run_dir


def test_history_actual_thresholds_replace_the_profile_ones_only_under_that_mode(tmp_path):
    sets = {"e2e_p95_pct": 25, "history_actual": {"e2e_p95_pct": 50, "tpot_p95_pct": None}}
    a = _blocks(tmp_path / "a", [1.0] * 5, 10, compare=sets)
    b = _blocks(tmp_path / "b", [1.0] * 5, 20, compare=sets)
    cmp = compare_runs(a, b)
    assert cmp.thresholds["e2e_p95"] == 25 and cmp.thresholds["tpot_p95"] == 10
    assert not any("history_actual" in w for w in cmp.warnings)
    for side in (a, b):
        for blk in side.glob("block-*"):
            _actual(blk)
    cmp = compare_runs(a, b)
    assert cmp.thresholds["e2e_p95"] == 50 and "tpot_p95" not in cmp.thresholds
    assert _row(cmp, "overall", "e2e_p95").threshold == pytest.approx(0.5)
    assert not _row(cmp, "overall", "tpot_p95").gated
    assert any(
        "compare.history_actual thresholds apply (e2e_p95_pct: 50, tpot_p95_pct: off)" in w
        for w in cmp.warnings
    )
    # a flag still wins
    assert compare_runs(a, b, {"e2e_p95": 30}).thresholds["e2e_p95"] == 30


def test_a_typo_in_history_actual_is_a_profile_error(tmp_path):
    from workload.plan.profile import CompareThresholds

    with pytest.raises(ValueError, match="unknown threshold 'e2e_p95'.*allowed: ttft_shift_pct"):
        CompareThresholds(history_actual={"e2e_p95": 50})
    with pytest.raises(ValueError, match="must be >= 0"):
        CompareThresholds(history_actual={"e2e_p95_pct": -1})


def test_the_mixed_profile_loosens_e2e_p95_under_history_actual():
    from workload.analyze.thresholds import resolve_thresholds
    from workload.plan.loading import load_profile

    sec = load_profile("mixed").compare.model_dump()
    scripted = {"profile": {"name": "mixed", "history": "scripted", "compare": sec}}
    actual = {"profile": {"name": "mixed", "history": "actual", "compare": sec}}
    assert resolve_thresholds(scripted, scripted, None)["e2e_p95"] == 25
    assert resolve_thresholds(actual, actual, None)["e2e_p95"] == 50
    assert resolve_thresholds(actual, actual, None)["tpot_p95"] == 50


def _hash_content(run_dir, diverge_from: int | None = None, slow: float = 1.0):
    """Give each request a content hash of its (session, step); from step `diverge_from` on
    the content is another (the session parted ways) and its latencies `slow` times longer."""
    p = run_dir / "requests.jsonl"
    rows = [orjson.loads(x) for x in p.read_bytes().splitlines() if x.strip()]
    for r in rows:
        apart = diverge_from is not None and r["step"] >= diverge_from
        r["content_hash"] = f"{abs(hash((r['session_id'], r['step'], apart))) % 16**16:016x}"
        if apart:
            for k in ("ttft_ms", "tpot_ms", "e2e_ms"):
                if r.get(k):
                    r[k] *= slow
    p.write_bytes(b"\n".join(map(orjson.dumps, rows)) + b"\n")
    return run_dir


def test_under_history_actual_the_shifts_compare_only_requests_with_the_same_content(tmp_path):
    classes = {"interactive": ClassSpec(sessions=120, steps=6)}
    a = _hash_content(write_run(tmp_path / "a", classes=classes))
    # B's sessions part ways from step 4 on, and those later (different) requests are slower
    b = _hash_content(write_run(tmp_path / "b", classes=classes, noise_seed=2), 4, slow=2.0)
    scripted = compare_runs(a, b)
    assert _row(scripted, "overall", "ttft_shift").verdict == VERDICT_WORSE
    for d in (a, b):
        _actual(d)
    cmp = compare_runs(a, b)
    shift = _row(cmp, "overall", "ttft_shift")
    assert shift.verdict != VERDICT_WORSE and abs(shift.change) < 0.05
    assert shift.n_a == shift.n_b == 120 * 3  # steps 1-3 of every session
    line = next(w for w in cmp.warnings if "paired shifts compare" in w)
    assert "diverges by design" in line and "the 360 of 720 requests" in line and "(50 %)" in line
    assert cmp.divergence["pairs"] == {"both": 720, "same_content": 360}
    # Runs from before content hashes pair by (session, step) and say so.
    for d in (a, b):
        p = d / "requests.jsonl"
        rows = [orjson.loads(x) for x in p.read_bytes().splitlines() if x.strip()]
        p.write_bytes(b"\n".join(orjson.dumps({**r, "content_hash": None}) for r in rows) + b"\n")
    old = compare_runs(a, b)
    assert _row(old, "overall", "ttft_shift").verdict == VERDICT_WORSE
    assert any("no content hashes recorded" in w for w in old.warnings)


def test_a_class_copy_of_a_tail_row_is_shown_at_the_overall_row_s_share(tpot_tails):
    a, b, cmp = tpot_tails
    top, cls = _row(cmp, "overall", "tpot_p95"), _row(cmp, "class:interactive", "tpot_p95")
    assert top.gated and not cls.gated and cls.method == "blocks"
    # one class: the same blocks, so the same interval
    assert cls.ci == pytest.approx(top.ci)
    # ... unless a flag gates the class row: then it is one of the other rows of the family
    named = compare_runs(a, b, {"interactive.tpot_p95": 40})
    row = _row(named, "class:interactive", "tpot_p95")
    assert row.gated and named.tails.of(row) == named.tails.other < named.tails.headline
