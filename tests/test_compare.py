"""compare: verdicts on synthetic run directories with known differences."""

from __future__ import annotations

import json

import numpy as np
import orjson
import pytest

from tests.builders import ClassSpec, write_run
from workload.analyze.bootstrap import quantile_sorted
from workload.analyze.catalogue import VERDICT_BETTER, VERDICT_SAME, VERDICT_WORSE
from workload.analyze.render import input_warnings, render_text
from workload.analyze.rundata import load_run
from workload.analyze.thresholds import resolve_thresholds
from workload.analyze.traffic import traffic_differences
from workload.analyze.verdict import compare_runs
from workload.cli.main import main as agentload_main
from workload.errors import CompareError


def _classes(n: int = 150) -> dict[str, ClassSpec]:
    return {
        "interactive": ClassSpec(sessions=n, steps=4),
        "background": ClassSpec(sessions=n // 5, steps=2),
    }


@pytest.fixture
def base(tmp_path):
    return write_run(tmp_path / "a", classes=_classes(), noise_seed=1)


def _row(cmp, scope, metric):
    return next(m for m in cmp.metrics if m.scope == scope and m.metric == metric)


def test_same_traffic_is_no_detectable_change(tmp_path, base):
    b = write_run(tmp_path / "b", run_id="run-b", classes=_classes(), noise_seed=2)
    cmp = compare_runs(base, b)
    assert cmp.verdict == VERDICT_SAME
    assert cmp.exit_code == 0
    assert cmp.fingerprint_diff == []
    ttft = _row(cmp, "overall", "ttft_shift")
    assert ttft.gated and ttft.paired_share == 1.0
    assert ttft.ci[0] < 0 < ttft.ci[1]
    p95 = _row(cmp, "overall", "ttft_p95")
    assert not p95.gated and p95.note and p95.ci[0] < 0 < p95.ci[1]


def test_identical_runs_have_zero_change(base):
    cmp = compare_runs(base, base)
    assert cmp.verdict == VERDICT_SAME
    assert _row(cmp, "overall", "ttft_p95").change == 0.0


def test_twenty_percent_slower_ttft_is_worse(tmp_path, base):
    b = write_run(tmp_path / "b", classes=_classes(), noise_seed=2, ttft_scale=1.2)
    cmp = compare_runs(base, b)
    assert cmp.verdict == VERDICT_WORSE
    assert cmp.exit_code == 3
    row = _row(cmp, "overall", "ttft_p95")
    assert row.verdict == VERDICT_WORSE
    assert 0.1 < row.change < 0.3 and row.ci[0] > 0
    # ITL did not change
    assert _row(cmp, "overall", "itl_p95").verdict == VERDICT_SAME
    assert "VERDICT: WORSE" in render_text(cmp)


def test_faster_ttft_is_better_and_passes(tmp_path, base):
    b = write_run(tmp_path / "b", classes=_classes(), noise_seed=2, ttft_scale=0.8)
    cmp = compare_runs(base, b)
    assert cmp.verdict == VERDICT_BETTER
    assert cmp.exit_code == 0


def test_small_change_under_half_threshold_is_not_flagged(tmp_path, base):
    # 3 % is real (identical noise, so the interval excludes 0) but below threshold/2.
    b = write_run(tmp_path / "b", classes=_classes(), noise_seed=1, ttft_scale=1.03)
    row = _row(compare_runs(base, b), "overall", "ttft_p95")
    assert row.ci[0] > 0
    assert row.verdict == VERDICT_SAME


def test_failed_sessions_are_worse(tmp_path, base):
    b = write_run(tmp_path / "b", classes=_classes(), noise_seed=2, failed_sessions=0.2)
    cmp = compare_runs(base, b)
    assert cmp.verdict == VERDICT_WORSE
    assert _row(cmp, "overall", "session_success_ratio").verdict == VERDICT_WORSE
    assert _row(cmp, "overall", "error_ratio").verdict == VERDICT_WORSE
    assert cmp.error_kinds["b"]["overall"]["http_status"] > 0


def test_fewer_completed_sessions_are_worse(tmp_path, base):
    b = write_run(tmp_path / "b", classes=_classes(), noise_seed=2, session_share=0.5)
    cmp = compare_runs(base, b)
    row = _row(cmp, "overall", "completed_sessions")
    # paired runs: shown as worse, gated only when named (instances of one server differ)
    assert row.verdict == VERDICT_WORSE and not row.gated and cmp.exit_code == 0
    cmp = compare_runs(base, b, {"completed_sessions": 10})
    assert _row(cmp, "overall", "completed_sessions").verdict == VERDICT_WORSE
    assert cmp.exit_code == 3


def test_tool_loop_failures_are_worse(tmp_path, base):
    b = write_run(tmp_path / "b", classes=_classes(), noise_seed=2, tool_loop_failures=0.1)
    cmp = compare_runs(base, b)
    assert _row(cmp, "overall", "tool_loop_failure_ratio").verdict == VERDICT_WORSE


def test_fingerprint_and_labels_diff_listed(tmp_path, base):
    fp = {
        "version": {"value": "0.29.0", "source": "/version"},
        "num_gpu_blocks": {"value": 4096, "source": "/metrics cache_config_info"},
        "model_runner": {"value": "v2", "source": "server log"},
    }
    b = write_run(
        tmp_path / "b", classes=_classes(), noise_seed=2, fingerprint=fp, labels={"runner": "v2"}
    )
    cmp = compare_runs(base, b)
    diff = {d["field"]: d for d in cmp.fingerprint_diff}
    assert set(diff) == {"fingerprint.version", "fingerprint.model_runner", "labels.runner"}
    assert (
        diff["fingerprint.version"]["a"] == "0.28.0"
        and diff["fingerprint.version"]["b"] == "0.29.0"
    )
    assert diff["fingerprint.model_runner"]["source_b"] == "server log"
    assert "fingerprint.version" in render_text(cmp)


def test_thresholds_from_profile_then_flags(tmp_path):
    a = write_run(tmp_path / "a", classes=_classes(), compare={"ttft_p95_pct": 50.0, "alpha": 0.1})
    b = write_run(
        tmp_path / "b",
        classes=_classes(),
        noise_seed=2,
        ttft_scale=1.2,
        compare={"ttft_p95_pct": 50.0, "alpha": 0.1},
    )
    cmp = compare_runs(a, b)
    assert cmp.thresholds["ttft_p95"] == 50.0
    assert cmp.confidence == pytest.approx(0.9)
    assert _row(cmp, "overall", "ttft_p95").verdict == VERDICT_SAME  # +20 % < 50 % / 2
    cmp = compare_runs(a, b, {"ttft_p95": 10})
    assert _row(cmp, "overall", "ttft_p95").verdict == VERDICT_WORSE
    cmp = compare_runs(a, b, {"ttft_p95": None, "ttft_p50": None})
    assert not _row(cmp, "overall", "ttft_p95").gated


def test_unknown_threshold_is_bad_input():
    with pytest.raises(CompareError, match="unknown threshold"):
        resolve_thresholds({}, {}, {"ttft_p97": 5})


def test_different_seeds_are_not_paired(tmp_path, base):
    b = write_run(tmp_path / "b", classes=_classes(), noise_seed=2, seed=43)
    cmp = compare_runs(base, b)
    assert any("not paired" in w for w in cmp.warnings)
    assert _row(cmp, "overall", "ttft_p95").paired_share == 0.0


def test_interleaved_blocks_merge_with_block_prefixed_sessions(tmp_path, base):
    root = tmp_path / "blocks"
    for i in range(2):
        write_run(root / f"block-{i}", classes=_classes(30), noise_seed=10 + i)
    data = load_run(root)
    assert len({s["session_id"] for s in data.sessions}) == 2 * (30 + 6)
    assert data.duration_s == pytest.approx(240.0)


def test_to_dict_is_json(tmp_path, base):
    b = write_run(tmp_path / "b", classes=_classes(), noise_seed=2)
    d = compare_runs(base, b).to_dict()
    back = json.loads(orjson.dumps(d))
    assert back["verdict"] == VERDICT_SAME and back["exit_code"] == 0
    assert any(m["metric"] == "ttft_shift" and m["gated"] for m in back["metrics"])
    assert "ttft_shift" in back["method"]["gating"]


def test_quantile_matches_numpy_inverted_cdf():
    rng = np.random.default_rng(3)
    for n in (1, 7, 100, 1001):
        v = np.sort(rng.lognormal(size=n))
        for q in (0.5, 0.95, 0.99):
            assert quantile_sorted(v, q) == np.percentile(v, 100 * q, method="inverted_cdf")


def test_main_compare_exit_codes(tmp_path, base, capsys):
    same = write_run(tmp_path / "same", classes=_classes(), noise_seed=2)
    slow = write_run(tmp_path / "slow", classes=_classes(), noise_seed=2, ttft_scale=1.3)
    assert (
        agentload_main(["compare", str(base), str(same), "--json", str(tmp_path / "c.json")]) == 0
    )
    assert json.loads((tmp_path / "c.json").read_text())["exit_code"] == 0
    assert (
        agentload_main(["compare", str(base), str(slow), "--html", str(tmp_path / "c.html")]) == 3
    )
    assert (tmp_path / "c.html").exists()
    capsys.readouterr()
    assert agentload_main(["compare", str(base), str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not a run directory" in err
    assert agentload_main(["compare", str(base), str(same), "--threshold", "ttft_p95"]) == 2
    assert agentload_main(["compare", str(base)]) == 2
    assert "Traceback" not in capsys.readouterr().err


def test_counts_below_min_samples_are_not_judged(tmp_path):
    few = {"interactive": ClassSpec(sessions=12, steps=4)}
    a = write_run(tmp_path / "a", classes=few)
    b = write_run(tmp_path / "b", classes=few, noise_seed=2, session_share=0.5)
    cmp = compare_runs(a, b, {"completed_sessions": 10})
    row = _row(cmp, "overall", "completed_sessions")
    # measured but too few to judge: it could not have seen a regression, so the verdict
    # cannot pass on it (inconclusive, and it says how many more it needs)
    assert row.gated and row.verdict == "inconclusive" and row.se is None
    assert row.settle_factor == pytest.approx(20 / 6)
    assert cmp.verdict == "inconclusive" and cmp.exit_code == 4
    # it does not widen the other gated intervals either
    assert cmp.gated_count == max(1, sum(1 for m in cmp.rows(gated=True) if m.se))


def test_class_that_is_the_whole_run_is_gated_once(tmp_path):
    one = {"interactive": ClassSpec(sessions=150, steps=4)}
    a = write_run(tmp_path / "a", classes=one)
    b = write_run(tmp_path / "b", classes=one, noise_seed=2, ttft_scale=1.2)
    cmp = compare_runs(a, b)
    over, cls = _row(cmp, "overall", "ttft_shift"), _row(cmp, "class:interactive", "ttft_shift")
    assert over.gated and not cls.gated and cls.same_as == "overall"
    assert cls.ci == pytest.approx(over.ci, rel=0.05)  # its own bootstrap draws
    assert cls.verdict == over.verdict == VERDICT_WORSE
    assert not any(m.gated for m in cmp.rows("class:interactive"))
    # a class-scoped threshold of its own keeps the class row gated
    cmp = compare_runs(a, b, {"interactive.ttft_shift": 15})
    assert _row(cmp, "class:interactive", "ttft_shift").gated


def test_two_classes_keep_their_own_gates(tmp_path, base):
    b = write_run(tmp_path / "b", classes=_classes(), noise_seed=2)
    cmp = compare_runs(base, b)
    assert _row(cmp, "class:interactive", "ttft_shift").gated
    assert _row(cmp, "class:background", "ttft_shift").gated


def test_latency_quantiles_compare_the_requests_both_sides_completed(tmp_path, base):
    # B is the same server (identical noise) but its run ended before the last step of
    # every other session: the quantiles must compare the same requests, not the mix.
    b = write_run(tmp_path / "b", classes=_classes(), noise_seed=1)
    path = b / "requests.jsonl"
    rows = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    kept = [r for r in rows if not (r["step"] == 4 and int(r["session_id"].split("-")[-1]) % 2)]
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in kept))
    cmp = compare_runs(base, b)
    for metric in ("ttft_p95", "itl_p95", "e2e_p95"):
        row = _row(cmp, "overall", metric)
        assert row.change == 0.0 and row.n_a == row.n_b < len(rows)
    lat = [m for m in cmp.rows("overall") if m.metric.endswith(("_p50", "_p95", "_p99"))]
    assert lat and all(m.verdict == VERDICT_SAME for m in lat)
    # the missing work is a throughput change, not a latency one
    assert _row(cmp, "overall", "output_throughput").change < 0
    # unpaired (different traffic), every completed request counts
    other = write_run(tmp_path / "c", classes=_classes(), noise_seed=1, seed=43)
    assert _row(compare_runs(base, other), "overall", "ttft_p95").n_b == sum(
        1 for r in rows if r.get("ttft_ms") is not None
    )


# --------------------------------------------------------------------------- paired shift gating


def test_uniform_ten_percent_ttft_shift_is_worse_via_ttft_shift(tmp_path, base):
    b = write_run(tmp_path / "b", classes=_classes(), noise_seed=2, ttft_scale=1.10)
    cmp = compare_runs(base, b)
    row = _row(cmp, "overall", "ttft_shift")
    assert row.gated and row.verdict == VERDICT_WORSE
    assert row.change == pytest.approx(0.10, abs=0.02) and row.ci[0] > 0
    assert cmp.verdict == VERDICT_WORSE and cmp.exit_code == 3
    assert not _row(cmp, "overall", "ttft_p95").gated
    # E2E shift gates too; the ITL shift (unchanged here) is shown, gated only when named
    assert _row(cmp, "overall", "e2e_shift").gated
    itl = _row(cmp, "overall", "itl_shift")
    assert not itl.gated and itl.note and itl.verdict == VERDICT_SAME
    assert _row(compare_runs(base, b, {"itl_shift": 10}), "overall", "itl_shift").gated
    assert "paired shift" in cmp.gating and "ttft_shift" in render_text(cmp)


def test_identical_runs_shift_is_zero_and_no_change(base):
    cmp = compare_runs(base, base)
    assert cmp.verdict == VERDICT_SAME
    row = _row(cmp, "overall", "ttft_shift")
    assert row.gated and row.change == 0.0 and row.verdict == VERDICT_SAME


def _tail_blowup(tmp_path, base):
    """B: the same requests as A (identical noise) but its slowest 8 % of TTFTs 3x slower."""
    b = write_run(tmp_path / "b", classes=_classes(), noise_seed=1)
    path = b / "requests.jsonl"
    rows = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    ttfts = sorted(r["ttft_ms"] for r in rows if r.get("ttft_ms") is not None)
    cut = ttfts[int(0.92 * len(ttfts))]
    for r in rows:
        if r.get("ttft_ms") is not None and r["ttft_ms"] >= cut:
            r["ttft_ms"] *= 3.0
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    return b


def test_tail_only_blowup_shows_on_p95_but_does_not_gate_by_default(tmp_path, base):
    b = _tail_blowup(tmp_path, base)
    cmp = compare_runs(base, b)
    p95 = _row(cmp, "overall", "ttft_p95")
    assert p95.verdict == VERDICT_WORSE and not p95.gated and "between-instance" in p95.note
    shift = _row(cmp, "overall", "ttft_shift")
    assert shift.gated and shift.change == 0.0 and shift.verdict == VERDICT_SAME
    assert cmp.verdict == VERDICT_SAME and cmp.exit_code == 0
    assert "no between-instance estimate" in render_text(cmp)


def test_tail_only_blowup_gates_when_p95_is_named(tmp_path, base, capsys):
    b = _tail_blowup(tmp_path, base)
    cmp = compare_runs(base, b, {"ttft_p95": 10})
    p95 = _row(cmp, "overall", "ttft_p95")
    assert p95.gated and p95.note is None and p95.verdict == VERDICT_WORSE
    assert cmp.verdict == VERDICT_WORSE
    assert "ttft_p95 gate because a threshold flag names them" in cmp.gating
    assert agentload_main(["compare", str(base), str(b), "--threshold", "ttft_p95=10"]) == 3
    html = tmp_path / "c.html"
    assert agentload_main(["compare", str(base), str(b), "--html", str(html)]) == 0
    page = html.read_text()
    assert "What gates:" in page and "--threshold tpot_p95=10" in page
    capsys.readouterr()


def test_unpaired_runs_gate_on_percentiles(tmp_path, base):
    b = write_run(tmp_path / "b", classes=_classes(), noise_seed=2, seed=43)
    cmp = compare_runs(base, b)
    assert _row(cmp, "overall", "ttft_p95").gated
    shift = _row(cmp, "overall", "ttft_shift")
    assert not shift.gated and shift.verdict == "insufficient data" and "pair" in shift.note
    assert "do not pair" in cmp.gating
    assert not any("ttft_shift" in w for w in cmp.warnings)


def test_profile_ttft_p95_threshold_reaches_the_shift(tmp_path):
    a = write_run(tmp_path / "a", classes=_classes(), compare={"ttft_p95_pct": 50.0})
    b = write_run(
        tmp_path / "b", classes=_classes(), noise_seed=2, ttft_scale=1.2,
        compare={"ttft_p95_pct": 50.0},
    )  # fmt: skip
    cmp = compare_runs(a, b)
    assert cmp.thresholds["ttft_shift"] == 50.0
    assert _row(cmp, "overall", "ttft_shift").verdict == VERDICT_SAME  # +20 % < 50 % / 2
    assert compare_runs(a, b, {"ttft_shift": 10}).verdict == VERDICT_WORSE


def test_throughput_and_cached_ratio_gate_only_when_named_or_unpaired(tmp_path, base):
    b = write_run(tmp_path / "b", classes=_classes(), noise_seed=2)
    cmp = compare_runs(base, b)
    for metric in ("output_throughput", "cached_ratio", "itl_shift"):
        row = _row(cmp, "overall", metric)
        assert not row.gated and row.threshold is not None and row.verdict != "insufficient data"
    for metric in ("output_throughput", "cached_ratio", "ttft_p95", "tpot_p95"):
        assert metric in cmp.gating
    assert not _row(cmp, "overall", "completed_sessions").gated
    assert _row(cmp, "overall", "itl_p95").note.startswith("per-chunk detail")
    assert "between-instance" in _row(cmp, "overall", "ttft_p95").note
    for metric in ("session_success_ratio", "error_ratio", "e2e_shift"):
        assert _row(cmp, "overall", metric).gated
    named = compare_runs(base, b, {"throughput": 5, "cached_ratio": 5})
    assert _row(named, "overall", "output_throughput").gated
    assert _row(named, "overall", "cached_ratio").gated
    unpaired = compare_runs(base, write_run(tmp_path / "c", classes=_classes(), seed=43))
    assert _row(unpaired, "overall", "output_throughput").gated
    assert _row(unpaired, "overall", "tpot_p95").gated
    assert not _row(unpaired, "overall", "itl_p95").gated  # per-chunk: a detail


def test_corrupt_jsonl_lines_are_counted_and_warned(tmp_path):
    """Readers never drop corrupt lines silently (issue 14): counted on RunData, warned in text."""
    from workload.analyze.rundata import load_run

    d = tmp_path / "run"
    d.mkdir()
    (d / "requests.jsonl").write_bytes(
        b'{"user_class": "a", "status": "ok"}\n{not json\n[1, 2]\n\xff\xfe\n{"user_class": "a"'
    )
    (d / "sessions.jsonl").write_bytes(b'{"user_class": "a"}\n')
    data = load_run(d)
    assert len(data.requests) == 1 and data.skipped_lines == 4
    w = data.skipped_warning()
    assert w is not None and "skipped 4 corrupt JSONL lines" in w and "requests.jsonl:2" in w


def test_compare_warns_about_skipped_lines_on_stderr(tmp_path, base):
    b = write_run(tmp_path / "b", run_id="run-b", classes=_classes(30), noise_seed=2)
    with open(b / "requests.jsonl", "ab") as fh:
        fh.write(b"\x1b[2J{torn\n")
    (w,) = input_warnings(compare_runs(base, b))
    assert "skipped 1 corrupt JSONL line" in w and "\x1b" not in w


def _with_content(run, extra_ms: float) -> None:
    """Give every ok request a time to first visible content: its TTFT + hidden reasoning."""
    path = run / "requests.jsonl"
    rows = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    for r in rows:
        if r.get("ttft_ms") is not None:
            r["ttft_content_ms"] = r["ttft_ms"] + extra_ms
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))


