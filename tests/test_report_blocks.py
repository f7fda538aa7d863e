"""A canary side of blocks in compare.html: described as a whole, each block in its own row."""

from __future__ import annotations

import json
from pathlib import Path

from tests.builders import ClassSpec, write_run
from workload.analyze.rundata import load_run
from workload.analyze.verdict import compare_runs
from workload.measure.artifacts import iter_jsonl, read_json, write_json
from workload.measure.records import RequestRecord, SessionRecord
from workload.measure.stats import Aggregate
from workload.report.blocks import block_rows, side_header, side_summary
from workload.report.compare_report import write_compare_report

FAILED = "agent: ttft_p95_ms = 268 ms (need <= 150, n=29) VIOLATED"


def _side(root: Path, codes: list[int], stats: bool = False) -> Path:
    for i, code in enumerate(codes):
        block = write_run(
            root / f"block-{i}", classes={"agent": ClassSpec(sessions=10 + i, steps=3)},
            traffic_seed=i, seed=1 + i, noise_seed=100 + i,
        )  # fmt: skip
        run = read_json(block / "run.json")
        run["exit_code"] = code
        run["duration_s"] = 10.0
        run["slo_results"] = [{"class_name": "agent", "metric": "ttft_p95_ms", "passed": code != 3,
                               "message": FAILED if code == 3 else "agent: ttft_p95_ms met"}]  # fmt: skip
        if stats:
            agg = Aggregate()
            rf, sf = (
                set(RequestRecord.__dataclass_fields__),
                set(SessionRecord.__dataclass_fields__),
            )
            for r in iter_jsonl(block / "requests.jsonl"):
                agg.add_request(RequestRecord(**{k: v for k, v in r.items() if k in rf}))
            for s in iter_jsonl(block / "sessions.jsonl"):
                agg.add_session(SessionRecord(**{k: v for k, v in s.items() if k in sf}))
            write_json(block / "stats.json", agg.to_dict())
            run["summary"] = agg.summary(10.0)  # block-0's summary must not stand for the side
        write_json(block / "run.json", run)
    return root


def _requests(root: Path) -> int:
    return sum(1 for p in root.glob("block-*/requests.jsonl") for _ in iter_jsonl(p))


def test_side_summary_and_header_describe_every_block(tmp_path: Path) -> None:
    for stats in (False, True):
        side = _side(tmp_path / f"a-{stats}", [0, 3, 3], stats=stats)
        data = load_run(side)
        assert side_summary(data)["overall"]["requests"] == _requests(side)  # not block-0's 30
        header = dict(side_header(data))
        assert header["run"].startswith("3 blocks")
        assert header["exit code"] == "per block: 0 in 1 of 3, 3 in 2 of 3"
        assert header["seed"] == "1 … 3"


def test_block_table_has_each_block_exit_and_slo_failures(tmp_path: Path) -> None:
    a = load_run(_side(tmp_path / "a", [0, 3]))
    b = load_run(_side(tmp_path / "b", [3, 0]))
    rows = block_rows(a, b)
    assert [r["block"] for r in rows] == ["block-0", "block-1"]
    assert [r["a"]["exit"] for r in rows] == ["0", "3"]
    assert rows[0]["b"]["slo_failed"] == [FAILED] and rows[0]["a"]["slo_failed"] == []


def test_compare_page_of_blocks_says_what_it_shows(tmp_path: Path) -> None:
    a, b = (
        _side(tmp_path / "a", [0, 3, 3], stats=True),
        _side(tmp_path / "b", [0, 0, 3], stats=True),
    )
    html = write_compare_report(compare_runs(a, b), tmp_path / "compare.html").read_text()
    assert 'id="blocks"' in html and "3 of 6 block runs failed an SLO" in html
    assert html.count(FAILED.replace(">", "&gt;").replace("<", "&lt;")) == 3
    assert "All 3 blocks of each side together" in html
    summary = html[html.index('id="summary-ab"') :]
    total = str(_requests(a))
    assert f"<td>{total}</td>" in summary  # the whole side, not block-0's requests


def test_plain_runs_have_no_block_table(tmp_path: Path) -> None:
    a, b = write_run(tmp_path / "a"), write_run(tmp_path / "b")
    html = write_compare_report(compare_runs(a, b), tmp_path / "compare.html").read_text()
    assert 'id="blocks"' not in html
    assert json.loads((a / "run.json").read_text())["exit_code"] == 0
