"""Artifacts read back from disk are input: wrong-typed fields are left out and said, never a
traceback (report and compare of a hand-edited or damaged run directory)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.report_runs import agent_run
from workload.analyze.run_shape import checked_rows, checked_run
from workload.cli.main import main


def test_a_wrong_typed_run_json_field_is_left_out_and_named():
    problems: list[str] = []
    run = {
        "run_id": "r1",
        "summary": {"overall": {"requests": "many", "ttft_ms": {"p95": 3.0}}, "by_class": "x"},
        "slo_results": [{"metric": "ttft_p95_ms", "passed": True}, 5],
        "partial": "no",
        "custom": object,  # unknown fields pass untouched
    }
    out = checked_run(run, problems)
    assert out["summary"] == {"overall": {"ttft_ms": {"p95": 3.0}}}
    assert out["slo_results"] == [{"metric": "ttft_p95_ms", "passed": True}]
    assert "partial" not in out and out["custom"] is object and out["run_id"] == "r1"
    assert problems == [
        "run.json.summary.overall.requests is a str, not number: left out",
        "run.json.summary.by_class is a str, not an object: left out",
        "run.json.slo_results[1] is a int, not an object: left out",
        "run.json.partial is a str, not bool: left out",
    ]


def test_a_count_that_is_a_boolean_is_not_a_number():
    problems: list[str] = []
    assert checked_run({"workers": True}, problems) == {} and len(problems) == 1


def test_wrong_typed_row_fields_are_left_out_once_per_field():
    rows = [{"e2e_ms": [1], "status": "ok"}, {"e2e_ms": "2", "session_id": 7}, {"e2e_ms": 3.0}]
    problems: list[str] = []
    checked_rows(rows, "requests.jsonl", problems)
    assert rows == [{"status": "ok"}, {}, {"e2e_ms": 3.0}]
    assert problems == [
        "requests.jsonl: e2e_ms is a list, not number, in 2 rows: left out",
        "requests.jsonl: session_id is a int, not str, in 1 row: left out",
    ]


def _edit_rows(path: Path, **fields: object) -> None:
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    for r in rows[:3]:
        r.update(fields)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.mark.parametrize(
    "field",
    ["fingerprint", "summary", "spec_decode_crosscheck", "argv", "slo_results", "lost_workers"],
)
def test_report_of_a_run_json_with_a_wrong_typed_field_is_written(tmp_path, capsys, field):
    run = agent_run(tmp_path / "run")
    d = json.loads((run / "run.json").read_text())
    d[field] = 5 if field != "summary" else "x"
    (run / "run.json").write_text(json.dumps(d))
    assert main(["report", str(run)]) == 0
    assert "left out 1 wrong-typed field" in (run / "report.html").read_text()
    assert "Traceback" not in capsys.readouterr().err


def test_compare_and_report_of_wrong_typed_request_fields_give_a_verdict(tmp_path, capsys):
    a, b = agent_run(tmp_path / "a"), agent_run(tmp_path / "b")
    _edit_rows(b / "requests.jsonl", e2e_ms=[1], prompt_tokens="x", t_start="x", user_class=5)
    _edit_rows(b / "sessions.jsonl", duration_ms="x", session_id=[1])
    code = main(["compare", str(a), str(b), "--html", str(tmp_path / "c.html"), "--n-boot", "100"])
    assert code in (0, 3, 4)
    assert main(["report", str(b)]) == 0
    assert "Traceback" not in capsys.readouterr().err


def test_the_stages_finalize_writes_are_kept():
    """run.json's `stages` is the load summary's dict ({"stages": [...]}), not a list."""
    problems: list[str] = []
    stages = {"shape": "stages", "stages": [{"index": 0, "users": 2, "start_s": 0, "end_s": 5}]}
    assert checked_run({"stages": stages}, problems)["stages"] == stages and problems == []


def test_the_spec_decode_crosscheck_finalize_writes_is_no_wrong_type():
    """Every report of a run against a server with spec-decode /metrics said "left out 4
    wrong-typed fields: ...accepted_per_position.client is a list" on its first screen."""
    from workload.observe.metrics import spec_decode_crosscheck

    check = spec_decode_crosscheck(
        {"accepted_tokens": 10, "draft_tokens": 30, "accepted_per_position": [6, 3, 1]},
        {"spec_decode": {"accepted_tokens": 11, "draft_tokens": 33,
                         "accepted_per_position": [7, 3, 1]}},
    )  # fmt: skip
    problems: list[str] = []
    out = checked_run({"spec_decode_crosscheck": check}, problems)
    assert problems == [] and out["spec_decode_crosscheck"] == check
    assert checked_run({"spec_decode_crosscheck": None}, problems) and problems == []