def test_time_to_visible_content_is_shown_and_gates_when_named(tmp_path, base):
    # B reasons four times as long before its first visible token; its TTFT is the same
    b = write_run(tmp_path / "b", classes=_classes(), noise_seed=1)
    assert not [m for m in compare_runs(base, b).metrics if m.metric == "ttft_content_p95"]
    a2 = write_run(tmp_path / "a2", classes=_classes(), noise_seed=1)
    _with_content(a2, 200.0)
    _with_content(b, 800.0)
    shown = _row(compare_runs(a2, b), "overall", "ttft_content_p95")
    assert shown.change > 0.5 and not shown.gated  # no threshold by default: shown only
    assert _row(compare_runs(a2, b), "overall", "ttft_p95").change == 0.0
    gated = compare_runs(a2, b, {"ttft_content_p95": 10})
    row = _row(gated, "overall", "ttft_content_p95")
    assert row.gated and row.verdict == VERDICT_WORSE and gated.exit_code == 3


def test_runs_whose_set_overrides_differ_do_not_pair_from_run_json_argv_strings():
    # run.json keeps argv as one string ("agentload run ... --set k=v"); the key read a list only
    base = {"seed": 1, "profile": {"name": "mixed"}, "users": 2}
    a = {**base, "argv": "agentload run --profile mixed --set classes.a.steps=3"}
    b = {**base, "argv": "agentload run --profile mixed --set=classes.a.steps=5"}
    same = {**base, "argv": "agentload run --set classes.a.steps=3 --profile mixed"}
    assert traffic_differences(a, b) == ["set A=['classes.a.steps=3'] B=['classes.a.steps=5']"]
    assert traffic_differences(a, same) == []
    assert traffic_differences({**base, "argv": ["agentload", "run", "--set", "x=1"]}, a)
