"""Open-loop arrivals and load stages, end to end against the embedded simulator."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.cli import CHAT_PROFILE, agentload
from workload.measure.artifacts import read_records
from workload.plan.arrivals import ArrivalSchedule, ArrivalSpec

pytestmark = pytest.mark.slow

# Sessions of the e2e chat profile take seconds on this simulator (3 steps of 5 tokens at
# ~280 ms a token): a closed loop of a few users would start well under one session a second.
SLOW_SIM = ("--sim-set", "itl_scale=40", "--sim-set", "ttft_scale=40")


def open_run(out: Path, *extra: str, duration: str = "10s"):
    return agentload(
        "run", "--profile", CHAT_PROFILE, "--duration", duration, "--seed", "4",
        "--out", str(out), *extra,
    )  # fmt: skip


def scheduled(run: Path) -> tuple[dict, list[dict]]:
    meta = json.loads((run / "run.json").read_text())
    rows = [r for r in read_records(run, "sessions") if r.get("t_scheduled") is not None]
    return meta, rows


def test_open_loop_keeps_its_rate_against_a_slow_server(tmp_path: Path) -> None:
    p = open_run(tmp_path / "r", "--arrival-rate", "4", "--arrival", "constant", *SLOW_SIM)
    assert p.returncode in (0, 3), p.stderr[-2000:]
    meta, rows = scheduled(tmp_path / "r")
    a = meta["summary"]["arrivals"]
    t0 = a["t0"]
    ks = sorted(r["arrival_index"] for r in rows)
    # Every session of the schedule up to the stop started: none skipped, none late by much.
    assert ks == list(range(len(ks))) and a["dropped"] == 0
    for r in rows:
        assert r["t_scheduled"] - t0 == pytest.approx(r["arrival_index"] / 4.0, abs=1e-4)
    assert a["p50_s"] < 0.5
    # The run lasted as long as the last session was cancelled: 4/s all along that window,
    # although each session takes seconds (a closed loop would have slowed down).
    stop = max(r["t_start"] + r["duration_ms"] / 1000.0 for r in rows)
    assert len(ks) >= 4 * (stop - t0) - 3
    assert len(ks) >= 12
    slow = [r for r in rows if r["outcome"] != "cancelled"]
    assert all(r["duration_ms"] > 1000 for r in slow)  # the server was slow indeed
    assert "open loop:" in p.stdout


def test_cap_drop_counts_and_warns_loudly(tmp_path: Path) -> None:
    p = open_run(
        tmp_path / "r", "--arrival-rate", "5", "--max-in-flight", "2", "--at-cap", "drop",
        *SLOW_SIM, duration="8s",
    )  # fmt: skip
    assert p.returncode in (0, 3), p.stderr[-2000:]
    meta, rows = scheduled(tmp_path / "r")
    a = meta["summary"]["arrivals"]
    dropped = read_records(tmp_path / "r", "dropped")
    assert a["dropped"] == len(dropped) > 0 and a["fell_behind"]
    assert a["scheduled"] == len(rows) + len(dropped)
    assert "FELL BEHIND" in p.stdout


def test_cap_queue_records_lateness(tmp_path: Path) -> None:
    p = open_run(
        tmp_path / "r", "--arrival-rate", "5", "--arrival", "constant", "--max-in-flight", "2",
        *SLOW_SIM, duration="15s",
    )  # fmt: skip
    assert p.returncode in (0, 3), p.stderr[-2000:]
    meta, rows = scheduled(tmp_path / "r")
    a = meta["summary"]["arrivals"]
    # Sessions take seconds, 2 at a time: queued ones start seconds late; the rest never do.
    assert a["delayed"] > 0 and a["max_s"] > 1.0 and a["fell_behind"]
    assert a["dropped_by_reason"].get("still queued at max_in_flight when the run ended", 0) > 0
    late = [r["t_start"] - r["t_scheduled"] for r in rows]
    assert max(late) == pytest.approx(a["max_s"], abs=1e-6)


def test_rate_stages_are_recorded_in_run_json(tmp_path: Path) -> None:
    stages = '[{"duration_s":4,"arrival_rate":2},{"duration_s":4,"arrival_rate":6,"ramp_s":1}]'
    p = agentload(
        "run", "--profile", CHAT_PROFILE, "--sim-preset", "fast", "--seed", "4",
        "--set", f"run.stages={stages}", "--out", str(tmp_path / "r"),
    )  # fmt: skip
    assert p.returncode in (0, 3), p.stderr[-2000:]
    meta, rows = scheduled(tmp_path / "r")
    st = meta["stages"]
    assert st["dimension"] == "arrival_rate" and len(st["stages"]) == 2
    s0, s1 = st["stages"]
    assert s1["t_start"] - s0["t_start"] == pytest.approx(4.0) and s0["t_start"] == st["t0"]
    assert s0["arrival_rate"] == 2 and s1["arrival_rate"] == 6
    assert s0["sessions_scheduled"] > 0 and s1["sessions_scheduled"] > s0["sessions_scheduled"]
    assert meta["summary"]["stages"][1]["requests"] > 0
    assert "stages (latencies in ms):" in p.stdout
    report = (tmp_path / "r" / "report.html").read_text()
    assert "stage boundary" in report


def test_two_workers_play_the_one_worker_schedule(tmp_path: Path) -> None:
    args = ("--arrival-rate", "3", "--sim-preset", "fast")
    p1 = open_run(tmp_path / "one", *args, "--workers", "1", duration="12s")
    p2 = open_run(tmp_path / "two", *args, "--workers", "2", duration="12s")
    assert p1.returncode in (0, 3) and p2.returncode in (0, 3), p2.stderr[-2000:]
    sides = []
    for name in ("one", "two"):
        meta, rows = scheduled(tmp_path / name)
        t0 = meta["summary"]["arrivals"]["t0"]
        sides.append(
            sorted(
                (r["arrival_index"], r["user_class"], round(r["t_scheduled"] - t0, 4)) for r in rows
            )
        )
    one, two = sides
    assert {r["worker"] for r in scheduled(tmp_path / "two")[1]} == {"0", "1"}
    n = min(len(one), len(two))
    assert n >= 10 and one[:n] == two[:n]
    expected = [
        (k, round(t, 4))
        for k, t in ArrivalSchedule(ArrivalSpec(rate_per_s=3), 4, "run").iter_worker(0, 1, 60)
    ][:n]
    assert [(k, t) for k, _, t in one[:n]] == expected
