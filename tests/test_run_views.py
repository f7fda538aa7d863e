"""report.run_views and the report's number formatting: the headline's reason, idle gaps,
the fingerprint in groups."""

from __future__ import annotations

import pytest

from tests.builders import write_run
from tests.report_runs import agent_run
from workload.analyze.rundata import load_run
from workload.report.run_views import (
    arrivals_line,
    exit_reason,
    fingerprint_groups,
    goodput_line,
    headline,
    health_warning,
    idle_gap_table,
    idle_gaps,
    max_error_ratio,
    slo_status,
    slo_text,
    stage_rows,
    stop_line,
    tool_failure_examples,
    tool_rows,
)
from workload.report.views import fmt_count, fmt_value, run_summary


def _slo(passed: bool, observed: float = 0.154, **kw) -> dict:
    d = {"class_name": "*", "metric": "tool_loop_failure_ratio", "threshold": 0.05,
         "observed": observed, "passed": passed, "unit": "ratio", "bound": "<=", "skipped": False}  # fmt: skip
    d.update(kw)
    return d


def _summary(err: float | None) -> dict:
    return {"overall": {"error_ratio": err}}


def test_exit_reason_error_ratio_beats_slos():
    run = {"exit_code": 1, "profile": {"max_error_ratio": 0.05}, "slo_results": [_slo(False)]}
    assert exit_reason(run, _summary(0.16923)) == (1, "error ratio 16.9 % > 5.0 %")


def test_exit_reason_names_the_failed_slo():
    run = {"exit_code": 3, "slo_results": [_slo(True, 0.01), _slo(False), _slo(False, metric="x")]}
    code, why = exit_reason(run, _summary(0.0))
    assert code == 3
    assert why == "SLO failed: overall tool_loop_failure_ratio 15.4 % > 5.0 % (+1 more)"


def test_exit_reason_pass_and_unknown_codes():
    assert exit_reason({"exit_code": 0, "slo_results": [_slo(True, 0.01)]}, _summary(0.01)) == (
        0,
        "error ratio 1.0 % ≤ 5.0 %, 1 SLO met",
    )
    assert exit_reason({"exit_code": 130}, _summary(None)) == (130, "interrupted (SIGINT)")
    assert exit_reason({}, _summary(None)) == (None, "exit code not recorded")
    # no exit code recorded (an old run.json): the reason is still computed
    assert exit_reason({}, _summary(0.2))[1] == "error ratio 20.0 % > 5.0 %"


def test_max_error_ratio_flag_beats_profile():
    run = {
        "argv": ["agentload", "run", "--max-error-ratio", "0.2"],
        "profile": {"max_error_ratio": 0.01},
    }
    assert max_error_ratio(run) == 0.2
    assert max_error_ratio({"argv": ["--max-error-ratio=0.3"]}) == 0.3
    assert max_error_ratio({"profile": {"max_error_ratio": 0.01}}) == 0.01
    assert max_error_ratio({}) == 0.05


@pytest.mark.parametrize(
    ("value", "unit", "text"),
    [
        (0.15384615384615385, "ratio", "15.4 %"),
        (16860.0, "", "16,860"),
        (1234.5, "ms", "1,234 ms"),
        (42.25, "ms", "42.2 ms"),
        (3.21, "per_min", "3.2 /min"),
        (2.0987, "", "2.1"),
        (None, "ms", "-"),
        (float("nan"), "", "-"),
    ],
)
def test_fmt_value_for_people(value, unit, text):
    assert fmt_value(value, unit) == text


def test_fmt_count():
    assert fmt_count(16860) == "16,860"
    assert fmt_count(1.686e4) == "16,860"
    assert fmt_count(None) == "-"
    assert fmt_count(True) == "-"


def test_idle_gaps_per_session_from_previous_end():
    rows = [
        {"session_id": "a", "step": 2, "t_start": 110.0, "e2e_ms": 500.0},
        {"session_id": "a", "step": 1, "t_start": 100.0, "e2e_ms": 2000.0},  # ends at 102
        {"session_id": "b", "step": 1, "t_start": 101.0, "e2e_ms": None},  # error: ends at start
        {"session_id": "b", "step": 2, "t_start": 131.0, "e2e_ms": 100.0},
        {"session_id": "a", "step": 3, "t_start": 110.4, "e2e_ms": 100.0},  # overlaps: gap 0
        {"session_id": "", "step": 1, "t_start": 1.0},  # no session: ignored
    ]
    gaps = sorted((round(g, 6), r["session_id"], r["step"]) for g, r in idle_gaps(rows))
    assert gaps == [(0.0, "a", 3), (8.0, "a", 2), (30.0, "b", 2)]


