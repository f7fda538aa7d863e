"""bench/cached_composition.py splits an A/A block's cached-ratio change into the prefix
cache's part and the part from which requests each side served; verdict_tables puts the
cached ratio's spread beside the requests a block holds."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"


@pytest.fixture
def cc(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    import cached_composition

    return cached_composition


def _write(block: Path, rows: list[tuple[str, int, int, int]]) -> None:
    """rows: (session, step, prompt tokens, cached tokens)."""
    block.mkdir(parents=True)
    lines = [
        json.dumps(
            {
                "session_id": s,
                "step": st,
                "attempt": 0,
                "status": "ok",
                "prompt_tokens": p,
                "cached_tokens": c,
            }
        )  # fmt: skip
        for s, st, p, c in rows
    ]
    lines.append(json.dumps({"session_id": "x", "step": 9, "status": "error"}))  # not counted
    (block / "requests.jsonl").write_text("\n".join(lines) + "\n")


def test_the_same_requests_with_the_same_hits_leave_only_the_composition(cc):
    a = {("s1", 1): (500, 384), ("s1", 2): (1000, 896)}
    b = {**a, ("s1", 3): (1500, 1408)}  # B got one turn further
    parts = cc.block_parts(a, b)
    assert parts["same_requests"] == 0
    assert parts["composition"] == pytest.approx(parts["change"])
    assert parts["change"] == pytest.approx((384 + 896 + 1408) / 3000 - (384 + 896) / 1500)
    assert parts["unpaired_share"] == pytest.approx(1 / 5)
    assert parts["paired_differ"] == 0 and parts["paired"] == 2


def test_a_paired_request_with_other_hits_is_the_prefix_caches_part(cc):
    a = {("s1", 1): (500, 384), ("s2", 1): (500, 384)}
    b = {("s1", 1): (500, 0), ("s2", 1): (500, 384)}
    parts = cc.block_parts(a, b)
    assert parts["same_requests"] == pytest.approx(-384 / 1000)
    assert parts["composition"] == pytest.approx(0)
    assert parts["paired_differ"] == 1


def test_a_raw_campaign_is_read_block_by_block_and_summarised(cc, tmp_path, capsys):
    for t in range(2):
        base = tmp_path / "raw" / f"trial-00{t}-aa" / "canary"
        base.mkdir(parents=True)
        (base / "comparison.json").write_text("{}")  # a finished trial, as the benches leave it
        (base.parent / "trial.json").write_text("{}")
        for blk in range(2):
            _write(base / "baseline" / f"block-{blk}", [("s", 1, 500, 384), ("s", 2, 900, 768)])
            _write(base / "candidate" / f"block-{blk}", [("s", 1, 500, 384)])
    blocks = cc.campaign([tmp_path / "raw"])
    assert len(blocks) == 4
    s = cc.summary(blocks)
    assert s["sd_same_requests_pp"] == 0 and s["sd_change_pp"] == s["sd_composition_pp"]
    assert cc.main([str(tmp_path / "raw"), "--label", "t"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("t: 4 blocks") and "requests served by one side only: 33.3 %" in out


def test_a_missing_directory_is_one_line_and_exit_2(cc, tmp_path, capsys):
    assert cc.main([str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no such directory" in err


def test_the_cached_spread_is_tabled_beside_the_requests_per_block(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    import verdict_tables

    trials = [
        {
            "kind": "aa",
            "block_changes": {"cached_ratio": [0.5, 0.01, -0.01, 0.01]},
            "requests_per_block": [[1, 1], [100, 100], [100, 100], [100, 100]],
        },  # fmt: skip
    ]
    monkeypatch.setattr(verdict_tables, "load", lambda c: trials)
    row = verdict_tables.table_cached_per_request(("x",)).splitlines()[2]
    # block 0 (the warm-up) is left out of both the spread and the count
    assert row == f"| `x` | 3 | 100 | 1.00 pp | {0.01 * math.sqrt(100):.3f} |"
