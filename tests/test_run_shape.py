"""Artifacts read back from disk are input: wrong-typed fields are left out and said, never a
traceback (report and compare of a hand-edited or damaged run directory)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.builders import ClassSpec, write_run
from tests.report_runs import agent_run
from workload.analyze.run_shape import checked_rows, checked_run, kind_of, row_types
from workload.analyze.table import REQ_KEYS, SESS_KEYS, Columns
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
        "run.json.slo_results[1] is an int, not an object: left out",
        "run.json.partial is a str, not bool: left out",
    ]


def test_a_count_that_is_a_boolean_is_not_a_number():
    problems: list[str] = []
    assert checked_run({"workers": True}, problems) == {} and len(problems) == 1


def test_wrong_typed_row_fields_are_left_out_in_one_line_per_file():
    rows = [{"e2e_ms": [1], "status": "ok"}, {"e2e_ms": "2", "session_id": 7}, {"e2e_ms": 3.0}]
    problems: list[str] = []
    checked_rows(rows, "requests.jsonl", problems)
    assert rows == [{"status": "ok"}, {}, {"e2e_ms": 3.0}]
    assert problems == [
        "requests.jsonl: left out 3 wrong-typed values: e2e_ms 2 (a list, not number), "
        "session_id 1 (an int, not str)"
    ]
    checked_rows([{"tool_calls": 2}], "sessions.jsonl", problems, requests=False)
    assert len(problems) == 1  # a session row's tool_calls is a count, a request row's a list


# Values of every JSON type; per field, those agentload never writes there are the fuzz.
FUZZ = ["fast", "", 3, 2.5, True, None, [1, 2], [], {"p95": 1.0}, {}]


def _fuzzed(req: bool) -> list[tuple[str, list[object]]]:
    types = row_types(req)
    keys = REQ_KEYS if req else SESS_KEYS
    return [(k, [v for v in FUZZ if type(v) not in types[k]]) for k in keys if k in types]


def _same_columns(x: Columns, y: Columns) -> None:
    assert x.cols.keys() == y.cols.keys()
    for k in x.cols:
        assert np.array_equal(x.cols[k], y.cols[k], equal_nan=x.cols[k].dtype.kind == "f"), k
    assert (x.ids, x.names, x.error_counts, x.spec_hists) == (y.ids, y.names, y.error_counts, y.spec_hists)  # fmt: skip
    assert [r.get("session_id") for r in x.loop_rows()] == [r.get("session_id") for r in y.loop_rows()]  # fmt: skip


@pytest.mark.parametrize("req", [True, False], ids=["requests", "sessions"])
def test_columns_read_a_wrong_typed_value_as_absent_and_count_it(tmp_path, req):
    """Every field the comparison reads, with every wrong type: the columns are those of the
    rows without the field, and `wrong` counts each value left out (today's columns read
    some as NaN silently, others as a value: a status 5 failed the request, a user_class 5
    was a class of its own)."""
    run = agent_run(tmp_path / "run")
    name = "requests.jsonl" if req else "sessions.jsonl"
    rows = [json.loads(line) for line in (run / name).read_text().splitlines()][:40]
    for key, bad in _fuzzed(req):
        damaged = [dict(r) for r in rows]
        absent = [dict(r) for r in rows]
        for i, v in enumerate(bad):
            damaged[3 * i][key] = v
            absent[3 * i].pop(key, None)
        for block in ([damaged], [damaged[:7], damaged[7:]]):  # one block, and two
            cols = Columns(req)
            for b in block:
                cols.add(b)
            cols.done()
            _same_columns(cols, Columns.of(absent, req))
            assert cols.wrong == {key: (len(bad), kind_of(bad[0]))}, key
        line = cols.wrong_line(name)
        assert line is not None and line.startswith(f"{name}: left out {len(bad)} wrong-typed")
        assert f"{key} {len(bad)} (" in line
    assert Columns.of(rows, req).wrong == {} and Columns.of(rows, req).wrong_line(name) is None


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


def test_compare_says_in_one_stderr_line_which_request_values_it_left_out(tmp_path, capsys):
    """`"ttft_ms": "fast"` and its like were read as missing without a word: now one warning
    line on stderr names the file, the fields and the counts; the page is written and the
    exit code is that of the same runs with those values absent."""
    classes = {"chat": ClassSpec(sessions=12, steps=3)}
    a = write_run(tmp_path / "a", classes=classes)
    b = write_run(tmp_path / "b", run_id="run-b", classes=classes, noise_seed=2)
    clean = tmp_path / "clean"
    shutil.copytree(b, clean)
    fuzz = {"ttft_ms": ["fast", [1], {"a": 1}, True], "e2e_ms": [{}], "status": [5, ["ok"]]}
    for run, drop in ((b, False), (clean, True)):
        rows = [json.loads(line) for line in (run / "requests.jsonl").read_text().splitlines()]
        for key, values in fuzz.items():
            for i, v in enumerate(values):
                if drop:
                    del rows[2 * i + 1][key]
                else:
                    rows[2 * i + 1][key] = v
        (run / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    flags = ["--n-boot", "100"]
    want = main(["compare", str(a), str(clean), *flags])
    capsys.readouterr()
    html = tmp_path / "c.html"
    assert main(["compare", str(a), str(b), "--html", str(html), *flags]) == want
    err = capsys.readouterr().err
    (line,) = err.splitlines()
    assert line.startswith("agentload: warning: ") and "Traceback" not in err
    assert "b/requests.jsonl: left out 7 wrong-typed values: " in line
    for part in ("ttft_ms 4 (a str, not number)", "e2e_ms 1 (an object, not number)",
                 "status 2 (an int, not str)"):  # fmt: skip
        assert part in line
    assert "left out 7 wrong-typed values" in html.read_text()
