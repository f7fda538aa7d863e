from tests.stats_builders import build, random_records
from workload.measure.stats import Aggregate
from workload.report.console import console_table, progress_line, step_rows, view_row


def test_console_table_lists_classes_and_overall():
    reqs, sessions = random_records(5, 60)
    text = console_table(build(reqs, sessions).summary())
    lines = text.splitlines()
    assert lines[0].startswith("class")
    for name in ("agent", "batch", "chat", "overall"):
        assert any(line.startswith(name) for line in lines)
    assert console_table(Aggregate().summary())  # empty run renders too


def test_view_rows_and_progress_line():
    reqs, sessions = random_records(6, 60)
    agg = build(reqs, sessions)
    summary = agg.summary()
    row = view_row("All", summary["overall"])
    assert row["requests"] == summary["overall"]["requests"]
    assert isinstance(row["ttft_p95"], float) and row["sessions_ok"] != ""
    labels = [label for label, _ in step_rows(summary)]
    assert labels[0] == "agent #1" and all("#" in x for x in labels)
    step_row = view_row(*step_rows(summary)[0])
    assert step_row["sessions_ok"] == ""  # step views have no sessions
    empty = view_row("x", Aggregate().summary()["overall"])
    assert empty["ttft_p50"] == "" and empty["requests"] == 0
    line = progress_line(agg, elapsed_s=12.0, users=3)
    assert line.startswith("[    12s] users 3 | reqs 60") and "TTFT p95" in line
    assert progress_line(summary, elapsed_s=1.0, users=0).startswith("[     1s]")


def test_console_table_says_tool_calls_planned_and_returned():
    from tests.stats_builders import req

    agg = Aggregate()
    agg.add_request(req(step=1, planned_tool="read_file"))
    agg.add_request(req(step=2))
    text = console_table(agg.summary(), history="actual")
    assert text.endswith("tool calls: 1 planned, 0 returned by the server; tool-loop failures: 0")
    row = view_row("All", agg.summary()["overall"])
    assert row["tool_calls_planned"] == 1 and row["tool_calls_returned"] == 0
    assert "tool calls" not in console_table(Aggregate().summary())


def test_scripted_history_says_the_tool_calls_were_played_not_asked_for():
    """Scripted history never asks the server for a tool call: "0 returned by the server"
    would read as a broken tool loop (issue 30, item 2)."""
    from tests.stats_builders import req

    agg = Aggregate()
    for step in range(1, 4):
        agg.add_request(req(step=step, planned_tool="read_file"))
    text = console_table(agg.summary())  # scripted is the profile default
    last = text.splitlines()[-1]
    assert "returned by the server" not in last
    assert last.startswith("tool calls: 3 played from the profile")
    assert "not asked" in last and "history: actual" in last
    assert "tool-loop failures" not in last  # scripted history has no tool loop to fail


def test_the_table_spells_out_its_abbreviations_once():
    """Issue 30 item 7: acc.len, sess ok/fin and goodput req/sess were never explained."""
    reqs, sessions = random_records(3, 20)
    text = console_table(build(reqs, sessions).summary())
    for word in ("sess ok/fin = sessions completed / finished",
                 "acc.len = speculative-decoding acceptance length",
                 "goodput req/sess = share of requests / sessions that met every SLO",
                 "docs/metrics.md"):  # fmt: skip
        assert text.count(word) == 1, word


def test_the_spec_decode_line_says_what_the_numbers_are():
    from workload.run.finalize import _spec_line

    def check(c, s):
        return {k: {"client": c, "server": s, "difference": s - c}
                for k in ("accepted_tokens", "draft_tokens")}  # fmt: skip

    line = _spec_line(check(4558, 4631))
    assert line.startswith("spec decode (draft tokens accepted / proposed): the requests' own")
    assert "the server counted 73 / 73 more: requests the run did not record" in line
    assert "difference" not in line
    assert "more" not in _spec_line(check(10, 10))
    assert "per-request stats look wrong" in _spec_line(check(10, 5))


def test_console_table_shows_first_visible_content_when_answers_reasoned():
    from tests.stats_builders import req

    plain = Aggregate()
    plain.add_request(req(step=1, ttft_ms=50.0, ttft_content_ms=50.0))
    assert "first visible content" not in console_table(plain.summary())
    agg = Aggregate()
    for i in range(20):  # a reasoning class (hidden reasoning first) and a plain one
        agg.add_request(req(user_class="think", step=1, ttft_ms=40.0, ttft_content_ms=900.0 + i,
                            reasoning_chunks=12))  # fmt: skip
        agg.add_request(req(user_class="chat", step=1, ttft_ms=40.0, ttft_content_ms=41.0))
    (line,) = [x for x in console_table(agg.summary()).splitlines() if "visible content" in x]
    assert "TTFT above counts hidden reasoning" in line
    assert "think p50 9" in line and "chat p50 41" in line and "overall p50" in line


def test_no_inter_token_gaps_is_said_not_printed_as_a_dash():
    """Every answer one chunk: the progress line said `ITL p95 - ms`; now it says why there
    is no figure, and the table's "-" is explained under it (as the acceptance length's)."""
    from tests.stats_builders import req

    agg = Aggregate()
    line = progress_line(agg, elapsed_s=1.0, users=2)
    assert "TTFT p95 n/a (no answer yet)" in line and "ITL p95 n/a (no answer yet)" in line
    for i in range(3):
        agg.add_request(req(session_id=f"s{i}", itl_gaps_ms=[], completion_tokens=1))
    line = progress_line(agg, elapsed_s=5.0, users=2)
    assert "ITL p95 n/a (no inter-token gaps)" in line and "- ms" not in line
    assert "TTFT p95 120 ms" in line
    text = console_table(agg.summary())
    assert "ITL p95 -: no inter-token gaps (every answer came in one chunk" in text
    assert "acc.len -: the server reported no speculative decoding" in text
    gaps = Aggregate()
    gaps.add_request(req())
    assert "ITL p95 12.0 ms" in progress_line(gaps, elapsed_s=5.0, users=2)
    assert "no inter-token gaps" not in console_table(gaps.summary())
    assert "no inter-token gaps" not in console_table(Aggregate().summary())  # nothing answered
