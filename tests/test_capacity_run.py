"""`agentload capacity`'s driver: window judging, outputs, bad input (fast, no Locust)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.stats_builders import req, sess
from workload.cli.main import main
from workload.measure.artifacts import JsonlWriter
from workload.orchestrate.capacity.driver import (
    CapacityDriver,
    judge,
    step_verdict,
    window_aggregate,
)
from workload.orchestrate.capacity.page import capacity_html
from workload.orchestrate.capacity.search import search_spec
from workload.orchestrate.capacity.text import answer_line, capacity_table

FIXTURE = str(Path(__file__).parent / "fixtures" / "capacity_kv.yaml")
SLOS = {"chat": {"ttft_p95_ms": 200.0}}


def _write_step(out: Path, ttft_ms: float, n: int = 40, t0: float = 1_000.0) -> None:
    """A step's rows: n requests 0.25 s apart; the first 8 (warm-up) are slow."""
    reqs, sessions = JsonlWriter(out / "requests.jsonl"), JsonlWriter(out / "sessions.jsonl")
    for i in range(n):
        t = t0 + 0.25 * i
        slow = i < 8
        reqs.write(
            req(
                session_id=f"s{i}", t_start=t, ttft_ms=5_000.0 if slow else ttft_ms,
                e2e_ms=300.0, itl_ms={"mean": 10.0, "p50": 10.0, "p99": 12.0}, chunks=5,
            ).to_json()
        )  # fmt: skip
        sessions.write(sess(session_id=f"s{i}", t_start=t, duration_ms=400.0).to_json())
    reqs.close()
    sessions.close()


def test_window_skips_the_warmup(tmp_path: Path) -> None:
    _write_step(tmp_path, ttft_ms=100.0)
    agg, window, cutoff = window_aggregate(tmp_path, SLOS, warmup_s=2.0)
    assert cutoff == pytest.approx(1_002.0)
    assert agg.overall.counters["requests"] == 32  # the 8 slow warm-up requests are out
    j = judge(agg, SLOS, window)
    assert j.slo_met and j.slo_values == {"chat.ttft_p95_ms": pytest.approx(100.0, rel=1e-3)}
    assert j.samples == 32
    assert j.extra["request_goodput_ratio"] == 1.0
    assert j.extra["percentiles"]["itl"]["p50"] == pytest.approx(10.0, rel=1e-3)
    # without the warm-up cut, the slow start breaks the SLO
    agg, window, _ = window_aggregate(tmp_path, SLOS, warmup_s=0.0)
    assert not judge(agg, SLOS, window).slo_met


def test_window_end_and_clearly_broken(tmp_path: Path) -> None:
    _write_step(tmp_path, ttft_ms=450.0)
    agg, window, _ = window_aggregate(tmp_path, SLOS, warmup_s=2.0, window_s=4.0)
    assert agg.overall.counters["requests"] == 16 and window <= 4.0
    j = judge(agg, SLOS, window)
    assert not j.slo_met and j.broken  # 450 ms > 2 x 200 ms
    assert j.extra["request_goodput_ratio"] == 0.0


def test_a_window_too_small_to_settle_a_p95_is_few(tmp_path: Path) -> None:
    """32 samples all under the p95 threshold cannot tell a pass from a fail (59 can)."""
    _write_step(tmp_path / "small", ttft_ms=100.0, n=40)
    agg, window, _ = window_aggregate(tmp_path / "small", SLOS, warmup_s=2.0)
    j = judge(agg, SLOS, window)
    assert j.slo_met and j.samples == 32 and j.extra["unsettled"] == ["chat.ttft_p95_ms"]
    _write_step(tmp_path / "big", ttft_ms=100.0, n=80)
    agg, window, _ = window_aggregate(tmp_path / "big", SLOS, warmup_s=2.0)
    j = judge(agg, SLOS, window)
    assert j.slo_met and j.samples == 72 and j.extra["unsettled"] == []
    # a fail far past the threshold is settled on the same 32 samples
    _write_step(tmp_path / "slow", ttft_ms=450.0, n=40)
    agg, window, _ = window_aggregate(tmp_path / "slow", SLOS, warmup_s=2.0)
    assert judge(agg, SLOS, window).extra["unsettled"] == []


