"""Generator health: own CPU and event-loop lag, sustained crossings, one warning line."""

from __future__ import annotations

from types import SimpleNamespace

from workload.locust.health import CPU_THRESHOLD, GeneratorHealth, warning_line


def make(**kw):
    lines: list[str] = []
    return GeneratorHealth(warn=lines.append, **kw), lines


def test_one_sample_over_is_not_a_crossing_two_in_a_row_are_and_warn_once():
    h, lines = make()
    h.record(0.95, 1.0)
    h.record(0.30, 1.0)
    assert not h.crossed and lines == []
    h.record(0.93, 1.0)
    h.record(0.97, 2.0)
    h.record(0.99, 2.0)
    assert h.crossed
    assert lines == [
        "agentload: warning: the generator used 97 % of a core; timings may be bent — add --workers"
    ]
    s = h.summary()
    assert s["cpu_max"] == 0.99 and s["crossed"] is True and s["samples"] == 5
    assert s["cpu_threshold"] == CPU_THRESHOLD and s["source"] == "process"
    assert s["cpu_mean"] == round((0.95 + 0.30 + 0.93 + 0.97 + 0.99) / 5, 3)


def test_loop_lag_alone_crosses_on_a_busy_machine():
    h, lines = make()
    h.record(0.2, 400.0)
    h.record(0.2, 900.0)
    assert h.crossed and "woke 900 ms late" in lines[0]
    assert h.summary()["loop_lag_ms_max"] == 900.0


def test_quiet_run_and_empty_summary():
    h, lines = make()
    assert h.summary()["cpu_max"] is None and h.summary()["samples"] == 0
    for _ in range(5):
        h.record(0.5, 3.0)
    assert not h.crossed and lines == []


def test_master_judges_its_busiest_worker():
    runner = SimpleNamespace(
        clients={"a": SimpleNamespace(cpu_usage=40), "b": SimpleNamespace(cpu_usage=91)}
    )
    h, _ = make(master=runner)
    assert h._cpu_now() == 0.91
    assert h.summary()["source"] == "workers"


def test_warning_line_names_the_cpu():
    assert warning_line(0.93, 0.0).startswith(
        "agentload: warning: the generator used 93 % of a core"
    )
