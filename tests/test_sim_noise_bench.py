"""The simulator verdict benches: the noise bench on a virtual clock, the tail table's counts."""

from __future__ import annotations

from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"


def test_noise_bench_gives_an_a_a_spread_with_noise_and_none_without(monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(BENCH))
    import bench_sim_noise

    def spread(*sets: str) -> dict[str, float]:
        argv = ["--pairs", "2", "--blocks", "2", "--block-s", "8", "--users", "4"]
        for kv in sets:
            argv += ["--set", kv]
        assert bench_sim_noise.main(argv) == 0
        rows = [ln.split() for ln in capsys.readouterr().out.splitlines()[1:]]
        return {r[0]: float(r[1]) for r in rows}

    noisy = spread()
    assert noisy["tpot_shift"] > 0.05 and noisy["e2e_shift"] > 0.05
    quiet = spread("instance_noise=false")
    assert quiet["tpot_shift"] == pytest.approx(0.0, abs=1e-9)
    assert quiet["ttft_shift"] == pytest.approx(0.0, abs=1e-9)


def _trial(kind: str, verdict: str, tpot_p95: float = 0.0) -> dict:
    return {
        "kind": kind,
        "judged": {
            "verdict": verdict,
            "gated": [{"metric": "tpot_p95", "change": tpot_p95}],
        },
    }


def test_tail_table_counts_clean_a_a_not_worse_a_a_and_detections(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    import verdict_tables

    trials = [
        _trial("aa", "no detectable change"),
        _trial("aa", "inconclusive"),
        _trial("aa", "worse"),
        _trial("tail", "mixed", 0.6),
        _trial("tail", "better", 0.2),
    ]
    monkeypatch.setattr(verdict_tables, "load", lambda campaign: trials)
    table = verdict_tables.table_sim("x")
    assert '"no detectable change" | 1/3' in table
    assert "not called worse | 2/3" in table
    assert "called worse or mixed | 1/2" in table
    assert "1 mixed, 1 better" in table or "1 better, 1 mixed" in table
    assert "tpot_p95 change (median over trials) | +40 %" in table


def test_an_empty_table_is_filled_without_eating_the_text_up_to_the_next_one(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    import verdict_tables

    monkeypatch.setitem(verdict_tables.TABLES, "one", lambda: "ONE")
    monkeypatch.setitem(verdict_tables.TABLES, "two", lambda: "TWO")
    page = (
        "<!-- table:one -->\n<!-- /table -->\nkeep me\n<!-- table:two -->\nold\n<!-- /table -->\n"
    )
    out = verdict_tables.rewrite(page)
    assert out == (
        "<!-- table:one -->\nONE\n<!-- /table -->\nkeep me\n"
        "<!-- table:two -->\nTWO\n<!-- /table -->\n"
    )


def test_clean_spread_leaves_out_blocks_where_a_load_generator_was_short_of_cpu(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    import verdict_tables

    # block 0 is the warm-up; in block 2 the candidate's generator crossed; the second
    # trial recorded no health at all (an older summary): none of its blocks is clean
    crossed = [[False, False], [False, False], [False, True], [False, False]]
    trials = [
        {"kind": "aa", "block_changes": {"tpot_p95": [9.0, 0.1, 5.0, -0.1]},
         "generator_crossed": crossed},
        {"kind": "aa", "block_changes": {"tpot_p95": [0.0, 0.3, 0.3, 0.3]}},
        {"kind": "aa", "block_changes": {"tpot_p95": [0.0, 0.1, -0.1, 0.1]},
         "generator_crossed": [[False, False]] * 4},
    ]  # fmt: skip
    sd, n = verdict_tables.block_spread(trials, "tpot_p95", clean=True)
    assert n == 5 and abs(sd - 0.1) < 1e-9
    sd_all, n_all = verdict_tables.block_spread(trials, "tpot_p95")
    assert n_all == 9 and sd_all > 1.0  # the crossed block's +500 % is in it
    monkeypatch.setattr(verdict_tables, "load", lambda campaign: trials)
    table = verdict_tables.table_spread("real", "sim", clean=True)
    assert "per-block sd (clean blocks)" in table
    assert "| tpot_p95 | 0.100 (5) |" in table