def test_few_legend_says_what_few_means() -> None:
    result = {"dimension": "users", "capacity": 2, "first_failing": None,
              "stop_reason": "max_passed", "bounds": {"min": 2, "max": 2},
              "steps": [{"load": 2, "slo_met": True, "verdict": "pass", "samples": 30,
                         "too_few_samples": True, "slo_values": {}}]}  # fmt: skip
    html = capacity_html(result)
    assert "30 (few)" in html and "(few) = too few samples to tell" in html
    assert "(few) =" not in capacity_html(
        {**result, "steps": [{**result["steps"][0], "too_few_samples": False}]}
    )
    text = capacity_table(result)
    assert "30 (few)" in text
    assert text.splitlines()[-1] == (
        "(few) = too few samples to tell a quantile SLO's pass from a fail at 95 % "
        "confidence; run steps longer"
    )


def test_driver_search_writes_the_step_fields(tmp_path: Path) -> None:
    class Done:
        def __init__(self) -> None:
            self.returncode = 0

        def poll(self) -> int:
            return 0

        def wait(self) -> int:
            return 0

    def start(load: float, out: Path) -> Done:
        _write_step(out, ttft_ms=50.0 * load)  # breaks between 4 and 5 users
        return Done()

    driver = CapacityDriver(SLOS, tmp_path, 2.0, 6.0, start, log=lambda _: None)
    result = driver.search(search_spec("users", 1, 16))
    assert result["capacity"] == 4 and result["first_failing"] == 5
    step = result["steps"][0]
    assert {"load", "slo_met", "goodput", "slo_values", "out", "percentiles"} <= set(step)
    assert step["slo_values"] == {"chat.ttft_p95_ms": pytest.approx(50.0, rel=1e-3)}
    html = capacity_html(result)
    assert "Capacity: 4 users" in html and "capacity (knee)" in html
    assert "<script" not in html and "http://" not in html.replace("http://www.w3.org", "")