def test_idle_gap_table_buckets_cached_ratio_and_ttft():
    rows = []
    for i, gap in enumerate((0.5, 2.0, 45.0, 45.0)):
        sid = f"s{i}"
        rows.append({"session_id": sid, "step": 1, "t_start": 100.0, "e2e_ms": 1000.0})
        rows.append({"session_id": sid, "step": 2, "t_start": 101.0 + gap, "e2e_ms": 100.0,
                     "status": "ok", "ttft_ms": 100.0 * (i + 1), "prompt_tokens": 1000,
                     "cached_tokens": 900 if gap < 30 else 100})  # fmt: skip
    table = idle_gap_table(rows)
    assert [t["bucket"] for t in table] == ["0–1 s", "1–5 s", "30–60 s"]
    assert table[0]["cached_ratio"] == pytest.approx(0.9)
    assert table[2]["requests"] == 2 and table[2]["cached_ratio"] == pytest.approx(0.1)
    assert table[2]["ttft_p50_ms"] == 300.0 and table[2]["ttft_p95_ms"] == 400.0


def test_fingerprint_groups_fold_unknown_fields():
    run = {
        "fingerprint": {
            "server_version": {"value": "0.11.0", "source": "/version"},
            "model_id": {"value": "m", "source": "/v1/models"},
            "model_runner": {"value": "v2", "source": "server log"},
            "kv_block_size": {"value": 16, "source": "/metrics"},
            "cache_config": {
                "value": {"block_size": "16", "cache_dtype": "auto"},
                "source": "/metrics",
            },
            "tensor_parallel_size": {"value": "unknown", "source": None},
            "mamba_cache_mode": {"value": "unknown", "source": None},
            "label.team": {"value": "infra", "source": "operator label"},
            "weird": {"value": 1, "source": None},
            "_probes": {"x": 1},
        },
        "labels": {"team": "infra", "env": "ci"},
    }
    groups = {g["name"]: g for g in fingerprint_groups(run)}
    assert list(groups) == ["server", "KV cache", "runner", "parallelism", "labels", "other"]
    assert [r[0] for r in groups["server"]["rows"]] == ["model_id", "server_version"]
    assert [r[0] for r in groups["runner"]["rows"]] == ["model_runner"]
    assert "cache_config.block_size" in [r[0] for r in groups["KV cache"]["rows"]]
    assert groups["KV cache"]["unknown"] == ["mamba_cache_mode"]
    assert groups["parallelism"]["rows"] == [] and groups["parallelism"]["unknown"] == [
        "tensor_parallel_size"
    ]
    assert sorted(r[0] for r in groups["labels"]["rows"]) == ["env", "team"]
    assert groups["other"]["rows"] == [("weird", "1", "")]


def test_headline_and_tool_tables_of_an_agent_run(tmp_path):
    data = load_run(agent_run(tmp_path / "r"))
    summary = run_summary(data)
    h = headline(data, summary)
    assert not h["ok"] and h["code"] == "1" and h["reason"].startswith("error ratio ")
    assert h["slo_violated"] == 1 and h["slo_met"] == 1 and h["slo_not_judged"] == 0
    assert int(h["tool_calls_planned"]) > 0 and h["tool_calls_returned"] == "0"
    assert h["sessions_tool_loop"] == h["tool_loop_failures"] != "0"
    assert any(
        o == "tool_loop_failure" and r == "malformed tool call" for o, r, _ in h["session_reasons"]
    )
    rows = tool_rows(summary)
    assert rows and all(len(r) == 6 for r in rows)
    ex = tool_failure_examples(data.requests, n=3)
    assert len(ex) == 3 and ex[0][2] == "read_file" and ex[0][4].startswith("malformed tool call")


def test_headline_of_a_healthy_run_passes(tmp_path):
    data = load_run(write_run(tmp_path / "ok"))
    h = headline(data, run_summary(data))
    assert h["ok"] and h["code"] == "0" and h["tool_loop_failures"] == "0" and h["warn"] == ""


def test_headline_warns_when_exit_0_hides_failed_sessions(tmp_path):
    data = load_run(write_run(tmp_path / "tl", tool_loop_failures=0.5))
    h = headline(data, run_summary(data))
    assert h["ok"] and h["warn"].endswith("sessions did not complete")


def test_tool_failure_examples_show_the_malformed_arguments():
    rows = [{"request_id": "r1", "user_class": "agent", "step": 1, "t_start": 1.0, "planned_tool": "grep",
             "tool_loop_failure": "malformed tool call",
             "tool_calls": [{"name": "grep", "arguments": '{"q": "x', "arguments_valid": False}]},
            {"request_id": "r0", "user_class": "agent", "step": 1, "t_start": 2.0, "status": "ok"}]  # fmt: skip
    (ex,) = tool_failure_examples(rows)
    assert ex == ["r1", "agent #1", "grep", "grep", 'malformed tool call; arguments: \'{"q": "x\'']


