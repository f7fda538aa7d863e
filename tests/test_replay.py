"""Trace replay (`agentload run --trace`): the trace stream (fake clock), the context check,
one-step sessions, the spec options and the replay report."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest

from workload.errors import SetupError, UsageError
from workload.locust.open_loop import Arrival, StreamDriver
from workload.measure.records import RequestRecord
from workload.plan.arrivals import ArrivalSpec
from workload.plan.load_model import Stream
from workload.plan.tokens import get_tokenizer
from workload.plan.traces import (
    BlockSynth,
    TracePrompts,
    TraceRequest,
    TraceSchedule,
    TraceSession,
    clip_request,
    fit_to_context,
)
from workload.report.run_views import trace_rows
from workload.run.replay import check_context, replay_for_process, trace_lines, trace_summary
from workload.run.spec import RunSpec, resolve_spec

from .test_open_loop import FakeClock

FIXTURES = Path(__file__).parent / "fixtures" / "traces"
MOONCAKE = str(FIXTURES / "mooncake_conversation_head40.jsonl")
AZURE = str(FIXTURES / "azure2023_conv_head100.csv")


def trace_driver(offsets, *, worker=0, n=1, cap=None, until=None, clock=None):
    clock = clock or FakeClock()
    started: list[tuple[Arrival, float]] = []
    pending: list = []
    d = StreamDriver(
        Stream("trace", ArrivalSpec(rate_per_s=1.0, max_in_flight=cap), {"trace": 1.0}),
        seed=1,
        worker=worker,
        n_workers=n,
        t0=clock(),
        start=lambda a, done: (started.append((a, clock())), pending.append(done)),
        drop=lambda a, why: None,
        until_s=until,
        clock=clock,
        sleep=clock.sleep,
        schedule=TraceSchedule(offsets),
    )
    return d, started, pending, clock


# ---------------------------------------------------------------- the trace stream


def test_trace_stream_sends_each_request_at_its_replay_time():
    offsets = [0.0, 0.0, 0.5, 0.5, 2.0]
    d, started, _, clock = trace_driver(offsets)
    t0 = clock()
    d.run()
    assert [a.k for a, _ in started] == [0, 1, 2, 3, 4]
    assert [t - t0 for _, t in started] == pytest.approx(offsets)
    assert all(a.t_scheduled == pytest.approx(t) for a, t in started)  # lateness 0
    assert {a.stream for a, _ in started} == {"trace"} and started[0][0].class_name == "trace"


def test_trace_stream_request_k_goes_to_worker_k_mod_n():
    offsets = [0.1 * i for i in range(7)]
    got = []
    for w in range(3):
        d, started, _, _ = trace_driver(offsets, worker=w, n=3)
        d.run()
        got.append([a.k for a, _ in started])
    assert got == [[0, 3, 6], [1, 4], [2, 5]]


def test_trace_stream_at_the_cap_starts_late_and_keeps_the_schedule():
    d, started, pending, clock = trace_driver([0.0, 0.0, 1.0], cap=1)
    t0 = clock()
    d.run()
    assert [a.k for a, _ in started] == [0]  # 1 and 2 wait: the cap is 1
    clock.t += 2.0
    pending.pop(0)()  # request 0 ends at t0+3: request 1 starts 3 s late
    assert started[-1][0].k == 1 and started[-1][1] - t0 == pytest.approx(3.0)
    assert started[-1][1] - started[-1][0].t_scheduled == pytest.approx(3.0)


def test_trace_stream_stops_at_the_run_length():
    d, started, _, _ = trace_driver([0.0, 1.0, 5.0], until=2.0)
    d.run()
    assert [a.k for a, _ in started] == [0, 1]


# ---------------------------------------------------------------- max_model_len


def req(inp, out, ids=None):
    return TraceRequest(0.0, inp, out, tuple(ids) if ids is not None else None)


def test_fit_counts_too_long_requests_and_the_largest():
    reqs = [req(1000, 100), req(4000, 200), req(3900, 300)]
    kept, fit = fit_to_context(reqs, 4096, clip=False)
    assert kept == reqs and (fit.too_long, fit.largest, fit.clipped) == (2, 4200, False)
    assert "2 trace request(s) exceed the server's max_model_len 4096" in fit.message("f")
    assert "largest is 4200" in fit.message("f")
    kept, fit = fit_to_context(reqs, None, clip=False)  # unknown: nothing checked
    assert fit.too_long == 0 and fit.max_model_len is None


def test_clip_keeps_a_prefix_and_fits():
    r = req(2000, 3000, [7, 8, 9, 10])
    c = clip_request(r, 2048)
    assert c.output_tokens == 1024 and c.input_tokens == 1024
    assert c.hash_ids == (7, 8)  # the leading blocks: prefix reuse kept
    assert clip_request(req(100, 10), 2048) == req(100, 10)
    kept, fit = fit_to_context([r, req(100, 10)], 2048, clip=True)
    assert fit.clipped and all(k.input_tokens + k.output_tokens <= 2048 for k in kept)


def test_check_context_refuses_in_one_line_unless_clip():
    spec = resolve_spec({"trace": MOONCAKE, "trace_limit": "12"})
    with pytest.raises(UsageError) as e:
        check_context(spec, 32768)
    msg = str(e.value)
    assert "1 trace request(s) exceed" in msg and "largest is 87571" in msg
    assert "--trace-clip" in msg and "\n" not in msg
    assert check_context(spec.replace(trace_clip=True), 32768).clipped
    assert check_context(spec.replace(trace_limit=6), 32768).too_long == 0
    with pytest.raises(SetupError):  # inside Locust (plain `locust -f`): the same check
        replay_for_process(spec.replace(max_model_len=32768))


# ---------------------------------------------------------------- sessions and prompts


def test_trace_session_is_one_completions_request_with_block_prompt():
    tok = get_tokenizer("tiktoken:cl100k_base")
    prompts = TracePrompts(tok, seed=3)
    r = req(700, 42, [5, 6])
    s = TraceSession(9, r, model="m", prompt=lambda: prompts.prompt(9, r))
    step = s.next_step()
    assert step is not None and s.next_step() is None
    body = orjson.loads(step.body)
    assert step.path == "/v1/completions" and body["max_tokens"] == 42
    assert body["ignore_eos"] is True and body["stream"] is True
    # nothing before the blocks: the prompt is BlockSynth's, byte for byte
    assert body["prompt"] == BlockSynth(tok, seed=3).prompt([5, 6], 700)
    assert len(tok.encode(body["prompt"])) == 700
    assert step.request.session_id == "trace-9" and step.user_class == "trace"
    s.observe(RequestRecord(status="ok"))
    assert s.outcome == "completed" and s.steps_done == 1
    no_ids = prompts.prompt(3, req(300, 5))
    assert len(tok.encode(no_ids)) == 300 and no_ids != prompts.prompt(4, req(300, 5))


def test_trace_session_failure_ends_it_without_retry():
    s = TraceSession(0, req(10, 1), model="m", prompt=lambda: "x")
    s.next_step()
    s.observe(RequestRecord(status="error", error_kind="http_5xx"))
    assert s.outcome == "failed" and s.reason == "http_5xx" and s.next_step() is None


# ---------------------------------------------------------------- options


def test_trace_options_resolve_once_and_travel_as_a_path():
    spec = resolve_spec({"trace": MOONCAKE, "speedup": "10", "trace_limit": "12"})
    assert spec.trace_info.requests == 12 and spec.trace_info.format == "mooncake"
    assert spec.users == 1  # the trace is the traffic: one idle user keeps Locust up
    assert spec.duration_s == pytest.approx(spec.trace_info.span_s + 120.0)
    text = spec.to_json()
    assert len(text) < 20000 and "hash_ids" not in text  # the path travels, not the trace
    back = RunSpec.from_json(text)
    assert (back.trace, back.speedup, back.trace_limit) == (MOONCAKE, 10.0, 12)
    assert resolve_spec({"trace": MOONCAKE, "duration_s": "5s"}).duration_s == 5.0


@pytest.mark.parametrize(
    ("values", "needle"),
    [
        ({"trace_limit": "3"}, "--limit needs --trace FILE"),
        ({"trace": MOONCAKE, "speedup": "0"}, "bad --speedup"),
        ({"trace": MOONCAKE, "arrival_rate": "2"}, "drop --arrival-rate"),
        ({"trace": "/nonexistent/t.jsonl"}, "no such file"),
        ({"trace": AZURE, "trace_format": "mooncake"}, ":1:"),
    ],
)
def test_bad_trace_options_are_one_line_usage_errors(values, needle):
    if "trace_format" in values:
        values = {**values, "on_bad_line": "stop"}
    with pytest.raises(UsageError) as e:
        resolve_spec(values)
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_bad_lines_skipped_are_counted_and_named(tmp_path):
    lines = Path(MOONCAKE).read_text().splitlines()[:3]
    f = tmp_path / "t.jsonl"
    f.write_text("\n".join([lines[0], "{oops", lines[1], lines[2]]) + "\n")
    spec = resolve_spec({"trace": str(f), "trace_format": "mooncake"})
    assert spec.trace_info.bad_lines == 1 and spec.trace_info.requests == 3
    assert spec.trace_info.first_bad_line.startswith(f"{f}:2:")
    with pytest.raises(UsageError, match=rf"{f}:2:"):
        resolve_spec({"trace": str(f), "on_bad_line": "stop", "trace_format": "mooncake"})


# ---------------------------------------------------------------- the report


def test_trace_summary_sets_ideal_next_to_what_the_server_reported():
    spec = resolve_spec({"trace": MOONCAKE, "trace_limit": "4"}).replace(max_model_len=32768)
    trace = [json.loads(x) for x in Path(MOONCAKE).read_text().splitlines()[:4]]
    rows = [
        {"trace_index": k, "status": "ok", "prompt_tokens": t["input_length"],
         "cached_tokens": 512 if k else 0}
        for k, t in enumerate(trace)
    ] + [{"trace_index": None, "status": "ok", "prompt_tokens": 99}]  # fmt: skip
    fp = {"kv_capacity_tokens": {"value": 16 * 512, "source": "x"}}  # an LRU of 16 blocks
    scrape = {"counters": {"vllm:prefix_cache_hits_total": 1536.0,
                           "vllm:prefix_cache_queries_total": 23606.0}}  # fmt: skip
    arrivals = {"p50_s": 0.002, "p99_s": 0.01, "max_s": 0.02, "fell_behind": False}
    t = trace_summary(spec, rows, fingerprint=fp, scrape=scrape, arrivals=arrivals)
    assert (t["requests"], t["sent"], t["not_sent"]) == (4, 4, 0)
    total = sum(x["input_length"] for x in trace)
    assert t["server"]["prompt_tokens"] == total and t["server"]["cached_tokens"] == 1536
    assert t["server"]["cached_ratio"] == pytest.approx(1536 / total)
    assert t["server"]["metrics_hit_ratio"] == pytest.approx(1536 / 23606)
    ideal = t["ideal_hit_ratio"]
    assert ideal["infinite_tokens"] == pytest.approx(3 * 512 / total)  # block 0, 3 times
    assert ideal["lru_capacity_blocks"] == 16 and ideal["lru_tokens"] <= ideal["infinite_tokens"]
    assert t["send_lateness"]["p99_s"] == 0.01
    lines = trace_lines(t)
    assert lines[0].startswith("trace replay: 4 of 4 requests sent (mooncake")
    assert "ideal 6.5 % (infinite cache)" in lines[1] and "server cached_tokens 6.5 %" in lines[1]
    html = dict(trace_rows({"summary": {"trace": t}}))
    assert html["server: Σ cached / Σ prompt tokens"] == "6.5 %"
    assert trace_rows({"summary": {}}) == []


def test_trace_summary_of_a_trace_without_hash_ids_has_no_ideal():
    spec = resolve_spec({"trace": AZURE, "trace_limit": "3"})
    t = trace_summary(spec, [], fingerprint={}, scrape={}, arrivals=None)
    assert t["ideal_hit_ratio"] is None and t["sent"] == 0 and t["not_sent"] == 3
    assert "no hash ids" in trace_lines(t)[1]


def test_a_replay_is_judged_by_slo_flags_only():
    spec = resolve_spec({"trace": AZURE, "trace_limit": "3"})
    assert spec.slos() == {}  # the profile's classes do not play
    spec = resolve_spec({"trace": AZURE, "slo_overrides": ["ttft_p95_ms=900"]})
    assert spec.slos() == {"trace": {"ttft_p95_ms": 900.0}}
    with pytest.raises(UsageError):
        resolve_spec({"trace": AZURE, "slo_overrides": ["chat.ttft_p95_ms=900"]})
