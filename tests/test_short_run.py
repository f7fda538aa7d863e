"""A run too short to judge an SLO says so and how long it would need (issue 30, item 7)."""

from __future__ import annotations

from workload.measure.slo import SLOResult
from workload.run.short_run import explain_unjudged, session_length_s


def _unjudged(cls: str, metric: str) -> SLOResult:
    return SLOResult(cls, metric, 0.95, None, passed=True, unit="ratio", bound=">=",
                     skipped=True, message=f"{cls}: {metric} not judged (no samples)",
                     judged=False)  # fmt: skip


def _cut_off(done: int, planned: int, s: float, cls: str = "coding-agent") -> dict:
    return {"user_class": cls, "outcome": "cancelled", "steps_done": done,
            "steps_planned": planned, "duration_ms": s * 1000}  # fmt: skip


def test_a_session_slo_says_how_long_a_session_takes_and_the_duration_to_ask_for():
    # 20 s in, sessions had done 2 of 12 and 4 of 12 steps: each takes about 1-2 minutes
    sessions = [_cut_off(2, 12, 20.0), _cut_off(4, 12, 20.0), _cut_off(1, 6, 20.0, "chat")]
    assert session_length_s(sessions[:2]) == 90.0  # median of 120 s and 60 s
    r = _unjudged("coding-agent", "session_success_ratio")
    met = SLOResult("coding-agent", "ttft_p95_ms", 3000, 1343.0, passed=True, unit="ms")
    explain_unjudged([r, met], sessions, 20.0)
    assert r.message == (
        "coding-agent: session_success_ratio not judged (no samples): no coding-agent "
        "session finished in this 20s run; the sessions cut off by its end would take about "
        "2m each: judging this needs a run of --duration 5m or more"
    )
    assert met.message == ""  # judged SLOs are left alone


def test_no_step_done_and_request_metrics_say_what_was_missing():
    r = _unjudged("coding-agent", "session_success_ratio")
    explain_unjudged([r], [_cut_off(0, 12, 5.0)], 5.0)
    assert "nor had any done a step: give the run a longer --duration" in r.message
    q = SLOResult("batch", "ttft_p95_ms", 800, None, passed=True, unit="ms", judged=False,
                  message="batch: ttft_p95_ms not judged (no samples)")  # fmt: skip
    explain_unjudged([q], [], 300.0)
    assert q.message.endswith(
        "no batch request finished in this 5m run: give the run a longer --duration (or more "
        "users for this class)"
    )


def test_the_run_length_named_is_the_one_it_ran() -> None:
    """A web UI run of 5 s under a 60 s profile said "in this 60s run"; a run stopped by a
    signal after 10 s likewise. The length named is the wall time, at most the planned one."""
    from workload.run.short_run import run_length_s

    assert run_length_s(60.0, 6.3) == 6.3
    assert run_length_s(60.0, 61.8) == 60.0  # the summary written after the planned minute
    assert run_length_s(None, 12.0) == 12.0
    r = _unjudged("chat", "ttft_p95_ms")
    explain_unjudged([r], [], run_length_s(60.0, 6.3))
    assert "no chat request finished in this 6s run" in r.message