def test_slo_status_keeps_not_judged_apart_from_met_and_violated():
    assert slo_status({"status": "not judged", "passed": True, "skipped": True}) == "not judged"
    assert slo_status({"judged": False, "passed": True}) == "not judged"
    assert slo_status({"passed": True}) == "met"
    assert slo_status({"passed": False}) == "violated"
    assert slo_status({"passed": False, "skipped": True}) == "skipped"  # an old run.json
    unjudged = {
        "class_name": "bg",
        "metric": "e2e_p95_ms",
        "observed": None,
        "status": "not judged",
    }
    assert slo_text(unjudged) == "bg e2e_p95_ms: no samples, not judged"
    required = dict(unjudged, status="violated", passed=False)
    assert slo_text(required) == "bg e2e_p95_ms: no samples (required)"


def test_exit_reason_uses_what_the_run_recorded():
    run = {"exit_code": 130, "exit_reason": "interrupted (SIGINT)"}
    assert exit_reason(run, {"overall": {"error_ratio": 0.0}}) == (130, "interrupted (SIGINT)")
    # "ok" says nothing: exit 0 still spells out the error ratio and the SLOs met / not judged
    run = {"exit_code": 0, "exit_reason": "ok", "slo_results": [
        _slo(True, 0.01), {"class_name": "bg", "metric": "e2e_p95_ms", "observed": None,
                           "status": "not judged", "passed": True, "skipped": True}]}  # fmt: skip
    code, why = exit_reason(run, {"overall": {"error_ratio": 0.0}})
    assert why == "error ratio 0.0 % ≤ 5.0 %, 1 SLO met, 1 not judged (no samples)"


def test_goodput_line_reads_both_ratios_and_the_rate():
    summary = {"overall": {"request_goodput_ratio": 0.931,
                           "sessions": {"goodput_ratio": 0.8, "goodput_per_min": 12.44}}}  # fmt: skip
    assert goodput_line(summary) == (
        "93.1 % of requests, 80.0 % of sessions met every SLO (12.4 good sessions/min)"
    )
    assert "no SLOs set" in goodput_line(summary, has_slos=False)
    assert goodput_line({"overall": {}}) == ""  # an old run without goodput


def test_stop_line_says_interrupted_and_which_worker_was_lost():
    assert stop_line({"stopped_by": "end of run"}) == ""
    assert stop_line({"stopped_by": "SIGINT"}) == "interrupted (SIGINT)"
    lost = {"stopped_by": "end of run", "partial": True,
            "lost_workers": [{"worker": 1, "t_s": 12.34}]}  # fmt: skip
    assert stop_line(lost) == "partial: worker 1 lost at 12.3 s; later load is missing"
    assert stop_line({"partial": True, "partial_reason": "why"}) == "partial: why"


def test_arrivals_line_is_loud_when_the_generator_fell_behind():
    a = {"scheduled": 40, "started": 38, "dropped": 2, "delayed": 5, "tolerance_s": 0.25,
         "p50_s": 0.002, "p99_s": 1.5, "max_s": 2.25, "fell_behind": False}  # fmt: skip
    line = arrivals_line(a)
    assert line.startswith("40 sessions due, 38 started, 2 dropped, 5 started late (> 250 ms)")
    assert "p50 2 ms · p99 1.5 s · max 2.2 s" in line
    assert arrivals_line(dict(a, fell_behind=True)).startswith("THE LOAD GENERATOR FELL BEHIND")
    assert arrivals_line(None) == ""


def test_stage_rows_from_the_summary_or_run_json():
    st = [{"index": 0, "start_s": 0, "end_s": 6, "ramp_s": 0, "arrival_rate": 1.0, "requests": 28,
           "errors": 0, "ttft_p95_ms": 30.1, "tpot_p95_ms": 6.8, "goodput_ratio": 1.0,
           "goodput_per_s": 4.667, "lateness": {"p99_s": 0.056}},
          {"index": 1, "start_s": 6, "end_s": 14, "ramp_s": 2, "users": 8, "requests": 1200,
           "errors": 3, "ttft_p95_ms": 330.0, "tpot_p95_ms": None, "goodput_ratio": 0.5,
           "goodput_per_s": 1.0, "lateness": None}]  # fmt: skip
    rows = stage_rows({"stages": st}, {})
    assert rows[0] == ["0", "0–6 s", "1 /s", "28", "0", "30.1", "6.8", "100.0 %", "4.67", "56 ms"]
    assert rows[1][2] == "8 users (ramp 2 s)" and rows[1][3] == "1,200" and rows[1][-1] == "-"
    assert stage_rows({}, {"stages": {"stages": st}}) == rows
    assert stage_rows({}, {}) == []