def _cli(capsys, *args: str) -> tuple[int, str]:
    code = main(["capacity", *args])
    return code, capsys.readouterr().err.strip()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--slo", "ttft_p95_ms=500", "--min", "8", "--max", "4"], "--min 8 is above --max 4"),
        (["--slo", "goodput_ratio=0.9"], "did you mean 'request_goodput_ratio'"),
        (["--slo", "ttft_p95_ms=500", "--factor", "1"], "factor must be"),
        (["--slo", "ttft_p95_ms=500", "--step-duration", "soon"], "bad --step-duration"),
        ([], "capacity needs at least one SLO: pass --slo or set slo in the profile"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(capsys, args, message) -> None:
    code, err = _cli(capsys, "--profile", FIXTURE, "--host", "http://127.0.0.1:9", *args)
    assert code == 2
    assert len(err.splitlines()) == 1 and err.startswith("agentload: error: ")
    assert message in err


def test_capacity_is_a_command() -> None:
    p = subprocess.run(
        [sys.executable, "-m", "workload.cli", "capacity", "--help"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert p.returncode == 0 and "--step-duration" in p.stdout and "--slo" in p.stdout
    assert "--users" not in p.stdout


def test_capacity_json_shape_is_documented(tmp_path: Path) -> None:
    # the fields the issue asks for exist in what the driver returns
    def start(load: float, out: Path):  # noqa: ANN202
        _write_step(out, ttft_ms=300.0)
        return type("P", (), {"poll": lambda s: 0, "wait": lambda s: 0})()

    d = CapacityDriver(SLOS, tmp_path, 2.0, 6.0, start, log=lambda _: None)
    result = d.search(search_spec("users", 2, 4))
    assert result["capacity"] is None and result["first_failing"] == 2
    json.dumps(result)
    assert set(result) >= {"dimension", "capacity", "first_failing", "steps"}


def test_errors_above_the_run_limit_fail_the_window(tmp_path: Path) -> None:
    _write_step(tmp_path, ttft_ms=100.0)
    w = JsonlWriter(tmp_path / "requests.jsonl")
    for i in range(8):  # load shed with 503s: the served requests stay fast
        w.write(req(session_id=f"x{i}", t_start=1_003.0 + i * 0.1, status="error",
                    error_kind="http_status", ttft_ms=None).to_json())  # fmt: skip
    w.close()
    agg, window, _ = window_aggregate(tmp_path, SLOS, warmup_s=2.0)
    assert judge(agg, SLOS, window).slo_met
    j = judge(agg, SLOS, window, max_error_ratio=0.05)
    assert not j.slo_met and j.extra["error_ratio"] == pytest.approx(8 / 40)


def test_an_slo_without_samples_makes_the_step_inconclusive(tmp_path: Path) -> None:
    # docs/capacity.md: a metric with no samples cannot pass a step. Before, the step's
    # "not judged" SLO counted as met, and a load nobody had verified became the capacity.
    _write_step(tmp_path, ttft_ms=100.0)
    (tmp_path / "sessions.jsonl").write_text("")  # no session finished inside the window
    slos = {"chat": {"ttft_p95_ms": 200.0, "session_success_ratio": 0.9}}
    agg, window, _ = window_aggregate(tmp_path, slos, warmup_s=2.0)
    j = judge(agg, slos, window)
    assert not j.slo_met
    assert j.extra["inconclusive"] == ["chat.session_success_ratio"]
    assert step_verdict(j) == "inconclusive"
    # a violated SLO next to it is a plain failure
    agg, window, _ = window_aggregate(
        tmp_path, {"chat": {**slos["chat"], "ttft_p95_ms": 50.0}}, 2.0
    )
    assert (
        step_verdict(judge(agg, {"chat": {**slos["chat"], "ttft_p95_ms": 50.0}}, window)) == "fail"
    )


def test_an_slo_of_a_class_with_no_traffic_at_this_load_is_not_applicable(tmp_path: Path) -> None:
    # 2 users of a 3:1 profile run no user of the small class: nothing there to judge.
    _write_step(tmp_path, ttft_ms=100.0)
    slos = {"chat": {"ttft_p95_ms": 200.0}, "background": {"ttft_p95_ms": 200.0}}
    agg, window, _ = window_aggregate(tmp_path, slos, warmup_s=2.0)
    j = judge(agg, slos, window)
    assert j.slo_met and step_verdict(j) == "pass"
    assert j.extra["not_applicable"] == ["background.ttft_p95_ms"] and not j.extra["inconclusive"]


def test_inconclusive_lowest_load_is_said_and_not_a_capacity() -> None:
    result = {
        "dimension": "users", "capacity": None, "first_failing": 2, "stop_reason": "min_failed",
        "bounds": {"min": 2, "max": 64},
        "steps": [{"load": 2, "slo_met": False, "verdict": "inconclusive", "samples": 30,
                   "inconclusive": ["chat.ttft_p95_ms"], "slo_values": {}}],
    }  # fmt: skip
    text = capacity_table(result)
    assert "inconclusive" in text.splitlines()[2]
    assert answer_line(result) == (
        "capacity: not found: the lowest load, 2 users, was inconclusive "
        "(chat.ttft_p95_ms had no samples in the window: lengthen --step-duration)"
    )


def test_samples_leave_out_a_class_with_no_traffic_at_this_load(tmp_path: Path) -> None:
    _write_step(tmp_path, ttft_ms=100.0)
    slos = {"chat": {"ttft_p95_ms": 200.0}, "background": {"ttft_p95_ms": 200.0}}
    agg, window, _ = window_aggregate(tmp_path, slos, warmup_s=2.0)
    assert judge(agg, slos, window).samples == 32  # chat's, not background's 0