def test_headline_shows_skipped_lines_stop_and_goodput(tmp_path):
    import json

    run = write_run(tmp_path / "r")
    with (run / "requests.jsonl").open("a") as f:
        f.write("{not json\n")
    meta = json.loads((run / "run.json").read_text())
    meta.update(
        exit_code=130, exit_reason="interrupted (SIGINT)", stopped_by="SIGINT", duration_s=14.6
    )
    (run / "run.json").write_text(json.dumps(meta))
    data = load_run(run)
    h = headline(data, run_summary(data))
    assert h["code"] == "130" and h["verdict"] == "Interrupted" and not h["ok"]
    assert h["stopped"].startswith("interrupted (SIGINT) after 14.6 s") and h["reason"] == ""
    assert h["warnings"] and "corrupt JSONL line" in h["warnings"][0]


def test_tool_failure_examples_read_the_message_out_of_a_json_error_body():
    rows = [{"request_id": "r1", "user_class": "agent", "step": 2, "t_start": 1.0,
             "planned_tool": "read_file", "tool_loop_failure": "http_status on a tool step",
             "error_detail": 'HTTP 500: {"error":{"message":"injected fault: HTTP 500",'
                             '"type":"InternalServerError","code":500}}'}]  # fmt: skip
    (row,) = tool_failure_examples(rows)
    assert row[4] == "http_status on a tool step (HTTP 500: injected fault: HTTP 500)"


def test_headline_warns_when_the_generator_fell_behind(tmp_path):
    data = load_run(write_run(tmp_path / "ol"))
    summary = dict(run_summary(data), arrivals={"scheduled": 4, "started": 4, "dropped": 0,
                                                "delayed": 1, "fell_behind": True})  # fmt: skip
    h = headline(data, summary)
    assert h["ok"] and h["warn"] == "the load generator fell behind its schedule"
    assert h["arrivals_loud"] and h["arrivals"].startswith("THE LOAD GENERATOR FELL BEHIND")


def test_health_warning_only_when_the_generator_crossed_its_thresholds():
    gh = {"cpu_max": 0.97, "cpu_mean": 0.8, "cpu_threshold": 0.9, "loop_lag_ms_max": 120.0,
          "loop_lag_threshold_ms": 100.0, "crossed": True}  # fmt: skip
    assert health_warning({"generator_health": gh}) == (
        "the load generator was busy (CPU max 97.0 % of a core, mean 80.0 %; event-loop lag "
        "max 120 ms): timings may be bent; add --workers"
    )
    assert health_warning({"generator_health": dict(gh, crossed=False)}) == ""
    assert health_warning({}) == ""


def test_headline_tool_calls_in_the_words_of_the_history_mode(tmp_path):
    """Scripted history (the default): the calls were played, the server never asked (item 2
    of issue 30); `history: actual` keeps "returned by the server"."""
    import json

    run = agent_run(tmp_path / "r")
    h = headline(load_run(run), run_summary(load_run(run)))
    assert h["tool_calls_text"].endswith("returned by the server")
    meta = json.loads((run / "run.json").read_text())
    meta["profile"]["history"] = "scripted"
    (run / "run.json").write_text(json.dumps(meta))
    h = headline(load_run(run), run_summary(load_run(run)))
    assert "played from the profile" in h["tool_calls_text"]
    assert "returned by the server" not in h["tool_calls_text"]
    assert "history: actual" in h["tool_calls_text"]


def test_headline_lateness_note_is_yellow_not_the_red_banner(tmp_path):
    """A few late starts on too few sessions: a note in the headline (item 4 of issue 30)."""
    data = load_run(write_run(tmp_path / "ol"))
    note = {"scheduled": 10, "started": 10, "dropped": 0, "delayed": 1, "fell_behind": False,
            "lateness_verdict": "note", "lateness_why": "1 of 10 (10 %) sessions due started "
            "more than 250ms late (max 261ms): too few to say"}  # fmt: skip
    h = headline(data, dict(run_summary(data), arrivals=note))
    assert h["ok"] and h["warn"] == "" and not h["arrivals_loud"]
    assert h["arrivals_note"].startswith("1 of 10 (10 %) sessions due started more than 250ms")
    assert "add --workers" in h["arrivals_note"]


def test_a_not_judged_slo_in_the_report_says_what_the_run_lacked():
    r = {"class_name": "coding-agent", "metric": "session_success_ratio", "observed": None,
         "threshold": 0.95, "passed": True, "judged": False, "status": "not judged",
         "message": "coding-agent: session_success_ratio not judged (no samples): no "
                    "coding-agent session finished in this 20s run; ... --duration 5m or more"}  # fmt: skip
    assert slo_text(r) == (
        "coding-agent session_success_ratio: no samples, not judged — no coding-agent session "
        "finished in this 20s run; ... --duration 5m or more"
    )
